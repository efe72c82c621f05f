//! `heap::set_policy`: under `reuse` a block freed and allocated again every step (a decoding
//! step's logits) is served from the heap without page faults; under `compact` a block of
//! 4 MB or more is mapped alone and faulted in afresh each time. One test in its own binary:
//! malloc's settings are per process.

use reinforge_torch::heap::{self, HeapPolicy};

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes into the struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut u), 0);
        u.ru_minflt
    }
}

/// Page faults of `steps` allocations of `bytes`, each written through and freed.
fn faults_of_steps(bytes: usize, steps: usize) -> i64 {
    // One step first so the heap holds the block's memory before counting.
    drop(std::hint::black_box(vec![1u8; bytes]));
    let before = minor_faults();
    for i in 0..steps {
        let block = std::hint::black_box(vec![i as u8; bytes]);
        assert_eq!(block[bytes - 1], i as u8);
    }
    minor_faults() - before
}

/// Whether the kernel backs every anonymous map with transparent huge pages (`[always]` in
/// `/sys/kernel/mm/transparent_hugepage/enabled`; `madvise` and `never` leave 4 KiB pages here).
fn huge_pages_always() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]"))
}

#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn reuse_serves_a_repeated_block_without_faults_and_compact_maps_it_each_time() {
    const BYTES: usize = 6 << 20;
    const STEPS: usize = 20;
    let pages = (BYTES / 4096) as i64;
    heap::set_policy(HeapPolicy::Compact);
    assert_eq!(heap::policy(), HeapPolicy::Compact);
    let compact = faults_of_steps(BYTES, STEPS);
    heap::set_policy(HeapPolicy::Reuse);
    assert_eq!(heap::policy(), HeapPolicy::Reuse);
    let reuse = faults_of_steps(BYTES, STEPS);
    // Compact: every step maps the block afresh and touches each page: at least half its
    // pages fault per step; where transparent huge pages back every anonymous map (`always`,
    // the RHEL default) a 2 MiB page faults once, so a step faults a few times, never none.
    let per_step = if huge_pages_always() { 1 } else { pages / 2 };
    assert!(
        compact >= STEPS as i64 * per_step,
        "compact: {compact} faults for {STEPS} steps of {pages} pages (huge pages always: {})",
        huge_pages_always()
    );
    assert!(
        reuse < pages,
        "reuse: {reuse} faults for {STEPS} steps of {pages} pages (compact: {compact})"
    );
}
