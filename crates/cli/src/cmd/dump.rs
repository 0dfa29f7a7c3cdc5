//! `perfpilot dump`: replay recorded samples as rates, in JSON, CSV or OpenMetrics.

use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use perfpilot_store::Store;
use perfpilot_store::dump::{ALL_CPUS, OpenMetrics, Table};
use perfpilot_units as units;
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
        return Ok(perfpilot_sys::clock::now_ms());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Ok((secs * 1000.0) as i64);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(to_ms(t));
    }
    let ago = s.trim_start_matches('-').trim_end_matches("ago").trim();
    if let Ok(d) = humantime::parse_duration(ago) {
        return Ok(perfpilot_sys::clock::now_ms() - d.as_millis() as i64);
    }
    bail!(
        "{flag} {s:?}: expected RFC 3339 (2026-11-22T10:00:00Z), seconds since the epoch, 'now', or a duration ago such as 1h"
    )
}

/// One CSV cell: fractions with four significant digits (not 16), whole numbers as they are,
/// the CPU table's aggregate row's `cpu` as `all`, other missing values empty.
fn csv_cell(table: Table, key: &str, v: &Value) -> String {
    match v {
        Value::Null if table == Table::Cpu && key == "cpu" => ALL_CPUS.to_string(),
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => n.as_f64().map(units::decimal).unwrap_or_default(),
        other => other.to_string(),
    }
}

impl What {
    fn table(self) -> Table {
        match self {
            What::Cpu => Table::Cpu,
            What::Process => Table::Process,
            What::Thread => Table::Thread,
            What::Device => Table::Device,
            What::Net => Table::Net,
        }
    }
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
    let store = Store::open_existing(&path)?;
    let table = a.what.table();
    let mut replay = store.replay(from, to, table, a.pid)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut csv: Option<csv::Writer<std::io::Stdout>> = None;
    let mut om = OpenMetrics::default();
    let mut n_rows = 0u64;
    if a.format == Format::Json {
        writeln!(out, "[")?;
    }
    for row in replay.by_ref() {
        let row = row?;
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
                w.write_record(obj.iter().map(|(k, v)| csv_cell(table, k, v)))?;
            }
            Format::Openmetrics => om.add(table, &row),
        }
        n_rows += 1;
    }
    match a.format {
        Format::Json => writeln!(out, "\n]")?,
        Format::Csv => {
            if let Some(w) = csv.as_mut() {
                w.flush()?;
            }
        }
        Format::Openmetrics => write!(out, "{}", om.render())?,
    }
    out.flush()?;
    for c in replay.corrupt() {
        eprintln!("warning: {c}");
    }
    let gaps = replay.gaps();
    if gaps > 0 {
        eprintln!(
            "note: {gaps} pairs of samples were not comparable (a reboot or clock jump between them) and were skipped"
        );
    }
    if n_rows == 0 {
        eprintln!(
            "note: no {} rows in that range of {} (rates need two samples)",
            table.name(),
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_round_fractions_and_name_the_aggregate_cpu_row() {
        let row = serde_json::json!({"time_ms": 1_700_000_000_123_i64, "cpu": null,
            "busy": 12.345_678_901_234_567, "ctxt_per_s": 12_345.678_9, "idle": 0.0,
            "steal": 0.000_123_456_7, "missing": null});
        let cells: Vec<String> = row
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| csv_cell(Table::Cpu, k, v))
            .collect();
        assert_eq!(
            cells,
            [
                "1700000000123",
                "all",
                "12.35",
                "12346",
                "0",
                "0.0001235",
                ""
            ]
        );
        // Only the CPU table's cpu column has an aggregate row; a process's cpu is its share.
        assert_eq!(csv_cell(Table::Process, "cpu", &Value::Null), "");
        assert_eq!(
            csv_cell(Table::Process, "comm", &serde_json::json!("a,b")),
            "a,b"
        );
        assert_eq!(
            csv_cell(Table::Process, "rss", &serde_json::json!(4096)),
            "4096"
        );
    }

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
}
