//! Engines in the trainer's process.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};

use anyhow::Result;
use reinforge_torch::model::images::Image;
use reinforge_torch::model::transformer::Transformer;
use reinforge_torch::sample::{
    empty_completion, generate_with, generate_with_images, Completion, GenerateHooks, RowRng,
};
use reinforge_torch::Device;
use reinforge_torch::{Policy, SamplingParams, SharedPolicy};

use super::{wait_until, Engine, Generated};
use crate::seeds::seed_torch;

/// The trainer's own sampler on the policy being trained: exactly the draw of a synchronous
/// run (torch's generator seeded with the step's seed, then one batched `generate`), or with
/// per-row noise ([`RowDraw`]).
pub struct LocalEngine<'a> {
    pub policy: &'a Policy,
    pub pad_id: i64,
    /// The weight version the policy holds (set by the trainer after each update).
    pub version: u64,
    pub draw: RowDraw,
}

/// How the local engine draws a batch: torch's batch generator (`per_row = false`, the
/// default), or noise keyed by each row's global index (`rollout.rng = "per_row"`), and
/// then optionally only the rows `rows` (a data-parallel rank's share; the other rows come
/// back empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowDraw {
    pub per_row: bool,
    pub rows: Option<std::ops::Range<usize>>,
}

impl Engine for LocalEngine<'_> {
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        self.draw_rows(prompts, None, params, seed)
    }

    fn generate_with_images(
        &self,
        prompts: &[Vec<i64>],
        images: &[Vec<Image>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        self.draw_rows(prompts, Some(images), params, seed)
    }

    fn drawn_rows(&self, n: usize) -> std::ops::Range<usize> {
        match (&self.draw.rows, self.draw.per_row) {
            (Some(r), true) => r.start.min(n)..r.end.min(n),
            _ => 0..n,
        }
    }
}

impl LocalEngine<'_> {
    /// The batch as [`RowDraw`] says: torch's generator seeded with `seed`, or per-row noise
    /// on this engine's rows only (the others come back empty).
    fn draw_rows(
        &self,
        prompts: &[Vec<i64>],
        images: Option<&[Vec<Image>]>,
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        let model = (&self.policy.model, self.policy.device());
        if !self.draw.per_row {
            return sample(
                model,
                (prompts, images),
                params,
                (self.pad_id, seed),
                self.version,
            );
        }
        let rows = self.draw.rows.clone().unwrap_or(0..prompts.len());
        let rows = rows.start.min(prompts.len())..rows.end.min(prompts.len());
        let mut hooks = GenerateHooks {
            row_rng: Some(RowRng {
                seed,
                row_offset: rows.start,
            }),
            ..GenerateHooks::default()
        };
        let images = images.map(|i| &i[rows.clone()]);
        let mine = decode_rows(
            model,
            (&prompts[rows.clone()], images),
            params,
            self.pad_id,
            &mut hooks,
        )?;
        let mut completions: Vec<Completion> =
            (0..prompts.len()).map(|_| empty_completion()).collect();
        for (slot, c) in completions[rows].iter_mut().zip(mine) {
            *slot = c;
        }
        Ok(Generated {
            completions,
            version: self.version,
        })
    }
}

/// Samples `prompts` on `model`: text, or (a vision-language model) with `images[i]` in
/// prompt `i`'s placeholders.
fn decode_rows(
    (model, device): (&Transformer, Device),
    (prompts, images): (&[Vec<i64>], Option<&[Vec<Image>]>),
    params: &SamplingParams,
    pad_id: i64,
    hooks: &mut GenerateHooks,
) -> Result<Vec<Completion>> {
    match images {
        None => Ok(generate_with(model, prompts, params, pad_id, device, hooks)),
        Some(images) => {
            generate_with_images(model, prompts, images, params, (pad_id, device), hooks)
        }
    }
}

/// Seeds torch with `seed` and samples on `model`, labelled with weight `version`.
fn sample(
    model: (&Transformer, Device),
    prompts: (&[Vec<i64>], Option<&[Vec<Image>]>),
    params: &SamplingParams,
    (pad_id, seed): (i64, u64),
    version: u64,
) -> Result<Generated> {
    seed_torch(seed);
    let mut hooks = GenerateHooks::default();
    Ok(Generated {
        completions: decode_rows(model, prompts, params, pad_id, &mut hooks)?,
        version,
    })
}

/// One frozen copy of the policy, for a generator thread.
pub struct Pinned {
    pub policy: Arc<SharedPolicy>,
    pub version: u64,
    pub pad_id: i64,
}

impl Engine for Pinned {
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        self.draw_rows(prompts, None, params, seed)
    }

    fn generate_with_images(
        &self,
        prompts: &[Vec<i64>],
        images: &[Vec<Image>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        self.draw_rows(prompts, Some(images), params, seed)
    }
}

impl Pinned {
    /// Seeds torch with `seed` and samples on this copy.
    fn draw_rows(
        &self,
        prompts: &[Vec<i64>],
        images: Option<&[Vec<Image>]>,
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        let model = (self.policy.model(), self.policy.device());
        sample(
            model,
            (prompts, images),
            params,
            (self.pad_id, seed),
            self.version,
        )
    }
}

/// Frozen copies of the policy by weight version, published by the trainer after each update
/// and read by the thread that generates ahead. Keeping versions lets a step be generated with
/// exactly the weights `max_staleness` updates old, so an asynchronous run on this engine is
/// as reproducible as a synchronous one.
pub struct Snapshots {
    by_version: Mutex<BTreeMap<u64, Arc<SharedPolicy>>>,
    published: Condvar,
    pad_id: i64,
}

impl Snapshots {
    pub fn new(pad_id: i64) -> Self {
        Self {
            by_version: Mutex::new(BTreeMap::new()),
            published: Condvar::new(),
            pad_id,
        }
    }

    /// Adds a frozen copy of `policy` as `version` and forgets versions older than `oldest`.
    pub fn publish(&self, policy: &Policy, version: u64, oldest: u64) -> Result<()> {
        let copy = Arc::new(policy.shared_copy()?);
        let mut map = self.by_version.lock().expect("snapshot lock");
        map.insert(version, copy);
        map.retain(|&v, _| v >= oldest);
        self.published.notify_all();
        Ok(())
    }

    /// The copy of `version`, or the oldest newer one when it is gone (a resumed run has no
    /// weights older than its checkpoint); waits until one is published, or `stopped()`.
    pub fn at_least(&self, version: u64, stopped: &dyn Fn() -> bool) -> Result<Pinned> {
        wait_until(&self.by_version, &self.published, stopped, |map| {
            map.range(version..).next().map(|(&v, p)| Pinned {
                policy: p.clone(),
                version: v,
                pad_id: self.pad_id,
            })
        })
    }
}
