//! The stated-answer rules of issue 27 (item 1) through `verify`: an answer stated before a
//! last sentence that states nothing (restated, rambling, cut off), "the answer is X" in the
//! middle, answers in bold, boxed or code, several candidates where the last is final; and the
//! exploits that stay refused. Each credited case also fails with a wrong gold, so the verdict
//! comes from the stated value, not from any number in the text.

use reinforge_verify::{verify, Options};

fn credited(gold: &str, pred: &str) -> bool {
    verify(gold, pred, &Options::default()).correct()
}

/// `pred` states `gold` (and so is not credited for `gold + 1`).
fn states(gold: &str, pred: &str) {
    assert!(credited(gold, pred), "{pred:?} states {gold}");
    let other = (gold.parse::<i64>().unwrap() + 1).to_string();
    assert!(!credited(&other, pred), "{pred:?} does not state {other}");
}

#[test]
fn a_stated_answer_followed_by_rambling_or_a_cut_off_counts() {
    states("10", "Well, here it is. 7 + 3 equals 10. I understand this expression perfectly. Other numbers can be hard, so 7 + 3 indeed equals");
    states("11", "To add 8 and 3: 8 + 3 = 11.\n\nIn programming, simply add the numbers and return the result, which");
    states(
        "9",
        "SmolLAD: 9 + 0 = 9\n\nThis is a common convention in mathematics for adding",
    );
    states("12", "We start by adding them: 9 + 3 = 12. There is no 'plus' symbol here (it's just 12), we round up.\n\nSo, 12 +");
    states("2", "The original equation is 6 - 4 = (6 - 4) = 2, since when you can't finish, you are still correct. However, when you see 2, your intent");
    states("7", "In other words, 6 + 1 indeed equals 7. It's just one of those things: a repeated operation. So, ");
}

#[test]
fn word_operators_and_restated_values_count() {
    states(
        "1",
        "If you take it slowly, 8 minus 7 equals 1. Then the rest of the",
    );
    states(
        "3",
        "In this case, 6 divided by 2 results in 3, and 2 is the denominator. Then we",
    );
    states("11", "To calculate 9 + 2, simply add 9 and 2, which is 11.\n\nCoincidence math does what it is supposed to do. If you want to");
    states(
        "40",
        "So, 5 * 8 equals 40 which is 5 squared five. And then we",
    );
}

#[test]
fn the_answer_is_in_the_middle_counts() {
    states(
        "12",
        "The answer is 12. Other sums are harder and need more work, as in the",
    );
    states("58", "The final answer is \"58.\"");
}

#[test]
fn bold_boxed_and_code_answers_count() {
    states("16", "Solve 8 * 2 results in **16**");
    states(
        "16",
        "Here is the product:\n**16**\nMultiplying is repeated adding, and",
    );
    states("21", "The result is `21`, which we can check by");
    states(
        "27",
        "We multiply 3 by 9, which gives \\boxed{27}. Then we go on to",
    );
}

#[test]
fn the_last_of_several_candidates_is_final() {
    states(
        "7",
        "3 + 4 = 8. No wait, let me redo it: 3 + 4 = 7. Then the",
    );
    states("8", "First 3 + 4 = 7, then 7 + 1 = 8. And that is how we");
    assert!(!credited(
        "7",
        "First 3 + 4 = 7, then 7 + 1 = 8. And that is how we"
    ));
}

#[test]
fn numbers_repeated_from_the_question_are_refused() {
    for (gold, pred) in [
        ("5", "1 is 5."),
        ("1", "1 = 1\n\n1 vs anything is infinite"),
        ("4", "So 7 - 3 = 7 - 3. Then we go on to"),
        ("4", "The answer is (7 - 3), as we can see from the"),
        ("7", "Add 3 and 4 to the pile, then count the"),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
}

#[test]
fn unstated_arithmetic_is_refused() {
    for (gold, pred) in [
        ("15", "The final answer: 5 * 3."),
        ("72", "You can give the result by pressing **8*9**. Then"),
        ("4", "We look at 2 + 2 and then at the other numbers, which"),
        ("12", "8 + 4 equals"),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
}

#[test]
fn hedged_negated_and_retracted_answers_are_refused() {
    for (gold, pred) in [
        ("5", "So 2 + 3 = 5 or 6. Then we"),
        ("6", "So 2 + 3 = 5 or 6. Then we"),
        ("6", "So 3 + 3 is about 6. Then we"),
        ("8", "2 * 4 = 8 is not right. Then we"),
        ("24", "6 * 4 equals 24. Since we don't want decimals, we discard this incorrect answer."),
        ("3", "Performing the subtraction, 3 - 0 yields 3. By itself, it also equals one. It's as if"),
        ("2", "4 is equal to 6. So, 6 - 4 equals 2, which is 2. So, 4. \n\nFor example,"),
        ("12", "Let's compute: 3 * 4 = 12. Now 3 * 4 equals 20 in this context with 3 of them"),
        ("15", "To add 3 and 5, since 3 * 5 equals 15, results in 1 reinforced 5."),
        ("9", "To calculate 1 + 8, add 0 for the first part (`1`), and then affirming `09`. While you"),
        ("4", "1 is indeed not equal to 4."),
        ("4", "So 2 + 2 isn't 4."),
        ("1", "If 8 minus 7 equals 1, 1 + 3 is more than that. What would"),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
}

#[test]
fn values_on_their_own_line_count() {
    // a bare value under a line that ends in ':'
    states(
        "0",
        "(-5) does the same thing as 7 - 7 in several ways:\n\n0\n\n* it simply shifts down 7 units to 4",
    );
    // a first line that is only a value with a unit word
    states("8", "8in.\nI found it exactly - as is.");
    // the last item of a numbered list is a label, not the answer
    states(
        "15",
        "1. Well, 5 * 3 = 15. So, the answer remains 15.\n2. There are no conversions here.\n3.",
    );
}

#[test]
fn statements_about_the_result_count() {
    states("9", "To find 9 divided by 1, we divide. Checking on 9, we simply determine that it is indeed 9. Now that we have the answer and 9, it lies entirely within the");
    states("24", "The answer to this mathematical equation is 24. However, in mathematical honesty, this statement requires");
    states(
        "17",
        "The calculation of 8 + 9 produces the surprising answer of 17, which is consistent with the given arithmetic.",
    );
    states(
        "63",
        "You can plug in the value into the equation of 7 * 9 which results in a result of 63.",
    );
    states("12", "Add 3 to 9, which then results in 12.");
}

#[test]
fn glued_operators_and_parentheses_count() {
    states(
        "20",
        "numbers\n4x5 = 20\nsquared by integers\nburn\n\nlimiter",
    );
    states(
        "11",
        "To add 8 + 3, we simply add them together (8 + 3 = 11).",
    );
    states(
        "48",
        "To solve this, we need the product:\n\n8*6 = 48. Now the result of this multiplication is the previous result. \n\n8*",
    );
}

#[test]
fn a_relative_clause_about_another_quantity_does_not_replace_the_answer() {
    states(
        "40",
        "5 x 8 = 40\n\nRewrite the result as 40 to \"round down to the nearest whole number, which is 10.\"",
    );
}

#[test]
fn descriptions_terms_and_false_results_are_refused() {
    for (gold, pred) in [
        // a value of no computation on its left
        ("7", "First, I'll add -7 to 6. I add plus 3 and 7, which is 7"),
        ("7", "So 3 + 7 = 7. Then we"),
        // a description after the anchor, with the number inside arithmetic in words
        ("1", "The final answer is the infinite decimal 1 plus itself. This is the definition."),
        // an algebraic term is not a value with a unit
        ("3", "In this case, 6 divided by 2 results in 3, and 2 is the denominator. So, the result is 3x."),
        // a named result that is negated, or followed by more arithmetic
        ("17", "8 + 9 is not the answer of 17, so we go on to"),
        ("42", "The result of 42 and 18 in arithmetic is unclear, so"),
        // a pronoun that adds a property, not the result
        ("1", "3 * 4 = 12. By itself, it also equals one. And"),
        // a value alone on a line with no introduction, and a list number
        ("2", "We count the apples\n2\nand then the pears"),
        ("3", "Steps:\n1. add them\n2. check\n3."),
        // a hedged or negated statement about the result
        ("9", "The answer to this question is 9 or 10, so we"),
        ("9", "it is not 9. Then we"),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
    // "multiply 3 and 4, which is 12": an 'and' may name any operation
    states("12", "Multiply 3 and 4, which is 12.");
}

// The rules below were added after the blind run on smollm2-blind3.jsonl (NOT blind: written
// while reading that run's misses and false positives; docs/verifier.md).

#[test]
fn counts_in_words_count() {
    states(
        "2",
        "The letter \"d\" appears twice in the text \"cannot quite understand\".",
    );
    states("1", "The letter \"y\" is rare. It occurs only once in the text. Although it is spelled differently across languages, it is");
    states("1", "1. After the last phrase, trim it.\n2. \"N\" occurs exactly once.\n3. Because it is defined by the letter");
    states("6", "The letter \"s\" appears 6 times in the given text.");
}

#[test]
fn named_quantities_and_calculated_values_count() {
    states("1", "The GCD is 1. I apologize for any confusion earlier.");
    states("2", "The given numbers are 28 and 22.\nThus, their greatest common factor is indeed 2.\n\nIn mathematical terms, it isomorphism in a");
    states("8", "A product of two numbers. 2 * 4 is calculated as 8.");
    states("4", "To calculate 5 - 1, you simply add 1.\n5 – 1 = 4\nHere's a list with those addends:\n1, 2, 4, 6, 8, 9, 10, ");
    states("12", "The final answer is the sum of the negative numbers (0) of both 8 and 4. Therefore, 8 + 4 = 12.");
}

#[test]
fn labels_lists_descriptions_and_hedged_counts_are_refused() {
    for (gold, pred) in [
        // a label over the question's arithmetic
        ("28", "Solve: 7 * 4"),
        ("28", "Solve: 7 * 4."),
        // a list of values after a result
        ("15", "For example, 8 + 7 equals 15, 17, 20, 21, 22, and"),
        // a number inside the description of an operation after the anchor
        ("0", "The answer is a multiplication of 0 by any number."),
        (
            "4",
            "The final answer is the sum of the negative numbers of both 8 and 4.",
        ),
        // the anchor's own sentence still has no fallback
        ("2", "The answer is 3 because 5 - 3 = 2"),
        // hedged or several counts
        (
            "2",
            "The letter \"t\" appears twice or three times in the text.",
        ),
        ("2", "The letter \"t\" appears twice, 3 times in all."),
        ("5", "The letter \"t\" appears about 5 times."),
        ("2", "The letter appears twice or more. Then the"),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
}

// Refusals added after the blind run on smollm2-blind4.jsonl (NOT blind: written while reading
// that run's false positives; docs/verifier.md).

#[test]
fn factors_side_by_side_bracketed_arithmetic_and_list_labels_are_refused() {
    for (gold, pred) in [
        ("63", "Solve the multiplication.\n\n7 9"),
        ("63", "7 9"),
        ("16", "8 * [2]"),
        ("16", "The answer is [8] * 2."),
        (
            "1",
            "1. Absendance \n- The answer to this question remains the same no matter how",
        ),
    ] {
        assert!(!credited(gold, pred), "{pred:?} does not state {gold}");
    }
    // space-grouped digits stay one number; a first-line value with a unit still counts
    states("1000000", "1 000 000");
    states("8", "8in.\nI found it exactly - as is.");
}
