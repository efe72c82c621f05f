//! The monitor's state and figures: per-step counts of credited completions (summable over
//! data-parallel ranks), the reward–length correlation over a window of steps, the canary
//! checks, the flagged completions with the highest rewards, and the warnings, all kept in
//! one [`IntegrityLog`] (a run's `integrity.json`, so a resumed run continues it) that renders
//! the report's "Reward integrity" section.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use reinforge_verify::canary::CanaryKind;

/// The monitor's keys in `metrics.jsonl`.
pub const METRIC_KEYS: [&str; 6] = [
    "integrity/canary_credited",
    "integrity/answer_in_prompt",
    "integrity/truncated_credited",
    "integrity/credited",
    "integrity/reward_length_corr",
    "integrity/kl_to_start",
];

/// Shares whose rise over a run is a warning.
const RISING: [&str; 2] = ["integrity/answer_in_prompt", "integrity/truncated_credited"];

/// Canary hits kept in the log (the count is always complete).
const HITS_KEPT: usize = 20;

/// Settings of the monitor: the `[integrity]` table of a training config.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorConfig {
    /// The monitor runs in every RL phase unless this is false.
    pub enabled: bool,
    /// Canaries are scored at the phase's first step and every `canary_every` steps (0: never).
    pub canary_every: usize,
    /// Prompts of the step whose canaries are scored each time.
    pub canary_prompts: usize,
    /// Steps of the reward–length correlation, and of the first and last windows whose means
    /// a rise compares.
    pub window: usize,
    /// A warning when `integrity/answer_in_prompt` or `integrity/truncated_credited` averages
    /// this much more over the last `window` steps than over the first.
    pub rise_warn: f64,
    /// Flagged completions kept for the report, highest reward first.
    pub flagged_kept: usize,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            canary_every: 10,
            canary_prompts: 4,
            window: 8,
            rise_warn: 0.2,
            flagged_kept: 5,
        }
    }
}

/// One step's counts of completions a verifier component judged, credited, credited with an
/// answer found in the prompt, and credited though cut at the length limit. Plain sums, so
/// data-parallel ranks add them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepCounts {
    pub judged: f64,
    pub credited: f64,
    pub answer_in_prompt: f64,
    pub truncated_credited: f64,
}

impl StepCounts {
    /// Counts one completion: `credited` is `None` when no verifier component judged it.
    pub fn add(&mut self, credited: Option<bool>, answer_in_prompt: bool, truncated: bool) {
        let Some(credited) = credited else {
            return;
        };
        self.judged += 1.0;
        if credited {
            self.credited += 1.0;
            self.answer_in_prompt += f64::from(u8::from(answer_in_prompt));
            self.truncated_credited += f64::from(u8::from(truncated));
        }
    }

    /// The four counts in a fixed order (for a sum over ranks).
    pub fn to_array(self) -> [f64; 4] {
        [
            self.judged,
            self.credited,
            self.answer_in_prompt,
            self.truncated_credited,
        ]
    }

    /// The counts from [`Self::to_array`]'s order.
    pub fn from_array(a: [f64; 4]) -> Self {
        Self {
            judged: a[0],
            credited: a[1],
            answer_in_prompt: a[2],
            truncated_credited: a[3],
        }
    }

    /// The step's shares: `integrity/credited` of the judged completions, and of the credited
    /// ones those whose answer is in the prompt and those cut off (0 when none is credited).
    /// Empty when no completion was judged (a reward without a verifier component).
    pub fn shares(&self) -> BTreeMap<String, f64> {
        if self.judged == 0.0 {
            return BTreeMap::new();
        }
        let of_credited = |x: f64| {
            if self.credited > 0.0 {
                x / self.credited
            } else {
                0.0
            }
        };
        BTreeMap::from([
            ("integrity/credited".into(), self.credited / self.judged),
            (
                "integrity/answer_in_prompt".into(),
                of_credited(self.answer_in_prompt),
            ),
            (
                "integrity/truncated_credited".into(),
                of_credited(self.truncated_credited),
            ),
        ])
    }
}

/// Pearson's correlation of `pairs`; `None` with fewer than two pairs or a constant side.
pub fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len() as f64;
    if pairs.len() < 2 {
        return None;
    }
    let (mx, my) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// The (reward, completion length) pairs of the last steps.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Window {
    steps: VecDeque<(usize, Vec<(f64, f64)>)>,
}

impl Window {
    /// Adds step `step`'s pairs, keeps the last `size` steps, and returns their correlation.
    pub fn push(&mut self, step: usize, pairs: Vec<(f64, f64)>, size: usize) -> Option<f64> {
        self.steps.push_back((step, pairs));
        while self.steps.len() > size.max(1) {
            self.steps.pop_front();
        }
        let all: Vec<(f64, f64)> = self.steps.iter().flat_map(|s| s.1.clone()).collect();
        pearson(&all)
    }

    fn truncate(&mut self, step: usize) {
        self.steps.retain(|s| s.0 < step);
    }
}

/// A canary the run's reward credited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CanaryHit {
    pub step: usize,
    pub kind: CanaryKind,
    pub prompt: String,
    pub response: String,
    pub reward: f64,
}

/// One scoring of the canaries.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CanaryCheck {
    pub step: usize,
    pub scored: usize,
    pub credited: usize,
}

/// A credited completion the monitor flags: its answer occurs in the prompt, or it was cut
/// at the length limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Flagged {
    pub step: usize,
    pub reward: f64,
    pub answer_in_prompt: bool,
    pub truncated: bool,
    pub answer: Option<String>,
    pub prompt: String,
    pub completion: String,
}

/// Everything the monitor keeps over a run (`integrity.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IntegrityLog {
    /// Each metric's values by step.
    pub series: BTreeMap<String, Vec<(usize, f64)>>,
    pub canary_checks: Vec<CanaryCheck>,
    /// The first credited canaries (at most 20).
    pub canary_hits: Vec<CanaryHit>,
    /// The flagged completions with the highest rewards.
    pub flagged: Vec<Flagged>,
    /// Warnings, each naming its step.
    pub warnings: Vec<String>,
    window: Window,
    warned: BTreeSet<String>,
}

impl IntegrityLog {
    /// The log at `path`, or an empty one when there is none yet.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("{}: not a reward-integrity log", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Forgets what steps `step` and later recorded (a resumed run redoes them).
    pub fn truncate(&mut self, step: usize) {
        for s in self.series.values_mut() {
            s.retain(|p| p.0 < step);
        }
        self.canary_checks.retain(|c| c.step < step);
        self.canary_hits.retain(|c| c.step < step);
        self.flagged.retain(|f| f.step < step);
        self.window.truncate(step);
        let steps = |w: &String| {
            w.strip_prefix("step ")
                .and_then(|r| r.split(':').next())
                .and_then(|n| n.parse::<usize>().ok())
        };
        self.warnings.retain(|w| steps(w).is_none_or(|s| s < step));
        self.warned.clear();
    }

    /// Records metric `key` of step `step`.
    pub fn record(&mut self, step: usize, key: &str, value: f64) {
        self.series
            .entry(key.to_string())
            .or_default()
            .push((step, value));
    }

    /// Adds step `step`'s (reward, length) pairs and returns the correlation over the last
    /// `window` steps.
    pub fn correlate(&mut self, step: usize, pairs: Vec<(f64, f64)>, window: usize) -> Option<f64> {
        self.window.push(step, pairs, window)
    }

    /// Records a canary scoring at `step`; a warning when any was credited.
    pub fn record_canaries(
        &mut self,
        step: usize,
        scored: usize,
        hits: Vec<CanaryHit>,
    ) -> Option<String> {
        self.canary_checks.push(CanaryCheck {
            step,
            scored,
            credited: hits.len(),
        });
        let warning = (!hits.is_empty()).then(|| {
            let kinds: BTreeSet<&str> = hits.iter().map(|h| h.kind.name()).collect();
            format!(
                "step {step}: the reward credited {} of {scored} known-wrong canary completions ({}): it can be gamed that way",
                hits.len(),
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            )
        });
        let room = HITS_KEPT.saturating_sub(self.canary_hits.len());
        self.canary_hits.extend(hits.into_iter().take(room));
        if let Some(w) = &warning {
            self.warnings.push(w.clone());
        }
        warning
    }

    /// Keeps `f` if it is among the `keep` highest-reward flagged completions.
    pub fn offer_flagged(&mut self, f: Flagged, keep: usize) {
        self.flagged.push(f);
        self.flagged
            .sort_by(|a, b| b.reward.total_cmp(&a.reward).then(a.step.cmp(&b.step)));
        self.flagged.truncate(keep);
    }

    /// Warnings for the shares that rose by `cfg.rise_warn` or more, from the mean of their
    /// first `cfg.window` steps to the mean of their last (each share warns once).
    pub fn check_rises(&mut self, step: usize, cfg: &MonitorConfig) -> Vec<String> {
        let mut out = vec![];
        for key in RISING {
            let Some(series) = self.series.get(key) else {
                continue;
            };
            let w = cfg.window.max(1);
            if series.len() <= w || self.warned.contains(key) {
                continue;
            }
            let mean = |s: &[(usize, f64)]| s.iter().map(|p| p.1).sum::<f64>() / s.len() as f64;
            let (first, last) = (mean(&series[..w]), mean(&series[series.len() - w..]));
            if last - first >= cfg.rise_warn {
                self.warned.insert(key.to_string());
                out.push(format!(
                    "step {step}: {key} rose from {first:.3} (mean of the first {w} steps) to {last:.3} (the last {w}): credited answers increasingly {}",
                    if key == RISING[0] {
                        "repeat the prompt"
                    } else {
                        "are cut off at the length limit"
                    }
                ));
            }
        }
        self.warnings.extend(out.iter().cloned());
        out
    }

    /// The report's "Reward integrity" section (Markdown).
    pub fn markdown(&self) -> String {
        let mut s = String::from("## Reward integrity\n\n");
        if self.warnings.is_empty() {
            s.push_str("No warning: no canary was credited and no monitored share rose.\n\n");
        } else {
            for w in &self.warnings {
                let _ = writeln!(s, "- **Warning**: {w}");
            }
            s.push('\n');
        }
        s.push_str("| metric | first | last | max (step) |\n|---|---|---|---|\n");
        for key in METRIC_KEYS {
            let Some(series) = self.series.get(key).filter(|v| !v.is_empty()) else {
                continue;
            };
            let max = series
                .iter()
                .copied()
                .fold(series[0], |m, p| if p.1 > m.1 { p } else { m });
            let _ = writeln!(
                s,
                "| `{key}` | {:.3} | {:.3} | {:.3} ({}) |",
                series[0].1,
                series[series.len() - 1].1,
                max.1,
                max.0
            );
        }
        if !self.series.contains_key("integrity/kl_to_start") {
            s.push_str("\n`integrity/kl_to_start` is measured only when the run keeps a reference model (`rl.beta > 0`).\n");
        }
        let (scored, credited) = self
            .canary_checks
            .iter()
            .fold((0, 0), |(a, b), c| (a + c.scored, b + c.credited));
        let _ = writeln!(
            s,
            "\nCanaries: {} checks, {credited} of {scored} known-wrong completions credited.",
            self.canary_checks.len()
        );
        for h in self.canary_hits.iter().take(5) {
            let _ = writeln!(
                s,
                "- step {}, `{}` (reward {:.3}): `{}`",
                h.step,
                h.kind.name(),
                h.reward,
                excerpt(&h.response, 120)
            );
        }
        if self.flagged.is_empty() {
            s.push_str("\nNo credited completion was flagged.\n");
        } else {
            s.push_str("\nHighest-reward flagged completions:\n\n| step | reward | flag | answer | completion |\n|---|---|---|---|---|\n");
            for f in &self.flagged {
                let flag = match (f.answer_in_prompt, f.truncated) {
                    (true, true) => "answer in prompt, truncated",
                    (true, false) => "answer in prompt",
                    _ => "truncated",
                };
                let _ = writeln!(
                    s,
                    "| {} | {:.3} | {flag} | {} | `{}` |",
                    f.step,
                    f.reward,
                    f.answer.as_deref().unwrap_or("-"),
                    excerpt(&f.completion, 160)
                );
            }
        }
        s
    }
}

/// The first `max` characters of `text` on one line, for a table cell.
fn excerpt(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| {
            if c == '\n' || c == '|' || c == '`' {
                ' '
            } else {
                c
            }
        })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_credited_completions() {
        let mut c = StepCounts::default();
        c.add(Some(true), true, false);
        c.add(Some(true), false, true);
        c.add(Some(false), true, true);
        c.add(None, true, true);
        let s = c.shares();
        assert_eq!(s["integrity/credited"], 2.0 / 3.0);
        assert_eq!(s["integrity/answer_in_prompt"], 0.5);
        assert_eq!(s["integrity/truncated_credited"], 0.5);
        assert!(StepCounts::default().shares().is_empty());
        assert_eq!(StepCounts::from_array(c.to_array()), c);
    }

    #[test]
    fn pearson_matches_a_hand_computed_case() {
        let r = pearson(&[(1.0, 2.0), (2.0, 4.0), (3.0, 5.0)]).unwrap();
        // cov = 1.5, var x = 1, var y = 2.333: r = 1.5 / sqrt(2.333...)
        assert!((r - 1.5 / (7.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!(pearson(&[(1.0, 2.0), (1.0, 3.0)]).is_none());
        assert!(pearson(&[(1.0, 2.0)]).is_none());
    }

    #[test]
    fn the_window_keeps_the_last_steps() {
        let mut w = Window::default();
        assert!(w.push(0, vec![(0.0, 1.0), (1.0, 2.0)], 2).unwrap() > 0.99);
        w.push(1, vec![(0.0, 1.0), (1.0, 2.0)], 2);
        // A third step anti-correlated: the first falls out of the window.
        let r = w.push(2, vec![(1.0, 1.0), (0.0, 2.0), (1.0, 1.0), (0.0, 2.0)], 2);
        assert!(r.unwrap() < 0.0);
    }

    #[test]
    fn a_rise_warns_once_and_a_flat_share_never() {
        let cfg = MonitorConfig {
            window: 2,
            ..MonitorConfig::default()
        };
        let mut log = IntegrityLog::default();
        for (step, v) in [0.0, 0.0, 0.1, 0.5, 0.9].into_iter().enumerate() {
            log.record(step, "integrity/answer_in_prompt", v);
            log.record(step, "integrity/truncated_credited", 0.05);
            let w = log.check_rises(step, &cfg);
            assert_eq!(w.len(), usize::from(step == 3), "step {step}: {w:?}");
        }
        assert_eq!(log.warnings.len(), 1);
        assert!(log.markdown().contains("**Warning**: step 3"));
        // Resuming at step 3 forgets the warning and its values.
        log.truncate(3);
        assert!(log.warnings.is_empty());
        assert_eq!(log.series["integrity/answer_in_prompt"].len(), 3);
    }

    #[test]
    fn canary_hits_warn_and_flagged_keep_the_highest_rewards() {
        let mut log = IntegrityLog::default();
        assert!(log.record_canaries(0, 10, vec![]).is_none());
        let hit = CanaryHit {
            step: 10,
            kind: CanaryKind::QuestionNumbers,
            prompt: "What is 7 + 5?".into(),
            response: "7 5".into(),
            reward: 1.0,
        };
        let w = log.record_canaries(10, 10, vec![hit]).unwrap();
        assert!(
            w.contains("1 of 10") && w.contains("question_numbers"),
            "{w}"
        );
        for (i, r) in [0.2, 0.9, 0.5].into_iter().enumerate() {
            let f = Flagged {
                step: i,
                reward: r,
                answer_in_prompt: true,
                truncated: false,
                answer: Some("7".into()),
                prompt: "p".into(),
                completion: "c".into(),
            };
            log.offer_flagged(f, 2);
        }
        let rewards: Vec<f64> = log.flagged.iter().map(|f| f.reward).collect();
        assert_eq!(rewards, [0.9, 0.5]);
        let md = log.markdown();
        assert!(md.contains("1 of 20 known-wrong"), "{md}");
        assert!(md.contains("| 1 | 0.900 | answer in prompt | 7 |"), "{md}");
    }
}
