//! How finished runs came out: whether Ctrl-C cut a run's measured window short, whether any
//! request succeeded, the verdict of the thresholds over one or more measurements, and the
//! JSON that holds them.

use std::time::Duration;

use perfpilot_units as units;

use crate::measurement::Measurement;
use crate::spec::DriveSpec;
use crate::threshold::{Threshold, ThresholdOutcome};

/// Slack for the timing of the measured window itself: a window shorter than asked by more
/// than this was stopped early.
const CUT_SHORT_SLACK: Duration = Duration::from_millis(50);

/// Whether the run of `spec` that produced `m` was stopped before its measured window ended.
pub fn cut_short(m: &Measurement, spec: &DriveSpec) -> bool {
    m.duration_s + CUT_SHORT_SLACK.as_secs_f64() < spec.duration.as_secs_f64()
}

/// The thresholds checked against each of several measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Every threshold against every measurement, measurement by measurement.
    pub outcomes: Vec<ThresholdOutcome>,
}

impl Verdict {
    /// Checks every threshold against every measurement.
    pub fn check(thresholds: &[Threshold], ms: &[Measurement]) -> Verdict {
        Verdict {
            outcomes: ms
                .iter()
                .flat_map(|m| thresholds.iter().map(|t| t.check(m)))
                .collect(),
        }
    }

    /// Whether every outcome passed (also when there were no thresholds).
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.passed)
    }
}

/// Why no request of `m` succeeded, in one line, when none did: the error kinds with their
/// counts and the first error's text (`every one of the 46 requests failed (connect 46); the
/// first: connection refused by 127.0.0.1:9: is the server up?`). `None` when any succeeded.
pub fn none_succeeded(m: &Measurement) -> Option<String> {
    if m.ok > 0 {
        return None;
    }
    if m.requests == 0 {
        return Some(format!(
            "no request completed in the {} measured window: is the server answering?",
            units::duration_secs(m.duration_s)
        ));
    }
    let kinds: Vec<String> = m
        .errors_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {}", units::count(*n)))
        .collect();
    let mut line = if m.requests == 1 {
        "the one request failed".to_string()
    } else {
        format!(
            "every one of the {} requests failed",
            units::count(m.requests)
        )
    };
    if !kinds.is_empty() {
        line += &format!(" ({})", kinds.join(", "));
    }
    if let Some(first) = &m.first_error {
        line += &format!("; the first: {first}");
    }
    Some(line)
}

/// One measurement as its pretty JSON object, several as a pretty JSON array of them.
pub fn measurements_json(ms: &[Measurement]) -> String {
    match ms {
        [one] => one.to_json(),
        // Measurements hold only strings, numbers and maps with string keys: they serialize.
        _ => serde_json::to_string_pretty(ms).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::LoadShape;
    use crate::spec::{DriveSpec, Load, ThinkTime};

    fn measured(duration_s: f64, throughput_rps: f64) -> Measurement {
        let mut m = Measurement::empty(
            "t",
            LoadShape::External {
                description: String::new(),
            },
        );
        m.duration_s = duration_s;
        m.throughput_rps = throughput_rps;
        m
    }

    #[test]
    fn a_window_shorter_than_asked_beyond_the_slack_was_cut_short() {
        let load = Load::Closed {
            users: 1,
            think: ThinkTime::Zero,
        };
        let mut spec = DriveSpec::new(vec!["http://127.0.0.1:1/".into()], load);
        spec.duration = Duration::from_secs(10);
        assert!(!cut_short(&measured(9.97, 1.0), &spec));
        assert!(cut_short(&measured(9.9, 1.0), &spec));
    }

    #[test]
    fn the_verdict_fails_when_any_measurement_fails_any_threshold() {
        let t = [Threshold::parse("throughput>=100").unwrap()];
        let ms = [measured(1.0, 150.0), measured(1.0, 50.0)];
        let v = Verdict::check(&t, &ms);
        assert_eq!(v.outcomes.len(), 2);
        assert!(!v.passed());
        assert!(Verdict::check(&t, &ms[..1]).passed());
        assert!(Verdict::check(&[], &ms).passed());
    }

    #[test]
    fn a_run_without_one_success_says_which_errors_and_the_first() {
        let mut m = measured(2.0, 0.0);
        m.requests = 46;
        m.errors = 46;
        m.errors_by_kind.insert("connect".into(), 46);
        m.first_error = Some("connection refused by 127.0.0.1:9: is the server up?".into());
        assert_eq!(
            none_succeeded(&m).unwrap(),
            "every one of the 46 requests failed (connect 46); the first: connection refused \
             by 127.0.0.1:9: is the server up?"
        );
        m.requests = 0;
        m.errors = 0;
        assert_eq!(
            none_succeeded(&m).unwrap(),
            "no request completed in the 2 s measured window: is the server answering?"
        );
        m.requests = 1000;
        m.ok = 1;
        assert_eq!(none_succeeded(&m), None);
    }

    #[test]
    fn one_measurement_is_an_object_and_several_an_array() {
        let one = measurements_json(&[measured(1.0, 1.0)]);
        assert!(one.trim_start().starts_with('{'));
        let two = measurements_json(&[measured(1.0, 1.0), measured(1.0, 2.0)]);
        assert!(two.trim_start().starts_with('['));
    }
}
