//! The reward-hacking monitor in the RL run loop (issue 27; docs/integrity.md). After every
//! step it adds to the metrics line the reward–length correlation over the last
//! `integrity.window` steps, the KL to the start (with a reference model) and, every
//! `integrity.canary_every` steps, the share of canaries (known-wrong completions of the run's
//! own prompts) the run's reward credits; it keeps the highest-reward flagged completions and
//! warns on stderr. `integrity.json` holds its state, saved after every step (a resumed run
//! continues it); the reports render their section from it, and `integrity.md` is that
//! section written when the phase ends. The figures are reinforge-reward's
//! `integrity` module; the per-step shares come from the metrics stage.

use std::time::Instant;

use anyhow::Result;
use reinforge_reward::integrity::{CanaryHit, IntegrityLog, MonitorConfig};

use super::metrics::StepMetrics;
use crate::env::Environment;
use crate::run_dir::{write_atomic, write_json, RunDir};
use crate::trainer::Trainer;

/// The monitor's state file in the run directory.
pub const LOG_FILE: &str = "integrity.json";
/// Its report section, rendered when the phase ends.
pub const SECTION_FILE: &str = "integrity.md";

/// The monitor of one RL phase.
pub struct Monitor {
    cfg: MonitorConfig,
    log: IntegrityLog,
    /// This process writes the run's files (rank 0).
    writes: bool,
    run: RunDir,
    seed: u64,
}

impl Monitor {
    /// The monitor of a phase resuming at `step`: the run's log up to that step.
    pub fn open(
        cfg: MonitorConfig,
        run: &RunDir,
        step: usize,
        writes: bool,
        seed: u64,
    ) -> Result<Self> {
        let mut log = IntegrityLog::load(&run.path(LOG_FILE))?;
        log.truncate(step);
        Ok(Self {
            cfg,
            log,
            writes,
            run: run.clone(),
            seed,
        })
    }

    /// Adds the monitor's figures to step `m.step`'s metrics and records them.
    pub fn observe(
        &mut self,
        t: &Trainer,
        env: &dyn Environment,
        mut m: StepMetrics,
    ) -> Result<StepMetrics> {
        let started = Instant::now();
        let pairs = std::mem::take(&mut m.pairs);
        let flagged = std::mem::take(&mut m.flagged);
        if !self.cfg.enabled {
            m.integrity.clear();
            return Ok(m);
        }
        let step = m.step;
        if let Some(r) = self.log.correlate(step, pairs, self.cfg.window) {
            m.integrity.insert("integrity/reward_length_corr".into(), r);
        }
        if t.reference.is_some() {
            m.integrity.insert("integrity/kl_to_start".into(), m.kl);
        }
        // Only the rank that writes the metrics line scores canaries.
        let every = self.cfg.canary_every;
        if self.writes && every > 0 && step.is_multiple_of(every) {
            self.canaries(env, step, &mut m)?;
        }
        for (k, v) in &m.integrity {
            self.log.record(step, k, *v);
        }
        for f in flagged {
            self.log.offer_flagged(f, self.cfg.flagged_kept);
        }
        for w in self.log.check_rises(step, &self.cfg) {
            warn(&w);
        }
        if self.writes {
            write_json(&self.run.path(LOG_FILE), &self.log)?;
        }
        // The monitor's own cost (its overhead on the step), beside the step's timings.
        let seconds = started.elapsed().as_secs_f64();
        m.integrity.insert("timing/integrity_s".into(), seconds);
        Ok(m)
    }

    /// Scores the canaries of step `step`'s draw: `integrity/canary_credited`, and a warning
    /// when the reward credits any.
    fn canaries(&mut self, env: &dyn Environment, step: usize, m: &mut StepMetrics) -> Result<()> {
        let seed = self.seed ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let scored = env.canaries(seed, self.cfg.canary_prompts)?;
        if scored.is_empty() {
            return Ok(());
        }
        let hits: Vec<CanaryHit> = scored
            .iter()
            .filter(|c| c.credited)
            .map(|c| CanaryHit {
                step,
                kind: c.kind,
                prompt: c.prompt.clone(),
                response: c.response.clone(),
                reward: c.reward,
            })
            .collect();
        m.integrity.insert(
            "integrity/canary_credited".into(),
            hits.len() as f64 / scored.len() as f64,
        );
        if let Some(w) = self.log.record_canaries(step, scored.len(), hits) {
            warn(&w);
        }
        Ok(())
    }
}

impl Monitor {
    /// Writes the report section (`integrity.md`) of the phase, however it ended; it is
    /// rendered from the log, which every step saves.
    pub fn finish(&self) -> Result<()> {
        if self.writes && self.cfg.enabled {
            write_atomic(&self.run.path(SECTION_FILE), self.log.markdown().as_bytes())?;
        }
        Ok(())
    }
}

/// The report section of run `run`, rendered from its monitor's log, when it has one.
pub fn section(run: &RunDir) -> Option<String> {
    let path = run.path(LOG_FILE);
    if !path.exists() {
        return None;
    }
    IntegrityLog::load(&path).ok().map(|log| log.markdown())
}

/// A monitor warning on stderr (the run goes on).
fn warn(w: &str) {
    eprintln!("warning: reward integrity: {w}");
}
