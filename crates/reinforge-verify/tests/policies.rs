//! Behaviour of the named policies and the safety rules (each assertion could fail).

use reinforge_verify::{verify, DegreePolicy, Options, PercentPolicy, Status};
use std::time::{Duration, Instant};

fn ok(g: &str, p: &str) -> bool {
    verify(g, p, &Options::default()).correct()
}

#[test]
fn numbers_fractions_and_decimals() {
    assert!(ok("\\frac{1}{2}", "0.5"));
    assert!(ok("7425000", "7,425,000"));
    assert!(ok("2\\frac{1}{4}", "9/4"));
    assert!(
        ok("\\frac{1}{3}", "0.33333"),
        "1/3 rounded to the 5 digits written"
    );
    assert!(!ok("\\frac{1}{3}", "0.3334"), "not 1/3 at 4 digits");
    assert!(
        ok("\\frac{600}{7}", "85.71"),
        "decimal tolerance scaled to the literal's digits"
    );
    assert!(ok("\\frac{600}{7}", "85.7"));
    assert!(!ok("\\frac{600}{7}", "85.8"));
    assert!(!ok("2", "3"));
    assert!(ok("\\sqrt{8}", "2\\sqrt{2}"));
    assert!(!ok("4", "4\\sqrt{2}"));
}

#[test]
fn percent_policy_is_explicit() {
    assert!(ok("62.5\\%", "\\frac{5}{8}"));
    assert!(ok("28\\%", "28"));
    let strict = Options {
        percent: PercentPolicy::Fraction,
        ..Options::default()
    };
    assert!(!verify("28\\%", "28", &strict).correct());
    assert!(verify("28\\%", "0.28", &strict).correct());
}

#[test]
fn degree_policy_is_explicit() {
    assert!(ok("\\frac{\\pi}{6}", "30^\\circ"));
    assert!(ok("45^{\\circ}", "45"));
    let rad = Options {
        degrees: DegreePolicy::Radians,
        ..Options::default()
    };
    assert!(!verify("45^{\\circ}", "45", &rad).correct());
    assert!(verify("\\frac{\\pi}{4}", "45^\\circ", &rad).correct());
    let num = Options {
        degrees: DegreePolicy::Number,
        ..Options::default()
    };
    assert!(!verify("\\frac{\\pi}{4}", "45^\\circ", &num).correct());
}

#[test]
fn units_are_dropped() {
    assert!(ok("864 \\mbox{ inches}^2", "864"));
    assert!(ok("\\frac{41}{12}", "\\dfrac{41}{12} \\text{ km}"));
}

#[test]
fn sets_tuples_intervals() {
    assert!(ok("\\{1, 2, 3\\}", "\\{3, 1, 2\\}"));
    assert!(!ok("(1, 2)", "(2, 1)"), "tuples are ordered");
    assert!(ok("[0, 1)", "0 \\le x < 1"));
    assert!(!ok("[0, 1)", "(0, 1)"));
    assert!(ok("(-\\infty, 2]", "a \\leq 2"));
    assert!(ok("1 \\pm \\sqrt{19}", "1 + \\sqrt{19}, 1 - \\sqrt{19}"));
}

#[test]
fn symbolic_forms_by_evaluation() {
    assert!(ok("\\frac{x+2}{7}", "\\frac{x}{7}+\\frac{2}{7}"));
    assert!(ok("\\tan^2(y)+1", "\\sec^2(y)"));
    assert!(!ok("x^2", "|x|^3"));
    assert!(
        !ok("|x|", "x"),
        "negative sample points separate |x| from x"
    );
    assert!(ok("f(x) = 2x", "f(t) = 2t"), "bound argument renamed");
    assert!(
        !ok("f(x)", "f(y)"),
        "free variables are not renamed under strict"
    );
}

#[test]
fn extraction_never_falls_back() {
    // intended answer unparsable: no fallback to the earlier 5
    let v = verify(
        "5",
        "We get 5. Final answer: \\boxed{\\frac{1}{}}",
        &Options::default(),
    );
    assert!(!v.correct());
    assert_eq!(v.status, Status::UnparsablePred);
    // hedging with several boxes never matches a single gold
    let v = verify("3", "\\boxed{3} or \\boxed{4}", &Options::default());
    assert!(!v.correct());
    assert!(v.reason.contains("several boxed"), "{}", v.reason);
    let v = verify("x", "", &Options::default());
    assert!(!v.correct());
}

fn within(limit_ms: u64, g: &str, p: &str) {
    let t = Instant::now();
    let _ = verify(g, p, &Options::default());
    let d = t.elapsed();
    assert!(
        d < Duration::from_millis(limit_ms),
        "took {d:?} on input of {} bytes",
        p.len()
    );
}

#[test]
fn adversarial_inputs_are_bounded() {
    let filler = "Let me think about this carefully. ".repeat(6000); // ~200 KB
    within(50, "5", &format!("{filler} so the answer is \\boxed{{5}}"));
    within(50, "5", &filler);
    within(50, "5", &format!("\\boxed{{{}}}", "(".repeat(100_000)));
    within(50, "5", &"{".repeat(200_000));
    within(
        50,
        "5",
        &format!(
            "\\boxed{{{}1{}}}",
            "\\frac{1}{".repeat(2000),
            "}".repeat(2000)
        ),
    );
    within(
        50,
        "5",
        &format!("\\boxed{{{}}}", "2^{".repeat(500) + "2" + &"}".repeat(500)),
    );
    within(50, "5", "\\boxed{9^{9^{9^{9^{9^{9}}}}}}");
    within(
        50,
        "5",
        &format!("\\boxed{{{}}}", "9999999999".repeat(100) + "!"),
    );
    within(
        50,
        "x",
        &format!(
            "\\boxed{{{}}}",
            (0..3000)
                .map(|i| format!("x_{i}"))
                .collect::<Vec<_>>()
                .join("+")
        ),
    );
    within(
        50,
        "1",
        &format!(
            "\\boxed{{{}}}",
            (0..5000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    );
    within(50, "1", &"\\boxed{1}".repeat(20_000));
    within(50, "1", &"$1$ ".repeat(40_000));
    assert!(!ok("5", "\\boxed{9^{9^{9^{9^{9^{9}}}}}}"));
}

#[test]
fn float_agreement_is_rechecked_exactly() {
    // differ by 1e-12: indistinguishable in f64 at moderate x, separated by the exact re-check
    assert!(!ok("x", "x + \\frac{1}{1000000000000}"));
    assert!(ok("(x+1)^2", "x^2 + 2x + 1"));
}

#[test]
fn text_answers() {
    assert!(ok("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}"));
    assert!(ok("Petya will receive the last token.", "Petya"));
    assert!(!ok("Petya will receive the last token.", "Vasya"));
    let no = Options {
        text_containment: false,
        ..Options::default()
    };
    assert!(!verify("Petya will receive the last token.", "Petya", &no).correct());
    assert!(ok("\\text{infinitely many}", "\\infty"));
}

#[test]
fn decimal_truncation_policy() {
    assert!(
        ok("41.494", "17 + 10\\sqrt{6}"),
        "41.4948... cut to 3 decimals"
    );
    assert!(!ok("41.496", "17 + 10\\sqrt{6}"));
    let no = Options {
        decimal_truncation: false,
        ..Options::default()
    };
    assert!(!verify("41.494", "17 + 10\\sqrt{6}", &no).correct());
}

#[test]
fn declared_parameters_may_be_renamed() {
    assert!(ok("(3x, 5x)", "(3t, 5t) \\text{ for some integer } t"));
    assert!(
        !ok("(3x, 5x)", "(3t, 5t)"),
        "undeclared free variables keep their names"
    );
}
