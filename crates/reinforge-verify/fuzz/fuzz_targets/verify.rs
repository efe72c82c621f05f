//! Fuzz target: arbitrary bytes split into (gold, pred) must never panic, and every call must
//! finish quickly (libFuzzer's -timeout flags hangs).
#![no_main]
use libfuzzer_sys::fuzz_target;
use reinforge_verify::{verify, Options, Target};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let (mode, rest) = s.split_at(s.char_indices().nth(1).map(|(i, _)| i).unwrap_or(s.len()));
    let (gold, pred) = rest.split_once('\u{1}').unwrap_or((rest, rest));
    let mut opts = Options::default();
    match mode.bytes().next().unwrap_or(0) % 5 {
        1 => opts.extraction_targets = vec![Target::Expr],
        2 => opts.float_rounding = Some(3),
        3 => opts.strict = false,
        4 => opts.extraction_targets = vec![Target::String],
        _ => {}
    }
    let v = verify(gold, pred, &opts);
    let _ = v.correct();
    let _ = verify(pred, gold, &opts);
});
