//! `train-distill`: on-policy distillation of a student checkpoint towards a frozen teacher
//! checkpoint, with TRL's losses (GKD, arXiv 2306.13649; trl 1.16's `GKDTrainer` and
//! `DistillationTrainer`), through the one trainer (`OfflineOptions::train`).
//!
//! Each step draws a batch of prompts; with probability `lmbda` the completions are the
//! student's own samples (on-policy), otherwise, as GKD's `training_step`, the teacher's
//! samples (`seq_kd`) or the data's `completion` column. The teacher scores the same tokens
//! without gradient and the student takes one optimizer step on the generalised JSD
//! (`reinforge_torch::train::distill::step`). The step's coin and sampling noise are seeded by
//! `(seed, step)`, so a resumed run draws what an uninterrupted one draws. Student and
//! teacher must share the tokenizer (the same vocabulary, id for id).

use std::path::Path;

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reinforge_tasks::read_records;
use reinforge_torch::train::distill::{self as tensor, Divergences, Rows, TopKScores};
use reinforge_torch::train::loss::distill::Jsd;
use reinforge_torch::{Policy, SamplingParams};
use serde::Serialize;

use super::distill_remote::RemoteTeacher;
use super::{start_run, update, OfflineOptions};
use crate::loaded::{encode_prompt, LoadedModel, ModelSource, PromptStyle};
use crate::pairs::{completion_field, prompt_columns, step_rows};
use reinforge_train::seeds::step_seed;
use reinforge_train::trainer::{StepLog, Trainer};

/// Seed streams of this trainer ([`step_seed`]'s `phase`), apart from the other phases'.
const COIN_SEEDS: u64 = 61;
const SAMPLE_SEEDS: u64 = 62;
const HELDOUT_SEEDS: u64 = 63;

/// `train-distill`'s settings: the common offline ones (`model` is the student) and
/// distillation's (TRL's `GKDConfig` names).
#[derive(Debug, Clone)]
pub struct DistillOptions {
    pub common: OfflineOptions,
    /// The teacher: a checkpoint (frozen) or an engine's top-k scores.
    pub teacher: Teacher,
    /// The divergence: β and temperature.
    pub jsd: Jsd,
    /// Probability that a step trains on the student's own samples.
    pub lmbda: f64,
    /// Off-policy steps train on the teacher's samples instead of the data's completions.
    pub seq_kd: bool,
    /// Sampling temperature and maximum new tokens (the stop ids are the student's).
    pub sampling: SamplingParams,
}

/// Where the teacher's scores come from.
#[derive(Debug, Clone)]
pub enum Teacher {
    /// A checkpoint loaded here: full-vocabulary logits.
    Local(ModelSource),
    /// An OpenAI-compatible engine's `prompt_logprobs` ([`super::distill_remote`]): the
    /// top-k loss (`loss::distill::topk_elements`), with the missing mass as one tail entry
    /// (`add_tail`, TRL's default) or renormalised.
    Remote {
        url: String,
        /// Served model name (empty: the engine's first).
        model: String,
        top_k: usize,
        add_tail: bool,
    },
}

/// Prompts (token ids) and, when the data has them, their completions.
#[derive(Debug, Clone)]
pub struct PromptRows {
    pub prompts: Vec<Vec<i64>>,
    pub completions: Option<Vec<Vec<i64>>>,
}

/// Reads `prompt` (text or messages) rows and the optional `completion` column (on every
/// row or none); errors name the file, row and field, and a row that cannot fit the model's
/// positions with `max_new_tokens` more.
pub fn read_prompt_rows(
    path: &Path,
    model: &LoadedModel,
    raw: bool,
    max_new_tokens: usize,
) -> Result<PromptRows> {
    let style = PromptStyle { raw, system: None };
    let max = model.max_positions();
    let (mut prompts, mut completions) = (vec![], vec![]);
    for (i, r) in read_records(path, &prompt_columns())?
        .into_iter()
        .enumerate()
    {
        let row = i + 1;
        let p = encode_prompt(&model.tokenizer, &r.prompt, &style)?.1;
        let c = match r.extra.get("completion") {
            None | Some(serde_json::Value::Null) => None,
            Some(_) => Some(completion_field(
                &r.extra,
                "completion",
                &model.tokenizer,
                (path, row),
            )?),
        };
        let longest = p.len() + max_new_tokens.max(c.as_ref().map_or(0, Vec::len));
        if longest > max {
            bail!(
                "{} row {row}: the prompt ({} tokens) and {} completion tokens exceed the \
                 model's {max} positions",
                path.display(),
                p.len(),
                longest - p.len()
            );
        }
        prompts.push(p);
        completions.push(c);
    }
    if prompts.is_empty() {
        bail!("{}: no prompts", path.display());
    }
    let given = completions.iter().filter(|c| c.is_some()).count();
    let completions = match given {
        0 => None,
        n if n == prompts.len() => Some(completions.into_iter().flatten().collect()),
        n => bail!(
            "{}: `completion` is set on {n} of {} rows; set it on every row or none",
            path.display(),
            prompts.len()
        ),
    };
    Ok(PromptRows {
        prompts,
        completions,
    })
}

/// Refuses a teacher whose tokenizer or vocabulary differs from the student's: the loss
/// compares next-token distributions id by id.
pub fn check_same_vocabulary(student: &LoadedModel, teacher: &LoadedModel) -> Result<()> {
    let (sv, tv) = (
        student.policy.model.config().vocab_size,
        teacher.policy.model.config().vocab_size,
    );
    if sv != tv {
        bail!(
            "the student has vocab_size {sv} but the teacher {tv}: distillation compares \
             next-token distributions id by id, so both need the same tokenizer and vocabulary"
        );
    }
    let (s, t) = (
        student.tokenizer.inner().get_vocab(true),
        teacher.tokenizer.inner().get_vocab(true),
    );
    if s != t {
        let differing = s.iter().filter(|(k, v)| t.get(*k) != Some(v)).count()
            + t.keys().filter(|k| !s.contains_key(*k)).count();
        bail!(
            "the student's tokenizer ({}) and the teacher's ({}) differ in {differing} tokens: \
             distillation needs the same tokenizer",
            student.tokenizer.dir().display(),
            teacher.tokenizer.dir().display()
        );
    }
    Ok(())
}

/// Where a step's completions came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Student,
    Teacher,
    Data,
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct DistillLine {
    pub step: usize,
    /// The trained divergence, mean per completion token.
    pub loss: f64,
    pub grad_norm: f64,
    /// 1 when the completions were the student's samples, else 0.
    pub on_policy: f64,
    /// Mean completion length (tokens).
    pub completion_length: f64,
    #[serde(flatten)]
    pub divergences: Divergences,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl StepLog for DistillLine {
    fn bar_message(&self) -> String {
        format!(
            "loss {:.4} kl {:.4}",
            self.loss, self.divergences.reverse_kl
        )
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// The teacher as a run reads it.
enum TeacherRef<'a> {
    Local(&'a Policy),
    Remote(&'a RemoteTeacher, bool),
}

/// The models and data a run reads.
struct Models<'a> {
    student_sampling: &'a SamplingParams,
    teacher: TeacherRef<'a>,
    pad: i64,
    /// The student's vocabulary: a remote teacher's ids must be below it.
    vocab: usize,
}

impl Models<'_> {
    /// A remote teacher's top-k scores of `rows`, checked against the student's vocabulary.
    fn remote_scores(&self, t: &RemoteTeacher, rows: &Rows) -> Result<TopKScores> {
        let scores = t.score(rows.prompts, rows.completions)?;
        if let Some(&(id, _)) = scores
            .iter()
            .flatten()
            .flatten()
            .find(|(id, _)| *id < 0 || *id as usize >= self.vocab)
        {
            bail!(
                "the teacher engine scored token id {id}, outside the student's vocabulary of {}: \
                 student and teacher must share the tokenizer",
                self.vocab
            );
        }
        Ok(scores)
    }

    /// The teacher of `rows` as reinforge-torch takes it: the local model, or the engine's
    /// top-k scores of the rows (fetched into `buf`).
    fn teacher<'s>(&'s self, rows: &Rows, buf: &'s mut TopKScores) -> Result<tensor::Teacher<'s>> {
        Ok(match &self.teacher {
            TeacherRef::Local(t) => tensor::Teacher::Model(t),
            TeacherRef::Remote(t, tail) => {
                *buf = self.remote_scores(t, rows)?;
                tensor::Teacher::TopK {
                    scores: buf,
                    add_tail: *tail,
                }
            }
        })
    }

    /// The held-out divergences of `student` on `rows`.
    fn evaluate(&self, student: &Policy, rows: Rows, o: &DistillOptions) -> Result<Divergences> {
        let mut buf = TopKScores::new();
        let teacher = self.teacher(&rows, &mut buf)?;
        tensor::evaluate(student, teacher, rows, &o.jsd, &o.common.memory)
    }
}

impl Models<'_> {
    /// Completions of `prompts` sampled from `policy` with noise keyed by `seed`.
    fn sample(&self, policy: &Policy, prompts: &[Vec<i64>], seed: u64) -> Vec<Vec<i64>> {
        tensor::sample(policy, prompts, self.student_sampling, self.pad, seed)
            .into_iter()
            .map(|c| c.tokens)
            .collect()
    }
}

/// The source of step `step`'s completions: GKD's coin (`random() <= lmbda` there; here a
/// seeded uniform in [0, 1) below `lmbda`, so `lmbda = 1` is always on-policy).
fn source(o: &DistillOptions, step: usize) -> Source {
    let coin: f64 =
        ChaCha8Rng::seed_from_u64(step_seed(o.common.seed, COIN_SEEDS, step as u64)).gen();
    if coin < o.lmbda {
        Source::Student
    } else if o.seq_kd {
        Source::Teacher
    } else {
        Source::Data
    }
}

/// The held-out figures of `student`: on the data's completions when the held-out rows have
/// them, else on `student`'s own samples (seeded, the same seed before and after training).
fn evaluate(
    student: &Policy,
    m: &Models,
    rows: &PromptRows,
    o: &DistillOptions,
) -> Result<Divergences> {
    let sampled;
    let completions = match &rows.completions {
        Some(c) => c,
        None => {
            sampled = m.sample(
                student,
                &rows.prompts,
                step_seed(o.common.seed, HELDOUT_SEEDS, 0),
            );
            &sampled
        }
    };
    let rows = Rows {
        prompts: &rows.prompts,
        completions,
        pad: m.pad,
    };
    m.evaluate(student, rows, o)
}

/// Runs `train-distill`.
pub fn train(o: &DistillOptions) -> Result<()> {
    let common = &o.common;
    if !(0.0..=1.0).contains(&o.lmbda) {
        bail!("lmbda must be in [0, 1], got {}", o.lmbda);
    }
    let student = common.model.load()?;
    let (local, remote) = match &o.teacher {
        Teacher::Local(source) => {
            let teacher = source.load()?;
            check_same_vocabulary(&student, &teacher)?;
            (Some(teacher), None)
        }
        Teacher::Remote {
            url,
            model,
            top_k,
            add_tail,
        } => {
            if o.seq_kd {
                bail!(
                    "--seq-kd samples from the teacher, which needs a local --teacher checkpoint"
                );
            }
            let t = RemoteTeacher::connect(url, model, *top_k, o.jsd.temperature)?;
            (None, Some((t, *add_tail)))
        }
    };
    let pad = student.pad_id();
    let sampling = SamplingParams {
        stop_tokens: student.stop_ids(),
        ..o.sampling.clone()
    };
    let n_new = sampling.max_new_tokens;
    let (train, heldout) =
        common.read_data(|p| read_prompt_rows(p, &student, common.raw, n_new))?;
    if o.lmbda < 1.0 && !o.seq_kd && train.completions.is_none() {
        bail!(
            "{}: with lmbda < 1 and no --seq-kd the off-policy steps train on the data's \
             completions, but the rows have no `completion` column",
            common.data.display()
        );
    }
    let offline = start_run(&common.output, student.policy.device())?;
    let models = Models {
        student_sampling: &sampling,
        teacher: match (&local, &remote) {
            (Some(t), _) => TeacherRef::Local(&t.policy),
            (None, Some((t, tail))) => TeacherRef::Remote(t, *tail),
            (None, None) => unreachable!("one teacher is set"),
        },
        pad,
        vocab: student.policy.model.config().vocab_size,
    };
    let eval = |policy: &Policy| -> Result<Option<Divergences>> {
        heldout
            .as_ref()
            .map(|h| evaluate(policy, &models, h, o))
            .transpose()
    };
    let before = eval(&student.policy)?;
    let step = |t: &mut Trainer, rows: &[usize]| {
        let k = t.state.step;
        let prompts: Vec<Vec<i64>> = rows.iter().map(|&r| train.prompts[r].clone()).collect();
        let seed = step_seed(common.seed, SAMPLE_SEEDS, k as u64);
        let src = source(o, k);
        let completions = match src {
            Source::Student => models.sample(t.policy, &prompts, seed),
            Source::Teacher => match models.teacher {
                TeacherRef::Local(t) => models.sample(t, &prompts, seed),
                TeacherRef::Remote(..) => unreachable!("refused before training"),
            },
            Source::Data => {
                let data = train.completions.as_ref().expect("checked before training");
                rows.iter().map(|&r| data[r].clone()).collect()
            }
        };
        let length = completions.iter().map(Vec::len).sum::<usize>() as f64;
        let batch = Rows {
            prompts: &prompts,
            completions: &completions,
            pad,
        };
        let mut buf = TopKScores::new();
        let teacher = models.teacher(&batch, &mut buf)?;
        let (f, g) = tensor::step(update(t, common), teacher, batch, &o.jsd)?;
        Ok(DistillLine {
            step: k,
            loss: f.loss,
            grad_norm: g.grad_norm,
            on_policy: f64::from(u8::from(src == Source::Student)),
            completion_length: length / prompts.len().max(1) as f64,
            divergences: f.metrics,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    };
    let rows = |step| step_rows(train.prompts.len(), common.batch_size, common.seed, step);
    let policy = common.train(student.policy, &offline, step, rows)?;
    let after = eval(&policy)?;
    let heldout_on = heldout.as_ref().map(|h| match h.completions {
        Some(_) => "data completions",
        None => "student samples",
    });
    let report = serde_json::json!({
        "beta": o.jsd.beta, "temperature": o.jsd.temperature, "lmbda": o.lmbda,
        "seq_kd": o.seq_kd, "steps": common.steps, "heldout_on": heldout_on,
        "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}
