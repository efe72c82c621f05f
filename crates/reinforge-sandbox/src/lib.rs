//! Runs untrusted code (model completions, unit tests) in an isolated child process.
//!
//! API contract shared by the server (`reinforge-serve`) and the reward crate. Each run gets
//! (Linux only):
//! - new mount, PID, network, IPC, UTS and cgroup namespaces (plus a user namespace in
//!   [`IsolationMode::UserNamespace`]); the network namespace has no interface but a down
//!   loopback, so nothing is reachable;
//! - a minimal read-only root built with `pivot_root` ([`mounts`](crate::mounts)): system
//!   directories, the interpreter's prefix, a synthetic `/etc`, a few `/dev` nodes, a fresh
//!   `/proc`, and a private size-capped tmpfs `/tmp` as working directory;
//! - an unprivileged identity without capabilities, no_new_privs, a seccomp filter
//!   ([`seccomp`](crate::seccomp)) and rlimits (CPU, address space, processes, file size,
//!   core 0, open files);
//! - per-run limits on all the run's processes together ([`PerRunLimits`]): a cgroup v2 group
//!   per run where the hierarchy is writable ([`cgroup`](crate::cgroup)), and in every case a
//!   watchdog summing their resident memory and CPU time;
//! - a wall-clock limit enforced by killing the namespace's init, which kills the whole tree.
//!
//! Anything that cannot be set up yields [`RunStatus::SandboxError`]; the program never runs
//! with less isolation. [`harness::run_python_tests`] runs assert-style tests robustly against
//! early exits.

mod cgroup;
mod child;
mod config;
pub mod harness;
mod isolate;
mod limits;
mod mounts;
mod protocol;
mod seccomp;

pub use config::{resolve_python, IsolationMode, PythonInfo, SandboxConfig};
pub use harness::{run_python_tests, TestOutcome};

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use seccompiler::BpfProgram;

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
    /// CPU-time limit: of each process (RLIMIT_CPU) and of all the run's processes together
    /// (the watchdog, see [`PerRunLimits`]).
    pub cpu_time: Duration,
    /// Memory limit in bytes: each process's address space (RLIMIT_AS) and all the run's
    /// processes together (see [`PerRunLimits`]).
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

/// How a run's processes are limited together (RLIMIT_AS and RLIMIT_CPU are per process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerRunLimits {
    /// A cgroup v2 group per run under this directory: `memory.max` (the kernel kills past it),
    /// `pids.max`, `cpu.max` of one CPU; the watchdog runs too (CPU time from `cpu.stat`).
    Cgroup(PathBuf),
    /// No writable cgroup v2 hierarchy (the reason): the watchdog sums the resident memory and
    /// CPU time of the run's processes every 20 ms and kills the run past either limit;
    /// processes are bounded per uid by RLIMIT_NPROC.
    Watchdog(String),
}

/// A configured sandbox: server-wide caps and the interpreters it may run. Cheap to clone and
/// share between threads; [`Sandbox::run`] blocks, so async callers use `spawn_blocking`.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    config: SandboxConfig,
    mode: IsolationMode,
    /// Why runs cannot be isolated in `mode` on this host, if so.
    mode_error: Option<String>,
    base_layout: Result<mounts::RootLayout, String>,
    python: Result<(PythonInfo, mounts::RootLayout), String>,
    filters: Vec<BpfProgram>,
    /// The cgroup v2 hierarchy runs get groups in, or why there is none.
    groups: Result<cgroup::RunGroups, String>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.inner.config)
            .field("mode", &self.inner.mode)
            .field("mode_error", &self.inner.mode_error)
            .field("python", &self.inner.python.as_ref().map(|p| &p.0))
            .finish()
    }
}

/// Where the program's source is written inside the sandbox (read-only).
const CODE_DIR: &str = "/code";
/// The working directory (private tmpfs).
const WORK_DIR: &str = "/tmp";

impl Sandbox {
    /// A sandbox whose runs never exceed `caps`, with [`SandboxConfig::new`] defaults.
    pub fn new(caps: Limits) -> anyhow::Result<Self> {
        Self::with_config(SandboxConfig::new(caps))
    }

    /// A sandbox with explicit settings. Fails only on invalid caps or an unusable seccomp
    /// filter; problems that only affect some runs (no Python, no namespaces in this mode) are
    /// reported by those runs as [`RunStatus::SandboxError`] and by [`Sandbox::self_test`].
    pub fn with_config(config: SandboxConfig) -> anyhow::Result<Self> {
        let c = &config.caps;
        if c.wall_time.is_zero() || c.cpu_time.is_zero() {
            bail!("sandbox caps: wall_time and cpu_time must be positive");
        }
        if c.memory_bytes < (16 << 20) || c.max_processes == 0 || c.max_output_bytes == 0 {
            bail!("sandbox caps: memory_bytes must be >= 16 MiB and max_processes, max_output_bytes positive");
        }
        if config.max_open_files < 16 {
            bail!("sandbox config: max_open_files must be >= 16");
        }
        let euid = nix::unistd::geteuid();
        let mode = match config.mode {
            IsolationMode::Auto if euid.is_root() => IsolationMode::Root,
            IsolationMode::Auto => IsolationMode::UserNamespace,
            m => m,
        };
        let mode_error = (mode == IsolationMode::Root && !euid.is_root()).then(|| {
            format!("IsolationMode::Root needs the server to run as root (euid is {euid})")
        });
        let base_layout = mounts::RootLayout::detect(&[]).map_err(|e| format!("{e:#}"));
        let python = resolve_python(&config.python).and_then(|info| {
            let layout = mounts::RootLayout::detect(&info.dirs)?;
            Ok((info, layout))
        });
        let python = python.map_err(|e| format!("no usable Python for the sandbox: {e:#}"));
        let filters = seccomp::build_filters()?;
        let groups = match &config.cgroup_root {
            Some(root) => cgroup::RunGroups::open(root),
            None => Err("no cgroup root configured".into()),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                mode,
                mode_error,
                base_layout,
                python,
                filters,
                groups,
            }),
        })
    }

    /// The server-wide caps.
    pub fn caps(&self) -> &Limits {
        &self.inner.config.caps
    }

    /// The settings this sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// The isolation mode runs use ([`IsolationMode::Auto`] resolved).
    pub fn mode(&self) -> IsolationMode {
        self.inner.mode
    }

    /// How a run's processes are limited together: a cgroup per run, or the watchdog alone.
    pub fn per_run_limits(&self) -> PerRunLimits {
        match &self.inner.groups {
            Ok(g) => PerRunLimits::Cgroup(g.root().to_path_buf()),
            Err(why) => PerRunLimits::Watchdog(why.clone()),
        }
    }

    /// The Python interpreter runs use, or why there is none.
    pub fn python(&self) -> Result<&PythonInfo, &str> {
        self.inner
            .python
            .as_ref()
            .map(|p| &p.0)
            .map_err(|e| e.as_str())
    }

    /// Runs `print` in Python and `echo` in Bash and checks the output: call at server start to
    /// fail early with the sandbox's own message when this host cannot isolate.
    pub fn self_test(&self) -> anyhow::Result<()> {
        for (language, code) in [
            (Language::Python, "print('ok')"),
            (Language::Bash, "echo ok"),
        ] {
            let req = RunRequest {
                language,
                code: code.into(),
                stdin: None,
                files: BTreeMap::new(),
                fetch_files: vec![],
                limits: self.caps().clone(),
            };
            let r = self.run(&req)?;
            if r.status != RunStatus::Finished || r.exit_code != Some(0) || r.stdout != b"ok\n" {
                bail!(
                    "sandbox self-test ({language:?}) failed: {:?} exit {:?}: {} {}",
                    r.status,
                    r.exit_code,
                    r.message,
                    String::from_utf8_lossy(&r.stderr)
                );
            }
        }
        Ok(())
    }

    /// Runs `req` isolated and returns how it ended. `Err` only for an invalid request (a path
    /// in `files`/`fetch_files` that is absolute, contains `..` or NUL); every failure of the
    /// sandbox itself is a [`RunStatus::SandboxError`] result.
    pub fn run(&self, req: &RunRequest) -> anyhow::Result<RunResult> {
        let inner = &*self.inner;
        let limits = req.limits.clamped_to(self.caps());
        let mut input_dirs = BTreeSet::new();
        let mut input_files = Vec::new();
        let mut input_bytes = 0u64;
        for (name, content) in &req.files {
            let parts =
                relative_parts(name).with_context(|| format!("files: invalid path {name:?}"))?;
            for k in 1..parts.len() {
                input_dirs.insert(parts[..k].join("/"));
            }
            input_files.push((CString::new(name.as_str())?, content.clone()));
            input_bytes += content.len() as u64;
        }
        for name in &req.fetch_files {
            relative_parts(name).with_context(|| format!("fetch_files: invalid path {name:?}"))?;
        }
        let error = |m: String| Ok(isolate::sandbox_error(m, Duration::ZERO));
        if let Some(e) = &inner.mode_error {
            return error(e.clone());
        }
        let (exe, code_name, layout, path_dirs) = match req.language {
            Language::Python => match &inner.python {
                Ok((info, layout)) => {
                    let bin = info
                        .executable
                        .parent()
                        .unwrap_or(Path::new("/usr/bin"))
                        .to_path_buf();
                    (info.executable.clone(), "main.py", layout, vec![bin])
                }
                Err(e) => return error(e.clone()),
            },
            Language::Bash => match &inner.base_layout {
                Ok(layout) => {
                    let bash = ["/bin/bash", "/usr/bin/bash"]
                        .into_iter()
                        .find(|p| Path::new(p).exists());
                    let Some(bash) = bash else {
                        return error("bash is not installed on this host".into());
                    };
                    let py_bin = inner
                        .python
                        .as_ref()
                        .ok()
                        .and_then(|p| p.0.executable.parent().map(Path::to_path_buf));
                    // Bash programs may call python3: expose it when available.
                    let layout = inner.python.as_ref().map(|p| &p.1).unwrap_or(layout);
                    (
                        PathBuf::from(bash),
                        "main.sh",
                        layout,
                        py_bin.into_iter().collect(),
                    )
                }
                Err(e) => return error(e.clone()),
            },
        };
        let slot;
        let (identity, user_ns, inside_uid, inside_gid) = match inner.mode {
            IsolationMode::UserNamespace => {
                let root = nix::unistd::geteuid().is_root();
                let (ou, og) = if root {
                    (65534, 65534)
                } else {
                    (
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    )
                };
                let map = isolate::UserNsMap {
                    outer_uid: ou,
                    outer_gid: og,
                    deny_setgroups: !root,
                };
                (
                    child::Identity::UserNs { clear_groups: root },
                    Some(map),
                    0,
                    0,
                )
            }
            _ => {
                slot = isolate::uid_pool::GLOBAL.acquire();
                let Some(s) = &slot else {
                    return error("all sandbox uids are in use".into());
                };
                let id = inner.config.uid_base + s.index;
                (child::Identity::Root { uid: id, gid: id }, None, id, id)
            }
        };
        let passwd = format!(
            "root:x:0:0:root:/root:/bin/sh\n{}nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            if inside_uid != 0 {
                format!("sandbox:x:{inside_uid}:{inside_gid}:sandbox:{WORK_DIR}:/bin/sh\n")
            } else {
                String::new()
            }
        );
        let group = format!(
            "root:x:0:\n{}nogroup:x:65534:\n",
            if inside_gid != 0 {
                format!("sandbox:x:{inside_gid}:\n")
            } else {
                String::new()
            }
        );
        let spec = mounts::RootSpec {
            layout,
            etc_passwd: passwd,
            etc_group: group,
            code_name,
            code: req.code.as_bytes(),
            work_tmpfs_data: format!(
                "size={},nr_inodes={},mode=0700,uid={inside_uid},gid={inside_gid}",
                inner.config.tmp_bytes + input_bytes,
                inner.config.tmp_inodes + req.files.len() as u64
            ),
        };
        let ops = mounts::build_ops(&spec)?;
        let mut path: Vec<String> = path_dirs.iter().map(|p| p.display().to_string()).collect();
        path.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(String::from));
        path.dedup();
        let mut env = vec![
            format!("PATH={}", path.join(":")),
            format!("HOME={WORK_DIR}"),
            format!("TMPDIR={WORK_DIR}"),
            "LANG=C.UTF-8".to_string(),
        ];
        if req.language == Language::Python {
            // Files sit in the working directory; make them importable like SandboxFusion's
            // layout (code and files in one directory) does.
            env.push(format!("PYTHONPATH={WORK_DIR}"));
            env.push("PYTHONDONTWRITEBYTECODE=1".to_string());
        }
        let code_path = format!("{CODE_DIR}/{code_name}");
        let mut plan = child::ChildPlan {
            staging: CString::new(mounts::STAGING)?,
            root_data: CString::new(format!(
                "size={},nr_inodes=4096,mode=0755",
                (4 << 20) + req.code.len()
            ))?,
            ops,
            hostname: CString::new("sandbox")?,
            identity,
            rlimits: limits::rlimits(&limits, inner.config.max_open_files),
            work_dir: CString::new(WORK_DIR)?,
            input_dirs: input_dirs
                .into_iter()
                .map(CString::new)
                .collect::<Result<_, _>>()?,
            input_files,
            exe: CString::new(exe.display().to_string())?,
            argv: vec![
                CString::new(exe.display().to_string())?,
                CString::new(code_path)?,
            ],
            envp: env
                .into_iter()
                .map(CString::new)
                .collect::<Result<_, _>>()?,
            argv_ptrs: vec![],
            envp_ptrs: vec![],
            filters: inner.filters.clone(),
            fetch: req
                .fetch_files
                .iter()
                .map(|f| CString::new(f.as_str()))
                .collect::<Result<_, _>>()?,
            fetch_cap: limits.max_file_bytes,
        };
        plan.finish();
        let group = match &inner.groups {
            Ok(groups) => match groups.create(&limits) {
                Ok(g) => Some(g),
                Err(e) => return error(format!("creating the run's cgroup: {e}")),
            },
            Err(_) => None,
        };
        let launch = isolate::Launch {
            user_ns,
            stdin: req.stdin.as_deref(),
            limits: &limits,
            fetch_names: &req.fetch_files,
            group: group.as_ref(),
        };
        let result = isolate::launch(&plan, launch);
        drop(group);
        Ok(result)
    }
}

/// The components of a safe relative path: `/`-separated, none empty, `.` or `..`, no NUL.
fn relative_parts(p: &str) -> anyhow::Result<Vec<&str>> {
    if p.is_empty() || p.len() > 4096 || p.contains('\0') {
        bail!("empty, too long or containing NUL");
    }
    let parts: Vec<&str> = p.split('/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        bail!("must be a relative path without empty, '.' or '..' components");
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_checked() {
        assert_eq!(relative_parts("a/b.txt").unwrap(), vec!["a", "b.txt"]);
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "./a",
            "a/",
            "a//b",
            "a\0b",
        ] {
            assert!(relative_parts(bad).is_err(), "{bad:?} accepted");
        }
    }
}
