//! Throughput of trivial Python runs in the sandbox vs plain subprocesses.
//! `cargo run --release -p reinforge-sandbox --example bench_sandbox -- [runs] [threads...]`

use std::time::Instant;

use reinforge_sandbox::{
    IsolationMode, Language, Limits, RunRequest, RunStatus, Sandbox, SandboxConfig,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(50);
    let threads: Vec<usize> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()?
    } else {
        vec![2, 4, 8]
    };
    for (mode, language) in [
        (IsolationMode::Auto, Language::Python),
        (IsolationMode::UserNamespace, Language::Python),
        (IsolationMode::Auto, Language::Bash),
    ] {
        let mut cfg = SandboxConfig::new(Limits::default());
        cfg.mode = mode;
        let sb = Sandbox::with_config(cfg)?;
        let (exe, code, flag) = match language {
            Language::Python => (
                sb.python()
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .executable
                    .clone(),
                "pass",
                "-c",
            ),
            Language::Bash => ("/bin/bash".into(), ":", "-c"),
        };
        let req = RunRequest {
            language,
            code: code.into(),
            stdin: None,
            files: Default::default(),
            fetch_files: vec![],
            limits: Limits::default(),
        };
        let run = || {
            let r = sb.run(&req).unwrap();
            assert_eq!(r.status, RunStatus::Finished, "{}", r.message);
        };
        run(); // warm-up
        let plain = |n: usize| {
            let t = Instant::now();
            for _ in 0..n {
                assert!(std::process::Command::new(&exe)
                    .args([flag, code])
                    // The sandbox's environment, so both interpreters start the same way.
                    .env_clear()
                    .envs([
                        ("PATH", "/usr/bin:/bin"),
                        ("HOME", "/tmp"),
                        ("LANG", "C.UTF-8"),
                        ("PYTHONDONTWRITEBYTECODE", "1")
                    ])
                    .status()
                    .unwrap()
                    .success());
            }
            t.elapsed().as_secs_f64()
        };
        let p = plain(runs);
        let t = Instant::now();
        for _ in 0..runs {
            run();
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "mode {:?}, {language:?}: {runs} runs of `{code}`",
            sb.mode()
        );
        println!(
            "  plain subprocess, sequential:                  {:7.1} runs/s ({:.1} ms/run)",
            runs as f64 / p,
            p * 1e3 / runs as f64
        );
        println!(
            "  sandbox, sequential:                          {:7.1} runs/s ({:.1} ms/run), overhead x{:.2}",
            runs as f64 / s,
            s * 1e3 / runs as f64,
            s / p
        );
        for &th in &threads {
            let t = Instant::now();
            std::thread::scope(|scope| {
                for i in 0..th {
                    let run = &run;
                    scope.spawn(move || (i..runs).step_by(th).for_each(|_| run()));
                }
            });
            let s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            std::thread::scope(|scope| {
                for i in 0..th {
                    scope.spawn(move || plain((i..runs).step_by(th).count()));
                }
            });
            let p = t.elapsed().as_secs_f64();
            println!(
                "  {th} threads: sandbox {:7.1} runs/s, plain {:7.1} runs/s, overhead x{:.2}",
                runs as f64 / s,
                runs as f64 / p,
                s / p
            );
        }
    }
    Ok(())
}
