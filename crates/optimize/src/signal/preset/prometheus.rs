//! The Prometheus text format: a parser, the rules that choose a server's work counter, and
//! the preset that scrapes `/metrics`.
//!
//! Without a configured `metric`, the counter is chosen by [`COUNTER_RULES`], in order: the
//! first rule that some metric fits wins, and among the metrics fitting it the one with the
//! largest sum (then the first by name). Metrics named with one of [`EXCLUDED_PREFIXES`] (the
//! scrape and runtime counters of client libraries) and gauges are never chosen. The value is
//! the sum over the metric's series (label sets). Once chosen, a reader keeps its metric: a
//! counter that later vanishes is an error, not a silent switch to another one.

use std::collections::HashMap;
use std::time::Duration;

use perfpilot_drive::fetch::{self, FetchFailure};

use super::nginx::http_fault;
use super::reader::{Fault, Session};
use super::{Endpoint, PresetSettings, Reading, snippet};

/// The largest `/metrics` page read.
pub const PAGE_LIMIT: u64 = 4 << 20;

/// How a counter rule matches a metric name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// The name ends with this.
    Suffix(&'static str),
    /// The name is exactly this.
    Exact(&'static str),
    /// Any metric declared `# TYPE … counter` whose samples end in `_total`, unless its name
    /// says it counts something other than work ([`NOT_WORK`]).
    AnyCounter,
}

/// The rules choosing a work counter, best first.
pub const COUNTER_RULES: [NameRule; 9] = [
    NameRule::Suffix("_requests_total"),
    NameRule::Suffix("_ops_total"),
    NameRule::Suffix("_operations_total"),
    NameRule::Suffix("_queries_total"),
    NameRule::Suffix("_transactions_total"),
    NameRule::Suffix("_commands_total"),
    // Micrometer's (Spring Boot's) request timer, and the usual request-latency histogram:
    // their _count is the number of requests.
    NameRule::Exact("http_server_requests_seconds_count"),
    NameRule::Suffix("_request_duration_seconds_count"),
    NameRule::AnyCounter,
];

/// Prefixes of client libraries' own counters (the scrape itself, GC, the runtime), never
/// chosen.
pub const EXCLUDED_PREFIXES: [&str; 7] = [
    "process_",
    "go_",
    "jvm_",
    "promhttp_",
    "python_",
    "scrape_",
    "net_conntrack_",
];

/// Words in a counter's name that say it counts something other than completed work; such
/// a counter is not chosen by [`NameRule::AnyCounter`].
pub const NOT_WORK: [&str; 12] = [
    "error", "fail", "bytes", "seconds", "miss", "evict", "drop", "reject", "retr", "timeout",
    "restart", "panic",
];

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// The metric name.
    pub name: &'a str,
    /// The labels, unescaped, in page order.
    pub labels: Vec<(&'a str, String)>,
    /// The value.
    pub value: f64,
    /// The timestamp in milliseconds, when given.
    pub timestamp: Option<i64>,
}

impl Sample<'_> {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page<'a> {
    /// The samples, in page order.
    pub samples: Vec<Sample<'a>>,
    /// `# TYPE` declarations: metric name → type (`counter`, `gauge`, …).
    pub types: HashMap<&'a str, &'a str>,
    /// Lines that are neither comments nor samples: (line number from 1, the line).
    pub bad: Vec<(usize, &'a str)>,
}

/// Parses the Prometheus text format. Lines that do not parse are collected in
/// [`Page::bad`], not fatal: one odd line does not hide the rest.
pub fn parse(text: &str) -> Page<'_> {
    let mut page = Page::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE")
                && let (Some(name), Some(kind)) = (words.next(), words.next())
            {
                page.types.insert(name, kind);
            }
            continue;
        }
        match parse_sample(line) {
            Some(s) => page.samples.push(s),
            None => page.bad.push((i + 1, raw)),
        }
    }
    page
}

/// Parses one sample line, or `None` if it is not one.
fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !super::config::is_metric_name(name) {
        return None;
    }
    let mut rest = line[name_end..].trim_start();
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut words = rest.split_whitespace();
    let value = parse_value(words.next()?)?;
    let timestamp = match words.next() {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    if words.next().is_some() {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
        timestamp,
    })
}

/// Parses `a="x",b="y\"z"}` into `labels`; returns what follows the `}`.
fn parse_labels<'a>(mut s: &'a str, labels: &mut Vec<(&'a str, String)>) -> Option<&'a str> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Some(after);
        }
        let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        let name = &s[..end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        s = s[end..].trim_start().strip_prefix('=')?.trim_start();
        s = s.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => {
                        value.push('\\');
                        value.push(c);
                    }
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name, value));
        s = s[close + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if s.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+' || c == '.') => {
            s.parse().ok()
        }
        _ => None,
    }
}

/// The chosen counter.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The metric name.
    pub metric: String,
    /// How many series were summed.
    pub series: usize,
    /// The sum.
    pub value: f64,
}

impl Choice {
    /// For `status`: "chose foo_requests_total, sum of 3 series".
    pub fn describe(&self) -> String {
        let series = if self.series == 1 {
            "1 series".to_string()
        } else {
            format!("sum of {} series", self.series)
        };
        format!("chose {}, {series}", self.metric)
    }
}

impl Page<'_> {
    /// The sum of `metric` over its series and their count, or `None` if it has none.
    pub fn sum(&self, metric: &str) -> Option<(f64, usize)> {
        let values: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == metric)
            .map(|s| s.value)
            .collect();
        (!values.is_empty()).then(|| (values.iter().sum(), values.len()))
    }

    /// The declared type of the metric a sample named `name` belongs to (`foo_total` belongs
    /// to `foo` in OpenMetrics, `foo_count` to a histogram or summary `foo`).
    fn type_of(&self, name: &str) -> Option<&str> {
        self.types.get(name).copied().or_else(|| {
            ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .find_map(|suffix| self.types.get(name.strip_suffix(suffix)?).copied())
        })
    }

    /// The work counter by [`COUNTER_RULES`], or `None` if no metric fits any rule.
    pub fn choose(&self) -> Option<Choice> {
        let mut names: Vec<&str> = self.samples.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        names.retain(|n| {
            !EXCLUDED_PREFIXES.iter().any(|p| n.starts_with(p)) && self.type_of(n) != Some("gauge")
        });
        COUNTER_RULES.iter().find_map(|rule| {
            names
                .iter()
                .filter(|n| fits(rule, n, self))
                .filter_map(|n| {
                    let (value, series) = self.sum(n)?;
                    value.is_finite().then(|| Choice {
                        metric: n.to_string(),
                        series,
                        value,
                    })
                })
                // Largest sum first; equal sums keep the first name (max_by keeps the last).
                .rev()
                .max_by(|a, b| a.value.total_cmp(&b.value))
        })
    }
}

fn fits(rule: &NameRule, name: &str, page: &Page) -> bool {
    match rule {
        NameRule::Suffix(s) => name.ends_with(s) && name.len() > s.len(),
        NameRule::Exact(e) => name == *e,
        NameRule::AnyCounter => {
            name.ends_with("_total")
                && page.type_of(name) == Some("counter")
                && !NOT_WORK.iter().any(|w| name.contains(w))
        }
    }
}

/// Reads a page's counter: `metric` when given, else the rules' choice.
pub(crate) fn read_page(text: &str, metric: Option<&str>) -> Result<Choice, Fault> {
    let page = parse(text);
    if page.samples.is_empty() || page.bad.len() > page.samples.len() {
        return Err(match page.bad.first() {
            Some((n, line)) => {
                Fault::Garbage(format!("line {n}: {}", snippet(line.as_bytes(), 80)))
            }
            None => Fault::MetricMissing("any sample (the page has none)".into()),
        });
    }
    let choice = match metric {
        Some(m) => {
            let (value, series) = page
                .sum(m)
                .ok_or_else(|| Fault::MetricMissing(format!("metric {m}")))?;
            Choice {
                metric: m.to_string(),
                series,
                value,
            }
        }
        None => page.choose().ok_or_else(|| {
            Fault::MetricMissing(
                "a request or operation counter (none fits the name rules; set `metric` in a \
                 [[preset]] with kind = \"prometheus\")"
                    .into(),
            )
        })?,
    };
    if !choice.value.is_finite() {
        return Err(Fault::Garbage(format!(
            "{} sums to {}",
            choice.metric, choice.value
        )));
    }
    Ok(choice)
}

/// Scrapes one server's `/metrics` over a kept HTTP connection and keeps the metric it chose.
pub(crate) struct Scraper {
    url: String,
    metric: Option<String>,
    client: fetch::Client,
}

impl Scraper {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Scraper {
        let path = settings.path.unwrap_or_else(|| "/metrics".into());
        Scraper {
            url: format!("http://{endpoint}{path}"),
            metric: settings.metric,
            client: fetch::Client::new(),
        }
    }
}

impl Session for Scraper {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        let body = match self.client.get_capped(&self.url, io_limit, PAGE_LIMIT) {
            Ok(r) => r.body,
            Err(e) => {
                return Err(match e.failure {
                    FetchFailure::Status(code) => Fault::MetricMissing(format!(
                        "a metrics page ({} answered status {code})",
                        self.url
                    )),
                    other => http_fault(other),
                });
            }
        };
        let choice = read_page(&body, self.metric.as_deref())?;
        self.metric = Some(choice.metric.clone());
        Ok(Reading {
            value: choice.value,
            source: choice.describe(),
        })
    }

    fn reset(&mut self) {
        self.client = fetch::Client::new();
    }
}

#[cfg(test)]
mod tests;
