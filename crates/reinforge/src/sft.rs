//! The SFT warm-start: reference solutions in a mixture of the task's patterns.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reinforge_tasks::{tokenizer::EOS, ArithTask, Pattern, Split};
use reinforge_torch::tch::Device;
use reinforge_torch::train::{sft_step, SftStats};
use reinforge_torch::{AdamW, Policy, SequenceBatch};
use serde::Serialize;

use crate::config::{SftConfig, TaskConfig};
use crate::rollout::encode_prompt;
use crate::seeds::{step_seed, PHASE_SFT};

/// One line of `sft_metrics.jsonl`.
#[derive(Debug, Serialize)]
pub struct SftLine {
    pub step: usize,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub tokens: f64,
}

/// Learning rate at `step`: linear warm-up, then cosine decay to 10% of the peak.
pub fn lr_at(cfg: &SftConfig, step: usize) -> f64 {
    if step < cfg.warmup_steps {
        return cfg.lr * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let span = (cfg.steps - cfg.warmup_steps).max(1) as f64;
    let progress = ((step - cfg.warmup_steps) as f64 / span).min(1.0);
    cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// The SFT batch of `step`: training problems, each written in the direct pattern with
/// probability `direct_share`, else in the columns pattern.
pub fn sft_batch(
    task_cfg: &TaskConfig,
    batch_size: usize,
    seed: u64,
    step: usize,
    device: Device,
) -> SequenceBatch {
    let task = ArithTask::new(task_cfg.digits);
    let tok = ArithTask::tokenizer();
    let mut rng = ChaCha8Rng::seed_from_u64(step_seed(seed, PHASE_SFT, step as u64));
    let mut prompts = Vec::with_capacity(batch_size);
    let mut completions = Vec::with_capacity(batch_size);
    for _ in 0..batch_size {
        let p = task.sample(&mut rng, Split::Train);
        let pattern = if rng.gen_bool(task_cfg.direct_share) {
            Pattern::Direct
        } else {
            Pattern::Columns
        };
        let mut c = tok
            .encode(&task.completion(&p, pattern))
            .expect("task alphabet");
        c.push(EOS);
        prompts.push(encode_prompt(&task, &p));
        completions.push(c);
    }
    let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
    SequenceBatch::new(&p, &c, reinforge_tasks::tokenizer::PAD, device)
}

/// Runs SFT step `step` and returns its metrics line.
pub fn run_step(
    policy: &Policy,
    opt: &mut AdamW,
    cfg: &SftConfig,
    task: &TaskConfig,
    seed: u64,
    step: usize,
) -> SftLine {
    let batch = sft_batch(task, cfg.batch_size, seed, step, policy.device());
    let lr = lr_at(cfg, step);
    let SftStats {
        loss,
        grad_norm,
        tokens,
        ..
    } = sft_step(policy, opt, &batch, lr, cfg.max_grad_norm);
    SftLine {
        step,
        loss,
        grad_norm,
        lr,
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_a_tenth() {
        let cfg = SftConfig {
            steps: 100,
            batch_size: 1,
            lr: 1.0,
            warmup_steps: 10,
            max_grad_norm: 1.0,
            weight_decay: 0.0,
            checkpoint_every: 0,
        };
        assert!((lr_at(&cfg, 0) - 0.1).abs() < 1e-12);
        assert!((lr_at(&cfg, 10) - 1.0).abs() < 1e-12);
        assert!((lr_at(&cfg, 100) - 0.1).abs() < 1e-12);
        assert!(lr_at(&cfg, 50) < lr_at(&cfg, 20));
    }
}
