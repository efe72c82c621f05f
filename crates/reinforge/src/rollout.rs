//! Sampling completions for task problems and scoring them: the part of an RL iteration and
//! of an evaluation that turns prompts into verified, classified completions.

use reinforge_tasks::{tokenizer::EOS, ArithTask, Pattern, Problem, Verdict};
use reinforge_torch::tch::Device;
use reinforge_torch::{generate, Policy, SamplingParams};

/// One scored completion.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// Index of the problem in the list passed to [`sample_and_score`].
    pub problem: usize,
    pub prompt: Vec<i64>,
    pub tokens: Vec<i64>,
    pub logprobs: Vec<f32>,
    /// Entropy of the sampling distribution at each completion token.
    pub entropies: Vec<f32>,
    pub truncated: bool,
    /// The environment's reward (for the arithmetic task, the verdict's 0/1).
    pub score: f64,
    /// Solution pattern (arithmetic task only; `Other` elsewhere).
    pub pattern: Pattern,
}

impl Rollout {
    /// The reward before shaping (overlong penalties are added by the trainer).
    pub fn reward(&self) -> f64 {
        self.score
    }
}

/// Encodes the prompt of `p` (with `<bos>`).
pub fn encode_prompt(task: &ArithTask, p: &Problem) -> Vec<i64> {
    let mut ids = vec![reinforge_tasks::tokenizer::BOS];
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

/// Samples `n` completions of each problem (rows `i*n .. (i+1)*n` belong to problem `i`),
/// decoding at most `batch_size` sequences at a time, then verifies and classifies each.
/// `on_batch` is told how many sequences each decoded batch held (for progress bars).
pub fn sample_and_score(
    policy: &Policy,
    task: &ArithTask,
    problems: &[Problem],
    n: usize,
    params: &SamplingParams,
    batch_size: usize,
    device: Device,
    mut on_batch: impl FnMut(usize),
) -> Vec<Rollout> {
    let tokenizer = ArithTask::tokenizer();
    let jobs: Vec<(usize, Vec<i64>)> = problems
        .iter()
        .enumerate()
        .flat_map(|(i, p)| std::iter::repeat((i, encode_prompt(task, p))).take(n))
        .collect();
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(batch_size.max(1)) {
        let prompts: Vec<Vec<i64>> = chunk.iter().map(|(_, ids)| ids.clone()).collect();
        let completions = generate(
            &policy.model,
            &prompts,
            params,
            reinforge_tasks::tokenizer::PAD,
            device,
        );
        for ((problem, prompt), c) in chunk.iter().cloned().zip(completions) {
            let text = tokenizer.decode(&c.tokens);
            let verdict = if c.truncated {
                Verdict::Unparsable
            } else {
                task.verify(&problems[problem], &text)
            };
            out.push(Rollout {
                problem,
                prompt,
                pattern: task.classify(&text),
                tokens: c.tokens,
                logprobs: c.logprobs,
                entropies: c.entropies,
                truncated: c.truncated,
                score: verdict.reward(),
            });
        }
        on_batch(chunk.len());
    }
    out
}
