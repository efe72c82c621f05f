//! `train-sft`: supervised fine-tuning of a Hugging Face checkpoint on the user's rows (TRL
//! `SFTTrainer`'s formats and loss, [`super::sft_rows`]) through the one trainer: the loss is
//! the token-mean negative log-likelihood of the target tokens over the whole step's batch
//! (every data-parallel rank's rows), reinforge-torch's `sft_step`, with transformers'
//! learning-rate schedules, LoRA, micro-batches, padding-free rows and activation
//! checkpointing; held-out loss before and after in `report.json`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use reinforge_torch::train::sft::{nll_sum, sft_batch, sft_step};
use reinforge_torch::{LoraConfig, Memory, Policy, SequenceBatch};
use serde::Serialize;

use super::sft_rows::{read_sft_rows, SftRow, SftRows, Tokenization};
use super::{start_run, OfflineOptions};
use crate::loaded::LoadedModel;
use crate::pairs::step_rows;
use reinforge_train::run_dir::write_jsonl;
use reinforge_train::sft::{LrSchedule, SftLine};
use reinforge_train::trainer::Trainer;

/// `train-sft`'s settings.
#[derive(Debug, Clone)]
pub struct SftOptions {
    pub common: OfflineOptions,
    pub tokenization: Tokenization,
    pub schedule: LrSchedule,
    pub warmup_steps: usize,
    /// LoRA adapters instead of every weight.
    pub lora: Option<LoraConfig>,
    /// Also write the tokenised training rows here (jsonl: `input_ids`, `completion_mask`).
    pub write_tokens: Option<PathBuf>,
}

/// Held-out figures of one model (`report.json`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HeldoutLoss {
    /// Token-mean negative log-likelihood of the held-out target tokens.
    pub loss: f64,
    pub tokens: f64,
}

/// The held-out loss of `policy` on `rows`, `batch` rows at a time.
pub fn heldout_loss(
    policy: &Policy,
    rows: &SftRows,
    (pad, batch, memory): (i64, usize, &Memory),
) -> Result<HeldoutLoss> {
    let (mut nll, mut tokens) = (0.0, 0.0);
    for chunk in rows.rows.chunks(batch.max(1)) {
        let b = batch_of(chunk.iter(), pad, policy)?;
        let (n, t) = nll_sum(policy, &b, memory);
        nll += n;
        tokens += t;
    }
    Ok(HeldoutLoss {
        loss: nll / tokens.max(1.0),
        tokens,
    })
}

/// `rows` as one padded batch on `policy`'s device, with their images when they have any.
pub fn batch_of<'a>(
    rows: impl Iterator<Item = &'a SftRow>,
    pad: i64,
    policy: &Policy,
) -> Result<SequenceBatch> {
    let rows: Vec<&SftRow> = rows.collect();
    let pairs: Vec<(&[i64], &[bool])> = rows.iter().map(|r| (&r.ids[..], &r.labels[..])).collect();
    let batch = sft_batch(&pairs, pad, policy.device());
    if rows.iter().all(|r| r.images.is_empty()) {
        return Ok(batch);
    }
    let images = rows.iter().map(|r| r.images.clone()).collect();
    batch.with_images(policy.model.config(), images)
}

/// This rank's contiguous share of a step's `n` rows (sizes differing by at most one; the
/// loss's denominator is the whole step's, so an uneven split is exact).
fn share(n: usize, rank: usize, world: usize) -> std::ops::Range<usize> {
    let (per, extra) = (n / world, n % world);
    let start = rank * per + rank.min(extra);
    start..start + per + usize::from(rank < extra)
}

/// Refuses a data-parallel run in which some rank would get no row of a step.
fn check_world(rows: usize, batch: usize, world: usize) -> Result<()> {
    let last = rows % batch;
    if batch.min(rows) < world || (last != 0 && last < world) {
        bail!(
            "--batch-size {batch} over {rows} rows leaves a step with fewer rows than the {world} \
             ranks; choose a batch size of at least {world} whose last batch of a pass too has \
             at least {world} rows"
        );
    }
    Ok(())
}

/// Prints what the rows hold.
fn describe(what: &str, rows: &SftRows) {
    let (all, targets) = rows.token_counts();
    eprintln!(
        "{what}: {} rows ({:?}), {all} tokens, {targets} trained on; {} cut to the maximum \
         length, {} without a target dropped",
        rows.len(),
        rows.format,
        rows.truncated,
        rows.dropped
    );
}

/// Runs `train-sft`.
pub fn train(o: &SftOptions) -> Result<()> {
    let common = &o.common;
    // Training keeps float32 master weights (`--autocast-bf16` computes in bfloat16).
    let mut source = common.model.clone();
    source.options = reinforge_torch::LoadOptions {
        allow_unknown_config_keys: source.options.allow_unknown_config_keys,
        ..reinforge_torch::LoadOptions::f32(source.options.device)
    };
    let model: LoadedModel = source.load()?;
    super::check_vision_training(&model.policy, common.vision_freeze, o.lora.is_some())?;
    let pad = model.pad_id();
    let mut tokenization = o.tokenization;
    tokenization.max_length = tokenization.max_length.min(model.max_positions());
    let images = model.image_reader()?;
    let (train, heldout) =
        common.read_data(|p| read_sft_rows(p, &model.tokenizer, &tokenization, images))?;
    describe("training rows", &train);
    if let Some(h) = &heldout {
        describe("held-out rows", h);
    }
    if let Some(path) = &o.write_tokens {
        write_jsonl(path, &train.rows)?;
    }
    let offline = start_run(&common.output, model.device)?;
    if let Some(d) = &offline.dp {
        check_world(train.len(), common.batch_size, d.world())?;
    }
    let memory = common.memory;
    let eval_batch = common.batch_size;
    let eval = |p: &Policy| {
        heldout
            .as_ref()
            .filter(|_| offline.writes())
            .map(|h| heldout_loss(p, h, (pad, eval_batch, &memory)))
            .transpose()
    };
    let before = eval(&model.policy)?;
    let step = |t: &mut Trainer, rows: &[usize]| -> Result<SftLine> {
        let mine = match &t.dp {
            Some(d) => rows[share(rows.len(), d.rank(), d.world())].to_vec(),
            None => rows.to_vec(),
        };
        let batch = batch_of(mine.iter().map(|&i| &train.rows[i]), pad, t.policy)?;
        let s = t.state.step;
        let lr = common.lr * o.schedule.factor(s, o.warmup_steps, common.steps);
        let stats = sft_step(
            t.policy,
            &mut t.opt,
            &batch,
            (lr, common.max_grad_norm),
            &memory,
            t.dp.as_ref().map(|d| &*d.pg),
        )?;
        Ok(SftLine::new(s, lr, stats))
    };
    let rows = |s| step_rows(train.len(), common.batch_size, common.seed, s);
    let policy = common.train_with(model.policy, o.lora.as_ref(), &offline, step, rows)?;
    let after = eval(&policy)?;
    let (tokens, targets) = train.token_counts();
    let report = serde_json::json!({
        "format": train.format,
        "rows": train.len(),
        "tokens": tokens,
        "target_tokens": targets,
        "truncated": train.truncated,
        "dropped": train.dropped,
        "steps": common.steps,
        "heldout_before": before,
        "heldout_after": after,
    });
    offline.finish(&report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_rows_once_in_order() {
        for n in 1..12 {
            for world in 1..=n.min(4) {
                let parts: Vec<_> = (0..world).map(|r| share(n, r, world)).collect();
                assert_eq!(parts[0].start, 0);
                assert_eq!(parts[world - 1].end, n);
                for w in parts.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                assert!(parts
                    .iter()
                    .all(|p| p.len() >= n / world && p.len() <= n / world + 1));
            }
        }
    }

    #[test]
    fn a_world_that_would_leave_a_rank_without_rows_is_refused() {
        assert!(check_world(10, 4, 2).is_ok()); // batches 4, 4, 2
        assert!(check_world(9, 4, 2).is_err()); // last batch 1
        assert!(check_world(8, 1, 2).is_err());
        assert!(check_world(1, 8, 2).is_err());
    }
}
