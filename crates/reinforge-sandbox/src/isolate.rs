//! The server side of one run: pipes, the namespaced `clone`, uid/gid maps, stdin/stdout/stderr
//! pumping with output caps, the wall-clock kill, the per-run watchdog (memory and CPU time of
//! all the run's processes together) and the collection of the result.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use crate::cgroup::RunGroup;
use crate::child::{init_main, raw_clone, ChildFds, ChildPlan};
use crate::limits::classify;
use crate::protocol::{drain_records, Step, TAG_CHUNK, TAG_DONE, TAG_ERR, TAG_EXIT, TAG_FILE_END};
use crate::{Limits, RunResult, RunStatus};

/// The uid/gid maps written for a run in a user namespace: uid/gid 0 inside maps to these.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserNsMap {
    pub outer_uid: u32,
    pub outer_gid: u32,
    /// Write "deny" to `setgroups` first (required when the server is not root).
    pub deny_setgroups: bool,
}

/// Inputs of [`launch`] besides the child plan.
pub(crate) struct Launch<'a> {
    pub user_ns: Option<UserNsMap>,
    pub stdin: Option<&'a [u8]>,
    pub limits: &'a Limits,
    pub fetch_names: &'a [String],
    /// The run's cgroup, where the hierarchy is writable; the init joins it before it starts.
    pub group: Option<&'a RunGroup>,
}

/// A [`RunResult`] for a failure of the sandbox itself.
pub(crate) fn sandbox_error(message: String, wall_time: Duration) -> RunResult {
    RunResult {
        status: RunStatus::SandboxError,
        exit_code: None,
        signal: None,
        stdout: Vec::new(),
        stderr: Vec::new(),
        truncated: false,
        wall_time,
        cpu_time: Duration::ZERO,
        files: BTreeMap::new(),
        message,
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// Reads `fd` to EOF keeping at most `cap` bytes; returns them and whether more came.
fn read_capped(fd: OwnedFd, cap: usize) -> (Vec<u8>, bool) {
    let mut f = std::fs::File::from(fd);
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 65536];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    (kept, truncated)
}

fn write_id_maps(pid: i32, m: UserNsMap) -> std::io::Result<()> {
    let proc = format!("/proc/{pid}");
    if m.deny_setgroups {
        std::fs::write(format!("{proc}/setgroups"), "deny")?;
    }
    std::fs::write(format!("{proc}/uid_map"), format!("0 {} 1\n", m.outer_uid))?;
    std::fs::write(format!("{proc}/gid_map"), format!("0 {} 1\n", m.outer_gid))?;
    Ok(())
}

fn wait_rusage(pid: i32) -> (i32, Duration) {
    let mut st = 0;
    // SAFETY: wait4 into valid out-parameters.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
        if r >= 0 || nix::errno::Errno::last_raw() != libc::EINTR {
            break;
        }
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (st, tv(ru.ru_utime) + tv(ru.ru_stime))
}

fn clone_hint(errno: i32, user_ns: bool) -> &'static str {
    match (errno, user_ns) {
        (libc::EPERM, false) => "creating namespaces needs root (CAP_SYS_ADMIN); run the server as root or use IsolationMode::UserNamespace",
        (libc::EPERM, true) | (libc::ENOSPC, true) => {
            "unprivileged user namespaces are disabled or exhausted (see /proc/sys/user/max_user_namespaces, kernel.unprivileged_userns_clone, AppArmor restrict_unprivileged_userns)"
        }
        (libc::EINVAL, _) => "the kernel lacks one of the namespace types",
        _ => "",
    }
}

/// Runs the prepared plan and collects the result. Never runs anything outside the namespaces:
/// every failure before `execve` becomes a `SandboxError`.
pub(crate) fn launch(plan: &ChildPlan, l: Launch) -> RunResult {
    let start = Instant::now();
    let err = |m: String| sandbox_error(m, start.elapsed());
    let pipes = (|| Ok::<_, std::io::Error>((pipe()?, pipe()?, pipe()?, pipe()?, pipe()?)))();
    let Ok(((in_r, in_w), (out_r, out_w), (err_r, err_w), (st_r, st_w), (sync_r, sync_w))) = pipes
    else {
        return err(format!("creating pipes: {}", pipes.err().unwrap()));
    };
    let fds = ChildFds {
        stdin: in_r.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        status: st_w.as_raw_fd(),
        sync: sync_r.as_raw_fd(),
    };
    let mut flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if l.user_ns.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    // Block all signals across the clone so no server signal handler runs in the child before
    // it resets them; the parent thread's mask is restored right after.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = raw_clone(flags as libc::c_long);
        if pid == 0 {
            init_main(plan, fds);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        pid
    };
    if pid < 0 {
        let e = nix::errno::Errno::last();
        return err(format!(
            "clone with new namespaces failed: {e} (euid {}); {}",
            nix::unistd::geteuid(),
            clone_hint(e as i32, l.user_ns.is_some())
        ));
    }
    let pid = pid as i32;
    drop((in_r, out_w, err_w, st_w, sync_r));
    let kill_and_reap = || {
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_rusage(pid);
    };
    if let Some(m) = l.user_ns {
        if let Err(e) = write_id_maps(pid, m) {
            kill_and_reap();
            return err(format!(
                "writing the uid/gid maps of the user namespace (/proc/{pid}/uid_map): {e}"
            ));
        }
    }
    if let Some(g) = l.group {
        if let Err(e) = g.add(pid) {
            kill_and_reap();
            return err(format!("putting the run into its cgroup: {e}"));
        }
    }
    if (&std::fs::File::from(sync_w)).write_all(b"g").is_err() {
        kill_and_reap();
        return err("the sandbox init died before setup".into());
    }

    let cap = l.limits.max_output_bytes;
    let stdin = l.stdin.map(|s| s.to_vec());
    let (outcome, (stdout, t1), (stderr, t2)) = std::thread::scope(|s| {
        s.spawn(move || {
            let mut w = std::fs::File::from(in_w);
            if let Some(data) = stdin {
                let _ = w.write_all(&data); // EPIPE when the program does not read: fine
            }
        });
        let out = s.spawn(move || read_capped(out_r, cap));
        let errh = s.spawn(move || read_capped(err_r, cap));
        let watch = Watch {
            memory: l.limits.memory_bytes,
            cpu: run_cpu_limit(l.limits.cpu_time),
            group: l.group,
        };
        let outcome = read_status(
            st_r,
            pid,
            start + l.limits.wall_time,
            l.fetch_names.len(),
            watch,
        );
        (
            outcome,
            out.join().unwrap_or_default(),
            errh.join().unwrap_or_default(),
        )
    });
    let wall_time = start.elapsed();
    let StatusOutcome {
        error,
        exit,
        files,
        timed_out,
        cpu,
        memory_exceeded,
        cpu_exceeded,
    } = outcome;
    // Killed by the watchdog (the processes together used the run's CPU time or held too
    // much memory) or by the kernel (the run's cgroup reached memory.max).
    let oom_killed = l.group.is_some_and(RunGroup::oom_killed);
    let limit_mib = l.limits.memory_bytes >> 20;
    let verdict = match (cpu_exceeded, memory_exceeded) {
        (Some(used), _) => Some((
            RunStatus::TimeLimitExceeded,
            cpu.max(used),
            format!(
                "killed: the run's processes used {:.2} s of CPU together; the run's limit is {:.2} s",
                used.as_secs_f64(),
                l.limits.cpu_time.as_secs_f64()
            ),
        )),
        (None, Some(held)) => Some((
            RunStatus::MemoryLimitExceeded,
            cpu,
            format!(
                "killed: the run's processes held {} MiB together; the run's limit is {limit_mib} MiB",
                held >> 20
            ),
        )),
        (None, None) if oom_killed => Some((
            RunStatus::MemoryLimitExceeded,
            cpu,
            format!(
                "killed by the kernel: the run's processes together reached its cgroup's \
                 memory.max of {limit_mib} MiB"
            ),
        )),
        (None, None) => None,
    };
    if let Some((status, cpu_time, message)) = verdict {
        return RunResult {
            status,
            exit_code: None,
            signal: Some(libc::SIGKILL),
            stdout,
            stderr,
            truncated: t1 || t2,
            wall_time,
            cpu_time,
            files: BTreeMap::new(),
            message,
        };
    }
    if let Some((step, errno, index)) = error {
        let what = Step::from_u32(step)
            .map(|s| s.describe())
            .unwrap_or("unknown step");
        let op = plan
            .ops
            .get(index as usize)
            .map(|o| format!(" [{}]", o.describe()))
            .unwrap_or_default();
        let mut r = err(format!(
            "sandbox setup failed while {what}{op}: {}",
            nix::errno::Errno::from_raw(errno as i32)
        ));
        r.stderr = stderr;
        r.wall_time = wall_time;
        return r;
    }
    let wait_status = if timed_out { None } else { exit };
    if wait_status.is_none() && !timed_out {
        return err("the sandbox init ended without reporting the program's status".into());
    }
    let (status, exit_code, signal) = classify(wait_status, &stderr, cpu, l.limits);
    let files = files
        .into_iter()
        .map(|(i, data)| (l.fetch_names[i].clone(), data))
        .collect::<BTreeMap<_, _>>();
    RunResult {
        status,
        exit_code,
        signal,
        stdout,
        stderr,
        truncated: t1 || t2,
        wall_time,
        cpu_time: cpu,
        files,
        message: if timed_out {
            format!("killed at the wall-clock limit of {:?}", l.limits.wall_time)
        } else {
            String::new()
        },
    }
}

struct StatusOutcome {
    error: Option<(u32, u32, u32)>,
    exit: Option<i32>,
    files: BTreeMap<usize, Vec<u8>>,
    timed_out: bool,
    cpu: Duration,
    /// The bytes the run's processes held together when the watchdog killed it.
    memory_exceeded: Option<u64>,
    /// The CPU time the run's processes had used together when the watchdog killed it.
    cpu_exceeded: Option<Duration>,
}

/// How often the per-run watchdog sums the run's resident memory and CPU time.
const MEMORY_POLL: Duration = Duration::from_millis(20);

/// What the watchdog holds the run to.
pub(crate) struct Watch<'a> {
    /// Resident bytes of all the run's processes together.
    pub memory: u64,
    /// CPU time of all the run's processes together ([`run_cpu_limit`]).
    pub cpu: Duration,
    /// The run's cgroup: its `cpu.stat` counts CPU time exactly.
    pub group: Option<&'a RunGroup>,
}

/// The run's CPU-time limit as the watchdog applies it: RLIMIT_CPU's whole seconds (rounded
/// up, at least 1) and 0.2 s, so that a run of one process meets RLIMIT_CPU's SIGXCPU first and
/// the watchdog kills the runs whose processes share the time among them.
pub(crate) fn run_cpu_limit(cpu: Duration) -> Duration {
    Duration::from_secs(cpu.as_secs_f64().ceil().max(1.0) as u64) + Duration::from_millis(200)
}

/// What the processes of one run hold and used, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TreeUsage {
    /// Resident bytes.
    pub rss: u64,
    /// User and system CPU time, the reaped children's included.
    pub cpu: Duration,
}

/// Resident pages and CPU ticks (user, system, and those of reaped children) from the text of
/// `/proc/<pid>/stat`; `None` when it does not parse. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime..cstime are fields 14..=17, rss field 24.
    let num = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    let ticks = num(14)? + num(15)? + num(16)? + num(17)?;
    Some((num(24)?, ticks))
}

/// The resident bytes and CPU time of process `pid` and its descendants
/// (`/proc/<p>/task/<t>/children`, `/proc/<p>/stat`). Pages shared copy-on-write after a fork
/// count in each process, so the memory sum can only over-count; a child's CPU time moves into
/// its parent's once reaped. Processes that vanish while being read count as 0.
fn tree_usage(pid: i32) -> TreeUsage {
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let mut rss = 0u64;
    let mut ticks = 0u64;
    let mut todo = vec![pid];
    let mut seen = 0usize;
    while let Some(p) = todo.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        if let Some((pages, t)) = parse_stat(&stat) {
            rss = rss.saturating_add(pages.saturating_mul(page));
            ticks = ticks.saturating_add(t);
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
    }
    TreeUsage {
        rss,
        cpu: Duration::from_micros(ticks.saturating_mul(1_000_000) / hz),
    }
}

/// Reads the status pipe until the init is done or the deadline passes (then kills the init,
/// which takes the whole PID namespace with it), and reaps the init.
///
/// Also the per-run limits: RLIMIT_AS and RLIMIT_CPU cap each process, so a run that forks
/// could hold `max_processes` times its memory and CPU time; every [`MEMORY_POLL`] the resident
/// memory and CPU time of the init and all its descendants are summed (CPU time from the run's
/// cgroup when it has one), and the run is killed when a sum passes `watch`'s (issue 24,
/// finding 5). Fetched files travel within the same deadline.
fn read_status(
    st_r: OwnedFd,
    pid: i32,
    deadline: Instant,
    n_fetch: usize,
    watch: Watch,
) -> StatusOutcome {
    let mut o = StatusOutcome {
        error: None,
        exit: None,
        files: BTreeMap::new(),
        timed_out: false,
        cpu: Duration::ZERO,
        memory_exceeded: None,
        cpu_exceeded: None,
    };
    let mut partial: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut f = std::fs::File::from(st_r);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 65536];
    'outer: loop {
        let now = Instant::now();
        if now >= deadline {
            // Past the deadline the run ends, fetched files included.
            o.timed_out = o.exit.is_none();
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break;
        }
        if o.exit.is_none() {
            let used = tree_usage(pid);
            let cpu = watch
                .group
                .and_then(RunGroup::cpu_usage)
                .unwrap_or(used.cpu);
            if used.rss > watch.memory {
                o.memory_exceeded = Some(used.rss);
            } else if cpu > watch.cpu {
                o.cpu_exceeded = Some(cpu);
            }
            if o.memory_exceeded.is_some() || o.cpu_exceeded.is_some() {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break;
            }
        }
        let ms = if o.exit.is_some() {
            (deadline - now).as_millis().clamp(1, 5000) as i32
        } else {
            (deadline - now)
                .min(MEMORY_POLL)
                .as_millis()
                .clamp(1, i32::MAX as u128) as i32
        };
        let mut pfd = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            if nix::errno::Errno::last_raw() == libc::EINTR {
                continue;
            }
            break;
        }
        if r == 0 {
            if o.exit.is_some() && Instant::now() >= deadline {
                // The init hangs after the program ended (cannot happen short of a kernel
                // problem); do not wait for it any longer.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break;
            }
            continue;
        }
        let n = match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        buf.extend_from_slice(&chunk[..n]);
        for rec in drain_records(&mut buf) {
            match rec.tag {
                TAG_ERR if o.error.is_none() => o.error = Some((rec.a, rec.b, rec.c)),
                TAG_EXIT => o.exit = Some(rec.a as i32),
                TAG_CHUNK if (rec.a as usize) < n_fetch => partial
                    .entry(rec.a as usize)
                    .or_default()
                    .extend_from_slice(&rec.payload),
                TAG_FILE_END if (rec.a as usize) < n_fetch => {
                    o.files.insert(
                        rec.a as usize,
                        partial.remove(&(rec.a as usize)).unwrap_or_default(),
                    );
                }
                TAG_DONE => break 'outer,
                _ => {}
            }
        }
    }
    let (_, cpu) = wait_rusage(pid);
    o.cpu = cpu;
    o
}

/// Distinct uids for concurrent runs in root mode, so that RLIMIT_NPROC (counted per real uid
/// across the host) of one run is not consumed by another.
pub(crate) mod uid_pool {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// Slots `0..size` handed out at most once at a time.
    pub(crate) struct Pool {
        in_use: Mutex<BTreeSet<u32>>,
        next: AtomicU32,
        size: u32,
    }

    /// The process-wide pool of root-mode uids (offsets from `SandboxConfig::uid_base`).
    pub(crate) static GLOBAL: Pool = Pool::new(50_000);

    /// A slot, released on drop.
    pub(crate) struct Slot<'a> {
        pub index: u32,
        pool: &'a Pool,
    }

    impl Pool {
        pub(crate) const fn new(size: u32) -> Self {
            Self {
                in_use: Mutex::new(BTreeSet::new()),
                next: AtomicU32::new(0),
                size,
            }
        }

        /// A free slot, or None when all `size` are in use.
        pub(crate) fn acquire(&self) -> Option<Slot<'_>> {
            let mut set = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..self.size {
                let s = self.next.fetch_add(1, Ordering::Relaxed) % self.size;
                if set.insert(s) {
                    return Some(Slot {
                        index: s,
                        pool: self,
                    });
                }
            }
            None
        }
    }

    impl Drop for Slot<'_> {
        fn drop(&mut self) {
            self.pool
                .in_use
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.index);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::Pool;

        #[test]
        fn slots_are_unique_while_held_and_reused_after_release() {
            let pool = Pool::new(2);
            let a = pool.acquire().unwrap();
            let b = pool.acquire().unwrap();
            assert_ne!(a.index, b.index);
            assert!(pool.acquire().is_none(), "pool of 2 is exhausted");
            let freed = a.index;
            drop(a);
            assert_eq!(pool.acquire().unwrap().index, freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with spaces and parentheses; utime 100, stime 20, cutime 3, cstime 4,
        // rss 2500 pages.
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 500 0 0 0 100 20 3 4 20 0 1 0 \
                    12345 104857600 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0";
        assert_eq!(parse_stat(stat), Some((2500, 127)));
        assert_eq!(parse_stat("4242 (truncated"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn the_run_cpu_limit_follows_rlimit_cpu() {
        let ms = Duration::from_millis;
        assert_eq!(run_cpu_limit(ms(1500)), ms(2200));
        assert_eq!(run_cpu_limit(ms(0)), ms(1200));
        assert_eq!(run_cpu_limit(ms(3000)), ms(3200));
    }

    #[test]
    fn this_process_tree_is_measured() {
        let u = tree_usage(std::process::id() as i32);
        assert!(u.rss > 1 << 20, "{u:?}");
    }
}
