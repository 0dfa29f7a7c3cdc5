//! The end of a started process's log, for the message that says why it failed.

use std::path::Path;

/// The last `n` non-blank lines of the file at `path` (none when it cannot be read).
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// `; its WHAT ends: a | b | c` (the last three non-blank lines of `path`), or nothing when
/// the log is empty: the end of a one-line error message.
pub fn ends(path: &Path, what: &str) -> String {
    let lines = tail(path, 3);
    if lines.is_empty() {
        return String::new();
    }
    format!("; its {what} ends: {}", lines.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_log_skips_blank_lines_and_an_empty_log_says_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("log");
        std::fs::write(&log, "one\ntwo\n\nthree\nfour\n  \n").expect("write");
        assert_eq!(tail(&log, 2), ["three", "four"]);
        assert_eq!(ends(&log, "log"), "; its log ends: two | three | four");
        std::fs::write(&log, "\n").expect("write");
        assert_eq!(ends(&log, "log"), "");
        assert_eq!(ends(&dir.path().join("missing"), "log"), "");
    }
}
