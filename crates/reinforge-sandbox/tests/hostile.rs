//! Hostile programs: each must be contained and reported with the right status.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::*;
use reinforge_sandbox::{Language, Limits, PerRunLimits, RunStatus, Sandbox, SandboxConfig};

#[test]
fn network_is_unreachable_internet_and_host_loopback() {
    let _g = shared();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        r#"
import socket
for host, port in [("1.1.1.1", 53), ("127.0.0.1", {port})]:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect((host, port))
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__, e.errno)
try:
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"x", ("::1", {port}))
    print("CONNECTED udp6")
except OSError as e:
    print("blocked udp6", e.errno)
a, b = socket.socketpair()   # AF_UNIX stays usable (asyncio, multiprocessing)
a.sendall(b"ping"); print("unix", b.recv(4).decode())
"#
    );
    for (mode, sb) in both() {
        let r = py(sb, &code, short());
        let o = out(&r);
        assert_eq!(r.status, RunStatus::Finished, "{mode}: {}", show(&r));
        assert!(!o.contains("CONNECTED"), "{mode}: {}", show(&r));
        assert_eq!(o.matches("blocked").count(), 3, "{mode}: {}", show(&r));
        assert!(o.contains("unix ping"), "{mode}: {}", show(&r));
        // Bash's /dev/tcp goes through socket(AF_INET) too.
        let b = sb
            .run(&request(
                Language::Bash,
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo blocked"),
                short(),
            ))
            .unwrap();
        assert!(
            out(&b).contains("blocked") && !out(&b).contains("CONNECTED"),
            "{mode}: {}",
            show(&b)
        );
    }
    assert!(
        listener.accept().is_err(),
        "nothing may have reached the host listener"
    );
}

#[test]
fn writes_outside_the_working_directory_fail_and_host_tmp_is_invisible() {
    let _g = shared();
    let marker = format!("reinforge-sandbox-probe-{}", std::process::id());
    let host_tmp_secret = std::env::temp_dir().join(format!("{marker}-secret"));
    std::fs::write(&host_tmp_secret, "secret").unwrap();
    let code = format!(
        r#"
import os
for p in ["/etc/{m}", "/usr/{m}", "/{m}", "/code/{m}", "/bin/{m}", "/dev/{m}", "/proc/{m}", "/root/{m}"]:
    try:
        open(p, "w").write("x")
        print("WROTE", p)
    except OSError as e:
        print("denied", p, e.errno)
try:
    open("/proc/sys/kernel/hostname", "w").write("pwned"); print("WROTE sysctl")
except OSError as e:
    print("denied sysctl", e.errno)
open("/tmp/ok.txt", "w").write("fine"); print("tmp ok", open("ok.txt").read())
print("host tmp visible:", os.path.exists("{secret}"), sorted(os.listdir("/tmp")))
"#,
        m = marker,
        secret = host_tmp_secret.display()
    );
    for (mode, sb) in both() {
        let r = py(sb, &code, short());
        let o = out(&r);
        assert_eq!(r.status, RunStatus::Finished, "{mode}: {}", show(&r));
        assert!(!o.contains("WROTE"), "{mode}: {}", show(&r));
        assert_eq!(o.matches("denied").count(), 9, "{mode}: {}", show(&r));
        assert!(o.contains("tmp ok fine"), "{mode}: {}", show(&r));
        assert!(
            o.contains("host tmp visible: False ['ok.txt']"),
            "{mode}: {}",
            show(&r)
        );
    }
    for dir in ["/etc", "/usr", "/", "/bin", "/root"] {
        assert!(
            !std::path::Path::new(dir).join(&marker).exists(),
            "{dir}/{marker} created on the host"
        );
    }
    std::fs::remove_file(host_tmp_secret).unwrap();
}

#[test]
fn server_files_are_not_readable() {
    let _g = shared();
    let exe = std::env::current_exe().unwrap();
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let code = format!(
        r#"
import os
for p in ["{manifest}", "{exe}", "/work/main/Cargo.toml", "/root/.bashrc", "/root/.cargo/config.toml",
          "/proc/1/environ", "/proc/1/cmdline", "/proc/1/mem", "/etc/shadow", "/sys/kernel/notes"]:
    try:
        open(p, "rb").read(16)
        print("READ", p)
    except OSError as e:
        print("denied", p, e.errno)
print("root:", sorted(os.listdir("/root")) if os.path.isdir("/root") else None)
print("pids:", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("env:", sorted(os.environ))
print("work:", os.path.exists("/work"))
"#,
        exe = exe.display()
    );
    for (mode, sb) in both() {
        let r = py(sb, &code, short());
        let o = out(&r);
        assert_eq!(r.status, RunStatus::Finished, "{mode}: {}", show(&r));
        assert!(!o.contains("READ"), "{mode}: {}", show(&r));
        assert_eq!(o.matches("denied").count(), 10, "{mode}: {}", show(&r));
        // Only the interpreter prefix is under /root (pyenv here); nothing else of the home.
        let root_line = o.lines().find(|l| l.starts_with("root:")).unwrap();
        assert!(
            !root_line.contains(".bashrc") && !root_line.contains(".cargo"),
            "{mode}: {root_line}"
        );
        assert!(o.contains("work: False"), "{mode}: {}", show(&r));
        // The server's environment is not inherited.
        let env_line = o.lines().find(|l| l.starts_with("env:")).unwrap();
        assert!(
            !env_line.contains("CARGO") && !env_line.contains("RUST"),
            "{mode}: {env_line}"
        );
    }
    // Root mode: the init (uid 0) is hidden by hidepid; the program sees only its own tree.
    let r = py(
        sandbox(),
        "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
        short(),
    );
    assert!(
        !out(&r).contains("[1,") && out(&r).starts_with("[2"),
        "{}",
        show(&r)
    );
}

#[test]
fn fork_bomb_is_contained_and_reported() {
    let _g = exclusive();
    let code = r#"
import os, time
n = 0
while True:
    try:
        os.fork()
        n += 1
    except OSError:
        time.sleep(0.01)
"#;
    let limits = Limits {
        wall_time: Duration::from_secs(2),
        max_processes: 16,
        ..short()
    };
    let t = Instant::now();
    let r = py(sandbox(), code, limits);
    assert_eq!(r.status, RunStatus::TimeLimitExceeded, "{}", show(&r));
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t.elapsed()
    );
    // The host still forks fine and nothing of the bomb is left.
    let probe = std::process::Command::new("true").status().unwrap();
    assert!(probe.success());
    assert!(
        host_processes_matching("/code/main.py").is_empty(),
        "{:?}",
        host_processes_matching("/code/main.py")
    );
}

#[test]
fn memory_bombs_report_memory_limit() {
    let _g = shared();
    let limits = Limits {
        memory_bytes: 256 << 20,
        ..short()
    };
    for code in [
        "x = bytearray(1 << 31)",
        "l = []\nwhile True:\n    l.append(' ' * (1 << 20))",
    ] {
        let r = py(sandbox(), code, limits.clone());
        assert_eq!(
            r.status,
            RunStatus::MemoryLimitExceeded,
            "{code}: {}",
            show(&r)
        );
        assert!(err(&r).contains("MemoryError"), "{}", show(&r));
    }
}

/// Issue 24, finding 5: the memory limit is per run, not per process: 8 forked children of
/// 80 MiB each under a 100 MiB limit (each under RLIMIT_AS on its own) are killed with a memory
/// verdict (before the fix: Success, 700+ MiB held).
#[test]
fn forked_children_share_one_memory_limit() {
    let _g = exclusive();
    let code = r#"
import os, time
pids = []
for i in range(8):
    p = os.fork()
    if p == 0:
        x = b'\x01' * (80 << 20)
        time.sleep(3)
        os._exit(0)
    pids.append(p)
for p in pids:
    os.waitpid(p, 0)
print("survived")
"#;
    let limits = Limits {
        memory_bytes: 100 << 20,
        ..short()
    };
    // Which per-run limit applies here: a cgroup where /sys/fs/cgroup is a writable v2
    // hierarchy, else the watchdog (this test's host has cgroup v1: the watchdog).
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    match sandbox().per_run_limits() {
        PerRunLimits::Cgroup(root) => assert!(v2, "a cgroup under {}", root.display()),
        PerRunLimits::Watchdog(why) => assert!(
            !v2 || !nix_is_root() || why.contains("not writable"),
            "{why}"
        ),
    }
    for (mode, sb) in both() {
        let t = std::time::Instant::now();
        let r = py(sb, code, limits.clone());
        assert_eq!(
            r.status,
            RunStatus::MemoryLimitExceeded,
            "{mode}: {}",
            show(&r)
        );
        assert!(!out(&r).contains("survived"), "{mode}: {}", show(&r));
        assert!(r.message.contains("together"), "{mode}: {}", show(&r));
        assert!(r.message.contains("MiB"), "{mode}: {}", show(&r));
        assert!(
            t.elapsed() < std::time::Duration::from_secs(6),
            "{mode}: {:?}",
            t.elapsed()
        );
    }
    // One process under the limit still runs.
    let r = py(sandbox(), "x = b'\\x01' * (40 << 20)\nprint('ok')", limits);
    assert_eq!(
        (r.status, out(&r).trim()),
        (RunStatus::Finished, "ok"),
        "{}",
        show(&r)
    );
}

#[test]
fn infinite_loop_with_background_children_is_killed_at_wall_limit() {
    let _g = exclusive();
    let code = r#"
import subprocess, os
subprocess.Popen(["sleep", "1111.25"])
if os.fork() == 0:
    while True: pass
while True: pass
"#;
    for (mode, sb) in both() {
        let limits = Limits {
            wall_time: Duration::from_secs(2),
            ..short()
        };
        let t = Instant::now();
        let r = py(sb, code, limits);
        let took = t.elapsed();
        assert_eq!(
            r.status,
            RunStatus::TimeLimitExceeded,
            "{mode}: {}",
            show(&r)
        );
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(4),
            "{mode}: took {took:?}"
        );
        assert!(
            r.wall_time >= Duration::from_secs(2),
            "{mode}: {}",
            show(&r)
        );
        assert!(
            host_processes_matching("1111.25").is_empty(),
            "{mode}: {:?}",
            host_processes_matching("1111.25")
        );
        assert!(
            host_processes_matching("/code/main.py").is_empty(),
            "{mode}"
        );
    }
}

#[test]
fn cpu_limit_reports_time_limit() {
    let _g = shared();
    let limits = Limits {
        cpu_time: Duration::from_secs(1),
        wall_time: Duration::from_secs(6),
        ..short()
    };
    let t = Instant::now();
    let r = py(sandbox(), "while True: pass", limits);
    assert_eq!(r.status, RunStatus::TimeLimitExceeded, "{}", show(&r));
    assert_eq!(r.signal, Some(libc_sigxcpu()), "{}", show(&r));
    assert!(r.cpu_time >= Duration::from_millis(900), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

fn libc_sigxcpu() -> i32 {
    24 // SIGXCPU on Linux x86_64/aarch64
}

#[test]
fn daemonized_sleeper_is_killed() {
    let _g = exclusive();
    // setsid + double fork, the grandchild execs a long sleep; the program exits at once.
    let code = r#"
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "2222.5"])
    os._exit(0)
print("parent done")
"#;
    for (mode, sb) in both() {
        let t = Instant::now();
        let r = py(sb, code, short());
        assert_eq!(
            (r.status, r.exit_code),
            (RunStatus::Finished, Some(0)),
            "{mode}: {}",
            show(&r)
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{mode}: the daemon must not keep the run alive"
        );
        assert!(
            host_processes_matching("2222.5").is_empty(),
            "{mode}: {:?}",
            host_processes_matching("2222.5")
        );
    }
    // A daemon together with a program that never ends: killed at the wall limit.
    let forever = format!("{code}\nimport time\ntime.sleep(1000)");
    let r = py(
        sandbox(),
        &forever,
        Limits {
            wall_time: Duration::from_secs(1),
            ..short()
        },
    );
    assert_eq!(r.status, RunStatus::TimeLimitExceeded, "{}", show(&r));
    assert!(host_processes_matching("2222.5").is_empty());
}

#[test]
fn signalling_the_parent_or_everyone_does_not_escape() {
    let _g = shared();
    let code = r#"
import os, signal
print("ppid", os.getppid())
for target in [os.getppid(), 1, -1]:
    try:
        os.kill(target, signal.SIGKILL)
        print("sent", target)
    except OSError as e:
        print("refused", target, e.errno)
print("alive")
"#;
    for (mode, sb) in both() {
        let r = py(sb, code, short());
        assert_eq!(r.status, RunStatus::Finished, "{mode}: {}", show(&r));
        assert!(
            out(&r).contains("ppid 1\n") && out(&r).contains("alive"),
            "{mode}: {}",
            show(&r)
        );
        // The sandbox still works afterwards and this process survived (we are here).
        assert_eq!(out(&py(sb, "print('next')", short())), "next\n", "{mode}");
    }
    // Closing stdout/stderr early does not confuse the result collection.
    let r = py(
        sandbox(),
        "import os\nos.close(1)\nos.close(2)\nimport time\ntime.sleep(0.2)",
        short(),
    );
    assert_eq!(
        (r.status, r.exit_code),
        (RunStatus::Finished, Some(0)),
        "{}",
        show(&r)
    );
}

#[test]
fn dangerous_syscalls_are_denied_by_seccomp() {
    let _g = shared();
    let code = r#"
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def check(name, rc):
    print(name, "ALLOWED" if rc == 0 else "denied", ctypes.get_errno())
check("unshare_user", libc.unshare(0x10000000))
check("unshare_net", libc.unshare(0x40000000))
check("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
check("ptrace", libc.ptrace(16, 1, None, None))
check("chroot", libc.chroot(b"/tmp"))
check("bpf", libc.syscall(321, 0, None, 0))
check("keyctl", libc.syscall(250, 0, 0, 0, 0))
check("x32_getpid", 0 if libc.syscall(0x40000000 + 39) > 0 else -1)
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); print("netlink ALLOWED")
except OSError as e:
    print("netlink denied", e.errno)
print("pid", os.getpid())
"#;
    for (mode, sb) in both() {
        let r = py(sb, code, short());
        assert_eq!(r.status, RunStatus::Finished, "{mode}: {}", show(&r));
        assert!(!out(&r).contains("ALLOWED"), "{mode}: {}", show(&r));
        assert_eq!(out(&r).matches("denied").count(), 9, "{mode}: {}", show(&r));
    }
}

#[test]
fn host_stays_responsive_during_runs() {
    let _g = shared();
    // A sandboxed busy loop and a host-side read of a pipe at the same time.
    let sb = sandbox().clone();
    let h = std::thread::spawn(move || {
        py(
            &sb,
            "while True: pass",
            Limits {
                wall_time: Duration::from_secs(1),
                ..short()
            },
        )
    });
    let t = Instant::now();
    let mut child = std::process::Command::new("echo")
        .arg("hi")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut s = String::new();
    child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
    child.wait().unwrap();
    assert_eq!(s, "hi\n");
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(h.join().unwrap().status, RunStatus::TimeLimitExceeded);
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Issue 24, finding 5 (CPU): the CPU limit is the run's, not each process's: 4 busy children
/// under a 1 s limit (each would get 1 s from RLIMIT_CPU, and the parent would go on) are
/// killed together with a time verdict once they have used it between them.
#[test]
fn busy_children_share_one_cpu_limit() {
    let _g = exclusive();
    let code = r#"
import os
pids = []
for i in range(4):
    p = os.fork()
    if p == 0:
        while True:
            pass
    pids.append(p)
for p in pids:
    os.waitpid(p, 0)
print("survived")
"#;
    let limits = Limits {
        cpu_time: Duration::from_secs(1),
        wall_time: Duration::from_secs(15),
        ..short()
    };
    for (mode, sb) in both() {
        let r = py(sb, code, limits.clone());
        assert_eq!(
            r.status,
            RunStatus::TimeLimitExceeded,
            "{mode}: {}",
            show(&r)
        );
        assert!(!out(&r).contains("survived"), "{mode}: {}", show(&r));
        assert!(r.message.contains("CPU together"), "{mode}: {}", show(&r));
        // Killed at the run's limit (1 s, rounded as RLIMIT_CPU, + 0.2 s), well before the
        // 4 s the children could use one second each.
        assert!(
            r.cpu_time >= Duration::from_secs(1) && r.cpu_time < Duration::from_millis(2500),
            "{mode}: {}",
            show(&r)
        );
        assert!(
            r.wall_time < Duration::from_secs(10),
            "{mode}: {}",
            show(&r)
        );
    }
}

/// A directory imitating a cgroup v2 root (what `cgroup.controllers` and
/// `cgroup.subtree_control` are on cgroupfs); the sandbox writes its run groups there.
fn fake_cgroup_root() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("reinforge-fake-cgroupfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
    std::fs::write(d.join("cgroup.subtree_control"), "").unwrap();
    d
}

/// Where the hierarchy is cgroup v2 and writable, each run gets a group with the run's limits
/// and its init in `cgroup.procs`, removed after the run (checked against a directory that
/// imitates cgroupfs: this host has cgroup v1 only).
#[test]
fn runs_get_a_cgroup_with_their_limits_where_the_hierarchy_is_writable() {
    let _g = shared();
    let root = fake_cgroup_root();
    let mut c = SandboxConfig::new(caps());
    c.cgroup_root = Some(root.clone());
    let sb = Sandbox::with_config(c).expect("sandbox");
    assert_eq!(sb.per_run_limits(), PerRunLimits::Cgroup(root.clone()));
    let limits = Limits {
        memory_bytes: 300 << 20,
        max_processes: 24,
        ..short()
    };
    // Watch the root while the run sleeps: the run's group and what was written into it.
    let watcher = {
        let root = root.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                let groups: Vec<_> = std::fs::read_dir(&root)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .collect();
                if let [g] = &groups[..] {
                    let read = |f: &str| std::fs::read_to_string(g.path().join(f)).ok();
                    if let Some(procs) = read("cgroup.procs") {
                        let pid: i32 = procs.trim().parse().unwrap();
                        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
                        return Some((
                            g.file_name(),
                            read("memory.max"),
                            read("pids.max"),
                            read("cpu.max"),
                            alive,
                        ));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };
    let r = py(&sb, "import time\ntime.sleep(1)\nprint('done')", limits);
    assert_eq!(
        (r.status, out(&r).as_str()),
        (RunStatus::Finished, "done\n"),
        "{}",
        show(&r)
    );
    let (name, memory, pids, cpu, alive) = watcher.join().unwrap().expect("a run group appeared");
    assert!(
        name.to_string_lossy().starts_with("reinforge-run-"),
        "{name:?}"
    );
    assert_eq!(memory.as_deref(), Some((300u64 << 20).to_string().as_str()));
    assert_eq!(pids.as_deref(), Some("24"));
    assert_eq!(cpu.as_deref(), Some("100000 100000"));
    assert!(alive, "cgroup.procs named a process of the run");
    let left: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "groups left behind: {left:?}");
    std::fs::remove_dir_all(root).unwrap();
}
