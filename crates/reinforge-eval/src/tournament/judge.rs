//! Judges: where a tournament's pairwise outcomes come from.

use crate::bt::{fit_bt, fit_rao_kupper, FitOptions, PairTable};
use crate::io::{Battles, Outcome};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Source of pairwise outcomes. A schedule only ever asks "how does `a` fare against `b`?", so the same
/// schedule runs against a simulated model, recorded battles, or (outside this crate) a live LLM judge.
pub trait Judge {
    /// Compares player `a` with player `b` once; the outcome is from `a`'s side (`AWins` means `a` won).
    fn compare(&mut self, a: usize, b: usize) -> Outcome;
}

impl<J: Judge + ?Sized> Judge for &mut J {
    fn compare(&mut self, a: usize, b: usize) -> Outcome {
        (**self).compare(a, b)
    }
}

#[inline]
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Simulated judge with known strengths: Bradley-Terry, or Rao-Kupper when `kappa > 0`
/// (`P(a > b) = sigmoid(d - kappa)`, `P(b > a) = sigmoid(-d - kappa)`, a tie otherwise, `d = beta_a -
/// beta_b`; the model [`crate::bt::fit_rao_kupper`] fits). Seeded ChaCha8, so runs are reproducible.
#[derive(Debug, Clone)]
pub struct BtJudge {
    beta: Vec<f64>,
    kappa: f64,
    rng: ChaCha8Rng,
}

impl BtJudge {
    /// `beta`: natural-log strengths per player; `kappa >= 0`: tie parameter (0 = no ties).
    pub fn new(beta: Vec<f64>, kappa: f64, seed: u64) -> Self {
        Self::with_rng(beta, kappa, ChaCha8Rng::seed_from_u64(seed))
    }

    /// Like [`BtJudge::new`] with an explicit generator (e.g. one stream of a seeded family).
    pub fn with_rng(beta: Vec<f64>, kappa: f64, rng: ChaCha8Rng) -> Self {
        assert!(kappa >= 0.0, "kappa must be >= 0");
        BtJudge { beta, kappa, rng }
    }

    /// `(P(a wins), P(tie), P(b wins))`.
    pub fn probabilities(&self, a: usize, b: usize) -> (f64, f64, f64) {
        let d = self.beta[a] - self.beta[b];
        let pa = sigmoid(d - self.kappa);
        let pb = sigmoid(-d - self.kappa);
        (pa, (1.0 - pa - pb).max(0.0), pb)
    }
}

impl Judge for BtJudge {
    fn compare(&mut self, a: usize, b: usize) -> Outcome {
        let (pa, _, pb) = self.probabilities(a, b);
        let u: f64 = self.rng.gen();
        if u < pa {
            Outcome::AWins
        } else if u < pa + pb {
            Outcome::BWins
        } else {
            Outcome::Tie
        }
    }
}

/// Noise-free judge: the higher `strength` always wins, equal strengths tie. Useful to check that a
/// schedule can recover an order at all (e.g. the strongest player must win a knockout).
#[derive(Debug, Clone)]
pub struct DeterministicJudge {
    /// Strength per player.
    pub strength: Vec<f64>,
}

impl Judge for DeterministicJudge {
    fn compare(&mut self, a: usize, b: usize) -> Outcome {
        match self.strength[a].total_cmp(&self.strength[b]) {
            std::cmp::Ordering::Greater => Outcome::AWins,
            std::cmp::Ordering::Less => Outcome::BWins,
            std::cmp::Ordering::Equal => Outcome::Tie,
        }
    }
}

/// Default pseudo-games of the model prior mixed into every pair's empirical outcome counts.
pub const DEFAULT_PRIOR_GAMES: f64 = 1.0;

/// Judge that replays recorded battles. A comparison of a pair draws an outcome from that pair's
/// (win, tie, loss) counts in the data, pooled over both seat orders, plus `prior_games` pseudo-games
/// split by a Rao-Kupper model fitted on all battles (so ties keep their rate). A pair that never met
/// is therefore answered by the model alone, and a pair seen once is not replayed as a certainty: raw
/// frequencies from one or two battles would make a single lucky result decide every rematch. With
/// `prior_games = 0` well-observed pairs are replayed exactly. This turns a battles file into a
/// reusable stochastic judge, so a schedule can be scored by how well it reproduces the full-data
/// leaderboard.
#[derive(Debug, Clone)]
pub struct BattleOracle {
    models: Vec<String>,
    /// `(lo, hi)` -> counts `[lo wins, tie, hi wins]`.
    pairs: HashMap<(u32, u32), [f64; 3]>,
    beta: Vec<f64>,
    converged: bool,
    rk_beta: Vec<f64>,
    rk_kappa: f64,
    prior_games: f64,
    rng: ChaCha8Rng,
    fallbacks: u64,
}

impl BattleOracle {
    /// Builds the oracle from battles (ids and names as in `b`), seeding its generator with `seed`, with
    /// [`DEFAULT_PRIOR_GAMES`]. The reference strengths are the plain Bradley-Terry MLE (crate
    /// [`fit_bt`], FastChat's model); the outcome model is [`fit_rao_kupper`]. A fit that does not
    /// converge (a model won or lost everything) is redone with a small L2 prior so it stays finite.
    pub fn new(b: &Battles, seed: u64) -> Self {
        let t = PairTable::from_battles(b);
        let mut pairs = HashMap::with_capacity(t.lo.len());
        for p in 0..t.lo.len() {
            pairs.insert((t.lo[p], t.hi[p]), [t.win_lo[p], t.tie[p], t.win_hi[p]]);
        }
        let penalised = FitOptions {
            prior: 0.01,
            ..FitOptions::default()
        };
        let mut fit = fit_bt(&t, None, &FitOptions::default());
        let converged = fit.converged;
        if !converged {
            fit = fit_bt(&t, None, &penalised);
        }
        let mut rk = fit_rao_kupper(&t, &FitOptions::default());
        if !rk.converged {
            rk = fit_rao_kupper(&t, &penalised);
        }
        BattleOracle {
            models: b.models.clone(),
            pairs,
            beta: fit.beta,
            converged,
            rk_beta: rk.beta,
            rk_kappa: rk.kappa.max(0.0),
            prior_games: DEFAULT_PRIOR_GAMES,
            rng: ChaCha8Rng::seed_from_u64(seed),
            fallbacks: 0,
        }
    }

    /// Sets the pseudo-games of the model prior per pair (0 = replay observed pairs exactly).
    pub fn with_prior_games(mut self, k: f64) -> Self {
        assert!(
            k >= 0.0 && k.is_finite(),
            "prior games must be finite and >= 0"
        );
        self.prior_games = k;
        self
    }

    /// `(P(a wins), P(tie), P(b wins))` of one comparison, as [`Judge::compare`] samples it.
    pub fn probabilities(&self, a: usize, b: usize) -> (f64, f64, f64) {
        let (lo, hi) = (a.min(b), a.max(b));
        let d = self.rk_beta[lo] - self.rk_beta[hi];
        let pw = sigmoid(d - self.rk_kappa);
        let pl = sigmoid(-d - self.rk_kappa);
        let model = [pw, (1.0 - pw - pl).max(0.0), pl];
        let counts = self
            .pairs
            .get(&(lo as u32, hi as u32))
            .copied()
            .unwrap_or([0.0; 3]);
        let n: f64 = counts.iter().sum();
        let k = if n > 0.0 { self.prior_games } else { 1.0 };
        let w: Vec<f64> = (0..3).map(|i| counts[i] + k * model[i]).collect();
        let tot = w[0] + w[1] + w[2];
        let (p_lo, p_t, p_hi) = (w[0] / tot, w[1] / tot, w[2] / tot);
        if a == lo {
            (p_lo, p_t, p_hi)
        } else {
            (p_hi, p_t, p_lo)
        }
    }

    /// Restarts the generator on stream `stream` of `seed` (one oracle, many reproducible tournaments).
    pub fn reseed(&mut self, seed: u64, stream: u64) {
        self.rng = crate::bootstrap::round_rng(seed, stream);
        self.fallbacks = 0;
    }

    /// Model names; player ids index this.
    pub fn models(&self) -> &[String] {
        &self.models
    }

    /// Full-data Bradley-Terry log-strengths (the reference ranking).
    pub fn beta(&self) -> &[f64] {
        &self.beta
    }

    /// The model of median reference strength: the default anchor of anchor seeding.
    pub fn median_model(&self) -> usize {
        let mut order: Vec<usize> = (0..self.beta.len()).collect();
        order.sort_by(|&x, &y| self.beta[y].total_cmp(&self.beta[x]));
        order[order.len() / 2]
    }

    /// Whether the plain full-data BT fit converged (otherwise [`BattleOracle::beta`] carries a prior).
    pub fn converged(&self) -> bool {
        self.converged
    }

    /// Comparisons of pairs absent from the data (answered by the model alone) since the last reseed.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Number of distinct pairs present in the data.
    pub fn observed_pairs(&self) -> usize {
        self.pairs.len()
    }
}

impl Judge for BattleOracle {
    fn compare(&mut self, a: usize, b: usize) -> Outcome {
        let key = (a.min(b) as u32, a.max(b) as u32);
        if !self.pairs.contains_key(&key) {
            self.fallbacks += 1;
        }
        let (pa, pt, _) = self.probabilities(a, b);
        let u: f64 = self.rng.gen();
        if u < pa {
            Outcome::AWins
        } else if u < pa + pt {
            Outcome::Tie
        } else {
            Outcome::BWins
        }
    }
}
