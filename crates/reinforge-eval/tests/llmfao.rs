//! Bradley-Terry, Elo and bootstrap against the FastChat / arena-rank / evalica references run on the
//! LLMFAO battles (`fixtures/data/rank`, see its README for how each number was produced).

use crate::common;

use common::{max_abs_diff, rank_dir, read_json};
use reinforge_eval::bootstrap::{bootstrap_bt, interval_ranks, refit_counts, summarize};
use reinforge_eval::bt::{fit_bt, FitOptions, OutcomeRows, PairTable, Scale};
use reinforge_eval::elo::{online_elo, EloParams};
use reinforge_eval::io::{read_battles, Battles, Outcome};

fn battles() -> Battles {
    read_battles(&rank_dir().join("llmfao-battles.jsonl"), false).unwrap()
}

fn bt_ratings(b: &Battles) -> Vec<f64> {
    let fit = fit_bt(&PairTable::from_battles(b), None, &FitOptions::default());
    assert!(fit.converged, "{:?}", (fit.iterations, fit.grad_inf));
    Scale::default().ratings(&fit.beta, None)
}

#[test]
fn dataset_shape_matches_readme() {
    let b = battles();
    let exp = read_json("llmfao-expected.json");
    assert_eq!(
        b.len() as u64,
        exp["dataset"]["n_battles"].as_u64().unwrap()
    );
    assert_eq!(
        b.models.len() as u64,
        exp["dataset"]["n_models"].as_u64().unwrap()
    );
    assert_eq!(
        OutcomeRows::from_battles(&b).len() as u64,
        exp["dataset"]["n_unique_a_b_outcome_rows"]
            .as_u64()
            .unwrap()
    );
    let per = b.battles_per_model();
    for (m, v) in exp["fastchat"]["num_battles"].as_object().unwrap() {
        let i = b.models.iter().position(|x| x == m).unwrap();
        assert_eq!(per[i], v.as_f64().unwrap() as u64, "{m}");
    }
}

#[test]
fn bradley_terry_matches_references() {
    let b = battles();
    let r = bt_ratings(&b);
    let exp = read_json("llmfao-expected.json");
    let fc = &exp["fastchat"]["bt"];
    // Exact MLE vs FastChat's loss driven to convergence (README: compare at 1e-4).
    let (d, m) = max_abs_diff(&b.models, &r, &fc["ratings_converged"]);
    eprintln!("BT vs FastChat ratings_converged: max |diff| {d:.2e} ({m})");
    assert!(d < 1e-4, "{d} at {m}");
    // FastChat's displayed numbers stop early (L-BFGS-B, 15 iterations): README tolerance 0.1 Elo.
    let (d, m) = max_abs_diff(&b.models, &r, &fc["ratings"]);
    eprintln!("BT vs FastChat ratings (as shown): max |diff| {d:.4} ({m})");
    assert!(d < 0.1, "{d} at {m}");
    // evalica's MM solution on FastChat's scale (within 5.4e-6 of the MLE) and arena-rank (within 0.014).
    let (d, _) = max_abs_diff(
        &b.models,
        &r,
        &exp["evalica"]["methods"]["bradley_terry"]["elo_scale_mean1000"],
    );
    assert!(d < 1e-4, "evalica {d}");
    let (d, _) = max_abs_diff(&b.models, &r, &exp["arena_rank"]["sandwich"]["ratings"]);
    assert!(d < 0.02, "arena-rank {d}");
    let mean = r.iter().sum::<f64>() / r.len() as f64;
    assert!((mean - 1000.0).abs() < 1e-9);
}

#[test]
fn online_elo_matches_fastchat_exactly() {
    let b = battles();
    let r = online_elo(&b, &EloParams::default());
    let exp = read_json("llmfao-expected.json");
    let (d, m) = max_abs_diff(&b.models, &r, &exp["fastchat"]["elo_online"]["ratings"]);
    eprintln!("online Elo vs FastChat compute_elo: max |diff| {d:.2e} ({m})");
    assert!(d < 1e-9, "{d} at {m}");
    let (d, _) = max_abs_diff(&b.models, &r, &exp["evalica"]["methods"]["elo"]["scores"]);
    assert!(d < 1e-9, "evalica elo {d}");
}

/// FastChat's own 100 resamples (count vectors), refitted by us, against FastChat's converged refits.
#[test]
fn fastchat_resamples_refit_round_by_round() {
    let boot = read_json("llmfao-fastchat-bootstrap.json");
    let models: Vec<String> = boot["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    let rows_json = boot["rows"].as_array().unwrap();
    let mut rows = OutcomeRows {
        n_models: models.len(),
        a: vec![],
        b: vec![],
        outcome: vec![],
        count: vec![],
    };
    for r in rows_json {
        rows.a.push(r[0].as_u64().unwrap() as u32);
        rows.b.push(r[1].as_u64().unwrap() as u32);
        rows.outcome.push(match r[2].as_f64().unwrap() {
            1.0 => Outcome::AWins,
            0.5 => Outcome::Tie,
            _ => Outcome::BWins,
        });
        rows.count.push(r[3].as_f64().unwrap());
    }
    let counts: Vec<Vec<f64>> = boot["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(counts.len(), 100);
    let opts = FitOptions::default();
    let full = fit_bt(
        &reinforge_eval::bt::RowToPair::new(&rows).aggregate(&rows.count),
        None,
        &opts,
    );
    let betas = refit_counts(&rows, &counts, &full.beta, &opts);
    let scale = Scale::default();
    let ratings: Vec<Vec<f64>> = betas.iter().map(|b| scale.ratings(b, None)).collect();
    let mut worst: f64 = 0.0;
    for (r, reference) in ratings
        .iter()
        .zip(boot["ratings_converged"].as_array().unwrap())
    {
        for (m, x) in r.iter().enumerate() {
            worst = worst.max((x - reference[m].as_f64().unwrap()).abs());
        }
    }
    eprintln!("per-round refit vs FastChat ratings_converged: max |diff| {worst:.2e}");
    assert!(worst < 1e-4, "{worst}");
    // Quantiles, variance and ranks of these rounds against the expected file.
    let s = summarize(&ratings, 0.95);
    let exp = read_json("llmfao-expected.json");
    let fb = &exp["fastchat"]["bootstrap_bt"];
    let lower: Vec<f64> = s.iter().map(|x| x.lower).collect();
    let upper: Vec<f64> = s.iter().map(|x| x.upper).collect();
    let var: Vec<f64> = s.iter().map(|x| x.variance).collect();
    let (d1, _) = max_abs_diff(&models, &lower, &fb["q025_converged"]);
    let (d2, _) = max_abs_diff(&models, &upper, &fb["q975_converged"]);
    let (d3, _) = max_abs_diff(&models, &var, &fb["variance_converged"]);
    eprintln!("quantiles vs converged reference: q025 {d1:.2e}, q975 {d2:.2e}, variance {d3:.2e}");
    assert!(d1 < 1e-4 && d2 < 1e-4 && d3 < 1e-2, "{d1} {d2} {d3}");
    // FastChat's displayed quantiles (from its early-stopped fits): README tolerance 0.1.
    let (d1, _) = max_abs_diff(&models, &lower, &fb["q025"]);
    let (d2, _) = max_abs_diff(&models, &upper, &fb["q975"]);
    assert!(d1 < 0.1 && d2 < 0.1, "{d1} {d2}");
    let ranks: Vec<f64> = interval_ranks(&lower, &upper)
        .iter()
        .map(|&r| r as f64)
        .collect();
    let (d, m) = max_abs_diff(&models, &ranks, &fb["final_ranking"]);
    assert_eq!(d, 0.0, "rank differs at {m}");
}

/// Our own seeded resamples (independent RNG) agree with FastChat's intervals within Monte Carlo error.
#[test]
fn own_bootstrap_within_monte_carlo_error() {
    let b = battles();
    let rows = OutcomeRows::from_battles(&b);
    let opts = FitOptions::default();
    let full = fit_bt(&PairTable::from_battles(&b), None, &opts);
    let rounds = 1000;
    let betas = bootstrap_bt(&rows, &full.beta, rounds, 42, &opts);
    let scale = Scale::default();
    let ratings: Vec<Vec<f64>> = betas.iter().map(|x| scale.ratings(x, None)).collect();
    let s = summarize(&ratings, 0.95);
    let exp = read_json("llmfao-expected.json");
    let fb = &exp["fastchat"]["bootstrap_bt"];
    let mut z_max: f64 = 0.0;
    let mut width_ours = 0.0;
    let mut width_ref = 0.0;
    for (i, m) in b.models.iter().enumerate() {
        let sd = s[i].variance.sqrt();
        // Standard error of a 2.5 % quantile from R normal draws: sqrt(p(1-p)/R) / phi(z_p) * sd.
        let se = |r: f64| (0.025f64 * 0.975 / r).sqrt() / 0.05844 * sd;
        let se_pair = (se(100.0).powi(2) + se(rounds as f64).powi(2)).sqrt();
        for (ours, key) in [
            (s[i].lower, "q025_converged"),
            (s[i].upper, "q975_converged"),
        ] {
            let z = (ours - fb[key][m].as_f64().unwrap()).abs() / se_pair;
            z_max = z_max.max(z);
        }
        width_ours += s[i].upper - s[i].lower;
        width_ref +=
            fb["q975_converged"][m].as_f64().unwrap() - fb["q025_converged"][m].as_f64().unwrap();
    }
    let n = b.models.len() as f64;
    eprintln!(
        "own bootstrap ({rounds} rounds) vs FastChat (100): max |z| {z_max:.2}, mean width {:.2} vs {:.2}",
        width_ours / n,
        width_ref / n
    );
    // 118 endpoint comparisons: 4.5 sigma is a generous family-wise bound, the mean width within 10 %.
    assert!(z_max < 4.5, "{z_max}");
    assert!((width_ours / width_ref - 1.0).abs() < 0.1);
    // Seeded: the same seed reproduces the same rounds.
    let again = bootstrap_bt(&rows, &full.beta, 5, 42, &opts);
    assert_eq!(again[..], betas[..5]);
}
