//! Ordinary programs: output, stdin, files, limits, exit codes, both languages and modes.

use crate::common;

use std::time::Duration;

use common::*;
use reinforge_sandbox::{Language, Limits, RunStatus, Sandbox, SandboxConfig};

#[test]
fn hello_world_in_both_languages_and_modes() {
    let _g = shared();
    for (mode, sb) in both() {
        let r = py(sb, "print('hello', 6 * 7)", short());
        assert_eq!(
            (r.status, r.exit_code, out(&r).as_str()),
            (RunStatus::Finished, Some(0), "hello 42\n"),
            "{mode}: {}",
            show(&r)
        );
        assert!(!r.truncated && r.message.is_empty());
        let b = sb
            .run(&request(
                Language::Bash,
                "echo \"bash $((6*7))\"; python3 -c 'print(1)'",
                short(),
            ))
            .unwrap();
        assert_eq!(out(&b), "bash 42\n1\n", "{mode}: {}", show(&b));
    }
}

#[test]
fn stdin_is_delivered() {
    let _g = shared();
    let mut req = request(
        Language::Python,
        "import sys\ndata = sys.stdin.read()\nprint(len(data), data.upper())",
        short(),
    );
    req.stdin = Some(b"abc\ndef".to_vec());
    let r = sandbox().run(&req).unwrap();
    assert_eq!(out(&r), "7 ABC\nDEF\n", "{}", show(&r));
    // Large stdin the program does not read does not hang the run.
    let mut req = request(Language::Python, "print('ignored')", short());
    req.stdin = Some(vec![b'x'; 4 << 20]);
    let r = sandbox().run(&req).unwrap();
    assert_eq!(
        (r.status, out(&r).as_str()),
        (RunStatus::Finished, "ignored\n")
    );
}

#[test]
fn files_in_and_out() {
    let _g = shared();
    for (mode, sb) in both() {
        let mut req = request(
            Language::Python,
            "import helper\nprint(helper.X, open('data/in.txt').read())\nopen('out.txt', 'w').write('result')\nimport os\nos.makedirs('d/e')\nopen('d/e/f.bin', 'wb').write(bytes(range(256)))\nos.symlink('/etc/passwd', 'link')",
            short(),
        );
        req.files
            .insert("helper.py".into(), b"X = 'imported'".to_vec());
        req.files.insert("data/in.txt".into(), b"input".to_vec());
        req.fetch_files = vec![
            "out.txt".into(),
            "d/e/f.bin".into(),
            "missing.txt".into(),
            "link".into(),
            "data/in.txt".into(),
        ];
        let r = sb.run(&req).unwrap();
        assert_eq!(out(&r), "imported input\n", "{mode}: {}", show(&r));
        assert_eq!(
            r.files.get("out.txt").map(Vec::as_slice),
            Some(&b"result"[..]),
            "{mode}"
        );
        assert_eq!(r.files.get("d/e/f.bin").map(Vec::len), Some(256), "{mode}");
        assert_eq!(
            r.files.get("data/in.txt").map(Vec::as_slice),
            Some(&b"input"[..]),
            "{mode}"
        );
        assert!(!r.files.contains_key("missing.txt"), "{mode}");
        assert!(
            !r.files.contains_key("link"),
            "{mode}: symlinks are not followed when fetching"
        );
    }
}

#[test]
fn invalid_paths_are_rejected() {
    let _g = shared();
    for bad in ["../x", "/etc/passwd", "a/../../b", "", "a//b"] {
        let mut req = request(Language::Python, "pass", short());
        req.fetch_files = vec![bad.into()];
        assert!(sandbox().run(&req).is_err(), "fetch {bad:?} accepted");
        let mut req = request(Language::Python, "pass", short());
        req.files.insert(bad.into(), vec![]);
        assert!(sandbox().run(&req).is_err(), "file {bad:?} accepted");
    }
}

#[test]
fn output_is_truncated_at_the_cap() {
    let _g = shared();
    let limits = Limits {
        max_output_bytes: 1000,
        ..short()
    };
    let r = py(
        sandbox(),
        "import sys\nprint('x' * 100000)\nsys.stderr.write('e' * 5000)\nprint('end')",
        limits.clone(),
    );
    assert_eq!(r.status, RunStatus::Finished, "{}", show(&r));
    assert!(r.truncated);
    assert_eq!((r.stdout.len(), r.stderr.len()), (1000, 1000));
    assert!(r.stdout.iter().all(|&b| b == b'x'));
    let r = py(sandbox(), "print('x' * 999)", limits.clone());
    assert!(!r.truncated && r.stdout.len() == 1000);
}

#[test]
fn exit_codes_and_signals() {
    let _g = shared();
    let r = py(sandbox(), "import sys\nsys.exit(3)", short());
    assert_eq!(
        (r.status, r.exit_code, r.signal),
        (RunStatus::Finished, Some(3), None)
    );
    let r = py(sandbox(), "raise ValueError('boom')", short());
    assert_eq!((r.status, r.exit_code), (RunStatus::Finished, Some(1)));
    assert!(err(&r).contains("ValueError: boom"));
    let r = py(
        sandbox(),
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
        short(),
    );
    assert_eq!(
        (r.status, r.exit_code, r.signal),
        (RunStatus::Killed, None, Some(11)),
        "{}",
        show(&r)
    );
    let b = sandbox()
        .run(&request(Language::Bash, "exit 7", short()))
        .unwrap();
    assert_eq!((b.status, b.exit_code), (RunStatus::Finished, Some(7)));
}

#[test]
fn file_size_and_tmp_limits() {
    let _g = shared();
    let limits = Limits {
        max_file_bytes: 1 << 16,
        ..short()
    };
    let r = py(sandbox(), "f = open('big', 'wb')\ntry:\n    f.write(b'x' * (1 << 20)); f.flush()\n    print('WROTE')\nexcept OSError as e:\n    print('limited', e.errno)", limits);
    assert!(
        out(&r).contains("limited 27"),
        "EFBIG expected: {}",
        show(&r)
    );
}

#[test]
fn python_runs_normally_threads_subprocess_multiprocessing_asyncio() {
    let _g = shared();
    let code = r#"
import asyncio, json, multiprocessing, subprocess, threading, sqlite3, tempfile, hashlib, re, math
def sq(x): return x * x
if __name__ == "__main__":
    t = threading.Thread(target=lambda: None); t.start(); t.join()
    print(subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout.strip())
    with multiprocessing.Pool(2) as p:
        print(sum(p.map(sq, range(10))))
    async def main(): await asyncio.sleep(0.01); return "async"
    print(asyncio.run(main()))
    db = sqlite3.connect(":memory:"); db.execute("create table t(x)"); print("sqlite", db.execute("select 1").fetchone()[0])
    with tempfile.NamedTemporaryFile() as f: print("tmpfile", f.name.startswith("/tmp/"))
"#;
    let r = py(
        sandbox(),
        code,
        Limits {
            wall_time: Duration::from_secs(15),
            ..short()
        },
    );
    assert_eq!(
        out(&r),
        "sub\n285\nasync\nsqlite 1\ntmpfile True\n",
        "{}",
        show(&r)
    );
}

#[test]
fn request_limits_are_clamped_to_caps() {
    let _g = shared();
    let mut cfg = SandboxConfig::new(Limits {
        wall_time: Duration::from_secs(1),
        ..caps()
    });
    cfg.mode = sandbox().config().mode;
    let sb = Sandbox::with_config(cfg).unwrap();
    let r = py(
        &sb,
        "import time\ntime.sleep(30)",
        Limits {
            wall_time: Duration::from_secs(100),
            ..short()
        },
    );
    assert_eq!(r.status, RunStatus::TimeLimitExceeded);
    assert!(r.wall_time < Duration::from_secs(3), "{:?}", r.wall_time);
}

#[test]
fn parallel_runs_are_independent() {
    let _g = shared();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                py(
                    sandbox(),
                    &format!("import os\nopen('x','w').write('{i}')\nprint(open('x').read(), os.getpid())"),
                    short(),
                )
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().unwrap();
        assert_eq!(out(&r), format!("{i} 2\n"), "{}", show(&r));
    }
}

#[test]
fn self_test_and_missing_python_is_a_sandbox_error() {
    let _g = shared();
    sandbox().self_test().unwrap();
    let mut cfg = SandboxConfig::new(caps());
    cfg.python = "/nonexistent/python3".into();
    let sb = Sandbox::with_config(cfg).unwrap();
    let r = py(&sb, "print(1)", short());
    assert_eq!(r.status, RunStatus::SandboxError);
    assert!(r.message.contains("/nonexistent/python3"), "{}", r.message);
    // Bash still works without Python.
    assert_eq!(
        out(&sb
            .run(&request(Language::Bash, "echo ok", short()))
            .unwrap()),
        "ok\n"
    );
}
