//! The run loop's experiment tracking: the `[logging]` section of the run directory's
//! `config.toml` opens reinforge-track's sinks for a phase (only on the process that writes
//! the run's files); each metrics line goes to them, and the phase's end uploads the run's
//! report files. A run directory without `config.toml` or `[logging]` is not tracked.

use std::path::PathBuf;

use reinforge_track::{Settings, Tracker};

use crate::config::LoggingConfig;
use crate::run_dir::RunDir;

/// The sinks `run`'s config asks for, named `<run>/<phase>` in MLflow; `None` when it asks
/// for none.
pub(super) fn open(run: &RunDir, phase: &str) -> Option<Tracker> {
    let text = std::fs::read_to_string(run.path("config.toml")).ok()?;
    let config: toml::Value = text.parse().ok()?;
    let logging: LoggingConfig = match config.get("logging") {
        Some(v) => v.clone().try_into().ok()?,
        None => return None,
    };
    if !logging.tensorboard && logging.mlflow_uri.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    crate::overrides::flat_keys(&config, "", &mut params);
    let run_name = run
        .root
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    let settings = Settings {
        tensorboard: logging.tensorboard,
        mlflow_uri: Some(logging.mlflow_uri).filter(|u| !u.is_empty()),
        mlflow_experiment: logging.mlflow_experiment,
        run_name: format!("{run_name}/{phase}"),
        params,
    };
    Some(Tracker::start(&settings, &run.root))
}

/// The files uploaded at a phase's end: the config, the metrics file, and the report
/// (`report.md`, `summary.json`, the PNG charts) where they exist by then.
pub(super) fn artifacts(run: &RunDir, metrics_file: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["config.toml", metrics_file, "report.md", "summary.json"]
        .iter()
        .map(|f| run.path(f))
        .collect();
    if let Ok(dir) = std::fs::read_dir(&run.root) {
        let mut pngs: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "png"))
            .collect();
        pngs.sort();
        files.extend(pngs);
    }
    files
}
