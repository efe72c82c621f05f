//! `reinforge train-p2l` and `reinforge p2l`: Prompt-to-Leaderboard (lmarena/p2l). A
//! transformer reads a prompt and outputs one Bradley-Terry coefficient per model (plus the
//! loss's tie parameters); trained on battles with the prompt that was asked, it gives a
//! leaderboard per prompt, an aggregate over a prompt set, and a router.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reinforge_hf::HfTokenizer;
use reinforge_tasks::data::{Message, Prompt};
use reinforge_tasks::{read_records, DataColumns, PromptFormat};
use reinforge_torch::loss::p2l::P2lLoss;
use reinforge_torch::p2l::{GlobalFit, P2lModel};
use reinforge_torch::tch::Tensor;
use reinforge_torch::{copy_aux_files, Device};
use serde::{Deserialize, Serialize};

use super::args::{count, ModelArgs};
use super::PromptStyle;
use crate::progress;
use crate::run_dir::{read_json, write_json};
use crate::tools::ByName;

/// The run's settings, saved with the model (`p2l_config.json`).
pub const P2L_CONFIG: &str = "p2l_config.json";

/// Train a Prompt-to-Leaderboard model on battles with prompts.
#[derive(Args, Debug)]
#[command(after_help = "\
BATTLES (jsonl): {\"prompt\": TEXT or [messages], \"model_a\": A, \"model_b\": B,
                  \"winner\": \"model_a\" | \"model_b\" | \"tie\" | \"tie (bothbad)\"}
Losses (lmarena/p2l p2l/model.py): bt (ties dropped), bt-tie, rk, rk-reparam, ba, grk/bag
(\"tie (bothbad)\" is a tie for losses without that outcome).

EXAMPLES:
  reinforge train-p2l --model ckpt --battles train.jsonl --heldout test.jsonl --output p2l-model
  reinforge p2l --model p2l-model --prompt 'Write a haiku about rain'")]
pub struct TrainP2lArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Battles to train on (jsonl).
    #[arg(long, value_name = "FILE")]
    pub battles: PathBuf,
    /// Held-out battles: log-likelihood of P2L against the single global leaderboard.
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Output directory (weights, config, tokenizer, report.json).
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// The loss, by its p2l name.
    #[arg(long, value_parser = ByName(P2lLoss::ALL), default_value = "bt")]
    pub loss: P2lLoss,
    /// Passes over the battles.
    #[arg(long, default_value_t = 1, value_parser = count)]
    pub epochs: usize,
    /// Battles per optimizer step.
    #[arg(long, default_value_t = 16, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (backbone and heads).
    #[arg(long, default_value_t = 1e-4, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// Seeds the heads and the battle order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
}

/// What a trained P2L model directory records besides its weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct P2lConfig {
    /// Competitors, in coefficient order.
    pub models: Vec<String>,
    pub loss: P2lLoss,
    pub raw: bool,
    /// The checkpoint the backbone started from.
    pub source: PathBuf,
}

/// One battle with its prompt, as read from a file.
struct Battle {
    prompt: Prompt,
    a: String,
    b: String,
    /// 0: a won, 1: b won, 2: tie, 3: tie (both bad).
    outcome: u8,
}

/// Reads battles (jsonl or parquet: `prompt`, `model_a`, `model_b`, `winner`); errors name
/// the file, row and field.
fn read_battles(path: &Path) -> Result<Vec<Battle>> {
    let records = read_records(path, &columns())?;
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.into_iter().enumerate() {
        let field = |k: &str| -> Result<String> {
            match r.extra.get(k) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                _ => bail!("{} row {}: `{k}` must be a string", path.display(), i + 1),
            }
        };
        let (a, b, winner) = (field("model_a")?, field("model_b")?, field("winner")?);
        let outcome = match winner.as_str() {
            "model_a" => 0,
            "model_b" => 1,
            "tie" => 2,
            "tie (bothbad)" => 3,
            w => bail!(
                "{} row {}: winner {w:?} is not model_a, model_b, tie or \"tie (bothbad)\"",
                path.display(),
                i + 1
            ),
        };
        if a == b {
            bail!(
                "{} row {}: model_a and model_b are both {a:?}",
                path.display(),
                i + 1
            );
        }
        out.push(Battle {
            prompt: r.prompt,
            a,
            b,
            outcome,
        });
    }
    if out.is_empty() {
        bail!("{}: no battles", path.display());
    }
    Ok(out)
}

/// The `prompt` column, text or messages.
fn columns() -> DataColumns {
    DataColumns {
        prompt: "prompt".into(),
        prompt_format: PromptFormat::Auto,
        answer: None,
    }
}

/// Encoded battles: prompt ids and label rows `(winner, loser[, tie])` for `loss`.
struct Encoded {
    prompts: Vec<Vec<i64>>,
    labels: Vec<[i64; 3]>,
    dropped_ties: usize,
}

impl Encoded {
    fn labels(&self, rows: &[usize], loss: P2lLoss) -> Tensor {
        let cols = loss.label_columns() as usize;
        let flat: Vec<i64> = rows
            .iter()
            .flat_map(|&r| self.labels[r][..cols].to_vec())
            .collect();
        // host: labels; P2lModel moves them to its device.
        Tensor::from_slice(&flat).view([rows.len() as i64, cols as i64])
    }

    fn prompts(&self, rows: &[usize]) -> Vec<Vec<i64>> {
        rows.iter().map(|&r| self.prompts[r].clone()).collect()
    }

    fn all(&self) -> Vec<usize> {
        (0..self.prompts.len()).collect()
    }
}

/// Encodes `battles` for `loss` (`bt` drops ties; a both-bad tie is a tie where the loss has no
/// such outcome); `file` names unknown models in errors.
fn encode(
    battles: &[Battle],
    models: &[String],
    loss: P2lLoss,
    tokenizer: &dyn Fn(&Prompt) -> Result<Vec<i64>>,
    file: &Path,
) -> Result<Encoded> {
    let index = |m: &str| -> Result<i64> {
        models
            .iter()
            .position(|x| x == m)
            .map(|i| i as i64)
            .with_context(|| {
                format!(
                    "{}: model {m:?} does not occur in the training battles",
                    file.display()
                )
            })
    };
    let mut enc = Encoded {
        prompts: vec![],
        labels: vec![],
        dropped_ties: 0,
    };
    for b in battles {
        let (a, bb) = (index(&b.a)?, index(&b.b)?);
        let label = match (b.outcome, loss.max_tie()) {
            (0, _) => [a, bb, 0],
            (1, _) => [bb, a, 0],
            (_, 0) => {
                enc.dropped_ties += 1;
                continue;
            }
            (2, _) => [a, bb, 1],
            (_, 1) => [a, bb, 1],
            _ => [a, bb, 2],
        };
        enc.prompts.push(tokenizer(&b.prompt)?);
        enc.labels.push(label);
    }
    if enc.prompts.is_empty() {
        bail!(
            "{}: no battles left for loss {loss} (bt drops ties)",
            file.display()
        );
    }
    Ok(enc)
}

/// What `train-p2l` measured (`report.json`).
#[derive(Debug, Serialize)]
struct P2lReport {
    loss: P2lLoss,
    models: usize,
    battles: usize,
    dropped_ties: usize,
    epoch_train_loss: Vec<f64>,
    heldout_battles: Option<usize>,
    /// Mean negative log-likelihood per held-out battle: P2L, and the single global leaderboard
    /// fitted to the training battles under the same loss.
    heldout_nll_p2l: Option<f64>,
    heldout_nll_global: Option<f64>,
}

/// Runs `train-p2l`.
pub fn train(args: &TrainP2lArgs) -> Result<()> {
    let loaded = args.model.load()?;
    let battles = read_battles(&args.battles)?;
    let mut models: Vec<String> = battles
        .iter()
        .flat_map(|b| [b.a.clone(), b.b.clone()])
        .collect();
    models.sort();
    models.dedup();
    let style = PromptStyle {
        raw: args.raw,
        system: None,
    };
    let tok = |p: &Prompt| -> Result<Vec<i64>> { Ok(loaded.encode_prompt(p, &style)?.1) };
    let train = encode(&battles, &models, args.loss, &tok, &args.battles)?;
    let heldout = match &args.heldout {
        Some(p) => Some(encode(&read_battles(p)?, &models, args.loss, &tok, p)?),
        None => None,
    };
    let p2l = P2lModel::from_policy(&loaded.policy, models.len(), args.loss, args.seed as i64)?;
    let mut opt = p2l.optimizer(args.lr, 0.0);
    let pad = loaded.pad_id();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let steps = args.epochs * train.prompts.len().div_ceil(args.batch_size);
    let bar = progress::bar(steps as u64, "train-p2l");
    let mut epoch_loss = vec![];
    for _ in 0..args.epochs {
        let mut order = train.all();
        order.shuffle(&mut rng);
        let (mut sum, mut n) = (0.0, 0usize);
        for rows in order.chunks(args.batch_size) {
            let l = p2l.train_step(
                &mut opt,
                &train.prompts(rows),
                &train.labels(rows, args.loss),
                pad,
                args.max_grad_norm,
                args.lr,
            )?;
            sum += l * rows.len() as f64;
            n += rows.len();
            bar.set_message(format!("loss {l:.4}"));
            bar.inc(1);
        }
        epoch_loss.push(sum / n.max(1) as f64);
    }
    bar.finish_and_clear();
    let (nll_p2l, nll_global) = match &heldout {
        Some(h) => {
            let rows = h.all();
            let labels = h.labels(&rows, args.loss);
            let p = batched_eval(&p2l, h, &rows, args.loss, pad, args.batch_size)?;
            let global = GlobalFit::fit(
                args.loss,
                models.len(),
                &train.labels(&train.all(), args.loss),
                2000,
                0.05,
            )?;
            let g = global.loss(args.loss, &labels)?.double_value(&[]);
            (Some(p), Some(g))
        }
        None => (None, None),
    };
    std::fs::create_dir_all(&args.output)?;
    p2l.save(&args.output)?;
    loaded
        .policy
        .model
        .config()
        .save(&args.output.join("config.json"), "float32")?;
    copy_aux_files(&args.model.model, &args.output)?;
    write_json(
        &args.output.join(P2L_CONFIG),
        &P2lConfig {
            models: models.clone(),
            loss: args.loss,
            raw: args.raw,
            source: args.model.model.clone(),
        },
    )?;
    let report = P2lReport {
        loss: args.loss,
        models: models.len(),
        battles: train.prompts.len(),
        dropped_ties: train.dropped_ties,
        epoch_train_loss: epoch_loss,
        heldout_battles: heldout.as_ref().map(|h| h.prompts.len()),
        heldout_nll_p2l: nll_p2l,
        heldout_nll_global: nll_global,
    };
    write_json(&args.output.join("report.json"), &report)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The mean loss over `rows`, in batches (no gradients).
fn batched_eval(
    p2l: &P2lModel,
    e: &Encoded,
    rows: &[usize],
    loss: P2lLoss,
    pad: i64,
    batch: usize,
) -> Result<f64> {
    let mut sum = 0.0;
    for chunk in rows.chunks(batch) {
        sum += p2l.eval_loss(&e.prompts(chunk), &e.labels(chunk, loss), pad)? * chunk.len() as f64;
    }
    Ok(sum / rows.len().max(1) as f64)
}

/// Leaderboards from a trained P2L model.
#[derive(Args, Debug)]
#[command(after_help = "\
Per prompt the model gives point estimates (one coefficient vector per prompt). Over a prompt
set (--prompts), the aggregate leaderboard is the mean coefficient per model with a percentile
bootstrap interval over prompts. Ratings are 1000 + 400 log10(e) x coefficient.

EXAMPLES:
  reinforge p2l --model p2l-model --prompt 'Prove that sqrt(2) is irrational'
  reinforge p2l --model p2l-model --prompts prompts.jsonl --costs costs.json --budget 2.0")]
pub struct P2lArgs {
    /// A directory written by `reinforge train-p2l`.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// One prompt.
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub prompt: Option<String>,
    /// Prompts (jsonl with a `prompt` column: text or messages).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Model costs (JSON object model -> cost per call) for routing.
    #[arg(long, value_name = "FILE", requires = "budget")]
    pub costs: Option<PathBuf>,
    /// Route each prompt to the best model whose cost is at most this.
    #[arg(long, requires = "costs")]
    pub budget: Option<f64>,
    /// Bootstrap resamples of the prompt set.
    #[arg(long, default_value_t = 1000)]
    pub rounds: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write JSON instead of a table.
    #[arg(long)]
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
        let cfg: P2lConfig = read_json(&dir.join(P2L_CONFIG))
            .with_context(|| format!("{} is not a train-p2l output", dir.display()))?;
        let model_cfg =
            reinforge_torch::checkpoint::config_json::read(&dir.join("config.json"), false)?;
        // host: the `p2l` command answers on the CPU.
        let mut p2l = P2lModel::new(&model_cfg, cfg.models.len(), cfg.loss, Device::Cpu, 0)?;
        p2l.load(dir)?;
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
        let _guard = reinforge_torch::tch::no_grad_guard();
        let mut out = vec![];
        for chunk in ids.chunks(32) {
            let c = self.p2l.heads(chunk, pad).coefs;
            let m = self.cfg.models.len();
            let flat =
                Vec::<f64>::try_from(&c.to_kind(reinforge_torch::Kind::Double).flatten(0, -1))?;
            out.extend(flat.chunks(m).map(<[f64]>::to_vec));
        }
        Ok(out)
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

/// Runs `p2l`.
pub fn run(args: &P2lArgs) -> Result<()> {
    let t = Trained::load(&args.model)?;
    let prompts: Vec<Prompt> = match (&args.prompt, &args.prompts) {
        (Some(p), _) => vec![Prompt::Text(p.clone())],
        (None, Some(f)) => read_prompts(f)?,
        (None, None) => bail!("give --prompt or --prompts"),
    };
    let coefs = t.coefs(&prompts)?;
    let m = t.cfg.models.len();
    let mean: Vec<f64> = (0..m)
        .map(|j| coefs.iter().map(|c| c[j]).sum::<f64>() / coefs.len() as f64)
        .collect();
    let (lo, hi) = bootstrap_means(&coefs, args.rounds, args.seed);
    let mut rows: Vec<(String, f64, f64, f64)> = (0..m)
        .map(|j| (t.cfg.models[j].clone(), mean[j], lo[j], hi[j]))
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let routes = match (&args.costs, args.budget) {
        (Some(f), Some(budget)) => Some(route(
            &t.cfg.models,
            &coefs,
            &read_costs(f, &t.cfg.models)?,
            budget,
        )?),
        _ => None,
    };
    if args.json {
        let out = serde_json::json!({
            "prompts": prompts.len(),
            "leaderboard": rows.iter().map(|r| serde_json::json!({"model": r.0, "coefficient": r.1, "rating": 1000.0 + ELO_PER_NAT * r.1, "lower": r.2, "upper": r.3})).collect::<Vec<_>>(),
            "coefficients": coefs,
            "routes": routes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let interval = prompts.len() > 1 && args.rounds > 0;
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
    if let Some(routes) = routes {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &routes {
            *counts.entry(r.as_str()).or_default() += 1;
        }
        println!(
            "\nrouting under budget {}: {counts:?}",
            args.budget.unwrap_or_default()
        );
    }
    Ok(())
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

fn read_prompts(path: &Path) -> Result<Vec<Prompt>> {
    Ok(read_records(path, &columns())?
        .into_iter()
        .map(|r| r.prompt)
        .collect())
}
