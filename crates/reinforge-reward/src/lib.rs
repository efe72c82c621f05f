//! Rewards from a specification file: named, weighted components (math answer equivalence,
//! Python unit tests in the sandbox, a format regex, an overlong penalty), scored over a batch in
//! parallel. The same file drives `reinforge serve` (OpenRLHF's remote reward) and training.
//!
//! # The spec file (TOML)
//!
//! ```toml
//! # optional: which component becomes OpenRLHF's `scores` ("total" for the total reward);
//! # default: the only math/code_tests component, else the total
//! score = "accuracy"
//! # optional: a sample's rule components, and a batch of a learned one, get at most this
//! # many seconds (default 60; 0: no deadline); past it, or when one crashes, the value is
//! # timeout_score (default 0), the failure is counted and named, and the step goes on
//! timeout_s = 60.0
//! timeout_score = 0.0
//!
//! [components.accuracy]
//! type = "math"            # reinforge_verify::verify(label, response)
//! weight = 1.0             # every component: default 1
//! correct = 1.0            # value of an equivalent answer (default 1)
//! incorrect = 0.0          # value of anything else (default 0)
//! # label_field = "answer" # the label is a JSON object; use this field of it
//! [components.accuracy.options]   # verifier options, Math-Verify's names
//! float_rounding = 6
//! # answer_policy = "stated"      # default: only a stated final answer counts (boxed, "answer
//! #                               # is", the whole response, a final "= N"/"is N"); see
//! #                               # docs/verifier.md. "last_value" also takes the last number.
//! # max_statement_bytes = 32768   # default: final statements read in a response's last 32 KiB
//! #                               # (boxes, anchors everywhere; bounded work); 0: all of it
//!
//! [components.format]
//! type = "format"          # regex searched in the response (Rust regex syntax)
//! weight = 0.2
//! pattern = '(?s)^<think>.*</think>.*\\boxed\{'
//! # matched = 1.0, unmatched = 0.0
//!
//! [components.overlong]
//! type = "length"          # shape = "dapo" (verl) | "trl_soft" (TRL)
//! max_length = 4096        # unit = "chars" (default) | "bytes" | "words"
//! buffer = 512
//! penalty_factor = 1.0
//!
//! [components.tests]
//! type = "code_tests"      # label = Python test code (asserts), run after the response's
//! timeout_s = 10.0         # last fenced code block; 1 if all pass, else 0
//! memory_mb = 1024
//!
//! [components.preference]
//! type = "model"           # a reward model (reinforge train-rm output), batched; loaded by
//! path = "runs/rm/final"   # the program building the reward (Reward::with_models)
//! batch_size = 16
//! # raw = false            # true: the prompt text was not rendered by a chat template
//!
//! [components.judge]
//! type = "judge"           # an LLM judge (causal checkpoint) rating 1-5 from next-token
//! path = "models/judge"    # probabilities: value = (expected rating - 1) / 4
//! # template = "judge.txt" # {prompt} and {response}; default built in
//! ```
//!
//! The total reward of a sample is `sum(weight * value)` over the components; each component's
//! unweighted value is reported beside it (OpenRLHF's `extra_logs`, the server's metrics).
//! Unknown keys, wrong types, invalid regexes and unknown verifier options are errors naming
//! the file and key. Example files: `crates/reinforge-reward/specs/`.
//!
//! ```
//! use reinforge_reward::{Reward, RewardSpec, Sample};
//! let reward = Reward::new(RewardSpec::default(), None).unwrap();
//! let s = Sample { prompt: "1+1=".into(), response: "\\boxed{2}".into(), label: Some("2".into()) };
//! assert_eq!(reward.score(&[s]).unwrap()[0].total, 1.0);
//! ```

mod code;
mod deadline;
pub mod integrity;
mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use rayon::prelude::*;
use regex::Regex;
use reinforge_sandbox::{run_python_tests, Limits, RunStatus, Sandbox};
use serde::Serialize;

use deadline::{guarded, Pending};

pub use code::extract_code;
pub use deadline::{Failure, BREAK_AFTER};
pub use spec::{
    CodeTestsSpec, Component, FormatSpec, JudgeSpec, Learned, LengthShape, LengthSpec, LengthUnit,
    MathSpec, ModelSpec, RewardSpec,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// A learned scorer of (prompt, response) pairs, for `model` and `judge` components: one value
/// per pair. Implemented where the model lives (the `reinforge` binary, on libtorch).
pub trait ModelScorer: Send + Sync {
    fn score(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>>;
}

/// Loads the scorer of a learned component (its name and spec).
pub type ModelLoader<'a> = &'a dyn Fn(&str, Learned) -> Result<Arc<dyn ModelScorer>>;

/// One response to score.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub prompt: String,
    pub response: String,
    /// Gold answer (math), test code (code_tests), or a JSON object holding them.
    pub label: Option<String>,
}

/// The reward of one sample.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scored {
    /// `sum(weight * value)`.
    pub total: f64,
    /// The spec's score component's value (or the total): OpenRLHF's `scores`.
    pub score: f64,
    /// Each component's unweighted value, by name.
    pub components: BTreeMap<String, f64>,
    /// Components that gave the spec's `timeout_score` instead of a value (past `timeout_s`,
    /// or crashed), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, Failure>,
    /// Whether a verifier component (`math`, `code_tests`) credited the response with its
    /// correct value; `None` when the spec has no verifier component. Read by the
    /// reward-hacking monitor ([`integrity`]).
    #[serde(skip)]
    pub credited: Option<bool>,
    /// The answer a crediting `math` component read from the response, as written.
    #[serde(skip)]
    pub answer: Option<String>,
}

/// Why a batch could not be scored. Label problems are the caller's; sandbox failures are
/// infrastructure (the model's code failing its tests is a 0, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error("sample {index}: component `{component}` needs a label")]
    MissingLabel { index: usize, component: String },
    #[error("sample {index}: component `{component}`: label is not a JSON object with a string field `{field}`")]
    LabelField {
        index: usize,
        component: String,
        field: String,
    },
    #[error("sample {index}: component `{component}`: {message}")]
    Sandbox {
        index: usize,
        component: String,
        message: String,
    },
    /// A learned component's forward pass failed (a batch, not one sample).
    #[error("component `{component}` (learned): {message}")]
    Model { component: String, message: String },
}

impl ScoreError {
    /// The index of the sample the error is about (none for a failed model batch).
    pub fn index(&self) -> Option<usize> {
        match self {
            ScoreError::MissingLabel { index, .. }
            | ScoreError::LabelField { index, .. }
            | ScoreError::Sandbox { index, .. } => Some(*index),
            ScoreError::Model { .. } => None,
        }
    }
}

impl Compiled {
    /// The value a verifier component gives a right response (`math`: its `correct`, when
    /// above `incorrect`; `code_tests`: 1); `None` for the other components.
    fn correct_value(&self) -> Option<f64> {
        match self {
            Compiled::Math { spec, .. } if spec.correct > spec.incorrect => Some(spec.correct),
            Compiled::CodeTests { .. } => Some(1.0),
            _ => None,
        }
    }
}

/// A component ready to evaluate (patterns compiled, options parsed).
enum Compiled {
    Math {
        spec: MathSpec,
        options: reinforge_verify::Options,
    },
    CodeTests {
        spec: CodeTestsSpec,
        limits: Limits,
    },
    Format {
        spec: FormatSpec,
        re: Regex,
    },
    Length(LengthSpec),
    Model {
        batch_size: usize,
        scorer: Arc<dyn ModelScorer>,
    },
}

/// A reward function built from a [`RewardSpec`]. `Sync`: one instance serves every thread.
pub struct Reward {
    spec: RewardSpec,
    /// Shared with the threads that evaluate rows under a deadline.
    components: Arc<Vec<(String, f64, Compiled)>>,
    sandbox: Option<Sandbox>,
    /// Consecutive failed batches of each component (by position), for [`BREAK_AFTER`].
    strikes: Vec<AtomicUsize>,
}

impl Reward {
    /// Compiles `spec`. `sandbox` is required when the spec has a `code_tests` component; a
    /// spec with `model` components needs [`Self::with_models`].
    pub fn new(spec: RewardSpec, sandbox: Option<Sandbox>) -> Result<Self> {
        Self::with_models(spec, sandbox, &|name, _| {
            bail!("component `{name}` needs a model loader: the reinforge binary loads models")
        })
    }

    /// Compiles `spec`, loading each `model` component's scorer with `load`.
    pub fn with_models(
        spec: RewardSpec,
        sandbox: Option<Sandbox>,
        load: ModelLoader,
    ) -> Result<Self> {
        spec.validate()?;
        let mut components = vec![];
        for (name, c) in &spec.components {
            let compiled = match c {
                Component::Math(m) => Compiled::Math {
                    spec: m.clone(),
                    options: spec::math_options(m)?,
                },
                Component::CodeTests(t) => {
                    let Some(sb) = &sandbox else {
                        bail!("component `{name}` (code_tests) needs a sandbox");
                    };
                    let mut limits = sb.caps().clone();
                    let wall = Duration::from_secs_f64(t.timeout_s);
                    limits.wall_time = limits.wall_time.min(wall);
                    limits.cpu_time = limits.cpu_time.min(wall);
                    limits.memory_bytes = limits.memory_bytes.min(t.memory_mb << 20);
                    Compiled::CodeTests {
                        spec: t.clone(),
                        limits,
                    }
                }
                Component::Format(f) => Compiled::Format {
                    spec: f.clone(),
                    re: Regex::new(&f.pattern)?,
                },
                Component::Length(l) => Compiled::Length(l.clone()),
                Component::Model(m) => Compiled::Model {
                    batch_size: m.batch_size,
                    scorer: load(name, Learned::Model(m))?,
                },
                Component::Judge(j) => Compiled::Model {
                    batch_size: j.batch_size,
                    scorer: load(name, Learned::Judge(j))?,
                },
            };
            components.push((name.clone(), c.weight(), compiled));
        }
        Ok(Reward {
            spec,
            strikes: components.iter().map(|_| AtomicUsize::new(0)).collect(),
            components: Arc::new(components),
            sandbox,
        })
    }

    /// The spec this reward was built from.
    pub fn spec(&self) -> &RewardSpec {
        &self.spec
    }

    /// Scores a batch. Fails on the first sample (in order) whose label is missing or
    /// malformed, or whose tests the sandbox could not run. The batch has one deadline
    /// (`timeout_s` from now): the rule components of the samples run in parallel while the
    /// model components score their batches (`batch_size` samples per forward pass); whatever
    /// is not done by the deadline, or crashed, scores `timeout_score` and is named in
    /// `failed`.
    pub fn score(&self, samples: &[Sample]) -> Result<Vec<Scored>, ScoreError> {
        let deadline = (self.spec.timeout_s > 0.0)
            .then(|| Instant::now() + Duration::from_secs_f64(self.spec.timeout_s));
        let mut rules = self.start_rules(samples, deadline);
        let learned = self.learned(samples, deadline)?;
        let rules = match (&mut rules, deadline) {
            (Rules::Running(pending), Some(d)) => pending.wait(d),
            (Rules::Done(done), _) => std::mem::take(done),
            (Rules::Running(_), None) => unreachable!("rules run on threads only with a deadline"),
        };
        let failed: Vec<usize> = (0..rules.len()).filter(|&i| rules[i].is_err()).collect();
        if let Some(&first) = failed.first() {
            warn_failed(
                "rule components",
                rules[first]
                    .as_ref()
                    .err()
                    .copied()
                    .unwrap_or(Failure::Crash),
                &failed,
            );
        }
        // The first error in sample order, as a sequential loop would report it.
        rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| self.combine(i, r, &learned))
            .collect()
    }

    /// The rule values of every sample: computed in place in parallel (no deadline), or started
    /// on a worker pool to be awaited until the deadline.
    fn start_rules(&self, samples: &[Sample], deadline: Option<Instant>) -> Rules {
        let has_rules = self
            .components
            .iter()
            .any(|(_, _, c)| !matches!(c, Compiled::Model { .. }));
        if !has_rules {
            return Rules::Done(samples.iter().map(|_| Ok(Ok(BTreeMap::new()))).collect());
        }
        if deadline.is_none() {
            let (components, sandbox) = (&self.components, self.sandbox.as_ref());
            return Rules::Done(
                samples
                    .par_iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let values = || rule_values(components, sandbox, i, s);
                        catch_unwind(AssertUnwindSafe(values)).map_err(|_| Failure::Crash)
                    })
                    .collect(),
            );
        }
        let jobs: Vec<_> = samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (components, sandbox) = (Arc::clone(&self.components), self.sandbox.clone());
                let s = s.clone();
                move || rule_values(&components, sandbox.as_ref(), i, &s)
            })
            .collect();
        // At least four workers, so a few hung samples do not hold the whole batch.
        Rules::Running(Pending::start(jobs, rayon::current_num_threads().max(4)))
    }

    /// The values of every model component for `samples`, by component name: each batch of
    /// `batch_size` awaited until `deadline`. A batch past it or crashed fails each of its
    /// rows; a component that failed [`BREAK_AFTER`] batches in a row is not called again.
    fn learned(
        &self,
        samples: &[Sample],
        deadline: Option<Instant>,
    ) -> Result<Learnt<'_>, ScoreError> {
        let mut out = BTreeMap::new();
        for (k, (name, _, c)) in self.components.iter().enumerate() {
            let Compiled::Model { batch_size, scorer } = c else {
                continue;
            };
            let mut values = Vec::with_capacity(samples.len());
            for chunk in samples.chunks(*batch_size) {
                let rows = values.len()..values.len() + chunk.len();
                let scored = self.call_learned(k, name, scorer, chunk, deadline);
                let v = match scored {
                    Err(failure) => {
                        values.extend(std::iter::repeat_n(Err(failure), chunk.len()));
                        let rows: Vec<usize> = rows.collect();
                        warn_failed(name, failure, &rows);
                        continue;
                    }
                    Ok(v) => v.map_err(|e| ScoreError::Model {
                        component: name.clone(),
                        message: format!("{e:#}"),
                    })?,
                };
                if v.len() != chunk.len() {
                    return Err(ScoreError::Model {
                        component: name.clone(),
                        message: format!("{} values for {} samples", v.len(), chunk.len()),
                    });
                }
                values.extend(v.into_iter().map(Ok));
            }
            out.insert(name.as_str(), values);
        }
        Ok(out)
    }

    /// One batch of learned component `k` (`name`), unless it is disabled or the deadline
    /// has passed; counts its strikes.
    fn call_learned(
        &self,
        k: usize,
        name: &str,
        scorer: &Arc<dyn ModelScorer>,
        chunk: &[Sample],
        deadline: Option<Instant>,
    ) -> Result<Result<Vec<f64>>, Failure> {
        let strikes = &self.strikes[k];
        if strikes.load(Ordering::SeqCst) >= BREAK_AFTER {
            return Err(Failure::Disabled);
        }
        // Past the batch's deadline (an earlier batch used it up): not called, no strike.
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failure::Timeout);
        }
        let result = {
            let prompts: Vec<String> = chunk.iter().map(|s| s.prompt.clone()).collect();
            let responses: Vec<String> = chunk.iter().map(|s| s.response.clone()).collect();
            let scorer = Arc::clone(scorer);
            guarded(deadline, move || {
                let p: Vec<&str> = prompts.iter().map(String::as_str).collect();
                let r: Vec<&str> = responses.iter().map(String::as_str).collect();
                scorer.score(&p, &r)
            })
        };
        match result {
            Err(_) => {
                if strikes.fetch_add(1, Ordering::SeqCst) + 1 == BREAK_AFTER {
                    eprintln!(
                        "warning: reward `{name}` failed {BREAK_AFTER} batches in a row: it is not called again; its rows score the spec's timeout_score"
                    );
                }
            }
            Ok(_) => strikes.store(0, Ordering::SeqCst),
        }
        result
    }

    /// Sample `index`'s reward from its rule values (or their failure) and the model
    /// components' values; a failed component counts `timeout_score`.
    fn combine(
        &self,
        index: usize,
        rules: RuleResult,
        learned: &Learnt,
    ) -> Result<Scored, ScoreError> {
        // A label error is the caller's (an error); a timeout or crash is the row's.
        let rules = match rules {
            Ok(values) => Ok(values?),
            Err(failure) => Err(failure),
        };
        let mut values = BTreeMap::new();
        let mut failed = BTreeMap::new();
        let mut total = 0.0;
        let mut credited = None;
        let mut answer = None;
        for (name, weight, c) in self.components.iter() {
            let value = match c {
                Compiled::Model { .. } => learned[name.as_str()][index],
                _ => rules.as_ref().map(|r| r[name].0).map_err(|f| *f),
            };
            if let (Some(correct), Ok(v)) = (c.correct_value(), value) {
                let hit = v == correct;
                credited = Some(credited.unwrap_or(false) || hit);
                if hit && answer.is_none() {
                    answer = rules.as_ref().ok().and_then(|r| r[name].1.clone());
                }
            } else if c.correct_value().is_some() {
                credited = Some(credited.unwrap_or(false));
            }
            let v = value.unwrap_or_else(|failure| {
                failed.insert(name.clone(), failure);
                self.spec.timeout_score
            });
            total += weight * v;
            values.insert(name.clone(), v);
        }
        let score = match self.spec.score_component() {
            Some(name) => values[name],
            None => total,
        };
        Ok(Scored {
            total,
            score,
            components: values,
            failed,
            credited,
            answer,
        })
    }
}

/// The values of the model components, by name, per sample (a failed batch: its failure).
type Learnt<'a> = BTreeMap<&'a str, Vec<Result<f64, Failure>>>;

/// One sample's rule values, or the failure of their evaluation.
type RuleResult = Result<Result<BTreeMap<String, RuleValue>, ScoreError>, Failure>;

/// The rule values of a batch: computed, or running until the deadline.
enum Rules {
    Done(Vec<RuleResult>),
    Running(Pending<Result<BTreeMap<String, RuleValue>, ScoreError>>),
}

/// Says on stderr which component failed for which samples (the run goes on).
fn warn_failed(component: &str, failure: Failure, samples: &[usize]) {
    let shown: Vec<String> = samples.iter().take(8).map(usize::to_string).collect();
    let more = samples.len().saturating_sub(shown.len());
    eprintln!(
        "warning: reward `{component}` {} for {} samples of the batch ({}{}): they score the spec's timeout_score",
        match failure {
            Failure::Timeout => "passed its deadline (timeout_s)",
            Failure::Crash => "crashed",
            Failure::Disabled => "is disabled after failing repeatedly",
        },
        samples.len(),
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
}

/// A rule component's value and, for a crediting `math` component, the answer it read.
type RuleValue = (f64, Option<String>);

/// The values of the rule components (every component but `model`/`judge`) of sample `index`.
fn rule_values(
    components: &[(String, f64, Compiled)],
    sandbox: Option<&Sandbox>,
    index: usize,
    s: &Sample,
) -> Result<BTreeMap<String, RuleValue>, ScoreError> {
    let mut out = BTreeMap::new();
    for (name, _, c) in components {
        if !matches!(c, Compiled::Model { .. }) {
            out.insert(name.clone(), value(sandbox, index, name, c, s)?);
        }
    }
    Ok(out)
}

/// The value of rule component `c` (named `name`) for sample `index`, with the answer a
/// `math` component credited.
fn value(
    sandbox: Option<&Sandbox>,
    index: usize,
    name: &str,
    c: &Compiled,
    s: &Sample,
) -> Result<RuleValue, ScoreError> {
    if let Compiled::Math { spec, options } = c {
        let gold = label(index, name, s, spec.label_field.as_deref())?;
        return Ok(
            if reinforge_verify::verify(&gold, &s.response, options).correct() {
                let answer = reinforge_verify::stated_answer(&s.response, options);
                (spec.correct, answer)
            } else {
                (spec.incorrect, None)
            },
        );
    }
    Ok((rule_value(sandbox, index, name, c, s)?, None))
}

/// The value of a rule component other than `math`.
fn rule_value(
    sandbox: Option<&Sandbox>,
    index: usize,
    name: &str,
    c: &Compiled,
    s: &Sample,
) -> Result<f64, ScoreError> {
    Ok(match c {
        Compiled::Math { .. } => unreachable!("math components are valued by `value`"),
        Compiled::CodeTests { spec, limits } => {
            let tests = label(index, name, s, spec.label_field.as_deref())?;
            let sandbox = sandbox.expect("checked in Reward::new");
            let code = extract_code(&s.response);
            let sandbox_error = |message: String| ScoreError::Sandbox {
                index,
                component: name.to_string(),
                message,
            };
            let outcome = run_python_tests(sandbox, code, &tests, limits.clone())
                .map_err(|e| sandbox_error(format!("{e:#}")))?;
            if outcome.result.status == RunStatus::SandboxError {
                return Err(sandbox_error(outcome.reason));
            }
            if outcome.passed {
                1.0
            } else {
                0.0
            }
        }
        Compiled::Format { spec, re } => {
            if re.is_match(&s.response) {
                spec.matched
            } else {
                spec.unmatched
            }
        }
        Compiled::Length(l) => length_penalty(l, &s.response),
        Compiled::Model { .. } => unreachable!("model components are scored in batches"),
    })
}

/// The label of `s`, or its string field `field` when the label is a JSON object.
fn label(
    index: usize,
    component: &str,
    s: &Sample,
    field: Option<&str>,
) -> Result<String, ScoreError> {
    let Some(text) = &s.label else {
        return Err(ScoreError::MissingLabel {
            index,
            component: component.to_string(),
        });
    };
    let Some(field) = field else {
        return Ok(text.clone());
    };
    let value: Option<serde_json::Value> = serde_json::from_str(text).ok();
    match value.as_ref().and_then(|v| v.get(field)) {
        Some(serde_json::Value::String(x)) => Ok(x.clone()),
        Some(v @ serde_json::Value::Number(_)) => Ok(v.to_string()),
        _ => Err(ScoreError::LabelField {
            index,
            component: component.to_string(),
            field: field.to_string(),
        }),
    }
}

/// The length penalty of `response` (0 or negative).
pub fn length_penalty(l: &LengthSpec, response: &str) -> f64 {
    let len = match l.unit {
        LengthUnit::Chars => response.chars().count(),
        LengthUnit::Bytes => response.len(),
        LengthUnit::Words => response.split_whitespace().count(),
    };
    match l.shape {
        LengthShape::Dapo => reinforge_rl::overlong::verl_dapo_overlong_penalty(
            len,
            l.max_length,
            l.buffer,
            l.penalty_factor,
        ),
        LengthShape::TrlSoft => {
            reinforge_rl::overlong::trl_soft_overlong_punishment(len, l.max_length, l.buffer)
        }
    }
}
