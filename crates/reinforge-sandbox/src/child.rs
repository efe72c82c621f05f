//! Code that runs in the sandbox after `clone`: the init (PID 1 of the new PID namespace) and
//! the program child it forks.
//!
//! Why not `std::process::Command` + `pre_exec`: a PID namespace needs one more fork after
//! `unshare(CLONE_NEWPID)`, and `Command` cannot express it; re-executing a helper binary would
//! need the server to ship and locate one. Instead the server `clone`s with all namespace flags
//! at once (the child is directly PID 1 of the new namespaces), and both processes run only
//! async-signal-safe code on data prepared before the clone ([`ChildPlan`]): raw syscalls on
//! pre-built C strings, no allocation, no locks. Forks use the raw `clone` syscall rather than
//! libc's `fork`, whose atfork handlers take malloc locks another server thread may have held
//! at the moment of the first clone; credentials are changed with raw syscalls too because
//! glibc's `setresuid` would try to broadcast the change to the (non-existent) sibling threads.
//!
//! The init builds the root (see [`crate::mounts`]), forks the program, reaps every process that
//! ends up under it, and when the program exits kills the rest of the namespace, sends the
//! requested files back and exits, which makes the kernel kill anything left. Killing the init
//! (the wall-clock limit) likewise kills the whole tree, including daemonized descendants.

use std::ffi::{c_char, CString};
use std::os::fd::RawFd;

use seccompiler::BpfProgram;

use crate::limits::{apply_rlimits, Rlimit};
use crate::mounts::{build_root, MountOp};
use crate::protocol::{
    report_error, write_record, Step, TAG_CHUNK, TAG_DONE, TAG_EXIT, TAG_FILE_END,
};

/// Fixed descriptors in the init after [`arrange_fds`].
const FD_STATUS: RawFd = 3;
const FD_SYNC: RawFd = 4;

/// Who the program runs as.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Identity {
    /// The server is root and uses no user namespace: the program gets this uid/gid.
    Root { uid: u32, gid: u32 },
    /// Inside a user namespace the program keeps uid 0 of that namespace, without any
    /// capability; `clear_groups` when the gid map allows `setgroups`.
    UserNs { clear_groups: bool },
}

/// Everything the child needs, prepared in the server before `clone`.
pub(crate) struct ChildPlan {
    pub staging: CString,
    pub root_data: CString,
    pub ops: Vec<MountOp>,
    pub hostname: CString,
    pub identity: Identity,
    pub rlimits: Vec<Rlimit>,
    pub work_dir: CString,
    pub input_dirs: Vec<CString>,
    pub input_files: Vec<(CString, Vec<u8>)>,
    pub exe: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub argv_ptrs: Vec<*const c_char>,
    pub envp_ptrs: Vec<*const c_char>,
    pub filters: Vec<BpfProgram>,
    pub fetch: Vec<CString>,
    pub fetch_cap: u64,
}

impl ChildPlan {
    /// Fills the NULL-terminated pointer arrays of `argv`/`envp` (call after the strings are in
    /// place; the heap buffers of `CString`s do not move with the plan).
    pub(crate) fn finish(&mut self) {
        self.argv_ptrs = self
            .argv
            .iter()
            .map(|c| c.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        self.envp_ptrs = self
            .envp
            .iter()
            .map(|c| c.as_ptr())
            .chain([std::ptr::null()])
            .collect();
    }
}

/// The server-side descriptors handed to the init.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChildFds {
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub status: RawFd,
    pub sync: RawFd,
}

fn errno() -> i32 {
    nix::errno::Errno::last_raw()
}

fn exit(code: i32) -> ! {
    // SAFETY: _exit never returns and runs no atexit handlers.
    unsafe { libc::_exit(code) }
}

/// fork(2) without libc's atfork handlers (see the module docs). Returns 0 in the child.
pub(crate) fn raw_clone(flags: libc::c_long) -> libc::c_long {
    // SAFETY: clone without CLONE_VM and with a NULL stack behaves like fork: the child runs on
    // its own copy of the current stack.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as libc::c_long,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    }
}

/// Moves the needed descriptors to 0..=4 and closes everything else — descriptors of other
/// requests that happened to be open in the server at clone time included.
fn arrange_fds(fds: ChildFds) -> bool {
    let src = [fds.stdin, fds.stdout, fds.stderr, fds.status, fds.sync];
    let mut tmp = [0; 5];
    for (i, &fd) in src.iter().enumerate() {
        // SAFETY: fcntl/dup2/close_range on descriptors we own in this process copy.
        tmp[i] = unsafe { libc::fcntl(fd, libc::F_DUPFD, 10) };
        if tmp[i] < 0 {
            return false;
        }
    }
    for (i, &fd) in tmp.iter().enumerate() {
        if unsafe { libc::dup2(fd, i as RawFd) } < 0 {
            return false;
        }
    }
    unsafe { libc::syscall(libc::SYS_close_range, 5u32, u32::MAX, 0u32) == 0 }
}

/// Resets every signal to its default action and unblocks all (the server's handlers must not
/// run here). Async-signal-safe.
fn reset_signals() {
    // SAFETY: signal/sigprocmask with valid arguments; failures (for SIGKILL, SIGSTOP and
    // libc-reserved signals) are harmless.
    unsafe {
        for sig in 1..=64 {
            libc::signal(sig, libc::SIG_DFL);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Entry of the cloned child (PID 1 of the new namespaces). Never returns.
pub(crate) fn init_main(plan: &ChildPlan, fds: ChildFds) -> ! {
    reset_signals();
    if !arrange_fds(fds) {
        report_error(fds.status, Step::Fds, errno(), usize::MAX);
        exit(1);
    }
    // SAFETY: prctl/signal/read/close with valid arguments.
    unsafe {
        // A write to a closed status pipe must not kill the init before it reports.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // If the server thread dies, the init dies and with it the namespace.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
    let mut go = [0u8; 1];
    if unsafe { libc::read(FD_SYNC, go.as_mut_ptr().cast(), 1) } != 1 {
        report_error(FD_STATUS, Step::Sync, errno(), usize::MAX);
        exit(1);
    }
    unsafe { libc::close(FD_SYNC) };
    if let Err((e, idx)) = crate::mounts::open_bind_sources(&plan.ops) {
        report_error(FD_STATUS, Step::Bind, e, idx);
        exit(1);
    }
    if let Identity::UserNs { .. } = plan.identity {
        // The maps are written now, but this process still has the server's ids, which may be
        // unmapped inside (root maps 0 to 65534): become uid/gid 0 of the namespace so that
        // files it creates (the new root) have mapped owners.
        unsafe {
            if libc::syscall(libc::SYS_setresgid, 0, 0, 0) != 0 {
                report_error(FD_STATUS, Step::Setgid, errno(), usize::MAX);
                exit(1);
            }
            if libc::syscall(libc::SYS_setresuid, 0, 0, 0) != 0 {
                report_error(FD_STATUS, Step::Setuid, errno(), usize::MAX);
                exit(1);
            }
        }
    }
    let host = plan.hostname.as_bytes();
    if unsafe { libc::sethostname(host.as_ptr().cast(), host.len()) } != 0 {
        report_error(FD_STATUS, Step::Hostname, errno(), usize::MAX);
        exit(1);
    }
    if let Err((step, e, idx)) = build_root(&plan.staging, &plan.root_data, &plan.ops) {
        report_error(FD_STATUS, step, e, idx);
        exit(1);
    }
    // The bind-source descriptors must not reach the program.
    unsafe { libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) };
    // Nobody inside may read the init's memory (a copy of the server's) through /proc/1.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong) };

    let pid = raw_clone(0);
    if pid < 0 {
        report_error(FD_STATUS, Step::Fork, errno(), usize::MAX);
        exit(1);
    }
    if pid == 0 {
        program_main(plan);
    }
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
    }
    // Reap everything (orphans are re-parented to us) until the program itself ends.
    let mut program_status = 0;
    loop {
        let mut st = 0;
        let r = unsafe { libc::waitpid(-1, &mut st, 0) };
        if r == pid as libc::pid_t {
            program_status = st;
            break;
        }
        if r < 0 && errno() != libc::EINTR {
            break;
        }
    }
    // Then kill the rest of the namespace and reap it, so the files read next are quiescent.
    unsafe { libc::kill(-1, libc::SIGKILL) };
    loop {
        let mut st = 0;
        let r = unsafe { libc::waitpid(-1, &mut st, 0) };
        if r < 0 && errno() != libc::EINTR {
            break;
        }
    }
    write_record(FD_STATUS, TAG_EXIT, program_status as u32, 0, 0, &[]);
    send_files(plan);
    write_record(FD_STATUS, TAG_DONE, 0, 0, 0, &[]);
    exit(0)
}

/// Streams the requested files of the working directory to the server. Paths are resolved with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`
/// so a symlink planted by the program cannot make the (privileged) init read anything outside
/// the working directory; only regular files are sent, at most `fetch_cap` bytes each.
fn send_files(plan: &ChildPlan) {
    let dir = unsafe {
        libc::open(
            plan.work_dir.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    let mut buf = [0u8; 16384];
    for (idx, name) in plan.fetch.iter().enumerate() {
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_BENEATH
            | libc::RESOLVE_NO_SYMLINKS
            | libc::RESOLVE_NO_MAGICLINKS
            | libc::RESOLVE_NO_XDEV;
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                name.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        } as RawFd;
        if fd < 0 {
            continue;
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_mode & libc::S_IFMT) != libc::S_IFREG
        {
            unsafe { libc::close(fd) };
            continue;
        }
        let mut sent: u64 = 0;
        let mut truncated = 0;
        loop {
            let want = buf.len().min((plan.fetch_cap - sent) as usize + 1);
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), want) };
            if n <= 0 {
                break;
            }
            let mut n = n as u64;
            if sent + n > plan.fetch_cap {
                n = plan.fetch_cap - sent;
                truncated = 1;
            }
            if n > 0 && !write_record(FD_STATUS, TAG_CHUNK, idx as u32, 0, 0, &buf[..n as usize]) {
                break;
            }
            sent += n;
            if truncated == 1 {
                break;
            }
        }
        unsafe { libc::close(fd) };
        write_record(FD_STATUS, TAG_FILE_END, idx as u32, truncated, 0, &[]);
    }
    unsafe { libc::close(dir) };
}

fn fail(step: Step, e: i32) -> ! {
    report_error(FD_STATUS, step, e, usize::MAX);
    exit(127)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability for good: securebits (no root magic on exec, locked), the bounding
/// and ambient sets, then — in root mode — switches to the sandbox uid/gid, and finally clears
/// the effective/permitted/inheritable sets. Raw syscalls (see the module docs).
fn drop_privileges(identity: Identity) {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    unsafe {
        if libc::prctl(libc::PR_SET_SECUREBITS, bits) != 0 {
            fail(Step::Securebits, errno());
        }
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong) != 0
                && errno() != libc::EINVAL
            {
                fail(Step::CapBoundingSet, errno());
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
        match identity {
            Identity::Root { uid, gid } => {
                if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0
                {
                    fail(Step::Setgroups, errno());
                }
                if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0 {
                    fail(Step::Setgid, errno());
                }
                if libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0 {
                    fail(Step::Setuid, errno());
                }
            }
            Identity::UserNs { clear_groups } => {
                if clear_groups
                    && libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>())
                        != 0
                {
                    fail(Step::Setgroups, errno());
                }
            }
        }
        let head = CapHeader {
            version: 0x2008_0522,
            pid: 0,
        }; // _LINUX_CAPABILITY_VERSION_3
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &head as *const CapHeader, data.as_ptr()) != 0 {
            fail(Step::Capset, errno());
        }
    }
}

/// The program child: drop privileges, write the input files, set rlimits, no_new_privs and
/// seccomp, exec. Never returns.
fn program_main(plan: &ChildPlan) -> ! {
    unsafe {
        // The status pipe stays open only for reporting a failure before exec.
        libc::fcntl(FD_STATUS, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::setsid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
    drop_privileges(plan.identity);
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong) };
    if unsafe { libc::chdir(plan.work_dir.as_ptr()) } != 0 {
        fail(Step::Chdir, errno());
    }
    for d in &plan.input_dirs {
        if unsafe { libc::mkdir(d.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
            fail(Step::InputFile, errno());
        }
    }
    for (path, content) in &plan.input_files {
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 || !crate::protocol::write_all_raw(fd, content) {
            fail(Step::InputFile, errno());
        }
        unsafe { libc::close(fd) };
    }
    if let Err(e) = apply_rlimits(&plan.rlimits) {
        fail(Step::Rlimit, e);
    }
    if unsafe {
        libc::prctl(
            libc::PR_SET_NO_NEW_PRIVS,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } != 0
    {
        fail(Step::NoNewPrivs, errno());
    }
    if let Err(e) = crate::seccomp::apply_raw(&plan.filters) {
        fail(Step::Seccomp, e);
    }
    unsafe {
        libc::execve(
            plan.exe.as_ptr(),
            plan.argv_ptrs.as_ptr(),
            plan.envp_ptrs.as_ptr(),
        )
    };
    fail(Step::Exec, errno())
}
