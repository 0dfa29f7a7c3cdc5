//! One module per subcommand.

pub mod advise;
pub mod bench;
pub mod bench_drive;
pub mod bench_read;
pub mod bench_search;
pub mod bench_verdicts;
pub mod capacity;
pub mod certs;
pub mod daemon;
pub mod drive;
pub mod drive_coord;
pub mod drive_live;
pub mod dump;
pub mod fleet;
pub mod generate;
pub mod model;
pub mod observe;
pub mod record;
pub mod remote;
pub mod study;
pub mod topology;

use std::io::IsTerminal;

/// Sends `tracing` events to stderr at `level` (`RUST_LOG` overrides it), coloured only when
/// stderr is a terminal and `NO_COLOR` is not set: a log file or journal gets plain text.
pub fn init_log(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .init();
}

/// Whether to write ANSI colour: on a terminal, unless `NO_COLOR` is set to a non-empty value
/// (<https://no-color.org>).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_is_for_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
        assert!(!colour(false, Some("".into())));
    }
}
