//! The k6-style end-of-run summary: the data object k6 hands to `handleSummary()` (`metrics`
//! with `type`, `contains` and `values` per metric, `root_group`, `options`, `state`), so that
//! reports and CI steps written for k6 read a perfpilot run. Only what a measurement knows is
//! there: `http_reqs`, `http_req_duration` (the trend statistics k6 shows by default, plus
//! p(99) and p(99.9)), `http_req_failed`, `vus` / `vus_max` for a closed load, and the
//! thresholds under the metric they concern, keyed by their k6 expression.

use serde_json::{Map, Value, json};

use crate::measurement::{LoadShape, Measurement};
use crate::threshold::Threshold;

/// The k6 summary of `m`, with `thresholds` checked against it.
pub fn k6_summary(m: &Measurement, thresholds: &[Threshold]) -> Value {
    let mut metrics = Map::new();
    metrics.insert(
        "http_reqs".into(),
        json!({
            "type": "counter",
            "contains": "default",
            "values": { "count": m.requests, "rate": rate(m.requests, m.duration_s) },
        }),
    );
    let mut trend = Map::new();
    if let Some(l) = &m.latency {
        for name in ["mean", "min", "p50", "max", "p90", "p95", "p99", "p99.9"] {
            if let Some(v) = l.by_name(name) {
                trend.insert(k6_stat(name), json!(v));
            }
        }
    }
    metrics.insert(
        "http_req_duration".into(),
        json!({ "type": "trend", "contains": "time", "values": trend }),
    );
    // k6's rate metric counts the non-zero samples as passes: for http_req_failed those are the
    // failed requests.
    metrics.insert(
        "http_req_failed".into(),
        json!({
            "type": "rate",
            "contains": "default",
            "values": {
                "rate": if m.requests > 0 { m.errors as f64 / m.requests as f64 } else { 0.0 },
                "passes": m.errors,
                "fails": m.ok,
            },
        }),
    );
    if let LoadShape::Closed { users, .. } = &m.load {
        for name in ["vus", "vus_max"] {
            metrics.insert(
                name.into(),
                json!({
                    "type": "gauge",
                    "contains": "default",
                    "values": { "value": users, "min": users, "max": users },
                }),
            );
        }
    }
    for t in thresholds {
        let (metric, expr) = t.k6();
        let ok = t.check(m).passed;
        if let Some(Value::Object(entry)) = metrics.get_mut(metric) {
            let th = entry
                .entry("thresholds")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(th) = th {
                th.insert(expr, json!({ "ok": ok }));
            }
        }
    }
    json!({
        "root_group": {
            "name": "",
            "path": "",
            // k6's id of the root group: the MD5 of its empty path.
            "id": "d41d8cd98f00b204e9800998ecf8427e",
            "groups": [],
            "checks": [],
        },
        "options": {
            "summaryTrendStats": ["avg", "min", "med", "max", "p(90)", "p(95)", "p(99)", "p(99.9)"],
            "summaryTimeUnit": "",
            "noColor": false,
        },
        "state": {
            "isStdOutTTY": false,
            "isStdErrTTY": false,
            "testRunDurationMs": (m.warmup_s + m.duration_s) * 1000.0,
        },
        "metrics": metrics,
    })
}

/// k6's name of a latency statistic: `avg`, `min`, `med`, `max`, `p(99)`.
pub(crate) fn k6_stat(name: &str) -> String {
    match name {
        "mean" => "avg".into(),
        "p50" => "med".into(),
        "min" | "max" => name.into(),
        p => format!("p({})", p.trim_start_matches('p')),
    }
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::Latency;

    fn measurement() -> Measurement {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 8,
                think_time: "0".into(),
            },
        );
        m.duration_s = 10.0;
        m.warmup_s = 2.0;
        m.requests = 1000;
        m.ok = 990;
        m.errors = 10;
        m.throughput_rps = 99.0;
        m.latency = Some(Latency {
            mean_ms: Some(4.0),
            min_ms: Some(1.0),
            p50_ms: Some(3.5),
            p90_ms: Some(7.0),
            p95_ms: Some(9.0),
            p99_ms: Some(20.0),
            max_ms: Some(31.0),
            ..Latency::default()
        });
        m
    }

    #[test]
    fn the_summary_has_the_metrics_k6_reports_in_its_shape() {
        let s = k6_summary(&measurement(), &[]);
        let reqs = &s["metrics"]["http_reqs"];
        assert_eq!(reqs["type"], "counter");
        assert_eq!(reqs["values"]["count"], 1000);
        assert_eq!(reqs["values"]["rate"], 100.0);
        let d = &s["metrics"]["http_req_duration"];
        assert_eq!(
            (d["type"].as_str(), d["contains"].as_str()),
            (Some("trend"), Some("time"))
        );
        assert_eq!(d["values"]["p(95)"], 9.0);
        assert_eq!(d["values"]["med"], 3.5);
        assert!(
            d["values"].get("p(99.9)").is_none(),
            "a statistic the run lacks is left out"
        );
        let f = &s["metrics"]["http_req_failed"]["values"];
        assert_eq!(
            (
                f["rate"].as_f64(),
                f["passes"].as_u64(),
                f["fails"].as_u64()
            ),
            (Some(0.01), Some(10), Some(990))
        );
        assert_eq!(s["metrics"]["vus"]["values"]["value"], 8);
        assert_eq!(s["state"]["testRunDurationMs"], 12000.0);
    }

    #[test]
    fn thresholds_sit_under_their_metric_with_their_k6_expression() {
        let ts: Vec<Threshold> = [
            "p95<10ms",
            "p99<10ms",
            "errors<0.5%",
            "throughput>=90",
            "mean<5ms",
        ]
        .iter()
        .map(|t| Threshold::parse(t).unwrap())
        .collect();
        let s = k6_summary(&measurement(), &ts);
        let th = |m: &str, e: &str| s["metrics"][m]["thresholds"][e]["ok"].as_bool();
        assert_eq!(th("http_req_duration", "p(95)<10"), Some(true));
        assert_eq!(th("http_req_duration", "p(99)<10"), Some(false));
        assert_eq!(th("http_req_duration", "avg<5"), Some(true));
        assert_eq!(th("http_req_failed", "rate<0.005"), Some(false));
        assert_eq!(th("http_reqs", "rate>=90"), Some(true));
    }
}
