//! `reinforge train --nproc N`: starts N ranks of the same command on this machine with
//! torchrun's environment variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a
//! free MASTER_PORT), waits for them, and fails as soon as one rank fails (the others are
//! stopped). Multi-node jobs use torchrun or any launcher that sets the same variables.

use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Re-runs this command as `n` ranks (without `--nproc`) and returns the job's exit code.
pub fn local_ranks(n: usize) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the reinforge binary")?;
    let args = without_nproc(std::env::args().skip(1).collect());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port for the rendezvous")?
        .port();
    let mut children: Vec<Child> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args(&args)
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("LOCAL_WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
                .with_context(|| format!("starting rank {r}"))
        })
        .collect::<Result<_>>()?;
    let mut done = vec![false; n];
    loop {
        for (r, c) in children.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            if let Some(status) = c.try_wait()? {
                done[r] = true;
                if !status.success() {
                    std::thread::sleep(Duration::from_secs(2));
                    for (k, other) in children.iter_mut().enumerate() {
                        if k != r {
                            let _ = other.kill();
                            let _ = other.wait();
                        }
                    }
                    bail!("rank {r} of {n} failed ({status}); the other ranks were stopped");
                }
            }
        }
        if done.iter().all(|&d| d) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `args` without `--nproc N` / `--nproc=N`.
fn without_nproc(args: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == "--nproc" {
            skip = true;
        } else if !a.starts_with("--nproc=") {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nproc_is_dropped_in_both_spellings() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            without_nproc(v(&["train", "--nproc", "2", "--set", "a=1"])),
            v(&["train", "--set", "a=1"])
        );
        assert_eq!(without_nproc(v(&["train", "--nproc=4"])), v(&["train"]));
    }
}
