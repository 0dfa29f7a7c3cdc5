//! Servers given as a command line (a study's instances, a capacity tier of kind `command`):
//! the line, its templates filled by the caller, split into words as a shell would, behind a
//! wrapper (`taskset`, `numactl`, `ip netns exec`), started with no input and its standard
//! error in a log of its own, under the [`Server`](super::Server) guard.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A command line that cannot be split into words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    /// It ends in a backslash that escapes nothing.
    #[error("ends in a lone backslash: remove it or put it in single quotes")]
    LoneBackslash,
    /// A quote is opened and never closed.
    #[error("a quote is not closed")]
    OpenQuote,
    /// It holds no word.
    #[error("is empty")]
    Empty,
}

/// Splits a command line into words by POSIX shell rules (`shlex`): blanks separate, single
/// and double quotes group, a backslash escapes; pipes, variables and globs are not
/// interpreted, and a `#` starting a word comments out the rest of the line.
pub fn split_words(s: &str) -> Result<Vec<String>, WordsError> {
    let Some(words) = shlex::split(s) else {
        // shlex fails on an open quote or a lone backslash at the end; a newline after the
        // backslash makes it a line continuation, which tells the two apart.
        if shlex::split(&format!("{s}\n")).is_some() {
            return Err(WordsError::LoneBackslash);
        }
        return Err(WordsError::OpenQuote);
    };
    if words.is_empty() {
        return Err(WordsError::Empty);
    }
    Ok(words)
}

/// Where a command-line server's standard output goes (its standard error goes to its log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdout {
    /// Dropped: a chatty server would fill its log over a long run.
    Dropped,
    /// Into the log with its standard error (a batch's output names what it did).
    Logged,
}

/// Its log could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot {verb} {path}: {source}", path = .path.display())]
pub struct LogError {
    /// `create` or `share`.
    pub verb: &'static str,
    /// The log.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// The command running `argv`: a wrapper's words, then the server's; the first is the
/// program.
pub fn command(argv: &[String]) -> Command {
    let (program, args) = argv.split_first().map_or(("", &[][..]), |(p, a)| (p, a));
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

/// Gives `cmd` no input, its standard error in `log` (created anew) and its standard output
/// as `stdout` says. The caller adds its environment, working directory, CPU group or process
/// group, then starts it under [`Server`](super::Server)'s guard.
pub fn log_to(cmd: &mut Command, log: &Path, stdout: Stdout) -> Result<(), LogError> {
    let fail = |verb| {
        let path = log.to_path_buf();
        move |source| LogError { verb, path, source }
    };
    let err = std::fs::File::create(log).map_err(fail("create"))?;
    cmd.stdin(Stdio::null());
    match stdout {
        Stdout::Dropped => cmd.stdout(Stdio::null()),
        Stdout::Logged => cmd.stdout(err.try_clone().map_err(fail("share"))?),
    };
    cmd.stderr(err);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::server::Server;

    #[test]
    fn words_are_split_by_shell_quoting_and_a_bad_line_says_why() {
        assert_eq!(
            split_words(r#"run "a \"b\"" 'c $d' e\ f"#).unwrap(),
            ["run", "a \"b\"", "c $d", "e f"]
        );
        assert_eq!(split_words("'open"), Err(WordsError::OpenQuote));
        assert_eq!(WordsError::OpenQuote.to_string(), "a quote is not closed");
        assert!(
            split_words("app \\")
                .unwrap_err()
                .to_string()
                .contains("lone backslash")
        );
        assert_eq!(split_words("  "), Err(WordsError::Empty));
    }

    #[test]
    fn a_started_command_writes_stderr_to_its_log_and_stdout_only_when_logged() {
        let dir = tempfile::tempdir().unwrap();
        let words = split_words("sh -c 'echo out; echo err >&2'").unwrap();
        for (stdout, want) in [(Stdout::Dropped, "err\n"), (Stdout::Logged, "out\nerr\n")] {
            let log = dir.path().join("log");
            let mut cmd = command(&words);
            log_to(&mut cmd, &log, stdout).unwrap();
            let mut s = Server::start("sh", cmd).unwrap();
            while s.exit_status().is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(std::fs::read_to_string(&log).unwrap(), want);
        }
    }

    #[test]
    fn a_log_that_cannot_be_created_is_named() {
        let mut cmd = command(&["true".into()]);
        let e = log_to(&mut cmd, Path::new("/nonexistent/dir/log"), Stdout::Dropped).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot create /nonexistent/dir/log: "),
            "{e}"
        );
    }
}
