//! Driving the binary with bad inputs: a bounded run that returns the exit code and stderr,
//! the "fails cleanly naming these" assertion, and scratch files (empty, malformed, missing).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{rank_dir, root};

/// Longest a bad invocation may take: errors come before any real work.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Runs `reinforge ARGS` in a directory of its own (so that nothing it writes by default, such
/// as `runs/`, lands in the checkout), killing it after [`LIMIT`]; returns (exit code, stderr).
pub fn run(args: &[&str]) -> (Option<i32>, String) {
    let cwd = tempfile::tempdir().unwrap();
    run_in(cwd.path(), args)
}

/// [`run`] with `cwd` as the working directory.
pub fn run_in(cwd: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start reinforge");
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            break;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that `reinforge ARGS` fails cleanly with every one of `needles` in its stderr.
pub fn rejects(args: &[&str], needles: &[&str]) {
    let (code, err) = run(args);
    assert!(
        !err.contains("panicked") && code != Some(101),
        "{args:?} panicked:\n{err}"
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "{args:?} exited {code:?}:\n{err}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
}

/// Bad files shared by the cases: empty, a malformed JSON second line, a missing path.
pub struct Files {
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Files {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("empty.jsonl"), "").unwrap();
        std::fs::write(path.join("empty.toml"), "").unwrap();
        std::fs::write(path.join("bad.toml"), "[grpo\nsteps = \n").unwrap();
        Self {
            _dir: dir,
            dir: path,
        }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// A file whose line 2 is not JSON, after a good `first` line.
    pub fn malformed(&self, name: &str, first: &str) -> String {
        std::fs::write(self.dir.join(name), format!("{first}\n{{\"oops\": \n")).unwrap();
        self.path(name)
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        self.path(name)
    }
}

pub fn fixture_model() -> String {
    root()
        .join("fixtures/hf/models/llama")
        .to_string_lossy()
        .into_owned()
}

pub fn battles() -> String {
    rank_dir()
        .join("llmfao-battles.jsonl")
        .to_string_lossy()
        .into_owned()
}
