//! The human summary of a measurement.

use std::fmt::Write;

use crate::measurement::{LoadShape, Measurement};

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        Some(v) if v < 1.0 => format!("{:.0}us", v * 1000.0),
        Some(v) if v < 1000.0 => format!("{v:.2}ms"),
        Some(v) => format!("{:.2}s", v / 1000.0),
    }
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
        } => format!("open loop, {rate_per_s}/s over {connections} connections"),
        LoadShape::External { description } => description.clone(),
        LoadShape::Merged { parts } => format!("{} merged runs", parts.len()),
    };
    let _ = writeln!(s, "{} — {load}", m.name.as_deref().unwrap_or(&m.source));
    if !m.targets.is_empty() {
        let _ = writeln!(s, "  targets:    {}", m.targets.join(", "));
    }
    let _ = writeln!(
        s,
        "  window:     {:.1}s measured after {:.1}s warm-up ({} → {})",
        m.duration_s, m.warmup_s, m.start, m.end
    );
    let _ = writeln!(
        s,
        "  requests:   {} ({} ok, {} errors, {:.3}%)",
        m.requests,
        m.ok,
        m.errors,
        m.error_ratio() * 100.0
    );
    let _ = writeln!(s, "  throughput: {:.1}/s", m.throughput_rps);
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
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "  errors:     {}", kinds.join(", "));
    }
    if !m.status.is_empty() {
        let st: Vec<String> = m.status.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  status:     {}", st.join(", "));
    }
    for (k, v) in &m.extra {
        let _ = writeln!(s, "  {k}: {v}");
    }
    s
}
