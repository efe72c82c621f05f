//! DERL's meta-policy over reward compositions: for each primitive an independent Bernoulli
//! (on or off, logit `on[i]`) and a categorical over the weight grid (logits `weight[i]`).
//! A population is sampled each generation and the policy is updated by REINFORCE with the
//! population's mean score as the baseline. Pure: no tensors, reproducible from a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::primitives::{Composition, Primitive};

/// The weights a primitive that is on can take.
pub const WEIGHT_GRID: [f64; 4] = [0.25, 0.5, 1.0, 2.0];

/// One sampled composition: which primitives are on and the grid index of each weight
/// (drawn for every primitive, used only where it is on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub on: Vec<bool>,
    pub weight: Vec<usize>,
}

impl Candidate {
    /// The reward this candidate composes.
    pub fn composition(&self) -> Composition {
        Composition {
            terms: Primitive::ALL
                .iter()
                .zip(self.on.iter().zip(&self.weight))
                .filter(|(_, (on, _))| **on)
                .filter_map(|(&p, (_, &w))| WEIGHT_GRID.get(w).map(|&w| (p, w)))
                .collect(),
        }
    }
}

/// The meta-policy's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetaPolicy {
    /// Logit of each primitive being on.
    pub on: Vec<f64>,
    /// Logits over [`WEIGHT_GRID`], per primitive.
    pub weight: Vec<Vec<f64>>,
}

impl Default for MetaPolicy {
    /// Uniform: every primitive on with probability 1/2, every weight equally likely.
    fn default() -> Self {
        let n = Primitive::ALL.len();
        Self {
            on: vec![0.0; n],
            weight: vec![vec![0.0; WEIGHT_GRID.len()]; n],
        }
    }
}

/// The logistic function.
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Softmax of `logits` (shifted by the maximum for stability).
fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = e.iter().sum();
    e.into_iter().map(|x| x / total).collect()
}

impl MetaPolicy {
    /// Whether the parameters have one on-logit and one full weight row per primitive (a
    /// state file could say otherwise).
    pub fn has_shape(&self) -> bool {
        let n = Primitive::ALL.len();
        self.on.len() == n
            && self.weight.len() == n
            && self.weight.iter().all(|row| row.len() == WEIGHT_GRID.len())
    }

    /// Probability that each primitive is on.
    pub fn on_probabilities(&self) -> Vec<f64> {
        self.on.iter().copied().map(sigmoid).collect()
    }

    /// The most likely weight of each primitive.
    pub fn modal_weights(&self) -> Vec<f64> {
        self.weight
            .iter()
            .map(|l| {
                let probs = softmax(l);
                let best = (0..probs.len())
                    .max_by(|&a, &b| probs[a].total_cmp(&probs[b]).then(b.cmp(&a)))
                    .unwrap_or(0);
                WEIGHT_GRID[best]
            })
            .collect()
    }

    /// Primitives whose on-probability is above one half.
    pub fn surviving(&self) -> Vec<Primitive> {
        Primitive::ALL
            .iter()
            .zip(self.on_probabilities())
            .filter(|(_, p)| *p > 0.5)
            .map(|(&prim, _)| prim)
            .collect()
    }

    /// `size` candidates drawn with a generator seeded by `seed`.
    pub fn sample(&self, size: usize, seed: u64) -> Vec<Candidate> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..size).map(|_| self.draw(&mut rng)).collect()
    }

    /// One candidate.
    fn draw(&self, rng: &mut impl Rng) -> Candidate {
        let on = self
            .on_probabilities()
            .into_iter()
            .map(|p| rng.gen::<f64>() < p)
            .collect();
        let weight = self
            .weight
            .iter()
            .map(|l| {
                let u: f64 = rng.gen();
                let mut acc = 0.0;
                let probs = softmax(l);
                probs
                    .iter()
                    .position(|p| {
                        acc += p;
                        u < acc
                    })
                    .unwrap_or(probs.len() - 1)
            })
            .collect();
        Candidate { on, weight }
    }

    /// One REINFORCE step: `lr` times the mean over candidates of (score - mean score) times
    /// the gradient of the candidate's log-probability. A weight's logits move only for
    /// candidates where its primitive was on (the weight is unused otherwise).
    pub fn update(&mut self, candidates: &[Candidate], scores: &[f64], lr: f64) {
        let fits = |c: &Candidate| c.on.len() == self.on.len() && c.weight.len() == self.on.len();
        if candidates.is_empty()
            || candidates.len() != scores.len()
            || !self.has_shape()
            || !candidates.iter().all(fits)
        {
            return;
        }
        let n = candidates.len() as f64;
        let baseline = scores.iter().sum::<f64>() / n;
        let on_p = self.on_probabilities();
        let weight_p: Vec<Vec<f64>> = self.weight.iter().map(|l| softmax(l)).collect();
        let mut grad_on = vec![0.0; self.on.len()];
        let mut grad_w = vec![vec![0.0; WEIGHT_GRID.len()]; self.weight.len()];
        for (c, &s) in candidates.iter().zip(scores) {
            let adv = (s - baseline) / n;
            for i in 0..self.on.len() {
                grad_on[i] += adv * (f64::from(u8::from(c.on[i])) - on_p[i]);
                if c.on[i] {
                    for (j, g) in grad_w[i].iter_mut().enumerate() {
                        *g += adv * (f64::from(u8::from(j == c.weight[i])) - weight_p[i][j]);
                    }
                }
            }
        }
        for (l, g) in self.on.iter_mut().zip(grad_on) {
            *l += lr * g;
        }
        for (row, grow) in self.weight.iter_mut().zip(grad_w) {
            for (l, g) in row.iter_mut().zip(grow) {
                *l += lr * g;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_reproducible_and_seed_dependent() {
        let m = MetaPolicy::default();
        assert_eq!(m.sample(8, 3), m.sample(8, 3));
        assert_ne!(m.sample(8, 3), m.sample(8, 4));
        for c in m.sample(8, 3) {
            assert_eq!(c.on.len(), Primitive::ALL.len());
            assert!(c.weight.iter().all(|&w| w < WEIGHT_GRID.len()));
        }
    }

    #[test]
    fn composition_keeps_the_primitives_that_are_on() {
        let mut c = Candidate {
            on: vec![false; 6],
            weight: vec![0, 1, 2, 3, 0, 1],
        };
        c.on[1] = true;
        c.on[3] = true;
        let comp = c.composition();
        assert_eq!(
            comp.terms,
            vec![(Primitive::Digits, 0.5), (Primitive::Pattern, 2.0)]
        );
    }

    #[test]
    fn reinforce_learns_which_primitive_pays() {
        // The score is 1 when `digits` is on with weight 2.0, else 0.
        let mut m = MetaPolicy::default();
        let digits = 1;
        for generation in 0..200 {
            let pop = m.sample(8, generation);
            let scores: Vec<f64> = pop
                .iter()
                .map(|c| f64::from(u8::from(c.on[digits] && c.weight[digits] == 3)))
                .collect();
            m.update(&pop, &scores, 2.0);
        }
        assert!(m.on_probabilities()[digits] > 0.9, "{:?}", m.on);
        assert_eq!(m.modal_weights()[digits], 2.0);
        assert!(m.surviving().contains(&Primitive::Digits));
    }

    #[test]
    fn equal_scores_leave_the_policy_unchanged() {
        let mut m = MetaPolicy::default();
        let pop = m.sample(4, 0);
        m.update(&pop, &[0.3; 4], 1.0);
        assert_eq!(m, MetaPolicy::default());
        // Mismatched inputs are ignored rather than panicking.
        m.update(&pop, &[1.0], 1.0);
        assert_eq!(m, MetaPolicy::default());
        let short = Candidate {
            on: vec![true],
            weight: vec![9],
        };
        m.update(&[short.clone(), short.clone()], &[0.0, 1.0], 1.0);
        assert_eq!(m, MetaPolicy::default());
        assert!(short.composition().terms.is_empty());
        assert!(m.has_shape());
        m.weight[2].pop();
        assert!(!m.has_shape());
    }
}
