//! The clocks perfpilot reads: wall-clock time for records, the monotonic clock for rates.

/// Wall-clock time in milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `/proc`'s uptime, never set back, so two
/// readings' difference is the time between them. An `Instant` cannot be stored or compared
/// across processes; this can.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec.max(0) as u64 * 1_000_000_000 + ts.tv_nsec.max(0) as u64
}

/// `CLOCK_MONOTONIC` in seconds ([`mono_ns`]), for durations and time since a start.
pub fn mono_s() -> f64 {
    mono_ns() as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clocks_move_forward() {
        let (m0, w0) = (mono_ns(), now_ms());
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(mono_ns() >= m0 + 1_000_000);
        // After 2020-01-01.
        assert!(now_ms() >= w0 && w0 > 1_577_836_800_000);
    }
}
