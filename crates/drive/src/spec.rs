//! What to drive: targets, request shape, load shape, timing.

use std::time::Duration;

use crate::error::{DriveError, invalid};
use crate::profile::RequestProfile;
use crate::template::BodyTemplate;
pub use crate::tls::{HttpVersion, TlsOptions};

/// Think time of a closed-loop virtual user between a response and its next request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThinkTime {
    /// No think time.
    Zero,
    /// Always the same.
    Constant(Duration),
    /// Exponentially distributed with this mean (a Poisson user, as queueing models assume).
    Exponential(Duration),
}

impl ThinkTime {
    /// Parses `0`, `100ms`, `exp:1s`.
    pub fn parse(s: &str) -> Result<Self, DriveError> {
        let s = s.trim();
        if let Some(mean) = s.strip_prefix("exp:") {
            let d = parse_duration(mean)?;
            return Ok(if d.is_zero() {
                ThinkTime::Zero
            } else {
                ThinkTime::Exponential(d)
            });
        }
        let d = parse_duration(s).map_err(|_| {
            invalid(
                "think time",
                s,
                "expected 0, a duration such as 100ms, or exp:MEAN such as exp:1s",
            )
        })?;
        Ok(if d.is_zero() {
            ThinkTime::Zero
        } else {
            ThinkTime::Constant(d)
        })
    }

    /// Mean think time.
    pub fn mean(&self) -> Duration {
        match self {
            ThinkTime::Zero => Duration::ZERO,
            ThinkTime::Constant(d) | ThinkTime::Exponential(d) => *d,
        }
    }

    /// Draws one think time; `u` is uniform in (0, 1].
    pub fn sample(&self, u: f64) -> Duration {
        match self {
            ThinkTime::Zero => Duration::ZERO,
            ThinkTime::Constant(d) => *d,
            ThinkTime::Exponential(d) => d.mul_f64(-u.max(f64::MIN_POSITIVE).ln()),
        }
    }

    /// The text form, as parsed.
    pub fn describe(&self) -> String {
        match self {
            ThinkTime::Zero => "0".to_string(),
            ThinkTime::Constant(d) => humantime::format_duration(*d).to_string(),
            ThinkTime::Exponential(d) => format!("exp:{}", humantime::format_duration(*d)),
        }
    }
}

/// Parses `0`, `250ms`, `1.5s`, `2m`, `10us` (also humantime forms such as `1m30s`).
pub fn parse_duration(s: &str) -> Result<Duration, DriveError> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    for (suffix, scale) in [
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ] {
        if let Some(num) = s.strip_suffix(suffix)
            && let Ok(v) = num.trim().parse::<f64>()
        {
            if !v.is_finite() || v < 0.0 {
                return Err(invalid("duration", s, "must be a non-negative number"));
            }
            return Duration::try_from_secs_f64(v * scale).map_err(|_| {
                invalid(
                    "duration",
                    s,
                    "is too long (at most about 584 billion years)",
                )
            });
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| invalid("duration", s, format!("{e} (e.g. 250ms, 1.5s, 2m)")))
}

/// Parses a rate such as `200`, `200/s`, `1200/m`, in requests per second.
pub fn parse_rate(s: &str) -> Result<f64, DriveError> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("/s") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("/m") {
        (n, 1.0 / 60.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(invalid(
            "rate",
            s,
            "expected a positive number such as 200/s",
        )),
    }
}

/// The load shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// `users` virtual users, one keep-alive connection each.
    Closed {
        /// Virtual users.
        users: usize,
        /// What each waits between a response and its next request.
        think: ThinkTime,
    },
    /// `rate` requests per second in total, spread evenly over `connections` connections, each
    /// sending on its own fixed schedule; latency counts from the scheduled send time.
    Open {
        /// Requests per second, in total.
        rate: f64,
        /// Connections the rate is spread over.
        connections: usize,
    },
}

impl Load {
    /// Parses the `--rate` argument into an open load.
    pub fn open(rate: &str, connections: usize) -> Result<Self, DriveError> {
        Ok(Load::Open {
            rate: parse_rate(rate)?,
            connections: connections.max(1),
        })
    }

    /// The users (closed loop) or connections (open loop) the load keeps.
    pub fn slots(&self) -> usize {
        match *self {
            Load::Closed { users, .. } => users,
            Load::Open { connections, .. } => connections,
        }
    }
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct DriveSpec {
    /// Target URLs (`http://host:port/path`); users/connections are spread over them round-robin.
    pub targets: Vec<String>,
    /// HTTP method.
    pub method: String,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Request body, possibly with `{{column}}` placeholders.
    pub body: Option<BodyTemplate>,
    /// A request profile: each request draws one of its kinds by weight, instead of sending
    /// `method` and `body` to `targets` (which are then ignored: the profile names its server).
    pub profile: Option<RequestProfile>,
    /// Closed or open loop.
    pub load: Load,
    /// Per-request timeout (connect + response).
    pub timeout: Duration,
    /// Unmeasured warm-up.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Driver threads, each with its own single-threaded event loop (like wrk's `-t`).
    pub threads: usize,
    /// The HTTP version to speak.
    pub http: HttpVersion,
    /// How `https://` targets are verified.
    pub tls: TlsOptions,
    /// The number of this run's first user or lane among those of coordinated workers (seeds
    /// their think times apart); 0 for a single run.
    pub slot_offset: usize,
    /// Shifts an open loop's schedule so coordinated workers interleave their sends.
    pub schedule_offset: Duration,
    /// Seeds each user's or lane's generator (think times, `{{rand:…}}`, the profile's draw)
    /// with the user's number: the same seed draws the same sequence per user.
    pub seed: u64,
}

impl DriveSpec {
    /// A GET with defaults: 10 s timeout, no warm-up, 10 s measured, one thread per core.
    pub fn new(targets: Vec<String>, load: Load) -> Self {
        DriveSpec {
            targets,
            method: "GET".to_string(),
            headers: Vec::new(),
            body: None,
            profile: None,
            load,
            timeout: Duration::from_secs(10),
            warmup: Duration::ZERO,
            duration: Duration::from_secs(10),
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            http: HttpVersion::Auto,
            tls: TlsOptions::default(),
            slot_offset: 0,
            schedule_offset: Duration::ZERO,
            seed: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_times_parse() {
        assert_eq!(ThinkTime::parse("0").unwrap(), ThinkTime::Zero);
        assert_eq!(
            ThinkTime::parse("100ms").unwrap(),
            ThinkTime::Constant(Duration::from_millis(100))
        );
        assert_eq!(
            ThinkTime::parse("exp:1s").unwrap(),
            ThinkTime::Exponential(Duration::from_secs(1))
        );
        assert!(ThinkTime::parse("soon").is_err());
        assert!(ThinkTime::parse("exp:-1s").is_err());
    }

    #[test]
    fn exponential_sample_has_the_mean() {
        let t = ThinkTime::Exponential(Duration::from_millis(100));
        let n = 10_000;
        let total: f64 = (1..=n)
            .map(|i| t.sample(i as f64 / n as f64).as_secs_f64())
            .sum();
        let mean = total / n as f64;
        assert!((mean - 0.1).abs() < 0.005, "mean {mean}");
    }

    #[test]
    fn durations_and_rates_parse() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_rate("200/s").unwrap(), 200.0);
        assert_eq!(parse_rate("120/m").unwrap(), 2.0);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("x/s").is_err());
    }
}
