//! The policy update's exact savings (trimming mini-batches, skipping zero-advantage rows)
//! give the same parameters as running every row at full width.

use reinforge_torch::loss::PpoClip;
use reinforge_torch::tch::Device;
use reinforge_torch::train::{policy_update, RolloutBatch, UpdateConfig};
use reinforge_torch::{AdamW, AdamWConfig, ModelConfig, Policy, SequenceBatch};

fn tiny() -> ModelConfig {
    serde_json::from_value(serde_json::json!({
        "vocab_size": 11, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": true
    }))
    .unwrap()
}

fn run(skip: bool, advantages: &[f32]) -> (Policy, f64) {
    let policy = Policy::new(&tiny(), Device::Cpu, 7).unwrap();
    let mut opt = AdamW::new(
        &policy.vs,
        AdamWConfig {
            lr: 1e-2,
            ..Default::default()
        },
    );
    // Completions of very different lengths, so trimming changes the mini-batch widths.
    let prompts: Vec<Vec<i64>> = (0..8).map(|i| vec![1, 3 + i % 4, 4]).collect();
    let completions: Vec<Vec<i64>> = (0..8)
        .map(|i| {
            (0..(1 + 3 * i as i64 % 10))
                .map(|t| 3 + (t + i as i64) % 8)
                .collect()
        })
        .collect();
    let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
    let seqs = SequenceBatch::new(&p, &c, 0, Device::Cpu);
    let old: Vec<Vec<f32>> = completions
        .iter()
        .map(|c| c.iter().map(|_| -2.0).collect())
        .collect();
    let batch = RolloutBatch {
        old_logp: seqs.completion_values(&old),
        seqs,
        ref_logp: None,
        advantages: advantages.to_vec(),
    };
    let cfg = UpdateConfig {
        clip: PpoClip {
            epsilon_low: 0.2,
            epsilon_high: 0.28,
        },
        beta: 0.0,
        entropy_coef: 0.0,
        epochs: 2,
        mini_batches: 2,
        lr: 1e-2,
        max_grad_norm: 1.0,
        temperature: 1.0,
        skip_zero_advantage: skip,
    };
    let orders = vec![vec![0, 5, 2, 7, 1, 3, 6, 4], vec![3, 1, 4, 0, 2, 7, 5, 6]];
    let stats = policy_update(&policy, &mut opt, &batch, &cfg, &orders);
    (policy, stats.loss)
}

fn max_param_diff(a: &Policy, b: &Policy) -> f64 {
    let (va, vb) = (a.vs.variables(), b.vs.variables());
    va.iter()
        .map(|(k, t)| (t - &vb[k]).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

#[test]
fn skipping_zero_advantage_rows_is_exact() {
    // Rows 0, 5 and 2 (the whole first mini-batch of pass 1 but one row) have zero advantage.
    let adv = [0.0, 1.0, 0.0, -1.0, 0.5, 0.0, -0.5, 0.0];
    let (full, loss_full) = run(false, &adv);
    let (skipped, loss_skipped) = run(true, &adv);
    assert!(
        max_param_diff(&full, &skipped) < 1e-6,
        "parameters differ by {}",
        max_param_diff(&full, &skipped)
    );
    assert!((loss_full - loss_skipped).abs() < 1e-6);
    // The update did something (so the comparison is not vacuous).
    let untouched = Policy::new(&tiny(), Device::Cpu, 7).unwrap();
    assert!(max_param_diff(&full, &untouched) > 1e-4);
}

#[test]
fn all_zero_advantages_still_step_the_optimizer_like_a_full_pass() {
    let adv = [0.0; 8];
    let (full, _) = run(false, &adv);
    let (skipped, _) = run(true, &adv);
    assert!(max_param_diff(&full, &skipped) < 1e-7);
}
