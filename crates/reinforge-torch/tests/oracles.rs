//! The oracle harness: every `*.json` fixture in the oracle directory (`fixtures/oracles`, or
//! `REINFORGE_ORACLES_DIR`) is replayed through the matching reinforge function and every expected
//! field is compared (README tolerances: `|got - exp| <= 1e-9·max(1, |exp|)`, rtol = atol = 1e-6 for
//! `compute_grpo_vectorized_outcome_advantage`, exact booleans). An unknown function name fails the
//! run, and so does an expected field that no check consumed. Per-function case counts and maximum
//! deviations are printed; they must equal the counts the files hold, in any directory (and the
//! README's for `fixtures/oracles`).
//!
//! The policy and value losses are replayed through the trainer's own objectives
//! (`rl::policy_objective`, `rl::value_objective`): verl's cases and TRL's all (TRL's with the
//! trainer settings of `oracle_support::trl::trainer_config`: unclamped ratio, `k3_unclamped`,
//! `delta` as the dual clip). TRL's advantage cases go through the function of the trainer's
//! `trl_grpo` estimator (those with one reward function through the RL step's
//! `outcome_advantages` itself). No case runs through a copy of TRL kept in `tests/`.
//! `perturbing_the_trainer_fails_the_replay` shows that the replay really runs the trainer's
//! configuration.

use crate::oracle_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oracle_support::{run_dir, run_dir_with, trainer_outputs, Options, Perturb, Report};
use reinforge_torch::train::loss::{AggMode, KlPenalty, PolicyLossKind};

/// Fixture functions not implemented yet: listed, printed and skipped. Empty: all are covered.
const PENDING: &[&str] = &[];

fn oracles_dir() -> PathBuf {
    std::env::var_os("REINFORGE_ORACLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/oracles"))
}

fn print_report(dir: &Path, report: &Report) {
    println!("oracle harness over {}", dir.display());
    for (f, s) in &report.per_function {
        println!(
            "  {f:<58} {:>3} cases  max rel. deviation {:.3e}",
            s.cases, s.max_dev
        );
    }
    for f in &report.pending {
        println!("  {f:<58} PENDING (not implemented)");
    }
    let trainer: usize = report.through_trainer.values().sum();
    println!("  through the functions the trainer calls: {trainer} cases");
    for (f, n) in &report.through_trainer {
        println!("    {f:<56} {n:>3}");
    }
}

/// Cases per function of every `*.json` file of `dir`, read from the files (pending functions
/// left out): what the harness must have checked.
fn cases_in(dir: &Path, pending: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "json") {
            let doc = read(dir, path.file_name().unwrap().to_str().unwrap());
            for c in doc["cases"].as_array().unwrap() {
                let f = c["function"].as_str().unwrap();
                if !pending.contains(&f) {
                    *out.entry(f.to_string()).or_default() += 1;
                }
            }
        }
    }
    out
}

/// Whether every case of `function` is replayed through the functions the trainer calls: verl's
/// policy and value losses, TRL's losses (the trainer's objective) and TRL's advantages (the
/// `trl_grpo` estimator's function).
fn trainer_function(function: &str) -> bool {
    function.starts_with("compute_policy_loss_")
        || function == "compute_value_loss"
        || function.starts_with("grpo_loss_")
        || function == "grpo_advantages"
}

#[test]
fn every_fixture_matches() {
    let dir = oracles_dir();
    let report = run_dir(&dir, PENDING).unwrap_or_else(|e| panic!("{e}"));
    print_report(&dir, &report);
    // Every case of every file was checked, in any directory: the counts the files hold.
    let in_files = cases_in(&dir, PENDING);
    let checked: BTreeMap<String, usize> = report
        .per_function
        .iter()
        .map(|(f, s)| (f.clone(), s.cases))
        .collect();
    assert_eq!(
        checked,
        in_files,
        "cases checked vs cases in {}",
        dir.display()
    );
    let total: usize = checked.values().sum();
    assert!(total > 0, "no cases found in {}", dir.display());
    for (f, n) in in_files.iter().filter(|(f, _)| trainer_function(f)) {
        assert_eq!(
            report.through_trainer.get(f),
            Some(n),
            "{f}: every case through the functions the trainer calls"
        );
    }
    // The fixture set of the README: 73 + 27 + 138 + 36 + 66 + 6 + 23 cases.
    if std::env::var_os("REINFORGE_ORACLES_DIR").is_none() {
        assert_eq!(total, 369, "every case of fixtures/oracles was checked");
        assert_eq!(
            report.per_function.len(),
            41,
            "every function was dispatched"
        );
        let trainer: usize = report.through_trainer.values().sum();
        // verl's 12 policy losses and the value loss, TRL's 6 loss types and its advantages.
        assert_eq!(
            report.through_trainer.len(),
            13 + 7,
            "{:?}",
            report.through_trainer
        );
        assert_eq!(trainer, TRAINER_CASES, "{:?}", report.through_trainer);
    }
}

/// Cases of `fixtures/oracles` replayed through the functions the trainer calls: verl's 134
/// policy-loss and 4 value-loss cases, and all 66 of TRL's: its 48 loss cases (grpo 18, bnpo 6,
/// dr_grpo 9, dapo 9, cispo 3, sapo 3) through the trainer's objective and its 18 advantage
/// cases through the `trl_grpo` estimator's function.
const TRAINER_CASES: usize = 138 + 48 + 18;

/// The functions of the failed cases of a replay of `dir` with `perturb`, with their counts.
fn failing_functions(dir: &Path, perturb: Perturb) -> BTreeMap<String, usize> {
    let report = run_dir_with(
        dir,
        Options {
            perturb,
            keep_going: true,
            ..Options::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut out = BTreeMap::new();
    for (f, _) in &report.failures {
        *out.entry(f.clone()).or_default() += 1;
    }
    out
}

/// The functions of the cases of `doc` whose trainer outputs `perturb` moves by more than the
/// harness's tolerance (`1e-9·max(1, |x|)`), computed from the cases themselves by running the
/// trainer's objectives with and without it: the cases a replay with `perturb` must fail.
fn moved_functions(doc: &serde_json::Value, perturb: Perturb) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for v in doc["cases"].as_array().unwrap() {
        let clean = trainer_outputs(v, Perturb::default()).unwrap();
        let perturbed = trainer_outputs(v, perturb).unwrap();
        let (Some(a), Some(b)) = (clean, perturbed) else {
            continue;
        };
        let moved = !a.keys().eq(b.keys())
            || a.values().zip(b.values()).any(|(x, y)| {
                let d = (x - y).abs();
                d.is_nan() || d > 1e-9 * x.abs().max(1.0)
            });
        if moved {
            *out.entry(v["function"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    out
}

fn with_policy(policy: fn(&mut reinforge_torch::train::rl::UpdateConfig)) -> Perturb {
    Perturb {
        policy,
        ..Perturb::default()
    }
}

/// The replay runs the trainer's configuration: changing the loss, the aggregation or the clip
/// range of the `UpdateConfig` it builds, or the critic's clip range, makes exactly the cases
/// fail whose outputs the change moves. Which cases those are is computed from the cases
/// (with the change applied directly, not through the harness), so the test holds for any
/// valid verl case set; what each loss reads (GSPO, SAPO and GMPO fix their own aggregation,
/// five losses never read the clip range) bounds it whatever the data.
#[test]
fn perturbing_the_trainer_fails_the_replay() {
    let src = oracles_dir();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        src.join("verl_policy_loss.json"),
        tmp.path().join("verl_policy_loss.json"),
    )
    .unwrap();
    let doc = read(tmp.path(), "verl_policy_loss.json");
    let clean = run_dir(tmp.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let in_file = cases_in(tmp.path(), &[]);
    assert_eq!(
        clean.through_trainer,
        in_file
            .iter()
            .filter(|(f, _)| trainer_function(f))
            .map(|(f, n)| (f.clone(), *n))
            .collect::<BTreeMap<_, _>>(),
        "every policy- and value-loss case through the trainer"
    );
    let named = |f: &str, losses: &[&str]| losses.iter().any(|l| f.ends_with(&format!("_{l}")));

    // Another registered loss (plain `-A·logp`, or PPO clip instead of it).
    let swapped = with_policy(|c| {
        c.policy_loss = if c.policy_loss == PolicyLossKind::Gpg {
            PolicyLossKind::Vanilla
        } else {
            PolicyLossKind::Gpg
        }
    });
    // Another aggregation mode.
    let agg = with_policy(|c| {
        c.agg = if c.agg == AggMode::TokenSum {
            AggMode::TokenMean
        } else {
            AggMode::TokenSum
        }
    });
    // A wider lower clip.
    let clip = with_policy(|c| c.loss.clip_ratio_low = Some(c.loss.low() + 0.05));
    // The critic's clip range.
    let value = Perturb {
        value: |c| c.cliprange_value *= 0.5,
        ..Perturb::default()
    };
    for (what, perturb, never) in [
        ("another loss", swapped, &[][..]),
        (
            "another aggregation",
            agg,
            &["gspo", "sapo", "geo_mean"][..],
        ),
        (
            "a wider lower clip",
            clip,
            &["sapo", "gpg", "dro", "kl_cov", "reinforce"][..],
        ),
        ("the critic's clip range", value, &[][..]),
    ] {
        let expected = moved_functions(&doc, perturb);
        let failed = failing_functions(tmp.path(), perturb);
        eprintln!("{what}: {failed:?}");
        assert_eq!(failed, expected, "{what}: failed vs moved by it");
        for f in failed.keys() {
            assert!(!named(f, never), "{what}: {f} does not read it");
        }
    }
    // Not vacuous: another loss moves the cases of any set with a non-zero advantage.
    assert!(
        !moved_functions(&doc, swapped).is_empty(),
        "no case moved by another loss"
    );
    trl_cases_fail_with_a_perturbed_trainer(&src, swapped);
}

/// TRL's cases run through the trainer too: another loss fails every TRL loss type, verl's
/// clamped k3 instead of TRL's fails exactly the cases with a KL term (each has a token past
/// verl's clamp), verl's log-ratio clamp fails cases, another advantage epsilon fails the
/// advantage cases, and none of these touches the other family.
fn trl_cases_fail_with_a_perturbed_trainer(src: &Path, swapped: Perturb) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(src.join("trl_grpo.json"), tmp.path().join("trl_grpo.json")).unwrap();
    let doc = read(tmp.path(), "trl_grpo.json");
    let clean = run_dir(tmp.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let in_file = cases_in(tmp.path(), &[]);
    let trl: BTreeMap<String, usize> = in_file
        .iter()
        .filter(|(f, _)| trainer_function(f))
        .map(|(f, n)| (f.clone(), *n))
        .collect();
    assert_eq!(
        clean.through_trainer, trl,
        "every TRL case through the trainer"
    );
    let losses: Vec<&String> = trl.keys().filter(|f| f.starts_with("grpo_loss_")).collect();
    assert_eq!(losses.len(), 6, "{losses:?}");

    let failed = failing_functions(tmp.path(), swapped);
    eprintln!("TRL, another loss: {failed:?}");
    for f in &losses {
        assert!(failed.contains_key(*f), "another loss: {f} passed");
    }
    assert!(!failed.contains_key("grpo_advantages"));

    let mut with_kl: BTreeMap<String, usize> = BTreeMap::new();
    for v in doc["cases"].as_array().unwrap() {
        if v["params"]["beta"].as_f64().is_some_and(|b| b != 0.0) {
            *with_kl
                .entry(v["function"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert!(!with_kl.is_empty());
    let clamped_kl = failing_functions(tmp.path(), with_policy(|c| c.kl = KlPenalty::K3));
    assert_eq!(
        clamped_kl, with_kl,
        "verl's clamped k3: the cases with a KL term"
    );

    let clamp = failing_functions(tmp.path(), with_policy(|c| c.loss.clamp_log_ratio = true));
    eprintln!("TRL, verl's log-ratio clamp: {clamp:?}");
    assert!(
        !clamp.is_empty() && clamp.keys().all(|f| f.starts_with("grpo_loss_")),
        "{clamp:?}"
    );

    let eps = Perturb {
        advantage: |a| a.epsilon *= 100.0,
        ..Perturb::default()
    };
    let adv = failing_functions(tmp.path(), eps);
    assert!(
        adv.keys().eq(["grpo_advantages"].iter()) && adv["grpo_advantages"] > 0,
        "another advantage epsilon: {adv:?}"
    );
}

fn read(dir: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(name)).expect("fixture readable");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A different directory with the same schema: a subset of two fixture files, renamed, with the
/// cases renumbered and the case order reversed. The harness must find and check exactly them.
#[test]
fn another_directory_with_the_same_schema() {
    let src = oracles_dir();
    let tmp = tempfile::tempdir().unwrap();
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for (file, keep, out) in [
        ("verl_advantages.json", 20usize, "subset_a.json"),
        ("trl_grpo.json", 25, "nested_b.json"),
    ] {
        let mut doc = read(&src, file);
        let cases = doc["cases"].as_array_mut().unwrap();
        cases.truncate(keep);
        cases.reverse();
        for (i, c) in cases.iter_mut().enumerate() {
            c["case"] = serde_json::Value::from(format!("copy-{i:03}"));
            *expected
                .entry(c["function"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        std::fs::write(tmp.path().join(out), doc.to_string()).unwrap();
    }
    std::fs::write(tmp.path().join("notes.txt"), "not a fixture").unwrap();
    let report = run_dir(tmp.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    print_report(tmp.path(), &report);
    let got: BTreeMap<String, usize> = report
        .per_function
        .iter()
        .map(|(k, v)| (k.clone(), v.cases))
        .collect();
    assert_eq!(got, expected);
}

/// Unknown functions fail the run; a corrupted expectation fails it too.
#[test]
fn unknown_functions_and_wrong_values_fail() {
    let src = oracles_dir();
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = read(&src, "overlong.json");
    doc["cases"][0]["function"] = serde_json::Value::from("compute_policy_loss_mystery");
    std::fs::write(tmp.path().join("x.json"), doc.to_string()).unwrap();
    let err = run_dir(tmp.path(), &[]).unwrap_err();
    assert!(err.contains("compute_policy_loss_mystery"), "{err}");
    // Listed as pending, the same file passes and reports the name.
    let report = run_dir(tmp.path(), &["compute_policy_loss_mystery"]).unwrap();
    assert_eq!(
        report.pending,
        vec!["compute_policy_loss_mystery".to_string()]
    );

    let mut doc = read(&src, "pass_at_k.json");
    let v = doc["cases"][3]["expected"]["pass_at_k"].as_f64().unwrap();
    doc["cases"][3]["expected"]["pass_at_k"] = serde_json::Value::from(v + 1e-6);
    std::fs::write(tmp.path().join("x.json"), doc.to_string()).unwrap();
    assert!(run_dir(tmp.path(), &[]).is_err());
}
