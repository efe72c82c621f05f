//! Where a pass@1 change comes from: two evaluations (before and after RL) of the same held-out
//! problems, each sample labelled with its solution pattern, split into *selection* (the shift of
//! pattern shares at fixed per-pattern success) and *improvement* (changed per-pattern success).
//!
//! With share `s_p` and success rate `a_p` of pattern `p` before, `s'_p` and `a'_p` after,
//! pass@1 is `Σ_p s_p a_p` and
//!
//! ```text
//! Δ = Σ s'_p a'_p − Σ s_p a_p = Σ (s'_p − s_p)·a_p  +  Σ s'_p·(a'_p − a_p)
//!                               └── selection ──┘     └─ improvement ─┘
//! ```
//!
//! exactly (an algebraic identity). Every problem weighs the same, as in pass@1: a sample of a
//! problem with `n` samples has weight `1/(n·N)` over `N` problems, so shares and rates are those
//! of the pooled samples when every problem has the same number of samples.
//!
//! **A pattern absent from one evaluation** has no success rate there. It takes the other
//! evaluation's rate: a pattern that appears only after RL then contributes `s'_p·a'_p` entirely
//! to selection (it was chosen more often, from never) and nothing to improvement, and one that
//! disappears contributes `−s_p·a_p` to selection. Its share there is 0, so the identity holds.
//!
//! Intervals resample the held-out problems with replacement ([`bootstrap_decomposition`]), paired:
//! the same problems in both evaluations, seeded per round as [`crate::bootstrap::round_rng`].

use std::collections::BTreeMap;

use rand::Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::bootstrap::{quantile_sorted, round_rng};

/// One sampled completion of a held-out problem: its solution pattern and whether it was correct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub pattern: String,
    pub correct: bool,
}

impl Sample {
    pub fn new(pattern: impl Into<String>, correct: bool) -> Self {
        Self {
            pattern: pattern.into(),
            correct,
        }
    }
}

/// Why a decomposition cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecomposeError {
    #[error(
        "the two evaluations must cover the same problems: {before} problems before, {after} after"
    )]
    Unpaired { before: usize, after: usize },
    #[error("no held-out problems to decompose")]
    NoProblems,
    #[error("problem {problem} has no samples in the evaluation {which} RL")]
    NoSamples { problem: usize, which: &'static str },
    #[error("interval level must lie strictly between 0 and 1 (e.g. 0.95), got {0}")]
    Level(f64),
    #[error("bootstrap rounds must be at least 1, got 0")]
    NoRounds,
}

/// One pattern before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatternChange {
    pub pattern: String,
    pub share_before: f64,
    pub share_after: f64,
    /// Success rate of the pattern's samples; `None` when the pattern has no samples before.
    pub success_before: Option<f64>,
    pub success_after: Option<f64>,
    /// This pattern's term of the selection sum, `(s'_p − s_p)·a_p`.
    pub selection: f64,
    /// This pattern's term of the improvement sum, `s'_p·(a'_p − a_p)`.
    pub improvement: f64,
}

/// pass@1 before and after and the split of its change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decomposition {
    pub pass_at_1_before: f64,
    pub pass_at_1_after: f64,
    /// `pass_at_1_after − pass_at_1_before`.
    pub delta: f64,
    /// `Σ_p (s'_p − s_p)·a_p`.
    pub selection: f64,
    /// `Σ_p s'_p·(a'_p − a_p)`.
    pub improvement: f64,
    /// Every pattern seen in either evaluation, sorted by label.
    pub patterns: Vec<PatternChange>,
}

/// `[problem] -> [(pattern, weight of its samples, weight of its correct samples)]`.
type Rows = Vec<Vec<(usize, f64, f64)>>;

/// Per problem and pattern, the weight of its samples (`count/n`) and of its correct ones
/// (`correct/n`); patterns are indices into a shared label list.
struct Table {
    labels: Vec<String>,
    before: Rows,
    after: Rows,
}

impl Table {
    fn new(before: &[Vec<Sample>], after: &[Vec<Sample>]) -> Result<Self, DecomposeError> {
        if before.len() != after.len() {
            return Err(DecomposeError::Unpaired {
                before: before.len(),
                after: after.len(),
            });
        }
        if before.is_empty() {
            return Err(DecomposeError::NoProblems);
        }
        let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
        for s in before.iter().chain(after).flatten() {
            ids.insert(&s.pattern, 0);
        }
        for (i, id) in ids.values_mut().enumerate() {
            *id = i;
        }
        let rows = |eval: &[Vec<Sample>], which| -> Result<Rows, _> {
            eval.iter()
                .enumerate()
                .map(|(problem, samples)| {
                    if samples.is_empty() {
                        return Err(DecomposeError::NoSamples { problem, which });
                    }
                    let w = 1.0 / samples.len() as f64;
                    let mut acc: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
                    for s in samples {
                        let e = acc.entry(ids[s.pattern.as_str()]).or_default();
                        e.0 += w;
                        e.1 += if s.correct { w } else { 0.0 };
                    }
                    Ok(acc.into_iter().map(|(p, (n, c))| (p, n, c)).collect())
                })
                .collect()
        };
        Ok(Self {
            before: rows(before, "before")?,
            after: rows(after, "after")?,
            labels: ids.keys().map(|s| s.to_string()).collect(),
        })
    }

    /// The decomposition over the problems `picks` (indices, repeats allowed).
    fn decompose(&self, picks: impl Iterator<Item = usize> + Clone) -> Decomposition {
        let totals = |rows: &Rows| {
            let mut t = vec![(0.0, 0.0); self.labels.len()];
            let mut problems = 0.0;
            for i in picks.clone() {
                problems += 1.0;
                for &(p, n, c) in &rows[i] {
                    t[p].0 += n;
                    t[p].1 += c;
                }
            }
            // Shares: pattern weight / problems; success: correct weight / pattern weight.
            t.into_iter()
                .map(|(n, c)| (n / problems, (n > 0.0).then(|| c / n)))
                .collect::<Vec<_>>()
        };
        let (before, after) = (totals(&self.before), totals(&self.after));
        let mut d = Decomposition {
            pass_at_1_before: 0.0,
            pass_at_1_after: 0.0,
            delta: 0.0,
            selection: 0.0,
            improvement: 0.0,
            patterns: Vec::with_capacity(self.labels.len()),
        };
        for (label, (&(s, a), &(s2, a2))) in self.labels.iter().zip(before.iter().zip(&after)) {
            // A rate missing on one side takes the other side's (module docs); a pattern seen in
            // neither resample contributes nothing.
            let (ra, ra2) = match (a, a2) {
                (Some(x), Some(y)) => (x, y),
                (Some(x), None) => (x, x),
                (None, Some(y)) => (y, y),
                (None, None) => (0.0, 0.0),
            };
            let change = PatternChange {
                pattern: label.clone(),
                share_before: s,
                share_after: s2,
                success_before: a,
                success_after: a2,
                selection: (s2 - s) * ra,
                improvement: s2 * (ra2 - ra),
            };
            d.pass_at_1_before += s * ra;
            d.pass_at_1_after += s2 * ra2;
            d.selection += change.selection;
            d.improvement += change.improvement;
            d.patterns.push(change);
        }
        d.delta = d.pass_at_1_after - d.pass_at_1_before;
        d
    }
}

/// pass@1 before and after RL and the split of its change into selection and improvement; the
/// two evaluations list the same held-out problems in the same order.
pub fn decompose(
    before: &[Vec<Sample>],
    after: &[Vec<Sample>],
) -> Result<Decomposition, DecomposeError> {
    let t = Table::new(before, after)?;
    Ok(t.decompose(0..before.len()))
}

/// A central percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub lower: f64,
    pub upper: f64,
}

impl Interval {
    /// Whether 0 lies outside the interval.
    pub fn excludes_zero(&self) -> bool {
        self.lower > 0.0 || self.upper < 0.0
    }

    /// Whether `x` lies inside (bounds included).
    pub fn contains(&self, x: f64) -> bool {
        self.lower <= x && x <= self.upper
    }
}

/// Bootstrap intervals of the decomposition's three numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecompositionIntervals {
    /// Central coverage, e.g. 0.95.
    pub level: f64,
    pub rounds: usize,
    pub seed: u64,
    pub delta: Interval,
    pub selection: Interval,
    pub improvement: Interval,
}

/// Percentile intervals at `level` (in (0, 1)) for Δ, selection and improvement from `rounds`
/// paired resamples of the held-out problems (the same problem indices in both evaluations).
/// Round `r` draws from ChaCha8 stream `r` of `seed`, so the result does not depend on threads.
pub fn bootstrap_decomposition(
    before: &[Vec<Sample>],
    after: &[Vec<Sample>],
    rounds: usize,
    level: f64,
    seed: u64,
) -> Result<DecompositionIntervals, DecomposeError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(DecomposeError::Level(level));
    }
    if rounds == 0 {
        return Err(DecomposeError::NoRounds);
    }
    let t = Table::new(before, after)?;
    let n = before.len();
    let draws: Vec<[f64; 3]> = (0..rounds as u64)
        .into_par_iter()
        .map(|r| {
            let mut rng = round_rng(seed, r);
            let picks: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
            let d = t.decompose(picks.into_iter());
            [d.delta, d.selection, d.improvement]
        })
        .collect();
    let a = (1.0 - level) / 2.0;
    let interval = |k: usize| {
        let mut col: Vec<f64> = draws.iter().map(|d| d[k]).collect();
        col.sort_by(f64::total_cmp);
        Interval {
            lower: quantile_sorted(&col, a),
            upper: quantile_sorted(&col, 1.0 - a),
        }
    };
    Ok(DecompositionIntervals {
        level,
        rounds,
        seed,
        delta: interval(0),
        selection: interval(1),
        improvement: interval(2),
    })
}

/// The sentence the numbers support: the pass@1 change with its interval, each part with its
/// interval and whether it excludes 0, and which part is the larger, stated only as far as the
/// intervals allow.
pub fn claim_sentence(d: &Decomposition, ci: &DecompositionIntervals) -> String {
    let pct = format!("{:.0}%", ci.level * 100.0);
    let part = |name: &str, x: f64, i: &Interval| {
        format!(
            "{name} {x:+.3} [{:+.3}, {:+.3}] ({} 0)",
            i.lower,
            i.upper,
            if i.excludes_zero() {
                "excludes"
            } else {
                "includes"
            }
        )
    };
    let direction = if d.delta > 0.0 {
        "rose"
    } else if d.delta < 0.0 {
        "fell"
    } else {
        "did not change"
    };
    let mut s = format!(
        "pass@1 {direction} from {:.3} to {:.3} (Δ {:+.3}, {pct} interval [{:+.3}, {:+.3}] over held-out problems). ",
        d.pass_at_1_before, d.pass_at_1_after, d.delta, ci.delta.lower, ci.delta.upper
    );
    s += &format!(
        "Selection (pattern shares shifting at fixed per-pattern success): {}; improvement (per-pattern success changing): {}. ",
        part("", d.selection, &ci.selection).trim_start(),
        part("", d.improvement, &ci.improvement).trim_start()
    );
    let (sel, imp) = (ci.selection.excludes_zero(), ci.improvement.excludes_zero());
    let larger = if d.selection.abs() >= d.improvement.abs() {
        "selection"
    } else {
        "improvement"
    };
    s += &if !ci.delta.excludes_zero() {
        "The change itself is within resampling noise at this level, so neither part is established.".to_string()
    } else if d.selection * d.improvement < 0.0 && sel && imp {
        format!("The two parts pull in opposite directions; {larger} is the larger.")
    } else if sel && !imp {
        "Only selection is distinguishable from 0: the change is carried by which pattern the model chooses.".to_string()
    } else if imp && !sel {
        "Only improvement is distinguishable from 0: the change is carried by per-pattern success."
            .to_string()
    } else if sel && imp {
        format!("Both parts are distinguishable from 0; {larger} is the larger.")
    } else {
        format!(
            "Neither part alone is distinguishable from 0; {larger} is the larger point estimate."
        )
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `k` samples of `pattern`, the first `c` correct.
    fn samples(pattern: &str, k: usize, c: usize) -> Vec<Sample> {
        (0..k).map(|i| Sample::new(pattern, i < c)).collect()
    }

    fn problem(parts: &[(&str, usize, usize)]) -> Vec<Sample> {
        parts
            .iter()
            .flat_map(|&(p, k, c)| samples(p, k, c))
            .collect()
    }

    #[test]
    fn only_shares_change_gives_zero_improvement() {
        // Pattern a succeeds half the time, b never, in both evaluations; RL moves the share of
        // a from 1/4 to 3/4.
        let before = vec![problem(&[("a", 2, 1), ("b", 6, 0)]); 3];
        let after = vec![problem(&[("a", 6, 3), ("b", 2, 0)]); 3];
        let d = decompose(&before, &after).unwrap();
        assert_eq!(d.improvement, 0.0);
        assert_eq!((d.pass_at_1_before, d.pass_at_1_after), (0.125, 0.375));
        assert_eq!(d.selection, d.delta);
        assert_eq!(d.delta, 0.25);
    }

    #[test]
    fn only_success_changes_gives_zero_selection() {
        let before = vec![problem(&[("a", 4, 1), ("b", 4, 0)]); 2];
        let after = vec![problem(&[("a", 4, 3), ("b", 4, 2)]); 2];
        let d = decompose(&before, &after).unwrap();
        assert_eq!(d.selection, 0.0);
        assert_eq!(d.improvement, d.delta);
        assert_eq!(d.delta, 0.5);
        let a = &d.patterns[0];
        assert_eq!(
            (a.success_before, a.success_after),
            (Some(0.25), Some(0.75))
        );
    }

    #[test]
    fn a_new_pattern_is_selection_and_a_vanished_one_costs_its_share() {
        let before = vec![problem(&[("a", 4, 2)])];
        let after = vec![problem(&[("a", 2, 1), ("new", 2, 2)])];
        let d = decompose(&before, &after).unwrap();
        let new = d.patterns.iter().find(|p| p.pattern == "new").unwrap();
        assert_eq!(new.success_before, None);
        assert_eq!((new.selection, new.improvement), (0.5, 0.0));
        assert_eq!(d.delta, d.selection + d.improvement);
    }

    #[test]
    fn problems_weigh_equally_whatever_their_sample_counts() {
        // Problem 0: 1 sample, correct; problem 1: 3 samples, wrong: pass@1 = 0.5, not 0.25.
        let before = vec![problem(&[("a", 1, 1)]), problem(&[("a", 3, 0)])];
        let d = decompose(&before, &before).unwrap();
        assert_eq!(d.pass_at_1_before, 0.5);
        assert_eq!(d.delta, 0.0);
    }

    #[test]
    fn bad_inputs_are_named_errors() {
        let one = vec![problem(&[("a", 1, 1)])];
        let two = vec![problem(&[("a", 1, 1)]); 2];
        assert!(matches!(
            decompose(&one, &two),
            Err(DecomposeError::Unpaired { .. })
        ));
        assert_eq!(decompose(&[], &[]), Err(DecomposeError::NoProblems));
        let hole = vec![vec![]];
        let e = decompose(&one, &hole).unwrap_err();
        assert!(e.to_string().contains("problem 0") && e.to_string().contains("after"));
        for level in [0.0, 1.0, 95.0, f64::NAN] {
            let e = bootstrap_decomposition(&one, &one, 10, level, 0).unwrap_err();
            assert!(e.to_string().contains("0.95"), "{level}: {e}");
        }
        assert_eq!(
            bootstrap_decomposition(&one, &one, 0, 0.9, 0),
            Err(DecomposeError::NoRounds)
        );
    }

    /// Twenty problems whose pattern mix and success both move.
    fn shifted() -> (Vec<Vec<Sample>>, Vec<Vec<Sample>>) {
        let before = (0..20)
            .map(|i| problem(&[("direct", 6, i % 3), ("columns", 2, 1 + i % 2)]))
            .collect();
        let after = (0..20)
            .map(|i| problem(&[("direct", 2, i % 2), ("columns", 6, 3 + i % 4)]))
            .collect();
        (before, after)
    }

    #[test]
    fn intervals_contain_the_estimate_and_repeat_with_the_seed() {
        let (before, after) = shifted();
        let d = decompose(&before, &after).unwrap();
        let ci = bootstrap_decomposition(&before, &after, 400, 0.95, 7).unwrap();
        assert!(ci.delta.contains(d.delta), "{ci:?} {d:?}");
        assert!(ci.selection.contains(d.selection) && ci.improvement.contains(d.improvement));
        assert!(ci.delta.lower < ci.delta.upper);
        assert_eq!(
            ci,
            bootstrap_decomposition(&before, &after, 400, 0.95, 7).unwrap()
        );
        assert_ne!(
            ci,
            bootstrap_decomposition(&before, &after, 400, 0.95, 8).unwrap()
        );
        let narrow = bootstrap_decomposition(&before, &after, 400, 0.5, 7).unwrap();
        assert!(narrow.delta.upper - narrow.delta.lower < ci.delta.upper - ci.delta.lower);
    }

    #[test]
    fn the_sentence_follows_the_numbers() {
        let (before, after) = shifted();
        let d = decompose(&before, &after).unwrap();
        let ci = bootstrap_decomposition(&before, &after, 400, 0.95, 7).unwrap();
        let s = claim_sentence(&d, &ci);
        assert!(s.contains(&format!("{:.3}", d.pass_at_1_before)), "{s}");
        assert!(s.contains("95% interval") && s.contains("Selection"), "{s}");
        // No change at all: the sentence says the change is noise, whatever the parts.
        let same = decompose(&before, &before).unwrap();
        let ci0 = bootstrap_decomposition(&before, &before, 100, 0.95, 1).unwrap();
        let s0 = claim_sentence(&same, &ci0);
        assert!(
            s0.contains("did not change") && s0.contains("neither part is established"),
            "{s0}"
        );
        // Only shares move: the sentence credits selection alone.
        let b = vec![problem(&[("a", 2, 1), ("b", 6, 0)]); 10];
        let a = vec![problem(&[("a", 6, 3), ("b", 2, 0)]); 10];
        let ci1 = bootstrap_decomposition(&b, &a, 100, 0.95, 1).unwrap();
        let s1 = claim_sentence(&decompose(&b, &a).unwrap(), &ci1);
        assert!(s1.contains("Only selection"), "{s1}");
    }

    fn evaluation(problems: usize) -> impl Strategy<Value = Vec<Vec<Sample>>> {
        let sample = (0..4usize, any::<bool>()).prop_map(|(p, c)| Sample::new(format!("p{p}"), c));
        proptest::collection::vec(proptest::collection::vec(sample, 1..7), problems)
    }

    proptest! {
        #[test]
        fn parts_sum_to_the_change(
            (before, after) in (1usize..12).prop_flat_map(|n| (evaluation(n), evaluation(n)))
        ) {
            let d = decompose(&before, &after).unwrap();
            prop_assert!((d.selection + d.improvement - d.delta).abs() < 1e-12, "{:?}", d);
            // pass@1 is the mean over problems of the fraction correct.
            let p1 = |e: &[Vec<Sample>]| e.iter()
                .map(|s| s.iter().filter(|x| x.correct).count() as f64 / s.len() as f64)
                .sum::<f64>() / e.len() as f64;
            prop_assert!((d.pass_at_1_before - p1(&before)).abs() < 1e-12);
            prop_assert!((d.pass_at_1_after - p1(&after)).abs() < 1e-12);
            let shares: f64 = d.patterns.iter().map(|p| p.share_after).sum();
            prop_assert!((shares - 1.0).abs() < 1e-12);
        }
    }
}
