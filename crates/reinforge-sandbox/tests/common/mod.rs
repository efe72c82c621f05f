//! Shared helpers of the sandbox integration tests (run as root in CI).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use reinforge_sandbox::{
    IsolationMode, Language, Limits, RunRequest, RunResult, Sandbox, SandboxConfig,
};

/// Tests that scan the host's process table for leftovers take this exclusively; all others
/// share it, so no other sandbox run is alive during a scan.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner())
}

pub fn caps() -> Limits {
    Limits {
        wall_time: Duration::from_secs(20),
        cpu_time: Duration::from_secs(20),
        memory_bytes: 2 << 30,
        max_processes: 64,
        max_file_bytes: 8 << 20,
        max_output_bytes: 1 << 20,
    }
}

/// Short limits for one test program.
pub fn short() -> Limits {
    Limits {
        wall_time: Duration::from_secs(8),
        cpu_time: Duration::from_secs(8),
        memory_bytes: 512 << 20,
        max_processes: 32,
        max_file_bytes: 1 << 20,
        max_output_bytes: 64 << 10,
    }
}

/// The default sandbox (root mode when the tests run as root).
pub fn sandbox() -> &'static Sandbox {
    static S: OnceLock<Sandbox> = OnceLock::new();
    S.get_or_init(|| Sandbox::new(caps()).expect("sandbox"))
}

/// A sandbox forced into user-namespace mode (the mode of a non-root server).
pub fn userns_sandbox() -> &'static Sandbox {
    static S: OnceLock<Sandbox> = OnceLock::new();
    S.get_or_init(|| {
        let mut c = SandboxConfig::new(caps());
        c.mode = IsolationMode::UserNamespace;
        Sandbox::with_config(c).expect("sandbox")
    })
}

pub fn both() -> [(&'static str, &'static Sandbox); 2] {
    [("default", sandbox()), ("userns", userns_sandbox())]
}

pub fn request(language: Language, code: &str, limits: Limits) -> RunRequest {
    RunRequest {
        language,
        code: code.into(),
        stdin: None,
        files: BTreeMap::new(),
        fetch_files: vec![],
        limits,
    }
}

pub fn py(sb: &Sandbox, code: &str, limits: Limits) -> RunResult {
    sb.run(&request(Language::Python, code, limits))
        .expect("valid request")
}

pub fn out(r: &RunResult) -> String {
    String::from_utf8_lossy(&r.stdout).into_owned()
}

pub fn err(r: &RunResult) -> String {
    String::from_utf8_lossy(&r.stderr).into_owned()
}

pub fn show(r: &RunResult) -> String {
    format!(
        "status {:?} exit {:?} signal {:?} wall {:?} cpu {:?} msg {:?}\n--stdout--\n{}\n--stderr--\n{}",
        r.status,
        r.exit_code,
        r.signal,
        r.wall_time,
        r.cpu_time,
        r.message,
        out(r),
        err(r)
    )
}

/// Host processes whose command line contains `needle` (other than this test process).
pub fn host_processes_matching(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) || name == me {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{name}: {cmd}"));
            }
        }
    }
    found
}
