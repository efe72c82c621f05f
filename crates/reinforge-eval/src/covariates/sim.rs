//! Battles with known ratings and known covariate effects, as Search Arena's analysis meets them:
//! the weakest models cite most and citations win votes.
//!
//! Model `i` of `K` (named `m00`, `m01`, ...) has strength `spread * (i / (K - 1) - 1/2)` in natural
//! log-odds (weakest first, mean 0). Each battle draws an ordered pair uniformly, then per covariate
//! and side a Poisson count whose mean runs linearly from `mean_weakest` (model 0) to
//! `mean_strongest` (model K-1), split over the battle's turns (1 to `max_turns`; with more than
//! one turn the counts are written per turn, as an array). Model A wins with probability
//! `sigmoid(s_a - s_b + sum_c effect_c * (x_a - x_b) / (x_a + x_b))` (a zero sum gives 0), no ties.
//! Lines carry `conv_metadata.{NAME}_a` and `conv_metadata.{NAME}_b`.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Poisson};
use serde_json::{json, Map, Value};

/// One simulated covariate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCovariate {
    /// Name; the fields are `conv_metadata.{name}_a` / `_b`.
    pub name: String,
    /// True effect on the logit per unit of the difference-over-sum feature.
    pub effect: f64,
    /// Mean count of the weakest model.
    pub mean_weakest: f64,
    /// Mean count of the strongest model.
    pub mean_strongest: f64,
}

/// The generator's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSim {
    /// Number of models (>= 2).
    pub models: usize,
    /// Number of battles.
    pub battles: usize,
    /// Strength of the strongest minus the weakest model, natural log-odds.
    pub spread: f64,
    /// Largest number of turns of a battle (>= 1).
    pub max_turns: usize,
    /// Seed (ChaCha8).
    pub seed: u64,
    /// The covariates.
    pub covariates: Vec<SimCovariate>,
}

impl Default for SearchSim {
    /// Ten models 1.5 log-odds apart end to end, one covariate `cites` with effect 2.0 that the
    /// weakest model uses most (mean 6 citations against 1 for the strongest).
    fn default() -> Self {
        SearchSim {
            models: 10,
            battles: 20_000,
            spread: 1.5,
            max_turns: 1,
            seed: 0,
            covariates: vec![SimCovariate {
                name: "cites".into(),
                effect: 2.0,
                mean_weakest: 6.0,
                mean_strongest: 1.0,
            }],
        }
    }
}

/// Generated battles and the truth behind them.
#[derive(Debug, Clone)]
pub struct SimBattles {
    /// One JSON object per battle (the Arena layout plus `conv_metadata` counts).
    pub lines: Vec<Value>,
    /// Model names, weakest first.
    pub models: Vec<String>,
    /// True strengths (natural log-odds, mean 0), in `models` order.
    pub strengths: Vec<f64>,
}

impl SimBattles {
    /// The battles as JSONL text.
    pub fn to_jsonl(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            s += &l.to_string();
            s.push('\n');
        }
        s
    }
}

/// Generates battles under `sim`.
pub fn simulate(sim: &SearchSim) -> Result<SimBattles> {
    if sim.models < 2 || sim.max_turns < 1 {
        bail!("the simulation needs at least 2 models and 1 turn");
    }
    let valid =
        |c: &SimCovariate| c.effect.is_finite() && c.mean_weakest >= 0.0 && c.mean_strongest >= 0.0;
    if !sim.spread.is_finite() || !sim.covariates.iter().all(valid) {
        bail!("simulation settings must be finite, with mean counts >= 0");
    }
    let k = sim.models;
    let models: Vec<String> = (0..k).map(|i| format!("m{i:02}")).collect();
    let pos = |i: usize| i as f64 / (k - 1) as f64;
    let strengths: Vec<f64> = (0..k).map(|i| sim.spread * (pos(i) - 0.5)).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(sim.seed);
    let mut lines = Vec::with_capacity(sim.battles);
    for _ in 0..sim.battles {
        let a = rng.gen_range(0..k);
        let b = (a + rng.gen_range(1..k)) % k;
        let turns = rng.gen_range(1..=sim.max_turns);
        let mut z = strengths[a] - strengths[b];
        let mut meta = Map::new();
        for c in &sim.covariates {
            let mean = |i: usize| c.mean_weakest + (c.mean_strongest - c.mean_weakest) * pos(i);
            let mut side = |i: usize| -> Result<(f64, Value)> {
                let per_turn = mean(i) / turns as f64;
                let mut counts = Vec::with_capacity(turns);
                for _ in 0..turns {
                    counts.push(if per_turn > 0.0 {
                        Poisson::new(per_turn)?.sample(&mut rng)
                    } else {
                        0.0
                    });
                }
                let total: f64 = counts.iter().sum();
                let v = if turns == 1 {
                    json!(total as u64)
                } else {
                    json!(counts.iter().map(|&x| x as u64).collect::<Vec<_>>())
                };
                Ok((total, v))
            };
            let (xa, va) = side(a)?;
            let (xb, vb) = side(b)?;
            let sum = xa + xb;
            if sum > 0.0 {
                z += c.effect * (xa - xb) / sum;
            }
            meta.insert(format!("{}_a", c.name), va);
            meta.insert(format!("{}_b", c.name), vb);
        }
        let p = 1.0 / (1.0 + (-z).exp());
        let winner = if rng.gen::<f64>() < p {
            "model_a"
        } else {
            "model_b"
        };
        let mut line = json!({"model_a": models[a], "model_b": models[b], "winner": winner});
        if turns > 1 {
            line["turns"] = json!(turns);
        }
        line["conv_metadata"] = Value::Object(meta);
        lines.push(line);
    }
    Ok(SimBattles {
        lines,
        models,
        strengths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weakest_models_cite_most_and_seed_repeats() {
        let sim = SearchSim {
            battles: 4000,
            ..SearchSim::default()
        };
        let s = simulate(&sim).unwrap();
        assert_eq!(s.to_jsonl(), simulate(&sim).unwrap().to_jsonl());
        let mut cites = [0.0; 2];
        let mut n = [0.0; 2];
        for l in &s.lines {
            for side in ["a", "b"] {
                let m = l[format!("model_{side}")].as_str().unwrap();
                let c = l["conv_metadata"][format!("cites_{side}")]
                    .as_f64()
                    .unwrap();
                let slot = match m {
                    "m00" => 0,
                    "m09" => 1,
                    _ => continue,
                };
                cites[slot] += c;
                n[slot] += 1.0;
            }
        }
        let (weak, strong) = (cites[0] / n[0], cites[1] / n[1]);
        assert!(
            (weak - 6.0).abs() < 0.3 && (strong - 1.0).abs() < 0.2,
            "{weak} {strong}"
        );
        assert!((s.strengths.iter().sum::<f64>()).abs() < 1e-12);
        assert_eq!(s.strengths[9] - s.strengths[0], 1.5);
    }
}
