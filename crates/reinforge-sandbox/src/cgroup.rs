//! Per-run cgroup v2 groups (issue 24, finding 5): where the server may write a cgroup v2
//! hierarchy (root, with the hierarchy mounted read-write), each run gets its own group with
//! `memory.max` (the run's memory), `pids.max` (its processes) and `cpu.max` (one CPU's worth
//! of bandwidth), and the run's init is put into it before it starts the program, so every
//! process of the run is counted together by the kernel. The group is removed after the run.
//!
//! The hierarchy's root is a parameter ([`RunGroups::open`]): the server passes
//! `/sys/fs/cgroup`, tests a directory that imitates it. Where there is no writable cgroup v2
//! hierarchy (cgroup v1, a read-only mount, a container whose root group holds processes, no
//! root), the sandbox falls back to its watchdog (see `isolate.rs`).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Limits;

/// The controllers a run group needs.
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// The period of `cpu.max`, microseconds (the kernel's default); the quota is the same, one CPU.
const CPU_PERIOD_US: u64 = 100_000;

/// The files [`RunGroups::create`] and [`RunGroup::add`] write into a run's group.
const WRITTEN: [&str; 4] = ["memory.max", "pids.max", "cpu.max", "cgroup.procs"];

/// A cgroup v2 hierarchy with the memory, pids and cpu controllers enabled for new groups.
#[derive(Debug)]
pub(crate) struct RunGroups {
    root: PathBuf,
    next: AtomicU64,
}

impl RunGroups {
    /// The hierarchy at `root`, when it is cgroup v2 (`cgroup.controllers` lists memory, pids
    /// and cpu) and writable: enabling the controllers for child groups
    /// (`cgroup.subtree_control`) is the test. `Err` says why not (the sandbox falls back).
    pub(crate) fn open(root: &Path) -> Result<Self, String> {
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
            .map_err(|_| format!("{} is not a cgroup v2 hierarchy", root.display()))?;
        let have: Vec<&str> = controllers.split_whitespace().collect();
        if let Some(missing) = CONTROLLERS.iter().find(|c| !have.contains(c)) {
            return Err(format!(
                "the cgroup v2 hierarchy at {} lacks the {missing} controller",
                root.display()
            ));
        }
        let enable = CONTROLLERS.map(|c| format!("+{c}")).join(" ");
        std::fs::write(root.join("cgroup.subtree_control"), enable).map_err(|e| {
            format!(
                "the cgroup v2 hierarchy at {} is not writable here ({e})",
                root.display()
            )
        })?;
        Ok(Self {
            root: root.to_path_buf(),
            next: AtomicU64::new(0),
        })
    }

    /// The directory run groups are created in.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// A new group for one run, limited to `limits`' memory and processes and one CPU.
    pub(crate) fn create(&self, limits: &Limits) -> std::io::Result<RunGroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self
            .root
            .join(format!("reinforge-run-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let group = RunGroup { dir };
        group.write("memory.max", &limits.memory_bytes.to_string())?;
        group.write("pids.max", &limits.max_processes.to_string())?;
        group.write("cpu.max", &format!("{CPU_PERIOD_US} {CPU_PERIOD_US}"))?;
        Ok(group)
    }
}

/// One run's group; dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub(crate) struct RunGroup {
    dir: PathBuf,
}

impl RunGroup {
    fn write(&self, file: &str, value: &str) -> std::io::Result<()> {
        std::fs::write(self.dir.join(file), value).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("writing {}: {e}", self.dir.join(file).display()),
            )
        })
    }

    /// Moves process `pid` (and the children it will have) into the group.
    pub(crate) fn add(&self, pid: i32) -> std::io::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Whether the kernel's OOM killer killed a process of the group (`memory.events`).
    pub(crate) fn oom_killed(&self) -> bool {
        self.key_value("memory.events", "oom_kill")
            .is_some_and(|n| n > 0)
    }

    /// CPU time the group's processes used together (`cpu.stat`'s `usage_usec`).
    pub(crate) fn cpu_usage(&self) -> Option<Duration> {
        self.key_value("cpu.stat", "usage_usec")
            .map(Duration::from_micros)
    }

    /// The value of `key` in a flat-keyed file of the group.
    fn key_value(&self, file: &str, key: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    }

    /// The group's directory.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunGroup {
    /// Kills what is left (`cgroup.kill`, kernels from 5.14) and removes the group, retrying
    /// while its last processes exit. A plain directory that imitates cgroupfs (tests) cannot
    /// be removed while it holds the files written into it: those are removed first.
    fn drop(&mut self) {
        if self.dir.join("cgroup.kill").exists() {
            let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        }
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::NotFound => return,
                Err(e) if e.kind() == ErrorKind::DirectoryNotEmpty => {
                    for f in WRITTEN {
                        let _ = std::fs::remove_file(self.dir.join(f));
                    }
                    let _ = std::fs::remove_dir(&self.dir);
                    return;
                }
                // Still busy after 2 s: left for the operator (nothing runs in it any more
                // once the init was reaped, so this does not happen short of a kernel problem).
                Err(_) if Instant::now() >= until => return,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty directory under the temp dir.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("reinforge-cg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    /// A directory imitating a cgroup v2 root with `controllers`.
    fn fake_root(name: &str, controllers: &str) -> PathBuf {
        let d = temp_dir(name);
        std::fs::write(d.join("cgroup.controllers"), controllers).expect("write");
        std::fs::write(d.join("cgroup.subtree_control"), "").expect("write");
        d
    }

    #[test]
    fn a_run_group_gets_its_limits_and_is_removed() {
        let root = fake_root("v2", "cpuset cpu io memory hugetlb pids rdma misc\n");
        let groups = RunGroups::open(&root).expect("a v2 root");
        let enabled = std::fs::read_to_string(root.join("cgroup.subtree_control"));
        assert_eq!(enabled.expect("read"), "+memory +pids +cpu");
        let limits = Limits {
            memory_bytes: 100 << 20,
            max_processes: 12,
            ..Limits::default()
        };
        let g = groups.create(&limits).expect("group");
        g.add(4242).expect("add");
        let read = |f: &str| std::fs::read_to_string(g.dir().join(f)).expect(f);
        assert_eq!(read("memory.max"), (100u64 << 20).to_string());
        assert_eq!(read("pids.max"), "12");
        assert_eq!(read("cpu.max"), "100000 100000");
        assert_eq!(read("cgroup.procs"), "4242");
        std::fs::write(g.dir().join("memory.events"), "low 0\noom 1\noom_kill 2\n").unwrap();
        std::fs::write(
            g.dir().join("cpu.stat"),
            "usage_usec 1500000\nuser_usec 1\n",
        )
        .unwrap();
        assert!(g.oom_killed());
        assert_eq!(g.cpu_usage(), Some(Duration::from_millis(1500)));
        for f in ["memory.events", "cpu.stat"] {
            std::fs::remove_file(g.dir().join(f)).unwrap();
        }
        let dir = g.dir().to_path_buf();
        drop(g);
        assert!(!dir.exists(), "{} left behind", dir.display());
        std::fs::remove_dir_all(root).expect("clean up");
    }

    #[test]
    fn no_v2_hierarchy_or_a_missing_controller_is_refused() {
        let empty = temp_dir("empty");
        let e = RunGroups::open(&empty).unwrap_err();
        assert!(e.contains("not a cgroup v2 hierarchy"), "{e}");
        let no_pids = fake_root("nopids", "cpu memory\n");
        let e = RunGroups::open(&no_pids).unwrap_err();
        assert!(e.contains("pids"), "{e}");
        for d in [empty, no_pids] {
            std::fs::remove_dir_all(d).expect("clean up");
        }
    }
}
