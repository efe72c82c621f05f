//! Per-token decoding time of reinforge's sampler (`reinforge_torch::generate_with`, the
//! sampler `reinforge generate`, the trainer and `reinforge serve` use) on a checkpoint, for
//! scripts/bench_decode.sh: greedy, no stop tokens, every row decodes `NEW_TOKENS` tokens.
//! Prints one JSON line: the whole call's seconds, the decoding steps' seconds (first step's
//! stamp to the last) and the mean milliseconds per decoding step of the first and of the last
//! `WINDOW` (32) steps, timed by the step hook.
//!
//! Usage: decode_bench MODEL_DIR PROMPTS_JSON NEW_TOKENS   (PROMPTS_JSON: a list of token-id
//! lists; env THREADS, default 2; HEAP: glibc | compact | reuse, default reuse)
#[path = "support/env.rs"]
mod env;
use env::env_or;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use reinforge_torch::sample::{
    generate_with, GenerateHooks, SamplingParams, StepControl, StepToken,
};
use reinforge_torch::tch::Device;
use reinforge_torch::Policy;

/// Steps averaged at each end of the run.
const WINDOW: usize = 32;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, prompts, new_tokens] = args.as_slice() else {
        bail!("usage: decode_bench MODEL_DIR PROMPTS_JSON NEW_TOKENS");
    };
    let new_tokens: usize = new_tokens.parse().context("NEW_TOKENS")?;
    let threads: i32 = env_or("THREADS", 2);
    reinforge_torch::tch::set_num_threads(threads);
    // The heap policy the reinforge binary sets at start (docs/memory.md); HEAP=glibc keeps
    // glibc's defaults, HEAP=compact the compact policy, to compare.
    use reinforge_torch::heap::{set_policy, HeapPolicy};
    match std::env::var("HEAP").as_deref() {
        Ok("glibc") => {}
        Ok("compact") => set_policy(HeapPolicy::Compact),
        _ => set_policy(HeapPolicy::Reuse),
    }
    // BF16=1: bfloat16 autocast (reinforge's `bf16 = true`), to compare.
    if std::env::var("BF16").is_ok_and(|v| v == "1") {
        reinforge_torch::precision::set_bf16(true)?;
    }
    let prompts: Vec<Vec<i64>> = serde_json::from_str(&std::fs::read_to_string(prompts)?)?;
    let policy = Policy::load(std::path::Path::new(model), Device::Cpu)?;
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: new_tokens,
        stop_tokens: vec![],
        ..Default::default()
    };
    let start = Instant::now();
    let mut stamps = Vec::with_capacity(new_tokens);
    let mut hook = |_: &[StepToken]| {
        stamps.push(Instant::now());
        StepControl::default()
    };
    let mut hooks = GenerateHooks {
        on_step: Some(&mut hook),
        ..GenerateHooks::default()
    };
    let out = generate_with(&policy.model, &prompts, &params, 0, Device::Cpu, &mut hooks);
    let seconds = start.elapsed().as_secs_f64();
    let tokens: usize = out.iter().map(|c| c.tokens.len()).sum();
    let line = serde_json::json!({
        "impl": "reinforge-sampler",
        "rows": prompts.len(),
        "new_tokens": new_tokens,
        "tokens": tokens,
        "threads": threads,
        "seconds": seconds,
        // Decoding alone: from the first step's stamp (after the prefill) to the last.
        "decode_seconds": match (stamps.first(), stamps.last()) {
            (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
            _ => 0.0,
        },
        "first_ms": window_ms(&stamps, 1),
        "last_ms": window_ms(&stamps, stamps.len().saturating_sub(WINDOW)),
    });
    println!("{line}");
    Ok(())
}

/// Mean milliseconds per step over the `WINDOW` steps ending at stamps `from..from + WINDOW`
/// (step `i` lasts from stamp `i - 1` to stamp `i`; stamp 0 follows the prefill, so the first
/// window starts at 1). `None` when the run is too short.
fn window_ms(stamps: &[Instant], from: usize) -> Option<f64> {
    let from = from.max(1);
    let end = from + WINDOW;
    if end > stamps.len() {
        return None;
    }
    let span = stamps[end - 1].duration_since(stamps[from - 1]);
    Some(span.as_secs_f64() * 1000.0 / WINDOW as f64)
}
