//! The seccomp filter of the sandboxed program, built with `seccompiler` (rust-vmm).
//!
//! A deny list (default allow) so that any interpreter runs unchanged: syscalls an untrusted
//! program never needs fail with EPERM — namespace and mount manipulation, tracing, kernel
//! modules and keyrings, BPF and perf, io_uring (which would bypass this filter), clock and
//! swap control — and `socket` works only for AF_UNIX (the empty network namespace already cuts
//! the network; this is defence in depth). `clone3` fails with ENOSYS because its flags live in
//! memory where BPF cannot read them; libc then falls back to `clone`, whose namespace flags are
//! checked. Other architectures than the native one are killed by seccompiler's arch check; on
//! x86_64 a second tiny filter rejects the x32 ABI (syscall numbers with bit 30), which would
//! otherwise slip past rules keyed by x86_64 numbers.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// Syscalls denied outright (EPERM).
fn denied_syscalls() -> Vec<i64> {
    let mut v = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_quotactl,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_fanotify_init,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_lookup_dcookie,
        libc::SYS_uselib,
    ]);
    v
}

/// Namespace bits of `clone(2)` flags; a clone asking for any of them is denied.
const CLONE_NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

fn target_arch() -> Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| {
        anyhow::anyhow!(
            "seccomp: unsupported architecture {}: {e:?}",
            std::env::consts::ARCH
        )
    })
}

/// The filters to install, in order (all are evaluated by the kernel; the strictest wins).
pub(crate) fn build_filters() -> Result<Vec<BpfProgram>> {
    let deny = SeccompAction::Errno(libc::EPERM as u32);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in denied_syscalls() {
        rules.insert(nr, vec![]);
    }
    let cond =
        |idx, len, op, val| SeccompCondition::new(idx, len, op, val).context("seccomp condition");
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![cond(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?],
    );
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|&bit| {
            Ok(SeccompRule::new(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(bit),
                bit,
            )?])?)
        })
        .collect::<Result<Vec<_>>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let main: BpfProgram = SeccompFilter::new(rules, SeccompAction::Allow, deny, target_arch()?)
        .context("building the seccomp filter")?
        .try_into()
        .context("compiling the seccomp filter")?;

    // clone3 -> ENOSYS (a separate filter since its action differs from the deny action).
    let mut c3 = BTreeMap::new();
    c3.insert(libc::SYS_clone3, vec![]);
    let clone3: BpfProgram = SeccompFilter::new(
        c3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        target_arch()?,
    )
    .context("building the clone3 filter")?
    .try_into()
    .context("compiling the clone3 filter")?;

    let mut filters = vec![main, clone3];
    #[cfg(target_arch = "x86_64")]
    filters.push(x32_filter());
    Ok(filters)
}

/// Hand-built (seccompiler keys rules by exact syscall number and cannot express a range):
/// `nr >= 0x40000000` (x32 ABI) -> EPERM, else allow.
#[cfg(target_arch = "x86_64")]
fn x32_filter() -> BpfProgram {
    // Classic BPF opcodes (linux/bpf_common.h): BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JGE|BPF_K,
    // BPF_RET|BPF_K.
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: 0x4000_0000,
        },
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Installs `filters` on the calling thread. Async-signal-safe (no allocation): returns the
/// errno of the failing `prctl`/`seccomp` call.
pub(crate) fn apply_raw(filters: &[BpfProgram]) -> Result<(), i32> {
    for f in filters {
        if seccompiler::apply_filter(f).is_err() {
            return Err(nix::errno::Errno::last_raw());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_deny_list_is_complete() {
        let f = build_filters().unwrap();
        assert!(f.len() >= 2);
        assert!(f.iter().all(|p| !p.is_empty()));
        let deny = denied_syscalls();
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_bpf,
            libc::SYS_keyctl,
        ] {
            assert!(deny.contains(&nr), "{nr} not denied");
        }
    }
}
