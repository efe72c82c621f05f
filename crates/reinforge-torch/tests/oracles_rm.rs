//! TRL's reward-model loss against golden vectors from running TRL's own
//! `RewardTrainer.compute_loss` (`fixtures/oracles/rm/trl_reward_loss.json`, made by
//! `scripts/make_rm_oracles.py`): loss, gradients and logged metrics, through
//! `loss::reward_model::reward_loss`.

use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::train::loss::reward_model::reward_loss;
use serde_json::Value;

use crate::golden;
use golden::{numbers, tensor};

fn fixture() -> Value {
    golden::fixture("rm/trl_reward_loss.json")
}

fn check(case: &Value, nudge: f64) -> Result<(), String> {
    let i = &case["inputs"];
    let c = tensor(&i["rewards_chosen"]).set_requires_grad(true);
    let r = tensor(&i["rewards_rejected"]).set_requires_grad(true);
    let m = i.get("margin").map(tensor);
    let center = case["params"]["center_rewards_coefficient"].as_f64();
    let out = reward_loss(&c, &r, m.as_ref(), center).map_err(|e| e.to_string())?;
    out.loss.backward();
    let e = &case["expected"];
    let near = |name: &str, got: f64, want: f64| -> Result<(), String> {
        let want = want + nudge;
        if (got - want).abs() > 1e-9 * want.abs().max(1.0) {
            return Err(format!("{} {name}: {got} vs TRL {want}", case["case"]));
        }
        Ok(())
    };
    near(
        "loss",
        out.loss.double_value(&[]),
        e["loss"].as_f64().unwrap(),
    )?;
    for (name, t) in [("grad_rewards_chosen", &c), ("grad_rewards_rejected", &r)] {
        let got = Vec::<f64>::try_from(&t.grad()).unwrap();
        for (k, (g, w)) in got.iter().zip(numbers(&e[name])).enumerate() {
            near(&format!("{name}[{k}]"), *g, w)?;
        }
    }
    let mt = &e["metrics"];
    // TRL logs accuracy through a float32 tensor.
    let acc = mt["accuracy"].as_f64().unwrap() + nudge;
    if (out.accuracy - acc).abs() > 1e-7 {
        return Err(format!(
            "{} accuracy {} vs TRL {acc}",
            case["case"], out.accuracy
        ));
    }
    near("margin", out.margin, mt["margin"].as_f64().unwrap())?;
    near(
        "min_reward",
        out.min_reward,
        mt["min_reward"].as_f64().unwrap(),
    )?;
    near(
        "mean_reward",
        out.mean_reward,
        mt["mean_reward"].as_f64().unwrap(),
    )?;
    near(
        "max_reward",
        out.max_reward,
        mt["max_reward"].as_f64().unwrap(),
    )
}

#[test]
fn every_trl_reward_loss_case_passes() {
    let f = fixture();
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    for case in cases {
        check(case, 0.0).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(cases.iter().any(|c| c["inputs"].get("margin").is_some()));
}

#[test]
fn a_nudged_reward_loss_value_fails() {
    for case in fixture()["cases"].as_array().unwrap() {
        assert!(check(case, 1e-4).is_err(), "{}", case["case"]);
    }
}

#[test]
fn mismatched_shapes_are_errors() {
    let a = Tensor::zeros([3], (Kind::Double, reinforge_torch::Device::Cpu));
    let b = Tensor::zeros([2], (Kind::Double, reinforge_torch::Device::Cpu));
    assert!(reward_loss(&a, &b, None, None).is_err());
}
