//! The human summary of a measurement.

use std::fmt::Write;

use perfpilot_units as units;

use crate::measurement::{LoadShape, Measurement};

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), units::duration_ms)
}

/// An `extra` figure by its name's unit suffix: `read_bytes` 43232788.48 is `read: 41.2 MiB`,
/// `responses_per_s` is a rate, `initial_connection_ms` a duration; others are plain numbers.
fn extra(name: &str, v: f64) -> (String, String) {
    let (label, value) = if let Some(l) = name.strip_suffix("_bytes_per_s") {
        (l, units::bytes_per_s(v))
    } else if let Some(l) = name.strip_suffix("_bytes") {
        (l, units::bytes_f64(v))
    } else if let Some(l) = name.strip_suffix("_per_s") {
        (l, units::rate(v, ""))
    } else if let Some(l) = name.strip_suffix("_ms") {
        (l, units::duration_ms(v))
    } else {
        (name, units::number(v))
    };
    (format!("{label}:"), value)
}

/// Renders throughput, latency percentiles and errors by kind and status, one fact per line.
pub fn render_summary(m: &Measurement) -> String {
    let mut s = String::new();
    let load = match &m.load {
        LoadShape::Closed { users, think_time } => {
            format!("closed loop, {users} users, think time {think_time}")
        }
        LoadShape::Open {
            rate_per_s,
            connections,
        } => format!(
            "open loop, {} over {connections} connections",
            units::rate(*rate_per_s, "req")
        ),
        LoadShape::External { description } => description.clone(),
        LoadShape::Merged { parts } => format!("{} merged runs", parts.len()),
    };
    let _ = writeln!(s, "{} — {load}", m.name.as_deref().unwrap_or(&m.source));
    if !m.targets.is_empty() {
        let _ = writeln!(s, "  targets:    {}", m.targets.join(", "));
    }
    let _ = writeln!(
        s,
        "  window:     {} measured after {} warm-up ({} → {})",
        units::duration_secs(m.duration_s),
        units::duration_secs(m.warmup_s),
        m.start,
        m.end
    );
    let _ = writeln!(
        s,
        "  requests:   {} ({} ok, {} errors, {})",
        units::count(m.requests),
        units::count(m.ok),
        units::count(m.errors),
        units::percent(m.error_ratio() * 100.0)
    );
    let _ = writeln!(s, "  throughput: {}", units::rate(m.throughput_rps, "req"));
    if let Some(l) = &m.latency {
        let _ = writeln!(
            s,
            "  latency:    mean {}  p50 {}  p90 {}  p95 {}  p99 {}  p99.9 {}  max {}",
            ms(l.mean_ms),
            ms(l.p50_ms),
            ms(l.p90_ms),
            ms(l.p95_ms),
            ms(l.p99_ms),
            ms(l.p99_9_ms),
            ms(l.max_ms)
        );
    }
    if !m.errors_by_kind.is_empty() {
        let kinds: Vec<String> = m
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {}", units::count(*v)))
            .collect();
        let _ = writeln!(s, "  errors:     {}", kinds.join(", "));
    }
    if let Some(first) = &m.first_error {
        let _ = writeln!(s, "  first error: {first}");
    }
    if !m.status.is_empty() {
        let st: Vec<String> = m
            .status
            .iter()
            .map(|(k, v)| format!("{k} {}", units::count(*v)))
            .collect();
        let _ = writeln!(s, "  status:     {}", st.join(", "));
    }
    for (k, v) in &m.extra {
        let (label, value) = extra(k, *v);
        let _ = writeln!(s, "  {label:<11} {value}");
    }
    kinds(&mut s, m);
    s
}

/// One line per kind of a request profile: its share of the requests against its weight's,
/// its errors and latency percentiles.
fn kinds(s: &mut String, m: &Measurement) {
    if m.request_kinds.is_empty() {
        return;
    }
    let _ = writeln!(s, "  by request kind (share of requests, weight's share):");
    let width = m
        .request_kinds
        .iter()
        .map(|k| k.name.len())
        .max()
        .unwrap_or(0);
    let total: u64 = m.request_kinds.iter().map(|k| k.requests).sum();
    for k in &m.request_kinds {
        let share = if total == 0 {
            0.0
        } else {
            k.requests as f64 / total as f64
        };
        let l = k.latency.clone().unwrap_or_default();
        let _ = writeln!(
            s,
            "    {:<width$}  {:<6} {:>7} {:>7}  {} requests, {} errors  p50 {}  p90 {}  p99 {}  max {}",
            k.name,
            k.method,
            units::percent(share * 100.0),
            units::percent(k.weight_share * 100.0),
            units::count(k.requests),
            units::count(k.errors),
            ms(l.p50_ms),
            ms(l.p90_ms),
            ms(l.p99_ms),
            ms(l.max_ms),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::Latency;

    #[test]
    fn the_summary_shows_every_figure_in_one_style() {
        let mut m = Measurement::empty(
            "wrk",
            LoadShape::External {
                description: "wrk -t1 http://h/".into(),
            },
        );
        m.duration_s = 2.1;
        m.requests = 246_746;
        m.ok = 246_746;
        m.throughput_rps = 117_498.1;
        m.latency = Some(Latency {
            p99_ms: Some(0.81),
            mean_ms: Some(1.25),
            ..Default::default()
        });
        m.extra.insert("read_bytes".into(), 43_232_788.48);
        m.extra.insert("transfer_bytes_per_s".into(), 17_563_648.0);
        m.extra.insert("responses_per_s".into(), 117_542.76);
        m.extra.insert("initial_connection_ms".into(), 3.2);
        m.extra.insert("clients".into(), 2.0);
        let s = render_summary(&m);
        for want in [
            "window:     2.1 s measured after 0 s warm-up",
            "requests:   246,746 (246,746 ok, 0 errors, 0 %)",
            "throughput: 117,498 req/s",
            "mean 1.25 ms",
            "p99 810 µs",
            "read:       41.2 MiB",
            "transfer:   16.8 MiB/s",
            "responses:  117,543/s",
            "initial_connection: 3.2 ms",
            "clients:    2",
        ] {
            assert!(s.contains(want), "{want:?} in\n{s}");
        }
        assert!(!s.contains("by request kind"), "{s}");
    }

    #[test]
    fn a_profile_run_shows_each_kind_with_its_share_errors_and_percentiles() {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 2,
                think_time: "0".into(),
            },
        );
        let kind =
            |name: &str, method: &str, requests: u64, errors: u64, share: f64| crate::KindResult {
                name: name.into(),
                method: method.into(),
                url: "http://h/x".into(),
                weight_share: share,
                requests,
                ok: requests - errors,
                errors,
                status: Default::default(),
                latency: Some(Latency {
                    p50_ms: Some(1.5),
                    p90_ms: Some(2.0),
                    p99_ms: Some(4.0),
                    max_ms: Some(12.0),
                    ..Default::default()
                }),
                histogram: None,
            };
        m.request_kinds = vec![
            kind("get-doc", "GET", 900, 0, 0.9),
            kind("put", "PUT", 100, 3, 0.1),
        ];
        let s = render_summary(&m);
        for want in [
            "by request kind (share of requests, weight's share):",
            "    get-doc  GET       90 %    90 %  900 requests, 0 errors  p50 1.5 ms  p90 2 ms  p99 4 ms  max 12 ms",
            "    put      PUT       10 %    10 %  100 requests, 3 errors",
        ] {
            assert!(s.contains(want), "{want:?} in\n{s}");
        }
    }
}
