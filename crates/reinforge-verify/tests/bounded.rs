//! Bounded work (issue 50, item 2): the verifier's time on a response that states no answer
//! grows linearly with its length.

use std::time::{Duration, Instant};

use reinforge_verify::{verify, Options};

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
/// most 15x the time of the smaller (10x the length: linear, with room for timer noise), and no
/// shape near the seconds the quadratic reading took (31.6 s at 1 MB).
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
        eprintln!("{name}: 100 KB {small:?}, 1 MB {large:?}, ratio {ratio:.1}");
        assert!(
            ratio <= 15.0,
            "{name}: 1 MB took {ratio:.1}x the time of 100 KB"
        );
        assert!(
            large < Duration::from_secs(3),
            "{name}: 1 MB took {large:?}"
        );
    }
}
