//! The run loop's experiment tracking: a phase opens reinforge-track's sinks (only on the
//! process that writes the run's files); each metrics line goes to them, and the phase's end
//! uploads the run's report files. What a run asks for is either given to the trainer
//! ([`Tracking`], the offline commands' `--tensorboard` / `--mlflow-uri`, with their options
//! as parameters) or read from the `[logging]` section of the run directory's `config.toml`
//! (`reinforge train`, with the resolved config as parameters). A run with neither is not
//! tracked.

use std::path::PathBuf;

use reinforge_track::{Settings, Tracker};

use crate::config::LoggingConfig;
use crate::run_dir::RunDir;

/// Where a run's metrics go besides its metrics file, and the parameters MLflow records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tracking {
    pub logging: LoggingConfig,
    /// The run's settings as `(name, value)`, logged once per MLflow run.
    pub params: Vec<(String, String)>,
    /// The run's resolved settings as TOML, written to `config.toml` when a phase starts (the
    /// offline commands: `--config` reads the file back); `None` for runs that have one.
    pub config: Option<String>,
}

impl Tracking {
    /// Whether any sink is asked for.
    pub fn on(&self) -> bool {
        self.logging.tensorboard || !self.logging.mlflow_uri.is_empty()
    }
}

/// The `[logging]` section of `run`'s `config.toml` with the whole config as parameters;
/// `None` without the file or the section.
fn from_config(run: &RunDir) -> Option<Tracking> {
    let text = std::fs::read_to_string(run.path("config.toml")).ok()?;
    let config: toml::Value = text.parse().ok()?;
    let logging: LoggingConfig = config.get("logging")?.clone().try_into().ok()?;
    let mut params = Vec::new();
    crate::overrides::flat_keys(&config, "", &mut params);
    Some(Tracking {
        logging,
        params,
        config: None,
    })
}

/// The sinks `given` (else `run`'s config) asks for, named `<run>/<phase>` in MLflow; `None`
/// when it asks for none.
pub(super) fn open(run: &RunDir, phase: &str, given: Option<&Tracking>) -> Option<Tracker> {
    let read;
    let tracking = match given {
        Some(t) => t,
        None => {
            read = from_config(run)?;
            &read
        }
    };
    tracking.on().then(|| start(tracking, run, phase))
}

/// Starts the sinks of `tracking` for `phase` of `run`.
fn start(tracking: &Tracking, run: &RunDir, phase: &str) -> Tracker {
    let logging = &tracking.logging;
    let run_name = run
        .root
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    let settings = Settings {
        tensorboard: logging.tensorboard,
        mlflow_uri: Some(logging.mlflow_uri.clone()).filter(|u| !u.is_empty()),
        mlflow_experiment: logging.mlflow_experiment.clone(),
        run_name: format!("{run_name}/{phase}"),
        params: tracking.params.clone(),
    };
    Tracker::start(&settings, &run.root)
}

/// The files uploaded at a phase's end: the config, the metrics file, and the report files
/// that exist by then.
pub(super) fn artifacts(run: &RunDir, metrics_file: &str) -> Vec<PathBuf> {
    let mut files = vec![run.path("config.toml"), run.path(metrics_file)];
    files.extend(report_files(run));
    files
}

/// The report files a run writes after its last step: `report.md`, `summary.json` and the
/// PNG charts (those that exist are uploaded).
pub(super) fn report_files(run: &RunDir) -> Vec<PathBuf> {
    let mut files = vec![run.path("report.md"), run.path("summary.json")];
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
