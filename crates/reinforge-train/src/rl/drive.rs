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

use anyhow::{anyhow, bail, Result};

use super::integrity::Monitor;
use super::metrics::StepMetrics;
use super::sample::{sample, Drawn};
use super::settings::StepSettings;
use super::step;
use crate::config::{EngineKind, RolloutRng, TrainConfig};
use crate::env::Environment;
use crate::rollout::local::{LocalEngine, RowDraw, Snapshots};
use crate::rollout::openai::RemoteEngines;
use crate::rollout::push::push;
use crate::rollout::{Engine, PushStats};
use crate::run_dir::RunDir;
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
    let per_row = cfg.rollout.rng == RolloutRng::PerRow;
    if trainer.dp.is_some() && (remote.is_some() || k > 0) {
        bail!(
            "data-parallel training samples on the local engine, synchronously: set rollout.engine = \"local\" and rollout.max_staleness = 0"
        );
    }
    reinforge_torch::heap::set_policy(cfg.memory.heap_policy());
    let settings =
        StepSettings::new(&cfg.grpo, &cfg.ppo, cfg.seed, env.pad_id()).with_memory(cfg.memory);
    let (step, writes) = (trainer.state.step, trainer.writes());
    let mut monitor = Monitor::open(cfg.integrity, run, step, writes, cfg.seed)?;
    let end = match (&remote, k) {
        (None, 0) => trainer.run_phase(run, plan, |t| {
            let m = local_step(t, env, &settings, per_row)?;
            monitor.observe(t, env, m)
        }),
        (Some(engines), 0) => {
            let settings = settings.measuring_gap();
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
                let s = settings.step_seed(t.state.step);
                let mut drawn = sample(engines, env, &settings.rl, s)?;
                drawn.meta.push = push_stats;
                let m = step::step(t, env, drawn, &settings)?;
                monitor.observe(t, env, m)
            })
        }
        (remote, k) => {
            let ahead = Ahead {
                remote: remote.as_ref(),
                snapshots: Snapshots::new(env.pad_id()),
                weights_dir,
                k,
                settings: settings.measuring_gap(),
            };
            ahead.run(trainer, run, plan, env, &mut monitor)
        }
    };
    monitor.finish()?;
    end
}

/// One step sampled in lock step on the trainer's own weights (`per_row`: per-row sampling
/// noise, which a data-parallel rank always uses for its rows of the batch).
pub fn local_step(
    t: &mut Trainer,
    env: &dyn Environment,
    settings: &StepSettings,
    per_row: bool,
) -> Result<StepMetrics> {
    let rl = &settings.rl;
    let rows = match &t.dp {
        Some(dp) => Some(dp.rows(
            rl.prompts_per_step * rl.num_generations,
            "rl.prompts_per_step x rl.num_generations",
        )?),
        None => None,
    };
    if t.dp.is_some() && rl.dynamic_sampling {
        bail!("rl.dynamic_sampling is not supported with data-parallel ranks yet");
    }
    let engine = LocalEngine {
        policy: t.policy,
        pad_id: env.pad_id(),
        version: t.state.step as u64,
        draw: RowDraw {
            per_row: per_row || rows.is_some(),
            rows,
        },
    };
    let drawn = sample(&engine, env, rl, settings.step_seed(t.state.step))?;
    step::step(t, env, drawn, settings)
}

/// Rollouts generated on a thread of their own, ahead of the update.
struct Ahead<'e> {
    remote: Option<&'e RemoteEngines>,
    snapshots: Snapshots,
    weights_dir: PathBuf,
    k: usize,
    settings: StepSettings,
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
        monitor: &mut Monitor,
    ) -> Result<PhaseEnd> {
        let first = trainer.state.step;
        let mut push_stats = self.publish(trainer, first as u64)?;
        let stop = AtomicBool::new(false);
        let (tx, rx) = sync_channel::<Produced>(self.k + 1);
        std::thread::scope(|scope| {
            let producer = scope.spawn(|| self.produce(first..plan.steps, env, &stop, tx));
            let end = trainer.run_phase(run, plan, |t| {
                let m = self.step(t, &rx, env, push_stats.take())?;
                let m = monitor.observe(t, env, m)?;
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
    fn publish(&self, t: &Trainer, version: u64) -> Result<Option<PushStats>> {
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
        stop: &AtomicBool,
        tx: SyncSender<Produced>,
    ) {
        let stopped = || stop.load(Ordering::SeqCst);
        for j in steps {
            let want = j.saturating_sub(self.k) as u64;
            let drawn = self.draw_with(want, env, j, &stopped);
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
        j: usize,
        stopped: &dyn Fn() -> bool,
    ) -> Result<Drawn> {
        let (s, rl) = (self.settings.step_seed(j), &self.settings.rl);
        match self.remote {
            None => {
                let pinned = self.snapshots.at_least(want, stopped)?;
                sample(&pinned, env, rl, s)
            }
            Some(engines) => {
                engines.wait_for_version(want, stopped)?;
                sample(engines, env, rl, s)
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
        push: Option<PushStats>,
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
        drawn.meta.sample_seconds = wait.elapsed().as_secs_f64();
        let oldest = step.saturating_sub(self.k) as u64;
        let mut stale_dropped = 0;
        if drawn.rollouts.iter().any(|r| r.version < oldest) {
            stale_dropped = drawn.rollouts.len();
            let (s, rl) = (self.settings.step_seed(step), &self.settings.rl);
            drawn = match self.remote {
                None => {
                    let engine = LocalEngine {
                        policy: t.policy,
                        pad_id: env.pad_id(),
                        version: step as u64,
                        draw: RowDraw::default(),
                    };
                    sample(&engine, env, rl, s)?
                }
                Some(engines) => sample(engines as &dyn Engine, env, rl, s)?,
            };
        }
        drawn.meta.push = push;
        drawn.meta.stale_dropped = stale_dropped;
        step::step(t, env, drawn, &self.settings)
    }
}
