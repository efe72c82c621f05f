//! Ctrl-C: the first press asks the run loop to checkpoint and stop after the current step;
//! the second exits at once.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

/// Set by the Ctrl-C handler; run loops check it between steps.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Installs the handler: first Ctrl-C finishes the step and checkpoints; second exits.
pub fn install() -> Result<()> {
    ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("\nsecond Ctrl-C: exiting without a checkpoint");
            std::process::exit(130);
        }
        eprintln!("\nCtrl-C: finishing the current step and saving a checkpoint (Ctrl-C again to quit now)");
    })
    .context("installing the Ctrl-C handler")
}

/// The error of a command stopped by Ctrl-C after saving `checkpoints/latest`: the binary
/// exits 130 (as `reinforge train` does) with this message.
#[derive(Debug)]
pub struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "stopped after saving checkpoints/latest; run the same command again to continue",
        )
    }
}

impl std::error::Error for Stopped {}

/// Whether Ctrl-C was pressed on any rank of `dp` (every rank must call it at the same step,
/// so all of them stop together); this process's flag without `dp`.
pub fn interrupted_on_any(dp: Option<&crate::dp::Dp>) -> Result<bool> {
    match dp {
        Some(d) => Ok(d.sum(f64::from(u8::from(interrupted())))? > 0.0),
        None => Ok(interrupted()),
    }
}
