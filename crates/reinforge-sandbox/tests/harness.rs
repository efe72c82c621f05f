//! The test harness: only tests that ran to the end count.

use crate::common;

use std::time::Duration;

use common::*;
use reinforge_sandbox::{run_python_tests, Limits, RunStatus};

const SOLUTION: &str = "def add(a, b):\n    return a + b\n";
const TESTS: &str =
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n\ncheck(add)\n";

#[test]
fn correct_solution_passes_wrong_fails() {
    let _g = shared();
    for (mode, sb) in both() {
        let ok = run_python_tests(sb, SOLUTION, TESTS, short()).unwrap();
        assert!(ok.passed, "{mode}: {} {}", ok.reason, show(&ok.result));
        assert_eq!(ok.reason, "passed");
        let bad =
            run_python_tests(sb, "def add(a, b):\n    return a - b\n", TESTS, short()).unwrap();
        assert!(!bad.passed);
        assert_eq!(bad.reason, "exit code 1");
        assert!(
            err(&bad.result).contains("AssertionError"),
            "{}",
            show(&bad.result)
        );
    }
    // MBPP style: bare asserts; output of the solution does not matter.
    let t = run_python_tests(
        sandbox(),
        "print('x' * 200000)\ndef f(x): return x * 2",
        "assert f(2) == 4\nassert f(0) == 0",
        short(),
    )
    .unwrap();
    assert!(t.passed && t.result.truncated, "{}", t.reason);
}

#[test]
fn early_exits_and_tampering_do_not_pass() {
    let _g = shared();
    let exploits = [
        ("sys.exit", "import sys\nsys.exit(0)\n"),
        ("os._exit", "import os\nos._exit(0)\n"),
        ("SystemExit", "raise SystemExit(0)\n"),
        ("exit builtin", "exit()\n"),
        ("thread exit", "import os, threading\nthreading.Thread(target=lambda: os._exit(0)).start()\nimport time\ntime.sleep(1)\n"),
        ("patched exec", "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\n"),
        ("patched AssertionError", "import builtins\nclass E(Exception): pass\nbuiltins.AssertionError = E\n"),
        ("atexit", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
        ("fake sentinel", "import sys\nprint('REINFORGE_SENTINEL ' + '0' * 32)\nopen('.reinforge_tests_done', 'w').write('0' * 32)\nsys.exit(0)\n"),
        ("steal nonce", "import sys, os\nsrc = open(__file__).read() if '__file__' in dir() else ''\nn = sys.stdin.read().strip()\nopen('.reinforge_tests_done', 'w').write(n)\nprint(n)\nos._exit(0)\n"),
        ("read own source", "import os\nsrc = open('/code/main.py').read()\nimport re\nfor h in re.findall('[0-9a-f]{32}', src):\n    open('.reinforge_tests_done', 'w').write(h)\nos._exit(0)\n"),
        ("signal self", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
    ];
    for (name, prefix) in exploits {
        // The solution is otherwise wrong, so only a bypass of the tests could make it pass.
        let solution = format!("{prefix}def add(a, b):\n    return 0\n");
        let t = run_python_tests(sandbox(), &solution, TESTS, short()).unwrap();
        assert!(!t.passed, "{name}: passed! {}", show(&t.result));
        assert!(
            !err(&t.result).contains("SyntaxError"),
            "{name}: broken exploit {}",
            show(&t.result)
        );
        eprintln!("{name}: {}", t.reason);
        // With a correct solution, an exploit that stops the program early still fails; one
        // that lets the tests run (patched builtins) passes legitimately.
        let t =
            run_python_tests(sandbox(), &format!("{prefix}{SOLUTION}"), TESTS, short()).unwrap();
        let tests_can_run = name.starts_with("patched") || name == "atexit";
        assert_eq!(
            t.passed,
            tests_can_run,
            "{name}: {} {}",
            t.reason,
            show(&t.result)
        );
    }
    // A sentinel-less exit 0 is named as such.
    let t = run_python_tests(sandbox(), "import os\nos._exit(0)\n", TESTS, short()).unwrap();
    assert_eq!(
        (t.result.status, t.result.exit_code),
        (RunStatus::Finished, Some(0))
    );
    assert!(t.reason.contains("no sentinel"), "{}", t.reason);
    // The same exploit prefixes with a *correct* solution: tests that are cut short still fail.
    let t = run_python_tests(
        sandbox(),
        &format!("import sys\nsys.exit(0)\n{SOLUTION}"),
        TESTS,
        short(),
    )
    .unwrap();
    assert!(!t.passed);
}

#[test]
fn slow_solution_times_out() {
    let _g = shared();
    let limits = Limits {
        wall_time: Duration::from_secs(1),
        ..short()
    };
    let t = run_python_tests(
        sandbox(),
        "def add(a, b):\n    while True: pass\n",
        TESTS,
        limits,
    )
    .unwrap();
    assert!(!t.passed);
    assert_eq!(t.reason, "time limit exceeded");
}
