//! Server-wide sandbox configuration and the interpreter it exposes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::Limits;

/// How the sandbox isolates the program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IsolationMode {
    /// [`IsolationMode::Root`] when the server runs as root, else [`IsolationMode::UserNamespace`].
    #[default]
    Auto,
    /// No user namespace: the server (root) creates the namespaces and the program runs as an
    /// unprivileged uid/gid (`uid_base + slot`, distinct per concurrent run), with no
    /// capabilities, no_new_privs and seccomp. Needs root.
    Root,
    /// A new user namespace maps uid/gid 0 inside to one outer id (65534 when the server is
    /// root, else the server's own uid); the program keeps no capability. Works without root
    /// where unprivileged user namespaces are enabled.
    UserNamespace,
}

/// Server-wide settings of a [`crate::Sandbox`].
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Upper bounds of every request's limits.
    pub caps: Limits,
    pub mode: IsolationMode,
    /// The Python to expose: a command found in PATH or a path (default `python3`). It is
    /// asked once for `sys.executable` and its prefixes, which are bind-mounted read-only at
    /// their own paths — the only part of the host outside the system directories the sandbox
    /// sees.
    pub python: PathBuf,
    /// Size of the private writable `/tmp` (working directory) tmpfs, bytes; input files are
    /// added on top.
    pub tmp_bytes: u64,
    /// Most inodes (files) in `/tmp`.
    pub tmp_inodes: u64,
    /// RLIMIT_NOFILE of the program.
    pub max_open_files: u64,
    /// First uid/gid of the program in [`IsolationMode::Root`].
    pub uid_base: u32,
    /// Root of the cgroup v2 hierarchy runs get their own group in (`memory.max`, `pids.max`,
    /// `cpu.max`), when it is writable (a root server with cgroup v2 mounted read-write);
    /// `None`, or a hierarchy that is not v2 or not writable: the watchdog alone bounds a run's
    /// processes together (see [`crate::PerRunLimits`]).
    pub cgroup_root: Option<PathBuf>,
}

impl SandboxConfig {
    /// Defaults around `caps`: auto mode, `python3`, 64 MiB and 4096 inodes of `/tmp`, 256
    /// open files, uids from 200000, cgroups under `/sys/fs/cgroup` where writable.
    pub fn new(caps: Limits) -> Self {
        Self {
            caps,
            mode: IsolationMode::Auto,
            python: PathBuf::from("python3"),
            tmp_bytes: 64 << 20,
            tmp_inodes: 4096,
            max_open_files: 256,
            uid_base: 200_000,
            cgroup_root: Some(PathBuf::from("/sys/fs/cgroup")),
        }
    }
}

/// The resolved Python interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonInfo {
    /// `sys.executable` (run at the same path inside the sandbox).
    pub executable: PathBuf,
    /// Directories bound read-only: prefixes, base prefixes, the real executable's directory.
    pub dirs: Vec<PathBuf>,
    /// `platform.python_version()`.
    pub version: String,
}

/// Runs `python` once to learn its real executable and prefixes (`python3` here is a pyenv
/// shim, a shell script that the sandbox could not run without the whole pyenv tree).
pub fn resolve_python(python: &Path) -> Result<PythonInfo> {
    const PROBE: &str = "import os, sys, platform\n\
        print(sys.executable)\nprint(os.path.dirname(os.path.realpath(sys.executable)))\n\
        print(sys.prefix)\nprint(sys.base_prefix)\nprint(sys.exec_prefix)\nprint(sys.base_exec_prefix)\n\
        print(platform.python_version())";
    let out = Command::new(python)
        .args(["-I", "-c", PROBE])
        .output()
        .with_context(|| {
            format!(
                "running {} to locate the Python installation",
                python.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "{} -c <probe> failed ({}): {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8(out.stdout).context("python probe printed non-UTF-8 paths")?;
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() != 7 || lines[..6].iter().any(|l| !l.starts_with('/')) {
        bail!("unexpected output of the python probe: {text:?}");
    }
    Ok(PythonInfo {
        executable: PathBuf::from(lines[0]),
        dirs: lines[1..6].iter().map(PathBuf::from).collect(),
        version: lines[6].to_string(),
    })
}
