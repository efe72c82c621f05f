//! `stats` inputs and report: per-algorithm `runs x tasks` matrices to rliable aggregates.

use crate::rliable::{
    iqm, mean, median, optimality_gap, performance_profile, probability_of_improvement,
    stratified_interval, stratified_interval_pair, Estimate, ScoreMatrix,
};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

#[derive(Deserialize)]
struct RawScore {
    algorithm: Option<String>,
    run: Option<u64>,
    task: Option<serde_json::Value>,
    score: Option<f64>,
    scores: Option<Vec<Vec<f64>>>,
}

/// Parsed score matrices: algorithm names (first-appearance order), task names and one matrix each.
#[derive(Debug, Clone)]
pub struct ScoreSet {
    /// Algorithms in input order.
    pub algorithms: Vec<String>,
    /// Task names (column order).
    pub tasks: Vec<String>,
    /// One matrix per algorithm.
    pub matrices: Vec<ScoreMatrix>,
}

/// Parses scores JSONL, one cell per line (`{"algorithm", "run", "task", "score"}`) or one
/// whole matrix per line (`{"algorithm", "scores": [[...], ...]}`); errors name file, line and field.
pub fn parse_scores<R: BufRead>(reader: R, source: &str) -> Result<ScoreSet> {
    let mut algos: Vec<String> = vec![];
    let mut tasks: Vec<String> = vec![];
    let mut cells: HashMap<String, BTreeMap<(u64, usize), f64>> = HashMap::new();
    let mut whole: HashMap<String, Vec<Vec<f64>>> = HashMap::new();
    for (i, line) in reader.lines().enumerate() {
        let ln = i + 1;
        let line = line.with_context(|| format!("{source}:{ln}: read error"))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: RawScore = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{source}:{ln}: invalid score JSON: {e}"))?;
        let a = r
            .algorithm
            .ok_or_else(|| anyhow::anyhow!("{source}:{ln}: field `algorithm`: missing"))?;
        if !algos.contains(&a) {
            algos.push(a.clone());
        }
        match (r.scores, r.run, r.task, r.score) {
            (Some(m), None, None, None) => {
                if cells.contains_key(&a) || whole.insert(a.clone(), m).is_some() {
                    bail!("{source}:{ln}: field `scores`: algorithm {a:?} given more than once");
                }
            }
            (None, Some(run), Some(task), Some(score)) => {
                if whole.contains_key(&a) {
                    bail!(
                        "{source}:{ln}: algorithm {a:?} mixes a `scores` matrix with single cells"
                    );
                }
                if !score.is_finite() {
                    bail!("{source}:{ln}: field `score`: not finite");
                }
                let t = match task {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                let ti = match tasks.iter().position(|x| *x == t) {
                    Some(p) => p,
                    None => {
                        tasks.push(t);
                        tasks.len() - 1
                    }
                };
                if cells
                    .entry(a.clone())
                    .or_default()
                    .insert((run, ti), score)
                    .is_some()
                {
                    bail!(
                        "{source}:{ln}: duplicate score for algorithm {a:?}, run {run}, task {:?}",
                        tasks[ti]
                    );
                }
            }
            _ => bail!("{source}:{ln}: expected either `scores` or all of `run`, `task`, `score`"),
        }
    }
    if algos.is_empty() {
        bail!("{source}: no scores");
    }
    let mut matrices = vec![];
    for a in &algos {
        let m = if let Some(rows) = whole.remove(a) {
            ScoreMatrix::from_rows(&rows).with_context(|| format!("{source}: algorithm {a:?}"))?
        } else {
            let c = &cells[a];
            let runs: Vec<u64> = {
                let mut r: Vec<u64> = c.keys().map(|k| k.0).collect();
                r.dedup();
                r
            };
            let mut rows = vec![];
            for run in &runs {
                let mut row = vec![];
                for (ti, t) in tasks.iter().enumerate() {
                    row.push(*c.get(&(*run, ti)).ok_or_else(|| {
                        anyhow::anyhow!(
                            "{source}: algorithm {a:?} has no score for run {run}, task {t:?}"
                        )
                    })?);
                }
                rows.push(row);
            }
            ScoreMatrix::from_rows(&rows)?
        };
        matrices.push(m);
    }
    let nt = matrices[0].tasks;
    if let Some((a, m)) = algos.iter().zip(&matrices).find(|(_, m)| m.tasks != nt) {
        bail!(
            "{source}: algorithm {a:?} has {} tasks, expected {nt}",
            m.tasks
        );
    }
    if tasks.is_empty() {
        tasks = (0..nt).map(|t| format!("task{t}")).collect();
    }
    Ok(ScoreSet {
        algorithms: algos,
        tasks,
        matrices,
    })
}

/// Aggregates of one algorithm.
#[derive(Debug, Clone, Serialize)]
pub struct AlgoStats {
    /// Algorithm.
    pub algorithm: String,
    /// Runs.
    pub runs: usize,
    /// Interquartile mean.
    pub iqm: Estimate,
    /// Mean of task means.
    pub mean: Estimate,
    /// Median of task means.
    pub median: Estimate,
    /// Optimality gap.
    pub optimality_gap: Estimate,
    /// Score distribution at each tau (with intervals).
    pub profile: Vec<Estimate>,
}

/// P(X > Y) for one ordered pair.
#[derive(Debug, Clone, Serialize)]
pub struct Improvement {
    /// X.
    pub x: String,
    /// Y.
    pub y: String,
    /// Estimate with interval.
    pub probability: Estimate,
}

/// The full `stats` output.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// Tasks.
    pub tasks: Vec<String>,
    /// Bootstrap replications.
    pub reps: usize,
    /// Interval level.
    pub level: f64,
    /// Optimality-gap threshold.
    pub gamma: f64,
    /// Profile thresholds.
    pub taus: Vec<f64>,
    /// Per-algorithm aggregates.
    pub algorithms: Vec<AlgoStats>,
    /// Every ordered pair of distinct algorithms.
    pub improvement: Vec<Improvement>,
}

/// Reads and parses the scores JSONL file at `path` (see [`parse_scores`]).
pub fn read_scores(path: &std::path::Path) -> Result<ScoreSet> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    parse_scores(std::io::BufReader::new(f), &path.display().to_string())
}

/// Computes aggregates, intervals, improvement probabilities and profiles of a score set.
pub fn compute(
    set: &ScoreSet,
    reps: usize,
    seed: u64,
    level: f64,
    gamma: f64,
    taus: &[f64],
) -> StatsReport {
    let taus: Vec<f64> = if taus.is_empty() {
        let lo = set
            .matrices
            .iter()
            .flat_map(|m| &m.data)
            .cloned()
            .fold(f64::INFINITY, f64::min);
        let hi = set
            .matrices
            .iter()
            .flat_map(|m| &m.data)
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max);
        (0..51).map(|i| lo + (hi - lo) * i as f64 / 50.0).collect()
    } else {
        taus.to_vec()
    };
    let algorithms = set
        .algorithms
        .iter()
        .zip(&set.matrices)
        .enumerate()
        .map(|(ai, (a, m))| {
            let t2 = taus.clone();
            let stat = move |x: &ScoreMatrix| {
                let mut v = vec![iqm(x), mean(x), median(x), optimality_gap(x, gamma)];
                v.extend(performance_profile(x, &t2, false));
                v
            };
            let e = stratified_interval(m, &stat, reps, seed.wrapping_add(ai as u64 * 7919), level);
            AlgoStats {
                algorithm: a.clone(),
                runs: m.runs,
                iqm: e[0],
                mean: e[1],
                median: e[2],
                optimality_gap: e[3],
                profile: e[4..].to_vec(),
            }
        })
        .collect();
    let mut improvement = vec![];
    for (i, x) in set.matrices.iter().enumerate() {
        for (j, y) in set.matrices.iter().enumerate() {
            if i == j {
                continue;
            }
            let stat = |a: &ScoreMatrix, b: &ScoreMatrix| {
                probability_of_improvement(a, b).expect("same tasks")
            };
            let est =
                stratified_interval_pair(x, y, &stat, reps, seed ^ ((i * 1000 + j) as u64), level);
            improvement.push(Improvement {
                x: set.algorithms[i].clone(),
                y: set.algorithms[j].clone(),
                probability: est,
            });
        }
    }
    StatsReport {
        tasks: set.tasks.clone(),
        reps,
        level,
        gamma,
        taus,
        algorithms,
        improvement,
    }
}

fn fmt_est(e: &Estimate) -> String {
    format!("{:.4} [{:.4}, {:.4}]", e.point, e.lower, e.upper)
}

impl StatsReport {
    /// Markdown tables (aggregates, then probability of improvement).
    pub fn to_markdown(&self) -> String {
        let pct = (self.level * 100.0).round();
        let mut s = format!(
            "{} tasks; {pct}% stratified-bootstrap intervals ({} reps)\n\n| Algorithm | Runs | IQM | Mean | Median | Optimality gap (γ={}) |\n|---|---:|---|---|---|---|\n",
            self.tasks.len(), self.reps, self.gamma
        );
        for a in &self.algorithms {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                a.algorithm,
                a.runs,
                fmt_est(&a.iqm),
                fmt_est(&a.mean),
                fmt_est(&a.median),
                fmt_est(&a.optimality_gap)
            );
        }
        if !self.improvement.is_empty() {
            s += "\n| P(X > Y) | Y | estimate |\n|---|---|---|\n";
            for p in &self.improvement {
                s += &format!("| {} | {} | {} |\n", p.x, p.y, fmt_est(&p.probability));
            }
        }
        s
    }

    /// CSV: one row per (algorithm, metric) plus one per improvement pair.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("kind,x,y,metric,value,lower,upper\n");
        for a in &self.algorithms {
            for (name, e) in [
                ("iqm", &a.iqm),
                ("mean", &a.mean),
                ("median", &a.median),
                ("optimality_gap", &a.optimality_gap),
            ] {
                s += &format!(
                    "aggregate,{},,{name},{},{},{}\n",
                    a.algorithm, e.point, e.lower, e.upper
                );
            }
            for (t, e) in self.taus.iter().zip(&a.profile) {
                s += &format!(
                    "profile,{},,tau={t},{},{},{}\n",
                    a.algorithm, e.point, e.lower, e.upper
                );
            }
        }
        for p in &self.improvement {
            let e = &p.probability;
            s += &format!(
                "improvement,{},{},probability_of_improvement,{},{},{}\n",
                p.x, p.y, e.point, e.lower, e.upper
            );
        }
        s
    }

    /// Writes aggregates.png, improvement.png and profiles.png into `dir`.
    pub fn plot(&self, dir: &std::path::Path) -> Result<()> {
        use reinforge_plot::{
            interval_chart, line_chart_with_intervals, IntervalRow, IntervalSeries,
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut rows = vec![];
        for a in &self.algorithms {
            for (name, e) in [
                ("IQM", &a.iqm),
                ("mean", &a.mean),
                ("median", &a.median),
                ("opt. gap", &a.optimality_gap),
            ] {
                rows.push(IntervalRow {
                    label: format!("{} · {name}", a.algorithm),
                    value: e.point,
                    lower: e.lower,
                    upper: e.upper,
                });
            }
        }
        interval_chart(
            &dir.join("aggregates.png"),
            "Aggregate metrics (stratified bootstrap)",
            "score",
            &rows,
        )?;
        if !self.improvement.is_empty() {
            let rows: Vec<IntervalRow> = self
                .improvement
                .iter()
                .map(|p| IntervalRow {
                    label: format!("P({} > {})", p.x, p.y),
                    value: p.probability.point,
                    lower: p.probability.lower,
                    upper: p.probability.upper,
                })
                .collect();
            interval_chart(
                &dir.join("improvement.png"),
                "Probability of improvement",
                "probability",
                &rows,
            )?;
        }
        let series: Vec<IntervalSeries> = self
            .algorithms
            .iter()
            .map(|a| IntervalSeries {
                name: a.algorithm.clone(),
                points: self
                    .taus
                    .iter()
                    .zip(&a.profile)
                    .map(|(t, e)| (*t, e.point, e.lower, e.upper))
                    .collect(),
            })
            .collect();
        line_chart_with_intervals(
            &dir.join("profiles.png"),
            "Performance profiles",
            "score threshold τ",
            "fraction of runs with score > τ",
            &series,
            false,
        )
    }
}
