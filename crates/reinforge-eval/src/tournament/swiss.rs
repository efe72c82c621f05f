//! Swiss-system tournaments.
//!
//! Pairing follows the score-group rule of LLM Swiss Round (arXiv:2512.21010, "models are paired within
//! groups of equal accumulated win score") in its simplest chess form (the Monrad/Dutch family): sort
//! by points, then by initial seed, and pair neighbours, so each player meets someone with the same or
//! nearly the same score. Rematches are avoided whenever the history allows it: a depth-first search
//! pairs from the top with the nearest unmet player and backtracks out of dead ends; if that stalls
//! (late rounds, when few unmet opponents remain), a second search pairs the most constrained player
//! first (fewest unmet partners left, nearest in the standings), which finds a rematch-free pairing or
//! proves there is none far faster. With an odd count the bye goes to the lowest-ranked player who has
//! not had one yet, then to the others from the bottom (FIDE's bye rule). Only if no rematch-free
//! pairing exists (or both searches exceed their budgets) does a greedy pass allow rematches. Final order: points, then Buchholz (sum of the opponents' final points), the
//! standard chess tiebreak; or a Bradley-Terry fit of all comparisons ([`SwissRanking::Bt`]).

use super::{
    bt_strengths, play_match, standings_from_keys, Judge, Scheme, TournamentResult,
    TOURNAMENT_BT_PRIOR,
};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

/// Node budget of the plain top-down pairing search (per bye candidate).
const TOP_DOWN_BUDGET: usize = 2_000;
/// Node budget of the most-constrained-first search per round; beyond it a greedy pairing is used.
const MRV_BUDGET: usize = 100_000;

/// How the final Swiss standings are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwissRanking {
    /// Match points, then Buchholz (classical Swiss).
    Buchholz,
    /// Bradley-Terry fit of every comparison played (uses game-level detail and opponent strength).
    Bt,
}

/// Swiss settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SwissConfig {
    /// Number of rounds (each player plays at most one match per round).
    pub rounds: usize,
    /// Comparisons per match (best of m, early stop once decided).
    pub best_of: usize,
    /// Match points for a bye (FIDE: 1).
    pub bye_points: f64,
    /// Final ordering.
    pub ranking: SwissRanking,
    /// Initial order, best first (round-1 pairing and the last tiebreak); `None` draws a random order.
    pub seeds: Option<Vec<usize>>,
}

impl Default for SwissConfig {
    fn default() -> Self {
        SwissConfig {
            rounds: 5,
            best_of: 1,
            bye_points: 1.0,
            ranking: SwissRanking::Buchholz,
            seeds: None,
        }
    }
}

/// A round's pairing: matches in board order (best first) and the player with the bye, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwissPairing {
    /// `(higher-placed, lower-placed)` player per match.
    pub pairs: Vec<(usize, usize)>,
    /// Player sitting out (odd player count).
    pub bye: Option<usize>,
    /// Number of pairs that are rematches (0 unless unavoidable or the search budget ran out).
    pub rematches: usize,
}

/// Pairs one Swiss round. `order`: players in current standing order (best first); `met[p][q]`: whether
/// `p` and `q` have already played; `had_bye[p]`: whether `p` already had a bye.
pub fn swiss_pairing(order: &[usize], met: &[Vec<bool>], had_bye: &[bool]) -> SwissPairing {
    let mut candidates: Vec<Option<usize>> = Vec::new();
    if order.len() % 2 == 1 {
        let rev = order.iter().rev();
        candidates.extend(rev.clone().filter(|&&p| !had_bye[p]).map(|&p| Some(p)));
        candidates.extend(rev.filter(|&&p| had_bye[p]).map(|&p| Some(p)));
    } else {
        candidates.push(None);
    }
    let mut mrv_budget = MRV_BUDGET;
    for &bye in &candidates {
        let rest: Vec<usize> = order.iter().copied().filter(|&p| Some(p) != bye).collect();
        let mut used = vec![false; rest.len()];
        let mut out = Vec::with_capacity(rest.len() / 2);
        let mut budget = TOP_DOWN_BUDGET;
        let found = dfs(&rest, &mut used, met, &mut out, &mut budget) || {
            used.iter_mut().for_each(|u| *u = false);
            out.clear();
            mrv_dfs(&rest, &mut used, met, &mut out, &mut mrv_budget)
        };
        if found {
            out.sort_unstable();
            return SwissPairing {
                pairs: out.iter().map(|&(i, j)| (rest[i], rest[j])).collect(),
                bye,
                rematches: 0,
            };
        }
        if mrv_budget == 0 {
            break;
        }
    }
    // No rematch-free pairing (or budget exhausted): greedy, neighbours first, unmet opponents preferred.
    let bye = candidates[0];
    let rest: Vec<usize> = order.iter().copied().filter(|&p| Some(p) != bye).collect();
    let mut used = vec![false; rest.len()];
    let mut pairs = Vec::new();
    let mut rematches = 0;
    for i in 0..rest.len() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let free = || (i + 1..rest.len()).filter(|&j| !used[j]);
        let j = free()
            .find(|&j| !met[rest[i]][rest[j]])
            .or_else(|| free().next());
        if let Some(j) = j {
            used[j] = true;
            rematches += met[rest[i]][rest[j]] as usize;
            pairs.push((rest[i], rest[j]));
        }
    }
    SwissPairing {
        pairs,
        bye,
        rematches,
    }
}

/// Top-down search: the best unpaired player takes the nearest unmet one. Records index pairs into
/// `rest`.
fn dfs(
    rest: &[usize],
    used: &mut [bool],
    met: &[Vec<bool>],
    out: &mut Vec<(usize, usize)>,
    budget: &mut usize,
) -> bool {
    let Some(i) = used.iter().position(|u| !u) else {
        return true;
    };
    used[i] = true;
    for j in i + 1..rest.len() {
        if used[j] || met[rest[i]][rest[j]] {
            continue;
        }
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        used[j] = true;
        out.push((i, j));
        if dfs(rest, used, met, out, budget) {
            return true;
        }
        out.pop();
        used[j] = false;
    }
    used[i] = false;
    false
}

/// Most-constrained-first search: pair the player with the fewest unmet unpaired partners, trying
/// partners nearest in the standings first; a player with none left fails the branch at once.
fn mrv_dfs(
    rest: &[usize],
    used: &mut [bool],
    met: &[Vec<bool>],
    out: &mut Vec<(usize, usize)>,
    budget: &mut usize,
) -> bool {
    let n = rest.len();
    let options = |i: usize, used: &[bool]| {
        (0..n)
            .filter(|&j| j != i && !used[j] && !met[rest[i]][rest[j]])
            .count()
    };
    let mut best: Option<(usize, usize)> = None;
    for i in (0..n).filter(|&i| !used[i]) {
        let c = options(i, used);
        if c == 0 {
            return false;
        }
        if best.is_none_or(|(bc, _)| c < bc) {
            best = Some((c, i));
        }
    }
    let Some((_, i)) = best else {
        return true;
    };
    used[i] = true;
    let mut cands: Vec<usize> = (0..n)
        .filter(|&j| !used[j] && !met[rest[i]][rest[j]])
        .collect();
    cands.sort_by_key(|&j| (i.abs_diff(j), j));
    for j in cands {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        used[j] = true;
        out.push((i.min(j), i.max(j)));
        if mrv_dfs(rest, used, met, out, budget) {
            return true;
        }
        out.pop();
        used[j] = false;
    }
    used[i] = false;
    false
}

/// Runs a Swiss tournament among players `0..n`.
///
/// Each round every player plays one best-of-`best_of` match (one player sits out with a bye when `n`
/// is odd); a match win is 1 point, a drawn match 0.5, a bye `bye_points`. With `rounds >= n` rematches
/// become unavoidable and are allowed. `rng` only draws the initial order when `cfg.seeds` is `None`.
pub fn swiss<J: Judge + ?Sized, R: Rng + ?Sized>(
    n: usize,
    cfg: &SwissConfig,
    judge: &mut J,
    rng: &mut R,
) -> TournamentResult {
    let seeds = match &cfg.seeds {
        Some(s) => {
            assert_eq!(s.len(), n, "swiss: seeds must list every player once");
            s.clone()
        }
        None => {
            let mut s: Vec<usize> = (0..n).collect();
            s.shuffle(rng);
            s
        }
    };
    let mut seed_pos = vec![0usize; n];
    for (i, &p) in seeds.iter().enumerate() {
        seed_pos[p] = i;
    }
    let mut points = vec![0.0f64; n];
    let mut met = vec![vec![false; n]; n];
    let mut had_bye = vec![false; n];
    let mut opponents: Vec<Vec<usize>> = vec![vec![]; n];
    let mut comparisons = Vec::new();
    let mut rounds = Vec::new();
    let mut byes = Vec::new();
    for _ in 0..cfg.rounds {
        if n < 2 {
            break;
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&x, &y| {
            points[y]
                .total_cmp(&points[x])
                .then(seed_pos[x].cmp(&seed_pos[y]))
        });
        let pairing = swiss_pairing(&order, &met, &had_bye);
        let mut matches = Vec::with_capacity(pairing.pairs.len());
        for &(a, b) in &pairing.pairs {
            let m = play_match(judge, a, b, cfg.best_of, &mut comparisons);
            match m.winner {
                Some(w) => points[w] += 1.0,
                None => {
                    points[a] += 0.5;
                    points[b] += 0.5;
                }
            }
            met[a][b] = true;
            met[b][a] = true;
            opponents[a].push(b);
            opponents[b].push(a);
            matches.push(m);
        }
        if let Some(p) = pairing.bye {
            had_bye[p] = true;
            points[p] += cfg.bye_points;
        }
        byes.push(pairing.bye.into_iter().collect());
        rounds.push(matches);
    }
    let buchholz: Vec<f64> = (0..n)
        .map(|p| opponents[p].iter().map(|&q| points[q]).sum())
        .collect();
    let (scheme, key0, key1) = match cfg.ranking {
        SwissRanking::Buchholz => (Scheme::Swiss, points, buchholz),
        SwissRanking::Bt => (
            Scheme::SwissBt,
            bt_strengths(n, &comparisons, TOURNAMENT_BT_PRIOR),
            points,
        ),
    };
    let (standings, rank_score) = standings_from_keys(&key0, &key1, &seeds, &comparisons);
    TournamentResult {
        scheme,
        n_players: n,
        comparisons,
        rounds,
        byes,
        standings,
        rank_score,
    }
}
