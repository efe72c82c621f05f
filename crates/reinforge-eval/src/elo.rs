//! Online Elo in file order, as FastChat `compute_elo` (`fastchat/serve/monitor/rating_systems.py`;
//! identical to evalica's `elo`): every model starts at `init`, and after each battle
//! `r_a += K (s_a - E_a)`, `r_b -= K (s_a - E_a)` with `E_a = 1 / (1 + base^((r_b - r_a) / scale))` and
//! `s_a` in {1, 0.5, 0}. Order-dependent by design, so it is reported next to the Bradley-Terry fit
//! rather than instead of it.

use crate::io::Battles;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Online Elo settings (FastChat defaults: K = 4, scale 400, base 10, init 1000).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EloParams {
    /// Update step.
    pub k: f64,
    /// Rating points per factor `base` of odds.
    pub scale: f64,
    /// Odds base.
    pub base: f64,
    /// Starting rating.
    pub init: f64,
}

impl Default for EloParams {
    fn default() -> Self {
        EloParams {
            k: 4.0,
            scale: 400.0,
            base: 10.0,
            init: 1000.0,
        }
    }
}

/// Runs online Elo over the battles in file order; returns ratings indexed by model id.
pub fn online_elo(b: &Battles, p: &EloParams) -> Vec<f64> {
    elo_over(b, p, 0..b.len())
}

fn elo_over(b: &Battles, p: &EloParams, order: impl Iterator<Item = usize>) -> Vec<f64> {
    let alpha = p.base.ln() / p.scale;
    let mut r = vec![p.init; b.models.len()];
    for i in order {
        let (x, y) = (b.a[i] as usize, b.b[i] as usize);
        let e = 1.0 / (1.0 + (alpha * (r[y] - r[x])).exp());
        let u = p.k * (b.outcome[i].score_a() - e);
        r[x] += u;
        r[y] -= u;
    }
    r
}

/// FastChat `compute_bootstrap_elo`: each round replays `N` battles drawn uniformly with replacement
/// (in draw order) through online Elo. Rounds are seeded independently (ChaCha8 stream = round index),
/// so the result does not depend on the thread count. Returns `rounds x models` ratings.
pub fn bootstrap_elo(b: &Battles, p: &EloParams, rounds: usize, seed: u64) -> Vec<Vec<f64>> {
    let n = b.len();
    (0..rounds)
        .into_par_iter()
        .map(|round| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(round as u64);
            let idx: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
            elo_over(b, p, idx.into_iter())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Outcome;

    #[test]
    fn hand_computed_updates() {
        let b =
            Battles::from_triples([("x", "y", Outcome::AWins), ("y", "x", Outcome::Tie)]).unwrap();
        let r = online_elo(&b, &EloParams::default());
        // First battle: equal ratings, E = 0.5, x gains 2.
        let (x1, y1) = (1002.0, 998.0);
        // Second: y is A with E_y = 1/(1+10^((x1-y1)/400)), s = 0.5.
        let ey = 1.0 / (1.0 + 10f64.powf((x1 - y1) / 400.0));
        let u = 4.0 * (0.5 - ey);
        assert!((r[0] - (x1 - u)).abs() < 1e-12 && (r[1] - (y1 + u)).abs() < 1e-12);
        assert!(
            (r[0] + r[1] - 2000.0).abs() < 1e-9,
            "Elo conserves the rating sum"
        );
    }

    #[test]
    fn bootstrap_is_seeded_and_thread_independent() {
        let b = Battles::from_triples((0..200).map(|i| {
            if i % 3 == 0 {
                ("x", "y", Outcome::AWins)
            } else {
                ("y", "z", Outcome::Tie)
            }
        }))
        .unwrap();
        let a1 = bootstrap_elo(&b, &EloParams::default(), 8, 5);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let a2 = pool.install(|| bootstrap_elo(&b, &EloParams::default(), 8, 5));
        assert_eq!(a1, a2);
        assert_ne!(a1[0], a1[1]);
    }
}
