//! Progress on stderr while a study runs: a bar of trials on a terminal; elsewhere (a log, a
//! pipe, where indicatif hides its bar) a line per round and at least one a minute, so a long
//! run is never silent; with neither, only the lines printed through it.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest a run goes without a progress line when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(60);

/// Progress on stderr: a bar, progress lines, or only the lines printed through it.
pub(crate) struct Progress {
    mode: Mode,
}

enum Mode {
    /// `--quiet`: only the lines printed through it.
    Off,
    /// A terminal: indicatif's bar.
    Bar(indicatif::ProgressBar),
    /// Not a terminal: lines.
    Lines(Mutex<Lines>),
    /// Nothing at all (computed trials: a benchmark prints its own table).
    Silent,
}

/// Where a run stands, for the progress lines.
struct Lines {
    done: usize,
    total: usize,
    started: Instant,
    last: Instant,
    /// What runs now.
    current: String,
}

impl Lines {
    /// "7/26 trials, 1m05s elapsed, at most ~2m10s left".
    fn status(&self) -> String {
        let elapsed = self.started.elapsed();
        let mut s = format!(
            "{}/{} trials, {} elapsed",
            self.done,
            self.total,
            perfpilot_units::clock(elapsed)
        );
        if self.done > 0 && self.total > self.done {
            let left = elapsed.mul_f64((self.total - self.done) as f64 / self.done as f64);
            s.push_str(&format!(", at most ~{} left", perfpilot_units::clock(left)));
        }
        s
    }

    fn print(&mut self, what: &str) {
        eprintln!("progress: {what}: {}", self.status());
        self.last = Instant::now();
    }
}

impl Progress {
    /// Progress of `total` trials when `show`: a bar on a terminal, else lines; none
    /// otherwise.
    pub(crate) fn new(show: bool, total: usize) -> Progress {
        Progress::with(show, std::io::stderr().is_terminal(), total)
    }

    /// No progress and no lines.
    pub(crate) fn silent() -> Progress {
        Progress { mode: Mode::Silent }
    }

    /// As [`Progress::new`], with whether stderr is a terminal given.
    fn with(show: bool, terminal: bool, total: usize) -> Progress {
        let mode = match (show, terminal) {
            (false, _) => Mode::Off,
            (true, true) => Mode::Bar(bar(total)),
            (true, false) => {
                let now = Instant::now();
                let mut lines = Lines {
                    done: 0,
                    total,
                    started: now,
                    last: now,
                    current: String::new(),
                };
                lines.print("starting");
                Mode::Lines(Mutex::new(lines))
            }
        };
        Progress { mode }
    }

    /// Runs `f` on the lines' state (a poisoned lock only means a panic elsewhere: the state
    /// is still counts).
    fn lines(&self, f: impl FnOnce(&mut Lines)) {
        if let Mode::Lines(m) = &self.mode {
            f(&mut m.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// What runs now.
    pub(crate) fn message(&self, m: String) {
        match &self.mode {
            Mode::Bar(b) => b.set_message(m),
            Mode::Lines(_) => self.lines(|l| l.current = m),
            Mode::Off | Mode::Silent => {}
        }
    }

    /// One trial done (a line when the last is [`LINE_EVERY`] old).
    pub(crate) fn inc(&self) {
        if let Mode::Bar(b) = &self.mode {
            b.inc(1);
        }
        self.lines(|l| {
            l.done += 1;
            if l.last.elapsed() >= LINE_EVERY {
                let what = match l.current.as_str() {
                    "" => "a trial done".to_string(),
                    now => format!("{now} done"),
                };
                l.print(&what);
            }
        });
    }

    /// A round ended (`what`: "race round 2 of at most 5"): a line when not on a terminal.
    pub(crate) fn round(&self, what: String) {
        self.lines(|l| l.print(&format!("{what} done")));
    }

    /// `by` trials fewer to run (configurations left the race).
    pub(crate) fn shrink(&self, by: usize) {
        match &self.mode {
            Mode::Bar(b) => {
                if let Some(len) = b.length() {
                    b.set_length(len.saturating_sub(by as u64).max(b.position()));
                }
            }
            Mode::Lines(_) => self.lines(|l| l.total = l.total.saturating_sub(by).max(l.done)),
            Mode::Off | Mode::Silent => {}
        }
    }

    /// A line above the bar (on stderr without one).
    pub(crate) fn println(&self, m: String) {
        match &self.mode {
            Mode::Bar(b) => b.println(m),
            Mode::Silent => {}
            _ => eprintln!("{m}"),
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Mode::Bar(b) = &self.mode {
            b.finish_and_clear();
        }
    }
}

/// indicatif's bar of `total` trials on stderr.
fn bar(total: usize) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::with_draw_target(
        Some(total as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} trials, ~{eta} left (at most) {msg}",
    ) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_progress_counts_trials_and_estimates_what_is_left() {
        let p = Progress::with(true, false, 10);
        for _ in 0..4 {
            p.inc();
        }
        p.shrink(2);
        let Mode::Lines(m) = &p.mode else {
            panic!("lines expected off a terminal");
        };
        let mut l = m.lock().unwrap();
        assert_eq!((l.done, l.total), (4, 8));
        l.started = Instant::now() - Duration::from_secs(40);
        assert_eq!(
            l.status(),
            "4/8 trials, 40s elapsed, at most ~40s left",
            "4 trials in 40 s, 4 to go"
        );
    }

    #[test]
    fn quiet_progress_draws_nothing_and_a_terminal_gets_the_bar() {
        assert!(matches!(Progress::with(false, false, 3).mode, Mode::Off));
        assert!(matches!(Progress::with(false, true, 3).mode, Mode::Off));
        assert!(matches!(Progress::with(true, true, 3).mode, Mode::Bar(_)));
    }
}
