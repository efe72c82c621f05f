//! ORPO's forward pass and step (`train-orpo`): one forward pass per step reads both things
//! TRL's ORPO needs, the completions' log-probs (the odds ratio) and the chosen sequences'
//! log-probs over prompt and completion (the NLL term); the loss is [`crate::train::loss::orpo`].

use anyhow::Result;
use tch::{Kind, Tensor};

use super::{lengths_of, token_logps, Deferred, Figures, Forward, Pairs, Share, Stepped, Update};
use crate::model::batch::SequenceBatch;
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::loss::dpo::PairMetrics;
use crate::train::loss::orpo::{orpo_loss, OrpoBatch, OrpoOutput};

/// What ORPO logs besides its loss, under TRL's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrpoMetrics {
    pub pair: PairMetrics,
    pub nll_loss: f64,
    pub log_odds_ratio: f64,
    pub log_odds_chosen: f64,
}

/// The per-pair sums ORPO reads, from one forward pass.
struct OrpoTensors {
    chosen: Tensor,
    rejected: Tensor,
    len_c: Tensor,
    len_r: Tensor,
    full: Tensor,
    full_len: Tensor,
}

impl OrpoTensors {
    /// Reads `rows` of `pairs` through `fwd`. The chosen rows are packed with only their first
    /// token as "prompt", so the per-token log-probs cover every token TRL's NLL counts; the
    /// completion sums use the usual prompt/completion split of the same ids.
    fn read(fwd: &Forward, pairs: &Pairs, rows: &[usize], pad: i64) -> Self {
        let (prompts, completions) = pairs.sides(rows);
        let b = rows.len();
        let seqs: Vec<Vec<i64>> = prompts
            .iter()
            .zip(&completions)
            .map(|(p, c)| [*p, *c].concat())
            .collect();
        // Chosen rows: everything after the first token is scored; rejected rows as usual.
        let heads: Vec<&[i64]> = (0..2 * b)
            .map(|i| if i < b { &seqs[i][..1] } else { prompts[i] })
            .collect();
        let tails: Vec<&[i64]> = (0..2 * b)
            .map(|i| if i < b { &seqs[i][1..] } else { completions[i] })
            .collect();
        let (logp, forward) = token_logps(fwd, &heads, &tails, pad);
        let split = SequenceBatch::new(&prompts, &completions, pad, fwd.device());
        let sum = |mask: &Tensor| (&logp * mask).sum_dim_intlist(1, false, Kind::Float);
        let completion = sum(&split.loss_mask);
        let full = sum(&forward.loss_mask);
        let b = b as i64;
        Self {
            chosen: completion.narrow(0, 0, b),
            rejected: completion.narrow(0, b, b),
            len_c: lengths_of(&completions[..rows.len()]),
            len_r: lengths_of(&completions[rows.len()..]),
            full: full.narrow(0, 0, b),
            full_len: lengths_of(&tails[..rows.len()]),
        }
    }

    /// [`Self::read`] of a step's `rows` across data-parallel ranks: each reads its share and
    /// the per-pair sums are gathered (lengths come from the rows themselves).
    fn read_shared<'a>(
        policy: &'a Policy,
        pairs: &'a Pairs,
        rows: &[usize],
        pad: i64,
        share: &Share,
    ) -> Result<(Self, Deferred<'a>)> {
        let tokens = |r| pairs.tokens(r);
        let (mut sums, deferred) =
            share.read_deferred(policy, rows, 3, tokens, move |local, fwd| {
                let t = Self::read(fwd, pairs, local, pad);
                vec![t.chosen, t.rejected, t.full]
            })?;
        let whole = |side: &[Vec<i64>]| -> Tensor {
            lengths_of(&rows.iter().map(|&r| side[r].as_slice()).collect::<Vec<_>>())
        };
        let full_len: Vec<f32> = rows
            .iter()
            .map(|&r| (pairs.prompts[r].len() + pairs.chosen[r].len()).saturating_sub(1) as f32)
            .collect();
        let full = sums.pop().unwrap_or_default();
        let rejected = sums.pop().unwrap_or_default();
        let chosen = sums.pop().unwrap_or_default();
        let sums = Self {
            chosen,
            rejected,
            len_c: whole(&pairs.chosen),
            len_r: whole(&pairs.rejected),
            full,
            // host: lengths; orpo_loss moves them to the log-probs' device.
            full_len: Tensor::from_slice(&full_len),
        };
        Ok((sums, deferred))
    }

    /// ORPO's loss of these sums.
    fn loss(&self, beta: f64) -> Result<OrpoOutput> {
        orpo_loss(
            beta,
            &OrpoBatch {
                chosen_logps: &self.chosen,
                rejected_logps: &self.rejected,
                chosen_lengths: &self.len_c,
                rejected_lengths: &self.len_r,
                chosen_full_logps: &self.full,
                chosen_full_lengths: &self.full_len,
            },
        )
    }
}

/// The loss value and metrics of `out`.
fn figures(out: &OrpoOutput) -> Figures<OrpoMetrics> {
    Figures {
        loss: out.loss.double_value(&[]),
        metrics: OrpoMetrics {
            pair: out.metrics,
            nll_loss: out.nll_loss,
            log_odds_ratio: out.log_odds_ratio,
            log_odds_chosen: out.log_odds_chosen,
        },
    }
}

/// ORPO's loss and metrics on every pair of `pairs`, without gradients, read in the
/// micro-batches of `memory`'s token budget (one pass without one) and packed as it says.
pub fn evaluate(
    policy: &Policy,
    pairs: &Pairs,
    beta: f64,
    (pad, memory): (i64, &Memory),
) -> Result<Figures<OrpoMetrics>> {
    let _guard = tch::no_grad_guard();
    let rows: Vec<usize> = (0..pairs.len()).collect();
    let share = Share {
        memory: *memory,
        ..Share::new(None, rows.len(), policy.device())
    };
    let (sums, _) = OrpoTensors::read_shared(policy, pairs, &rows, pad, &share)?;
    Ok(figures(&sums.loss(beta)?))
}

/// One optimizer step of ORPO with weight `beta` on `rows` of `pairs` (`pad`: the pad id).
pub fn step(
    up: Update,
    (pairs, pad): (&Pairs, i64),
    rows: &[usize],
    beta: f64,
) -> Result<Stepped<OrpoMetrics>> {
    let share = up.share(rows.len());
    let (sums, deferred) = OrpoTensors::read_shared(up.policy, pairs, rows, pad, &share)?;
    let out = sums.loss(beta)?;
    let grad = up.apply(&out.loss, deferred)?;
    Ok((figures(&out), grad))
}
