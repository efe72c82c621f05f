//! Clamping of per-request limits to the server's caps, the rlimits applied to the program,
//! and the mapping of how the program ended to a [`RunStatus`].

use std::time::Duration;

use crate::{Limits, RunStatus};

impl Default for Limits {
    /// Conservative defaults for one test run: 10 s wall, 10 s CPU, 1 GiB address space,
    /// 64 processes, 16 MiB per file, 1 MiB per output stream.
    fn default() -> Self {
        Self {
            wall_time: Duration::from_secs(10),
            cpu_time: Duration::from_secs(10),
            memory_bytes: 1 << 30,
            max_processes: 64,
            max_file_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

impl Limits {
    /// Each limit the smaller of `self` and `caps`.
    pub fn clamped_to(&self, caps: &Limits) -> Limits {
        Limits {
            wall_time: self.wall_time.min(caps.wall_time),
            cpu_time: self.cpu_time.min(caps.cpu_time),
            memory_bytes: self.memory_bytes.min(caps.memory_bytes),
            max_processes: self.max_processes.min(caps.max_processes),
            max_file_bytes: self.max_file_bytes.min(caps.max_file_bytes),
            max_output_bytes: self.max_output_bytes.min(caps.max_output_bytes),
        }
    }
}

/// One `setrlimit` call of the program child.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rlimit {
    pub resource: libc::__rlimit_resource_t,
    pub soft: u64,
    pub hard: u64,
}

/// The rlimits of a run. CPU time is whole seconds (the kernel's granularity), rounded up and at
/// least 1; SIGXCPU comes at the soft limit, SIGKILL one second later.
pub(crate) fn rlimits(l: &Limits, max_open_files: u64) -> Vec<Rlimit> {
    let cpu = l.cpu_time.as_secs_f64().ceil().max(1.0) as u64;
    let r = |resource, soft, hard| Rlimit {
        resource,
        soft,
        hard,
    };
    vec![
        r(libc::RLIMIT_CPU, cpu, cpu + 1),
        r(libc::RLIMIT_AS, l.memory_bytes, l.memory_bytes),
        r(
            libc::RLIMIT_NPROC,
            l.max_processes as u64,
            l.max_processes as u64,
        ),
        r(libc::RLIMIT_FSIZE, l.max_file_bytes, l.max_file_bytes),
        r(libc::RLIMIT_CORE, 0, 0),
        r(libc::RLIMIT_NOFILE, max_open_files, max_open_files),
        r(libc::RLIMIT_MEMLOCK, 0, 0),
        r(libc::RLIMIT_MSGQUEUE, 0, 0),
    ]
}

/// Applies `limits` to the calling process. Async-signal-safe. Returns the errno on failure.
pub(crate) fn apply_rlimits(limits: &[Rlimit]) -> Result<(), i32> {
    for l in limits {
        let rl = libc::rlimit {
            rlim_cur: l.soft,
            rlim_max: l.hard,
        };
        // SAFETY: setrlimit with a valid struct.
        if unsafe { libc::setrlimit(l.resource, &rl) } != 0 {
            return Err(nix::errno::Errno::last_raw());
        }
    }
    Ok(())
}

/// Phrases an interpreter prints when an allocation fails under RLIMIT_AS.
const OOM_MARKERS: [&[u8]; 3] = [b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc"];

/// How the program ended, from its raw wait status (None when killed at the wall limit).
///
/// Memory: RLIMIT_AS makes allocations fail instead of killing the process, so Python raises
/// `MemoryError` and exits 1 (or aborts while handling it); an exit/abort with one of
/// [`OOM_MARKERS`] in stderr is reported as `MemoryLimitExceeded`. (A cgroup memory limit would
/// catch this exactly but needs a writable cgroup hierarchy per run, which a root-less server
/// does not have; RLIMIT_AS works in both modes.)
pub(crate) fn classify(
    wait_status: Option<i32>,
    stderr: &[u8],
    cpu: Duration,
    limits: &Limits,
) -> (RunStatus, Option<i32>, Option<i32>) {
    let Some(st) = wait_status else {
        return (RunStatus::TimeLimitExceeded, None, Some(libc::SIGKILL));
    };
    let oom = || {
        OOM_MARKERS
            .iter()
            .any(|m| stderr.windows(m.len()).any(|w| w == *m))
    };
    if libc::WIFEXITED(st) {
        let code = libc::WEXITSTATUS(st);
        let status = if code != 0 && oom() {
            RunStatus::MemoryLimitExceeded
        } else {
            RunStatus::Finished
        };
        return (status, Some(code), None);
    }
    let sig = libc::WTERMSIG(st);
    let cpu_limit = Duration::from_secs(limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64);
    let status = match sig {
        libc::SIGXCPU => RunStatus::TimeLimitExceeded,
        libc::SIGKILL if cpu >= cpu_limit => RunStatus::TimeLimitExceeded,
        libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS if oom() => RunStatus::MemoryLimitExceeded,
        _ => RunStatus::Killed,
    };
    (status, None, Some(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> i32 {
        code << 8
    }

    #[test]
    fn clamps_each_field_to_caps() {
        let caps = Limits {
            wall_time: Duration::from_secs(5),
            max_processes: 8,
            ..Limits::default()
        };
        let req = Limits {
            wall_time: Duration::from_secs(50),
            max_processes: 4,
            memory_bytes: 1 << 40,
            ..Limits::default()
        };
        let c = req.clamped_to(&caps);
        assert_eq!(c.wall_time, Duration::from_secs(5));
        assert_eq!(c.max_processes, 4);
        assert_eq!(c.memory_bytes, 1 << 30);
    }

    #[test]
    fn classifies_exit_signal_and_memory() {
        let l = Limits::default();
        let z = Duration::ZERO;
        assert_eq!(
            classify(Some(exited(3)), b"", z, &l),
            (RunStatus::Finished, Some(3), None)
        );
        assert_eq!(
            classify(Some(exited(1)), b"MemoryError\n", z, &l).0,
            RunStatus::MemoryLimitExceeded
        );
        assert_eq!(
            classify(Some(exited(0)), b"MemoryError\n", z, &l).0,
            RunStatus::Finished
        );
        assert_eq!(
            classify(Some(libc::SIGXCPU), b"", z, &l).0,
            RunStatus::TimeLimitExceeded
        );
        assert_eq!(
            classify(Some(libc::SIGKILL), b"", Duration::from_secs(11), &l).0,
            RunStatus::TimeLimitExceeded
        );
        assert_eq!(
            classify(Some(libc::SIGKILL), b"", z, &l),
            (RunStatus::Killed, None, Some(libc::SIGKILL))
        );
        assert_eq!(
            classify(Some(libc::SIGSYS), b"", z, &l).0,
            RunStatus::Killed
        );
        assert_eq!(classify(None, b"", z, &l).0, RunStatus::TimeLimitExceeded);
    }

    #[test]
    fn cpu_rlimit_rounds_up_to_whole_seconds() {
        let l = Limits {
            cpu_time: Duration::from_millis(1500),
            ..Limits::default()
        };
        let r = rlimits(&l, 64);
        let cpu = r.iter().find(|r| r.resource == libc::RLIMIT_CPU).unwrap();
        assert_eq!((cpu.soft, cpu.hard), (2, 3));
    }
}
