//! DERL's report: the outer loop's table and the final paired comparison of the best evolved
//! reward with the hand-written default, whose sentence is computed from the interval.

use std::fmt::Write as _;

use anyhow::{ensure, Result};
use reinforge_eval::decompose::Interval;
use reinforge_eval::passk_change::paired_pass_at_k_change;
use serde::{Deserialize, Serialize};

use super::primitives::Composition;
use super::{DerlDir, DerlState, Generation};
use crate::arith::evaluate::EvalReport;
use reinforge_train::run_dir::{write_atomic, write_json};

/// Paired bootstrap resamples of the final comparison.
const ROUNDS: usize = 2000;
/// Level of its intervals.
const LEVEL: f64 = 0.95;

/// The final comparison on held-out problems, paired by (seed, problem).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub best_reward: String,
    pub seeds: usize,
    /// Problems over all seeds (each seed draws its own).
    pub problems: usize,
    pub default_pass_at_1: f64,
    pub best_pass_at_1: f64,
    /// best - default, with its paired bootstrap interval.
    pub delta: f64,
    pub delta_interval: Interval,
    /// Per seed: (default, best) pass@1.
    pub per_seed: Vec<(f64, f64)>,
    /// What the interval shows, in words.
    pub verdict: String,
}

/// `(n, correct)` per problem of an evaluation.
fn counts(eval: &EvalReport) -> Vec<(u64, u64)> {
    eval.samples
        .iter()
        .map(|s| {
            (
                s.len() as u64,
                s.iter().filter(|x| x.correct).count() as u64,
            )
        })
        .collect()
}

/// Compares the runs of the two arms (the same seeds in the same order) with a paired
/// bootstrap over every (seed, problem).
pub fn compare(
    best: &Composition,
    default: &[EvalReport],
    evolved: &[EvalReport],
    seed: u64,
) -> Result<Comparison> {
    ensure!(
        default.len() == evolved.len() && !default.is_empty(),
        "the final comparison needs the same seeds in both arms"
    );
    let before: Vec<(u64, u64)> = default.iter().flat_map(counts).collect();
    let after: Vec<(u64, u64)> = evolved.iter().flat_map(counts).collect();
    let change = paired_pass_at_k_change(&before, &after, &[1], ROUNDS, LEVEL, seed)?;
    let c = &change[0];
    Ok(Comparison {
        best_reward: best.describe(),
        seeds: default.len(),
        problems: before.len(),
        default_pass_at_1: c.before,
        best_pass_at_1: c.after,
        delta: c.delta,
        delta_interval: c.delta_interval,
        per_seed: default
            .iter()
            .zip(evolved)
            .map(|(d, e)| (d.pass_at_1, e.pass_at_1))
            .collect(),
        verdict: verdict(c.delta, c.delta_interval),
    })
}

/// The sentence the interval supports.
pub fn verdict(delta: f64, interval: Interval) -> String {
    let range = format!(
        "{delta:+.3} (95% paired interval [{:+.3}, {:+.3}])",
        interval.lower, interval.upper
    );
    if interval.lower > 0.0 {
        format!("the best evolved reward beats the default exact-answer reward by {range}")
    } else if interval.upper < 0.0 {
        format!("the best evolved reward is worse than the default exact-answer reward by {range}")
    } else {
        format!("no difference is resolved between the best evolved reward and the default: {range}, the interval contains 0")
    }
}

/// One line of the outer loop's table, for the terminal.
pub fn generation_line(g: &Generation) -> String {
    format!(
        "DERL generation {}: best {:.3}  mean {:.3}  surviving [{}]",
        g.generation,
        g.best,
        g.mean,
        g.surviving.join(", ")
    )
}

/// The report's markdown.
pub fn markdown(state: &DerlState, c: &Comparison) -> String {
    let mut s = String::from("# DERL: evolved rewards on the arithmetic task\n\n");
    s.push_str("## Outer loop\n\n| generation | best val pass@1 | mean val pass@1 | surviving primitives | its best reward |\n|---|---|---|---|---|\n");
    for g in &state.generations {
        let best = g
            .candidates
            .iter()
            .find(|c| c.score == g.best)
            .map_or_else(String::new, |c| c.reward.describe());
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} | {} | `{best}` |",
            g.generation,
            g.best,
            g.mean,
            if g.surviving.is_empty() {
                "(none)".to_string()
            } else {
                g.surviving.join(", ")
            }
        );
    }
    let _ = writeln!(
        s,
        "\n## Final comparison\n\nBest evolved reward: `{}`. {} seeds, {} held-out problems in all.\n",
        c.best_reward, c.seeds, c.problems
    );
    s.push_str("| seed | default pass@1 | best pass@1 |\n|---|---|---|\n");
    for (i, (d, b)) in c.per_seed.iter().enumerate() {
        let _ = writeln!(s, "| {i} | {d:.3} | {b:.3} |");
    }
    let _ = writeln!(
        s,
        "| all | {:.3} | {:.3} |\n\nOn these held-out problems {}.",
        c.default_pass_at_1, c.best_pass_at_1, c.verdict
    );
    s
}

/// Writes `comparison.json` and `report.md` into the DERL directory.
pub fn write(dir: &DerlDir, state: &DerlState, c: &Comparison) -> Result<()> {
    write_json(&dir.root.join("comparison.json"), c)?;
    write_atomic(&dir.root.join("report.md"), markdown(state, c).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reinforge_eval::decompose::Sample;

    fn eval(correct: &[usize], n: usize) -> EvalReport {
        let samples: Vec<Vec<Sample>> = correct
            .iter()
            .map(|&c| (0..n).map(|i| Sample::new("direct", i < c)).collect())
            .collect();
        let total: usize = correct.iter().sum();
        EvalReport {
            problems: correct.len(),
            samples_per_problem: n,
            temperature: 1.0,
            pass_at_1: total as f64 / (n * correct.len()) as f64,
            pass_at_k: vec![],
            patterns: Default::default(),
            mean_completion_tokens: 0.0,
            seconds: 0.0,
            samples,
        }
    }

    #[test]
    fn a_clear_gain_is_reported_as_one() {
        let default = vec![eval(&[0, 1, 0, 1, 0, 1, 0, 1], 4); 5];
        let evolved = vec![eval(&[4, 3, 4, 3, 4, 4, 3, 4], 4); 5];
        let c = compare(&Composition::default_reward(), &default, &evolved, 0).unwrap();
        assert_eq!(c.problems, 40);
        assert!((c.delta - (29.0 - 4.0) / 32.0).abs() < 1e-12, "{}", c.delta);
        assert!(c.delta_interval.lower > 0.0);
        assert!(
            c.verdict.starts_with("the best evolved reward beats"),
            "{}",
            c.verdict
        );
    }

    #[test]
    fn equal_arms_resolve_no_difference() {
        let a = vec![eval(&[1, 2, 3, 0], 4); 5];
        let c = compare(&Composition::default_reward(), &a, &a, 0).unwrap();
        assert_eq!(c.delta, 0.0);
        assert!(c.verdict.starts_with("no difference"), "{}", c.verdict);
    }

    #[test]
    fn mismatched_arms_are_an_error() {
        let a = vec![eval(&[1], 4); 2];
        assert!(compare(&Composition::default_reward(), &a, &a[..1], 0).is_err());
    }
}
