//! The arithmetic task as an environment: prompts are training problems, completions are
//! verified exactly and classified by solution pattern; the pattern shares are its per-step
//! metrics and the character tokenizer is saved with each checkpoint.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use reinforge_tasks::tokenizer::{BOS, EOS, PAD};
use reinforge_tasks::{ArithTask, Pattern, Problem, Split, Verdict};
use reinforge_torch::{generate, Policy, SamplingParams};

use super::retry::{Attempts, Retry};
use reinforge_reward::integrity::CanaryKind;
use reinforge_train::config::RlConfig;
use reinforge_train::env::{
    label_shares, sampling_params, Audit, EnvMetrics, Environment, Rollout, ScoredCanary,
};
use reinforge_train::multi_turn::{converse, EpisodeLimits};
use reinforge_train::rollout::{Engine, Generated};
use reinforge_train::run_dir::write_atomic;

/// File of the character tokenizer inside a checkpoint directory.
pub const TOKENIZER_FILE: &str = "char_tokenizer.json";

/// A rollout of the task with its problem and pattern.
#[derive(Debug, Clone)]
pub struct Scored {
    /// Index of the problem in the list passed to [`sample_and_score`].
    pub problem: usize,
    pub pattern: Pattern,
    pub rollout: Rollout,
}

/// A reward that replaces the exact verifier's in training draws: `(problem, completion text,
/// truncated) -> reward`. Evaluation always uses the exact verifier.
pub type CompletionReward = Arc<dyn Fn(&Problem, &str, bool) -> f64 + Send + Sync>;

/// The arithmetic task as an [`Environment`].
pub struct ArithEnv {
    pub task: ArithTask,
    digits: u32,
    /// Attempts per episode (1: single turn) and the tokens each may take.
    attempts: usize,
    turn_tokens: usize,
    /// Set: single-turn training rollouts are scored by it instead of `verdict.reward()`.
    reward: Option<CompletionReward>,
}

impl ArithEnv {
    pub fn new(digits: u32) -> Self {
        Self {
            task: ArithTask::new(digits),
            digits,
            attempts: 1,
            turn_tokens: 0,
            reward: None,
        }
    }

    /// Scores single-turn training rollouts with `reward` instead of the exact verifier
    /// (DERL's evolved rewards); multi-turn episodes keep the retry game's reward.
    pub fn with_reward(mut self, reward: CompletionReward) -> Self {
        self.reward = Some(reward);
        self
    }

    /// Episodes of up to `attempts` attempts ([`super::retry`]), each at most `turn_tokens`
    /// tokens.
    pub fn with_attempts(mut self, attempts: usize, turn_tokens: usize) -> Self {
        self.attempts = attempts.max(1);
        self.turn_tokens = turn_tokens;
        self
    }

    /// Tokens of one problem's prompt, `<bos>` included.
    fn prompt_len(&self) -> usize {
        1 + 2 * self.digits as usize + 2
    }

    /// Multi-turn episodes of the retry game, scored and labelled by their first attempt's
    /// pattern.
    fn draw_episodes(
        &self,
        engine: &dyn Engine,
        problems: &[Problem],
        params: &SamplingParams,
        seed: u64,
        g: usize,
    ) -> Result<Vec<Rollout>> {
        let jobs = jobs(&self.task, problems, g);
        let prompts: Vec<Vec<i64>> = jobs.iter().map(|(_, ids)| ids.clone()).collect();
        let mut states: Vec<Attempts> = jobs
            .iter()
            .map(|(i, ids)| Attempts {
                problem: problems[*i],
                prompt: ids.clone(),
                attempt: 0,
                solved_at: None,
                first_pattern: None,
            })
            .collect();
        let limits = EpisodeLimits {
            max_turns: self.attempts,
            max_tokens: self.attempts * params.max_new_tokens
                + (self.attempts - 1) * self.prompt_len(),
        };
        let retry = Retry { task: &self.task };
        let trajectories = converse(engine, &retry, &prompts, &mut states, params, limits, seed)?;
        Ok(trajectories
            .into_iter()
            .zip(states)
            .zip(prompts)
            .map(|((t, ep), prompt)| Rollout {
                prompt,
                tokens: t.tokens,
                logprobs: t.logprobs,
                entropies: t.entropies,
                truncated: t.truncated && ep.solved_at.is_none(),
                trained: Some(t.trained),
                version: t.version,
                score: ep.reward(),
                label: ep.first_pattern.map(Pattern::name),
                images: Vec::new(),
                audit: Audit {
                    credited: Some(ep.solved_at.is_some()),
                    ..Audit::default()
                },
            })
            .collect())
    }
}

/// Encodes the prompt of `p` (with `<bos>`).
pub fn encode_prompt(task: &ArithTask, p: &Problem) -> Vec<i64> {
    let mut ids = vec![BOS];
    ids.extend(
        ArithTask::tokenizer()
            .encode(&task.prompt(p))
            .expect("task prompts use the task alphabet"),
    );
    ids
}

/// Sampling parameters with `<eos>` as the stop token.
pub fn sampling(temperature: f64, top_p: f64, top_k: i64, max_new_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p,
        top_k,
        max_new_tokens,
        stop_tokens: vec![EOS],
    }
}

/// Samples `n` completions of each problem (rows `i*n .. (i+1)*n` belong to problem `i`) from
/// `policy`, decoding at most `batch_size` sequences at a time (torch's generator as the caller
/// seeded it), then verifies and classifies each. `on_batch` is told how many sequences each
/// decoded batch held (for progress bars).
pub fn sample_and_score(
    policy: &Policy,
    task: &ArithTask,
    problems: &[Problem],
    n: usize,
    params: &SamplingParams,
    batch_size: usize,
    mut on_batch: impl FnMut(usize),
) -> Vec<Scored> {
    let jobs = jobs(task, problems, n);
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(batch_size.max(1)) {
        let prompts: Vec<Vec<i64>> = chunk.iter().map(|(_, ids)| ids.clone()).collect();
        let completions = generate(&policy.model, &prompts, params, PAD, policy.device());
        let generated = Generated {
            completions,
            version: 0,
        };
        out.extend(score(task, problems, chunk, generated));
        on_batch(chunk.len());
    }
    out
}

/// `(problem index, prompt ids)` of `n` samples of each problem, a problem's rows together.
fn jobs(task: &ArithTask, problems: &[Problem], n: usize) -> Vec<(usize, Vec<i64>)> {
    problems
        .iter()
        .enumerate()
        .flat_map(|(i, p)| std::iter::repeat_n((i, encode_prompt(task, p)), n))
        .collect()
}

/// Verifies and classifies the completions of `jobs` (one per job, in order).
fn score(
    task: &ArithTask,
    problems: &[Problem],
    jobs: &[(usize, Vec<i64>)],
    generated: Generated,
) -> Vec<Scored> {
    let tokenizer = ArithTask::tokenizer();
    let version = generated.version;
    jobs.iter()
        .cloned()
        .zip(generated.completions)
        .map(|((problem, prompt), c)| {
            let text = tokenizer.decode(&c.tokens);
            let verdict = if c.truncated {
                Verdict::Unparsable
            } else {
                task.verify(&problems[problem], &text)
            };
            let pattern = task.classify(&text);
            let credited = verdict == Verdict::Correct;
            let answer = text.split('>').nth(1).map(str::to_string);
            let question = task.prompt(&problems[problem]);
            let audit = Audit::of(Some(credited), answer, &question, &text, c.truncated);
            Scored {
                problem,
                pattern,
                rollout: Rollout {
                    prompt,
                    tokens: c.tokens,
                    logprobs: c.logprobs,
                    entropies: c.entropies,
                    truncated: c.truncated,
                    trained: None,
                    version,
                    score: verdict.reward(),
                    label: Some(pattern.name()),
                    images: Vec::new(),
                    audit,
                },
            }
        })
        .collect()
}

impl Environment for ArithEnv {
    fn draw(&self, engine: &dyn Engine, seed: u64, cfg: &RlConfig) -> Result<Vec<Rollout>> {
        let problems = self.task.problems(seed, cfg.prompts_per_step, Split::Train);
        let params = sampling_params(cfg, vec![EOS]);
        if self.attempts > 1 {
            return self.draw_episodes(engine, &problems, &params, seed, cfg.num_generations);
        }
        let jobs = jobs(&self.task, &problems, cfg.num_generations);
        let prompts: Vec<Vec<i64>> = jobs.iter().map(|(_, ids)| ids.clone()).collect();
        let generated = engine.generate(&prompts, &params, seed)?;
        let scored = score(&self.task, &problems, &jobs, generated);
        let Some(reward) = &self.reward else {
            return Ok(scored.into_iter().map(|s| s.rollout).collect());
        };
        let tokenizer = ArithTask::tokenizer();
        Ok(scored
            .into_iter()
            .map(|s| {
                let mut rollout = s.rollout;
                let text = tokenizer.decode(&rollout.tokens);
                rollout.score = reward(&problems[s.problem], &text, rollout.truncated);
                rollout
            })
            .collect())
    }

    /// The canaries of `prompts` training problems drawn with `seed`, scored by the task's
    /// exact verifier.
    fn canaries(&self, seed: u64, prompts: usize) -> Result<Vec<ScoredCanary>> {
        let problems = self
            .task
            .problems(seed ^ CANARY_SEED, prompts.max(1), Split::Train);
        let mut out = vec![];
        for (i, p) in problems.iter().enumerate() {
            let other = problems[(i + 1) % problems.len()];
            for (kind, response) in canaries(p, other.a + other.b) {
                let verdict = self.task.verify(p, &response);
                out.push(ScoredCanary {
                    kind,
                    prompt: self.task.prompt(p),
                    response,
                    reward: verdict.reward(),
                    credited: verdict == Verdict::Correct,
                });
            }
        }
        Ok(out)
    }

    /// `pattern/columns_share`, `pattern/direct_share`: the step's completions in each
    /// solution pattern.
    /// With attempts, also `multi_turn/turns_mean` and `multi_turn/observations_mean`.
    fn metrics(&self, rollouts: &[Rollout]) -> EnvMetrics {
        let names = Pattern::SOLUTION_PATTERNS.map(Pattern::name);
        let mut m = label_shares(rollouts, "pattern", &names);
        if self.attempts > 1 {
            m.extend(reinforge_train::multi_turn::episode_metrics(rollouts));
        }
        m
    }

    fn save_files(&self, dir: &Path) -> Result<()> {
        write_atomic(
            &dir.join(TOKENIZER_FILE),
            serde_json::to_string(&ArithTask::tokenizer())?.as_bytes(),
        )
    }

    fn pad_id(&self) -> i64 {
        PAD
    }

    /// `<bos>`, two operands, `+` and `=`; with attempts, the earlier attempts and the
    /// problem posed again before the last one.
    fn max_prompt_len(&self) -> usize {
        self.prompt_len() + (self.attempts - 1) * (self.turn_tokens + self.prompt_len())
    }

    fn describe_longest_prompt(&self) -> String {
        format!("a {}-digit problem", self.digits)
    }
}

/// Mixed into the canary draw's seed so it never repeats a step's problems.
const CANARY_SEED: u64 = 0x6361_6e61_7279;

/// Known-wrong completions of `p` in the task's answer format (`>` then digits): an operand
/// as the answer, `other` (another problem's sum), nothing, a cut-off answer, two answers.
/// Those that would equal the sum are left out.
fn canaries(p: &Problem, other: u64) -> Vec<(CanaryKind, String)> {
    let sum = p.a + p.b;
    let mut out = vec![];
    for operand in [p.a, p.b] {
        if operand != sum {
            out.push((CanaryKind::QuestionNumbers, format!(">{operand}")));
        }
    }
    if other != sum {
        out.push((CanaryKind::OtherAnswer, format!(">{other}")));
    }
    out.push((CanaryKind::Empty, String::new()));
    out.push((CanaryKind::Truncated, ">".into()));
    if sum >= 10 {
        out.push((CanaryKind::Truncated, format!(">{}", sum / 10)));
    }
    out.push((CanaryKind::Hedged, format!(">{sum} or {}", sum + 1)));
    out.push((CanaryKind::Hedged, format!(">{} or {sum}", sum + 1)));
    out
}
