//! Giving freed host memory back to the system between the phases of a training step, and
//! how glibc's malloc keeps it inside a phase ([`HeapPolicy`]).
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
//! Inside a phase glibc's defaults cost time instead: it returns the top of a heap to the
//! system whenever more than its trim threshold (twice the dynamic mmap threshold) lies free
//! there, so a decoding step's few large temporaries (32 rows x 49,152 logits: 6.3 MB each)
//! are given back and faulted in again, zero-filled, every step (12.8 MB a step, 8% of a
//! decoding profile in `clear_page`). [`HeapPolicy`] names the two trade-offs.
//!
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

/// How glibc's malloc keeps freed memory inside a phase (`memory.heap`; glibc only: `mallopt`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapPolicy {
    /// Freed blocks below 32 MB stay in the heap for the next allocation of their size: no
    /// heap is trimmed on `free` (trim threshold 1 GiB), blocks below 32 MB (glibc's own upper
    /// bound for its dynamic threshold) are never mapped alone. Memory goes back to the system
    /// at phase boundaries ([`phase_boundary`]) only: a hot loop (decoding, a micro-batch)
    /// reuses its memory instead of faulting it in again.
    Reuse,
    /// The lowest peak: blocks of 4 MB or more are mapped alone and unmapped when freed, so
    /// differently sized activations of successive micro-batches cannot pile up in the heaps,
    /// and freed memory is also returned after every update micro-batch. Each large block is
    /// faulted in afresh: slower.
    Compact,
    /// The default: `compact` when the run bounds its memory (micro-batches under a token
    /// budget, or activation checkpointing: docs/memory.md measured half `reuse`'s peak there),
    /// `reuse` otherwise ([`HeapPolicy::resolve`]).
    #[default]
    Auto,
}

impl HeapPolicy {
    /// The policy itself, or for [`HeapPolicy::Auto`] the one that suits a run that does
    /// (`bounded`) or does not bound its memory.
    pub fn resolve(self, bounded: bool) -> HeapPolicy {
        match self {
            HeapPolicy::Auto if bounded => HeapPolicy::Compact,
            HeapPolicy::Auto => HeapPolicy::Reuse,
            p => p,
        }
    }

    /// Bytes from which a block is mapped alone, and free bytes at a heap's top above which
    /// glibc returns them.
    fn thresholds(self) -> (i32, i32) {
        match self.resolve(false) {
            HeapPolicy::Compact => (4 << 20, 8 << 20),
            _ => (32 << 20, 1 << 30),
        }
    }
}

/// The policy in force (an index into [`HeapPolicy`]'s variants); malloc is per process.
static POLICY: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Applies `policy` to the process's malloc (glibc's `mallopt`; elsewhere only recorded);
/// [`HeapPolicy::Auto`], unresolved, applies `reuse`. Setting a threshold turns glibc's
/// dynamic mmap threshold off: both are always set.
pub fn set_policy(policy: HeapPolicy) {
    let policy = policy.resolve(false);
    POLICY.store(policy as u8, std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (mmap, trim) = policy.thresholds();
        // SAFETY: mallopt takes two integers and locks malloc's state itself.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
        }
    }
}

/// The policy last set by [`set_policy`] ([`HeapPolicy::Reuse`] before any).
pub fn policy() -> HeapPolicy {
    match POLICY.load(std::sync::atomic::Ordering::Relaxed) {
        1 => HeapPolicy::Compact,
        _ => HeapPolicy::Reuse,
    }
}

/// An update micro-batch has ended: under [`HeapPolicy::Compact`] its freed activations go
/// back to the system, so the next micro-batch's (other sizes) do not pile up in the heaps.
pub fn microbatch_done() {
    if policy() == HeapPolicy::Compact {
        release_freed_memory();
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
