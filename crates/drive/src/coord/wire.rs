//! The coordinator–worker protocol's messages, sent one JSON message per line
//! (`perfpilot_fetch::lines`), and the run's spec in a form that travels (template and data as
//! text, not compiled).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{DriveError, invalid};
use crate::hist::LatencyHistogram;
use crate::interval::Interval;
use crate::measurement::{HistogramData, Measurement};
use crate::spec::{DriveSpec, HttpVersion, Load, ThinkTime, TlsOptions};
use crate::template::{BodyTemplate, DataSource};

/// The protocol's own version; a change of message shapes bumps it, and perfpilot's version
/// is compared too, so a worker and a coordinator of different builds never mix results.
pub const PROTOCOL: u32 = 1;

/// The load of a run, as given (before it is split between workers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireLoad {
    /// Virtual users with a think time (`0`, `100ms`, `exp:1s`).
    Closed {
        /// Users.
        users: usize,
        /// Think time as given.
        think: String,
    },
    /// A constant rate over connections.
    Open {
        /// Requests per second.
        rate: f64,
        /// Connections.
        connections: usize,
    },
}

/// Everything a worker needs to run its share: [`DriveSpec`] in a form that travels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireSpec {
    /// Target URLs.
    pub targets: Vec<String>,
    /// HTTP method.
    pub method: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body template text.
    pub body: Option<String>,
    /// CSV data for the template: (its name, its text).
    pub data: Option<(String, String)>,
    /// The load (the whole run's, or a worker's share).
    pub load: WireLoad,
    /// Per-request timeout, ms.
    pub timeout_ms: u64,
    /// Warm-up, ms.
    pub warmup_ms: u64,
    /// Measured window, ms.
    pub duration_ms: u64,
    /// Driver threads per worker; `None`: one per CPU of the worker.
    pub threads: Option<usize>,
    /// `auto`, `1.1` or `2`.
    pub http: String,
    /// Accept any certificate.
    pub insecure: bool,
    /// PEM text of further trusted certificates.
    pub ca_pem: Option<String>,
    /// This share's first user or lane among all workers'.
    pub slot_offset: usize,
    /// This share's open-loop schedule shift, µs.
    pub schedule_offset_us: u64,
}

impl WireSpec {
    /// The spec to run; `scratch` is where a CA file is written for TLS.
    pub fn to_drive_spec(&self, scratch: &Path) -> Result<DriveSpec, DriveError> {
        let load = match &self.load {
            WireLoad::Closed { users, think } => Load::Closed {
                users: *users,
                think: ThinkTime::parse(think)?,
            },
            WireLoad::Open { rate, connections } => {
                if !(rate.is_finite() && *rate > 0.0) {
                    return Err(invalid("rate", &rate.to_string(), "must be positive"));
                }
                Load::Open {
                    rate: *rate,
                    connections: (*connections).max(1),
                }
            }
        };
        let mut spec = DriveSpec::new(self.targets.clone(), load);
        spec.method = self.method.clone();
        spec.headers = self.headers.clone();
        let data = self
            .data
            .as_ref()
            .map(|(name, text)| DataSource::from_csv_text(text, Path::new(name)))
            .transpose()?;
        spec.body = self
            .body
            .as_ref()
            .map(|b| BodyTemplate::compile(b, data.as_ref()))
            .transpose()?;
        spec.timeout = Duration::from_millis(self.timeout_ms);
        spec.warmup = Duration::from_millis(self.warmup_ms);
        spec.duration = Duration::from_millis(self.duration_ms);
        if let Some(t) = self.threads {
            spec.threads = t.max(1);
        }
        spec.http = HttpVersion::parse(&self.http)?;
        let ca_file = match &self.ca_pem {
            Some(pem) => {
                let path = scratch.join(format!("perfpilot-worker-ca-{}.pem", std::process::id()));
                std::fs::write(&path, pem).map_err(|source| DriveError::Read {
                    path: path.clone(),
                    source,
                })?;
                Some(path)
            }
            None => None,
        };
        spec.tls = TlsOptions {
            insecure: self.insecure,
            ca_file,
        };
        spec.slot_offset = self.slot_offset;
        spec.schedule_offset = Duration::from_micros(self.schedule_offset_us);
        Ok(spec)
    }

    /// The users or connections of this spec's load (what a worker carries).
    pub fn slots(&self) -> usize {
        match &self.load {
            WireLoad::Closed { users, .. } => *users,
            WireLoad::Open { connections, .. } => *connections,
        }
    }
}

/// One second of a worker's window on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireInterval {
    /// See [`Interval`].
    pub window_start_ms: u64,
    /// See [`Interval`].
    pub t_s: u64,
    /// See [`Interval`].
    pub requests: u64,
    /// See [`Interval`].
    pub ok: u64,
    /// See [`Interval`].
    pub errors: u64,
    /// The second's histogram.
    pub hist: HistogramData,
}

impl WireInterval {
    /// Encodes an interval.
    pub fn from_interval(i: &Interval) -> Self {
        WireInterval {
            window_start_ms: i.window_start_ms,
            t_s: i.t_s,
            requests: i.requests,
            ok: i.ok,
            errors: i.errors,
            hist: i.hist.to_data(),
        }
    }

    /// Decodes it.
    pub fn to_interval(&self) -> Result<Interval, DriveError> {
        Ok(Interval {
            window_start_ms: self.window_start_ms,
            t_s: self.t_s,
            requests: self.requests,
            ok: self.ok,
            errors: self.errors,
            hist: if self.hist.data.is_empty() {
                LatencyHistogram::new()
            } else {
                LatencyHistogram::from_data(&self.hist)?
            },
        })
    }
}

/// A message between coordinator and worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    /// Both ways, first: who is talking.
    Hello {
        /// perfpilot's version.
        version: String,
        /// [`PROTOCOL`].
        protocol: u32,
    },
    /// Worker → coordinator: the session is refused, and why.
    Refused {
        /// Why, for people.
        reason: String,
    },
    /// Coordinator → worker: what is your clock?
    Ping {
        /// Coordinator's clock when sent, µs since the epoch.
        t0_us: i64,
    },
    /// Worker → coordinator: the worker's clock.
    Pong {
        /// The ping's.
        t0_us: i64,
        /// The worker's clock when it answered, µs since the epoch.
        worker_us: i64,
    },
    /// Coordinator → worker: run this share.
    Start {
        /// The share.
        spec: WireSpec,
        /// When to start, in the worker's own clock, ms since the epoch.
        start_at_ms: u64,
    },
    /// Coordinator → worker: stop now (Ctrl-C on the coordinator).
    Stop,
    /// Worker → coordinator: the worker is running and alive (sent when a second has no data).
    Alive,
    /// Worker → coordinator: a completed second.
    Interval(WireInterval),
    /// Worker → coordinator: the share's measurement.
    Done {
        /// Its measurement.
        measurement: Box<Measurement>,
    },
    /// Worker → coordinator: the share could not run.
    Failed {
        /// Why.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpilot_fetch::lines::{recv, send};

    #[test]
    fn messages_and_intervals_survive_the_wire() {
        let mut i = Interval::new(3);
        i.window_start_ms = 1_700_000_000_000;
        i.requests = 10;
        i.ok = 9;
        i.errors = 1;
        i.hist.record_us(250);
        let msg = Msg::Interval(WireInterval::from_interval(&i));
        let mut buf = Vec::new();
        send(&mut buf, &msg).unwrap();
        send(&mut buf, &Msg::Stop).unwrap();
        let mut r = std::io::BufReader::new(buf.as_slice());
        let Some(Msg::Interval(w)) = recv(&mut r).unwrap() else {
            panic!("not an interval")
        };
        assert_eq!(w.to_interval().unwrap(), i);
        assert_eq!(recv(&mut r).unwrap(), Some(Msg::Stop));
        assert_eq!(recv::<Msg>(&mut r).unwrap(), None);
    }

    #[test]
    fn a_wire_spec_becomes_the_drive_spec_it_describes() {
        let w = WireSpec {
            targets: vec!["http://127.0.0.1:1/".into()],
            method: "POST".into(),
            headers: vec![],
            body: Some("{\"x\": {{v}}}".into()),
            data: Some(("rows.csv".into(), "v\n1\n2\n".into())),
            load: WireLoad::Closed {
                users: 3,
                think: "exp:10ms".into(),
            },
            timeout_ms: 500,
            warmup_ms: 0,
            duration_ms: 1000,
            threads: Some(1),
            http: "1.1".into(),
            insecure: false,
            ca_pem: None,
            slot_offset: 6,
            schedule_offset_us: 0,
        };
        let s = w.to_drive_spec(&std::env::temp_dir()).unwrap();
        assert_eq!(s.slot_offset, 6);
        assert_eq!(s.http, HttpVersion::Http1);
        assert!(s.body.is_some());
        let mut bad = w.clone();
        bad.body = Some("{{missing}}".into());
        assert!(bad.to_drive_spec(&std::env::temp_dir()).is_err());
    }
}
