//! The tensor side of on-policy distillation (`train-distill`): completions sampled from a
//! model, and the distillation step, a student's full-vocabulary logits against a frozen
//! teacher's on the same `prompt ++ completion` tokens through `loss::distill` (TRL's
//! generalised JSD), then one optimizer step. Functions take token ids and return numbers.
//!
//! As TRL's `DistillationTrainer`, the loss is the per-token divergence summed over the
//! step's completion tokens and divided by their count (its `sum / num_items_in_batch`), and
//! the logits are read only at completion positions. Rows run in micro-batches of
//! [`Memory`]'s token budget; each micro-batch's sum is divided by the whole step's token
//! count, so the gradient does not depend on the split.

use anyhow::{bail, Result};
use serde::Serialize;
use tch::{Kind, Tensor};

use crate::model::batch::SequenceBatch;
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::model::transformer::Transformer;
use crate::sample::{generate_with, Completion, GenerateHooks, RowRng, SamplingParams};
use crate::train::loss::distill::{jsd_per_token, Jsd};
use crate::train::optim::GradStep;
use crate::train::preference::{Figures, Update};

/// A step's rows: token-id prompts and one completion each (sampled or from the data).
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub prompts: &'a [Vec<i64>],
    pub completions: &'a [Vec<i64>],
    pub pad: i64,
}

/// What a distillation pass measured (per completion token, over the rows).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Divergences {
    /// The trained divergence (β, temperature), mean per completion token.
    pub divergence: f64,
    /// KL(student‖teacher) at temperature 1, mean per completion token (detached).
    pub reverse_kl: f64,
    /// KL(teacher‖student) at temperature 1, mean per completion token (detached).
    pub forward_kl: f64,
    /// The student's entropy (nats) at temperature 1, mean per completion token.
    pub entropy: f64,
    /// Completion tokens scored.
    pub tokens: usize,
}

/// Samples one completion per prompt from `policy` with per-row noise keyed by `seed`
/// ([`RowRng`]), so the same seed draws the same tokens whatever the batch (a resumed run
/// samples what an uninterrupted one did).
pub fn sample(
    policy: &Policy,
    prompts: &[Vec<i64>],
    params: &SamplingParams,
    pad: i64,
    seed: u64,
) -> Vec<Completion> {
    let mut hooks = GenerateHooks {
        row_rng: Some(RowRng {
            seed,
            row_offset: 0,
        }),
        ..GenerateHooks::default()
    };
    generate_with(
        &policy.model,
        prompts,
        params,
        pad,
        policy.device(),
        &mut hooks,
    )
}

/// The float32 logits `[n, V]` of `model` at the positions that predict `batch`'s completion
/// tokens, in row-major order (the same order for student and teacher).
fn completion_logits(model: &Transformer, batch: &SequenceBatch) -> Tensor {
    let hidden = model.hidden(&batch.input(), None);
    let (rows, width, h) = {
        let s = hidden.size();
        (s[0], s[1], s[2])
    };
    let idx = batch.loss_mask.gt(0.5).view([-1]).nonzero().squeeze_dim(1);
    let picked = hidden
        .narrow(1, 0, width - 1)
        .reshape([rows * (width - 1), h])
        .index_select(0, &idx);
    model.logits(&picked).to_kind(Kind::Float)
}

/// Sums over one micro-batch: the trained divergence (with gradient when the student's
/// logits have one), and the detached figures.
struct Sums {
    divergence: Tensor,
    reverse_kl: f64,
    forward_kl: f64,
    entropy: f64,
    tokens: usize,
}

/// The divergence sums of `student` against `teacher` on `rows` (the teacher without
/// gradient, the student with gradient unless `tch::no_grad` is active).
fn sums(student: &Policy, teacher: &Policy, rows: &Rows, jsd: &Jsd) -> Result<Sums> {
    let device = student.device();
    let p: Vec<&[i64]> = rows.prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = rows.completions.iter().map(Vec::as_slice).collect();
    let batch = SequenceBatch::new(&p, &c, rows.pad, device);
    let s = completion_logits(&student.model, &batch);
    let t = tch::no_grad(|| completion_logits(&teacher.model, &batch));
    if s.size() != t.size() {
        bail!(
            "the student's logits are {:?} but the teacher's {:?}: they must share the vocabulary",
            s.size(),
            t.size()
        );
    }
    Ok(Sums::of(&s, |logits, j| jsd_per_token(logits, &t, j), jsd))
}

impl Sums {
    /// The sums of the student's completion logits `s` under `per_token` (the per-token
    /// divergence of logits from the teacher under a [`Jsd`]): the trained one with `jsd`,
    /// the detached reverse and forward KL at temperature 1, and the student's entropy.
    fn of(s: &Tensor, per_token: impl Fn(&Tensor, &Jsd) -> Tensor, jsd: &Jsd) -> Sums {
        let divergence = per_token(s, jsd).sum(Kind::Float);
        let (reverse_kl, forward_kl, entropy) = tch::no_grad(|| {
            let s = s.detach();
            let total = |x: Tensor| x.sum(Kind::Double).double_value(&[]);
            let ls = s.log_softmax(-1, Kind::Float);
            let entropy = -(ls.exp() * &ls).sum_dim_intlist(-1, false, Kind::Float);
            (
                total(per_token(&s, &Jsd::reverse_kl())),
                total(per_token(&s, &Jsd::new(0.0, 1.0).expect("valid"))),
                total(entropy),
            )
        });
        Sums {
            divergence,
            reverse_kl,
            forward_kl,
            entropy,
            tokens: s.size()[0] as usize,
        }
    }
}

/// The rows of `rows` in micro-batches under `memory`'s token budget (all at once without one).
fn microbatches(rows: &Rows, memory: &Memory) -> Vec<Vec<usize>> {
    let ids: Vec<i64> = (0..rows.prompts.len() as i64).collect();
    let lens: Vec<usize> = rows
        .prompts
        .iter()
        .zip(rows.completions)
        .map(|(p, c)| p.len() + c.len())
        .collect();
    memory
        .microbatches(&ids, &lens)
        .into_iter()
        .map(|mb| mb.into_iter().map(|i| i as usize).collect())
        .collect()
}

/// Where a step's teacher scores come from.
#[derive(Clone, Copy)]
pub enum Teacher<'a> {
    /// A frozen model: full-vocabulary logits.
    Model(&'a Policy),
    /// Top-k log-probs per completion token (a remote engine's, [`TopKRows`]), the missing mass
    /// as one tail entry (`add_tail`) or renormalised.
    TopK {
        scores: TopKRows<'a>,
        add_tail: bool,
    },
}

/// The divergence sums of `student` against `teacher` on the rows `idx` of `rows`.
fn part_sums(
    student: &Policy,
    teacher: Teacher,
    rows: &Rows,
    idx: &[usize],
    jsd: &Jsd,
) -> Result<Sums> {
    let pick = |v: &[Vec<i64>]| -> Vec<Vec<i64>> { idx.iter().map(|&i| v[i].clone()).collect() };
    let (p, c) = (pick(rows.prompts), pick(rows.completions));
    let part = Rows {
        prompts: &p,
        completions: &c,
        pad: rows.pad,
    };
    match teacher {
        Teacher::Model(t) => sums(student, t, &part, jsd),
        Teacher::TopK { scores, add_tail } => {
            let mine: Vec<_> = idx
                .iter()
                .map(|&i| scores.get(i).cloned().unwrap_or_default())
                .collect();
            topk_sums(student, &mine, &part, jsd, add_tail)
        }
    }
}

/// Completion tokens the loss reads in `rows` (the first token of a row without a prompt is
/// not predicted).
fn target_tokens(rows: &Rows) -> usize {
    rows.prompts
        .iter()
        .zip(rows.completions)
        .map(|(p, c)| c.len() - usize::from(p.is_empty() && !c.is_empty()))
        .sum()
}

/// One distillation step: the divergence of the student (`u.policy`) from `teacher` on `rows`,
/// token-mean over the step, backpropagated (micro-batch by micro-batch) and one optimizer
/// step. Data-parallel updates are not supported.
pub fn step(
    u: Update,
    teacher: Teacher,
    rows: Rows,
    jsd: &Jsd,
) -> Result<(Figures<Divergences>, GradStep)> {
    if u.dp.is_some() {
        bail!("distillation runs in one process; start it without torchrun");
    }
    let total = target_tokens(&rows).max(1) as f64;
    let mut acc = Accumulated::default();
    for idx in microbatches(&rows, &u.memory) {
        let s = part_sums(u.policy, teacher, &rows, &idx, jsd)?;
        let loss = &s.divergence / total;
        if loss.requires_grad() {
            loss.backward();
        }
        acc.add(&s);
    }
    let g = u.opt.clip_and_step(u.max_grad_norm, u.lr);
    let d = acc.figures();
    Ok((
        Figures {
            loss: d.divergence,
            metrics: d,
        },
        g,
    ))
}

/// The divergences of `student` from `teacher` on `rows`, without gradient, in micro-batches
/// of `memory`'s budget: the held-out figures.
pub fn evaluate(
    student: &Policy,
    teacher: Teacher,
    rows: Rows,
    jsd: &Jsd,
    memory: &Memory,
) -> Result<Divergences> {
    tch::no_grad(|| {
        let mut acc = Accumulated::default();
        for idx in microbatches(&rows, memory) {
            acc.add(&part_sums(student, teacher, &rows, &idx, jsd)?);
        }
        Ok(acc.figures())
    })
}

/// Micro-batch sums added up.
#[derive(Default)]
struct Accumulated {
    divergence: f64,
    reverse_kl: f64,
    forward_kl: f64,
    entropy: f64,
    tokens: usize,
}

impl Accumulated {
    fn add(&mut self, s: &Sums) {
        self.divergence += s.divergence.detach().double_value(&[]);
        self.reverse_kl += s.reverse_kl;
        self.forward_kl += s.forward_kl;
        self.entropy += s.entropy;
        self.tokens += s.tokens;
    }

    /// Per-token means.
    fn figures(&self) -> Divergences {
        let n = self.tokens.max(1) as f64;
        Divergences {
            divergence: self.divergence / n,
            reverse_kl: self.reverse_kl / n,
            forward_kl: self.forward_kl / n,
            entropy: self.entropy / n,
            tokens: self.tokens,
        }
    }
}

/// A teacher known only by its top-k log-probs at each completion token (a remote engine's
/// vLLM-style `prompt_logprobs`): per row, per completion token, `(id, log-prob)` pairs.
pub type TopKRows<'a> = &'a [Vec<Vec<(i64, f32)>>];

/// The owned form of [`TopKRows`]: per row, per completion token, `(id, log-prob)` pairs.
pub type TopKScores = Vec<Vec<Vec<(i64, f32)>>>;

/// The top-k teacher of `rows` as `[n, K]` log-probs (`-inf` padding) and ids, in the order of
/// `completion_logits`' positions.
fn topk_tensors(teacher: TopKRows, rows: &Rows, device: tch::Device) -> Result<(Tensor, Tensor)> {
    let k = teacher
        .iter()
        .flatten()
        .map(Vec::len)
        .max()
        .unwrap_or(1)
        .max(1);
    let (mut lps, mut ids) = (vec![], vec![]);
    for (i, (p, c)) in rows.prompts.iter().zip(rows.completions).enumerate() {
        let skip = usize::from(p.is_empty() && !c.is_empty());
        let row = teacher.get(i).map(Vec::as_slice).unwrap_or(&[]);
        if row.len() != c.len() {
            bail!(
                "row {i}: the teacher scored {} completion tokens, the completion has {}",
                row.len(),
                c.len()
            );
        }
        for pos in &row[skip..] {
            for j in 0..k {
                let (id, lp) = pos.get(j).copied().unwrap_or((0, f32::NEG_INFINITY));
                ids.push(id);
                lps.push(lp);
            }
        }
    }
    let n = (lps.len() / k) as i64;
    Ok((
        Tensor::from_slice(&lps)
            .view([n, k as i64])
            .to_device(device),
        Tensor::from_slice(&ids)
            .view([n, k as i64])
            .to_device(device),
    ))
}

/// The divergence sums of `student` against a top-k `teacher` on `rows` (over the teacher's
/// support plus the bucket of its missing mass with `add_tail`, else renormalised); the
/// reverse and forward KL are taken over the same support.
fn topk_sums(
    student: &Policy,
    teacher: TopKRows,
    rows: &Rows,
    jsd: &Jsd,
    add_tail: bool,
) -> Result<Sums> {
    use crate::train::loss::distill::{topk_elements, TopK};
    let device = student.device();
    let p: Vec<&[i64]> = rows.prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = rows.completions.iter().map(Vec::as_slice).collect();
    let batch = SequenceBatch::new(&p, &c, rows.pad, device);
    let s = completion_logits(&student.model, &batch);
    let (logprobs, ids) = topk_tensors(teacher, rows, device)?;
    let t = TopK {
        logprobs: &logprobs,
        ids: &ids,
    };
    let per_token = |logits: &Tensor, j: &Jsd| {
        topk_elements(logits, &t, j, add_tail).sum_dim_intlist(-1, false, Kind::Float)
    };
    Ok(Sums::of(&s, per_token, jsd))
}
