//! Handing the heap a pass freed back to the kernel, so the idle daemon stays small.
//!
//! This module holds one of the crate's two `unsafe` blocks (the other registers the
//! timerfd of `wall_clock.rs` with tokio), which is why `lib.rs` denies `unsafe_code`
//! instead of forbidding it. glibc keeps freed memory in its arenas. After a
//! pass over 1,000 certificates that is about 3 MiB of parsed certificates and signing
//! buffers, held for the whole idle day. `malloc_trim(0)` returns it to the kernel.

/// Returns the heap freed since the last call to the kernel (glibc only; a no-op elsewhere).
pub(crate) fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes a plain integer, passes no pointer, and works on the
    // allocator's own state under the allocator's own locks. glibc documents it as
    // MT-Safe, so another thread may allocate meanwhile.
    unsafe {
        libc::malloc_trim(0);
    }
}
