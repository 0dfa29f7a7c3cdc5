//! The two text formats of `/metrics`. Families are encoded in OpenMetrics (by
//! `prometheus-client`); the Prometheus text format (0.0.4), which node_exporter's textfile
//! collector and older scrapers read, is derived from it: counter families are named with
//! their `_total`, info families become gauges, and the `# UNIT` and `# EOF` lines go.

/// A format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Prometheus,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format a scraper asks for in its `Accept` header: OpenMetrics when it lists it with
    /// a quality above 0, else the Prometheus text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let wants = accept.split(',').any(|part| {
            let mut it = part.split(';').map(str::trim);
            let media = it.next().unwrap_or_default();
            let q = it
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
        });
        if wants {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// OpenMetrics text (as `prometheus-client` writes it) in the Prometheus text format.
pub fn to_prometheus(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // HELP precedes TYPE: held until the type says what the family is called.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ');
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gaugehistogram" | "stateset" | "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_served_only_to_those_who_ask_for_it() {
        let prom = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4")),
            Format::Prometheus
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Prometheus
        );
        assert_eq!(Format::negotiate(None), Format::Prometheus);
    }

    #[test]
    fn counters_take_their_total_and_info_becomes_a_gauge() {
        let om = "# HELP perfpilot_build The version.\n# TYPE perfpilot_build info\nperfpilot_build_info{version=\"0.1.0\"} 1\n# HELP perfpilot_scans Scans.\n# TYPE perfpilot_scans counter\nperfpilot_scans_total 3\n# HELP perfpilot_scan_interval_seconds The interval.\n# TYPE perfpilot_scan_interval_seconds gauge\n# UNIT perfpilot_scan_interval_seconds seconds\nperfpilot_scan_interval_seconds 5.0\n# EOF\n";
        let p = to_prometheus(om);
        assert!(
            p.contains(
                "# TYPE perfpilot_build_info gauge\nperfpilot_build_info{version=\"0.1.0\"} 1\n"
            ),
            "{p}"
        );
        assert!(p.contains("# HELP perfpilot_scans_total Scans.\n# TYPE perfpilot_scans_total counter\nperfpilot_scans_total 3\n"), "{p}");
        assert!(!p.contains("# EOF") && !p.contains("# UNIT"), "{p}");
    }
}
