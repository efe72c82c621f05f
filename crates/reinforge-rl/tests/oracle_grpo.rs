//! Every verl advantage case of `fixtures/oracles/verl_advantages.json` replayed through the
//! registry's dispatch, [`reinforge_rl::estimate`], the function the trainer calls: the fixture's
//! verl function picks the [`Estimator`] whose `verl_function` it is, the case's params fill
//! [`EstimatorParams`], and both returned matrices must match.

use std::collections::BTreeMap;
use std::path::PathBuf;

use reinforge_rl::{estimate, AdvantageConfig, Estimator, EstimatorInputs, EstimatorParams};
use serde_json::Value;

fn oracles_dir() -> PathBuf {
    std::env::var_os("REINFORGE_ORACLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/oracles"))
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("a matrix")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("a row")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect()
        })
        .collect()
}

fn cases() -> Vec<Value> {
    let path = oracles_dir().join("verl_advantages.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

/// The case's params as [`EstimatorParams`], verl's defaults where a case leaves one out.
fn params(case: &Value) -> EstimatorParams {
    let p = &case["params"];
    let d = EstimatorParams::default();
    let f = |k: &str, default: f64| p[k].as_f64().unwrap_or(default);
    let b = |k: &str, default: bool| p[k].as_bool().unwrap_or(default);
    EstimatorParams {
        advantage: AdvantageConfig {
            norm_by_std: b("norm_adv_by_std_in_grpo", d.advantage.norm_by_std),
            epsilon: f("epsilon", d.advantage.epsilon),
            batch_std: false,
        },
        gamma: f("gamma", d.gamma),
        lam: f("lam", d.lam),
        f_norm: f("f_norm", d.f_norm),
        handle_zero_tail: b("handle_zero_tail", d.handle_zero_tail),
        otb_epsilon: f("epsilon", d.otb_epsilon),
        ..d
    }
}

/// Every number of a nested list, row-major.
fn flat(v: &Value) -> Vec<f64> {
    match v.as_array() {
        Some(a) => a.iter().flat_map(flat).collect(),
        None => vec![v.as_f64().expect("a number")],
    }
}

/// `|got - exp| <= tol · max(1, |exp|)` over two matrices of the same shape.
fn close(what: &str, got: &[Vec<f64>], exp: &[Vec<f64>], tol: f64) -> Result<(), String> {
    if got.len() != exp.len() {
        return Err(format!(
            "{what}: {} rows, expected {}",
            got.len(),
            exp.len()
        ));
    }
    for (i, (g, e)) in got.iter().zip(exp).enumerate() {
        if g.len() != e.len() {
            return Err(format!(
                "{what}: row {i} has {} entries, expected {}",
                g.len(),
                e.len()
            ));
        }
        for (t, (&g, &e)) in g.iter().zip(e).enumerate() {
            if (g - e).abs() > tol * e.abs().max(1.0) {
                return Err(format!("{what}: row {i} token {t}: {g} vs {e}"));
            }
        }
    }
    Ok(())
}

/// Runs `estimator` on `case` through the dispatch and checks both outputs.
fn replay(estimator: Estimator, case: &Value) -> Result<(), String> {
    let id = case["case"].as_str().unwrap_or("?");
    let inp = &case["inputs"];
    let rewards = matrix(&inp["token_level_rewards"]);
    let mask = matrix(&inp["response_mask"]);
    // Estimators without groups (REINFORCE++, GAE, ReMax) get one group per row.
    let index: Vec<i64> = match inp["index"].as_array() {
        Some(ids) => ids.iter().map(|x| x.as_i64().unwrap()).collect(),
        None => (0..rewards.len() as i64).collect(),
    };
    let optional = |k: &str| inp.get(k).filter(|v| !v.is_null()).map(matrix);
    let (values, old_lp, sum_pi2) = (
        optional("values"),
        optional("old_log_probs"),
        optional("sum_pi_squared"),
    );
    let baselines: Option<Vec<f64>> = inp.get("reward_baselines").map(flat);
    let inputs = EstimatorInputs {
        values: values.as_ref(),
        reward_baselines: baselines.as_deref(),
        old_log_probs: old_lp.as_ref(),
        sum_pi_squared: sum_pi2.as_ref(),
        ..EstimatorInputs::new(&rewards, &mask, &index)
    };
    let out = estimate(estimator, &inputs, &params(case))
        .map_err(|e| format!("{id} ({estimator}): {e}"))?;
    // verl computes the vectorised GRPO statistics in float32 (fixtures README, Tolerances).
    let tol = if estimator == Estimator::GrpoVectorized {
        1e-6
    } else {
        1e-9
    };
    let exp = &case["expected"];
    let what = |k: &str| format!("{id} ({estimator}) {k}");
    close(
        &what("advantages"),
        &out.advantages,
        &matrix(&exp["advantages"]),
        tol,
    )?;
    close(
        &what("returns"),
        &out.returns,
        &matrix(&exp["returns"]),
        tol,
    )
}

#[test]
fn every_verl_advantage_case_passes_through_the_dispatch() {
    let cases = cases();
    let mut checked: BTreeMap<Estimator, usize> = BTreeMap::new();
    for case in &cases {
        let function = case["function"].as_str().unwrap();
        let estimator = Estimator::ALL
            .into_iter()
            .find(|e| e.verl_function() == Some(function))
            .unwrap_or_else(|| panic!("no registered estimator reproduces {function}"));
        replay(estimator, case).unwrap();
        *checked.entry(estimator).or_default() += 1;
        // Dr.GRPO is verl's GRPO without std normalisation: replay those cases as `dr_grpo` too.
        if estimator == Estimator::Grpo && case["params"]["norm_adv_by_std_in_grpo"] == false {
            replay(Estimator::DrGrpo, case).unwrap();
            *checked.entry(Estimator::DrGrpo).or_default() += 1;
        }
    }
    let verl_cases: usize = checked
        .iter()
        .filter(|(e, _)| **e != Estimator::DrGrpo)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(verl_cases, 73, "every case of the fixture");
    // Every registered verl estimator is covered by at least one case (`trl_grpo`'s are TRL's,
    // replayed by reinforge-torch's oracle harness).
    for e in Estimator::ALL
        .into_iter()
        .filter(|e| e.verl_function().is_some())
    {
        assert!(
            checked.get(&e).copied().unwrap_or(0) > 0,
            "{e} has no oracle case: {checked:?}"
        );
    }
    eprintln!("oracle cases per estimator: {checked:?}");
}

#[test]
fn a_wrong_estimator_fails_the_oracle() {
    // The replay is sensitive: GRPO's cases do not pass as RLOO.
    let case = cases()
        .into_iter()
        .find(|c| c["function"] == "compute_grpo_outcome_advantage")
        .unwrap();
    assert!(replay(Estimator::Grpo, &case).is_ok());
    let err = replay(Estimator::Rloo, &case).unwrap_err();
    assert!(err.contains("advantages"), "{err}");
}
