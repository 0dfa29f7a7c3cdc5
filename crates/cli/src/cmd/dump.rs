//! `perfpilot dump`: replay recorded samples as rates, in JSON, CSV or OpenMetrics.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use perfpilot_observe::Rates;
use perfpilot_store::Store;
use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    Cpu,
    Process,
    Thread,
    Device,
    Net,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Json,
    Csv,
    Openmetrics,
}

#[derive(Args)]
pub struct DumpArgs {
    /// What to dump.
    #[arg(long, value_enum)]
    what: What,
    /// Start: RFC 3339 (2026-11-22T10:00:00Z), seconds since the epoch, or a duration ago (1h).
    #[arg(long)]
    from: Option<String>,
    /// End, in the same forms as --from.
    #[arg(long)]
    to: Option<String>,
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
    /// Only this process (for --what process|thread).
    #[arg(long)]
    pid: Option<i32>,
    /// The store (default: as for `record`).
    #[arg(long, value_name = "PATH", env = "PERFPILOT_STORE")]
    store: Option<PathBuf>,
}

/// Parses a point in time: RFC 3339, seconds since the epoch, `now`, or a duration ago.
pub fn parse_time(s: &str, flag: &str) -> anyhow::Result<i64> {
    let s = s.trim();
    let to_ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    };
    if s == "now" {
        return Ok(to_ms(SystemTime::now()));
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Ok((secs * 1000.0) as i64);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(to_ms(t));
    }
    let ago = s.trim_start_matches('-').trim_end_matches("ago").trim();
    if let Ok(d) = humantime::parse_duration(ago) {
        return Ok(to_ms(SystemTime::now() - d));
    }
    bail!(
        "{flag} {s:?}: expected RFC 3339 (2026-11-22T10:00:00Z), seconds since the epoch, 'now', or a duration ago such as 1h"
    )
}

/// Labels per kind of row; every other numeric field becomes a metric.
fn labels(what: What) -> &'static [&'static str] {
    match what {
        What::Cpu => &["cpu"],
        What::Process => &["pid", "comm"],
        What::Thread => &["pid", "tid", "comm"],
        What::Device => &["device"],
        What::Net => &["interface"],
    }
}

fn name(what: What) -> &'static str {
    match what {
        What::Cpu => "cpu",
        What::Process => "process",
        What::Thread => "thread",
        What::Device => "device",
        What::Net => "net",
    }
}

fn rows(r: &Rates, what: What, pid: Option<i32>) -> anyhow::Result<Vec<Value>> {
    let keep = |p: i32| pid.is_none_or(|x| x == p);
    let v = match what {
        What::Cpu => std::iter::once(&r.total)
            .chain(&r.cpus)
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        What::Process => r
            .processes
            .iter()
            .filter(|p| keep(p.pid))
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        What::Thread => r
            .threads
            .iter()
            .filter(|t| keep(t.pid))
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        What::Device => r
            .disks
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        What::Net => r
            .nets
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
    };
    Ok(v)
}

pub fn run(a: DumpArgs) -> anyhow::Result<()> {
    let from = a
        .from
        .as_deref()
        .map(|s| parse_time(s, "--from"))
        .transpose()?;
    let to = a.to.as_deref().map(|s| parse_time(s, "--to")).transpose()?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        bail!("--from is after --to");
    }
    let path = super::record::store_path(a.store)?;
    if !path.exists() {
        bail!(
            "no store at {}: record one with `perfpilot record --store {}`",
            path.display(),
            path.display()
        );
    }
    let store = Store::open(&path)?;
    let mut it = store.iter_samples(from, to)?;
    let mut prev = it.take_before();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut csv: Option<csv::Writer<std::io::Stdout>> = None;
    let mut families: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut n_rows, mut gaps) = (0u64, 0u64);
    if a.format == Format::Json {
        writeln!(out, "[")?;
    }
    for s in it.by_ref() {
        let s = s?;
        let Some(p) = prev.replace(s) else { continue };
        let cur = prev.as_ref().context("current sample")?;
        let rates = match Rates::between(&p, cur) {
            Ok(r) => r,
            Err(_) => {
                gaps += 1;
                continue;
            }
        };
        for row in rows(&rates, a.what, a.pid)? {
            match a.format {
                Format::Json => {
                    if n_rows > 0 {
                        writeln!(out, ",")?;
                    }
                    serde_json::to_writer(&mut out, &row)?;
                }
                Format::Csv => {
                    let w = csv.get_or_insert_with(|| csv::Writer::from_writer(std::io::stdout()));
                    let obj = row.as_object().context("row is an object")?;
                    if n_rows == 0 {
                        w.write_record(obj.keys())?;
                    }
                    w.write_record(obj.values().map(|v| match v {
                        Value::Null => String::new(),
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }))?;
                }
                Format::Openmetrics => openmetrics_row(&mut families, a.what, &row),
            }
            n_rows += 1;
        }
    }
    match a.format {
        Format::Json => writeln!(out, "\n]")?,
        Format::Csv => {
            if let Some(w) = csv.as_mut() {
                w.flush()?;
            }
        }
        Format::Openmetrics => {
            for (family, lines) in &families {
                writeln!(out, "# TYPE {family} gauge")?;
                for l in lines {
                    writeln!(out, "{l}")?;
                }
            }
            writeln!(out, "# EOF")?;
        }
    }
    out.flush()?;
    for c in it.corrupt() {
        eprintln!("warning: {c}");
    }
    if gaps > 0 {
        eprintln!(
            "note: {gaps} pairs of samples were not comparable (a reboot or clock jump between them) and were skipped"
        );
    }
    if n_rows == 0 {
        eprintln!(
            "note: no {} rows in that range of {} (rates need two samples)",
            name(a.what),
            path.display()
        );
    }
    Ok(())
}

/// Adds one row's numeric fields as gauge samples with the row's time as timestamp.
fn openmetrics_row(families: &mut BTreeMap<String, Vec<String>>, what: What, row: &Value) {
    let Some(obj) = row.as_object() else { return };
    let ts = obj.get("time_ms").and_then(Value::as_i64).unwrap_or(0) as f64 / 1000.0;
    let keys = labels(what);
    let mut label_text = Vec::new();
    for k in keys {
        let v = match obj.get(*k) {
            Some(Value::Null) | None if *k == "cpu" => "all".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => continue,
        };
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        label_text.push(format!("{k}=\"{v}\""));
    }
    let labels = label_text.join(",");
    for (k, v) in obj {
        if keys.contains(&k.as_str()) || k == "time_ms" {
            continue;
        }
        let Some(x) = v.as_f64() else { continue };
        let family = format!("perfpilot_{}_{k}", name(what));
        families
            .entry(family.clone())
            .or_default()
            .push(format!("{family}{{{labels}}} {x} {ts:.3}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(
            parse_time("1700000000", "--from").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z", "--from").unwrap(),
            1_700_000_000_000
        );
        let now = parse_time("now", "--to").unwrap();
        let ago = parse_time("1h", "--from").unwrap();
        assert!((now - ago - 3_600_000).abs() < 5_000);
        assert_eq!(parse_time("-1h", "--from").unwrap() / 10_000, ago / 10_000);
        let e = parse_time("yesterday-ish", "--from")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--from") && e.contains("RFC 3339"), "{e}");
    }

    #[test]
    fn openmetrics_rows_become_labelled_gauges() {
        let mut f = BTreeMap::new();
        let row = serde_json::json!({"time_ms": 1500, "cpu": null, "busy": 12.5, "user": 10.0, "ctxt_per_s": null});
        openmetrics_row(&mut f, What::Cpu, &row);
        assert_eq!(
            f["perfpilot_cpu_busy"],
            vec!["perfpilot_cpu_busy{cpu=\"all\"} 12.5 1.500".to_string()]
        );
        assert!(!f.contains_key("perfpilot_cpu_ctxt_per_s"));
        let row = serde_json::json!({"time_ms": 2000, "pid": 7, "comm": "a\"b", "cpu": 3.0, "cmdline": "x"});
        openmetrics_row(&mut f, What::Process, &row);
        assert_eq!(
            f["perfpilot_process_cpu"],
            vec!["perfpilot_process_cpu{pid=\"7\",comm=\"a\\\"b\"} 3 2.000".to_string()]
        );
    }
}
