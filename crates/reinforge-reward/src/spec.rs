//! The reward specification: a TOML file of named, weighted components.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere, including the verifier's `options`), and
//! every error names the file and the offending key (`components.<name>.<field>`); toml's own
//! errors add the line and column.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A whole reward specification (see the crate docs for the file format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSpec {
    /// Component whose value becomes OpenRLHF's `scores` (the 0/1 signal its dynamic filtering
    /// reads). Unset: the one `math` or `code_tests` component if there is exactly one, else the
    /// total reward.
    #[serde(default)]
    pub score: Option<String>,
    /// Components by name; the total reward is `sum(weight * value)`.
    pub components: BTreeMap<String, Component>,
    /// Deadline in seconds of one sample's rule components and of one batch of a learned
    /// component; past it (or when a component crashes) the value is `timeout_score`, the
    /// failure is counted and named, and the step goes on. 0: no deadline.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// The value of a component that passed its deadline or crashed.
    #[serde(default)]
    pub timeout_score: f64,
}

/// The default deadline: longer than any verifier or sandboxed test should take, short enough
/// that one stuck sample cannot hold a step for long.
fn default_timeout_s() -> f64 {
    60.0
}

/// One reward component. The `type` key picks the kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Component {
    /// Math answer equivalence against the label (`reinforge_verify::verify`).
    Math(MathSpec),
    /// Python unit tests (from the label) run against the response's code in the sandbox.
    CodeTests(CodeTestsSpec),
    /// A regular expression the response must match.
    Format(FormatSpec),
    /// Overlong penalty (DAPO's buffer or TRL's soft punishment) on the response length.
    Length(LengthSpec),
    /// A learned reward: a reward model (`reinforge train-rm`'s `*ForSequenceClassification`
    /// directory) scoring prompt and response, in batches. The program that builds the reward
    /// loads it ([`crate::Reward::with_models`]).
    Model(ModelSpec),
    /// An LLM judge (a causal checkpoint) rating each response 1 to 5 from its next-token
    /// probabilities; the value is the expected rating mapped to [0, 1].
    Judge(JudgeSpec),
}

/// `type = "judge"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    #[serde(default = "one")]
    pub weight: f64,
    /// The judge's checkpoint directory (config, weights, tokenizer).
    pub path: PathBuf,
    /// A pointwise template file with `{prompt}` and `{response}` (default: the built-in one,
    /// see docs/preference.md).
    #[serde(default)]
    pub template: Option<PathBuf>,
    /// Samples per forward pass.
    #[serde(default = "default_batch")]
    pub batch_size: usize,
}

/// A learned component's spec, as the loader of [`crate::Reward::with_models`] receives it.
#[derive(Clone, Copy, Debug)]
pub enum Learned<'a> {
    Model(&'a ModelSpec),
    Judge(&'a JudgeSpec),
}

/// `type = "model"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    #[serde(default = "one")]
    pub weight: f64,
    /// The reward model's directory (relative paths: from the working directory).
    pub path: PathBuf,
    /// Samples per forward pass.
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// Tokenise the prompt text with the tokenizer's special tokens (BOS): prompts that were
    /// not rendered by a chat template (`--raw` runs).
    #[serde(default)]
    pub raw: bool,
}

fn default_batch() -> usize {
    16
}

fn one() -> f64 {
    1.0
}

/// `type = "math"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MathSpec {
    #[serde(default = "one")]
    pub weight: f64,
    /// Value of an answer equivalent to the label.
    #[serde(default = "one")]
    pub correct: f64,
    /// Value of any other answer (wrong, or none found).
    #[serde(default)]
    pub incorrect: f64,
    /// When set, the label is a JSON object and the gold answer is this field of it.
    #[serde(default)]
    pub label_field: Option<String>,
    /// Verifier options (`reinforge_verify::Options`, Math-Verify's names): `extraction_targets`,
    /// `float_rounding`, `strict`, `percent`, `degrees`, ... Unknown keys are errors here.
    #[serde(default)]
    pub options: Option<toml::Table>,
}

/// `type = "code_tests"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeTestsSpec {
    #[serde(default = "one")]
    pub weight: f64,
    /// When set, the label is a JSON object and the test code is this field of it.
    #[serde(default)]
    pub label_field: Option<String>,
    /// Wall-clock limit of one test run, seconds (never above the sandbox's cap).
    #[serde(default = "default_wall")]
    pub timeout_s: f64,
    /// Memory limit of one test run, MiB (never above the sandbox's cap).
    #[serde(default = "default_memory")]
    pub memory_mb: u64,
}

fn default_wall() -> f64 {
    10.0
}

fn default_memory() -> u64 {
    1024
}

/// `type = "format"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatSpec {
    #[serde(default = "one")]
    pub weight: f64,
    /// Regular expression (Rust `regex` syntax, linear-time) searched in the response; anchor
    /// it with `^...$` and add `(?s)` for `.` to cross lines.
    pub pattern: String,
    /// Value when the pattern matches.
    #[serde(default = "one")]
    pub matched: f64,
    /// Value when it does not.
    #[serde(default)]
    pub unmatched: f64,
}

/// Which overlong formula a `length` component uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LengthShape {
    /// verl's DAPO overlong buffer: 0 up to `max_length - buffer`, then linear down to
    /// `-penalty_factor` at `max_length` (and further below past it).
    #[default]
    Dapo,
    /// TRL's soft overlong punishment: 0 up to `max_length - buffer`, linear to -1 at
    /// `max_length`, -1 beyond.
    TrlSoft,
}

/// How a response's length is counted (the server sees text, not tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LengthUnit {
    /// Unicode scalar values.
    #[default]
    Chars,
    /// UTF-8 bytes.
    Bytes,
    /// Whitespace-separated words.
    Words,
}

/// `type = "length"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LengthSpec {
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub shape: LengthShape,
    #[serde(default)]
    pub unit: LengthUnit,
    /// Length at which the penalty reaches its full value.
    pub max_length: usize,
    /// Width of the ramp before `max_length` (verl's `overlong_buffer.len`, TRL's
    /// `soft_punish_cache`).
    pub buffer: usize,
    /// DAPO's `overlong_buffer.penalty_factor` (ignored by `trl_soft`).
    #[serde(default = "one")]
    pub penalty_factor: f64,
}

impl Component {
    /// The component's weight in the total.
    pub fn weight(&self) -> f64 {
        match self {
            Component::Math(c) => c.weight,
            Component::CodeTests(c) => c.weight,
            Component::Format(c) => c.weight,
            Component::Length(c) => c.weight,
            Component::Model(c) => c.weight,
            Component::Judge(c) => c.weight,
        }
    }

    /// The `type` name, as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Component::Math(_) => "math",
            Component::CodeTests(_) => "code_tests",
            Component::Format(_) => "format",
            Component::Length(_) => "length",
            Component::Model(_) => "model",
            Component::Judge(_) => "judge",
        }
    }

    /// Whether the value is an accuracy in [0, 1] (a candidate for `scores`).
    fn is_accuracy(&self) -> bool {
        matches!(self, Component::Math(_) | Component::CodeTests(_))
    }
}

impl Default for RewardSpec {
    /// Math only: 1 for an answer equivalent to the label, 0 otherwise.
    fn default() -> Self {
        let math = MathSpec {
            weight: 1.0,
            correct: 1.0,
            incorrect: 0.0,
            label_field: None,
            options: None,
        };
        RewardSpec {
            score: None,
            components: BTreeMap::from([("math".to_string(), Component::Math(math))]),
            timeout_s: default_timeout_s(),
            timeout_score: 0.0,
        }
    }
}

impl RewardSpec {
    /// Reads and validates a spec file; errors name the file, and the key or line.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading reward spec {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("reward spec {}", path.display()))
    }

    /// Parses and validates a spec from TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let spec: RewardSpec = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks what serde cannot: finite weights, compilable patterns, sane lengths, known
    /// verifier options, and that `score` names a component.
    pub fn validate(&self) -> Result<()> {
        if self.components.is_empty() {
            bail!("`components`: at least one component is needed");
        }
        if !(self.timeout_s.is_finite() && self.timeout_s >= 0.0) {
            bail!("`timeout_s` must be a number of seconds >= 0 (0: no deadline)");
        }
        if !self.timeout_score.is_finite() {
            bail!("`timeout_score` must be a finite number");
        }
        for (name, c) in &self.components {
            let key = |field: &str| format!("components.{name}.{field}");
            if !c.weight().is_finite() {
                bail!("`{}` must be a finite number", key("weight"));
            }
            match c {
                Component::Math(m) => {
                    if !(m.correct.is_finite() && m.incorrect.is_finite()) {
                        bail!("`{}`/`{}` must be finite", key("correct"), key("incorrect"));
                    }
                    math_options(m).with_context(|| format!("`{}`", key("options")))?;
                }
                Component::CodeTests(t) => {
                    if !(t.timeout_s.is_finite() && t.timeout_s > 0.0) {
                        bail!(
                            "`{}` must be a positive number of seconds",
                            key("timeout_s")
                        );
                    }
                    if t.memory_mb == 0 {
                        bail!("`{}` must be positive", key("memory_mb"));
                    }
                }
                Component::Format(f) => {
                    regex::Regex::new(&f.pattern)
                        .with_context(|| format!("`{}` is not a valid regex", key("pattern")))?;
                    if !(f.matched.is_finite() && f.unmatched.is_finite()) {
                        bail!("`{}`/`{}` must be finite", key("matched"), key("unmatched"));
                    }
                }
                Component::Length(l) => {
                    if l.buffer == 0 && l.shape == LengthShape::Dapo {
                        bail!("`{}` must be positive for shape = \"dapo\"", key("buffer"));
                    }
                    if l.buffer > l.max_length {
                        bail!(
                            "`{}` must not exceed `{}`",
                            key("buffer"),
                            key("max_length")
                        );
                    }
                    if !l.penalty_factor.is_finite() {
                        bail!("`{}` must be finite", key("penalty_factor"));
                    }
                }
                Component::Model(ModelSpec {
                    batch_size, path, ..
                })
                | Component::Judge(JudgeSpec {
                    batch_size, path, ..
                }) => {
                    if *batch_size == 0 {
                        bail!("`{}` must be positive", key("batch_size"));
                    }
                    if path.as_os_str().is_empty() {
                        bail!("`{}` must name a model directory", key("path"));
                    }
                }
            }
        }
        if let Some(s) = &self.score {
            if s != "total" && !self.components.contains_key(s) {
                bail!("`score` = {s:?} names no component (nor \"total\")");
            }
        }
        Ok(())
    }

    /// The component reported as `scores`, or `None` for the total.
    pub fn score_component(&self) -> Option<&str> {
        match &self.score {
            Some(s) if s == "total" => None,
            Some(s) => Some(s),
            None => {
                let mut acc = self.components.iter().filter(|(_, c)| c.is_accuracy());
                match (acc.next(), acc.next()) {
                    (Some((name, _)), None) => Some(name),
                    _ => None,
                }
            }
        }
    }

    /// Whether any component reads the sample's label (math, code tests): data without a
    /// label column is fine otherwise.
    pub fn needs_labels(&self) -> bool {
        self.components
            .values()
            .any(|c| matches!(c, Component::Math(_) | Component::CodeTests(_)))
    }

    /// Whether any component needs the sandbox.
    pub fn needs_sandbox(&self) -> bool {
        self.components
            .values()
            .any(|c| matches!(c, Component::CodeTests(_)))
    }
}

/// The verifier options of a math component, with unknown keys rejected (the verifier's own
/// `Options` ignores them, for Math-Verify's test data; a spec file should not).
pub(crate) fn math_options(m: &MathSpec) -> Result<reinforge_verify::Options> {
    let Some(table) = &m.options else {
        return Ok(reinforge_verify::Options::default());
    };
    let known = serde_json::to_value(reinforge_verify::Options::default())?;
    let known = known.as_object().expect("Options serializes to an object");
    if let Some(k) = table.keys().find(|k| !known.contains_key(*k)) {
        let mut names: Vec<&String> = known.keys().collect();
        names.sort();
        bail!("unknown option `{k}`; expected one of {names:?}");
    }
    toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e| anyhow::anyhow!("{e}"))
}
