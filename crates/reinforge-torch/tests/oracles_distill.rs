//! TRL's distillation losses against golden vectors from running TRL's own functions
//! (`fixtures/oracles/distill/trl_distill_losses.json`, made by
//! `scripts/make_distill_oracles.py`): GKD's `generalized_jsd_loss` (every β end, temperature
//! and reduction, with d loss / d student logits), the main `DistillationTrainer`'s chunked
//! loss, and the top-k teacher of `ServerDistillationTrainer`, through `loss::distill`, the
//! functions `train-distill` calls.

use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::train::loss::distill::{
    jsd_elements, reduce, topk_elements, Jsd, Reduction, TopK,
};
use serde_json::Value;

use crate::golden;
use golden::{numbers, Compare};

/// float64 throughout: TRL's functions ran in float64 on the same inputs.
const TOL: f64 = 1e-9;
/// TRL's chunked kernel projects and accumulates in float32.
const TOL_CHUNKED: f64 = 1e-5;

fn jsd_of(case: &Value) -> Jsd {
    let p = &case["params"];
    Jsd::new(
        p["beta"].as_f64().unwrap(),
        p["temperature"].as_f64().unwrap(),
    )
    .unwrap()
}

fn mask_of(case: &Value) -> Tensor {
    golden::tensor(&case["inputs"]["mask"]).gt(0.5)
}

fn check_jsd(case: &Value, nudge: f64) -> Result<f64, String> {
    let i = &case["inputs"];
    let p = &case["params"];
    let e = &case["expected"];
    let s = golden::tensor(&i["student_logits"]).set_requires_grad(true);
    let t = golden::tensor(&i["teacher_logits"]);
    let reduction: Reduction = p["reduction"].as_str().unwrap().parse().unwrap();
    let mask = i["masked"].as_bool().unwrap().then(|| mask_of(case));
    let out = reduce(
        &jsd_elements(&s, &t, &jsd_of(case)),
        mask.as_ref(),
        reduction,
        p["num_items_in_batch"].as_f64(),
    );
    let mut c = Compare::new(case, nudge);
    if reduction == Reduction::None {
        let got = Vec::<f64>::try_from(&out.flatten(0, -1)).unwrap();
        c.values("elements", &got, &numbers(&e["elements"]), TOL)?;
        out.sum(Kind::Double).backward();
    } else {
        c.values(
            "loss",
            &[out.double_value(&[])],
            &[e["loss"].as_f64().unwrap()],
            TOL,
        )?;
        out.backward();
    }
    c.values(
        "grad_student_logits",
        &grad_flat(&s),
        &numbers(&e["grad_student_logits"]),
        TOL,
    )?;
    Ok(c.worst)
}

fn check_chunked(case: &Value, nudge: f64) -> Result<f64, String> {
    let i = &case["inputs"];
    let e = &case["expected"];
    let (s, t) = (
        golden::tensor(&i["student_logits"]),
        golden::tensor(&i["teacher_logits"]),
    );
    let mask = mask_of(case);
    let loss = reduce(
        &jsd_elements(&s, &t, &jsd_of(case)),
        Some(&mask),
        Reduction::BatchMean,
        None,
    );
    let mut c = Compare::new(case, nudge);
    c.values(
        "loss",
        &[loss.double_value(&[])],
        &[e["loss"].as_f64().unwrap()],
        TOL_CHUNKED,
    )?;
    Ok(c.worst)
}

fn check_topk(case: &Value, nudge: f64) -> Result<f64, String> {
    let i = &case["inputs"];
    let p = &case["params"];
    let e = &case["expected"];
    let s = golden::tensor(&i["student_logits"]).set_requires_grad(true);
    // `null` marks an alternative the teacher did not give (-inf).
    let lp_json = &i["teacher_topk_logprobs"];
    let flat: Vec<f64> = flat_or_neg_inf(lp_json);
    let logprobs = Tensor::from_slice(&flat).view(golden::shape(lp_json).as_slice());
    let ids = golden::tensor(&i["teacher_topk_ids"]).to_kind(Kind::Int64);
    let jsd = Jsd::new(
        p["beta"].as_f64().unwrap(),
        p["temperature"].as_f64().unwrap(),
    )
    .unwrap();
    let elements = topk_elements(
        &s,
        &TopK {
            logprobs: &logprobs,
            ids: &ids,
        },
        &jsd,
        p["add_tail"].as_bool().unwrap(),
    );
    let loss = reduce(&elements, Some(&mask_of(case)), Reduction::BatchMean, None);
    loss.backward();
    let mut c = Compare::new(case, nudge);
    c.values(
        "loss",
        &[loss.double_value(&[])],
        &[e["loss"].as_f64().unwrap()],
        TOL,
    )?;
    c.values(
        "grad_student_logits",
        &grad_flat(&s),
        &numbers(&e["grad_student_logits"]),
        TOL,
    )?;
    Ok(c.worst)
}

/// The gradient of `x`, flattened to float64 values.
fn grad_flat(x: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&x.grad().to_kind(Kind::Double).flatten(0, -1)).unwrap()
}

fn flat_or_neg_inf(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat_or_neg_inf).collect(),
        Value::Null => vec![f64::NEG_INFINITY],
        Value::Number(n) => vec![n.as_f64().unwrap()],
        other => panic!("not a number: {other}"),
    }
}

fn check(case: &Value, nudge: f64) -> Result<f64, String> {
    match case["function"].as_str().unwrap() {
        "generalized_jsd_loss" => check_jsd(case, nudge),
        "chunked_divergence_loss" => check_chunked(case, nudge),
        "topk_divergence" => check_topk(case, nudge),
        other => Err(format!("unknown function {other}")),
    }
}

#[test]
fn every_trl_distillation_golden_case_passes_and_a_nudged_one_fails() {
    let worst = golden::replay("distill/trl_distill_losses.json", 47, check);
    assert!(worst < TOL_CHUNKED);
    // The float64 families on their own (the chunked kernel's float32 sets `worst` above).
    let f = golden::fixture("distill/trl_distill_losses.json");
    for family in ["generalized_jsd_loss", "topk_divergence"] {
        let worst = f["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["function"] == family)
            .map(|c| check(c, 0.0).unwrap())
            .fold(0.0, f64::max);
        eprintln!("{family}: worst relative deviation {worst:.2e}");
        assert!(worst < TOL);
    }
}

/// The ends of β are the two KL directions (TRL's convention): β = 0 is KL(teacher‖student),
/// β = 1 is KL(student‖teacher), computed here from the definitions.
#[test]
fn beta_zero_is_forward_kl_and_beta_one_is_reverse_kl() {
    let s = Tensor::from_slice(&[0.3f64, -1.0, 2.0, 0.1]).view([1, 4]);
    let t = Tensor::from_slice(&[1.0f64, 0.5, -0.5, 0.0]).view([1, 4]);
    let (ls, lt) = (
        s.log_softmax(-1, Kind::Double),
        t.log_softmax(-1, Kind::Double),
    );
    let kl = |p: &Tensor, q: &Tensor| (p.exp() * (p - q)).sum(Kind::Double).double_value(&[]);
    let per_token = |beta: f64| {
        jsd_elements(&s, &t, &Jsd::new(beta, 1.0).unwrap())
            .sum(Kind::Double)
            .double_value(&[])
    };
    assert!((per_token(0.0) - kl(&lt, &ls)).abs() < 1e-12);
    assert!((per_token(1.0) - kl(&ls, &lt)).abs() < 1e-12);
    assert!(
        (kl(&lt, &ls) - kl(&ls, &lt)).abs() > 1e-3,
        "the two directions differ here"
    );
    assert!(Jsd::new(1.5, 1.0).is_err() && Jsd::new(0.5, 0.0).is_err());
}
