//! A run on an MLflow tracking server through its REST API
//! (<https://mlflow.org/docs/latest/rest-api.html>): the experiment by name
//! (`experiments/get-by-name`, else `experiments/create`), `runs/create`, parameters and
//! metrics through `runs/log-batch` (at most 100 parameters and 1000 metrics per call),
//! artifacts uploaded through the server's artifact proxy
//! (`PUT /api/2.0/mlflow-artifacts/artifacts/<path>`, `mlflow server`'s default since 2.0),
//! and `runs/update` to `FINISHED`.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// MLflow's caps per `log-batch` call.
const MAX_PARAMS: usize = 100;
const MAX_METRICS: usize = 1000;
/// Longest parameter value MLflow stores (older servers: 500 characters).
const MAX_PARAM_VALUE: usize = 500;

/// An MLflow run being logged to.
pub struct Run {
    agent: ureq::Agent,
    base: String,
    pub run_id: String,
    /// Where the server keeps the run's artifacts (`mlflow-artifacts:/...` when proxied).
    pub artifact_uri: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Run {
    /// Creates a run named `name` in `experiment` (created when absent) on the server at
    /// `uri`, and logs `params`.
    pub fn start(
        uri: &str,
        experiment: &str,
        name: &str,
        params: &[(String, String)],
    ) -> Result<Self> {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(10))
            .build();
        let base = uri.trim_end_matches('/').to_string();
        let mut run = Self {
            agent,
            base,
            run_id: String::new(),
            artifact_uri: String::new(),
        };
        let experiment_id = run.experiment(experiment)?;
        let created = run.post(
            "runs/create",
            json!({"experiment_id": experiment_id, "run_name": name, "start_time": now_ms()}),
        )?;
        let info = &created["run"]["info"];
        run.run_id = info["run_id"]
            .as_str()
            .ok_or_else(|| anyhow!("runs/create answered without run.info.run_id: {created}"))?
            .to_string();
        run.artifact_uri = info["artifact_uri"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for chunk in params.chunks(MAX_PARAMS) {
            let params: Vec<Value> = chunk
                .iter()
                .map(|(k, v)| json!({"key": key(k), "value": v.chars().take(MAX_PARAM_VALUE).collect::<String>()}))
                .collect();
            run.post(
                "runs/log-batch",
                json!({"run_id": run.run_id, "params": params}),
            )?;
        }
        Ok(run)
    }

    /// The id of the experiment named `name`, created when the server has none.
    fn experiment(&self, name: &str) -> Result<String> {
        let url = format!("{}/api/2.0/mlflow/experiments/get-by-name", self.base);
        match self.agent.get(&url).query("experiment_name", name).call() {
            Ok(r) => {
                let v: Value = r.into_json()?;
                id(&v["experiment"]["experiment_id"])
            }
            Err(ureq::Error::Status(404, _)) => {
                let v = self.post("experiments/create", json!({"name": name}))?;
                id(&v["experiment_id"])
            }
            Err(e) => Err(anyhow!("GET {url}: {e}")),
        }
    }

    /// Logs `values` at `step` (non-finite values, which JSON cannot carry, are left out).
    pub fn metrics(&mut self, step: i64, values: &[(String, f64)]) -> Result<()> {
        let t = now_ms();
        let metrics: Vec<Value> = values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| json!({"key": key(k), "value": v, "timestamp": t, "step": step}))
            .collect();
        for chunk in metrics.chunks(MAX_METRICS) {
            self.post(
                "runs/log-batch",
                json!({"run_id": self.run_id, "metrics": chunk}),
            )?;
        }
        Ok(())
    }

    /// Uploads each existing file of `artifacts` (by its file name) and ends the run.
    pub fn finish(&self, artifacts: &[PathBuf]) -> Result<()> {
        let upload = self.upload(artifacts);
        self.post(
            "runs/update",
            json!({"run_id": self.run_id, "status": "FINISHED", "end_time": now_ms()}),
        )?;
        upload
    }

    /// Uploads each existing file of `artifacts` (by its file name); an ended run takes them
    /// too (files written after the run's last step, such as its report).
    pub fn upload(&self, artifacts: &[PathBuf]) -> Result<()> {
        artifacts
            .iter()
            .filter(|p| p.is_file())
            .try_for_each(|p| self.artifact(p))
    }

    /// `PUT /api/2.0/mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<file>`.
    fn artifact(&self, path: &std::path::Path) -> Result<()> {
        let Some(rest) = self.artifact_uri.strip_prefix("mlflow-artifacts:") else {
            bail!(
                "the server stores artifacts at {:?}, not through its artifact proxy (start it with --serve-artifacts)",
                self.artifact_uri
            );
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow!("{}: no file name", path.display()))?;
        let url = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{}/{name}",
            self.base,
            rest.trim_start_matches('/').trim_end_matches('/')
        );
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        self.agent
            .put(&url)
            .send_bytes(&bytes)
            .map_err(|e| anyhow!("PUT {url}: {e}"))?;
        Ok(())
    }

    /// `POST /api/2.0/mlflow/<route>` with a JSON body; the answer's JSON.
    fn post(&self, route: &str, body: Value) -> Result<Value> {
        let url = format!("{}/api/2.0/mlflow/{route}", self.base);
        match self.agent.post(&url).send_json(body) {
            Ok(r) => Ok(r.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                bail!("POST {url}: HTTP {code}: {text}")
            }
            Err(e) => bail!("POST {url}: {e}"),
        }
    }
}

/// `name` as MLflow accepts a metric or parameter key: letters, digits, `_ - . / :` and spaces
/// (`mlflow/utils/validation.py`, `validate_param_and_metric_name`); any other character
/// becomes `_`, since one refused key fails its whole `log-batch` call.
pub fn key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_alphanumeric() || "_-./: ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// An id the server sent as a string (MLflow's) or a number.
fn id(v: &Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => bail!("no experiment_id in the server's answer"),
    }
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn keys_mlflow_refuses_get_underscores() {
        assert_eq!(
            key("metrics/rewards/accuracies"),
            "metrics/rewards/accuracies"
        );
        assert_eq!(key("eval.pass_at_k: 1-2"), "eval.pass_at_k: 1-2");
        assert_eq!(key("metrics/pass@1"), "metrics/pass_1");
        assert_eq!(key("a+b (%)"), "a_b ___");
    }
}
