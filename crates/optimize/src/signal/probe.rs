//! Application probes configured for a workload (`[[workload]] signal = …`): a command whose
//! output is a number, or a metric on an HTTP page in Prometheus's text format.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfpilot_drive::fetch::{self, FetchFailure};

use crate::config::ProbeSpec;

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
    super::preset::prometheus::parse(text)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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
