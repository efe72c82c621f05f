//! `train-dpo`: offline preference optimisation of a Hugging Face checkpoint with TRL's DPO
//! family, through the one trainer. Reference log-probs are computed once, before training,
//! from the starting model (TRL's `precompute_ref_log_probs`) and kept in the run directory,
//! so no frozen copy is kept and a resumed run uses the same ones.

use anyhow::Result;
use reinforge_torch::train::loss::dpo::{DpoConfig, PairMetrics};
use reinforge_torch::train::preference::dpo::{self, DpoData, PairRefs};
use reinforge_torch::{Memory, Policy};
use serde::Serialize;

use super::{start_run, update, OfflineOptions};
use crate::pairs::{read_pairs, step_rows, Pairs};
use reinforge_train::run_dir::read_json;
use reinforge_train::trainer::{StepLog, Trainer};

/// `train-dpo`'s settings: the common ones and TRL's loss settings.
#[derive(Debug, Clone)]
pub struct DpoOptions {
    pub common: OfflineOptions,
    pub loss: DpoConfig,
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct DpoLine {
    pub step: usize,
    pub loss: f64,
    #[serde(flatten)]
    pub pair: PairMetrics,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl StepLog for DpoLine {
    fn bar_message(&self) -> String {
        format!(
            "loss {:.4} acc {:.2}",
            self.loss, self.pair.rewards_accuracies
        )
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// Held-out figures (`report.json`).
#[derive(Debug, Serialize)]
struct Heldout {
    pairs: usize,
    /// Share of pairs where the policy's implicit reward prefers the chosen completion
    /// (β·log-ratio, against the starting model); 0 before training by construction of ties.
    rewards_accuracies: f64,
    rewards_margins: f64,
    /// Mean summed log-prob of the chosen completions.
    logps_chosen: f64,
}

/// The held-out figures of `policy` on `data`.
fn evaluate(
    policy: &Policy,
    data: DpoData,
    cfg: &DpoConfig,
    passes: (usize, &Memory),
) -> Result<Heldout> {
    let m = dpo::evaluate(policy, data, cfg, passes)?.metrics;
    Ok(Heldout {
        pairs: data.pairs.len(),
        rewards_accuracies: m.rewards_accuracies,
        rewards_margins: m.rewards_margins,
        logps_chosen: m.logps_chosen,
    })
}

/// Runs `train-dpo`.
pub fn train(o: &DpoOptions) -> Result<()> {
    let common = &o.common;
    let model = common.model.load()?;
    let pad = model.pad_id();
    let (train, heldout) = common.read_data(|p| read_pairs(p, &model, common.raw))?;
    let offline = start_run(&common.output, model.policy.device())?;
    // The passes without gradient: the step's memory settings, blocks of a step's pairs.
    let passes = (common.batch_size, &common.memory);
    let refs_path = offline.dir.path("reference_logps.json");
    let refs: PairRefs = if refs_path.exists() {
        read_json(&refs_path)?
    } else {
        let r = dpo::reference_logps(&model.policy, &train, pad, passes);
        offline.write_json("reference_logps.json", &r)?;
        r
    };
    // The held-out pairs with their reference log-probs from the starting model.
    let heldout: Option<(Pairs, PairRefs)> = heldout.map(|h| {
        let r = dpo::reference_logps(&model.policy, &h, pad, passes);
        (h, r)
    });
    let eval = |policy: &Policy| -> Result<Option<Heldout>> {
        heldout
            .as_ref()
            .map(|(pairs, refs)| evaluate(policy, DpoData { pairs, refs, pad }, &o.loss, passes))
            .transpose()
    };
    let before = eval(&model.policy)?;
    let data = DpoData {
        pairs: &train,
        refs: &refs,
        pad,
    };
    let step = |t: &mut Trainer, rows: &[usize]| {
        let (f, g) = dpo::step(update(t, common), data, rows, &o.loss)?;
        Ok(DpoLine {
            step: t.state.step,
            loss: f.loss,
            pair: f.metrics,
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    };
    let rows = |step| step_rows(train.len(), common.batch_size, common.seed, step);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = eval(&policy)?;
    let (loss_type, _) = o.loss.losses[0];
    let report = serde_json::json!({"loss_type": loss_type, "beta": o.loss.beta, "steps": common.steps,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}
