//! The run's report: `summary.json` for scripts, `report.md` and PNG plots for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use reinforge_plot::{grouped_bar_chart, line_chart, Series};
use serde::{Deserialize, Serialize};

use reinforge_eval::decompose::{
    bootstrap_decomposition, claim_sentence, decompose, DecompositionIntervals,
};

use super::evaluate::{EvalReport, PatternStats};
use reinforge_train::config::TrainConfig;
use reinforge_train::run_dir::{write_json, RunDir};
use reinforge_train::trainer::TrainerState;

/// The keys of a `metrics.jsonl` line the report plots.
#[derive(Debug, Clone, Deserialize)]
struct StepMetrics {
    step: usize,
    #[serde(rename = "reward/mean")]
    reward_mean: f64,
    #[serde(rename = "reward/zero_std_frac")]
    zero_std_frac: f64,
    #[serde(rename = "pattern/columns_share", default)]
    columns_share: f64,
}

/// `summary.json`: the figures a script compares across runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub run: String,
    pub seed: u64,
    pub pass_at_1_sft: f64,
    pub pass_at_1_rl: f64,
    pub pass_at_1_gain: f64,
    /// The pattern with the highest success rate under the SFT model.
    pub best_pattern: String,
    pub best_pattern_share_sft: f64,
    pub best_pattern_share_rl: f64,
    /// Per pattern: success rate after SFT and after RL.
    pub success_rate_sft: BTreeMap<String, Option<f64>>,
    pub success_rate_rl: BTreeMap<String, Option<f64>>,
    pub pass_at_k_sft: Vec<(u64, f64)>,
    pub pass_at_k_rl: Vec<(u64, f64)>,
    pub sft_seconds: f64,
    pub grpo_seconds: f64,
    pub eval_seconds: f64,
    /// The pass@1 change split into selection and improvement, with bootstrap intervals over
    /// held-out problems (absent when the evaluations carry no per-sample records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decomposition: Option<Claim>,
}

/// What the run measured about the paper's claim: how much of the pass@1 change comes from
/// selecting patterns (shares shifting at fixed per-pattern success) and how much from
/// improving them (per-pattern success changing), and the sentence those numbers support.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claim {
    pub delta: f64,
    pub selection: f64,
    pub improvement: f64,
    pub intervals: DecompositionIntervals,
    pub sentence: String,
}

/// Bootstrap resamples of the held-out problems behind [`Claim`]'s intervals.
const CLAIM_ROUNDS: usize = 2000;
/// Central coverage of those intervals.
const CLAIM_LEVEL: f64 = 0.95;

/// The selection/improvement split of `sft -> rl`, seeded by the run's seed; `None` for
/// evaluations without per-sample records (written before they existed).
fn claim(sft: &EvalReport, rl: &EvalReport, seed: u64) -> Result<Option<Claim>> {
    if sft.samples.is_empty() || rl.samples.is_empty() {
        return Ok(None);
    }
    let d = decompose(&sft.samples, &rl.samples)?;
    let intervals =
        bootstrap_decomposition(&sft.samples, &rl.samples, CLAIM_ROUNDS, CLAIM_LEVEL, seed)?;
    Ok(Some(Claim {
        delta: d.delta,
        selection: d.selection,
        improvement: d.improvement,
        sentence: claim_sentence(&d, &intervals),
        intervals,
    }))
}

/// The solution pattern with the highest success rate in `r` (ties: first by name).
fn best_pattern(r: &EvalReport) -> String {
    r.patterns
        .iter()
        .filter(|(name, s)| *name != "other" && s.count > 0)
        .max_by(|a, b| {
            a.1.success_rate
                .partial_cmp(&b.1.success_rate)
                .expect("finite rates")
        })
        .map(|(name, _)| name.clone())
        .unwrap_or_else(|| "columns".into())
}

/// Builds the summary of a finished run.
pub fn summarize(
    cfg: &TrainConfig,
    state: &TrainerState,
    sft: &EvalReport,
    rl: &EvalReport,
) -> Result<Summary> {
    let best = best_pattern(sft);
    let share = |r: &EvalReport| r.patterns.get(&best).map_or(0.0, |s| s.share);
    let rates = |r: &EvalReport| {
        r.patterns
            .iter()
            .map(|(k, v)| (k.clone(), v.success_rate))
            .collect()
    };
    Ok(Summary {
        run: cfg.run_name(),
        seed: cfg.seed,
        pass_at_1_sft: sft.pass_at_1,
        pass_at_1_rl: rl.pass_at_1,
        pass_at_1_gain: rl.pass_at_1 - sft.pass_at_1,
        best_pattern_share_sft: share(sft),
        best_pattern_share_rl: share(rl),
        best_pattern: best,
        success_rate_sft: rates(sft),
        success_rate_rl: rates(rl),
        pass_at_k_sft: sft.pass_at_k.clone(),
        pass_at_k_rl: rl.pass_at_k.clone(),
        sft_seconds: state.sft_seconds,
        grpo_seconds: state.grpo_seconds,
        eval_seconds: sft.seconds + rl.seconds,
        decomposition: claim(sft, rl, cfg.seed)?,
    })
}

/// Writes `summary.json`, the PNG plots and `report.md`; returns the summary.
pub fn write_report(
    run: &RunDir,
    cfg: &TrainConfig,
    state: &TrainerState,
    sft: &EvalReport,
    rl: &EvalReport,
) -> Result<Summary> {
    let summary = summarize(cfg, state, sft, rl)?;
    write_json(&run.path("summary.json"), &summary)?;
    let metrics: Vec<StepMetrics> = run.read_jsonl("metrics.jsonl")?;
    plot(run, &metrics, sft, rl)?;
    let mut md = markdown(cfg, &summary, sft, rl, &metrics);
    if let Some(section) = reinforge_train::rl::integrity::section(run) {
        md = format!("{md}\n{section}");
    }
    std::fs::write(run.path("report.md"), md)?;
    Ok(summary)
}

fn plot(run: &RunDir, metrics: &[StepMetrics], sft: &EvalReport, rl: &EvalReport) -> Result<()> {
    let curve =
        |f: fn(&StepMetrics) -> f64| metrics.iter().map(|m| (m.step as f64, f(m))).collect();
    if !metrics.is_empty() {
        line_chart(
            &run.path("reward.png"),
            "GRPO training reward",
            "step",
            "mean over the step's completions",
            &[
                Series {
                    name: "reward".into(),
                    points: curve(|m| m.reward_mean),
                },
                Series {
                    name: "columns share".into(),
                    points: curve(|m| m.columns_share),
                },
                Series {
                    name: "zero-std groups".into(),
                    points: curve(|m| m.zero_std_frac),
                },
            ],
            false,
        )?;
    }
    let passk = |r: &EvalReport| r.pass_at_k.iter().map(|&(k, v)| (k as f64, v)).collect();
    line_chart(
        &run.path("pass_at_k.png"),
        "Held-out pass@k",
        "k",
        "pass@k",
        &[
            Series {
                name: "after SFT".into(),
                points: passk(sft),
            },
            Series {
                name: "after RL".into(),
                points: passk(rl),
            },
        ],
        true,
    )?;
    let names: Vec<String> = sft.patterns.keys().cloned().collect();
    let column = |r: &EvalReport, f: fn(&PatternStats) -> f64| {
        names
            .iter()
            .map(|n| r.patterns.get(n).map_or(f64::NAN, f))
            .collect()
    };
    grouped_bar_chart(
        &run.path("patterns.png"),
        "Pattern share of completions",
        "share",
        &names,
        &[
            ("after SFT".into(), column(sft, |s| s.share)),
            ("after RL".into(), column(rl, |s| s.share)),
        ],
    )?;
    grouped_bar_chart(
        &run.path("pattern_success.png"),
        "Success rate within each pattern",
        "success rate",
        &names,
        &[
            (
                "after SFT".into(),
                column(sft, |s| s.success_rate.unwrap_or(f64::NAN)),
            ),
            (
                "after RL".into(),
                column(rl, |s| s.success_rate.unwrap_or(f64::NAN)),
            ),
        ],
    )?;
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", 100.0 * v))
}

fn markdown(
    cfg: &TrainConfig,
    s: &Summary,
    sft: &EvalReport,
    rl: &EvalReport,
    metrics: &[StepMetrics],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# reinforge run `{}`\n", s.run);
    let _ = writeln!(
        md,
        "Task: {d}-digit addition, SFT on {direct:.0}% direct / {cols:.0}% columns solutions, then {steps} GRPO steps \
         ({p} prompts x {g} samples). Held-out evaluation: {n} problems x {k} samples at temperature {t}.\n",
        d = cfg.task.digits,
        direct = 100.0 * cfg.task.direct_share,
        cols = 100.0 * (1.0 - cfg.task.direct_share),
        steps = cfg.grpo.steps,
        p = cfg.grpo.prompts_per_step,
        g = cfg.grpo.num_generations,
        n = sft.problems,
        k = sft.samples_per_problem,
        t = sft.temperature,
    );
    let _ = writeln!(md, "## Result\n");
    let _ = writeln!(md, "| | after SFT | after RL | change |\n|---|---|---|---|");
    let _ = writeln!(
        md,
        "| pass@1 | {:.3} | {:.3} | {:+.3} |",
        s.pass_at_1_sft, s.pass_at_1_rl, s.pass_at_1_gain
    );
    for (name, st) in &sft.patterns {
        let after = rl.patterns.get(name);
        let _ = writeln!(
            md,
            "| share of `{name}` | {} | {} | |",
            pct(Some(st.share)),
            pct(after.map(|a| a.share))
        );
        let _ = writeln!(
            md,
            "| success rate of `{name}` | {} | {} | |",
            pct(st.success_rate),
            pct(after.and_then(|a| a.success_rate))
        );
    }
    let _ = writeln!(
        md,
        "\nThe pattern with the highest success rate after SFT is `{}`; its share went from {} to {}.\n",
        s.best_pattern,
        pct(Some(s.best_pattern_share_sft)),
        pct(Some(s.best_pattern_share_rl))
    );
    let _ = writeln!(md, "## Selection or improvement?\n");
    match &s.decomposition {
        Some(c) => {
            let _ = writeln!(
                md,
                "The change of pass@1 splits exactly into *selection*, Σ_p (s'_p − s_p)·a_p (pattern shares s \
                 moving while each pattern keeps its SFT success rate a), and *improvement*, Σ_p s'_p·(a'_p − a_p) \
                 (each pattern's own success rate changing). Intervals: {:.0}% percentile bootstrap, {} paired \
                 resamples of the held-out problems.\n\n\
                 | | estimate | {:.0}% interval |\n|---|---|---|\n\
                 | pass@1 change | {:+.3} | [{:+.3}, {:+.3}] |\n\
                 | selection | {:+.3} | [{:+.3}, {:+.3}] |\n\
                 | improvement | {:+.3} | [{:+.3}, {:+.3}] |\n\n{}\n",
                100.0 * c.intervals.level,
                c.intervals.rounds,
                100.0 * c.intervals.level,
                c.delta,
                c.intervals.delta.lower,
                c.intervals.delta.upper,
                c.selection,
                c.intervals.selection.lower,
                c.intervals.selection.upper,
                c.improvement,
                c.intervals.improvement.lower,
                c.intervals.improvement.upper,
                c.sentence
            );
        }
        None => {
            let _ = writeln!(
                md,
                "The evaluations of this run carry no per-sample records, so the change cannot be split.\n"
            );
        }
    }
    let _ = writeln!(
        md,
        "## pass@k\n\n| k | after SFT | after RL |\n|---|---|---|"
    );
    for ((k, a), (_, b)) in s.pass_at_k_sft.iter().zip(&s.pass_at_k_rl) {
        let _ = writeln!(md, "| {k} | {a:.3} | {b:.3} |");
    }
    let _ = writeln!(md, "\n![pass@k](pass_at_k.png)\n\n![reward](reward.png)\n\n![pattern shares](patterns.png)\n\n![pattern success](pattern_success.png)\n");
    if let (Some(first), Some(last)) = (metrics.first(), metrics.last()) {
        let _ = writeln!(
            md,
            "## Training\n\nReward {:.3} at step 0, {:.3} at step {}.",
            first.reward_mean, last.reward_mean, last.step
        );
    }
    let _ = writeln!(
        md,
        "\nTime: SFT {:.0} s, GRPO {:.0} s, evaluation {:.0} s.",
        s.sft_seconds, s.grpo_seconds, s.eval_seconds
    );
    md
}
