//! Tournament schedules, Kendall tau, the simulation and the battles oracle.

use crate::common;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_eval::bt::{fit_bt, FitOptions, PairTable};
use reinforge_eval::io::{read_battles, Battles, Outcome};
use reinforge_eval::tournament::oracle::{run_oracle, OracleConfig};
use reinforge_eval::tournament::sim::{simulate, SimConfig};
use reinforge_eval::tournament::{
    bracket_order, kendall_tau_b, single_elimination, swiss, BattleOracle, BtJudge,
    DeterministicJudge, ElimConfig, ElimTiebreak, Judge, Scheme, SchemeParams, Seeding,
    SwissConfig,
};

/// Whether some bye choice leaves a perfect matching of the others that avoids every pair in `met`.
fn rematch_free_exists(players: &[usize], met: &[Vec<bool>]) -> bool {
    fn matchable(rest: &[usize], met: &[Vec<bool>]) -> bool {
        let Some((&p, tail)) = rest.split_first() else {
            return true;
        };
        (0..tail.len()).any(|j| {
            let q = tail[j];
            let mut r: Vec<usize> = tail.to_vec();
            r.remove(j);
            !met[p][q] && matchable(&r, met)
        })
    }
    if players.len() % 2 == 1 {
        return (0..players.len()).any(|b| {
            let mut r = players.to_vec();
            r.remove(b);
            matchable(&r, met)
        });
    }
    matchable(players, met)
}

#[test]
fn swiss_gives_one_game_per_round_and_rematches_only_when_forced() {
    for n in [6usize, 7, 8, 9, 10, 12] {
        for seed in 0..4u64 {
            let beta: Vec<f64> = (0..n).map(|i| i as f64 * 0.4).collect();
            let mut judge = BtJudge::new(beta, 0.3, seed);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let rounds = n + 1; // beyond n - 1 rematches become unavoidable
            let cfg = SwissConfig {
                rounds,
                best_of: 3,
                ..SwissConfig::default()
            };
            let res = swiss(n, &cfg, &mut judge, &mut rng);
            assert_eq!(res.rounds.len(), rounds);
            let mut met = vec![vec![false; n]; n];
            let mut byes = vec![0; n];
            for (r, (matches, bye)) in res.rounds.iter().zip(&res.byes).enumerate() {
                let mut seen = vec![0; n];
                for m in matches {
                    seen[m.a] += 1;
                    seen[m.b] += 1;
                    assert!((2..=3).contains(&m.games), "best of 3 played {}", m.games);
                }
                for &p in bye {
                    seen[p] += 1;
                    byes[p] += 1;
                }
                assert!(seen.iter().all(|&c| c == 1), "n={n} round {r}: {seen:?}");
                assert_eq!(bye.len(), n % 2, "n={n} round {r}: byes {bye:?}");
                let rematch = matches.iter().any(|m| met[m.a][m.b]);
                let all: Vec<usize> = (0..n).collect();
                if rematch {
                    assert!(
                        !rematch_free_exists(&all, &met),
                        "n={n} seed={seed} round {r}: avoidable rematch"
                    );
                }
                if r < n / 2 {
                    assert!(!rematch, "n={n} round {r}: rematch before round n/2");
                }
                for m in matches {
                    met[m.a][m.b] = true;
                    met[m.b][m.a] = true;
                }
            }
            if n % 2 == 1 {
                // n + 1 rounds: everyone sits out once before anyone sits out twice.
                assert!(byes.iter().all(|c| (1..=2).contains(c)), "byes {byes:?}");
            }
            let total_games: usize = res.rounds.iter().flatten().map(|m| m.games).sum();
            assert_eq!(total_games, res.comparisons.len());
        }
    }
}

#[test]
fn swiss_ranks_by_points_then_buchholz() {
    let n = 8;
    let strength: Vec<f64> = (0..n).map(|i| ((i * 5) % 8) as f64).collect();
    let mut judge = DeterministicJudge {
        strength: strength.clone(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let res = swiss(n, &SwissConfig::default(), &mut judge, &mut rng);
    let best = (0..n)
        .max_by(|&a, &b| strength[a].total_cmp(&strength[b]))
        .unwrap();
    assert_eq!(res.standings[0].player, best);
    assert_eq!(res.standings[0].points, 5.0);
    for w in res.standings.windows(2) {
        let key = |s: &reinforge_eval::tournament::Standing| (s.points, s.tiebreak);
        assert!(key(&w[0]) >= key(&w[1]), "{:?}", res.standings);
    }
}

#[test]
fn single_elimination_of_eight_plays_seven_matches_and_the_strongest_wins() {
    for seed in 0..10u64 {
        let n = 8;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let strength: Vec<f64> = (0..n)
            .map(|i| ((i * 3 + seed as usize) % n) as f64)
            .collect();
        let mut judge = DeterministicJudge {
            strength: strength.clone(),
        };
        let cfg = ElimConfig {
            best_of: 3,
            seeding: Seeding::Random,
            tiebreak: ElimTiebreak::Seed,
        };
        let res = single_elimination(n, &cfg, &mut judge, &mut rng);
        let matches: usize = res.rounds.iter().map(|r| r.len()).sum();
        assert_eq!(matches, 7);
        assert_eq!(res.rounds.len(), 3);
        assert!(res.byes.iter().all(|b| b.is_empty()));
        // Deterministic judge: best of 3 ends 2-0.
        assert_eq!(res.comparisons.len(), 14);
        let best = (0..n)
            .max_by(|&a, &b| strength[a].total_cmp(&strength[b]))
            .unwrap();
        assert_eq!(res.standings[0].player, best);
        assert_eq!(res.standings[0].points, 3.0);
        assert_eq!(res.standings[1].points, 2.0);
    }
    // Seeded by true strength, the top two meet only in the final.
    let strength: Vec<f64> = (0..8).map(|i| -(i as f64)).collect();
    let mut judge = DeterministicJudge { strength };
    let cfg = ElimConfig {
        seeding: Seeding::Given((0..8).collect()),
        ..ElimConfig::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let res = single_elimination(8, &cfg, &mut judge, &mut rng);
    let final_match = &res.rounds[2][0];
    assert_eq!(
        (
            final_match.a.min(final_match.b),
            final_match.a.max(final_match.b)
        ),
        (0, 1)
    );
    assert_eq!(res.ranking()[..2], [0, 1]);
}

#[test]
fn single_elimination_of_six_gives_byes_to_the_top_seeds() {
    assert_eq!(bracket_order(8), [1, 8, 4, 5, 2, 7, 3, 6]);
    assert_eq!(bracket_order(4), [1, 4, 2, 3]);
    let seeds = vec![5, 2, 0, 4, 1, 3]; // seed 1 = player 5, seed 2 = player 2, ...
    let mut judge = BtJudge::new(vec![0.0; 6], 0.0, 1);
    let cfg = ElimConfig {
        seeding: Seeding::Given(seeds),
        ..ElimConfig::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let res = single_elimination(6, &cfg, &mut judge, &mut rng);
    let mut b0 = res.byes[0].clone();
    b0.sort();
    assert_eq!(b0, [2, 5]);
    assert_eq!(res.rounds[0].len(), 2);
    let total: usize = res.rounds.iter().map(|r| r.len()).sum();
    assert_eq!(total, 5);
    // Round 1 is 4 vs 5 and 3 vs 6 in seed numbers.
    let mut firsts: Vec<(usize, usize)> = res.rounds[0]
        .iter()
        .map(|m| (m.a.min(m.b), m.a.max(m.b)))
        .collect();
    firsts.sort();
    assert_eq!(firsts, [(0, 3), (1, 4)]);
    assert!(res.byes[1..].iter().all(|b| b.is_empty()));
}

#[test]
fn kendall_tau_b_identity_reverse_and_ties() {
    let x = [0.3, 1.0, -2.0, 5.0, 4.0];
    let rev: Vec<f64> = x.iter().map(|v| -v).collect();
    assert!((kendall_tau_b(&x, &x) - 1.0).abs() < 1e-12);
    assert!((kendall_tau_b(&x, &rev) + 1.0).abs() < 1e-12);
    // Hand count: pairs (01) C, (02) C, (03) C, (12) tied in x, (13) D, (23) tied in y.
    // tau_b = (3 - 1) / sqrt((6 - 1)(6 - 1)) = 0.4 (scipy.stats.kendalltau agrees).
    let t = kendall_tau_b(&[1.0, 2.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 2.0]);
    assert!((t - 0.4).abs() < 1e-12, "{t}");
    assert_eq!(kendall_tau_b(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), 0.0);
}

#[test]
fn simulation_round_robin_recovers_and_more_swiss_rounds_do_not_hurt() {
    let cfg = SimConfig {
        n_models: 10,
        spread: 14.0,
        schemes: vec![
            Scheme::Swiss,
            Scheme::SwissBt,
            Scheme::RoundRobin,
            Scheme::RandomBt,
        ],
        rounds: vec![1, 2, 3, 5, 7, 9],
        best_of: vec![1],
        repeats: 24,
        seed: 11,
        ..SimConfig::default()
    };
    let rep = simulate(&cfg).unwrap();
    let rr = rep
        .rows
        .iter()
        .find(|r| r.scheme == Scheme::RoundRobin)
        .unwrap();
    assert!(rr.tau > 0.9, "round-robin tau {}", rr.tau);
    assert_eq!(rr.comparisons, 45.0);
    for scheme in [Scheme::Swiss, Scheme::SwissBt] {
        let taus: Vec<f64> = rep
            .rows
            .iter()
            .filter(|r| r.scheme == scheme)
            .map(|r| r.tau)
            .collect();
        assert_eq!(taus.len(), 6);
        for w in taus.windows(2) {
            assert!(w[1] >= w[0] - 0.03, "{scheme:?}: {taus:?}");
        }
        assert!(taus[5] > taus[0] + 0.2, "{scheme:?}: {taus:?}");
    }
    // random-bt ran at exactly the budgets the other schemes used.
    let budgets: Vec<f64> = rep
        .rows
        .iter()
        .filter(|r| r.scheme == Scheme::RandomBt)
        .map(|r| r.comparisons)
        .collect();
    assert!(
        budgets.contains(&45.0) && budgets.contains(&5.0),
        "{budgets:?}"
    );
    assert!(rep
        .to_markdown()
        .contains("Comparisons needed for mean Kendall tau >= 0.9"));
    // Same seed, same numbers.
    assert_eq!(simulate(&cfg).unwrap().rows, rep.rows);
}

#[test]
fn battle_oracle_replays_pairs_and_falls_back_to_bt() {
    let mut rows = vec![("x", "y", Outcome::AWins); 30];
    rows.extend(vec![("y", "x", Outcome::Tie); 10]);
    rows.extend(vec![("z", "y", Outcome::AWins); 5]);
    rows.extend(vec![("y", "z", Outcome::AWins); 5]);
    let b = Battles::from_triples(rows).unwrap();
    let mut o = BattleOracle::new(&b, 7).with_prior_games(0.0);
    let (mut xw, mut ties) = (0, 0);
    for k in 0..4000 {
        // Alternate seats: the oracle pools both orders.
        let out = if k % 2 == 0 {
            o.compare(0, 1)
        } else {
            match o.compare(1, 0) {
                Outcome::AWins => Outcome::BWins,
                Outcome::BWins => Outcome::AWins,
                t => t,
            }
        };
        match out {
            Outcome::AWins => xw += 1,
            Outcome::Tie => ties += 1,
            Outcome::BWins => panic!("y never beat x in the data"),
        }
    }
    assert!((xw as f64 / 4000.0 - 0.75).abs() < 0.03, "{xw}");
    assert_eq!(xw + ties, 4000);
    assert_eq!(o.fallbacks(), 0);
    // x and z never met: the Rao-Kupper fit answers; x (strong) mostly wins, z almost never.
    let outs: Vec<Outcome> = (0..2000).map(|_| o.compare(0, 2)).collect();
    assert_eq!(o.fallbacks(), 2000);
    let (pa, pt, pb) = o.probabilities(0, 2);
    assert!(
        (pa + pt + pb - 1.0).abs() < 1e-12 && pa > 0.7 && pb < 0.1,
        "{pa} {pt} {pb}"
    );
    let wins = outs.iter().filter(|&&x| x == Outcome::AWins).count() as f64 / 2000.0;
    assert!((wins - pa).abs() < 0.04, "{wins} vs {pa}");
    // With the default prior a once-seen pair is no longer a certainty.
    let mut rows = vec![("p", "q", Outcome::AWins)];
    rows.extend([("p", "r", Outcome::AWins), ("r", "p", Outcome::AWins)].repeat(3));
    rows.extend([("q", "r", Outcome::AWins), ("r", "q", Outcome::Tie)].repeat(3));
    let b1 = Battles::from_triples(rows).unwrap();
    let o1 = BattleOracle::new(&b1, 0);
    let (pa, _, pb) = o1.probabilities(0, 1);
    assert!(pa < 0.9 && pb > 0.02, "{pa} {pb}");
    assert_eq!(
        BattleOracle::new(&b1, 0)
            .with_prior_games(0.0)
            .probabilities(0, 1)
            .0,
        1.0
    );
}

#[test]
fn llmfao_swiss_top5_lands_in_bt_top10() {
    let path = common::rank_dir().join("llmfao-battles.jsonl");
    let b = read_battles(&path, false).unwrap();
    let fit = fit_bt(&PairTable::from_battles(&b), None, &FitOptions::default());
    let mut bt_order: Vec<usize> = (0..b.models.len()).collect();
    bt_order.sort_by(|&x, &y| fit.beta[y].total_cmp(&fit.beta[x]));
    let bt_top10: Vec<&str> = bt_order[..10]
        .iter()
        .map(|&i| b.models[i].as_str())
        .collect();
    let params = SchemeParams {
        rounds: 8,
        best_of: 1,
        budget: 0,
        seeding: Seeding::Random,
        tiebreak: ElimTiebreak::Bt,
    };
    // One tournament.
    let mut judge = BattleOracle::new(&b, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let n = b.models.len();
    let res =
        reinforge_eval::tournament::run_scheme(Scheme::Swiss, n, &params, &mut judge, &mut rng);
    // LLMFAO is noisy (39% ties, the top ten within ~100 Elo, 46% of pairs never met): over seeds a
    // single 8-round tournament puts 0-5 of its top 5 into BT's top 10, and its tau is 0.46 +- 0.07.
    let tau = kendall_tau_b(&res.rank_score, &fit.beta);
    assert!(tau > 0.25, "single tournament tau {tau}");
    assert_eq!(res.comparisons.len(), 8 * 29);
    // Monte Carlo over repetitions (LLM Swiss Round's expected score): 3-5 of the top 5 over seeds.
    let cfg = OracleConfig {
        scheme: Scheme::Swiss,
        params,
        repeats: 24,
        seed: 1,
        prior_games: reinforge_eval::tournament::DEFAULT_PRIOR_GAMES,
    };
    let rep = run_oracle(&b, &cfg).unwrap();
    let hit = rep.rows[..5]
        .iter()
        .filter(|r| bt_top10.contains(&r.model.as_str()))
        .count();
    assert!(hit >= 3, "{}", rep.to_markdown());
    let bt_best = b.models[bt_order[0]].as_str();
    assert!(
        rep.rows[..5].iter().any(|r| r.model == bt_best),
        "{}",
        rep.to_markdown()
    );
    assert!(
        rep.tau_aggregate > rep.tau_mean - 0.02 && rep.tau_aggregate > 0.6,
        "{}",
        rep.to_markdown()
    );
    assert!(rep.comparisons < 0.2 * b.len() as f64);
}
