//! Prometheus remote write (protocol 1.0: a snappy-compressed protobuf `WriteRequest` POSTed
//! to the receiver) of the live series, one sample per series and second:
//!
//! - `perfpilot_drive_requests_total`, `perfpilot_drive_ok_total`,
//!   `perfpilot_drive_errors_total`: counters since the window began;
//! - `perfpilot_drive_throughput`: ok responses in that second;
//! - `perfpilot_drive_latency_seconds{quantile="0.5"|"0.9"|"0.99"|"1"}`: that second's latency.
//!
//! Every series carries `job="perfpilot-drive"` and the caller's labels (a run id, a worker).
//! A receiver that is down or refuses costs a warning, not the run: samples wait (the last
//! [`MAX_PENDING_SECONDS`] of them) and go with the next push after a back-off, and what was
//! never delivered is counted in the [`PushReport`].

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::interval::Interval;
use perfpilot_fetch::Client;

/// The protobuf messages of `prometheus/prompb/remote.proto` and `types.proto` that a writer
/// needs, field numbers as there.
mod prompb {
    /// A batch of series.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        /// The series.
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    /// One series: its labels (with `__name__`) and samples.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Sorted by name.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// In time order.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }

    /// A label pair.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// A sample.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Value.
        #[prost(double, tag = "1")]
        pub value: f64,
        /// Milliseconds since the Unix epoch.
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// Seconds kept for a receiver that is down; older ones are dropped (and counted).
pub const MAX_PENDING_SECONDS: usize = 600;

/// What a push session delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Seconds delivered.
    pub delivered: u64,
    /// Seconds never delivered (the receiver was down to the end, or they were dropped).
    pub undelivered: u64,
    /// Pushes that failed.
    pub failures: u64,
    /// The first failure, in words.
    pub first_error: Option<String>,
}

/// The samples of one second, by series.
#[derive(Clone, Debug)]
struct Second {
    at_ms: i64,
    values: Vec<(&'static str, Option<&'static str>, f64)>,
}

/// Builds the request for `seconds` with the extra `labels`.
fn write_request(seconds: &[Second], labels: &[(String, String)]) -> prompb::WriteRequest {
    let mut series: Vec<prompb::TimeSeries> = Vec::new();
    let mut index: std::collections::BTreeMap<(&str, Option<&str>), usize> = Default::default();
    for s in seconds {
        for (name, quantile, value) in &s.values {
            let i = *index.entry((name, *quantile)).or_insert_with(|| {
                let mut l: Vec<prompb::Label> = vec![
                    prompb::Label {
                        name: "__name__".into(),
                        value: (*name).into(),
                    },
                    prompb::Label {
                        name: "job".into(),
                        value: "perfpilot-drive".into(),
                    },
                ];
                if let Some(q) = quantile {
                    l.push(prompb::Label {
                        name: "quantile".into(),
                        value: (*q).into(),
                    });
                }
                for (k, v) in labels {
                    l.push(prompb::Label {
                        name: k.clone(),
                        value: v.clone(),
                    });
                }
                l.sort_by(|a, b| a.name.cmp(&b.name));
                series.push(prompb::TimeSeries {
                    labels: l,
                    samples: Vec::new(),
                });
                series.len() - 1
            });
            series[i].samples.push(prompb::Sample {
                value: *value,
                timestamp: s.at_ms,
            });
        }
    }
    prompb::WriteRequest { timeseries: series }
}

/// Encodes a request as the wire body: protobuf, then snappy's block format.
fn encode(req: &prompb::WriteRequest) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(req);
    // Compressing a buffer in memory only fails for inputs over 4 GiB.
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

/// Pushes the seconds received on `rx` to the remote-write `url` until the senders are gone.
/// `labels` go on every series; `warn` is called with a line for people when the receiver
/// fails (the first time, and again once it recovered and failed anew).
pub fn push_live(
    url: &str,
    labels: &[(String, String)],
    rx: &Receiver<Interval>,
    warn: &dyn Fn(&str),
) -> PushReport {
    let client = Client::new();
    let mut report = PushReport::default();
    let mut pending: Vec<Second> = Vec::new();
    let mut totals = (0u64, 0u64, 0u64);
    let mut retry_at = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut failing = false;
    let timeout = Duration::from_secs(2);
    let mut push = |pending: &mut Vec<Second>, report: &mut PushReport, last: bool| {
        if pending.is_empty() || (!last && Instant::now() < retry_at) {
            return;
        }
        let body = encode(&write_request(pending, labels));
        let headers = [
            ("Content-Encoding", "snappy"),
            ("Content-Type", "application/x-protobuf"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ];
        match client.post(url, &headers, &body, timeout) {
            Ok(_) => {
                report.delivered += pending.len() as u64;
                pending.clear();
                failing = false;
                backoff = Duration::from_secs(1);
            }
            Err(e) => {
                report.failures += 1;
                let line = e.to_string();
                if !failing {
                    warn(&format!(
                        "remote write: {line}; the run goes on, its local results are kept, and \
                         the samples are sent again when the receiver answers"
                    ));
                }
                report.first_error.get_or_insert(line);
                failing = true;
                retry_at = Instant::now() + backoff;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    };
    for i in rx.iter() {
        totals.0 += i.requests;
        totals.1 += i.ok;
        totals.2 += i.errors;
        let end = i.start() + Duration::from_secs(1);
        let at_ms = end
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut values = vec![
            ("perfpilot_drive_requests_total", None, totals.0 as f64),
            ("perfpilot_drive_ok_total", None, totals.1 as f64),
            ("perfpilot_drive_errors_total", None, totals.2 as f64),
            ("perfpilot_drive_throughput", None, i.ok as f64),
        ];
        if !i.hist.is_empty() {
            for (q, label) in [(0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99"), (1.0, "1")] {
                values.push((
                    "perfpilot_drive_latency_seconds",
                    Some(label),
                    i.hist.quantile_us(q) as f64 / 1e6,
                ));
            }
        }
        pending.push(Second { at_ms, values });
        if pending.len() > MAX_PENDING_SECONDS {
            let drop = pending.len() - MAX_PENDING_SECONDS;
            pending.drain(..drop);
            report.undelivered += drop as u64;
        }
        push(&mut pending, &mut report, false);
    }
    push(&mut pending, &mut report, true);
    report.undelivered += pending.len() as u64;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_groups_samples_by_series_with_sorted_labels_and_snappy_decodes() {
        let seconds = vec![
            Second {
                at_ms: 1000,
                values: vec![
                    ("perfpilot_drive_ok_total", None, 5.0),
                    ("perfpilot_drive_latency_seconds", Some("0.99"), 0.002),
                ],
            },
            Second {
                at_ms: 2000,
                values: vec![("perfpilot_drive_ok_total", None, 9.0)],
            },
        ];
        let req = write_request(&seconds, &[("run".into(), "r1".into())]);
        assert_eq!(req.timeseries.len(), 2);
        let ok = &req.timeseries[0];
        let names: Vec<&str> = ok.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "job", "run"]);
        assert_eq!(ok.samples.len(), 2);
        assert_eq!(ok.samples[1].value, 9.0);
        let body = encode(&req);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let back: prompb::WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn a_receiver_that_is_down_warns_once_and_counts_what_was_not_delivered() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..3 {
            let mut i = Interval::new(t);
            i.requests = 10;
            i.ok = 10;
            i.hist.record_us(500);
            tx.send(i).unwrap();
        }
        drop(tx);
        let warnings = std::cell::RefCell::new(Vec::new());
        let report = push_live(
            &format!("http://127.0.0.1:{port}/api/v1/write"),
            &[],
            &rx,
            &|w| warnings.borrow_mut().push(w.to_string()),
        );
        assert_eq!(report.delivered, 0);
        assert_eq!(report.undelivered, 3);
        assert!(report.failures >= 1);
        let w = warnings.borrow();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("the run goes on"), "{w:?}");
    }
}
