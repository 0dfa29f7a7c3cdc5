//! Small formatting helpers shared by the subcommands.

/// Bytes in binary units, as everywhere: `512 B`, `3.2 MiB`, `4 GiB`.
pub use perfpilot_units::bytes;

/// Mebibytes with one decimal.
pub fn mib(n: u64) -> String {
    format!("{:.1}", n as f64 / (1024.0 * 1024.0))
}

/// A CPU set, or `-` when empty.
pub fn cpus(s: &perfpilot_sys::CpuSet) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// A wall-clock time in ms since the epoch as RFC 3339 (UTC, seconds).
pub fn time_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Truncates a string to `n` characters.
pub fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars()
            .take(n.saturating_sub(1))
            .chain(std::iter::once('…'))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_units() {
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(3 * 1024 * 1024 + 200 * 1024), "3.2 MiB");
        assert_eq!(super::trunc("abcdef", 4), "abc…");
    }
}
