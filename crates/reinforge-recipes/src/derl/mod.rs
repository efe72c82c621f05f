//! DERL (Differentiable Evolutionary Reinforcement Learning) on the default experiment's
//! task: a meta-policy over compositions of atomic reward primitives ([`primitives`]) is
//! sampled as a population each generation; every candidate reward trains the same SFT
//! checkpoint for a few GRPO steps (an ordinary run directory per inner run), its held-out
//! pass@1 is the candidate's score, and the meta-policy takes a REINFORCE step ([`meta`]).
//! Finally the best evolved reward and the hand-written default (exact answer) train from the
//! SFT checkpoint over several seeds and are compared on held-out problems with paired
//! bootstrap intervals ([`report`]).
//!
//! ```text
//! <dir>/derl.json        the options
//! <dir>/state.json       meta-policy and every finished generation (written after each)
//! <dir>/sft/             the SFT run every inner run starts from (GRPO steps = 0)
//! <dir>/inner/gGGG-cCC-sS/   inner runs: generation, candidate, seed
//! <dir>/final/{best,default}-sS/   the final comparison's runs
//! <dir>/comparison.json, report.md
//! ```

pub mod meta;
pub mod primitives;
pub mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use self::meta::{Candidate, MetaPolicy};
use self::primitives::Composition;
use crate::arith::env::ArithEnv;
use crate::arith::evaluate::EvalReport;
use crate::arith::{self, Outcome};
use reinforge_train::config::TrainConfig;
use reinforge_train::run_dir::{read_json, write_atomic, write_json, RunDir};
use reinforge_train::seeds::step_seed;

/// Mixed into the meta-policy's sampling seeds.
const PHASE_DERL: u64 = 0x6465_726c;
/// Final-comparison runs use seeds `seed + FINAL_SEED_OFFSET + s`, away from validation's.
const FINAL_SEED_OFFSET: u64 = 1000;

/// The outer loop's settings (stored in `derl.json`; a resumed loop reads them back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerlOptions {
    /// Candidate rewards sampled per generation.
    pub population: usize,
    /// Generations of the outer loop.
    pub generations: usize,
    /// GRPO steps of each inner run.
    pub inner_steps: usize,
    /// Inner runs per candidate (seeds `seed`, `seed + 1`, ...); its score is their mean.
    pub seeds: usize,
    /// Seeds of the final comparison (each trains the best and the default reward).
    pub final_seeds: usize,
    /// Meta-policy learning rate.
    pub lr: f64,
    /// Held-out problems of each inner run's validation.
    pub val_problems: usize,
    /// Held-out problems of each final-comparison run.
    pub test_problems: usize,
    /// Samples per problem in every evaluation.
    pub eval_samples: usize,
}

impl DerlOptions {
    /// Errors naming the option that is out of range.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("--population", self.population),
            ("--generations", self.generations),
            ("--inner-steps", self.inner_steps),
            ("--seeds", self.seeds),
            ("--final-seeds", self.final_seeds),
            ("--val-problems", self.val_problems),
            ("--test-problems", self.test_problems),
            ("--eval-samples", self.eval_samples),
        ];
        for (name, v) in positive {
            if v == 0 {
                bail!("{name} must be at least 1");
            }
        }
        if self.population < 2 {
            bail!("--population must be at least 2 (the baseline is the population's mean)");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            bail!("--lr must be a positive number, got {}", self.lr);
        }
        Ok(())
    }
}

/// One candidate of a generation and its validation score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub candidate: Candidate,
    pub reward: Composition,
    /// Held-out pass@1 of each seed's inner run.
    pub pass_at_1: Vec<f64>,
    /// Their mean: the candidate's score.
    pub score: f64,
}

/// A finished generation: its candidates, and the meta-policy after its update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub generation: usize,
    pub candidates: Vec<Scored>,
    pub best: f64,
    pub mean: f64,
    /// On-probability of each primitive after the update (in [`primitives::Primitive::ALL`]
    /// order).
    pub on_probabilities: Vec<f64>,
    /// Primitives with on-probability above one half after the update.
    pub surviving: Vec<String>,
}

/// The outer loop's state after its last finished generation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DerlState {
    pub policy: MetaPolicy,
    pub generations: Vec<Generation>,
}

impl DerlState {
    /// The best candidate over every generation (the earliest of equals).
    pub fn best(&self) -> Option<&Scored> {
        self.generations.iter().flat_map(|g| &g.candidates).fold(
            None,
            |best: Option<&Scored>, c| match best {
                Some(b) if b.score >= c.score => Some(b),
                _ => Some(c),
            },
        )
    }
}

/// How a call to [`run`] ended.
pub enum DerlOutcome {
    Finished(Box<report::Comparison>),
    /// Ctrl-C: the inner run saved its checkpoint; resume to continue.
    Interrupted,
}

/// A DERL directory: its options and the base config of every run.
pub struct DerlDir {
    pub root: PathBuf,
    pub options: DerlOptions,
    pub base: TrainConfig,
}

impl DerlDir {
    /// Creates `root` for a new outer loop; refuses an existing one.
    pub fn create(root: &Path, options: DerlOptions, base: TrainConfig) -> Result<Self> {
        options.validate()?;
        check_base(&base)?;
        if root.join("derl.json").exists() {
            bail!(
                "{} already holds a DERL run; continue it with `reinforge derl --resume {}`",
                root.display(),
                root.display()
            );
        }
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        write_atomic(&root.join("base.toml"), base.to_toml().as_bytes())?;
        write_json(&root.join("derl.json"), &options)?;
        Ok(Self {
            root: root.to_path_buf(),
            options,
            base,
        })
    }

    /// Opens an existing DERL directory.
    pub fn open(root: &Path) -> Result<Self> {
        let path = root.join("derl.json");
        if !path.exists() {
            bail!("{} is not a DERL directory (no derl.json)", root.display());
        }
        let options: DerlOptions = read_json(&path)?;
        let base = TrainConfig::resolve(Some(&root.join("base.toml")), &[])?;
        Ok(Self {
            root: root.to_path_buf(),
            options,
            base,
        })
    }

    /// The state after the last finished generation (the start if none).
    pub fn state(&self) -> Result<DerlState> {
        let path = self.root.join("state.json");
        if !path.exists() {
            return Ok(DerlState::default());
        }
        let state: DerlState = read_json(&path)?;
        if !state.policy.has_shape() {
            bail!(
                "{}: the meta-policy has the wrong number of primitives or weights",
                path.display()
            );
        }
        Ok(state)
    }
}

/// DERL trains single-turn episodes only (the composed reward scores one completion).
fn check_base(base: &TrainConfig) -> Result<()> {
    base.validate_arith()?;
    if base.task.attempts != 1 {
        bail!(
            "task.attempts = {}: DERL's rewards score single completions; set task.attempts = 1",
            base.task.attempts
        );
    }
    Ok(())
}

/// Runs (or continues) the outer loop and the final comparison in `dir`.
pub fn run(dir: &DerlDir) -> Result<DerlOutcome> {
    let Some(sft) = base_sft(dir)? else {
        return Ok(DerlOutcome::Interrupted);
    };
    let opts = &dir.options;
    let mut state = dir.state()?;
    while state.generations.len() < opts.generations {
        let Some(generation) = run_generation(dir, &sft, &state)? else {
            return Ok(DerlOutcome::Interrupted);
        };
        state.policy.update(
            &generation
                .candidates
                .iter()
                .map(|c| c.candidate.clone())
                .collect::<Vec<_>>(),
            &generation
                .candidates
                .iter()
                .map(|c| c.score)
                .collect::<Vec<_>>(),
            opts.lr,
        );
        let generation = Generation {
            on_probabilities: state.policy.on_probabilities(),
            surviving: state
                .policy
                .surviving()
                .iter()
                .map(|p| p.name().to_string())
                .collect(),
            ..generation
        };
        eprintln!("{}", report::generation_line(&generation));
        state.generations.push(generation);
        write_json(&dir.root.join("state.json"), &state)?;
    }
    let Some(comparison) = final_comparison(dir, &sft, &state)? else {
        return Ok(DerlOutcome::Interrupted);
    };
    report::write(dir, &state, &comparison)?;
    Ok(DerlOutcome::Finished(Box::new(comparison)))
}

/// The SFT run every inner run starts from (made once: the default experiment with no GRPO
/// steps). `None` when interrupted.
fn base_sft(dir: &DerlDir) -> Result<Option<RunDir>> {
    let root = dir.root.join("sft");
    let (run, cfg) = if root.join("config.toml").exists() {
        RunDir::open(&root)?
    } else {
        let mut cfg = dir.base.clone();
        cfg.runs_dir = dir.root.display().to_string();
        cfg.name = Some("sft".into());
        cfg.grpo.steps = 0;
        cfg.eval.problems = dir.options.val_problems;
        cfg.eval.samples = dir.options.eval_samples;
        (RunDir::create(&cfg)?, cfg)
    };
    if run.path("summary.json").exists() {
        return Ok(Some(run));
    }
    eprintln!("DERL: SFT once into {}", run.root.display());
    match arith::run(&cfg, &run)? {
        Outcome::Finished(_) => Ok(Some(run)),
        Outcome::Interrupted => Ok(None),
        Outcome::Rank => bail!("DERL runs on one process (no data-parallel ranks)"),
    }
}

/// Samples generation `state.generations.len()` and scores each candidate; `None` when
/// interrupted.
fn run_generation(dir: &DerlDir, sft: &RunDir, state: &DerlState) -> Result<Option<Generation>> {
    let g = state.generations.len();
    let opts = &dir.options;
    let population = state.policy.sample(
        opts.population,
        step_seed(dir.base.seed, PHASE_DERL, g as u64),
    );
    let mut candidates = Vec::with_capacity(population.len());
    for (i, candidate) in population.into_iter().enumerate() {
        let reward = candidate.composition();
        let mut pass_at_1 = Vec::with_capacity(opts.seeds);
        for s in 0..opts.seeds {
            let inner = Inner {
                parent: dir.root.join("inner"),
                name: format!("g{g:03}-c{i:02}-s{s}"),
                seed: dir.base.seed + s as u64,
                steps: opts.inner_steps,
                problems: opts.val_problems,
                samples: opts.eval_samples,
            };
            let Some(eval) = inner.run(&dir.base, sft, Some(&reward))? else {
                return Ok(None);
            };
            pass_at_1.push(eval.pass_at_1);
        }
        let score = pass_at_1.iter().sum::<f64>() / pass_at_1.len() as f64;
        eprintln!(
            "DERL generation {g} candidate {i}: {} -> validation pass@1 {score:.3}",
            reward.describe()
        );
        candidates.push(Scored {
            candidate,
            reward,
            pass_at_1,
            score,
        });
    }
    let scores: Vec<f64> = candidates.iter().map(|c| c.score).collect();
    Ok(Some(Generation {
        generation: g,
        best: scores.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean: scores.iter().sum::<f64>() / scores.len() as f64,
        candidates,
        on_probabilities: vec![],
        surviving: vec![],
    }))
}

/// The best evolved reward and the default, trained from the SFT checkpoint with each final
/// seed and evaluated on that seed's held-out problems; `None` when interrupted.
fn final_comparison(
    dir: &DerlDir,
    sft: &RunDir,
    state: &DerlState,
) -> Result<Option<report::Comparison>> {
    let best = state
        .best()
        .context("the outer loop finished no generation")?
        .reward
        .clone();
    let opts = &dir.options;
    let mut arms: [Vec<EvalReport>; 2] = [vec![], vec![]];
    for s in 0..opts.final_seeds {
        for (arm, (label, reward)) in [("default", None), ("best", Some(&best))]
            .into_iter()
            .enumerate()
        {
            let inner = Inner {
                parent: dir.root.join("final"),
                name: format!("{label}-s{s}"),
                seed: dir.base.seed + FINAL_SEED_OFFSET + s as u64,
                steps: opts.inner_steps,
                problems: opts.test_problems,
                samples: opts.eval_samples,
            };
            let Some(eval) = inner.run(&dir.base, sft, reward)? else {
                return Ok(None);
            };
            arms[arm].push(eval);
        }
    }
    let [default, evolved] = arms;
    report::compare(&best, &default, &evolved, dir.base.seed).map(Some)
}

/// One inner run: GRPO from the SFT checkpoint with a candidate reward.
struct Inner {
    parent: PathBuf,
    name: String,
    seed: u64,
    steps: usize,
    problems: usize,
    samples: usize,
}

impl Inner {
    /// Runs (or continues, or reads back) the inner run; its held-out evaluation after GRPO,
    /// `None` when interrupted. `reward: None` is the default exact-answer reward.
    fn run(
        &self,
        base: &TrainConfig,
        sft: &RunDir,
        reward: Option<&Composition>,
    ) -> Result<Option<EvalReport>> {
        let root = self.parent.join(&self.name);
        if root.join("summary.json").exists() {
            return read_json(&root.join("eval_rl.json")).map(Some);
        }
        if !root.join("config.toml").exists() {
            self.create(base, sft, &root)?;
        }
        let (run, cfg) = RunDir::open(&root)?;
        let mut env = ArithEnv::new(cfg.task.digits).with_attempts(1, 0);
        if let Some(reward) = reward {
            let (task, reward) = (env.task, reward.clone());
            env = env.with_reward(Arc::new(move |p, text, truncated| {
                reward.reward(&task, p, text, truncated)
            }));
        }
        match arith::run_with_env(&cfg, &run, env)? {
            Outcome::Finished(_) => read_json(&run.path("eval_rl.json")).map(Some),
            Outcome::Interrupted => Ok(None),
            Outcome::Rank => bail!("DERL runs on one process (no data-parallel ranks)"),
        }
    }

    /// Makes the run directory: its config and the SFT run's `sft` and `latest` checkpoints
    /// (so the run starts at GRPO step 0), assembled aside and renamed into place.
    fn create(&self, base: &TrainConfig, sft: &RunDir, root: &Path) -> Result<()> {
        let mut cfg = base.clone();
        cfg.runs_dir = self.parent.display().to_string();
        cfg.name = Some(self.name.clone());
        cfg.seed = self.seed;
        cfg.grpo.steps = self.steps;
        cfg.eval.problems = self.problems;
        cfg.eval.samples = self.samples;
        let tmp = self.parent.join(format!(".{}.tmp", self.name));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(tmp.join("checkpoints"))
            .with_context(|| format!("creating {}", tmp.display()))?;
        for tag in ["sft", "latest"] {
            copy_dir(&sft.checkpoint(tag), &tmp.join("checkpoints").join(tag))?;
        }
        write_atomic(&tmp.join("config.toml"), cfg.to_toml().as_bytes())?;
        std::fs::rename(&tmp, root)
            .with_context(|| format!("moving {} to {}", tmp.display(), root.display()))
    }
}

/// Copies the files of directory `from` (one level) into a new directory `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}
