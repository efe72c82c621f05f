//! The training configuration: a TOML file whose every key has a default, overridable from the
//! command line with `--set section.key=value`. The resolved config is written into each run
//! directory, so `--config runs/NAME/config.toml` repeats a run.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use reinforge_rl::AdvantageConfig;
use reinforge_torch::ModelConfig;
use serde::{Deserialize, Serialize};

/// Everything `reinforge train` needs. Unknown keys are errors, so a typo never goes unnoticed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Seeds weights, data and sampling; the same seed repeats a CPU run exactly.
    pub seed: u64,
    /// Where runs are written: the run directory is `<runs_dir>/<name>`.
    pub runs_dir: String,
    /// Run name (default: `default-seed<seed>`).
    pub name: Option<String>,
    /// `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// CPU threads for libtorch intra-op parallelism (0 = libtorch's default, one per core).
    /// The default 1 is fastest for the tiny default model: its ops are too small to split,
    /// and OpenMP threads spin badly when the cores are shared.
    pub threads: usize,
    pub task: TaskConfig,
    /// The transformer, with HF `config.json` field names.
    pub model: ModelConfig,
    pub sft: SftConfig,
    pub grpo: GrpoConfig,
    pub eval: EvalConfig,
}

/// The built-in arithmetic task and the SFT data mixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Digits of each operand.
    pub digits: u32,
    /// Share of SFT examples written in the direct pattern; the rest use the columns pattern.
    pub direct_share: f64,
}

/// Supervised warm-start on reference solutions (loss on completion tokens only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    pub steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// Linear warm-up steps, then cosine decay to 10% of `lr`.
    pub warmup_steps: usize,
    pub max_grad_norm: f64,
    pub weight_decay: f64,
    /// Save a resumable checkpoint every this many steps (0 = only at the end and on Ctrl-C).
    #[serde(default)]
    pub checkpoint_every: usize,
}

/// GRPO: group sampling, group-normalised advantages, PPO-clip updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpoConfig {
    /// Policy iterations (sample, score, update).
    pub steps: usize,
    /// Distinct prompts per iteration.
    pub prompts_per_step: usize,
    /// Completions per prompt, G (TRL `num_generations`).
    pub num_generations: usize,
    /// Lower clip of the ratio, 1 - epsilon_low (TRL `epsilon`, verl `clip_ratio_low`).
    pub epsilon_low: f64,
    /// Upper clip of the ratio, 1 + epsilon_high (DAPO clip-higher).
    pub epsilon_high: f64,
    /// Weight of the k3 KL to the frozen SFT model (0 = no reference model is kept).
    pub beta: f64,
    /// Entropy bonus weight.
    pub entropy_coef: f64,
    /// Optimisation passes over each batch against the stored old log-probs.
    pub ppo_epochs: usize,
    /// Optimizer steps per pass (the batch is split into this many mini-batches).
    pub mini_batches: usize,
    pub lr: f64,
    pub max_grad_norm: f64,
    pub weight_decay: f64,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    /// Longest completion; longer ones are cut and score 0.
    pub max_completion_length: usize,
    /// Group normalisation of rewards.
    pub advantage: AdvantageConfig,
    /// Save a checkpoint every this many iterations (0 = only at the end and on Ctrl-C).
    pub checkpoint_every: usize,
    /// Keep generating past `<eos>` until `max_completion_length` (vLLM's `ignore_eos`): gives
    /// every completion the same length, for benchmarks on fixed shapes.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Leave rows with a zero advantage out of the update when no KL or entropy term needs
    /// them: exact (their gradient is zero) and cheaper. `false` runs every row.
    #[serde(default = "yes")]
    pub skip_zero_advantage: bool,
}

/// Held-out evaluation before and after RL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Held-out problems (never seen in SFT or RL).
    pub problems: usize,
    /// Samples per problem, n: pass@k is reported for k = 1, 2, 4, ... up to n.
    pub samples: usize,
    pub temperature: f64,
    /// Sequences decoded together.
    pub batch_size: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        let tokenizer_vocab = reinforge_tasks::ArithTask::tokenizer().vocab_size();
        Self {
            seed: 0,
            runs_dir: "runs".into(),
            name: None,
            device: "cpu".into(),
            threads: 1,
            task: TaskConfig {
                digits: 3,
                direct_share: 0.5,
            },
            model: ModelConfig {
                model_type: "llama".into(),
                vocab_size: tokenizer_vocab,
                hidden_size: 64,
                intermediate_size: 192,
                num_hidden_layers: 3,
                num_attention_heads: 4,
                num_key_value_heads: Some(2),
                head_dim: None,
                max_position_embeddings: 64,
                rms_norm_eps: 1e-6,
                rope_theta: 10_000.0,
                tie_word_embeddings: true,
                attention_bias: false,
                hidden_act: "silu".into(),
                bos_token_id: Some(reinforge_tasks::tokenizer::BOS),
                eos_token_id: Some(reinforge_tasks::tokenizer::EOS),
                pad_token_id: Some(reinforge_tasks::tokenizer::PAD),
            },
            sft: SftConfig {
                steps: 1500,
                batch_size: 64,
                lr: 3e-3,
                warmup_steps: 30,
                max_grad_norm: 1.0,
                weight_decay: 0.0,
                checkpoint_every: 500,
            },
            grpo: GrpoConfig {
                steps: 30,
                prompts_per_step: 32,
                num_generations: 8,
                epsilon_low: 0.2,
                epsilon_high: 0.28,
                beta: 0.0,
                entropy_coef: 0.0,
                ppo_epochs: 2,
                mini_batches: 2,
                lr: 1e-4,
                max_grad_norm: 1.0,
                weight_decay: 0.0,
                temperature: 1.0,
                top_p: 1.0,
                top_k: 0,
                max_completion_length: 48,
                advantage: AdvantageConfig::default(),
                checkpoint_every: 10,
                ignore_eos: false,
                skip_zero_advantage: true,
            },
            eval: EvalConfig {
                problems: 200,
                samples: 64,
                temperature: 1.0,
                batch_size: 1024,
            },
        }
    }
}

impl TrainConfig {
    /// The default config with the file at `path` (if any) and the `key=value` overrides on top.
    pub fn resolve(path: Option<&Path>, overrides: &[String]) -> Result<Self> {
        let mut value = toml::Value::try_from(Self::default()).expect("defaults serialise");
        if let Some(path) = path {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config {}", path.display()))?;
            let file: toml::Value = text
                .parse()
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            merge(&mut value, file);
        }
        for o in overrides {
            apply_override(&mut value, o)?;
        }
        let source = path.map_or_else(|| "the defaults".to_string(), |p| p.display().to_string());
        // serde_path_to_error names the key at fault (`sft.steps`), which toml's value
        // deserialiser does not.
        let cfg: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            anyhow!(
                "invalid config (from {source} and --set): key `{}`: {}",
                e.path(),
                e.inner().message()
            )
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Cross-field checks that serde cannot express, naming the key at fault.
    pub fn validate(&self) -> Result<()> {
        let need = reinforge_tasks::ArithTask::tokenizer().vocab_size();
        if self.model.vocab_size < need {
            bail!(
                "model.vocab_size = {} is smaller than the task tokenizer's {need} ids",
                self.model.vocab_size
            );
        }
        self.model.validate().context("in [model]")?;
        let positive = [
            ("sft.batch_size", self.sft.batch_size),
            ("grpo.prompts_per_step", self.grpo.prompts_per_step),
            ("grpo.num_generations", self.grpo.num_generations),
            ("grpo.ppo_epochs", self.grpo.ppo_epochs),
            ("grpo.mini_batches", self.grpo.mini_batches),
            (
                "grpo.max_completion_length",
                self.grpo.max_completion_length,
            ),
            ("eval.problems", self.eval.problems),
            ("eval.samples", self.eval.samples),
            ("eval.batch_size", self.eval.batch_size),
        ];
        for (key, v) in positive {
            if v == 0 {
                bail!("{key} must be at least 1, got 0");
            }
        }
        if !(1..=9).contains(&self.task.digits) {
            bail!(
                "task.digits must be between 1 and 9, got {}",
                self.task.digits
            );
        }
        if !(0.0..=1.0).contains(&self.task.direct_share) {
            bail!(
                "task.direct_share must be between 0 and 1, got {}",
                self.task.direct_share
            );
        }
        let longest_prompt = 2 * self.task.digits as usize + 2;
        if longest_prompt + self.grpo.max_completion_length > self.model.max_position_embeddings {
            bail!(
                "model.max_position_embeddings = {} is shorter than a prompt ({longest_prompt}) plus grpo.max_completion_length ({})",
                self.model.max_position_embeddings,
                self.grpo.max_completion_length
            );
        }
        if self.grpo.mini_batches > self.grpo.prompts_per_step * self.grpo.num_generations {
            bail!(
                "grpo.mini_batches = {} exceeds the rollouts per step",
                self.grpo.mini_batches
            );
        }
        Ok(())
    }

    /// The run's name.
    pub fn run_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("default-seed{}", self.seed))
    }

    /// The resolved config as TOML (what `config.toml` in a run directory holds).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }
}

fn yes() -> bool {
    true
}

/// Overlays `top` onto `base`, table by table.
fn merge(base: &mut toml::Value, top: toml::Value) {
    match (base, top) {
        (toml::Value::Table(b), toml::Value::Table(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_table() && v.is_table() => merge(existing, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, t) => *b = t,
    }
}

/// Applies one `a.b.c=value` override. The value is parsed as TOML (`3`, `0.5`, `true`,
/// `"text"`), falling back to a bare string. The key must exist in the config.
fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<()> {
    let (key, raw) = assignment.split_once('=').ok_or_else(|| {
        anyhow!("--set {assignment:?}: expected KEY=VALUE, e.g. --set grpo.steps=20")
    })?;
    let key = key.trim();
    let raw = raw.trim();
    let value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let mut node = root;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let table = node
            .as_table_mut()
            .ok_or_else(|| anyhow!("--set {key}: `{}` is not a section", parts[..i].join(".")))?;
        if i + 1 == parts.len() {
            match table.get(*part) {
                Some(old) if !old.is_table() || value.is_table() => {
                    let expected = old.type_str();
                    let value = coerce(value, old)
                        .ok_or_else(|| anyhow!("--set {key}={raw}: expected a {expected}"))?;
                    table.insert(part.to_string(), value);
                }
                Some(_) => bail!("--set {key}: `{key}` is a section; set one of its keys"),
                None if is_optional_key(key) => {
                    table.insert(part.to_string(), value);
                }
                None => bail!(
                    "--set {key}: unknown key; known keys here: {}",
                    known_keys(table)
                ),
            }
            return Ok(());
        }
        if !table.contains_key(*part) {
            bail!(
                "--set {key}: unknown section `{part}`; known keys here: {}",
                known_keys(table)
            );
        }
        node = table.get_mut(*part).expect("checked above");
    }
    unreachable!("split always yields at least one part")
}

/// Keys that default to absent (`None`) and so do not appear in the serialised defaults.
fn is_optional_key(key: &str) -> bool {
    matches!(
        key,
        "name"
            | "model.num_key_value_heads"
            | "model.head_dim"
            | "model.bos_token_id"
            | "model.eos_token_id"
            | "model.pad_token_id"
    )
}

/// Integers are accepted where floats are expected (`--set grpo.lr=1` means 1.0).
fn coerce(value: toml::Value, like: &toml::Value) -> Option<toml::Value> {
    match (like, value) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => Some(toml::Value::Float(i as f64)),
        (l, v) if l.same_type(&v) => Some(v),
        _ => None,
    }
}

fn known_keys(table: &toml::Table) -> String {
    table.keys().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let cfg = TrainConfig::default();
        let back: TrainConfig = toml::from_str(&cfg.to_toml()).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn overrides_apply_and_coerce() {
        let cfg = TrainConfig::resolve(
            None,
            &[
                "grpo.steps=7".into(),
                "grpo.lr=1".into(),
                "name=abc".into(),
                "grpo.advantage.norm_by_std=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(cfg.grpo.steps, 7);
        assert_eq!(cfg.grpo.lr, 1.0);
        assert_eq!(cfg.run_name(), "abc");
        assert!(!cfg.grpo.advantage.norm_by_std);
    }

    #[test]
    fn bad_overrides_name_the_key_and_the_expectation() {
        let err = |o: &str| {
            format!(
                "{:#}",
                TrainConfig::resolve(None, &[o.to_string()]).unwrap_err()
            )
        };
        assert!(
            err("grpo.stepz=3").contains("grpo.stepz=3")
                || err("grpo.stepz=3").contains("unknown key")
        );
        assert!(
            err("grpo.stepz=3").contains("steps"),
            "lists the known keys"
        );
        assert!(
            err("grpo.steps=fast").contains("expected a integer"),
            "{}",
            err("grpo.steps=fast")
        );
        assert!(err("grpo").contains("KEY=VALUE"));
        assert!(err("grpo.num_generations=0").contains("grpo.num_generations must be at least 1"));
        assert!(err("task.direct_share=1.5").contains("task.direct_share"));
    }

    #[test]
    fn config_file_errors_name_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[grpo]\nsteps = 5\nbogus = 1\n").unwrap();
        let msg = format!("{:#}", TrainConfig::resolve(Some(&path), &[]).unwrap_err());
        assert!(msg.contains("bogus") && msg.contains("c.toml"), "{msg}");
        std::fs::write(&path, "[grpo]\nsteps = 5\n").unwrap();
        assert_eq!(
            TrainConfig::resolve(Some(&path), &[]).unwrap().grpo.steps,
            5
        );
    }
}
