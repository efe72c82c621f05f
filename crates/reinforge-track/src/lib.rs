//! Experiment tracking of a run's metrics lines: TensorBoard event files ([`tensorboard`]) and
//! an MLflow tracking server through its REST API ([`mlflow`]). [`Tracker`] fans one metrics
//! line out to both; a sink that fails warns once on stderr and is then left out, so tracking
//! never stops a run.

pub mod mlflow;
pub mod tensorboard;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Every number of a metrics line as `(name, value)`: nested objects flatten to `a/b`,
/// booleans, strings, nulls and arrays are not scalars and are left out.
pub fn scalars(line: &Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    flatten(line, "", &mut out);
    out
}

fn flatten(v: &Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}/{k}")
                };
                flatten(v, &key, out);
            }
        }
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.push((prefix.to_string(), x));
            }
        }
        _ => {}
    }
}

/// Where a run's tracking goes.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Write `<run>/tensorboard/events.out.tfevents.*`.
    pub tensorboard: bool,
    /// An MLflow tracking server, e.g. `http://127.0.0.1:5000`.
    pub mlflow_uri: Option<String>,
    /// MLflow experiment name (created when absent).
    pub mlflow_experiment: String,
    /// The run's name in MLflow.
    pub run_name: String,
    /// Parameters logged once (the resolved config, flattened).
    pub params: Vec<(String, String)>,
}

/// The live sinks of one run phase.
pub struct Tracker {
    tensorboard: Option<tensorboard::EventWriter>,
    mlflow: Option<mlflow::Run>,
    /// The MLflow run after [`Tracker::finish`], kept for [`Tracker::upload`].
    ended: Option<mlflow::Run>,
}

/// Prints the warning of a failed sink, once per sink and process (a run's later phases
/// retry quietly).
fn warn(sink: &'static str, e: &anyhow::Error) {
    static WARNED: std::sync::Mutex<Vec<&str>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if !warned.contains(&sink) {
        warned.push(sink);
        eprintln!("warning: {sink} tracking stopped (the run goes on): {e:#}");
    }
}

impl Tracker {
    /// Opens the sinks `settings` asks for under `run_root`; one that cannot start warns and
    /// is left out.
    pub fn start(settings: &Settings, run_root: &Path) -> Self {
        let tensorboard = settings.tensorboard.then(|| {
            tensorboard::EventWriter::create(&run_root.join("tensorboard"))
                .map_err(|e| warn("TensorBoard", &e))
                .ok()
        });
        let mlflow = settings.mlflow_uri.as_ref().map(|uri| {
            mlflow::Run::start(
                uri,
                &settings.mlflow_experiment,
                &settings.run_name,
                &settings.params,
            )
            .map_err(|e| warn("MLflow", &e))
            .ok()
        });
        Self {
            tensorboard: tensorboard.flatten(),
            mlflow: mlflow.flatten(),
            ended: None,
        }
    }

    /// Whether any sink is live.
    pub fn active(&self) -> bool {
        self.tensorboard.is_some() || self.mlflow.is_some()
    }

    /// Logs every scalar of `line` at `step`, each name prefixed with `prefix/` (the metrics
    /// file it came from).
    pub fn log(&mut self, prefix: &str, step: i64, line: &Value) {
        if !self.active() {
            return;
        }
        let values: Vec<(String, f64)> = scalars(line)
            .into_iter()
            .map(|(k, v)| (format!("{prefix}/{k}"), v))
            .collect();
        if let Some(w) = &mut self.tensorboard {
            if let Err(e) = w.scalars(step, &values) {
                warn("TensorBoard", &e);
                self.tensorboard = None;
            }
        }
        if let Some(r) = &mut self.mlflow {
            if let Err(e) = r.metrics(step, &values) {
                warn("MLflow", &e);
                self.mlflow = None;
            }
        }
    }

    /// Ends the phase: flushes the event file, uploads `artifacts` (files that exist) to
    /// MLflow and marks its run finished.
    pub fn finish(&mut self, artifacts: &[PathBuf]) {
        if let Some(w) = &mut self.tensorboard {
            if let Err(e) = w.flush() {
                warn("TensorBoard", &e);
            }
        }
        if let Some(r) = self.mlflow.take() {
            match r.finish(artifacts) {
                Ok(()) => self.ended = Some(r),
                Err(e) => warn("MLflow", &e),
            }
        }
        self.tensorboard = None;
    }

    /// Uploads `artifacts` (files that exist) to the finished phase's MLflow run: the files a
    /// run writes after its last step (its report).
    pub fn upload(&mut self, artifacts: &[PathBuf]) {
        if let Some(r) = &self.ended {
            if let Err(e) = r.upload(artifacts) {
                warn("MLflow", &e);
                self.ended = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_flatten_objects_and_skip_non_numbers() {
        let line = serde_json::json!({"a": 1, "b": {"c": 2.5}, "s": "x", "t": true, "n": null});
        let mut got = scalars(&line);
        got.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(got, vec![("a".to_string(), 1.0), ("b/c".to_string(), 2.5)]);
    }
}
