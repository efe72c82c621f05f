//! The minimal root filesystem of a run.
//!
//! Built in the server as a list of [`MountOp`]s with every path already a `CString`, then
//! replayed by the sandbox init with raw syscalls (no allocation after `clone`). The new root is
//! a small tmpfs mounted over `/tmp` *inside the private mount namespace* (the host's `/tmp` is
//! untouched) holding: read-only bind mounts of `/usr`, `/bin`, `/sbin`, `/lib*` (symlinks are
//! recreated as symlinks on merged-/usr systems) and of the interpreter's prefix at its own
//! path, a synthetic `/etc` (passwd, group, hosts, plus a read-only bind of `ld.so.cache`),
//! `/dev` with bind mounts of the null/zero/full/random/urandom nodes, a fresh `/proc` for the
//! new PID namespace, the program under `/code`, and the writable working directory `/tmp`, a
//! separate size-capped tmpfs. After `pivot_root` the old root is detached, so nothing else of
//! the server (its home, `/work`, the project, the host `/tmp`) exists in the sandbox.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::mount::{mount, MsFlags};

use crate::protocol::Step;

/// Where the new root is assembled before `pivot_root` (inside the private mount namespace).
pub(crate) const STAGING: &str = "/tmp";

/// One step of building the root. Paths are absolute host paths under [`STAGING`] for targets.
#[derive(Debug)]
pub(crate) enum MountOp {
    Mkdir {
        path: CString,
        mode: u32,
    },
    /// Creates an empty file to bind a non-directory onto.
    Touch {
        path: CString,
    },
    /// Bind `src` onto `dst`; `read_only` remounts it read-only keeping the source's locked
    /// nosuid/nodev/noexec flags (needed inside a user namespace); `nosuid` always added.
    /// `src` is opened as an `O_PATH` descriptor moved to `fd_slot` by [`open_bind_sources`]
    /// while the init still has the server's ids, and mounted from `fd_path`
    /// (`/proc/self/fd/<slot>`): in a user namespace whose root maps to an unprivileged uid the
    /// init could not traverse e.g. `/root` to reach a pyenv Python anymore.
    Bind {
        src: CString,
        dst: CString,
        read_only: bool,
        fd_slot: i32,
        fd_path: CString,
    },
    Tmpfs {
        dst: CString,
        data: CString,
    },
    Proc {
        dst: CString,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    WriteFile {
        path: CString,
        content: Vec<u8>,
        mode: u32,
    },
}

impl MountOp {
    /// A human description for error messages.
    pub(crate) fn describe(&self) -> String {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            MountOp::Mkdir { path, .. } => format!("mkdir {}", s(path)),
            MountOp::Touch { path } => format!("create {}", s(path)),
            MountOp::Bind { src, dst, .. } => format!("bind {} -> {}", s(src), s(dst)),
            MountOp::Tmpfs { dst, data } => format!("tmpfs {} ({})", s(dst), s(data)),
            MountOp::Proc { dst } => format!("proc {}", s(dst)),
            MountOp::Symlink { target, link } => format!("symlink {} -> {}", s(link), s(target)),
            MountOp::WriteFile { path, .. } => format!("write {}", s(path)),
        }
    }
}

fn cstr(p: impl AsRef<Path>) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_ref().as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", p.as_ref().display()))
}

/// First descriptor number used for bind sources (above the init's fixed 0..=4).
const FIRST_FD_SLOT: i32 = 10;

fn bind(ops: &[MountOp], src: CString, dst: CString, read_only: bool) -> Result<MountOp> {
    let fd_slot = FIRST_FD_SLOT
        + ops
            .iter()
            .filter(|o| matches!(o, MountOp::Bind { .. }))
            .count() as i32;
    let fd_path = CString::new(format!("/proc/self/fd/{fd_slot}"))?;
    Ok(MountOp::Bind {
        src,
        dst,
        read_only,
        fd_slot,
        fd_path,
    })
}

fn staged(inner: &Path) -> Result<CString> {
    let rel = inner.strip_prefix("/").unwrap_or(inner);
    cstr(Path::new(STAGING).join(rel))
}

/// The host-dependent, request-independent part of the root: system directories and the
/// interpreter prefixes. Computed once in [`crate::Sandbox::with_config`].
#[derive(Clone, Debug)]
pub(crate) struct RootLayout {
    /// `(path, Some(link target))` for symlinks such as `/bin -> usr/bin`, `(path, None)` for
    /// directories bound read-only.
    pub system: Vec<(PathBuf, Option<PathBuf>)>,
    /// Extra directories bound read-only at their own path (interpreter prefixes).
    pub extra: Vec<PathBuf>,
}

/// System directories considered for the root.
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

impl RootLayout {
    /// Inspects the host. `extra` directories must be absolute, exist and lie outside the
    /// paths the sandbox builds itself (`/tmp`, `/proc`, `/dev`, `/etc`, `/code`).
    pub(crate) fn detect(extra: &[PathBuf]) -> Result<Self> {
        let mut system = Vec::new();
        for d in SYSTEM_DIRS {
            let p = Path::new(d);
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    system.push((p.to_path_buf(), Some(std::fs::read_link(p)?)))
                }
                Ok(m) if m.is_dir() => system.push((p.to_path_buf(), None)),
                _ => {}
            }
        }
        if !system.iter().any(|(p, _)| p == Path::new("/usr")) {
            bail!("sandbox root: /usr does not exist on this host");
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for e in extra {
            if !e.is_absolute() || !e.is_dir() {
                bail!(
                    "sandbox root: interpreter directory {} is not an existing absolute directory",
                    e.display()
                );
            }
            if SYSTEM_DIRS.iter().any(|s| e.starts_with(s)) {
                continue; // already visible through a system directory
            }
            for reserved in ["/tmp", "/proc", "/dev", "/etc", "/code"] {
                if e.starts_with(reserved) {
                    bail!(
                        "sandbox root: interpreter directory {} lies under {reserved}, which the sandbox replaces",
                        e.display()
                    );
                }
            }
            if e == Path::new("/") {
                bail!("sandbox root: refusing to expose / as an interpreter directory");
            }
            dirs.push(e.clone());
        }
        dirs.sort();
        dirs.dedup();
        // Drop directories nested in another one.
        let extra = dirs
            .iter()
            .filter(|d| !dirs.iter().any(|o| o != *d && d.starts_with(o)))
            .cloned()
            .collect();
        Ok(Self { system, extra })
    }
}

/// Per-run inputs of the root.
pub(crate) struct RootSpec<'a> {
    pub layout: &'a RootLayout,
    pub etc_passwd: String,
    pub etc_group: String,
    pub code_name: &'a str,
    pub code: &'a [u8],
    /// tmpfs mount data of the working directory (`size=...,nr_inodes=...,mode=...,uid=...`).
    pub work_tmpfs_data: String,
}

/// Builds the operations that populate the staging root.
pub(crate) fn build_ops(spec: &RootSpec) -> Result<Vec<MountOp>> {
    let mut ops = Vec::new();
    let mkdir = |ops: &mut Vec<MountOp>, p: &Path| -> Result<()> {
        ops.push(MountOp::Mkdir {
            path: staged(p)?,
            mode: 0o755,
        });
        Ok(())
    };
    let mkdir_all = |ops: &mut Vec<MountOp>, p: &Path| -> Result<()> {
        let mut acc = PathBuf::from("/");
        for c in p.components().skip(1) {
            acc.push(c);
            ops.push(MountOp::Mkdir {
                path: staged(&acc)?,
                mode: 0o755,
            });
        }
        Ok(())
    };
    for (p, link) in &spec.layout.system {
        match link {
            Some(t) => ops.push(MountOp::Symlink {
                target: cstr(t)?,
                link: staged(p)?,
            }),
            None => {
                mkdir(&mut ops, p)?;
                let b = bind(&ops, cstr(p)?, staged(p)?, true)?;
                ops.push(b);
            }
        }
    }
    for p in &spec.layout.extra {
        mkdir_all(&mut ops, p)?;
        let b = bind(&ops, cstr(p)?, staged(p)?, true)?;
        ops.push(b);
    }
    // /etc: synthetic, plus the loader cache so libraries resolve as on the host.
    mkdir(&mut ops, Path::new("/etc"))?;
    let etc = |name: &str, content: &str| -> Result<MountOp> {
        Ok(MountOp::WriteFile {
            path: staged(&Path::new("/etc").join(name))?,
            content: content.as_bytes().to_vec(),
            mode: 0o644,
        })
    };
    ops.push(etc("passwd", &spec.etc_passwd)?);
    ops.push(etc("group", &spec.etc_group)?);
    ops.push(etc(
        "hosts",
        "127.0.0.1 localhost sandbox\n::1 localhost\n",
    )?);
    ops.push(etc("hostname", "sandbox\n")?);
    ops.push(etc(
        "nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files\n",
    )?);
    if Path::new("/etc/ld.so.cache").is_file() {
        let dst = staged(Path::new("/etc/ld.so.cache"))?;
        ops.push(MountOp::Touch { path: dst.clone() });
        let b = bind(&ops, cstr("/etc/ld.so.cache")?, dst, true)?;
        ops.push(b);
    }
    // /dev
    mkdir(&mut ops, Path::new("/dev"))?;
    for node in ["null", "zero", "full", "random", "urandom"] {
        let host = Path::new("/dev").join(node);
        if host.exists() {
            let dst = staged(&host)?;
            ops.push(MountOp::Touch { path: dst.clone() });
            let b = bind(&ops, cstr(&host)?, dst, false)?;
            ops.push(b);
        }
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("shm", "/tmp"),
    ] {
        ops.push(MountOp::Symlink {
            target: cstr(target)?,
            link: staged(&Path::new("/dev").join(link))?,
        });
    }
    // /proc of the new PID namespace.
    mkdir(&mut ops, Path::new("/proc"))?;
    ops.push(MountOp::Proc {
        dst: staged(Path::new("/proc"))?,
    });
    // The program, read-only with the root.
    mkdir(&mut ops, Path::new("/code"))?;
    ops.push(MountOp::WriteFile {
        path: staged(&Path::new("/code").join(spec.code_name))?,
        content: spec.code.to_vec(),
        mode: 0o444,
    });
    // The working directory.
    mkdir(&mut ops, Path::new("/tmp"))?;
    ops.push(MountOp::Tmpfs {
        dst: staged(Path::new("/tmp"))?,
        data: cstr(&spec.work_tmpfs_data)?,
    });
    Ok(ops)
}

// ---- child side (async-signal-safe: raw syscalls on pre-built C strings only) ----

type ChildResult = std::result::Result<(), (Step, i32)>;

fn errno() -> i32 {
    nix::errno::Errno::last_raw()
}

fn mount_flags_of(path: &CStr) -> std::result::Result<MsFlags, i32> {
    // SAFETY: statvfs into a zeroed struct; path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(errno());
    }
    let mut f = MsFlags::empty();
    for (st_bit, ms) in [
        (libc::ST_NOSUID, MsFlags::MS_NOSUID),
        (libc::ST_NODEV, MsFlags::MS_NODEV),
        (libc::ST_NOEXEC, MsFlags::MS_NOEXEC),
    ] {
        if st.f_flag & st_bit != 0 {
            f |= ms;
        }
    }
    Ok(f)
}

fn write_file(path: &CStr, content: &[u8], mode: u32) -> std::result::Result<(), i32> {
    // SAFETY: open/write/close on a valid C string and buffer.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    let ok = crate::protocol::write_all_raw(fd, content);
    let e = errno();
    unsafe { libc::close(fd) };
    if ok {
        Ok(())
    } else {
        Err(e)
    }
}

/// Replays one operation. Returns the failed step and errno.
pub(crate) fn apply_op(op: &MountOp) -> ChildResult {
    let none: Option<&CStr> = None;
    match op {
        MountOp::Mkdir { path, mode } => {
            if unsafe { libc::mkdir(path.as_ptr(), *mode) } != 0 && errno() != libc::EEXIST {
                return Err((Step::Mkdir, errno()));
            }
        }
        MountOp::Touch { path } => {
            let fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                )
            };
            if fd < 0 {
                return Err((Step::Touch, errno()));
            }
            unsafe { libc::close(fd) };
        }
        MountOp::Bind {
            dst,
            read_only,
            fd_path,
            ..
        } => {
            mount(
                Some(fd_path.as_c_str()),
                dst.as_c_str(),
                none,
                MsFlags::MS_BIND,
                none,
            )
            .map_err(|e| (Step::Bind, e as i32))?;
            if *read_only {
                let locked = mount_flags_of(dst).map_err(|e| (Step::Statvfs, e))?;
                let flags = MsFlags::MS_REMOUNT
                    | MsFlags::MS_BIND
                    | MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | locked;
                mount(none, dst.as_c_str(), none, flags, none)
                    .map_err(|e| (Step::RemountReadOnly, e as i32))?;
            }
        }
        MountOp::Tmpfs { dst, data } => {
            mount(
                Some(c"tmpfs"),
                dst.as_c_str(),
                Some(c"tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(data.as_c_str()),
            )
            .map_err(|e| (Step::Tmpfs, e as i32))?;
        }
        MountOp::Proc { dst } => {
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            // hidepid=2: the program (another uid in root mode) cannot even list the init.
            mount(
                Some(c"proc"),
                dst.as_c_str(),
                Some(c"proc"),
                flags,
                Some(c"hidepid=2"),
            )
            .map_err(|e| (Step::Proc, e as i32))?;
        }
        MountOp::Symlink { target, link } => {
            if unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) } != 0 {
                return Err((Step::Symlink, errno()));
            }
        }
        MountOp::WriteFile {
            path,
            content,
            mode,
        } => {
            write_file(path, content, *mode).map_err(|e| (Step::WriteFile, e))?;
        }
    }
    Ok(())
}

/// Opens every bind source as an `O_PATH` descriptor at its slot (see [`MountOp::Bind`]).
/// Call while the process still has the server's ids. Returns the failed op index and errno.
pub(crate) fn open_bind_sources(ops: &[MountOp]) -> std::result::Result<(), (i32, usize)> {
    for (i, op) in ops.iter().enumerate() {
        if let MountOp::Bind { src, fd_slot, .. } = op {
            // SAFETY: open/dup2/close on a valid C string and descriptors we own.
            let fd = unsafe { libc::open(src.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if fd < 0 || unsafe { libc::dup2(fd, *fd_slot) } < 0 {
                return Err((errno(), i));
            }
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// Mounts the staging tmpfs, replays `ops`, pivots into it and makes it read-only.
/// Returns the failed step, errno and op index (`usize::MAX` outside `ops`).
pub(crate) fn build_root(
    staging: &CStr,
    root_data: &CStr,
    ops: &[MountOp],
) -> std::result::Result<(), (Step, i32, usize)> {
    let none: Option<&CStr> = None;
    let outer = |(s, e): (Step, i32)| (s, e, usize::MAX);
    mount(
        none,
        c"/",
        none,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        none,
    )
    .map_err(|e| (Step::MakePrivate, e as i32, usize::MAX))?;
    mount(
        Some(c"tmpfs"),
        staging,
        Some(c"tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(root_data),
    )
    .map_err(|e| (Step::RootTmpfs, e as i32, usize::MAX))?;
    for (i, op) in ops.iter().enumerate() {
        apply_op(op).map_err(|(s, e)| (s, e, i))?;
    }
    if unsafe { libc::chdir(staging.as_ptr()) } != 0 {
        return Err(outer((Step::Chdir, errno())));
    }
    // pivot_root(".", "."): the old root ends up stacked on the new one and is detached at once,
    // so no directory for it is needed in the new root.
    nix::unistd::pivot_root(c".", c".").map_err(|e| (Step::PivotRoot, e as i32, usize::MAX))?;
    nix::mount::umount2(c".", nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| (Step::UmountOldRoot, e as i32, usize::MAX))?;
    if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
        return Err(outer((Step::Chdir, errno())));
    }
    let ro = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV;
    mount(none, c"/", none, ro, none).map_err(|e| (Step::RemountRoot, e as i32, usize::MAX))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_rejects_reserved_and_drops_nested_dirs() {
        assert!(
            RootLayout::detect(&[PathBuf::from("/tmp")]).is_err(),
            "/tmp must be rejected"
        );
        let l = RootLayout::detect(&[PathBuf::from("/usr/lib"), PathBuf::from("/etc")]);
        assert!(l.is_err(), "/etc must be rejected");
        let l = RootLayout::detect(&[PathBuf::from("/usr/lib")]).unwrap();
        assert!(l.extra.is_empty(), "/usr/lib is already under /usr");
        assert!(l.system.iter().any(|(p, _)| p == Path::new("/usr")));
    }

    #[test]
    fn ops_stage_everything_under_tmp_and_never_bind_root_or_home() {
        let layout = RootLayout::detect(&[]).unwrap();
        let spec = RootSpec {
            layout: &layout,
            etc_passwd: "root:x:0:0::/:/bin/sh\n".into(),
            etc_group: "root:x:0:\n".into(),
            code_name: "main.py",
            code: b"print(1)",
            work_tmpfs_data: "size=1m".into(),
        };
        let ops = build_ops(&spec).unwrap();
        for op in &ops {
            let d = op.describe();
            match op {
                MountOp::Bind { src, dst, .. } => {
                    assert!(dst.to_str().unwrap().starts_with("/tmp/"), "{d}");
                    let s = src.to_str().unwrap();
                    assert!(
                        s != "/"
                            && !s.starts_with("/root")
                            && !s.starts_with("/work")
                            && !s.starts_with("/home"),
                        "{d}"
                    );
                }
                MountOp::Mkdir { path, .. }
                | MountOp::Touch { path }
                | MountOp::WriteFile { path, .. } => {
                    assert!(path.to_str().unwrap().starts_with("/tmp/"), "{d}")
                }
                _ => {}
            }
        }
        assert!(ops.iter().any(|o| matches!(o, MountOp::Proc { .. })));
    }
}
