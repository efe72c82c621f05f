//! The stated-answer policy on the free-text cases of issue 12 (SmolLM2-135M's own answers):
//! each case is checked under the default policy and, where the lenient `last_value` policy
//! (the behaviour before) judged it the other way, under that policy too.

use reinforge_verify::{verify, AnswerPolicy, Options, Status};

fn stated(gold: &str, pred: &str) -> bool {
    verify(gold, pred, &Options::default()).correct()
}

fn last_value(gold: &str, pred: &str) -> bool {
    let opts = Options {
        answer_policy: AnswerPolicy::LastValue,
        ..Options::default()
    };
    verify(gold, pred, &opts).correct()
}

#[test]
fn a_final_statement_states_the_answer() {
    for (gold, pred) in [
        ("27", "It is 27"),
        ("27", "So 3*9 = 27."),
        ("7", "3 + 4 = 7, easy."),
        (
            "14",
            "This is easy.\n\n(7 * 2) = 14\n\nIn total, you get 14.",
        ),
        ("0", "So 0 * 3 is indeed 0."),
    ] {
        assert!(stated(gold, pred), "{pred:?} states {gold}");
    }
    assert!(
        !last_value("27", "It is 27"),
        "the lenient policy missed it"
    );
    assert!(!last_value("27", "So 3*9 = 27."));
    assert!(!last_value("7", "3 + 4 = 7, easy."));
}

#[test]
fn the_stated_number_is_compared_whole() {
    let v = verify("5", "5-0 is 500.", &Options::default());
    assert_eq!(v.status, Status::Incorrect, "500 is stated, not 5");
    assert!(
        last_value("5", "5-0 is 500."),
        "the lenient policy credited it"
    );
}

#[test]
fn numbers_from_the_question_are_not_answers() {
    let pred = "7-3 is an imaginary number, since subtraction is a kind of rotation.";
    let v = verify("4", pred, &Options::default());
    assert_eq!(v.status, Status::UnparsablePred, "{}", v.reason);
    assert!(last_value("4", pred), "the lenient policy evaluated 7-3");
    let v = verify("4", "7 - 3", &Options::default());
    assert_eq!(v.status, Status::UnparsablePred, "{}", v.reason);
    assert!(!stated("4", "The answer is 7-3."));
}

#[test]
fn working_without_a_stated_answer_scores_nothing() {
    let pred = "We first look at 5 and at 7. Adding things in pairs, 2 and 3 give a \
                feeling for 5, and then we carry on with the next part of the";
    let v = verify("5", pred, &Options::default());
    assert_eq!(v.status, Status::UnparsablePred, "{}", v.reason);
    assert!(last_value("5", pred), "the lenient policy took the last 5");
}

#[test]
fn an_unreadable_anchor_does_not_fall_back() {
    // the anchored answer is 3; the later "= 2" does not replace it
    assert!(!stated("2", "The answer is 3 because 5 - 3 = 2."));
}

#[test]
fn oversized_exact_arithmetic_is_undecided_not_equal() {
    let v = verify("2^{2^{100}}", "2^{2^{100}}+1", &Options::default());
    assert!(!v.correct());
    assert!(v.undecided, "{}", v.reason);
    let v = verify("10^{-5000} + 1", "1", &Options::default());
    assert!(!v.correct() && v.undecided, "{}", v.reason);
    assert!(
        stated("2^{2^{100}}", "2^{2^{100}}"),
        "identical expressions"
    );
    assert!(!stated("2^{1000}+1", "2^{1000}"), "exact at 1001 bits");
}
