//! The reward-hacking monitor's view of a dataset run: each row's question text (what a
//! credited answer is looked for in) and the canaries of a few rows scored by the run's
//! reward spec.

use anyhow::{Context, Result};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_reward::integrity::{canaries, credited, CanaryKind};
use reinforge_reward::Sample;
use reinforge_tasks::data::Prompt;

use super::env::DataEnv;
use reinforge_train::env::ScoredCanary;

/// Mixed into the canary draw's seed so it never repeats the step's prompt draw.
const CANARY_SEED: u64 = 0x6361_6e61_7279;

impl DataEnv<'_> {
    /// Row `row`'s prompt as the user wrote it (a conversation's messages joined by lines),
    /// without the chat template's text.
    pub fn question(&self, row: usize) -> String {
        match &self.records[row].prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Messages(m) => m
                .iter()
                .map(|m| m.content.text())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The canaries of `prompts` rows with an answer, drawn with `seed`, scored by the reward
    /// spec. Credited: a verifier component gave its correct value; with no verifier
    /// component, the reward exceeded the empty completion's for that row.
    pub(super) fn score_canaries(&self, seed: u64, prompts: usize) -> Result<Vec<ScoredCanary>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ CANARY_SEED);
        let rows: Vec<usize> = sample(&mut rng, self.len(), prompts.min(self.len()))
            .into_iter()
            .filter(|&r| self.records[r].answer.is_some())
            .collect();
        let mut cases = vec![];
        for (k, &row) in rows.iter().enumerate() {
            let gold = self.records[row].answer.as_deref().unwrap_or_default();
            let other = rows
                .get((k + 1) % rows.len())
                .filter(|&&o| o != row)
                .and_then(|&o| self.records[o].answer.as_deref());
            let question = self.question(row);
            for c in canaries(&question, gold, other) {
                cases.push((row, question.clone(), c));
            }
        }
        let samples: Vec<Sample> = cases
            .iter()
            .map(|(row, _, c)| Sample {
                prompt: self.prompts[*row].0.clone(),
                response: c.response.clone(),
                label: self.records[*row].answer.clone(),
            })
            .collect();
        let scores = self
            .reward
            .score(&samples)
            .context("scoring the reward-integrity canaries")?;
        let rows: Vec<usize> = cases.iter().map(|c| c.0).collect();
        let kinds: Vec<CanaryKind> = cases.iter().map(|c| c.2.kind).collect();
        let credited = credited(&rows, &kinds, &scores);
        Ok(cases
            .into_iter()
            .zip(scores)
            .zip(credited)
            .map(|(((_, question, c), s), credited)| ScoredCanary {
                credited,
                kind: c.kind,
                prompt: question,
                response: c.response,
                reward: s.total,
            })
            .collect())
    }
}
