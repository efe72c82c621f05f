//! Running assert-style Python tests (HumanEval/MBPP `check`) against a solution so that only
//! tests that really ran to the end count.
//!
//! The program built by [`python_test_program`] reads a random nonce from stdin *before* any
//! untrusted code runs (then points fd 0 at /dev/null), keeps private references to `exec`,
//! `compile`, `os.open`/`os.write`/`os.close`, runs the solution and then the tests in one
//! fresh `__main__` namespace, and only after both finished writes the nonce to
//! [`SENTINEL_FILE`]. The run passes only if the program finished with exit code 0 *and* the
//! fetched sentinel equals the nonce. This defeats a solution that exits early with status 0
//! (`sys.exit(0)`, `os._exit(0)`, `raise SystemExit` at import time, from a thread or atexit),
//! that monkeypatches `exit`/`exec`/`print`/`os.write` to skip the tests, or that prints or
//! writes a guessed sentinel: the nonce is in neither the source, argv, env nor any file.
//! The sentinel is a file rather than a stdout line so that output caps cannot cut it off.
//!
//! Limitation: solution and tests share one interpreter, so code that deliberately digs
//! through the harness's frames (`sys._getframe`, `gc`, `ctypes`) could still find the nonce,
//! and tests can be fooled by values whose `__eq__` always returns True. Those need the tests
//! in a separate process, which `check(candidate)` style tests do not allow.

use std::collections::BTreeMap;

use rand::RngCore;

use crate::{Language, Limits, RunRequest, RunResult, RunStatus, Sandbox};

/// File in the working directory holding the nonce once all tests ran.
pub const SENTINEL_FILE: &str = ".reinforge_tests_done";

/// The verdict of [`run_python_tests`].
#[derive(Clone, Debug)]
pub struct TestOutcome {
    /// All tests ran to the end without an exception and the program exited with 0.
    pub passed: bool,
    /// The raw run (stdout/stderr of solution and tests, status, times).
    pub result: RunResult,
    /// Why it passed or failed, for logs: "passed", "exit code 1", "time limit exceeded", ...
    pub reason: String,
}

fn hex_literal(s: &str) -> String {
    let hex: String = s.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("bytes.fromhex('{hex}').decode('utf-8')")
}

/// The Python program that runs `solution` then `tests` and writes the nonce read from stdin
/// to [`SENTINEL_FILE`] only after both completed. Solution and tests are embedded as hex so
/// no quoting can break out; they compile as `solution.py` and `tests.py` for tracebacks.
pub fn python_test_program(solution: &str, tests: &str) -> String {
    format!(
        r#"def __reinforge_harness():
    import os, sys
    nonce = sys.stdin.buffer.readline().strip()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _exec, _compile, _open, _write, _close = exec, compile, os.open, os.write, os.close
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    solution = _compile({solution}, "solution.py", "exec")
    tests = _compile({tests}, "tests.py", "exec")
    del os, sys
    namespace = {{"__name__": "__main__", "__builtins__": __builtins__}}
    _exec(solution, namespace)
    _exec(tests, namespace)
    fd = _open("{SENTINEL_FILE}", flags, 0o600)
    _write(fd, nonce)
    _close(fd)

__reinforge_harness()
"#,
        solution = hex_literal(solution),
        tests = hex_literal(tests),
    )
}

/// Runs `tests` (assert-style Python; e.g. HumanEval's `check` definition followed by
/// `check(entry_point)`, or MBPP's asserts) against `solution` in the sandbox.
pub fn run_python_tests(
    sandbox: &Sandbox,
    solution: &str,
    tests: &str,
    limits: Limits,
) -> anyhow::Result<TestOutcome> {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let nonce: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let req = RunRequest {
        language: Language::Python,
        code: python_test_program(solution, tests),
        stdin: Some(format!("{nonce}\n").into_bytes()),
        files: BTreeMap::new(),
        fetch_files: vec![SENTINEL_FILE.to_string()],
        limits,
    };
    let result = sandbox.run(&req)?;
    let sentinel_ok = result
        .files
        .get(SENTINEL_FILE)
        .is_some_and(|s| s == nonce.as_bytes());
    let reason = match result.status {
        RunStatus::Finished if result.exit_code == Some(0) && sentinel_ok => "passed".to_string(),
        RunStatus::Finished if result.exit_code == Some(0) => {
            "exit code 0 before the tests completed (no sentinel)".to_string()
        }
        RunStatus::Finished => format!("exit code {}", result.exit_code.unwrap_or(-1)),
        RunStatus::TimeLimitExceeded => "time limit exceeded".to_string(),
        RunStatus::MemoryLimitExceeded => "memory limit exceeded".to_string(),
        RunStatus::Killed => format!("killed by signal {}", result.signal.unwrap_or(0)),
        RunStatus::SandboxError => format!("sandbox error: {}", result.message),
    };
    Ok(TestOutcome {
        passed: reason == "passed",
        result,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_embeds_code_as_hex_and_holds_no_nonce() {
        let p = python_test_program("x = '''\"\nprint(1)", "assert x");
        assert!(!p.contains("print(1)"), "solution must not appear verbatim");
        assert!(p.contains(&hex_literal("assert x")));
        assert!(p.contains(SENTINEL_FILE));
    }
}
