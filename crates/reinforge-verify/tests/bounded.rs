//! Bounded work (issue 50, item 2): the verifier's time on a response that states no answer
//! grows linearly with its length, and a 1 MB one takes at most 50 ms: final statements are
//! read in the last `Options::max_statement_bytes` (32 KiB) only, boxes and anchors everywhere.

use std::time::{Duration, Instant};

use reinforge_verify::{verify, Options, Status, MAX_STATEMENT_BYTES};

/// Issue 50's target for a 1 MB answerless response.
const TARGET: Duration = Duration::from_millis(50);
/// What the test asserts: the target with room for a loaded CI machine (the suite's tests run
/// in parallel beside other builds); the figure is printed against the target.
const LOADED_BOUND: Duration = Duration::from_millis(250);

/// `unit` repeated to `len` bytes (cut at a char boundary).
fn repeat_to(unit: &str, len: usize) -> String {
    let mut s = unit.repeat(len / unit.len() + 1);
    let mut cut = len;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}

/// Shapes of answerless responses: prose working with numbers, LaTeX working, and text with
/// no punctuation, bold values on one line, labelled lines.
fn shapes() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "prose",
            "We have 3 apples and then 4 more come in, so we think about the 12 pears for a while. \
             Then there are 7 boxes with 9 items each and it takes some time to count them all. ",
        ),
        (
            "latex",
            "Let $x = 3 + 4$ and \\(y^2 = 16\\), so \\[\\frac{12}{5} + \\sqrt{2}\\] is what we \
             look at, with $a_1 = 0.25$, 7 + 3, and 8 - 2 left to do. ",
        ),
        ("no_punctuation", "so it is the value of 3 and 4 which is then the sum we want so "),
        ("bold", "the value **12** and `7` then __5__ is "),
        ("lines", "Consider the cases:\n7\nand then more:\n"),
        ("anchors", "a result of answer of 12 equals "),
    ]
}

fn time_verify(pred: &str) -> Duration {
    let opts = Options::default();
    let t = Instant::now();
    let v = verify("42", pred, &opts);
    let d = t.elapsed();
    assert!(!v.correct(), "{v:?}");
    d
}

/// Issue 50's acceptance: 100 KB and 1 MB answerless responses of each shape, the larger at
/// most 15x the time of the smaller (10x the length: linear, with room for timer noise) and
/// within [`LOADED_BOUND`] (the target is [`TARGET`]; reading the whole text for statements
/// took 62-714 ms at 1 MB).
#[test]
fn answerless_responses_take_linear_time() {
    for (name, unit) in shapes() {
        // the median of three, against a loaded machine
        let median = |len: usize| {
            let pred = repeat_to(unit, len);
            let mut t: Vec<Duration> = (0..3).map(|_| time_verify(&pred)).collect();
            t.sort();
            t[1]
        };
        let small = median(100_000);
        let large = median(1_000_000);
        let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
        let within = if large <= TARGET { "within" } else { "over" };
        eprintln!("{name}: 100 KB {small:?}, 1 MB {large:?} ({within} 50 ms), ratio {ratio:.1}");
        assert!(
            ratio <= 15.0,
            "{name}: 1 MB took {ratio:.1}x the time of 100 KB"
        );
        assert!(large <= LOADED_BOUND, "{name}: 1 MB took {large:?}");
    }
}

/// A 1 MB response (prose filler) with `end` appended.
fn long_with(end: &str) -> String {
    repeat_to(shapes()[0].1, 1_000_000) + end
}

/// The cap as documented: a final statement and a box are read in a 1 MB response, a statement
/// before the last [`MAX_STATEMENT_BYTES`] is not (and the reason says so), and
/// `max_statement_bytes = 0` reads it.
#[test]
fn long_responses_are_read_for_statements_at_their_end() {
    let opts = Options::default();
    assert_eq!(opts.max_statement_bytes, MAX_STATEMENT_BYTES);
    let v = verify("42", &long_with("So the total is 42."), &opts);
    assert_eq!(v.status, Status::Correct, "{v:?}");
    assert!(v.reason.contains("max_statement_bytes"), "{v:?}");
    let boxed = format!("We get \\boxed{{42}}. {}", long_with(""));
    assert_eq!(verify("42", &boxed, &opts).status, Status::Correct);
    // an answer computed in the head, then only working without numbers
    let head = format!("7 * 6 = 42. {}", repeat_to("and then we wait ", 1_000_000));
    let v = verify("42", &head, &opts);
    assert_eq!(v.status, Status::UnparsablePred, "{v:?}");
    assert!(v.reason.contains("last 32768 of"), "{v:?}");
    let whole = Options {
        max_statement_bytes: 0,
        ..Options::default()
    };
    let v = verify("42", &head, &whole);
    assert_eq!(v.status, Status::Correct, "{v:?}");
    assert!(!v.reason.contains("max_statement_bytes"), "{v:?}");
}
