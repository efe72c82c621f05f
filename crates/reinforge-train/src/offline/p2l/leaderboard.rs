//! `reinforge p2l`: leaderboards from a trained P2L model, per prompt or aggregated over a
//! prompt set with a bootstrap interval over prompts, and routing under a cost budget.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reinforge_hf::HfTokenizer;
use reinforge_tasks::data::{Message, Prompt};
use reinforge_torch::p2l::P2lModel;

use super::battles::read_prompts;
use super::{model_dir, P2lConfig, P2L_CONFIG};
use crate::run_dir::read_json;

/// What `reinforge p2l` is asked.
#[derive(Debug, Clone)]
pub struct LeaderboardOptions {
    /// A train-p2l run directory or one of its checkpoints.
    pub model: PathBuf,
    /// One prompt, or else a prompt file.
    pub prompt: Option<String>,
    pub prompts: Option<PathBuf>,
    /// Model costs (JSON object) and the budget routing keeps under.
    pub costs: Option<PathBuf>,
    pub budget: Option<f64>,
    /// Bootstrap resamples of the prompt set, and their seed.
    pub rounds: usize,
    pub seed: u64,
    /// JSON instead of a table.
    pub json: bool,
}

/// A trained P2L model with its tokenizer.
struct Trained {
    cfg: P2lConfig,
    p2l: P2lModel,
    tokenizer: HfTokenizer,
}

impl Trained {
    fn load(dir: &Path) -> Result<Self> {
        let dir = &model_dir(dir);
        let cfg: P2lConfig = read_json(&dir.join(P2L_CONFIG))
            .with_context(|| format!("{} is not a train-p2l output", dir.display()))?;
        let p2l = P2lModel::open(dir, cfg.models.len(), cfg.loss)?;
        let tokenizer = HfTokenizer::from_dir(dir)?;
        Ok(Self {
            cfg,
            p2l,
            tokenizer,
        })
    }

    /// Coefficients `[prompts][models]`.
    fn coefs(&self, prompts: &[Prompt]) -> Result<Vec<Vec<f64>>> {
        let ids: Vec<Vec<i64>> = prompts
            .iter()
            .map(|p| self.encode(p))
            .collect::<Result<_>>()?;
        let pad = self
            .tokenizer
            .pad_token_id()
            .or(self.tokenizer.eos_token_id())
            .unwrap_or(0) as i64;
        self.p2l.coefficients(&ids, pad)
    }

    fn encode(&self, p: &Prompt) -> Result<Vec<i64>> {
        let text = match (p, self.cfg.raw) {
            (Prompt::Text(t), true) => {
                return Ok(self
                    .tokenizer
                    .encode(t, true)?
                    .into_iter()
                    .map(i64::from)
                    .collect())
            }
            (Prompt::Text(t), false) => vec![Message {
                role: "user".into(),
                content: t.clone(),
            }],
            (Prompt::Messages(m), _) => m.clone(),
        };
        let opts = reinforge_hf::ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        };
        let rendered = self.tokenizer.apply_chat_template(&text, &opts)?;
        Ok(self
            .tokenizer
            .encode(&rendered, false)?
            .into_iter()
            .map(i64::from)
            .collect())
    }
}

/// Rating points per unit of coefficient: `400 / ln 10`, Elo's scale.
const ELO_PER_NAT: f64 = 400.0 / std::f64::consts::LN_10;

/// Leaderboard rows: model, mean coefficient, bootstrap bounds; best first.
type Rows = Vec<(String, f64, f64, f64)>;

/// Runs `reinforge p2l`: prints the leaderboard (and routes) as a table or JSON.
pub fn run(opts: &LeaderboardOptions) -> Result<()> {
    let t = Trained::load(&opts.model)?;
    let prompts: Vec<Prompt> = match (&opts.prompt, &opts.prompts) {
        (Some(p), _) => vec![Prompt::Text(p.clone())],
        (None, Some(f)) => read_prompts(f)?,
        (None, None) => bail!("give --prompt or --prompts"),
    };
    let coefs = t.coefs(&prompts)?;
    let m = t.cfg.models.len();
    let mean: Vec<f64> = (0..m)
        .map(|j| coefs.iter().map(|c| c[j]).sum::<f64>() / coefs.len() as f64)
        .collect();
    let (lo, hi) = bootstrap_means(&coefs, opts.rounds, opts.seed);
    let mut rows: Rows = (0..m)
        .map(|j| (t.cfg.models[j].clone(), mean[j], lo[j], hi[j]))
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let routes = match (&opts.costs, opts.budget) {
        (Some(f), Some(budget)) => Some(route(
            &t.cfg.models,
            &coefs,
            &read_costs(f, &t.cfg.models)?,
            budget,
        )?),
        _ => None,
    };
    if opts.json {
        let out = serde_json::json!({
            "prompts": prompts.len(),
            "leaderboard": rows.iter().map(|r| serde_json::json!({"model": r.0, "coefficient": r.1, "rating": 1000.0 + ELO_PER_NAT * r.1, "lower": r.2, "upper": r.3})).collect::<Vec<_>>(),
            "coefficients": coefs,
            "routes": routes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print_table(&rows, prompts.len() > 1 && opts.rounds > 0);
    if let Some(routes) = routes {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &routes {
            *counts.entry(r.as_str()).or_default() += 1;
        }
        println!(
            "\nrouting under budget {}: {counts:?}",
            opts.budget.unwrap_or_default()
        );
    }
    Ok(())
}

/// The leaderboard as a markdown table (with the bootstrap interval when there is one).
fn print_table(rows: &Rows, interval: bool) {
    println!(
        "| Rank | Model | Rating | coefficient{} |",
        if interval {
            " | 95% interval (bootstrap over prompts)"
        } else {
            ""
        }
    );
    println!("|---:|---|---:|---:|{}", if interval { "---|" } else { "" });
    for (i, r) in rows.iter().enumerate() {
        let ci = if interval {
            format!(" | {:.3} – {:.3}", r.2, r.3)
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {:.1} | {:.3}{ci} |",
            i + 1,
            r.0,
            1000.0 + ELO_PER_NAT * r.1,
            r.1
        );
    }
}

/// Percentile (2.5%, 97.5%) bounds of the mean coefficient per model over prompt resamples.
fn bootstrap_means(coefs: &[Vec<f64>], rounds: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let (n, m) = (coefs.len(), coefs.first().map_or(0, Vec::len));
    if n < 2 || rounds == 0 {
        return (vec![f64::NAN; m], vec![f64::NAN; m]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); m];
    for _ in 0..rounds {
        let mut sum = vec![0.0; m];
        for _ in 0..n {
            let c = &coefs[rng.gen_range(0..n)];
            for j in 0..m {
                sum[j] += c[j];
            }
        }
        for j in 0..m {
            draws[j].push(sum[j] / n as f64);
        }
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
    };
    let lo = draws.iter_mut().map(|v| q(v, 0.025)).collect();
    let hi = draws.iter_mut().map(|v| q(v, 0.975)).collect();
    (lo, hi)
}

/// Per prompt, the model with the highest coefficient among those costing at most `budget`.
fn route(models: &[String], coefs: &[Vec<f64>], costs: &[f64], budget: f64) -> Result<Vec<String>> {
    let allowed: Vec<usize> = (0..models.len()).filter(|&j| costs[j] <= budget).collect();
    if allowed.is_empty() {
        bail!("--budget {budget}: no model costs that little");
    }
    Ok(coefs
        .iter()
        .map(|c| {
            let best = allowed
                .iter()
                .copied()
                .max_by(|&a, &b| c[a].total_cmp(&c[b]))
                .unwrap_or(allowed[0]);
            models[best].clone()
        })
        .collect())
}

/// The cost of each of `models`, from a JSON object; a missing one is an error.
fn read_costs(path: &Path, models: &[String]) -> Result<Vec<f64>> {
    let map: BTreeMap<String, f64> = read_json(path)?;
    models
        .iter()
        .map(|m| {
            map.get(m)
                .copied()
                .with_context(|| format!("{}: no cost for model {m:?}", path.display()))
        })
        .collect()
}
