//! Pass/fail thresholds such as `p99<50ms`, `errors<0.1%`, `throughput>=900`.

use std::fmt;

use perfpilot_units as units;

use crate::error::{DriveError, invalid};
use crate::measurement::Measurement;
use crate::spec::parse_duration;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Metric {
    /// A latency statistic, by its name (`p50`, `p99.9`, `mean`, `max`).
    Latency(&'static str),
    ErrorRatio,
    ErrorCount,
    Throughput,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

/// One threshold, parsed from `METRIC OP VALUE`.
///
/// Metrics: `mean`, `p50`, `p75`, `p90`, `p95`, `p99`, `p99.9`, `max` (values are durations:
/// `50ms`, `1s`), `errors` (a percentage `0.1%` of all requests, or a count `5`),
/// `throughput` / `rps` (requests per second). Operators: `<`, `<=`, `>`, `>=`.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    text: String,
    metric: Metric,
    op: Op,
    /// In ms for latencies, 0..1 for error ratios, plain otherwise.
    value: f64,
}

/// The result of checking one threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct ThresholdOutcome {
    /// The threshold as written.
    pub threshold: String,
    /// The measured value, in the threshold's unit; `None` when the measurement lacks it.
    pub actual: Option<f64>,
    /// Unit of `actual` (`ms`, `%`, `requests`, `/s`).
    pub unit: &'static str,
    /// Whether it held (a missing value fails).
    pub passed: bool,
}

impl fmt::Display for ThresholdOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed { "pass" } else { "FAIL" };
        match self.actual {
            Some(v) => {
                // The same style as the summary's: `810 µs`, `0.04 %`, `1,234 req/s`.
                let measured = match self.unit {
                    "ms" => units::duration_ms(v),
                    "%" => units::percent(v),
                    "/s" => units::rate(v, "req"),
                    " requests" => units::counted(v as u64, "request", "requests"),
                    _ => format!("{}{}", units::number(v), self.unit),
                };
                write!(f, "{verdict}: {} (measured {measured})", self.threshold)
            }
            None => write!(f, "{verdict}: {} (not measured)", self.threshold),
        }
    }
}

impl Threshold {
    /// Parses `p99<50ms`, `errors<0.1%`, `throughput>=900`.
    pub fn parse(s: &str) -> Result<Self, DriveError> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let pos = text.find(['<', '>']).ok_or_else(|| {
            invalid(
                "threshold",
                s,
                "expected METRIC<VALUE, e.g. p99<50ms or errors<0.1%",
            )
        })?;
        let (name, rest) = text.split_at(pos);
        let (op, value) = if let Some(v) = rest.strip_prefix("<=") {
            (Op::Le, v)
        } else if let Some(v) = rest.strip_prefix(">=") {
            (Op::Ge, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Op::Lt, v)
        } else if let Some(v) = rest.strip_prefix('>') {
            (Op::Gt, v)
        } else {
            return Err(invalid("threshold", s, "unknown operator"));
        };
        let latency = |n: &'static str| -> Result<(Metric, f64), DriveError> {
            let d = parse_duration(value)
                .map_err(|_| invalid("threshold", s, "a latency needs a duration such as 50ms"))?;
            Ok((Metric::Latency(n), d.as_secs_f64() * 1000.0))
        };
        let (metric, value) = match name.to_ascii_lowercase().as_str() {
            "mean" => latency("mean")?,
            "p50" => latency("p50")?,
            "p75" => latency("p75")?,
            "p90" => latency("p90")?,
            "p95" => latency("p95")?,
            "p99" => latency("p99")?,
            "p99.9" | "p999" => latency("p99.9")?,
            "max" => latency("max")?,
            "errors" => {
                if let Some(p) = value.strip_suffix('%') {
                    let v: f64 = p
                        .parse()
                        .map_err(|_| invalid("threshold", s, "a percentage such as 0.1%"))?;
                    (Metric::ErrorRatio, v / 100.0)
                } else {
                    let v: f64 = value
                        .parse()
                        .map_err(|_| invalid("threshold", s, "an error count or a percentage"))?;
                    (Metric::ErrorCount, v)
                }
            }
            "throughput" | "rps" => {
                let v: f64 = value
                    .trim_end_matches("/s")
                    .parse()
                    .map_err(|_| invalid("threshold", s, "a rate such as 900 or 900/s"))?;
                (Metric::Throughput, v)
            }
            _ => {
                return Err(invalid(
                    "threshold",
                    s,
                    "unknown metric; use mean, p50, p75, p90, p95, p99, p99.9, max, errors, throughput",
                ));
            }
        };
        Ok(Threshold {
            text: s.trim().to_string(),
            metric,
            op,
            value,
        })
    }

    /// The k6 metric this threshold is about and its k6 expression (`http_req_duration`,
    /// `p(99)<50`), for the k6-style summary; an error count, which k6 has no expression for,
    /// keeps its text.
    pub fn k6(&self) -> (&'static str, String) {
        let op = match self.op {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        };
        let v = self.value;
        match self.metric {
            Metric::Latency(name) => (
                "http_req_duration",
                format!("{}{op}{v}", crate::k6::k6_stat(name)),
            ),
            Metric::ErrorRatio => ("http_req_failed", format!("rate{op}{v}")),
            Metric::ErrorCount => ("http_req_failed", self.text.clone()),
            Metric::Throughput => ("http_reqs", format!("rate{op}{v}")),
        }
    }

    /// Checks the threshold against a measurement.
    pub fn check(&self, m: &Measurement) -> ThresholdOutcome {
        let (actual, unit, limit) = match self.metric {
            Metric::Latency(name) => {
                let v = m.latency.as_ref().and_then(|l| l.by_name(name));
                (v, "ms", self.value)
            }
            Metric::ErrorRatio => (Some(m.error_ratio() * 100.0), "%", self.value * 100.0),
            Metric::ErrorCount => (Some(m.errors as f64), " requests", self.value),
            Metric::Throughput => (Some(m.throughput_rps), "/s", self.value),
        };
        let passed = actual.is_some_and(|a| match self.op {
            Op::Lt => a < limit,
            Op::Le => a <= limit,
            Op::Gt => a > limit,
            Op::Ge => a >= limit,
        });
        ThresholdOutcome {
            threshold: self.text.clone(),
            actual,
            unit,
            passed,
        }
    }
}

/// Checks every threshold; the run passes when all outcomes pass.
pub fn check_all(thresholds: &[Threshold], m: &Measurement) -> Vec<ThresholdOutcome> {
    thresholds.iter().map(|t| t.check(m)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::{Latency, LoadShape};

    fn m() -> Measurement {
        let mut m = Measurement::empty(
            "t",
            LoadShape::External {
                description: String::new(),
            },
        );
        m.requests = 1000;
        m.ok = 999;
        m.errors = 1;
        m.throughput_rps = 500.0;
        m.latency = Some(Latency {
            p99_ms: Some(42.0),
            ..Default::default()
        });
        m
    }

    #[test]
    fn thresholds_pass_and_fail() {
        let m = m();
        assert!(Threshold::parse("p99<50ms").unwrap().check(&m).passed);
        assert!(!Threshold::parse("p99 < 40ms").unwrap().check(&m).passed);
        assert!(Threshold::parse("errors<0.2%").unwrap().check(&m).passed);
        assert!(!Threshold::parse("errors<0.1%").unwrap().check(&m).passed);
        assert!(Threshold::parse("errors<=1").unwrap().check(&m).passed);
        assert!(
            Threshold::parse("throughput>=500")
                .unwrap()
                .check(&m)
                .passed
        );
        assert!(!Threshold::parse("rps>500/s").unwrap().check(&m).passed);
        // A statistic the measurement lacks fails rather than passes silently.
        let o = Threshold::parse("p99.9<1s").unwrap().check(&m);
        assert!(!o.passed && o.actual.is_none());
    }

    #[test]
    fn outcomes_show_the_measured_value_as_the_summary_does() {
        let mut m = m();
        m.latency = Some(Latency {
            p99_ms: Some(0.81),
            ..Default::default()
        });
        m.throughput_rps = 1234.4;
        let shown = |t: &str| Threshold::parse(t).unwrap().check(&m).to_string();
        assert_eq!(shown("p99<1ms"), "pass: p99<1ms (measured 810 µs)");
        assert_eq!(shown("errors<0.01%"), "FAIL: errors<0.01% (measured 0.1 %)");
        assert_eq!(shown("errors<=1"), "pass: errors<=1 (measured 1 request)");
        assert_eq!(
            shown("throughput>=2000"),
            "FAIL: throughput>=2000 (measured 1,234 req/s)"
        );
        assert_eq!(shown("p99.9<1s"), "FAIL: p99.9<1s (not measured)");
    }

    #[test]
    fn bad_thresholds_are_rejected() {
        for bad in ["p99", "p42<1ms", "p99<fast", "errors<lots", "throughput>x"] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
    }
}
