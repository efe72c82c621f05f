//! Returning the memory of one big request to the system.
//!
//! Parsing and tokenizing a multi-megabyte prompt allocates hundreds of megabytes of short-lived
//! buffers (the tokenizer's per-token strings and offsets) on a blocking-pool thread. glibc's
//! malloc keeps freed memory in that thread's arena, so two 4 MB prompts left the server
//! 500 MiB larger for good (issue 24: the server's RSS after the hostile suite must stay within
//! 200 MB of before). After a request body above [`TRIM_ABOVE_BYTES`] has been handled, the
//! freed pages of every arena go back to the system (`malloc_trim`, glibc only; elsewhere a
//! no-op).

/// Bodies larger than this are followed by a trim of the heap.
pub const TRIM_ABOVE_BYTES: usize = 1 << 20;

/// Releases freed heap memory to the system when the request just handled had a body of
/// `body_bytes` above [`TRIM_ABOVE_BYTES`]. Costs a walk of the heap, so small requests skip it.
pub fn trim_after(body_bytes: usize) {
    if body_bytes > TRIM_ABOVE_BYTES {
        trim();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    extern "C" {
        /// glibc: releases free memory at the top of the heap and, since 2.8, the free pages
        /// inside every arena (madvise); returns 1 if any was released.
        fn malloc_trim(pad: usize) -> std::os::raw::c_int;
    }
    // SAFETY: malloc_trim takes no pointers and is thread-safe (it locks each arena).
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
