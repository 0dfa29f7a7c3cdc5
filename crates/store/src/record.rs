//! Recording: samples appended to the store on a fixed schedule until a duration has passed
//! or a stop flag is set, and what the recording cost in CPU time. `perfpilot record` runs it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfpilot_observe::Sampler;
use perfpilot_observe::sample::{SampleError, Skips};

use crate::{Error, Store};

/// When to take samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Time between the starts of two samples; a sample that overruns it starts the next one
    /// at once.
    pub interval: Duration,
    /// Stop after this long (`None`: until the stop flag is set).
    pub duration: Option<Duration>,
}

/// What a recording did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordSummary {
    /// Samples written.
    pub samples: u64,
    /// Wall-clock time the recording took, seconds.
    pub wall_s: f64,
    /// CPU time this process used meanwhile, seconds.
    pub cpu_s: f64,
}

impl RecordSummary {
    /// CPU used as a share of one CPU, in percent (0 for an empty recording).
    pub fn cpu_pct(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.cpu_s / self.wall_s * 100.0
        } else {
            0.0
        }
    }
}

/// Why a recording stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A sample could not be taken.
    #[error(transparent)]
    Sample(#[from] SampleError),
    /// A sample could not be written.
    #[error("writing to {}", path.display())]
    Append {
        /// The store's path.
        path: PathBuf,
        /// The store's error (boxed: it is large and rare).
        #[source]
        source: Box<Error>,
    },
}

impl Store {
    /// Takes samples with `sampler` on `schedule` and appends them (retention applies after
    /// each append) until the schedule's duration has passed or `stop` is set. `on_skips` sees
    /// the skip counts of every sample that skipped more than vanished processes.
    pub fn record(
        &mut self,
        sampler: &mut Sampler,
        schedule: &Schedule,
        stop: &AtomicBool,
        mut on_skips: impl FnMut(&Skips),
    ) -> Result<RecordSummary, RecordError> {
        let start = Instant::now();
        let cpu0 = perfpilot_sys::self_cpu_time();
        let over = |start: Instant| schedule.duration.is_some_and(|d| start.elapsed() >= d);
        let mut samples = 0u64;
        let mut next = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) || over(start) {
                break;
            }
            let sample = sampler.sample()?;
            if !sample.skips.is_clean() {
                on_skips(&sample.skips);
            }
            self.append(&sample).map_err(|source| RecordError::Append {
                path: self.path().to_path_buf(),
                source: Box::new(source),
            })?;
            samples += 1;
            // Keep a fixed schedule; if a sample overran, start the next one now.
            next += schedule.interval;
            let now = Instant::now();
            if next < now {
                next = now;
            }
            // Short sleeps, so that a stop is seen within 100 ms.
            while !stop.load(Ordering::SeqCst) && Instant::now() < next {
                if over(start) {
                    break;
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
            }
        }
        Ok(RecordSummary {
            samples,
            wall_s: start.elapsed().as_secs_f64(),
            cpu_s: (perfpilot_sys::self_cpu_time() - cpu0).as_secs_f64(),
        })
    }
}
