//! Where the real model of the real-model tests is: SmolLM2-135M-Instruct, converted by
//! `scripts/real_model.sh` (which `scripts/test.sh` runs) into `.cache/models`. Shared by the
//! test suites of reinforge-torch and the binary (`#[path]`-included), so the skip rule is one.

use std::path::{Path, PathBuf};

/// The converted checkpoint, or `None` (a recorded skip, see [`skip`]) when and only when
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
        skip(&format!(
            "the real model could not be downloaded ({}):\n{why}",
            unreachable.display()
        ));
        return None;
    }
    panic!(
        "the real model is missing at {}: run scripts/real_model.sh (scripts/test.sh runs it)",
        dir.display()
    );
}

/// Reports the calling test as skipped: on stderr, and, when `REINFORGE_SKIPS_DIR` is set
/// (`scripts/test.sh` sets it), as one file there named after the test, so that the script
/// counts the skips and shows them instead of counting them as passes (and CI fails on them).
/// Every test that cannot run here calls this before it returns, never a bare `return`.
pub fn skip(why: &str) {
    let test = format!(
        "{}::{}",
        env!("CARGO_PKG_NAME"),
        std::thread::current().name().unwrap_or("?")
    );
    eprintln!("SKIPPED {test}: {why}");
    if let Some(dir) = std::env::var_os("REINFORGE_SKIPS_DIR") {
        let dir = PathBuf::from(dir);
        let file: String = test
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!("{file}.{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, format!("{test}\n{why}")))
            .unwrap_or_else(|e| panic!("recording the skip in {}: {e}", path.display()));
    }
}
