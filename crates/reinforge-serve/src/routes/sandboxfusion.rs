//! `POST /run_code`: SandboxFusion's request and response schema, for Python and Bash.
//!
//! Schemas from SandboxFusion (`sandbox/server/sandbox_api.py` `RunCodeRequest`,
//! `RunCodeResponse`, `parse_run_status`; `sandbox/runners/types.py` `CommandRunResult`;
//! `sandbox/runners/base.py` `run_command_bare`, bytedance/SandboxFusion @ 53a6341):
//!
//! - request `{code, language, compile_timeout=10, run_timeout=10, memory_limit_MB=-1, stdin?,
//!   files: {path: base64 | null}, fetch_files: [path], args}`; unknown keys are ignored (as
//!   pydantic does); `args` (pytest's) and `compile_timeout` (no compiled language here) are
//!   accepted and unused;
//! - response `{status: Success|Failed|SandboxError, message, compile_result: null,
//!   run_result: {status: Finished|TimeLimitExceeded|Error, execution_time, return_code,
//!   stdout, stderr}, executor_pod_name, files: {path: base64}}`;
//! - status: `Error` run -> `SandboxError` with the run's stderr as message; a timeout ->
//!   `Failed` (return_code null, output so far kept); a non-zero return code -> `Failed`;
//!   else `Success`. A process killed by a signal has return code `-signal` (asyncio's
//!   convention, which SandboxFusion reports), and a memory-limit kill is a `Finished` run
//!   with a non-zero code, as under SandboxFusion's rlimits.
//!
//! Languages other than `python` and `bash` are a 422 naming `language` (SandboxFusion runs
//! more; saying so beats a `SandboxError` that clients retry).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::Json;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use reinforge_sandbox::{Language, RunRequest, RunResult, RunStatus};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiJson};
use crate::limit::Slot;
use crate::AppState;

fn ten() -> f64 {
    10.0
}

fn unlimited() -> i64 {
    -1
}

/// SandboxFusion's `RunCodeRequest`.
#[derive(Deserialize)]
pub struct RunCodeRequest {
    #[serde(default = "ten")]
    pub compile_timeout: f64,
    #[serde(default = "ten")]
    pub run_timeout: f64,
    #[serde(default = "unlimited", rename = "memory_limit_MB")]
    pub memory_limit_mb: i64,
    pub code: String,
    #[serde(default)]
    pub stdin: Option<String>,
    pub language: String,
    #[serde(default)]
    pub files: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub fetch_files: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
}

/// SandboxFusion's `RunStatus`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCodeStatus {
    Success,
    Failed,
    SandboxError,
}

/// SandboxFusion's `CommandRunStatus`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandRunStatus {
    Finished,
    Error,
    TimeLimitExceeded,
}

/// SandboxFusion's `CommandRunResult`.
#[derive(Serialize, Deserialize, Debug)]
pub struct CommandRunResult {
    pub status: CommandRunStatus,
    pub execution_time: Option<f64>,
    pub return_code: Option<i32>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// SandboxFusion's `RunCodeResponse`.
#[derive(Serialize, Deserialize, Debug)]
pub struct RunCodeResponse {
    pub status: RunCodeStatus,
    pub message: String,
    pub compile_result: Option<CommandRunResult>,
    pub run_result: Option<CommandRunResult>,
    pub executor_pod_name: Option<String>,
    pub files: BTreeMap<String, String>,
}

/// Output as SandboxFusion's `try_decode` gives it: UTF-8, or a `[DecodeError]` note.
fn decode(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(e) => format!("[DecodeError] {e}"),
    }
}

/// A relative path that stays inside the working directory.
fn safe_path(p: &str) -> bool {
    let path = std::path::Path::new(p);
    // The sandbox's rule: `/`-separated normal components only (`./x` and `a//b` are refused
    // here, as a 422, rather than by the sandbox as a SandboxError).
    !p.is_empty()
        && p.len() <= 4096
        && !p.contains('\0')
        && path.is_relative()
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// `--sandbox-max-fetch-files` and `--sandbox-max-fetch-bytes`.
#[derive(Debug, Clone, Copy)]
pub struct FetchCaps {
    pub files: usize,
    pub bytes: u64,
}

/// Validates the request and turns it into the sandbox's.
fn to_run_request(
    req: RunCodeRequest,
    caps: &reinforge_sandbox::Limits,
    fetch: FetchCaps,
) -> Result<RunRequest, ApiError> {
    let language = match req.language.as_str() {
        "python" => Language::Python,
        "bash" => Language::Bash,
        other => {
            return Err(ApiError::field(
                "language",
                format!("language {other:?} is not supported by this server (python, bash)"),
            ))
        }
    };
    if !(req.run_timeout.is_finite() && req.run_timeout > 0.0) {
        return Err(ApiError::field(
            "run_timeout",
            "run_timeout must be a positive number of seconds",
        ));
    }
    let mut files = BTreeMap::new();
    for (name, content) in req.files {
        if !safe_path(&name) {
            return Err(ApiError::field(
                format!("files.{name}"),
                "file paths must be relative and stay inside the working directory",
            ));
        }
        // SandboxFusion's `restore_files` skips entries whose content is not a string
        let Some(content) = content else { continue };
        let bytes = B64
            .decode(content.as_bytes())
            .map_err(|e| ApiError::field(format!("files.{name}"), format!("not base64: {e}")))?;
        files.insert(name, bytes);
    }
    if req.fetch_files.len() > fetch.files {
        return Err(ApiError::field(
            "fetch_files",
            format!(
                "{} files asked for; at most {} per run (--sandbox-max-fetch-files)",
                req.fetch_files.len(),
                fetch.files
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, name) in req.fetch_files.iter().enumerate() {
        if !safe_path(name) {
            return Err(ApiError::field(
                format!("fetch_files[{i}]"),
                "file paths must be relative and stay inside the working directory",
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(ApiError::field(
                format!("fetch_files[{i}]"),
                format!("{name:?} is asked for twice"),
            ));
        }
    }
    let mut limits = caps.clone();
    // Each fetched file may fill its share of --sandbox-max-fetch-bytes (the sandbox caps the
    // size of each file, so the share bounds the total); the share also caps files written.
    if !req.fetch_files.is_empty() {
        let share = fetch.bytes / req.fetch_files.len() as u64;
        limits.max_file_bytes = limits.max_file_bytes.min(share.max(1));
    }
    let wall = Duration::from_secs_f64(req.run_timeout.min(1e6));
    limits.wall_time = limits.wall_time.min(wall);
    limits.cpu_time = limits.cpu_time.min(wall);
    if req.memory_limit_mb > 0 {
        limits.memory_bytes = limits.memory_bytes.min((req.memory_limit_mb as u64) << 20);
    }
    Ok(RunRequest {
        language,
        code: req.code,
        stdin: req.stdin.map(String::into_bytes),
        files,
        fetch_files: req.fetch_files,
        limits,
    })
}

/// The SandboxFusion response for a finished sandbox run.
pub fn to_response(r: RunResult) -> RunCodeResponse {
    let (cmd_status, return_code) = match r.status {
        RunStatus::Finished | RunStatus::MemoryLimitExceeded | RunStatus::Killed => (
            CommandRunStatus::Finished,
            r.exit_code.or(r.signal.map(|s| -s)),
        ),
        RunStatus::TimeLimitExceeded => (CommandRunStatus::TimeLimitExceeded, None),
        RunStatus::SandboxError => (CommandRunStatus::Error, None),
    };
    let stderr = if cmd_status == CommandRunStatus::Error {
        r.message.clone()
    } else {
        decode(&r.stderr)
    };
    let (status, message) = match cmd_status {
        CommandRunStatus::Error => (RunCodeStatus::SandboxError, stderr.clone()),
        CommandRunStatus::TimeLimitExceeded => (RunCodeStatus::Failed, String::new()),
        CommandRunStatus::Finished if return_code != Some(0) => {
            (RunCodeStatus::Failed, String::new())
        }
        CommandRunStatus::Finished => (RunCodeStatus::Success, String::new()),
    };
    RunCodeResponse {
        status,
        message,
        compile_result: None,
        run_result: Some(CommandRunResult {
            status: cmd_status,
            execution_time: Some(r.wall_time.as_secs_f64()),
            return_code,
            stdout: Some(decode(&r.stdout)),
            stderr: Some(stderr),
        }),
        executor_pod_name: pod_name(),
        files: r
            .files
            .iter()
            .map(|(k, v)| (k.clone(), B64.encode(v)))
            .collect(),
    }
}

/// SandboxFusion reports its pod from `MY_POD_NAME`.
fn pod_name() -> Option<String> {
    std::env::var("MY_POD_NAME").ok()
}

pub async fn run_code(
    State(state): State<AppState>,
    Extension(slot): Extension<Slot>,
    ApiJson(req): ApiJson<RunCodeRequest>,
) -> Result<Json<RunCodeResponse>, ApiError> {
    let Some(sandbox) = state.sandbox.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "code execution is disabled on this server (--no-sandbox)",
        ));
    };
    let run = to_run_request(req, sandbox.caps(), state.fetch_caps)?;
    let result = state.blocking(slot, move || sandbox.run(&run)).await?;
    let resp = match result {
        Ok(r) => to_response(r),
        // as SandboxFusion's handler does on an exception: SandboxError, no results
        Err(e) => RunCodeResponse {
            status: RunCodeStatus::SandboxError,
            message: format!("exception on running code: {e:#}"),
            compile_result: None,
            run_result: None,
            executor_pod_name: pod_name(),
            files: BTreeMap::new(),
        },
    };
    let label = match resp.status {
        RunCodeStatus::Success => "Success",
        RunCodeStatus::Failed => "Failed",
        RunCodeStatus::SandboxError => "SandboxError",
    };
    state.metrics.sandbox_runs.with_label_values(&[label]).inc();
    Ok(Json(resp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: RunStatus, exit_code: Option<i32>, signal: Option<i32>) -> RunResult {
        RunResult {
            status,
            exit_code,
            signal,
            stdout: b"out".to_vec(),
            stderr: vec![0xff],
            truncated: false,
            wall_time: Duration::from_millis(1500),
            cpu_time: Duration::ZERO,
            files: BTreeMap::from([("a.txt".to_string(), b"hi".to_vec())]),
            message: "boom".into(),
        }
    }

    #[test]
    fn statuses_follow_sandboxfusion() {
        let r = to_response(result(RunStatus::Finished, Some(0), None));
        assert_eq!(r.status, RunCodeStatus::Success);
        let rr = r.run_result.unwrap();
        assert_eq!(
            (rr.status, rr.return_code),
            (CommandRunStatus::Finished, Some(0))
        );
        assert_eq!(rr.execution_time, Some(1.5));
        assert_eq!(rr.stdout.as_deref(), Some("out"));
        assert!(rr.stderr.unwrap().starts_with("[DecodeError]"));
        assert_eq!(r.files["a.txt"], "aGk=");

        let r = to_response(result(RunStatus::Finished, Some(1), None));
        assert_eq!(r.status, RunCodeStatus::Failed);
        assert_eq!(r.run_result.unwrap().return_code, Some(1));

        let r = to_response(result(RunStatus::TimeLimitExceeded, None, Some(9)));
        assert_eq!(r.status, RunCodeStatus::Failed);
        let rr = r.run_result.unwrap();
        assert_eq!(
            (rr.status, rr.return_code),
            (CommandRunStatus::TimeLimitExceeded, None)
        );

        let r = to_response(result(RunStatus::Killed, None, Some(9)));
        assert_eq!(r.status, RunCodeStatus::Failed);
        assert_eq!(r.run_result.unwrap().return_code, Some(-9));

        let r = to_response(result(RunStatus::SandboxError, None, None));
        assert_eq!(
            (r.status, r.message.as_str()),
            (RunCodeStatus::SandboxError, "boom")
        );
        assert_eq!(r.run_result.unwrap().status, CommandRunStatus::Error);
    }

    #[test]
    fn paths_stay_inside() {
        assert!(safe_path("a/b.txt"));
        // The sandbox refuses `.` and empty components; here they are a 422 (issue 24).
        assert!(!safe_path("./x") && !safe_path("a//b") && !safe_path("a/"));
        assert!(!safe_path("/etc/passwd") && !safe_path("../x") && !safe_path("a/../../x"));
        assert!(!safe_path(""));
    }
}
