//! Seeded single elimination (ArenaRL), round-robin and random pairs + Bradley-Terry.

use super::{
    bt_strengths, play_fixed, play_match, standings_from_keys, sudden_death, Judge, MatchResult,
    Scheme, TournamentResult, TOURNAMENT_BT_PRIOR,
};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

/// How knockout seeds are assigned (seed 1 is expected to be the strongest).
#[derive(Debug, Clone, PartialEq)]
pub enum Seeding {
    /// Uniformly random order: no prior knowledge.
    Random,
    /// Players in seed order, best first (e.g. from a previous leaderboard).
    Given(Vec<usize>),
    /// ArenaRL's anchor seeding: every other player plays one best-of-m match against this anchor
    /// player, and seeds follow the game-point share in it (the anchor counts as 0.5; equal shares are
    /// ordered at random). Costs `n - 1` matches, logged with the tournament's comparisons.
    Anchor(usize),
}

/// Order among players eliminated in the same round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ElimTiebreak {
    /// Bradley-Terry fit of all comparisons played (the bracket is a connected tree, so every player is
    /// placed relative to everyone through shared opponents).
    Bt,
    /// Better seed first.
    Seed,
}

impl ElimTiebreak {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 2] = [Self::Bt, Self::Seed];
}

/// Single-elimination settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ElimConfig {
    /// Comparisons per match (best of m, early stop; a drawn match goes to up to
    /// [`super::SUDDEN_DEATH_GAMES`] deciding games, then the better seed advances).
    pub best_of: usize,
    /// Seed assignment.
    pub seeding: Seeding,
    /// Order within an elimination round.
    pub tiebreak: ElimTiebreak,
}

impl Default for ElimConfig {
    fn default() -> Self {
        ElimConfig {
            best_of: 1,
            seeding: Seeding::Random,
            tiebreak: ElimTiebreak::Bt,
        }
    }
}

/// Standard bracket: the 1-based seed in each of `size` slots (a power of two), so that slot pairs
/// `(0,1), (2,3), ...` are round-1 matches and the seeds of every match sum to `size + 1`; built by
/// replacing each seed `s` of the half-size bracket with `s, size + 1 - s`. For 8: 1-8, 4-5, 2-7, 3-6,
/// so seeds 1 and 2 can only meet in the final.
pub fn bracket_order(size: usize) -> Vec<usize> {
    assert!(
        size.is_power_of_two(),
        "bracket size must be a power of two"
    );
    let mut order = vec![1usize];
    while order.len() < size {
        let m = 2 * order.len() + 1;
        order = order.iter().flat_map(|&s| [s, m - s]).collect();
    }
    order
}

/// Runs a seeded single-elimination tournament among players `0..n` (ArenaRL's scheme).
///
/// The bracket has `size = n.next_power_of_two()` slots; the `size - n` missing seeds are byes, which by
/// construction go to the top seeds (for `n = 6`: seeds 1 and 2 skip round 1). `n - 1` matches are
/// played in all (plus `n - 1` anchor matches with [`Seeding::Anchor`]). Players are ranked by rounds
/// survived (the champion first), then by the tiebreak. `rng` draws random seeds and orders equal
/// anchor shares.
pub fn single_elimination<J: Judge + ?Sized, R: Rng + ?Sized>(
    n: usize,
    cfg: &ElimConfig,
    judge: &mut J,
    rng: &mut R,
) -> TournamentResult {
    let mut comparisons = Vec::new();
    let seeds: Vec<usize> = match &cfg.seeding {
        Seeding::Given(s) => {
            assert_eq!(
                s.len(),
                n,
                "single_elimination: seeds must list every player once"
            );
            s.clone()
        }
        Seeding::Random => {
            let mut s: Vec<usize> = (0..n).collect();
            s.shuffle(rng);
            s
        }
        Seeding::Anchor(anchor) => {
            assert!(*anchor < n, "anchor player out of range");
            let mut share = vec![0.5; n];
            for p in (0..n).filter(|p| p != anchor) {
                let m = play_match(judge, p, *anchor, cfg.best_of, &mut comparisons);
                share[p] = m.points_a / m.games as f64;
            }
            let mut s: Vec<usize> = (0..n).collect();
            s.shuffle(rng);
            s.sort_by(|&x, &y| share[y].total_cmp(&share[x]));
            s
        }
    };
    let mut seed_pos = vec![0usize; n];
    for (i, &p) in seeds.iter().enumerate() {
        seed_pos[p] = i;
    }
    let size = n.max(1).next_power_of_two();
    let mut alive: Vec<Option<usize>> = bracket_order(size)
        .into_iter()
        .map(|s| (s <= n).then(|| seeds[s - 1]))
        .collect();
    let mut survived = vec![0.0f64; n];
    let mut rounds: Vec<Vec<MatchResult>> = Vec::new();
    let mut byes: Vec<Vec<usize>> = Vec::new();
    while alive.len() > 1 {
        let mut next = Vec::with_capacity(alive.len() / 2);
        let mut matches = Vec::new();
        let mut round_byes = Vec::new();
        for slot in alive.chunks(2) {
            match (slot[0], slot[1]) {
                (Some(a), Some(b)) => {
                    let mut m = play_match(judge, a, b, cfg.best_of, &mut comparisons);
                    sudden_death(judge, &mut m, &mut comparisons);
                    let w = m
                        .winner
                        .unwrap_or(if seed_pos[a] < seed_pos[b] { a } else { b });
                    survived[w] += 1.0;
                    next.push(Some(w));
                    matches.push(m);
                }
                (Some(a), None) | (None, Some(a)) => {
                    survived[a] += 1.0;
                    round_byes.push(a);
                    next.push(Some(a));
                }
                (None, None) => next.push(None),
            }
        }
        rounds.push(matches);
        byes.push(round_byes);
        alive = next;
    }
    let tiebreak: Vec<f64> = match cfg.tiebreak {
        ElimTiebreak::Bt => bt_strengths(n, &comparisons, TOURNAMENT_BT_PRIOR),
        ElimTiebreak::Seed => (0..n).map(|p| -(seed_pos[p] as f64)).collect(),
    };
    let (standings, rank_score) = standings_from_keys(&survived, &tiebreak, &seeds, &comparisons);
    TournamentResult {
        scheme: Scheme::SingleElim,
        n_players: n,
        comparisons,
        rounds,
        byes,
        standings,
        rank_score,
    }
}

/// Round-robin: every pair plays exactly `games_per_pair` comparisons (alternating sides, no early
/// stop); players are ranked by total game points. With every pair compared equally often the point
/// totals are the sufficient statistic of the Bradley-Terry likelihood, so this order *is* the BT order:
/// the exhaustive baseline, at `games_per_pair * n (n - 1) / 2` comparisons.
pub fn round_robin<J: Judge + ?Sized>(
    n: usize,
    games_per_pair: usize,
    judge: &mut J,
) -> TournamentResult {
    let mut comparisons = Vec::with_capacity(games_per_pair * n * n.saturating_sub(1) / 2);
    let mut matches = Vec::new();
    let mut points = vec![0.0; n];
    for a in 0..n {
        for b in a + 1..n {
            let m = play_fixed(judge, a, b, games_per_pair.max(1), &mut comparisons);
            points[a] += m.points_a;
            points[b] += m.points_b;
            matches.push(m);
        }
    }
    let order: Vec<usize> = (0..n).collect();
    let (standings, rank_score) = standings_from_keys(&points, &vec![0.0; n], &order, &comparisons);
    TournamentResult {
        scheme: Scheme::RoundRobin,
        n_players: n,
        comparisons,
        rounds: vec![matches],
        byes: vec![vec![]],
        standings,
        rank_score,
    }
}

/// Random pairs + Bradley-Terry: `budget` comparisons between uniformly drawn distinct players, ranked
/// by a BT fit (with [`TOURNAMENT_BT_PRIOR`], so unbeaten players stay finite). The non-adaptive
/// baseline a tournament has to beat at equal cost.
pub fn random_pairs_bt<J: Judge + ?Sized, R: Rng + ?Sized>(
    n: usize,
    budget: usize,
    judge: &mut J,
    rng: &mut R,
) -> TournamentResult {
    let mut comparisons = Vec::with_capacity(budget);
    let mut matches = Vec::with_capacity(budget);
    let mut points = vec![0.0; n];
    if n >= 2 {
        for _ in 0..budget {
            let a = rng.gen_range(0..n);
            let mut b = rng.gen_range(0..n - 1);
            if b >= a {
                b += 1;
            }
            let m = play_fixed(judge, a, b, 1, &mut comparisons);
            points[a] += m.points_a;
            points[b] += m.points_b;
            matches.push(m);
        }
    }
    let beta = bt_strengths(n, &comparisons, TOURNAMENT_BT_PRIOR);
    let order: Vec<usize> = (0..n).collect();
    let (standings, rank_score) = standings_from_keys(&beta, &points, &order, &comparisons);
    TournamentResult {
        scheme: Scheme::RandomBt,
        n_players: n,
        comparisons,
        rounds: vec![matches],
        byes: vec![vec![]],
        standings,
        rank_score,
    }
}
