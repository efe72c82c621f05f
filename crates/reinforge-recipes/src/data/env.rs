//! The environment of a dataset run (`reinforge train --model DIR --data FILE`): prompts
//! from the file, completions scored by a reward specification (`reinforge-reward`), and with
//! `--tools` multi-turn episodes with the sandboxed calculator.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context, Result};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_hf::HfTokenizer;
use reinforge_reward::{Reward, Sample};
use reinforge_tasks::{read_records, DataColumns, PromptFormat, PromptRecord};
use reinforge_torch::model::images::{Image, SharedImages};
use reinforge_torch::sample::{generate_with_images, GenerateHooks};
use reinforge_torch::{copy_aux_files, generate, LoraConfig, Policy};
use serde::{Deserialize, Serialize};

use super::calculator::{Calculator, Conversation};
use crate::loaded::{LoadedModel, PromptStyle};
use reinforge_tasks::data::Message;
use reinforge_train::config::RlConfig;
use reinforge_train::env::{sampling_params, Audit, Environment, Rollout, ScoredCanary};
use reinforge_train::multi_turn::{converse, EpisodeLimits};
use reinforge_train::rollout::{Engine, Generated};

/// Where a data run's inputs come from (the `reinforge train --model/--data` flags).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataRun {
    pub model: PathBuf,
    pub data: PathBuf,
    pub reward: Option<PathBuf>,
    pub prompt_column: String,
    pub answer_column: String,
    pub raw: bool,
    pub system: Option<String>,
    /// Train LoRA adapters only (saved in the PEFT layout too).
    pub lora: Option<LoraConfig>,
    /// Held-out prompts evaluated before and after training.
    #[serde(default)]
    pub heldout: Option<PathBuf>,
    /// Tools the policy may call (`calculator`): episodes become multi-turn.
    #[serde(default)]
    pub tools: Option<ToolKind>,
    /// Policy turns per episode with tools (each up to `rl.max_completion_length` tokens).
    #[serde(default = "three")]
    pub max_turns: usize,
}

fn three() -> usize {
    3
}

/// Tools of `--tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// Arithmetic expressions evaluated in the sandbox ([`super::calculator`]).
    Calculator,
}

impl ToolKind {
    /// Every kind, for the command line's parser.
    pub const ALL: [Self; 1] = [Self::Calculator];
}

/// Prompts of a dataset, sampled with the policy and scored by a reward spec.
pub struct DataEnv<'a> {
    /// The policy's tokenizer (decoding completions for the reward).
    tokenizer: &'a HfTokenizer,
    pad_id: i64,
    stop_ids: Vec<i64>,
    /// The source checkpoint (its tokenizer files go into every checkpoint).
    source: PathBuf,
    data: PathBuf,
    pub(super) records: Vec<PromptRecord>,
    pub(super) prompts: Vec<(String, Vec<i64>)>,
    /// Each row's processed images (vision-language rows; empty for text rows).
    images: SharedImages,
    pub(super) reward: Reward,
    /// Samples whose reward had a component past its deadline or crashed, since the last
    /// [`Environment::metrics`] (its `reward/timeouts`).
    reward_failures: AtomicUsize,
    /// With `--tools`: the tool, each row's prompt as messages, the turns per episode.
    tools: Option<ToolUse<'a>>,
}

/// Multi-turn episodes with a tool.
struct ToolUse<'a> {
    calculator: Calculator<'a>,
    messages: Vec<Vec<Message>>,
    max_turns: usize,
}

impl<'a> DataEnv<'a> {
    /// Reads and encodes every prompt up front, so a bad row fails before training starts: a
    /// row whose prompt plus `max_completion_length` tokens would not fit the model's
    /// positions is an error naming the row and both keys.
    pub fn new(
        model: &'a LoadedModel,
        run: &DataRun,
        reward: Reward,
        max_completion_length: usize,
    ) -> Result<Self> {
        let positions = model.policy.model.config().max_position_embeddings;
        let turns = if run.tools.is_some() {
            run.max_turns.max(1)
        } else {
            1
        };
        let max_completion_length = max_completion_length * turns;
        let columns = DataColumns {
            prompt: run.prompt_column.clone(),
            prompt_format: PromptFormat::Auto,
            // A reward of learned and format components reads no label.
            answer: reward
                .spec()
                .needs_labels()
                .then(|| run.answer_column.clone()),
            images: Some("images".into()),
        };
        let records = read_records(&run.data, &columns)?;
        if records.is_empty() {
            bail!("{}: no rows", run.data.display());
        }
        let source = run.data.display().to_string();
        if run.tools.is_some() {
            refuse_tools_with_images(&records, &source)?;
        }
        let style = PromptStyle {
            raw: run.raw,
            system: run.system.clone(),
        };
        let (prompts, images): (Vec<_>, Vec<_>) = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let p = model.encode_with_images(&r.prompt, &r.images, &style, (&source, i + 1))?;
                reinforge_train::trainer::check_positions(
                    p.ids.len(),
                    max_completion_length,
                    positions,
                    &format!("the prompt of {source} row {}", i + 1),
                )?;
                Ok(((p.text, p.ids), p.images))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let tools = match run.tools {
            None => None,
            Some(ToolKind::Calculator) => Some(ToolUse {
                calculator: Calculator::new(&model.tokenizer)?,
                messages: records
                    .iter()
                    .map(|r| model.messages(&r.prompt, &style))
                    .collect::<Result<_>>()?,
                max_turns: turns,
            }),
        };
        Ok(Self {
            tools,
            tokenizer: &model.tokenizer,
            pad_id: model.pad_id(),
            stop_ids: model.stop_ids(),
            source: run.model.clone(),
            data: run.data.clone(),
            records,
            prompts,
            images: SharedImages::new(images),
            reward,
            reward_failures: AtomicUsize::new(0),
        })
    }

    /// Number of prompts.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the dataset has no prompt (never, once built: `new` refuses an empty one).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether some row has images.
    pub fn has_images(&self) -> bool {
        !self.images.is_text_only()
    }

    /// Ids that end a completion.
    pub fn stop_ids(&self) -> Vec<i64> {
        self.stop_ids.clone()
    }

    /// The `task` column of row `row` (the group evaluations report accuracy for), or `all`.
    pub fn task(&self, row: usize) -> String {
        match self.records[row].extra.get("task") {
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(other) => other.to_string(),
            None => "all".into(),
        }
    }

    /// `g` completions of each of `rows` (in that order, a row's completions together),
    /// sampled from `policy` with `params` (torch's generator as the caller seeded it) and
    /// scored by the reward spec.
    pub fn sample_rows(
        &self,
        policy: &Policy,
        rows: &[usize],
        g: usize,
        params: &reinforge_torch::SamplingParams,
    ) -> Result<Vec<Rollout>> {
        let engine = Unseeded {
            policy,
            pad_id: self.pad_id,
        };
        self.rollouts(&engine, rows, g, params, 0)
    }

    /// `g` episodes of each of `rows` on `engine` (single-turn, or multi-turn with tools),
    /// scored by the reward spec.
    fn rollouts(
        &self,
        engine: &dyn Engine,
        rows: &[usize],
        g: usize,
        params: &reinforge_torch::SamplingParams,
        seed: u64,
    ) -> Result<Vec<Rollout>> {
        let ids = self.row_prompts(rows, g);
        let Some(tools) = &self.tools else {
            let images = self.row_images(rows, g);
            let generated = if images.iter().all(Vec::is_empty) {
                engine.generate(&ids, params, seed)?
            } else {
                engine.generate_with_images(&ids, &images, params, seed)?
            };
            let drawn = engine.drawn_rows(ids.len());
            return self.score_rows(rows, g, (ids, images), generated, drawn);
        };
        let mut states: Vec<Conversation> = rows
            .iter()
            .flat_map(|&r| std::iter::repeat_n(Conversation::new(tools.messages[r].clone()), g))
            .collect();
        let budget = params.max_new_tokens * tools.max_turns;
        let trajectories = converse(
            engine,
            &tools.calculator,
            &ids,
            &mut states,
            params,
            EpisodeLimits {
                max_turns: tools.max_turns,
                max_tokens: budget,
            },
            seed,
        )?;
        let samples: Vec<Sample> = states
            .iter()
            .enumerate()
            .map(|(i, c)| Sample {
                prompt: self.prompts[rows[i / g]].0.clone(),
                response: c.final_text.clone(),
                label: self.records[rows[i / g]].answer.clone(),
            })
            .collect();
        let scores = self
            .reward
            .score(&samples)
            .with_context(|| format!("scoring the episodes of data rows {rows:?} (0-based)"))?;
        self.count_failures(&scores);
        Ok(trajectories
            .into_iter()
            .zip(scores)
            .enumerate()
            .map(|(i, (t, s))| Rollout {
                audit: Audit::of(
                    s.credited,
                    s.answer.clone(),
                    &self.question(rows[i / g]),
                    &samples[i].response,
                    t.truncated,
                ),
                prompt: ids[i].clone(),
                tokens: t.tokens,
                logprobs: t.logprobs,
                entropies: t.entropies,
                truncated: t.truncated,
                trained: Some(t.trained),
                version: t.version,
                score: s.total,
                label: None,
                images: Vec::new(),
            })
            .collect())
    }

    /// Counts the samples of `scores` with a failed reward component (`reward/timeouts`).
    fn count_failures(&self, scores: &[reinforge_reward::Scored]) {
        let n = scores.iter().filter(|s| !s.failed.is_empty()).count();
        self.reward_failures.fetch_add(n, Ordering::Relaxed);
    }

    /// The prompt ids of `g` samples of each of `rows`, a row's samples together.
    fn row_prompts(&self, rows: &[usize], g: usize) -> Vec<Vec<i64>> {
        rows.iter()
            .flat_map(|&r| std::iter::repeat_n(self.prompts[r].1.clone(), g))
            .collect()
    }

    /// The images of `g` samples of each of `rows` (handles on the same tensors).
    fn row_images(&self, rows: &[usize], g: usize) -> Vec<Vec<Image>> {
        rows.iter()
            .flat_map(|&r| std::iter::repeat_n(self.images.row(r), g))
            .collect()
    }

    /// Scores the completions of `g` samples of each of `rows` by the reward spec; only the
    /// `drawn` ones: the others are another rank's placeholders, scored 0 without calling the
    /// reward (a reward model's forward pass is not free).
    fn score_rows(
        &self,
        rows: &[usize],
        g: usize,
        (ids, images): (Vec<Vec<i64>>, Vec<Vec<Image>>),
        generated: Generated,
        drawn: std::ops::Range<usize>,
    ) -> Result<Vec<Rollout>> {
        let (completions, version) = (generated.completions, generated.version);
        let samples: Vec<Sample> = completions[drawn.clone()]
            .iter()
            .zip(drawn.clone())
            .map(|(c, i)| {
                let row = rows[i / g];
                Sample {
                    prompt: self.prompts[row].0.clone(),
                    response: decode(self.tokenizer, &c.tokens),
                    label: self.records[row].answer.clone(),
                }
            })
            .collect();
        let scores = self
            .reward
            .score(&samples)
            .with_context(|| format!("scoring the completions of data rows {rows:?} (0-based)"))?;
        self.count_failures(&scores);
        let mut totals = vec![0.0; completions.len()];
        let mut audits = vec![Audit::default(); completions.len()];
        for (((i, smp), s), (total, audit)) in drawn
            .clone()
            .zip(&samples)
            .zip(scores)
            .zip(totals[drawn.clone()].iter_mut().zip(&mut audits[drawn]))
        {
            *total = s.total;
            let question = self.question(rows[i / g]);
            let truncated = completions[i].truncated;
            *audit = Audit::of(s.credited, s.answer, &question, &smp.response, truncated);
        }
        Ok(completions
            .into_iter()
            .zip(totals)
            .zip(audits)
            .zip(images)
            .enumerate()
            .map(|(i, (((c, total), audit), images))| Rollout {
                audit,
                prompt: ids[i].clone(),
                tokens: c.tokens,
                logprobs: c.logprobs,
                entropies: c.entropies,
                truncated: c.truncated,
                trained: None,
                version,
                score: total,
                label: None,
                images,
            })
            .collect())
    }
}

/// The policy sampling without reseeding torch (evaluations seed once, then decode chunks).
struct Unseeded<'p> {
    policy: &'p Policy,
    pad_id: i64,
}

impl Engine for Unseeded<'_> {
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        params: &reinforge_torch::SamplingParams,
        _seed: u64,
    ) -> Result<Generated> {
        Ok(Generated {
            completions: generate(
                &self.policy.model,
                prompts,
                params,
                self.pad_id,
                self.policy.device(),
            ),
            version: 0,
        })
    }

    fn generate_with_images(
        &self,
        prompts: &[Vec<i64>],
        images: &[Vec<Image>],
        params: &reinforge_torch::SamplingParams,
        _seed: u64,
    ) -> Result<Generated> {
        let completions = generate_with_images(
            &self.policy.model,
            prompts,
            images,
            params,
            (self.pad_id, self.policy.device()),
            &mut GenerateHooks::default(),
        )?;
        Ok(Generated {
            completions,
            version: 0,
        })
    }
}

/// Multi-turn episodes re-render the conversation each turn, and tool replies carry no images:
/// rows with images are refused with `--tools` (the first such row named).
fn refuse_tools_with_images(records: &[PromptRecord], source: &str) -> Result<()> {
    if let Some(i) = records.iter().position(|r| !r.images.is_empty()) {
        bail!(
            "{source}: row {}: has images, but --tools episodes take text prompts only so far (train it single-turn: drop --tools)",
            i + 1
        );
    }
    Ok(())
}

/// Completion text for the reward: special tokens (the stop token) dropped; ids the
/// tokenizer cannot decode give an empty text (scored as no answer).
fn decode(tokenizer: &HfTokenizer, ids: &[i64]) -> String {
    let ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
    tokenizer.decode(&ids, true).unwrap_or_default()
}

impl Environment for DataEnv<'_> {
    /// Canaries of `prompts` rows drawn with `seed` ([`super::canary`]).
    fn canaries(&self, seed: u64, prompts: usize) -> Result<Vec<ScoredCanary>> {
        self.score_canaries(seed, prompts)
    }

    /// `prompts_per_step` distinct rows drawn with `seed` (all rows when the file is smaller),
    /// `num_generations` completions each, scored by the reward spec.
    fn draw(&self, engine: &dyn Engine, seed: u64, cfg: &RlConfig) -> Result<Vec<Rollout>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = cfg.prompts_per_step.min(self.len());
        let rows = sample(&mut rng, self.len(), n).into_vec();
        let params = sampling_params(cfg, self.stop_ids.clone());
        self.rollouts(engine, &rows, cfg.num_generations, &params, seed)
    }

    /// With tools: `multi_turn/turns_mean` and `multi_turn/observations_mean`.
    fn metrics(&self, rollouts: &[Rollout]) -> reinforge_train::env::EnvMetrics {
        let mut m = match self.tools {
            None => reinforge_train::env::EnvMetrics::new(),
            Some(_) => reinforge_train::multi_turn::episode_metrics(rollouts),
        };
        let failures = self.reward_failures.swap(0, Ordering::Relaxed);
        m.insert("reward/timeouts".into(), failures as f64);
        m
    }

    /// The source checkpoint's tokenizer and generation files.
    fn save_files(&self, dir: &Path) -> Result<()> {
        copy_aux_files(&self.source, dir)?;
        Ok(())
    }

    fn pad_id(&self) -> i64 {
        self.pad_id
    }

    fn max_prompt_len(&self) -> usize {
        self.prompts.iter().map(|p| p.1.len()).max().unwrap_or(0)
    }

    fn describe_longest_prompt(&self) -> String {
        let row = (0..self.prompts.len())
            .max_by_key(|&i| (self.prompts[i].1.len(), std::cmp::Reverse(i)))
            .unwrap_or(0);
        format!(
            "the longest prompt ({} row {})",
            self.data.display(),
            row + 1
        )
    }
}
