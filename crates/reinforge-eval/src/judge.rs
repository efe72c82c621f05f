//! Position bias of pairwise LLM judges and its cancellation by swapping: each pair is judged
//! twice, with either response shown first, and the two probabilities are averaged (the
//! position-swap protocol of MT-Bench, Zheng et al. 2023, §3.3). Pure arithmetic on the
//! judge's probabilities; the model that produces them lives elsewhere.

use serde::Serialize;

/// A pair judged in both orders: the probability that response A is better when A is shown
/// first, and when A is shown second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwappedVerdict {
    pub a_shown_first: f64,
    pub a_shown_second: f64,
}

impl SwappedVerdict {
    /// P(A better) with the position effect cancelled: the mean over both orders.
    pub fn debiased(&self) -> f64 {
        0.5 * (self.a_shown_first + self.a_shown_second)
    }

    /// Whether both orders pick the same winner (ties at exactly 0.5 count as no pick).
    pub fn consistent(&self) -> bool {
        (self.a_shown_first > 0.5) == (self.a_shown_second > 0.5)
    }
}

/// How much a judge favours the first position, before and after swapping.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionBias {
    pub pairs: usize,
    /// Mean P(the response shown first wins) − 0.5 over every single-order verdict (both
    /// orders of every pair, so the responses' own quality cancels): 0 for an unbiased judge.
    pub first_position_shift: f64,
    /// Share of single-order verdicts that pick the response shown first.
    pub first_position_rate: f64,
    /// Share of pairs whose two orders pick the same winner.
    pub consistency: f64,
    /// The same shift for the swap-averaged verdict: 0 by construction (reported as computed).
    pub debiased_first_position_shift: f64,
    /// With known winners: share of pairs the single-order verdict (A shown first) gets right.
    pub accuracy_single_order: Option<f64>,
    /// With known winners: share of pairs the swap-averaged verdict gets right.
    pub accuracy_debiased: Option<f64>,
}

/// The position bias of `verdicts`; `truth[i]` (when given) is whether A is the better
/// response of pair `i`.
pub fn position_bias(verdicts: &[SwappedVerdict], truth: Option<&[bool]>) -> PositionBias {
    let n = verdicts.len().max(1) as f64;
    // Single-order verdicts, as P(first shown wins): A first gives a_shown_first; B first
    // gives 1 − a_shown_second.
    let firsts: Vec<f64> = verdicts
        .iter()
        .flat_map(|v| [v.a_shown_first, 1.0 - v.a_shown_second])
        .collect();
    let m = firsts.len().max(1) as f64;
    let debiased_firsts: Vec<f64> = verdicts
        .iter()
        .flat_map(|v| [v.debiased(), 1.0 - v.debiased()])
        .collect();
    let accuracy = |pick: &dyn Fn(&SwappedVerdict) -> f64| {
        truth.map(|t| {
            verdicts
                .iter()
                .zip(t)
                .filter(|(v, &a_better)| {
                    let p = pick(v);
                    // A tie (exactly 0.5) is no pick: never right.
                    if a_better {
                        p > 0.5
                    } else {
                        p < 0.5
                    }
                })
                .count() as f64
                / n
        })
    };
    PositionBias {
        pairs: verdicts.len(),
        first_position_shift: firsts.iter().sum::<f64>() / m - 0.5,
        first_position_rate: firsts.iter().filter(|&&p| p > 0.5).count() as f64 / m,
        consistency: verdicts.iter().filter(|v| v.consistent()).count() as f64 / n,
        debiased_first_position_shift: debiased_firsts.iter().sum::<f64>() / m - 0.5,
        accuracy_single_order: accuracy(&|v| v.a_shown_first),
        accuracy_debiased: accuracy(&|v| v.debiased()),
    }
}

/// The battle outcome of a debiased probability: `model_a`, `model_b`, or `tie` within
/// `tie_margin` of 0.5.
pub fn winner(p_a: f64, tie_margin: f64) -> &'static str {
    if (p_a - 0.5).abs() <= tie_margin {
        "tie"
    } else if p_a > 0.5 {
        "model_a"
    } else {
        "model_b"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judge_that_always_prefers_the_first_slot_is_measured_and_cancelled() {
        // P(first wins) = 0.9 whatever the responses: A first → 0.9, A second → 0.1.
        let v = vec![
            SwappedVerdict {
                a_shown_first: 0.9,
                a_shown_second: 0.1,
            };
            4
        ];
        let b = position_bias(&v, Some(&[true, false, true, false]));
        assert!((b.first_position_shift - 0.4).abs() < 1e-12);
        assert_eq!(b.first_position_rate, 1.0);
        assert_eq!(b.consistency, 0.0);
        assert!(b.debiased_first_position_shift.abs() < 1e-12);
        // Single order: always "A" → right on the two pairs where A is better.
        assert_eq!(b.accuracy_single_order, Some(0.5));
        // Debiased: exactly 0.5 → no pick → never right.
        assert_eq!(b.accuracy_debiased, Some(0.0));
        assert_eq!(winner(v[0].debiased(), 0.05), "tie");
    }

    #[test]
    fn an_unbiased_judge_keeps_its_verdicts() {
        let v = [
            SwappedVerdict {
                a_shown_first: 0.8,
                a_shown_second: 0.8,
            },
            SwappedVerdict {
                a_shown_first: 0.3,
                a_shown_second: 0.3,
            },
        ];
        let b = position_bias(&v, Some(&[true, false]));
        assert!(b.first_position_shift.abs() < 1e-12);
        assert_eq!(b.consistency, 1.0);
        assert_eq!(b.accuracy_debiased, Some(1.0));
        assert_eq!(winner(v[0].debiased(), 0.05), "model_a");
        assert_eq!(winner(v[1].debiased(), 0.05), "model_b");
    }
}
