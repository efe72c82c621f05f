//! A deterministic [`Generator`] for the policy routes' tests and the `scripted_policy` example.
//!
//! Step `k` of a row whose prompt sums to `s` emits `(s + k + shift + noise) % vocab` with
//! log-prob `-0.1 * (k + 1)`; its alternatives are the next ids with log-probs 1, 2, ... lower.
//! `shift` stands for the weights: `load_weights(dir)` reads it from `dir/scripted.json`
//! (`{"shift": N}`; anything else is an error and the old shift stays). `noise` is 0 at
//! temperature 0; otherwise a per-row value drawn from the batch seed (or, unseeded, from a
//! counter, so unseeded sampled batches differ). Every batch is logged, and each step can be
//! slowed down, so tests can count batches and pause mid-batch, and so can each weight load. A batch whose first prompt
//! starts with [`PANIC_TOKEN`] panics (to test that the server survives it). [`Probe::hold`]
//! holds each batch, once logged, before its first step until the test releases it: a test
//! queues requests behind a running batch without racing its decoding.

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use reinforge_serve::policy::{
    Batch, Finish, Generator, Sequence, StepControl, StepToken, StepTokens,
};

/// A prompt starting with this id makes the generator panic.
pub const PANIC_TOKEN: i64 = 499;

/// What a test can see and steer from outside the worker thread.
#[derive(Clone, Default)]
pub struct Probe {
    /// Every batch decoded, in order.
    pub batches: Arc<Mutex<Vec<Batch>>>,
    /// Sleep per decoding step.
    pub step_delay: Arc<Mutex<Duration>>,
    /// Sleep per weight load (so a test knows a lower bound of the load time).
    pub load_delay: Arc<Mutex<Duration>>,
    /// While true, each batch waits after it is logged, before its first step.
    held: Arc<(Mutex<bool>, Condvar)>,
}

/// Releases the batches held by [`Probe::hold`] when dropped (also when the test panics, so
/// the server's worker can stop).
pub struct Hold(Arc<(Mutex<bool>, Condvar)>);

impl Drop for Hold {
    fn drop(&mut self) {
        let (held, released) = &*self.0;
        *held.lock().unwrap_or_else(|e| e.into_inner()) = false;
        released.notify_all();
    }
}

impl Probe {
    pub fn batches(&self) -> Vec<Batch> {
        self.batches.lock().unwrap().clone()
    }

    pub fn set_delay(&self, d: Duration) {
        *self.step_delay.lock().unwrap() = d;
    }

    pub fn set_load_delay(&self, d: Duration) {
        *self.load_delay.lock().unwrap() = d;
    }

    /// Holds every batch that starts from now on (logged in [`Probe::batches`], then waiting
    /// before its first step) until the returned [`Hold`] is dropped.
    pub fn hold(&self) -> Hold {
        *self.held.0.lock().unwrap() = true;
        Hold(self.held.clone())
    }

    /// Waits while [`Probe::hold`] holds batches.
    fn wait_released(&self) {
        let (held, released) = &*self.held;
        let mut h = held.lock().unwrap_or_else(|e| e.into_inner());
        while *h {
            h = released.wait(h).unwrap_or_else(|e| e.into_inner());
        }
    }
}

pub struct Scripted {
    pub vocab: usize,
    pub max_len: usize,
    pub eos: Vec<i64>,
    pub shift: i64,
    unseeded: u64,
    pub probe: Probe,
}

impl Scripted {
    pub fn new(vocab: usize, max_len: usize, eos: Vec<i64>) -> (Scripted, Probe) {
        let probe = Probe::default();
        (
            Scripted {
                vocab,
                max_len,
                eos,
                shift: 0,
                unseeded: 0,
                probe: probe.clone(),
            },
            probe,
        )
    }

    /// The token at step `k` of a row with prompt `p` and no noise.
    pub fn token(vocab: usize, shift: i64, p: &[i64], k: usize) -> i64 {
        (p.iter().sum::<i64>() + k as i64 + shift).rem_euclid(vocab as i64)
    }
}

/// splitmix64: a small well-known mixer for the per-row noise.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Generator for Scripted {
    fn generate(
        &mut self,
        batch: &Batch,
        on_step: &mut dyn FnMut(StepTokens) -> StepControl,
    ) -> anyhow::Result<Vec<Sequence>> {
        self.probe.batches.lock().unwrap().push(batch.clone());
        self.probe.wait_released();
        if batch.prompts[0].first() == Some(&PANIC_TOKEN) {
            panic!("scripted panic");
        }
        let s = &batch.sampling;
        let base = match batch.seed {
            Some(seed) => seed,
            None => {
                self.unseeded += 1;
                self.unseeded.wrapping_mul(0x1000_0001)
            }
        };
        let noise = |r: usize| -> i64 {
            if s.temperature == 0.0 {
                0
            } else {
                (mix(base ^ (r as u64 + 1)) % self.vocab as u64) as i64
            }
        };
        let fresh = || Sequence {
            tokens: vec![],
            logprobs: vec![],
            top: vec![],
            prompt: vec![],
            finish: Finish::Length,
        };
        // Rows admitted mid-batch are appended (continuous batching); each row counts its own
        // steps, so an admitted row decodes what it decodes alone.
        let mut prompts = batch.prompts.clone();
        let mut limit: Vec<usize> = vec![s.max_tokens; prompts.len()];
        let mut out: Vec<Sequence> = prompts.iter().map(|_| fresh()).collect();
        let mut active: Vec<bool> = vec![true; out.len()];
        while active.iter().any(|&a| a) {
            let delay = *self.probe.step_delay.lock().unwrap();
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            let mut step = vec![];
            for (r, p) in prompts.iter().enumerate() {
                if !active[r] {
                    continue;
                }
                let seq = &mut out[r];
                let k = seq.tokens.len();
                let tok = Self::token(self.vocab, self.shift + noise(r), p, k);
                let lp = -0.1 * (k as f32 + 1.0);
                seq.tokens.push(tok);
                seq.logprobs.push(lp);
                if s.top_logprobs > 0 {
                    seq.top.push(
                        (0..s.top_logprobs)
                            .map(|i| ((tok + i as i64) % self.vocab as i64, lp - i as f32))
                            .collect(),
                    );
                }
                let end = if s.stop_token_ids.contains(&tok) {
                    Some(Finish::Stop)
                } else if seq.tokens.len() >= limit[r] {
                    Some(Finish::Length)
                } else {
                    None
                };
                if let Some(e) = end {
                    seq.finish = e;
                    active[r] = false;
                }
                step.push(StepToken {
                    row: r,
                    token: tok,
                    logprob: lp,
                    end,
                });
            }
            let control = on_step(&step);
            if control.stop {
                for (r, seq) in out.iter_mut().enumerate() {
                    if active[r] {
                        seq.finish = Finish::Abort;
                    }
                }
                return Ok(out);
            }
            for (p, n) in control.admit {
                prompts.push(p);
                limit.push(n);
                out.push(fresh());
                active.push(true);
            }
        }
        Ok(out)
    }

    fn load_weights(&mut self, dir: &Path) -> anyhow::Result<()> {
        std::thread::sleep(*self.probe.load_delay.lock().unwrap());
        let path = dir.join("scripted.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let shift = v["shift"]
            .as_i64()
            .ok_or_else(|| anyhow::anyhow!("{}: no integer `shift`", path.display()))?;
        self.shift = shift;
        Ok(())
    }

    fn checksum(&self) -> String {
        format!("{:016x}", mix(self.shift as u64))
    }

    fn max_model_len(&self) -> usize {
        self.max_len
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.eos.clone()
    }
}
