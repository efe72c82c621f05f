//! Pushing the trainer's weights to remote engines after an update: the policy is written as
//! a Hugging Face checkpoint into a directory every engine can read, each engine is asked to
//! load it (SGLang's `POST /update_weights_from_disk {model_path, weight_version}`, which
//! `reinforge serve` implements), and the run continues only when every engine answers with
//! the new version and, where it reports one, the same weights checksum as the trainer's
//! (`Policy::weights_checksum`): a silently stale or partial load stops the run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use reinforge_torch::Policy;
use serde_json::json;

use super::openai::RemoteEngines;
use super::PushStats;

/// Writes `policy` as version `version` under `dir` and has every engine load it; removes the
/// previous versions' files once all engines hold the new one.
pub fn push(
    engines: &RemoteEngines,
    policy: &Policy,
    version: u64,
    dir: &Path,
) -> Result<PushStats> {
    let start = Instant::now();
    let target = dir.join(format!("v{version}"));
    if target.exists() {
        std::fs::remove_dir_all(&target)
            .with_context(|| format!("clearing {}", target.display()))?;
    }
    policy
        .save(&target)
        .with_context(|| format!("writing the weights to push into {}", target.display()))?;
    let bytes = dir_bytes(&target)?;
    let checksum = policy.weights_checksum();
    let model_path = std::path::absolute(&target)?;
    let body = json!({
        "model_path": model_path,
        "weight_version": version.to_string(),
    });
    let answers: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = engines
            .urls
            .iter()
            .map(|url| {
                let body = &body;
                let checksum = &checksum;
                s.spawn(move || {
                    let a = engines.post(url, "/update_weights_from_disk", body)?;
                    check_answer(url, &a, version, checksum)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("a push thread panicked")))
            .collect()
    });
    for a in answers {
        a?;
    }
    engines.confirm(version);
    remove_older(dir, version)?;
    Ok(PushStats {
        seconds: start.elapsed().as_secs_f64(),
        bytes,
    })
}

/// An engine's answer to a load: success, the version asked for, the trainer's checksum.
fn check_answer(url: &str, a: &serde_json::Value, version: u64, checksum: &str) -> Result<()> {
    if a["success"].as_bool() != Some(true) {
        bail!(
            "rollout engine {url} did not load weight version {version}: {}",
            a["message"].as_str().unwrap_or("no message")
        );
    }
    let reported = match &a["weight_version"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if let Some(v) = reported {
        if v != version.to_string() {
            bail!(
                "rollout engine {url} reports weight version {v} after loading version {version}"
            );
        }
    }
    if let Some(c) = a["checksum"].as_str() {
        if c != checksum {
            bail!(
                "rollout engine {url} holds weights with checksum {c}, the trainer's are {checksum} \
                 (a partial load, or an engine serving another dtype: serve with --dtype float32)"
            );
        }
    }
    Ok(())
}

/// Bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        total += e?.metadata()?.len();
    }
    Ok(total)
}

/// Deletes `v<N>` directories of `dir` with `N < version`.
fn remove_older(dir: &Path, version: u64) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let path: PathBuf = e?.path();
        let old = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix('v'))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|v| v < version);
        if old {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}
