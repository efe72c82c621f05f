//! Runs untrusted code (model completions, unit tests) in an isolated child process.
//!
//! API contract shared by the server (`reinforge-serve`) and the reward crate; the isolation
//! itself (namespaces, seccomp, rlimits, wall-clock kill) is implemented behind [`Sandbox::run`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Languages the sandbox can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Bash,
}

/// Resource limits of one run. A request's limits are clamped to the sandbox's caps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock limit; the whole process tree is killed when it passes.
    pub wall_time: Duration,
    /// CPU-time limit (RLIMIT_CPU).
    pub cpu_time: Duration,
    /// Address-space / memory limit in bytes.
    pub memory_bytes: u64,
    /// Most processes/threads the program may have at once.
    pub max_processes: u32,
    /// Largest file the program may write (RLIMIT_FSIZE), bytes.
    pub max_file_bytes: u64,
    /// Bytes of stdout and of stderr kept; the rest is dropped and `truncated` set.
    pub max_output_bytes: usize,
}

/// One program to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub language: Language,
    pub code: String,
    pub stdin: Option<Vec<u8>>,
    /// Files written into the private working directory before the run (relative paths).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files read back from the working directory after the run (relative paths).
    pub fetch_files: Vec<String>,
    pub limits: Limits,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunStatus {
    /// The program exited by itself (any exit code).
    Finished,
    /// Killed at the wall-clock or CPU-time limit.
    TimeLimitExceeded,
    /// Killed or failed for exceeding the memory limit.
    MemoryLimitExceeded,
    /// Killed by a signal for another reason (seccomp violation, crash).
    Killed,
    /// The sandbox itself failed to start the program.
    SandboxError,
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub wall_time: Duration,
    pub cpu_time: Duration,
    /// Requested `fetch_files` that existed, by relative path.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Why the sandbox failed, for `SandboxError`.
    pub message: String,
}

/// A configured sandbox: server-wide caps and the interpreters it may run. Cheap to share
/// between threads; [`Sandbox::run`] blocks, so async callers use `spawn_blocking`.
#[derive(Clone, Debug)]
pub struct Sandbox {
    caps: Limits,
}

impl Sandbox {
    /// A sandbox whose runs never exceed `caps`.
    pub fn new(caps: Limits) -> anyhow::Result<Self> {
        Ok(Self { caps })
    }

    /// The server-wide caps.
    pub fn caps(&self) -> &Limits {
        &self.caps
    }

    /// Runs `req` isolated and returns how it ended. Placeholder until the isolation lands.
    pub fn run(&self, _req: &RunRequest) -> anyhow::Result<RunResult> {
        anyhow::bail!("sandbox not implemented yet")
    }
}
