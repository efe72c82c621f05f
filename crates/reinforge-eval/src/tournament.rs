//! Tournaments: Swiss-system, seeded single-elimination and round-robin schedules driven by a pairwise
//! [`Judge`], rankings from their outcomes, Kendall's tau-b, and a simulation that measures how many
//! comparisons each scheme needs to recover a known ranking.
//!
//! **Why tournaments.** A full round-robin costs `N(N-1)/2` comparisons per repetition; when each
//! comparison is an LLM-judge call, the schedule decides the cost. Two recent LLM-evaluation papers use
//! tournament schedules instead:
//!
//! * *LLM Swiss Round* (Liu et al. 2025, arXiv:2512.21010, "Competitive Swiss-System Dynamics"): in every
//!   round models are paired within groups of equal accumulated win score, and the tournament is
//!   repeated by Monte Carlo so the ranking uses the *expected* score `E[S_m]` rather than one noisy run.
//!   We follow the score-group pairing ([`swiss`]) and the Monte Carlo expected score (the `--repeats`
//!   of the CLI's battle-oracle mode); their per-round elimination parameter `T_k` is not implemented.
//! * *ArenaRL* (Zhang et al. 2026, arXiv:2601.06487): a *seeded single-elimination* bracket ranks a group
//!   of candidates with `O(N)` comparisons, nearly as accurately as the `O(N^2)` round-robin. Seeds come
//!   from comparing every candidate with an anchor. We follow the seeded bracket (1 vs N, 2 vs N-1, ... so
//!   the top seeds meet last), anchor seeding ([`Seeding::Anchor`]) and ranking by elimination round
//!   ([`single_elimination`]).
//!
//! Sziklai, Csató & Biró, "The efficacy of tournament designs" (Computers & OR 2022), evaluate designs
//! the same way our [`sim`] module does: Monte Carlo under a known strength model, scored by how well the
//! final ranking matches the latent one. They find the Swiss system the most accurate at equal cost.
//!
//! **Design.** Every schedule is a function of `(n players, config, judge, rng)` returning a
//! [`TournamentResult`]: the comparisons made (so any rating model can be refitted on them), the matches
//! per round, byes, and a ranking. A match is best-of-m comparisons with early stopping and alternating
//! sides (position bias of a real judge cancels). Judges: [`BtJudge`] (simulated Bradley-Terry /
//! Rao-Kupper), [`DeterministicJudge`] (stronger always wins; for tests) and [`BattleOracle`] (replays
//! the empirical outcomes of a battles file, shrunk toward a fitted Rao-Kupper model that also answers
//! pairs that never met).

mod elim;
mod judge;
pub mod oracle;
pub mod sim;
mod swiss;

pub use elim::{
    bracket_order, random_pairs_bt, round_robin, single_elimination, ElimConfig, ElimTiebreak,
    Seeding,
};
pub use judge::{BattleOracle, BtJudge, DeterministicJudge, Judge, DEFAULT_PRIOR_GAMES};
pub use swiss::{swiss, swiss_pairing, SwissConfig, SwissRanking};

use crate::bt::{fit_bt, FitOptions, PairTable};
use crate::io::{Battles, Outcome};
use serde::Serialize;

/// L2 penalty used when a Bradley-Terry fit ranks a tournament's own comparisons. Tournament data are
/// sparse (a player may win every game it plays), so the plain MLE can be infinite; this weak prior
/// (in units of games) keeps strengths finite while barely moving well-measured players.
pub const TOURNAMENT_BT_PRIOR: f64 = 0.1;

/// Extra single games played after a drawn knockout match before the better seed advances.
pub const SUDDEN_DEATH_GAMES: usize = 3;

/// Tournament format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// Swiss system: R rounds, score-group pairing without rematches, ranked by points then Buchholz.
    Swiss,
    /// The Swiss schedule, but ranked by a Bradley-Terry fit of its comparisons.
    SwissBt,
    /// Seeded single-elimination bracket (ArenaRL), ranked by elimination round.
    SingleElim,
    /// Every pair plays best-of games; ranked by total points (the exhaustive baseline).
    RoundRobin,
    /// Uniformly random pairs at a fixed budget, ranked by a Bradley-Terry fit (the adaptive-free baseline).
    RandomBt,
}

impl Scheme {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 5] = [
        Self::Swiss,
        Self::SwissBt,
        Self::SingleElim,
        Self::RoundRobin,
        Self::RandomBt,
    ];
}

impl Scheme {
    /// Name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Swiss => "swiss",
            Scheme::SwissBt => "swiss-bt",
            Scheme::SingleElim => "single-elim",
            Scheme::RoundRobin => "round-robin",
            Scheme::RandomBt => "random-bt",
        }
    }
}

/// One best-of-m match between `a` and `b`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatchResult {
    /// First player (the one listed first in the pairing).
    pub a: usize,
    /// Second player.
    pub b: usize,
    /// Game points of `a` (win 1, tie 0.5).
    pub points_a: f64,
    /// Game points of `b`.
    pub points_b: f64,
    /// Comparisons played in this match.
    pub games: usize,
    /// Match winner, `None` for a drawn match.
    pub winner: Option<usize>,
}

/// A player's line in the final standings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    /// 1-based position; players the ranking cannot separate share a position.
    pub rank: usize,
    /// Player id.
    pub player: usize,
    /// The scheme's primary score: Swiss match points, knockout rounds survived, round-robin game points,
    /// or the BT log-strength for `swiss-bt` and `random-bt`.
    pub points: f64,
    /// Secondary key: Buchholz (Swiss), BT strength or negated seed (knockout), match or game points
    /// (swiss-bt, random-bt), 0 for round-robin.
    pub tiebreak: f64,
    /// Comparisons won.
    pub wins: u64,
    /// Comparisons tied.
    pub ties: u64,
    /// Comparisons lost.
    pub losses: u64,
}

/// Everything a tournament produced.
#[derive(Debug, Clone, Serialize)]
pub struct TournamentResult {
    /// Scheme that produced it.
    pub scheme: Scheme,
    /// Number of players.
    pub n_players: usize,
    /// Every comparison in play order: `(a, b, outcome from a's side)` (JSON: `[a, b, winner label]`).
    #[serde(serialize_with = "ser_comparisons")]
    pub comparisons: Vec<(u32, u32, Outcome)>,
    /// Matches per round.
    pub rounds: Vec<Vec<MatchResult>>,
    /// Players with a bye per round (Swiss: at most one; knockout: the top seeds in round 1).
    pub byes: Vec<Vec<usize>>,
    /// Final standings, best first.
    pub standings: Vec<Standing>,
    /// Per player: a score whose order is the final ranking (higher is better, equal means tied). This is
    /// what [`kendall_tau_b`] compares with the truth.
    pub rank_score: Vec<f64>,
}

fn ser_comparisons<S: serde::Serializer>(
    c: &[(u32, u32, Outcome)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(c.len()))?;
    for &(a, b, o) in c {
        let label = match o {
            Outcome::AWins => "model_a",
            Outcome::BWins => "model_b",
            Outcome::Tie => "tie",
        };
        seq.serialize_element(&(a, b, label))?;
    }
    seq.end()
}

impl TournamentResult {
    /// Ranking, best first (players sharing a position keep standings order).
    pub fn ranking(&self) -> Vec<usize> {
        self.standings.iter().map(|s| s.player).collect()
    }

    /// The comparisons as [`Battles`] with the given player names, so the `rank` pipeline (or a
    /// battles JSONL writer) can use them.
    pub fn to_battles(&self, names: &[String]) -> Battles {
        comparisons_to_battles(names, &self.comparisons)
    }

    /// Number of comparisons made.
    pub fn n_comparisons(&self) -> usize {
        self.comparisons.len()
    }
}

/// Budget knobs of [`run_scheme`]; each scheme reads the ones that apply to it.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemeParams {
    /// Swiss rounds.
    pub rounds: usize,
    /// Comparisons per match (Swiss, knockout) or per pair (round-robin).
    pub best_of: usize,
    /// Total comparisons of random-bt.
    pub budget: usize,
    /// Knockout seeding.
    pub seeding: Seeding,
    /// Knockout order within an elimination round.
    pub tiebreak: ElimTiebreak,
}

/// Runs `scheme` among players `0..n` with the applicable knobs of `p` (one entry point for the CLI
/// and the simulation).
pub fn run_scheme<J: Judge + ?Sized, R: rand::Rng + ?Sized>(
    scheme: Scheme,
    n: usize,
    p: &SchemeParams,
    judge: &mut J,
    rng: &mut R,
) -> TournamentResult {
    match scheme {
        Scheme::Swiss | Scheme::SwissBt => {
            let c = SwissConfig {
                rounds: p.rounds,
                best_of: p.best_of,
                ranking: if scheme == Scheme::Swiss {
                    SwissRanking::Buchholz
                } else {
                    SwissRanking::Bt
                },
                ..SwissConfig::default()
            };
            swiss(n, &c, judge, rng)
        }
        Scheme::SingleElim => {
            let c = ElimConfig {
                best_of: p.best_of,
                seeding: p.seeding.clone(),
                tiebreak: p.tiebreak,
            };
            single_elimination(n, &c, judge, rng)
        }
        Scheme::RoundRobin => round_robin(n, p.best_of, judge),
        Scheme::RandomBt => random_pairs_bt(n, p.budget, judge, rng),
    }
}

/// Builds [`Battles`] from raw comparisons; ids are kept as given (all `names` are models, even those
/// without a comparison).
pub fn comparisons_to_battles(names: &[String], comps: &[(u32, u32, Outcome)]) -> Battles {
    Battles {
        models: names.to_vec(),
        a: comps.iter().map(|c| c.0).collect(),
        b: comps.iter().map(|c| c.1).collect(),
        outcome: comps.iter().map(|c| c.2).collect(),
        style: None,
    }
}

/// Bradley-Terry log-strengths of `n` players from comparisons (crate [`fit_bt`] with `prior`).
pub fn bt_strengths(n: usize, comps: &[(u32, u32, Outcome)], prior: f64) -> Vec<f64> {
    if comps.is_empty() {
        return vec![0.0; n];
    }
    let names: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let table = PairTable::from_battles(&comparisons_to_battles(&names, comps));
    let opts = FitOptions {
        prior,
        tol: 1e-9,
        ..FitOptions::default()
    };
    fit_bt(&table, None, &opts).beta
}

/// Kendall's tau-b between two score vectors (higher = better in both; equal values are ties).
///
/// `tau_b = (C - D) / sqrt((P - T_x)(P - T_y))` with `C`/`D` the concordant/discordant pairs, `P` all
/// pairs and `T_x`/`T_y` the pairs tied in `x`/`y` (the definition `scipy.stats.kendalltau` uses). It is
/// 1 for the same order, -1 for the reverse. Where SciPy returns NaN (one vector constant, or fewer than
/// two items) this returns 0: a ranking that separates nobody carries no information, and 0 keeps
/// simulation means finite.
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "kendall_tau_b: length mismatch");
    let n = x.len();
    let (mut c, mut d, mut tx, mut ty) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let sx = (x[i] - x[j]).partial_cmp(&0.0).map_or(0, |o| o as i64);
            let sy = (y[i] - y[j]).partial_cmp(&0.0).map_or(0, |o| o as i64);
            if sx == 0 {
                tx += 1;
            }
            if sy == 0 {
                ty += 1;
            }
            match sx * sy {
                1 => c += 1,
                -1 => d += 1,
                _ => {}
            }
        }
    }
    let p = (n * n.saturating_sub(1) / 2) as i64;
    let den = (((p - tx) * (p - ty)) as f64).sqrt();
    if den == 0.0 {
        0.0
    } else {
        (c - d) as f64 / den
    }
}

/// Plays a best-of-`best_of` match: games alternate sides (`a` first on even games) and stop as soon as
/// the trailing player can no longer catch up. Every comparison is appended to `log`.
pub(crate) fn play_match<J: Judge + ?Sized>(
    judge: &mut J,
    a: usize,
    b: usize,
    best_of: usize,
    log: &mut Vec<(u32, u32, Outcome)>,
) -> MatchResult {
    let best_of = best_of.max(1);
    let (mut pa, mut pb, mut games) = (0.0, 0.0, 0);
    while games < best_of {
        game(judge, a, b, games, &mut pa, &mut pb, log);
        games += 1;
        if (pa - pb).abs() > (best_of - games) as f64 {
            break;
        }
    }
    MatchResult {
        a,
        b,
        points_a: pa,
        points_b: pb,
        games,
        winner: winner_of(a, b, pa, pb),
    }
}

/// Plays exactly `games` comparisons (alternating sides, no early stop), as round-robin does.
pub(crate) fn play_fixed<J: Judge + ?Sized>(
    judge: &mut J,
    a: usize,
    b: usize,
    games: usize,
    log: &mut Vec<(u32, u32, Outcome)>,
) -> MatchResult {
    let (mut pa, mut pb) = (0.0, 0.0);
    for k in 0..games {
        game(judge, a, b, k, &mut pa, &mut pb, log);
    }
    MatchResult {
        a,
        b,
        points_a: pa,
        points_b: pb,
        games,
        winner: winner_of(a, b, pa, pb),
    }
}

/// Plays up to [`SUDDEN_DEATH_GAMES`] single games after a drawn knockout match; the first decisive game
/// settles it. Returns the updated match (still drawn if every extra game was a tie).
pub(crate) fn sudden_death<J: Judge + ?Sized>(
    judge: &mut J,
    m: &mut MatchResult,
    log: &mut Vec<(u32, u32, Outcome)>,
) {
    for _ in 0..SUDDEN_DEATH_GAMES {
        if m.winner.is_some() {
            return;
        }
        let (mut pa, mut pb) = (m.points_a, m.points_b);
        game(judge, m.a, m.b, m.games, &mut pa, &mut pb, log);
        m.games += 1;
        m.points_a = pa;
        m.points_b = pb;
        m.winner = winner_of(m.a, m.b, pa, pb);
    }
}

fn winner_of(a: usize, b: usize, pa: f64, pb: f64) -> Option<usize> {
    if pa > pb {
        Some(a)
    } else if pb > pa {
        Some(b)
    } else {
        None
    }
}

fn game<J: Judge + ?Sized>(
    judge: &mut J,
    a: usize,
    b: usize,
    k: usize,
    pa: &mut f64,
    pb: &mut f64,
    log: &mut Vec<(u32, u32, Outcome)>,
) {
    let (x, y) = if k % 2 == 1 { (b, a) } else { (a, b) };
    let o = judge.compare(x, y);
    log.push((x as u32, y as u32, o));
    let sx = o.score_a();
    if x == a {
        *pa += sx;
        *pb += 1.0 - sx;
    } else {
        *pb += sx;
        *pa += 1.0 - sx;
    }
}

/// Per-player (wins, ties, losses) over comparisons.
pub(crate) fn records(n: usize, comps: &[(u32, u32, Outcome)]) -> Vec<(u64, u64, u64)> {
    crate::io::tally(n, comps.iter().copied())
}

/// Builds standings and rank scores from lexicographic keys `(points, tiebreak)` (higher is better).
/// `order_hint` breaks exact ties for display only (players with equal keys share a rank and a
/// rank score).
pub(crate) fn standings_from_keys(
    points: &[f64],
    tiebreak: &[f64],
    order_hint: &[usize],
    comps: &[(u32, u32, Outcome)],
) -> (Vec<Standing>, Vec<f64>) {
    let n = points.len();
    let mut hint_pos = vec![0usize; n];
    for (i, &p) in order_hint.iter().enumerate() {
        hint_pos[p] = i;
    }
    let mut order: Vec<usize> = (0..n).collect();
    let key = |i: usize| (points[i], tiebreak[i]);
    order.sort_by(|&x, &y| {
        let (kx, ky) = (key(x), key(y));
        ky.0.total_cmp(&kx.0)
            .then(ky.1.total_cmp(&kx.1))
            .then(hint_pos[x].cmp(&hint_pos[y]))
    });
    let rec = records(n, comps);
    let mut rank_score = vec![0.0; n];
    let mut standings = Vec::with_capacity(n);
    let mut rank = 1;
    for (pos, &p) in order.iter().enumerate() {
        if pos > 0 && key(order[pos - 1]) != key(p) {
            rank = pos + 1;
        }
        rank_score[p] = -(rank as f64);
        standings.push(Standing {
            rank,
            player: p,
            points: points[p],
            tiebreak: tiebreak[p],
            wins: rec[p].0,
            ties: rec[p].1,
            losses: rec[p].2,
        });
    }
    (standings, rank_score)
}
