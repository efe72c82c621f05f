//! GRPO advantages against the verl golden vectors in `fixtures/oracles/verl_advantages.json`.
//! (The full oracle harness over every fixture file is issue 3; this pins the estimator the
//! default experiment uses.)

use std::path::PathBuf;

use reinforge_rl::{grpo_advantages, AdvantageConfig, Groups};
use serde_json::Value;

fn oracles_dir() -> PathBuf {
    std::env::var_os("REINFORGE_ORACLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/oracles")
        })
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn verl_compute_grpo_outcome_advantage() {
    let path = oracles_dir().join("verl_advantages.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for case in doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["function"] == "compute_grpo_outcome_advantage")
    {
        let rewards = matrix(&case["inputs"]["token_level_rewards"]);
        let mask = matrix(&case["inputs"]["response_mask"]);
        let index: Vec<i64> = case["inputs"]["index"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        let cfg = AdvantageConfig {
            norm_by_std: case["params"]["norm_adv_by_std_in_grpo"].as_bool().unwrap(),
            epsilon: case["params"]["epsilon"].as_f64().unwrap(),
        };
        let scores: Vec<f64> = rewards.iter().map(|r| r.iter().sum()).collect();
        let adv = grpo_advantages(&scores, &Groups::from_index(&index), &cfg);
        let expected = matrix(&case["expected"]["advantages"]);
        for (i, row) in expected.iter().enumerate() {
            for (t, &e) in row.iter().enumerate() {
                let got = adv[i] * mask[i][t];
                assert!(
                    (got - e).abs() <= 1e-9 * e.abs().max(1.0),
                    "{}: row {i} token {t}: {got} vs {e}",
                    case["case"]
                );
            }
        }
        checked += 1;
    }
    assert_eq!(
        checked, 12,
        "every compute_grpo_outcome_advantage case was checked"
    );
}
