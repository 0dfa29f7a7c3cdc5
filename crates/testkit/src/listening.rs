//! A child server started on port 0 that prints the address it bound: the test reads the
//! address from that line instead of drawing a free port first, which another test's server
//! can take before the child binds it.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The output stream of a child that carries its "listening on" line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// The lines a child printed on the stream read, and whether the stream ended.
#[derive(Default)]
struct Printed {
    state: Mutex<(Vec<String>, bool)>,
    changed: Condvar,
}

/// A child server and the address it printed; killed (SIGKILL) and reaped on drop, also when
/// a test panics. Its stream is read to the end as it runs, so a full pipe never blocks it.
pub struct Listening {
    child: Child,
    /// The address it listens on, as it printed it (bound already: connections queue).
    pub addr: SocketAddr,
    program: String,
    printed: Arc<Printed>,
}

/// Starts `cmd` (told to listen on port 0 by the caller), reads `stream` until a line holding
/// `marker`, and returns the child with the address that follows the marker
/// (`listening on http://127.0.0.1:41234 (dir …)` with the marker `listening on ` gives
/// 127.0.0.1:41234; a scheme and a path around it are dropped). Panics, naming the program and
/// quoting what it printed, when it cannot start, ends, or prints no such line within `limit`.
pub fn spawn_listening(
    mut cmd: Command,
    stream: Stream,
    marker: &str,
    limit: Duration,
) -> Listening {
    let program = cmd.get_program().to_string_lossy().into_owned();
    match stream {
        Stream::Stdout => cmd.stdout(Stdio::piped()),
        Stream::Stderr => cmd.stderr(Stdio::piped()),
    };
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let pipe: Box<dyn Read + Send> = match stream {
        Stream::Stdout => Box::new(child.stdout.take().expect("its piped stdout")),
        Stream::Stderr => Box::new(child.stderr.take().expect("its piped stderr")),
    };
    let printed = Arc::new(Printed::default());
    let sink = printed.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.state.lock().expect("printed lines").0.push(line);
            sink.changed.notify_all();
        }
        sink.state.lock().expect("printed lines").1 = true;
        sink.changed.notify_all();
    });
    // Owned by the guard at once, so a panic below kills and reaps the child.
    let mut run = Listening {
        child,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        program,
        printed,
    };
    let line = run.wait_line(|l| l.contains(marker), limit);
    run.addr = address_after(&line, marker).unwrap_or_else(|| {
        panic!(
            "{} printed {line:?}, whose address after {marker:?} does not parse",
            run.program
        )
    });
    run
}

/// The address after `marker` in `line`: its next word, less a `scheme://` before it and a
/// `/path` after it.
fn address_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once(marker)?;
    let word = rest.split_whitespace().next()?;
    let word = word.split_once("://").map_or(word, |(_, w)| w);
    let word = word.split('/').next()?;
    word.trim_end_matches([',', ';', ')']).parse().ok()
}

impl Listening {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child process (to signal it or wait for its exit).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Everything it printed on the stream so far, a line each.
    pub fn output(&self) -> String {
        let state = self.printed.state.lock().expect("printed lines");
        state.0.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Whether what it printed so far holds `what`.
    pub fn said(&self, what: &str) -> bool {
        self.output().contains(what)
    }

    /// The first line it printed (from the start) that `wanted` accepts, waiting at most
    /// `limit` for it; panics, naming the program and quoting what it printed, when the stream
    /// ends first or the time is up.
    pub fn wait_line(&mut self, wanted: impl Fn(&str) -> bool, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let mut state = self.printed.state.lock().expect("printed lines");
        loop {
            if let Some(line) = state.0.iter().find(|l| wanted(l)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if state.1 || left.is_zero() {
                let printed = state.0.join("\n");
                drop(state);
                let why = if left.is_zero() {
                    format!("printed no such line within {limit:?}")
                } else {
                    format!("ended its output ({})", self.exit_status())
                };
                panic!("{} {why}; it printed:\n{printed}", self.program);
            }
            state = self
                .printed
                .changed
                .wait_timeout(state, left)
                .expect("printed lines")
                .0;
        }
    }

    /// How it exited, waiting a moment for it (its output ended, so it is on its way).
    fn exit_status(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return format!("exited: {status}"),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => return "still running".to_string(),
                Err(e) => return format!("its status unknown: {e}"),
            }
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn the_address_after_the_marker_is_read_without_scheme_or_path() {
        let line = "filestore: listening on http://127.0.0.1:41234 (dir /tmp/x)";
        assert_eq!(
            address_after(line, "listening on "),
            Some(SocketAddr::from(([127, 0, 0, 1], 41234)))
        );
        let line = "INFO metrics: serving https://127.0.0.1:9/metrics and /status";
        assert_eq!(
            address_after(line, "metrics: serving "),
            Some(SocketAddr::from(([127, 0, 0, 1], 9)))
        );
        assert_eq!(address_after("listening on nowhere", "listening on "), None);
    }

    #[test]
    fn a_child_that_prints_its_address_on_stderr_is_found_and_later_lines_are_kept() {
        let mut run = spawn_listening(
            sh(
                "echo noise >&2; echo 'x: listening on 127.0.0.1:5 (y)' >&2; echo ready >&2; sleep 30",
            ),
            Stream::Stderr,
            "listening on ",
            Duration::from_secs(10),
        );
        assert_eq!(run.addr, SocketAddr::from(([127, 0, 0, 1], 5)));
        assert_eq!(
            run.wait_line(|l| l == "ready", Duration::from_secs(10)),
            "ready"
        );
        assert!(run.said("noise") && run.output().starts_with("noise\n"));
    }

    #[test]
    #[should_panic(expected = "sh ended its output (exited: exit status: 3); it printed:\nhello")]
    fn a_child_that_ends_before_listening_fails_naming_it_and_what_it_printed() {
        spawn_listening(
            sh("echo hello; exit 3"),
            Stream::Stdout,
            "listening on ",
            Duration::from_secs(10),
        );
    }
}
