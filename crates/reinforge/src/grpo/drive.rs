//! The RL phase's step driver for each `[rollout]` setting: rollouts drawn in lock step from
//! the trainer's sampler (the default) or from remote engines after a weight push, or drawn
//! ahead on a generator thread while the trainer updates (`rollout.max_staleness = k`).
//!
//! Ahead of the update, step `j` is generated with the weights of version `j - k` (the
//! trainer's weights after `j - k` updates): exactly those on the local engine, which keeps
//! frozen copies ([`Snapshots`]); at least those on remote engines, which hold only their
//! newest weights. Rollouts older than `k` versions are never trained on: the step is drawn
//! again, in lock step, and the dropped count is a metric.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::{sample, update_step, Drawn, StepMetrics, UpdateExtras};
use crate::config::{EngineKind, RolloutRng, TrainConfig};
use crate::env::Environment;
use crate::rollout::local::{LocalEngine, RowDraw, Snapshots};
use crate::rollout::openai::RemoteEngines;
use crate::rollout::push::push;
use crate::rollout::Engine;
use crate::run_dir::RunDir;
use crate::seeds::{step_seed, PHASE_GRPO};
use crate::trainer::{PhaseEnd, PhasePlan, Trainer};

/// Runs the phase's remaining steps with the engine and asynchrony `cfg.rollout` names.
pub fn run(
    trainer: &mut Trainer,
    run: &RunDir,
    plan: &PhasePlan,
    env: &dyn Environment,
    cfg: &TrainConfig,
) -> Result<PhaseEnd> {
    let remote = match cfg.rollout.engine {
        EngineKind::Local => None,
        EngineKind::Openai => Some(RemoteEngines::connect(&cfg.rollout)?),
    };
    let weights_dir = if cfg.rollout.weights_dir.is_empty() {
        run.path("rollout_weights")
    } else {
        PathBuf::from(&cfg.rollout.weights_dir)
    };
    let k = cfg.rollout.max_staleness;
    let g = &cfg.grpo;
    let per_row = cfg.rollout.rng == RolloutRng::PerRow;
    if trainer.dp.is_some() && (remote.is_some() || k > 0) {
        anyhow::bail!(
            "data-parallel training samples on the local engine, synchronously: set rollout.engine = \"local\" and rollout.max_staleness = 0"
        );
    }
    match (&remote, k) {
        (None, 0) => trainer.run_phase(run, plan, |t| {
            super::run_step(t, env, g, &cfg.ppo, cfg.seed, per_row)
        }),
        (Some(engines), 0) => {
            let mut pushed: Option<u64> = None;
            trainer.run_phase(run, plan, |t| {
                let version = t.state.step as u64;
                let push_stats = if pushed != Some(version) {
                    let p = push(engines, t.policy, version, &weights_dir)?;
                    pushed = Some(version);
                    Some(p)
                } else {
                    None
                };
                let s = step_seed(cfg.seed, PHASE_GRPO, t.state.step as u64);
                let drawn = sample(engines, env, g, s)?;
                let extras = UpdateExtras {
                    push: push_stats,
                    measure_gap: true,
                    stale_dropped: 0,
                };
                update_step(t, env, drawn, g, &cfg.ppo, cfg.seed, extras)
            })
        }
        (remote, k) => {
            let ahead = Ahead {
                remote: remote.as_ref(),
                snapshots: Snapshots::new(env.pad_id()),
                weights_dir,
                k,
            };
            ahead.run(trainer, run, plan, env, cfg)
        }
    }
}

/// Rollouts generated on a thread of their own, ahead of the update.
struct Ahead<'e> {
    remote: Option<&'e RemoteEngines>,
    snapshots: Snapshots,
    weights_dir: PathBuf,
    k: usize,
}

/// One step's rollouts from the generator thread.
type Produced = (usize, Result<Drawn>);

impl Ahead<'_> {
    fn run(
        &self,
        trainer: &mut Trainer,
        run: &RunDir,
        plan: &PhasePlan,
        env: &dyn Environment,
        cfg: &TrainConfig,
    ) -> Result<PhaseEnd> {
        let first = trainer.state.step;
        let mut push_stats = self.publish(trainer, first as u64)?;
        let stop = AtomicBool::new(false);
        let (tx, rx) = sync_channel::<Produced>(self.k + 1);
        std::thread::scope(|scope| {
            let producer = scope.spawn(|| self.produce(first..plan.steps, env, cfg, &stop, tx));
            let end = trainer.run_phase(run, plan, |t| {
                let m = self.step(t, &rx, env, cfg, push_stats.take())?;
                // The weights after this update, for the steps still to be drawn.
                if t.state.step + 1 < plan.steps {
                    push_stats = self.publish(t, t.state.step as u64 + 1)?;
                }
                Ok(m)
            });
            stop.store(true, Ordering::SeqCst);
            drop(rx);
            producer
                .join()
                .map_err(|_| anyhow!("the rollout generator thread panicked"))?;
            end
        })
    }

    /// Makes the weights of `version` (the trainer's current ones) available to the generator:
    /// a frozen copy, or a push to the remote engines.
    fn publish(&self, t: &Trainer, version: u64) -> Result<Option<crate::rollout::PushStats>> {
        match self.remote {
            None => {
                let oldest = version.saturating_sub(self.k as u64);
                self.snapshots.publish(t.policy, version, oldest)?;
                Ok(None)
            }
            Some(engines) => push(engines, t.policy, version, &self.weights_dir).map(Some),
        }
    }

    /// The generator thread: draws steps in order, step `j` once weights `j - k` exist.
    fn produce(
        &self,
        steps: std::ops::Range<usize>,
        env: &dyn Environment,
        cfg: &TrainConfig,
        stop: &AtomicBool,
        tx: SyncSender<Produced>,
    ) {
        let stopped = || stop.load(Ordering::SeqCst);
        for j in steps {
            let want = j.saturating_sub(self.k) as u64;
            let drawn = self.draw_with(want, env, cfg, j, &stopped);
            let failed = drawn.is_err();
            if stopped() || tx.send((j, drawn)).is_err() || failed {
                return;
            }
        }
    }

    /// Draws step `j` on weights of at least version `want`.
    fn draw_with(
        &self,
        want: u64,
        env: &dyn Environment,
        cfg: &TrainConfig,
        j: usize,
        stopped: &dyn Fn() -> bool,
    ) -> Result<Drawn> {
        let s = step_seed(cfg.seed, PHASE_GRPO, j as u64);
        match self.remote {
            None => {
                let pinned = self.snapshots.at_least(want, stopped)?;
                sample(&pinned, env, &cfg.grpo, s)
            }
            Some(engines) => {
                engines.wait_for_version(want, stopped)?;
                sample(engines, env, &cfg.grpo, s)
            }
        }
    }

    /// Trains step `t.state.step` on the generator's rollouts for it, drawing it again in
    /// lock step when they are more than `k` versions old.
    fn step(
        &self,
        t: &mut Trainer,
        rx: &Receiver<Produced>,
        env: &dyn Environment,
        cfg: &TrainConfig,
        push: Option<crate::rollout::PushStats>,
    ) -> Result<StepMetrics> {
        let step = t.state.step;
        let wait = Instant::now();
        let (j, drawn) = rx
            .recv()
            .map_err(|_| anyhow!("the rollout generator thread stopped"))?;
        if j != step {
            return Err(anyhow!("rollouts of step {j} arrived for step {step}"));
        }
        let mut drawn = drawn?;
        drawn.sample_seconds = wait.elapsed().as_secs_f64();
        let oldest = step.saturating_sub(self.k) as u64;
        let mut stale_dropped = 0;
        if drawn.rollouts.iter().any(|r| r.version < oldest) {
            stale_dropped = drawn.rollouts.len();
            let s = step_seed(cfg.seed, PHASE_GRPO, step as u64);
            drawn = match self.remote {
                None => {
                    let engine = LocalEngine {
                        policy: t.policy,
                        pad_id: env.pad_id(),
                        version: step as u64,
                        draw: RowDraw::default(),
                    };
                    sample(&engine, env, &cfg.grpo, s)?
                }
                Some(engines) => sample(engines as &dyn Engine, env, &cfg.grpo, s)?,
            };
        }
        let extras = UpdateExtras {
            push,
            measure_gap: true,
            stale_dropped,
        };
        update_step(t, env, drawn, &cfg.grpo, &cfg.ppo, cfg.seed, extras)
    }
}
