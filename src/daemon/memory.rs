//! The process's heap: fewer glibc arenas for a scan's worker threads, and the heap a pass
//! freed handed back to the kernel, so the idle daemon stays small.
//!
//! This module holds two of the crate's three `unsafe` blocks (the third registers the
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

/// Caps glibc's malloc arenas at two, unless the environment chose (`GLIBC_TUNABLES`'
/// `glibc.malloc.arena_max`, as the shipped unit sets for the daemon, or
/// `MALLOC_ARENA_MAX`). A scan's worker threads otherwise each allocate in an arena of
/// their own: `check` of 10,010 certificates peaked at 39.9 MiB, 36.5 with two arenas, at
/// the same speed (one arena: 35.5 MiB, 15 % slower). Call first thing in `main`, before any
/// thread starts.
pub fn cap_arenas() {
    let chosen = std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.arena_max"));
    if chosen {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt takes two plain integers and passes no pointer. glibc documents it as
    // MT-Unsafe (it changes the allocator's settings without a lock): it is called before
    // the process starts any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
