//! Records on the status pipe from the sandbox's init (and the program child before `execve`)
//! to the server.
//!
//! Hand-written on purpose: the writer side runs between `clone` and `execve` in a copy of a
//! multi-threaded process, where only async-signal-safe work is allowed (no allocation, no
//! locks), so records are fixed-size headers of native-endian `u32`s built on the stack.

use std::os::fd::RawFd;

/// A setup step failed: `a` = [`Step`], `b` = errno, `c` = index of the mount operation.
pub(crate) const TAG_ERR: u32 = 1;
/// The program ended: `a` = raw wait status.
pub(crate) const TAG_EXIT: u32 = 2;
/// Part of a fetched file: `a` = index in `fetch_files`, payload follows.
pub(crate) const TAG_CHUNK: u32 = 3;
/// A fetched file is complete: `a` = index, `b` = 1 when cut at the size cap.
pub(crate) const TAG_FILE_END: u32 = 4;
/// The init is done; nothing follows.
pub(crate) const TAG_DONE: u32 = 5;

/// Header length in bytes: tag, a, b, c, payload length.
pub(crate) const HEADER: usize = 20;

/// Steps of the sandbox setup, named in [`Step::describe`] for `SandboxError` messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    Fds = 1,
    Sync,
    Hostname,
    MakePrivate,
    RootTmpfs,
    Mkdir,
    Touch,
    Bind,
    RemountReadOnly,
    Tmpfs,
    Proc,
    Symlink,
    WriteFile,
    Statvfs,
    PivotRoot,
    UmountOldRoot,
    Chdir,
    RemountRoot,
    Fork,
    Securebits,
    CapBoundingSet,
    Setgroups,
    Setgid,
    Setuid,
    Capset,
    InputFile,
    Rlimit,
    NoNewPrivs,
    Seccomp,
    Exec,
    Signals,
}

impl Step {
    const ALL: [Step; 31] = [
        Step::Fds,
        Step::Sync,
        Step::Hostname,
        Step::MakePrivate,
        Step::RootTmpfs,
        Step::Mkdir,
        Step::Touch,
        Step::Bind,
        Step::RemountReadOnly,
        Step::Tmpfs,
        Step::Proc,
        Step::Symlink,
        Step::WriteFile,
        Step::Statvfs,
        Step::PivotRoot,
        Step::UmountOldRoot,
        Step::Chdir,
        Step::RemountRoot,
        Step::Fork,
        Step::Securebits,
        Step::CapBoundingSet,
        Step::Setgroups,
        Step::Setgid,
        Step::Setuid,
        Step::Capset,
        Step::InputFile,
        Step::Rlimit,
        Step::NoNewPrivs,
        Step::Seccomp,
        Step::Exec,
        Step::Signals,
    ];

    pub(crate) fn from_u32(v: u32) -> Option<Step> {
        Step::ALL.iter().copied().find(|s| *s as u32 == v)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::Fds => "arranging file descriptors in the sandbox init",
            Step::Sync => "waiting for the server's go-ahead (uid/gid maps)",
            Step::Hostname => "sethostname in the new UTS namespace",
            Step::MakePrivate => "making the mount tree private (MS_REC|MS_PRIVATE on /)",
            Step::RootTmpfs => "mounting the tmpfs of the new root",
            Step::Mkdir => "creating a directory in the new root",
            Step::Touch => "creating a bind-mount target file",
            Step::Bind => "read-only bind mount into the new root",
            Step::RemountReadOnly => "remounting a bind mount read-only",
            Step::Tmpfs => "mounting the private /tmp working directory",
            Step::Proc => "mounting a fresh /proc for the new PID namespace",
            Step::Symlink => "creating a symlink in the new root",
            Step::WriteFile => "writing a file of the new root (/etc, the program)",
            Step::Statvfs => "reading the flags of a bind mount (statvfs)",
            Step::PivotRoot => "pivot_root into the new root",
            Step::UmountOldRoot => "detaching the old root",
            Step::Chdir => "chdir",
            Step::RemountRoot => "remounting the new root read-only",
            Step::Fork => "forking the program from the sandbox init",
            Step::Securebits => "setting securebits",
            Step::CapBoundingSet => "dropping the capability bounding set",
            Step::Setgroups => "clearing supplementary groups",
            Step::Setgid => "setresgid to the sandbox gid",
            Step::Setuid => "setresuid to the sandbox uid",
            Step::Capset => "dropping all capabilities (capset)",
            Step::InputFile => "writing an input file into the working directory",
            Step::Rlimit => "setting a resource limit",
            Step::NoNewPrivs => "setting no_new_privs",
            Step::Seccomp => "installing the seccomp filter",
            Step::Exec => "execve of the interpreter",
            Step::Signals => "resetting signal handlers",
        }
    }
}

/// Writes all of `buf` to `fd`, retrying on EINTR. Async-signal-safe.
pub(crate) fn write_all_raw(fd: RawFd, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: plain write(2) of a valid buffer.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if nix::errno::Errno::last_raw() == libc::EINTR {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Writes one record. The header alone (no payload) is one `write` below PIPE_BUF, hence atomic
/// even when the init and the program child share the pipe. Async-signal-safe.
pub(crate) fn write_record(fd: RawFd, tag: u32, a: u32, b: u32, c: u32, payload: &[u8]) -> bool {
    let mut head = [0u8; HEADER];
    for (i, v) in [tag, a, b, c, payload.len() as u32].into_iter().enumerate() {
        head[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    write_all_raw(fd, &head) && write_all_raw(fd, payload)
}

/// Reports a failed setup step with the current errno. Async-signal-safe.
pub(crate) fn report_error(fd: RawFd, step: Step, errno: i32, index: usize) {
    write_record(fd, TAG_ERR, step as u32, errno as u32, index as u32, &[]);
}

/// One decoded record.
#[derive(Debug)]
pub(crate) struct Record {
    pub tag: u32,
    pub a: u32,
    pub b: u32,
    pub c: u32,
    pub payload: Vec<u8>,
}

/// Splits complete records off the front of `buf` (server side).
pub(crate) fn drain_records(buf: &mut Vec<u8>) -> Vec<Record> {
    let mut out = Vec::new();
    let mut pos = 0;
    while buf.len() - pos >= HEADER {
        let word =
            |i: usize| u32::from_ne_bytes(buf[pos + i * 4..pos + i * 4 + 4].try_into().unwrap());
        let len = word(4) as usize;
        if buf.len() - pos < HEADER + len {
            break;
        }
        out.push(Record {
            tag: word(0),
            a: word(1),
            b: word(2),
            c: word(3),
            payload: buf[pos + HEADER..pos + HEADER + len].to_vec(),
        });
        pos += HEADER + len;
    }
    buf.drain(..pos);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_a_pipe() {
        let (r, w) = nix::unistd::pipe().unwrap();
        use std::os::fd::AsRawFd;
        assert!(write_record(w.as_raw_fd(), TAG_CHUNK, 2, 0, 0, b"hello"));
        report_error(w.as_raw_fd(), Step::Bind, libc::EPERM, 7);
        drop(w);
        let mut buf = Vec::new();
        use std::io::Read;
        std::fs::File::from(r).read_to_end(&mut buf).unwrap();
        buf.extend_from_slice(&[1, 2, 3]); // a partial header stays in the buffer
        let recs = drain_records(&mut buf);
        assert_eq!(buf, vec![1, 2, 3]);
        assert_eq!(recs.len(), 2);
        assert_eq!(
            (recs[0].tag, recs[0].a, &recs[0].payload[..]),
            (TAG_CHUNK, 2, &b"hello"[..])
        );
        assert_eq!(
            (recs[1].tag, Step::from_u32(recs[1].a), recs[1].b, recs[1].c),
            (TAG_ERR, Some(Step::Bind), libc::EPERM as u32, 7)
        );
    }
}
