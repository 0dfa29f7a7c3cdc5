//! Who perfpilot runs as.

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process runs as root (effective uid 0): the daemon's and `revert`'s
/// privileges, and the default state paths, depend on it.
pub fn is_root() -> bool {
    euid() == 0
}
