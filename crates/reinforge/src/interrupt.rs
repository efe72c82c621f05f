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
