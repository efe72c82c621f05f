//! The memory tools (micro-batches under a token budget, activation checkpointing,
//! padding-free packing) leave every result unchanged on real checkpoint layouts (the fixture
//! models): three SFT steps give the plain path's parameters, and the log-prob passes before
//! an update its log-probs.

use reinforge_torch::logprobs::{token_logprobs_in_microbatches, token_logprobs_with, Entropy};
use reinforge_torch::sft::sft_step;
use reinforge_torch::tch::Device;
use reinforge_torch::{AdamW, AdamWConfig, Memory, Policy, SequenceBatch};

mod hf_support;

/// Rows of different lengths in the fixture's vocabulary.
fn batch() -> SequenceBatch {
    let prompts: Vec<Vec<i64>> = (0..6).map(|i| vec![1, 5 + i, 9]).collect();
    let completions: Vec<Vec<i64>> = (0..6)
        .map(|i| {
            (0..(2 + 5 * i % 13))
                .map(|t| 3 + (7 * t + i) % 40)
                .collect()
        })
        .collect();
    let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
    SequenceBatch::new(&p, &c, 0, Device::Cpu)
}

/// The fixture Llama after three SFT steps on [`batch`] under `memory` (AdamW at 1e-3: its
/// first steps move every weight by about the rate, whatever the gradient's size).
fn trained(memory: Memory) -> Policy {
    let policy = Policy::load(&hf_support::fixture("llama"), Device::Cpu).unwrap();
    let mut opt = AdamW::new(
        &policy.vs,
        AdamWConfig {
            lr: 1e-3,
            ..Default::default()
        },
    );
    let b = batch();
    for _ in 0..3 {
        sft_step(&policy, &mut opt, &b, (1e-3, 1.0), &memory, None).unwrap();
    }
    policy
}

fn max_param_diff(a: &Policy, b: &Policy) -> f64 {
    let (va, vb) = (a.vs.variables(), b.vs.variables());
    va.iter()
        .map(|(k, t)| (t - &vb[k]).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

#[test]
fn sft_with_microbatches_and_checkpointing_equals_the_plain_path() {
    let plain = trained(Memory::default());
    let start = Policy::load(&hf_support::fixture("llama"), Device::Cpu).unwrap();
    assert!(max_param_diff(&plain, &start) > 1e-3, "the steps trained");
    let budget = Memory {
        max_tokens_per_microbatch: 30,
        ..Memory::default()
    };
    let rows: Vec<i64> = (0..6).collect();
    assert!(budget.microbatches(&rows, batch().row_lens()).len() >= 3);
    for memory in every_combination(30) {
        let d = max_param_diff(&plain, &trained(memory));
        assert!(d < 1e-5, "{memory:?}: parameters differ by {d}");
    }
}

/// Every combination of a `budget` (tokens), checkpointing and packing but all off.
fn every_combination(budget: usize) -> Vec<Memory> {
    (1..8)
        .map(|bits: u8| Memory {
            max_tokens_per_microbatch: if bits & 1 != 0 { budget } else { 0 },
            gradient_checkpointing: bits & 2 != 0,
            padding_free: bits & 4 != 0,
        })
        .collect()
}

/// Packed rows see only their own tokens: log-probs and entropies equal the padded rows' on
/// every fixture family, Mistral's 8-token sliding window included (rows up to 17 tokens).
#[test]
fn packed_rows_give_the_padded_rows_log_probs() {
    let _guard = reinforge_torch::tch::no_grad_guard();
    let b = batch();
    assert!(
        b.row_lens().iter().any(|&l| l > 8),
        "rows longer than the window"
    );
    let packed = Memory {
        padding_free: true,
        ..Memory::default()
    };
    for family in ["llama", "mistral", "qwen2", "qwen3"] {
        let policy = Policy::load(&hf_support::fixture(family), Device::Cpu).unwrap();
        let (logp, ent) = token_logprobs_with(&policy.model, &b, 1.0, Entropy::Detached);
        let (lp2, ent2) =
            token_logprobs_in_microbatches(&policy.model, &b, (1.0, Entropy::Detached), &packed);
        let d = (&logp - &lp2).abs().max().double_value(&[]);
        let de = (&ent - &ent2).abs().max().double_value(&[]);
        assert!(
            d < 1e-5 && de < 1e-5,
            "{family}: log-probs differ by {d}, entropies by {de}"
        );
        let total = logp
            .abs()
            .sum(reinforge_torch::Kind::Float)
            .double_value(&[]);
        assert!(total > 1.0, "{family}: log-probs were computed");
    }
}

#[test]
fn logprob_passes_in_microbatches_equal_one_pass() {
    let policy = Policy::load(&hf_support::fixture("llama"), Device::Cpu).unwrap();
    let b = batch();
    let _guard = reinforge_torch::tch::no_grad_guard();
    let (logp, ent) = token_logprobs_with(&policy.model, &b, 0.7, Entropy::Detached);
    for memory in every_combination(30) {
        let (lp2, ent2) =
            token_logprobs_in_microbatches(&policy.model, &b, (0.7, Entropy::Detached), &memory);
        assert_eq!(logp.size(), lp2.size());
        let d = (&logp - &lp2).abs().max().double_value(&[]);
        let de = (&ent - &ent2).abs().max().double_value(&[]);
        assert!(
            d < 1e-5 && de < 1e-5,
            "{memory:?}: log-probs differ by {d}, entropies by {de}"
        );
    }
    assert!(
        logp.abs()
            .sum(reinforge_torch::Kind::Float)
            .double_value(&[])
            > 1.0
    );
}
