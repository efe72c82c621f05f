//! Giving freed host memory back to the system between the phases of a training step.
//!
//! libtorch's CPU allocator frees tensors to glibc's malloc. glibc serves blocks below its
//! mmap threshold (raised at run time up to 32 MB as large blocks are freed) from heaps it
//! keeps: freed blocks stay in the process, resident, for reuse. On the GRPO step of
//! docs/memory.md (8 x 8 rows of up to 256 tokens) sampling ended 1 GB above the same run with
//! every block mapped directly, and the update's level rose another 1 GB over its
//! micro-batches. [`release_freed_memory`] (`malloc_trim(0)`: glibc 2.8 and later release
//! every free page of every arena, not only the top of the heap) at a phase boundary makes the
//! next phase start from the live tensors only. Elsewhere than glibc it does nothing.
//!
//! `REINFORGE_TRACE_RSS=1` prints the resident size at each boundary before and after the
//! trim, and the peak so far (VmRSS, VmHWM of `/proc/self/status`), to stderr.

/// Environment variable that turns on the per-boundary RSS trace.
pub const TRACE_ENV: &str = "REINFORGE_TRACE_RSS";

/// A phase of a training step has ended (`phase` names it in the trace): freed heap memory
/// goes back to the system, and the resident size is traced when [`TRACE_ENV`] is set.
pub fn phase_boundary(phase: &str) {
    let trace = std::env::var_os(TRACE_ENV).is_some_and(|v| v != "0");
    let before = trace.then(status_kib).flatten();
    release_freed_memory();
    if let (Some((rss, _)), Some((after, peak))) = (before, trace.then(status_kib).flatten()) {
        let gb = |kib: u64| kib as f64 / (1024.0 * 1024.0);
        eprintln!(
            "rss after {phase}: {:.3} GB, {:.3} GB once trimmed; peak so far {:.3} GB",
            gb(rss),
            gb(after),
            gb(peak)
        );
    }
}

/// Returns the free pages of every malloc arena to the system (glibc `malloc_trim(0)`).
/// Costs one walk over the heaps; meant for phase boundaries, not for every tensor.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and locks each arena itself (thread-safe).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's resident size and its peak, in KiB (`VmRSS`, `VmHWM`), where `/proc` has them.
fn status_kib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boundary_keeps_live_memory_and_reads_the_resident_size() {
        let live = vec![7u8; 1 << 20];
        phase_boundary("test");
        assert!(live.iter().all(|&b| b == 7), "live memory untouched");
        if cfg!(target_os = "linux") {
            let (rss, peak) = status_kib().expect("/proc/self/status has VmRSS and VmHWM");
            assert!(rss > 0 && peak >= rss, "rss {rss} KiB, peak {peak} KiB");
        }
    }
}
