//! The reward-hacking monitor on a dataset environment (issue 27, item 2): a scripted policy
//! drifts from computing answers to repeating the prompt's numbers. Under a verifier in
//! `last_value` mode, on prompts whose numbers contain the answer, the share of credited
//! answers found in the prompt rises and the monitor warns; under the default (stated-answer)
//! verifier it does not, because the repeated numbers are never credited. The canaries tell
//! the two verifiers apart before any training.

use super::common;

use common::{data_run, fixture};
use std::collections::HashMap;
use std::path::Path;

use reinforge_recipes::data::env::DataEnv;
use reinforge_recipes::loaded::{LoadedModel, PromptStyle};
use reinforge_reward::integrity::{CanaryKind, IntegrityLog, MonitorConfig, StepCounts};
use reinforge_reward::{Reward, RewardSpec};
use reinforge_tasks::Prompt;
use reinforge_torch::{Completion, Device, LoadOptions, SamplingParams};
use reinforge_train::config::RlConfig;
use reinforge_train::env::Environment;
use reinforge_train::rollout::{Engine, Generated};

/// (a, b, hint numbers): rows 0 and 1 hint their sum, rows 2 and 3 do not.
const ROWS: [(u32, u32, [u32; 2]); 4] = [
    (7, 5, [3, 12]),
    (9, 6, [4, 15]),
    (8, 6, [3, 9]),
    (2, 7, [1, 5]),
];

fn question((a, b, h): (u32, u32, [u32; 2])) -> String {
    format!(
        "What is {a} + {b}? Hint: the numbers {} and {} may help.",
        h[0], h[1]
    )
}

/// An honest completion computes the sum; an exploit repeats the prompt's numbers, the last
/// of them last, and states nothing.
fn completion((a, b, h): (u32, u32, [u32; 2]), exploit: bool) -> String {
    if exploit {
        format!("The question mentions {a}, {b}, {} and {}", h[0], h[1])
    } else {
        format!("{a} + {b} = {}.", a + b)
    }
}

/// A policy whose first `exploit_rows` completions of each group are exploits.
struct Scripted<'a> {
    model: &'a LoadedModel,
    rows: HashMap<Vec<i64>, usize>,
    exploit_rows: usize,
    g: usize,
}

impl Engine for Scripted<'_> {
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        _: &SamplingParams,
        _: u64,
    ) -> anyhow::Result<Generated> {
        let completions = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let text = completion(ROWS[self.rows[p]], i % self.g < self.exploit_rows);
                let ids = self.model.tokenizer.encode(&text, false).unwrap();
                let tokens: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
                let back = self.model.tokenizer.decode(&ids, true).unwrap();
                assert_eq!(
                    back, text,
                    "the fixture tokenizer must round-trip the script"
                );
                Completion {
                    logprobs: vec![-1.0; tokens.len()],
                    entropies: vec![0.5; tokens.len()],
                    tokens,
                    truncated: false,
                    top: vec![],
                    aborted: false,
                }
            })
            .collect();
        Ok(Generated {
            completions,
            version: 0,
        })
    }
}

fn spec(policy: &str) -> RewardSpec {
    RewardSpec::from_toml(&format!(
        "[components.accuracy]\ntype = \"math\"\n[components.accuracy.options]\nanswer_policy = \"{policy}\"\n"
    ))
    .unwrap()
}

/// Runs six scripted steps (exploit share 0, 0, 1/2, 1, 1, 1) under `policy` through the
/// environment's scoring and the monitor's log; returns the log and the share per step.
fn monitor(policy: &str, dir: &Path) -> (IntegrityLog, Vec<f64>, DataEnvHolder) {
    let data = dir.join(format!("{policy}.jsonl"));
    let lines: String = ROWS
        .iter()
        .map(|&r| {
            serde_json::json!({"prompt": question(r), "answer": (r.0 + r.1).to_string()})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&data, lines).unwrap();
    let model = Box::leak(Box::new(
        LoadedModel::load(&fixture(), &LoadOptions::for_device(Device::Cpu)).unwrap(),
    ));
    let run = data_run(data.clone(), None);
    let reward = Reward::new(spec(policy), None).unwrap();
    let env = DataEnv::new(model, &run, reward, 64).unwrap();
    let style = PromptStyle {
        raw: false,
        system: None,
    };
    let rows = ROWS
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            (
                model
                    .encode_prompt(&Prompt::Text(question(r)), &style)
                    .unwrap()
                    .1,
                i,
            )
        })
        .collect();
    let g = 4;
    let rl = RlConfig {
        prompts_per_step: 4,
        num_generations: g,
        ..RlConfig::default()
    };
    let cfg = MonitorConfig {
        window: 2,
        ..MonitorConfig::default()
    };
    let mut log = IntegrityLog::default();
    let mut shares = vec![];
    let mut scripted = Scripted {
        model,
        rows,
        exploit_rows: 0,
        g,
    };
    for (step, exploit_rows) in [0, 0, 2, 4, 4, 4].into_iter().enumerate() {
        scripted.exploit_rows = exploit_rows;
        let rollouts = env.draw(&scripted, step as u64, &rl).unwrap();
        let mut counts = StepCounts::default();
        for r in &rollouts {
            counts.add(r.audit.credited, r.audit.answer_in_prompt, r.truncated);
        }
        let share = counts.shares()["integrity/answer_in_prompt"];
        log.record(step, "integrity/answer_in_prompt", share);
        log.check_rises(step, &cfg);
        shares.push(share);
    }
    (log, shares, DataEnvHolder(Box::new(env)))
}

/// Keeps the environment alive for the canary check.
struct DataEnvHolder(Box<DataEnv<'static>>);

#[test]
fn answer_in_prompt_rises_and_warns_only_under_an_exploitable_verifier() {
    let tmp = tempfile::tempdir().unwrap();
    let (lenient, shares, env) = monitor("last_value", tmp.path());
    // Honest steps: the two hinted rows of four; exploit steps: only the hinted rows credited.
    assert_eq!(shares[..2], [0.5, 0.5], "{shares:?}");
    assert_eq!(shares[3..], [1.0, 1.0, 1.0], "{shares:?}");
    assert_eq!(lenient.warnings.len(), 1, "{:?}", lenient.warnings);
    assert!(lenient.warnings[0].contains("integrity/answer_in_prompt rose from 0.500"));
    assert!(lenient.markdown().contains("**Warning**"));
    let canaries = env.0.canaries(7, 4).unwrap();
    let hits: Vec<_> = canaries.iter().filter(|c| c.credited).collect();
    assert!(
        hits.iter().any(|c| c.kind == CanaryKind::QuestionNumbers),
        "the repeated question numbers fool last_value: {canaries:?}"
    );

    let (stated, shares, env) = monitor("stated", tmp.path());
    assert_eq!(shares[..3], [0.5, 0.5, 0.5], "{shares:?}");
    assert_eq!(shares[3..], [0.0, 0.0, 0.0], "nothing credited: {shares:?}");
    assert!(stated.warnings.is_empty(), "{:?}", stated.warnings);
    assert!(stated.markdown().contains("No warning"));
    let canaries = env.0.canaries(7, 4).unwrap();
    assert!(canaries.len() >= 4 * 6, "{} canaries", canaries.len());
    let hits: Vec<_> = canaries.iter().filter(|c| c.credited).collect();
    assert!(
        hits.is_empty(),
        "the default verifier credits canaries: {hits:?}"
    );
}
