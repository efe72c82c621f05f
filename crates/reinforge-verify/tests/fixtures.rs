//! Acceptance tests over the labelled fixtures in `fixtures/data/verify`.
//!
//! Data directory: `$REINFORGE_VERIFY_DATA` or `fixtures/data/verify` relative to this
//! crate. Set `VERIFY_PRINT=1` to print every disagreement.

use reinforge_verify::{verify, AnswerPolicy, Options};
use serde_json::Value;
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    std::env::var_os("REINFORGE_VERIFY_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/data/verify")
        })
}

struct Case {
    id: String,
    gold: String,
    pred: String,
    expected: bool,
    disputed: bool,
    opts: Options,
}

fn load(name: &str) -> Vec<Case> {
    let path = data_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let opts = match v.get("options") {
                Some(o) => serde_json::from_value(o.clone()).expect("options deserialize"),
                None => Options::default(),
            };
            Case {
                id: v["id"].as_str().unwrap().to_string(),
                gold: v["gold"].as_str().unwrap().to_string(),
                pred: v["pred"].as_str().unwrap().to_string(),
                expected: v["expected"].as_bool().unwrap(),
                disputed: v
                    .get("note")
                    .and_then(|n| n.as_str())
                    .is_some_and(|n| n.starts_with("label disputed:")),
                opts,
            }
        })
        .collect()
}

fn print_on() -> bool {
    std::env::var_os("VERIFY_PRINT").is_some()
}

/// Non-disputed Math-Verify labels we knowingly disagree with, each with its justification.
/// Every entry is checked to still disagree (so the list cannot go stale silently).
const KNOWN_DISAGREEMENTS: &[(&str, &str)] = &[
    (
    "mv-test_all-test_symbols-00",
    "The gold string is `$<TAB>ext{13}$`: Python turned the `\\t` of `\\text{13}` into a TAB. This \
     verifier deliberately restores swallowed escapes (a control character directly followed by a \
     letter, see normalize::repair_escapes), which also fixes hardverify ids 131, 133, 160 and 170. \
     With the escape restored the gold is `\\text{13}` = 13, so the prediction `13` is correct; \
     the label 0 only records that Math-Verify cannot read the damaged gold.",
    ),
    (
        "mv-test_all-test_latex_notation-04",
        "The prediction `Answer \\( (9+1) \\)` is unevaluated arithmetic. Under the stated-answer \
         policy (src/stated.rs) plain arithmetic between numbers is not an answer: crediting it \
         would credit a restatement of the question (\"7-3 is ...\" for 4).",
    ),
    (
        "mv-test_all-test_math_extraction_additional_cases-08",
        "The response ends \"the minimum error ... increases by 100%.\": a change stated with \
         \"increases by\", not an equation, \"is\" or an anchor. The stated-answer policy does not \
         read it (Math-Verify takes the last number of the text).",
    ),
    (
        "mv-test_numina_cases-test_numina_cases-24",
        "The prediction `W(x)=1orW(x)=-1` glues the word \"or\" into `orW`, so it reads as prose \
         ending in the statement `= -1`; the stated-answer policy takes -1.",
    ),
];

#[test]
fn math_verify_suite_agreement() {
    let cases = load("math-verify-tests.jsonl");
    assert_eq!(cases.len(), 281);
    let mut unexplained = vec![];
    let mut agree = 0;
    for c in &cases {
        let v = verify(&c.gold, &c.pred, &c.opts);
        let ok = v.correct() == c.expected;
        if ok {
            agree += 1;
        }
        let known = KNOWN_DISAGREEMENTS.iter().any(|(id, _)| *id == c.id);
        if known {
            assert!(
                !ok,
                "{} is listed as a disagreement but now agrees; remove it from the list",
                c.id
            );
        }
        if !ok && print_on() {
            println!(
                "DISAGREE {} disputed={} expected={} got={:?} ({})\n  gold={:?}\n  pred={:?}",
                c.id,
                c.disputed,
                c.expected,
                v.status,
                v.reason,
                c.gold.chars().take(200).collect::<String>(),
                c.pred
                    .chars()
                    .rev()
                    .take(200)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect::<String>()
            );
        }
        if !ok && !c.disputed && !known {
            unexplained.push(c.id.clone());
        }
    }
    println!("math-verify-tests: agree {agree}/{} ", cases.len());
    assert!(
        unexplained.is_empty(),
        "unexplained disagreements with non-disputed labels: {unexplained:?}"
    );
}

#[test]
fn hardverify_recall_and_false_positive_rate() {
    let cases = load("hardverify-math.jsonl");
    assert_eq!(cases.len(), 500);
    let (mut tp, mut pos, mut fp, mut neg) = (0, 0, 0, 0);
    let (mut tp_nd, mut pos_nd, mut fp_nd, mut neg_nd) = (0, 0, 0, 0);
    for c in &cases {
        let v = verify(&c.gold, &c.pred, &c.opts);
        let got = v.correct();
        if c.expected {
            pos += 1;
            tp += got as usize;
            if !c.disputed {
                pos_nd += 1;
                tp_nd += got as usize;
            }
        } else {
            neg += 1;
            fp += got as usize;
            if !c.disputed {
                neg_nd += 1;
                fp_nd += got as usize;
            }
        }
        if got != c.expected && print_on() {
            println!(
                "MISS {} disputed={} expected={} got={:?} ({})\n  gold={:?}\n  pred={:?}",
                c.id, c.disputed, c.expected, v.status, v.reason, c.gold, c.pred
            );
        }
    }
    let recall = tp as f64 / pos as f64;
    let fpr = fp as f64 / neg as f64;
    let recall_nd = tp_nd as f64 / pos_nd as f64;
    let fpr_nd = fp_nd as f64 / neg_nd as f64;
    println!("hardverify whole file: recall {recall:.3} ({tp}/{pos}), FPR {fpr:.3} ({fp}/{neg})");
    println!("hardverify non-disputed labels: recall {recall_nd:.3} ({tp_nd}/{pos_nd}), FPR {fpr_nd:.3} ({fp_nd}/{neg_nd})");
    // Acceptance: recall >= 0.90 with FPR <= 0.01 over the whole file (met: 225/250, 1/250).
    // The whole file holds 11 disputed "true" labels (numbers that differ at the gold's own
    // precision, closed vs open intervals, a placeholder gold) that an exact verifier must
    // reject; the non-disputed figures are asserted at the level reached.
    assert!(fpr <= 0.01, "false-positive rate {fpr}");
    assert!(fpr_nd <= 0.01, "non-disputed false-positive rate {fpr_nd}");
    assert!(recall >= 0.90, "whole-file recall {recall}");
    assert!(recall_nd >= 0.93, "non-disputed recall {recall_nd}");
}

/// Accuracy, false-positive rate and their counts of `opts` over `cases`.
struct Rates {
    agree: usize,
    cases: usize,
    false_pos: usize,
    wrong: usize,
}

impl Rates {
    fn accuracy(&self) -> f64 {
        self.agree as f64 / self.cases as f64
    }
    fn fpr(&self) -> f64 {
        self.false_pos as f64 / self.wrong as f64
    }
}

fn rates<'a>(cases: impl Iterator<Item = &'a Case>, opts: &Options) -> Rates {
    let mut r = Rates {
        agree: 0,
        cases: 0,
        false_pos: 0,
        wrong: 0,
    };
    for c in cases {
        let got = verify(&c.gold, &c.pred, opts).correct();
        if got != c.expected && print_on() {
            println!("MISS {} expected={} got={got}", c.id, c.expected);
        }
        r.cases += 1;
        r.agree += (got == c.expected) as usize;
        if !c.expected {
            r.wrong += 1;
            r.false_pos += got as usize;
        }
    }
    r
}

/// Ids of the labelled SmolLM2 samples read after the stated-answer rules were frozen.
fn held_out(c: &Case) -> bool {
    c.id.as_str() >= "smol-185"
}

#[test]
fn smollm2_real_outputs_accuracy_and_false_positive_rate() {
    let cases = load("smollm2-arith-real.jsonl");
    assert_eq!(cases.len(), 260);
    let all = rates(cases.iter(), &Options::default());
    let held = rates(cases.iter().filter(|c| held_out(c)), &Options::default());
    println!(
        "smollm2 real outputs: accuracy {:.3} ({}/{}), FPR {:.3} ({}/{}); held-out accuracy {:.3}, FPR {:.3}",
        all.accuracy(),
        all.agree,
        all.cases,
        all.fpr(),
        all.false_pos,
        all.wrong,
        held.accuracy(),
        held.fpr()
    );
    // Met: 236/260 and 0/213 overall, 64/75 and 0/59 on the held-out samples.
    assert!(all.accuracy() >= 0.90, "accuracy {}", all.accuracy());
    assert!(all.fpr() <= 0.01, "false-positive rate {}", all.fpr());
    assert!(
        held.accuracy() >= 0.84,
        "held-out accuracy {}",
        held.accuracy()
    );
    assert!(
        held.fpr() <= 0.02,
        "held-out false-positive rate {}",
        held.fpr()
    );
    // The lenient extraction (the last number or math segment anywhere) fails the bar: it
    // credits numbers from the question and from working that states no answer.
    let last_value = Options {
        answer_policy: AnswerPolicy::LastValue,
        ..Options::default()
    };
    let lenient = rates(cases.iter(), &last_value);
    println!("last_value policy: FPR {:.3}", lenient.fpr());
    assert!(lenient.fpr() > 0.05, "lenient FPR {}", lenient.fpr());
}

#[test]
fn new_classes_are_all_judged_as_labelled() {
    let cases = load("new-classes.jsonl");
    assert_eq!(cases.len(), 81);
    let r = rates(cases.iter(), &Options::default());
    println!(
        "new classes: accuracy {:.3} ({}/{}), FPR {:.3}",
        r.accuracy(),
        r.agree,
        r.cases,
        r.fpr()
    );
    assert_eq!(
        r.agree, r.cases,
        "every hand-labelled case (VERIFY_PRINT=1 lists misses)"
    );
}

/// Wilson score interval (95%) of `k` successes in `n` trials.
fn wilson(k: usize, n: usize) -> (f64, f64) {
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// (credited right, all right, credited wrong, all wrong) of the default options on a blind
/// SmolLM2 set of `len` answers, printed with Wilson intervals.
fn blind_counts(name: &str, len: usize) -> (usize, usize, usize, usize) {
    let cases = load(name);
    assert_eq!(cases.len(), len);
    let (mut tp, mut pos, mut fp, mut neg) = (0, 0, 0, 0);
    for c in &cases {
        let got = verify(&c.gold, &c.pred, &Options::default()).correct();
        if got != c.expected && print_on() {
            println!("MISS {} expected={} got={got}", c.id, c.expected);
        }
        if c.expected {
            pos += 1;
            tp += got as usize;
        } else {
            neg += 1;
            fp += got as usize;
        }
    }
    let (rl, rh) = wilson(tp, pos);
    let (fl, fh) = wilson(fp, neg);
    println!(
        "{name}: recall {:.3} ({tp}/{pos}) [{rl:.3}, {rh:.3}], FPR {:.3} ({fp}/{neg}) [{fl:.3}, {fh:.3}]",
        tp as f64 / pos as f64,
        fp as f64 / neg as f64
    );
    (tp, pos, fp, neg)
}

/// Math-Verify 0.8.0's recall on a blind set as recorded in the fixtures' README: the line
/// `Math-Verify 0.8.0 on <file>: recall K/N` (measured by scripts/blind_rates.py).
fn math_verify_blind_recall(file: &str) -> (usize, usize) {
    let readme = std::fs::read_to_string(data_dir().join("README.md")).unwrap();
    let marker = format!("Math-Verify 0.8.0 on {file}: recall ");
    let line = readme
        .lines()
        .find(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("the README records Math-Verify's recall on {file}"));
    let figure = line.split(&marker).nth(1).unwrap();
    let (k, n) = figure.split_once('/').unwrap();
    let n: String = n.chars().take_while(|c| c.is_ascii_digit()).collect();
    (k.trim().parse().unwrap(), n.parse().unwrap())
}

#[test]
fn smollm2_blind_false_positive_rate_and_recall_floor() {
    let (tp, pos, fp, neg) = blind_counts("smollm2-blind.jsonl", 320);
    // FPR <= 0.01 is met only after e745a9f, whose two rules were written after reading the
    // blind run's false positives (docs/verifier.md): the blind run itself gave 4/286.
    assert!(fp as f64 / neg as f64 <= 0.01, "blind FPR {fp}/{neg}");
    // Floors at the level measured after the issue-27 tuning rules (32/34, 1/286). Those rules
    // were written while reading this set's misses, so it is a seen set now: a regression
    // guard, not the acceptance bar (blind set 3 is).
    assert!(fp <= 1, "blind false positives {fp}/{neg}");
    assert!(tp >= 32, "blind recall {tp}/{pos}");
}

#[test]
fn smollm2_blind_recall_above_math_verify_on_the_seen_set() {
    // Not the acceptance test any more: the rules of a30a0b0 were written while reading this
    // set's misses. It keeps Math-Verify's recorded figure tied to the file.
    let (tp, pos, _, _) = blind_counts("smollm2-blind.jsonl", 320);
    let (mk, mn) = math_verify_blind_recall("smollm2-blind.jsonl");
    assert_eq!(mn, pos, "the README's figure is for this file");
    assert!(
        tp >= mk,
        "seen-set recall {tp}/{pos} < Math-Verify {mk}/{mn}"
    );
}

#[test]
fn smollm2_blind2_floors() {
    // The second blind set, first run at e745a9f: recall 17/26, FPR 2/184. The tuning rules
    // after it were written while reading its misses (a seen set now); floors at the level
    // measured with them (23/26, 0/184) guard against regressions, they are not the bar.
    let (tp, pos, fp, neg) = blind_counts("smollm2-blind2.jsonl", 210);
    assert!(fp == 0, "blind2 false positives {fp}/{neg}");
    assert!(tp >= 23, "blind2 recall {tp}/{pos}");
}

#[test]
fn smollm2_blind3_floors() {
    // The third blind set, run once at a30a0b0 (the rules frozen before it was sampled and
    // labelled): recall 17/30, 5 false positives of 290. The follow-up rules written after
    // reading that run (not blind) give 27/30 and 2/290; floors at that level guard against
    // regressions, they are no unseen-data figure.
    let (tp, pos, fp, neg) = blind_counts("smollm2-blind3.jsonl", 320);
    assert!(fp <= 2, "blind3 false positives {fp}/{neg}");
    assert!(tp >= 27, "blind3 recall {tp}/{pos}");
}

#[test]
fn smollm2_blind4_floors_and_recall_at_least_math_verify() {
    // The fourth blind set, run once at c2c2d87 (sampled and labelled after it): recall 21/31,
    // at least Math-Verify's recorded 20/31 (that half of issue 27's acceptance holds blind);
    // 5 false positives of 289. The refusals of fe52b72, written after reading that run (not
    // blind), give 2/289; the false-positive floor is at that level.
    let (tp, pos, fp, neg) = blind_counts("smollm2-blind4.jsonl", 320);
    let (mk, mn) = math_verify_blind_recall("smollm2-blind4.jsonl");
    assert_eq!(mn, pos, "the README's figure is for this file");
    assert!(tp >= mk, "blind4 recall {tp}/{pos} < Math-Verify {mk}/{mn}");
    assert!(tp >= 21, "blind4 recall {tp}/{pos}");
    assert!(fp <= 2, "blind4 false positives {fp}/{neg}");
}

#[test]
fn smollm2_blind5_acceptance() {
    // Issue 27's acceptance on the fifth blind set, run once at fe52b72 (sampled and labelled
    // after it): recall 27/34 against Math-Verify's recorded 22/34, FPR 2/286 = 0.007.
    let (tp, pos, fp, neg) = blind_counts("smollm2-blind5.jsonl", 320);
    let (mk, mn) = math_verify_blind_recall("smollm2-blind5.jsonl");
    assert_eq!(mn, pos, "the README's figure is for this file");
    assert!(tp >= mk, "blind5 recall {tp}/{pos} < Math-Verify {mk}/{mn}");
    assert!(fp as f64 / neg as f64 <= 0.01, "blind5 FPR {fp}/{neg}");
    // floors at the level measured
    assert!(
        tp >= 27 && fp <= 2,
        "blind5 {tp}/{pos} credited, {fp}/{neg} false positives"
    );
}
