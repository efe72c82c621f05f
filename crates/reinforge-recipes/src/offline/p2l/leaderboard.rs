//! `reinforge p2l`: leaderboards from a trained P2L model, per prompt or aggregated over a
//! prompt set with a bootstrap interval over prompts, and routing under a cost budget.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reinforge_eval::p2l::{bootstrap_means, route, ELO_PER_NAT};
use reinforge_hf::HfTokenizer;
use reinforge_tasks::data::Prompt;
use reinforge_torch::train::p2l::P2lModel;

use super::battles::read_prompts;
use super::{model_dir, P2lConfig, P2L_CONFIG};
use crate::loaded::{encode_prompt, PromptStyle};
use reinforge_train::run_dir::read_json;

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

    /// Coefficients `[prompts][models]` (prompts encoded as in training).
    fn coefs(&self, prompts: &[Prompt]) -> Result<Vec<Vec<f64>>> {
        let style = PromptStyle {
            raw: self.cfg.raw,
            system: None,
        };
        let ids: Vec<Vec<i64>> = prompts
            .iter()
            .map(|p| Ok(encode_prompt(&self.tokenizer, p, &style)?.1))
            .collect::<Result<_>>()?;
        let pad = self
            .tokenizer
            .pad_token_id()
            .or(self.tokenizer.eos_token_id())
            .unwrap_or(0) as i64;
        self.p2l.coefficients(&ids, pad)
    }
}

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
