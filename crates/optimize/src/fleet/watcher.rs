//! Reads the fleet's verdicts on a thread of its own, every `refresh_s`, so that a scan only
//! takes the latest tally and never waits on Prometheus: a slow or down server leaves the
//! daemon deciding alone (with the last tally it had, or none).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::{FleetConfig, Priors, Prometheus, Tally};

/// What the thread last found.
#[derive(Debug, Clone, Default)]
struct Found {
    priors: Option<Priors>,
    error: Option<String>,
}

/// The fleet watcher (stopped when dropped).
pub struct Watcher {
    found: Arc<Mutex<Found>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    url: String,
}

impl Watcher {
    /// Starts reading the fleet's verdicts as `config` says.
    pub fn start(config: &FleetConfig) -> Watcher {
        let found = Arc::new(Mutex::new(Found::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let prom = Prometheus::new(&config.prometheus, config.timeout());
        let (f2, s2) = (found.clone(), stop.clone());
        let (quorum, min_hosts) = (config.quorum, config.min_hosts);
        let refresh = Duration::from_secs_f64(config.refresh_s);
        let thread = std::thread::Builder::new()
            .name("perfpilot-fleet".into())
            .spawn(move || {
                let mut failing = false;
                while !s2.load(Ordering::SeqCst) {
                    let r = Tally::read(&prom);
                    let mut f = f2.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(t) => {
                            debug!(pairs = t.pairs.len(), "fleet verdicts read");
                            f.priors = Some(Priors {
                                pairs: t.pairs,
                                quorum,
                                min_hosts,
                            });
                            f.error = None;
                            failing = false;
                        }
                        Err(e) => {
                            // Said once per outage; the last tally stays in use.
                            if !failing {
                                warn!("fleet priors: {e}; deciding alone until it answers");
                            }
                            failing = true;
                            f.error = Some(e.to_string());
                        }
                    }
                    drop(f);
                    let until = Instant::now() + refresh;
                    while !s2.load(Ordering::SeqCst) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })
            .ok();
        if thread.is_none() {
            warn!("fleet priors: cannot start a thread; deciding alone");
        }
        Watcher {
            found,
            stop,
            thread,
            url: config.prometheus.clone(),
        }
    }

    /// Waits until the first query answered or failed, at most `limit` (so that a daemon
    /// starting with `[fleet]` asks the fleet before its first proposal, and a down Prometheus
    /// delays it by the query timeout at most).
    pub fn wait_first(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Ok(f) = self.found.try_lock()
                && (f.priors.is_some() || f.error.is_some())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The latest tally, if one was read (never waits for a query).
    pub fn priors(&self) -> Option<Priors> {
        self.found.try_lock().ok().and_then(|f| f.priors.clone())
    }

    /// The last error, while the server does not answer.
    pub fn error(&self) -> Option<String> {
        self.found.try_lock().ok().and_then(|f| f.error.clone())
    }

    /// The server's address.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_prometheus_gives_no_priors_and_an_error_without_blocking() {
        let mut c = FleetConfig::new("http://127.0.0.1:9");
        c.timeout_s = 0.3;
        let w = Watcher::start(&c);
        let t0 = Instant::now();
        // Asking never waits on the query.
        assert!(w.priors().is_none());
        assert!(t0.elapsed() < Duration::from_millis(50));
        let deadline = Instant::now() + Duration::from_secs(5);
        while w.error().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(w.error().unwrap_or_default().contains("127.0.0.1:9"));
        assert!(w.priors().is_none());
    }
}
