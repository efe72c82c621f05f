//! Where the real model of the real-model tests is: SmolLM2-135M-Instruct, converted by
//! `scripts/real_model.sh` (which `scripts/test.sh` runs) into `.cache/models`. Shared by the
//! test suites of reinforge-torch and the binary (`#[path]`-included), so the skip rule is one.

use std::path::{Path, PathBuf};

/// The converted checkpoint, or `None` (with a visible message) when and only when
/// `scripts/real_model.sh` recorded that the package registry could not be reached. Panics
/// when the model was never fetched: a silently skipped test would hide a missing set-up step.
pub fn real_model(root: &Path) -> Option<PathBuf> {
    let models = root.join(".cache/models");
    let dir = models.join("SmolLM2-135M-Instruct");
    if dir.join("conversion_check.json").is_file() {
        return Some(dir);
    }
    let unreachable = models.join("UNREACHABLE");
    if let Ok(why) = std::fs::read_to_string(&unreachable) {
        eprintln!(
            "SKIPPED: the real model could not be downloaded ({}):\n{why}",
            unreachable.display()
        );
        return None;
    }
    panic!(
        "the real model is missing at {}: run scripts/real_model.sh (scripts/test.sh runs it)",
        dir.display()
    );
}
