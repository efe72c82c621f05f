//! The report of a dataset run with held-out evaluation: `summary.json` for scripts,
//! `report.md` and `pass_at_k.png` for people. Every sentence is computed from the two
//! evaluations: whether RL raised pass@1, and whether it solved held-out prompts the base
//! model never solved in n samples (new solutions) or only made already-found solutions more
//! likely (selection), with paired bootstrap intervals over prompts.

use std::fmt::Write as _;

use anyhow::Result;
use reinforge_eval::decompose::Interval;
use reinforge_eval::passk_change::{paired_pass_at_k_change, PassAtKChange};
use reinforge_plot::{line_chart_with_intervals, IntervalSeries};
use serde::{Deserialize, Serialize};

use super::evaluate::DataEvalReport;
use reinforge_train::run_dir::{write_json, RunDir};

/// Bootstrap resamples and level of the intervals.
const ROUNDS: usize = 2000;
const LEVEL: f64 = 0.95;

/// One task's accuracy before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskChange {
    pub task: String,
    pub prompts: usize,
    pub accuracy_before: f64,
    pub accuracy_after: f64,
    pub solved_before: f64,
    pub solved_after: f64,
}

/// `summary.json` of a dataset run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSummary {
    pub prompts: usize,
    pub samples_per_prompt: usize,
    pub pass_at_k: Vec<PassAtKChange>,
    pub tasks: Vec<TaskChange>,
    pub mean_completion_tokens_before: f64,
    pub mean_completion_tokens_after: f64,
    /// Share of completions cut at the length limit: an answer never stated scores 0, so a
    /// pass@k change that comes with a large change here is partly a change of format.
    pub truncated_frac_before: f64,
    pub truncated_frac_after: f64,
    /// Prompts with no correct sample before and at least one after.
    pub newly_solved: usize,
    /// Prompts with a correct sample before and none after.
    pub no_longer_solved: usize,
    pub claim: String,
}

/// Compares the two evaluations (same rows) and writes `summary.json`, `report.md` and
/// `pass_at_k.png`.
pub fn write_report(
    run: &RunDir,
    base: &DataEvalReport,
    trained: &DataEvalReport,
    seed: u64,
) -> Result<DataSummary> {
    anyhow::ensure!(
        base.rows == trained.rows && base.samples_per_prompt == trained.samples_per_prompt,
        "the evaluations before and after training cover different prompts or sample counts"
    );
    let n = base.samples_per_prompt as u64;
    let counts = |r: &DataEvalReport| r.correct.iter().map(|&c| (n, c)).collect::<Vec<_>>();
    let ks: Vec<u64> = base.pass_at_k.iter().map(|p| p.0).collect();
    let pass_at_k =
        paired_pass_at_k_change(&counts(base), &counts(trained), &ks, ROUNDS, LEVEL, seed)?;
    let pairs = base.correct.iter().zip(&trained.correct);
    let newly_solved = pairs.clone().filter(|(b, a)| **b == 0 && **a > 0).count();
    let no_longer_solved = pairs.filter(|(b, a)| **b > 0 && **a == 0).count();
    let tasks = base
        .tasks
        .iter()
        .filter_map(|(task, b)| {
            let a = trained.tasks.get(task)?;
            Some(TaskChange {
                task: task.clone(),
                prompts: b.prompts,
                accuracy_before: b.accuracy,
                accuracy_after: a.accuracy,
                solved_before: b.solved,
                solved_after: a.solved,
            })
        })
        .collect();
    let claim = claim(&pass_at_k, newly_solved, no_longer_solved, base.prompts);
    let summary = DataSummary {
        prompts: base.prompts,
        samples_per_prompt: base.samples_per_prompt,
        pass_at_k,
        tasks,
        mean_completion_tokens_before: base.mean_completion_tokens,
        mean_completion_tokens_after: trained.mean_completion_tokens,
        truncated_frac_before: base.truncated_frac,
        truncated_frac_after: trained.truncated_frac,
        newly_solved,
        no_longer_solved,
        claim,
    };
    write_json(&run.path("summary.json"), &summary)?;
    let mut md = markdown(&summary);
    if let Some(section) = reinforge_train::rl::integrity::section(run) {
        md = format!("{md}\n{section}");
    }
    std::fs::write(run.path("report.md"), md)?;
    plot(run, &summary)?;
    Ok(summary)
}

/// `+0.031 [+0.010, +0.052]`.
fn signed(delta: f64, i: &Interval) -> String {
    format!("{delta:+.3} [{:+.3}, {:+.3}]", i.lower, i.upper)
}

/// The finding in words, from the pass@1 and pass@n changes and their intervals.
fn claim(changes: &[PassAtKChange], newly: usize, lost: usize, prompts: usize) -> String {
    let (first, last) = (&changes[0], &changes[changes.len() - 1]);
    let verdict = |c: &PassAtKChange| {
        if c.delta_interval.lower > 0.0 {
            "rose"
        } else if c.delta_interval.upper < 0.0 {
            "fell"
        } else {
            "did not change detectably"
        }
    };
    let mut s = format!(
        "pass@1 {} ({:.3} -> {:.3}, change {}); pass@{} {} ({:.3} -> {:.3}, change {}), {}% intervals over prompts. ",
        verdict(first),
        first.before,
        first.after,
        signed(first.delta, &first.delta_interval),
        last.k,
        verdict(last),
        last.before,
        last.after,
        signed(last.delta, &last.delta_interval),
        (LEVEL * 100.0).round()
    );
    let _ = write!(
        s,
        "{newly} of {prompts} held-out prompts were solved after training but by none of the base model's {} samples; {lost} were solved before and not after. ",
        last.k
    );
    s.push_str(match (verdict(first), verdict(last)) {
        ("rose", "rose") => "RL both made solutions more likely and found solutions the base model did not sample.",
        ("rose", _) => "RL made solutions the base model already sampled more likely (selection) without detectably adding new ones at large k.",
        (_, "rose") => "RL added solutions at large k without a detectable pass@1 gain.",
        (_, "fell") => "RL narrowed the set of prompts solved at large k.",
        _ => "No detectable effect of RL at either end of the pass@k curve.",
    });
    s
}

fn markdown(s: &DataSummary) -> String {
    let mut md = String::from("# Held-out evaluation before and after RL\n\n");
    let _ = writeln!(md, "{}\n", s.claim);
    let _ = writeln!(
        md,
        "{} held-out prompts, {} samples each. Intervals: paired percentile bootstrap over prompts ({ROUNDS} resamples, {}%).\n",
        s.prompts,
        s.samples_per_prompt,
        (LEVEL * 100.0).round()
    );
    md.push_str("| k | pass@k before | pass@k after | change |\n|---|---|---|---|\n");
    for c in &s.pass_at_k {
        let _ = writeln!(
            md,
            "| {} | {:.3} [{:.3}, {:.3}] | {:.3} [{:.3}, {:.3}] | {} |",
            c.k,
            c.before,
            c.before_interval.lower,
            c.before_interval.upper,
            c.after,
            c.after_interval.lower,
            c.after_interval.upper,
            signed(c.delta, &c.delta_interval)
        );
    }
    md.push_str("\n| task | prompts | accuracy before | accuracy after | solved (pass@n) before | after |\n|---|---|---|---|---|---|\n");
    for t in &s.tasks {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            t.task, t.prompts, t.accuracy_before, t.accuracy_after, t.solved_before, t.solved_after
        );
    }
    let _ = writeln!(
        md,
        "\nMean response length: {:.1} tokens before, {:.1} after; cut at the length limit: {:.1}% before, {:.1}% after.\n\n![pass@k](pass_at_k.png)",
        s.mean_completion_tokens_before,
        s.mean_completion_tokens_after,
        100.0 * s.truncated_frac_before,
        100.0 * s.truncated_frac_after
    );
    md
}

fn plot(run: &RunDir, s: &DataSummary) -> Result<()> {
    let series = |name: &str, f: &dyn Fn(&PassAtKChange) -> (f64, Interval)| IntervalSeries {
        name: name.into(),
        points: s
            .pass_at_k
            .iter()
            .map(|c| {
                let (v, i) = f(c);
                (c.k as f64, v, i.lower, i.upper)
            })
            .collect(),
    };
    line_chart_with_intervals(
        &run.path("pass_at_k.png"),
        "Held-out pass@k",
        "k",
        "pass@k",
        &[
            series("base model", &|c| (c.before, c.before_interval)),
            series("after RL", &|c| (c.after, c.after_interval)),
        ],
        true,
    )
}
