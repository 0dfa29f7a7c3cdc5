//! Benefit signals: what tells whether an action helped a workload. In order of preference:
//! an application probe configured for the workload, PMU cycles per instruction where the
//! machine has counters, the workload's own I/O progress, and the CPU it consumes while not
//! saturated. A signal gives one observation per evaluation window.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfpilot_fetch::{self as fetch, FetchFailure};
use serde::{Deserialize, Serialize};

use crate::config::{ProbeSpec, ValueKind};

/// Where a workload's signal comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum SignalKind {
    /// An application probe (higher or lower is better as configured).
    Probe {
        /// Where and how to read the application's own measure.
        probe: ProbeSpec,
    },
    /// A built-in application preset: a counter of completed work the server itself keeps,
    /// found without configuration, per CPU-second (higher is better).
    Preset {
        /// The preset's name (`postgresql`, `redis`, …).
        preset: String,
        /// Where it is read (a socket path or an address).
        endpoint: String,
        /// What is counted (`xact_commit + xact_rollback`, …).
        counter: String,
    },
    /// Cycles per instruction (lower is better).
    Cpi,
    /// System calls (`syscr + syscw` of `/proc/PID/io`) per CPU-second: a kernel-visible proxy
    /// of the work a request/response server does for the CPU it uses (higher is better).
    Syscalls,
    /// Bytes read and written per second through system calls (higher is better).
    Io,
    /// CPU cores consumed at steady load (lower is better).
    Cpu,
}

impl SignalKind {
    /// Whether a larger value is better.
    pub fn higher_is_better(&self) -> bool {
        match self {
            SignalKind::Probe { probe } => probe.higher_is_better(),
            SignalKind::Preset { .. } | SignalKind::Io | SignalKind::Syscalls => true,
            SignalKind::Cpi | SignalKind::Cpu => false,
        }
    }

    /// Where the signal comes from.
    pub fn source(&self) -> SignalSource {
        match self {
            SignalKind::Probe { .. } => SignalSource::Probe,
            SignalKind::Preset { .. } => SignalSource::Preset,
            SignalKind::Cpi => SignalSource::Pmu,
            SignalKind::Syscalls => SignalSource::Proxy,
            SignalKind::Io => SignalSource::Io,
            SignalKind::Cpu => SignalSource::Cpu,
        }
    }

    /// A short description for logs and status.
    pub fn describe(&self) -> String {
        match self {
            SignalKind::Probe {
                probe:
                    ProbeSpec::Http {
                        url,
                        metric,
                        per_cpu,
                        ..
                    },
            } => format!(
                "{metric} at {url}{}",
                if *per_cpu { " per CPU-second" } else { "" }
            ),
            SignalKind::Probe {
                probe:
                    ProbeSpec::Command {
                        command, per_cpu, ..
                    },
            } => format!(
                "command `{command}`{}",
                if *per_cpu { " per CPU-second" } else { "" }
            ),
            SignalKind::Preset {
                preset,
                endpoint,
                counter,
            } => format!("{preset}: {counter} at {endpoint} per CPU-second"),
            SignalKind::Cpi => "cycles per instruction".into(),
            SignalKind::Syscalls => "system calls per CPU-second (syscr+syscw, a proxy)".into(),
            SignalKind::Io => "I/O bytes per second (rchar+wchar)".into(),
            SignalKind::Cpu => "CPU consumed at steady load".into(),
        }
    }
}

/// Where a workload's signal comes from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalSource {
    /// A probe configured for the workload.
    Probe,
    /// A built-in application preset found without configuration.
    Preset,
    /// PMU counters.
    Pmu,
    /// The kernel-visible proxy: system calls per CPU-second.
    Proxy,
    /// I/O progress.
    Io,
    /// CPU consumed at steady load.
    Cpu,
}

impl SignalSource {
    /// The word status uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalSource::Probe => "probe",
            SignalSource::Preset => "preset",
            SignalSource::Pmu => "pmu",
            SignalSource::Proxy => "proxy",
            SignalSource::Io => "io",
            SignalSource::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for SignalSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A probe that failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// No answer within the probe timeout.
    #[error("probe {what} timed out after {timeout:?}")]
    Timeout {
        /// The probe: its URL, or its command in backticks.
        what: String,
        /// The timeout it had.
        timeout: Duration,
    },
    /// The probe could not be run, or answered with an error.
    #[error("probe {what} failed: {why}")]
    Failed {
        /// The probe: its URL, or its command in backticks.
        what: String,
        /// What went wrong.
        why: String,
    },
    /// A command probe printed something that is not a number.
    #[error("probe {what} gave {got:?}, not a number")]
    Garbage {
        /// The probe's command in backticks.
        what: String,
        /// The start of what it printed.
        got: String,
    },
    /// An HTTP probe's page does not have the metric.
    #[error("probe {what}: metric {metric} not found")]
    Missing {
        /// The probe's URL.
        what: String,
        /// The metric's name.
        metric: String,
    },
}

/// Runs `sh -c command` and parses the first token it prints as a number.
pub fn run_command(command: &str, timeout: Duration) -> Result<f64, ProbeError> {
    let what = format!("`{command}`");
    let mut child = Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ProbeError::Failed {
            what: what.clone(),
            why: e.to_string(),
        })?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::Timeout { what, timeout });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(ProbeError::Failed {
                    what,
                    why: e.to_string(),
                });
            }
        }
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if !status.success() {
        return Err(ProbeError::Failed {
            what,
            why: format!("exited with {status}"),
        });
    }
    let tok = out.split_whitespace().next().unwrap_or("");
    tok.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| ProbeError::Garbage {
            what,
            got: out.chars().take(40).collect(),
        })
}

/// Finds `metric{labels}` in Prometheus text exposition.
pub fn parse_prometheus(
    text: &str,
    metric: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<f64> {
    // One parser of the text format for probes and presets (escapes, spacing, timestamps).
    crate::preset::prometheus::parse(text)
        .samples
        .into_iter()
        .find(|s| s.name == metric && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
}

/// GETs an HTTP URL and reads a metric from it.
pub fn fetch_metric(
    url: &str,
    metric: &str,
    labels: &std::collections::BTreeMap<String, String>,
    timeout: Duration,
) -> Result<f64, ProbeError> {
    let what = url.to_string();
    let body = match fetch::get(url, timeout) {
        Ok(r) => r.body,
        Err(e) => {
            return Err(match e.failure {
                FetchFailure::Timeout(timeout) => ProbeError::Timeout { what, timeout },
                failure => ProbeError::Failed {
                    what,
                    why: failure.to_string(),
                },
            });
        }
    };
    parse_prometheus(&body, metric, labels).ok_or(ProbeError::Missing {
        what,
        metric: metric.to_string(),
    })
}

/// Reads a probe once: its raw value (a counter's count, a gauge's level).
pub fn read_probe(p: &ProbeSpec, timeout: Duration) -> Result<f64, ProbeError> {
    match p {
        ProbeSpec::Http {
            url,
            metric,
            labels,
            ..
        } => fetch_metric(url, metric, labels, timeout),
        ProbeSpec::Command { command, .. } => run_command(command, timeout),
    }
}

/// Turns raw probe readings into one observation per window: a counter's rate over the window
/// (a counter that went backwards, i.e. restarted, gives no observation), or a gauge's value.
#[derive(Debug, Clone, Default)]
pub struct Windowed {
    last: Option<(f64, f64)>,
}

impl Windowed {
    /// Feeds the reading taken at `t_s` (seconds, monotonic); returns the window's observation.
    pub fn feed(&mut self, kind: ValueKind, t_s: f64, value: f64) -> Option<f64> {
        let prev = self.last.replace((t_s, value));
        match kind {
            ValueKind::Gauge => Some(value),
            ValueKind::Counter => {
                let (t0, v0) = prev?;
                (t_s > t0 && value >= v0).then(|| (value - v0) / (t_s - t0))
            }
        }
    }

    /// Forgets the last reading (after a gap).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

/// A counter's work per CPU-second over windows of at least `min_s` seconds, for a counter
/// that moves in lumps (PostgreSQL's statistics reach `pg_stat_database` about once a second):
/// a window of one scan holds a varying number of lumps, a longer one the same number give or
/// take one. The CPU-seconds are summed over the same scans as the counter's difference.
#[derive(Debug, Clone)]
pub struct SpanWindow {
    min_s: f64,
    /// The window's first reading (time, value), its last reading's time, and the CPU-seconds
    /// used since the first.
    start: Option<(f64, f64)>,
    last_t: f64,
    cpu_s: f64,
}

impl SpanWindow {
    /// Windows of at least `min_s` seconds.
    pub fn new(min_s: f64) -> SpanWindow {
        SpanWindow {
            min_s,
            start: None,
            last_t: 0.0,
            cpu_s: 0.0,
        }
    }

    /// Feeds the reading taken at `t_s` (monotonic seconds) with the cores the workload used
    /// since the last reading; returns the work per CPU-second of a window that has just
    /// reached `min_s` (to within half a scan), else `None`. A counter that went backwards starts a new window.
    pub fn feed(&mut self, t_s: f64, value: f64, cores: f64) -> Option<f64> {
        let Some((t0, v0)) = self.start else {
            self.restart(t_s, value);
            return None;
        };
        if value < v0 || t_s <= self.last_t {
            self.restart(t_s, value);
            return None;
        }
        let gap = t_s - self.last_t;
        self.cpu_s += cores.max(0.0) * gap;
        self.last_t = t_s;
        // To within half a scan: scans drift by a little, and waiting a whole scan more for a
        // few milliseconds would make most windows one scan longer than asked.
        if t_s - t0 + gap / 2.0 < self.min_s {
            return None;
        }
        // As per_cpu_second: a workload that hardly ran says nothing per CPU-second.
        let out = (self.cpu_s > 0.01 * (t_s - t0)).then(|| (value - v0) / self.cpu_s);
        self.restart(t_s, value);
        out
    }

    /// The least length of its windows, seconds.
    pub fn min_s(&self) -> f64 {
        self.min_s
    }

    fn restart(&mut self, t_s: f64, value: f64) {
        self.start = Some((t_s, value));
        self.last_t = t_s;
        self.cpu_s = 0.0;
    }

    /// Forgets the window (after a failed reading).
    pub fn reset(&mut self) {
        self.start = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_lumpy_counter_is_read_over_windows_long_enough_to_hold_the_same_number_of_lumps() {
        // 1,000 transactions land at once every second; the server uses half a core; scans
        // every 2 s at slightly uneven times. Windows of 8 s see 8 lumps, give or take one.
        let mut w = SpanWindow::new(8.0);
        let lumps = |t: f64| (t.floor()) * 1000.0;
        let times = [0.3, 2.25, 4.35, 6.3, 8.2, 10.4, 12.3, 14.35, 16.3, 18.25];
        let out: Vec<f64> = times
            .iter()
            .filter_map(|&t| w.feed(t, lumps(t), 0.5))
            .collect();
        assert_eq!(out.len(), 2, "{out:?}");
        // 8 lumps over 7.9 s at half a core: about 2,025 per CPU-second, as the true 2,000 is.
        for r in &out {
            assert!((*r - 2000.0).abs() / 2000.0 < 0.15, "{out:?}");
        }
        // A counter that went backwards (a restart) starts a new window; an idle workload
        // gives nothing.
        let mut w = SpanWindow::new(4.0);
        assert_eq!(w.feed(0.0, 500.0, 1.0), None);
        assert_eq!(w.feed(2.0, 100.0, 1.0), None);
        assert_eq!(w.feed(4.0, 300.0, 1.0), None);
        assert_eq!(w.feed(6.0, 500.0, 1.0), Some(100.0));
        assert_eq!(w.feed(10.0, 900.0, 0.0), None);
    }

    #[test]
    fn prometheus_text() {
        let text = "# HELP x_total ops\n# TYPE x_total counter\nx_total 42\nreq{code=\"200\",path=\"/\"} 7\nreq{code=\"500\",path=\"/\"} 1\nx_total_other 1\n";
        assert_eq!(
            parse_prometheus(text, "x_total", &BTreeMap::new()),
            Some(42.0)
        );
        let mut l = BTreeMap::new();
        l.insert("code".to_string(), "500".to_string());
        assert_eq!(parse_prometheus(text, "req", &l), Some(1.0));
        assert_eq!(parse_prometheus(text, "nope", &BTreeMap::new()), None);
    }

    #[test]
    fn command_probe_values_garbage_and_timeouts() {
        assert_eq!(run_command("echo 12.5", Duration::from_secs(5)), Ok(12.5));
        assert!(matches!(
            run_command("echo hello", Duration::from_secs(5)),
            Err(ProbeError::Garbage { .. })
        ));
        assert!(matches!(
            run_command("exit 3", Duration::from_secs(5)),
            Err(ProbeError::Failed { .. })
        ));
        assert!(matches!(
            run_command("sleep 5", Duration::from_millis(200)),
            Err(ProbeError::Timeout { .. })
        ));
    }

    #[test]
    fn counters_become_rates() {
        let mut w = Windowed::default();
        assert_eq!(w.feed(ValueKind::Counter, 0.0, 100.0), None);
        assert_eq!(w.feed(ValueKind::Counter, 2.0, 300.0), Some(100.0));
        assert_eq!(
            w.feed(ValueKind::Counter, 3.0, 10.0),
            None,
            "a reset gives no observation"
        );
        assert_eq!(w.feed(ValueKind::Counter, 4.0, 60.0), Some(50.0));
        assert_eq!(w.feed(ValueKind::Gauge, 5.0, 7.0), Some(7.0));
    }

    #[test]
    fn http_probe_against_a_local_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::Write;
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let body = "app_ops_total 1234\n";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        let v = fetch_metric(
            &format!("http://{addr}/metrics"),
            "app_ops_total",
            &BTreeMap::new(),
            Duration::from_secs(5),
        );
        server.join().unwrap();
        assert_eq!(v, Ok(1234.0));
        // Nobody listens there any more: a clear failure, not a hang.
        let e = fetch_metric(
            &format!("http://{addr}/metrics"),
            "app_ops_total",
            &BTreeMap::new(),
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
