//! Recorded samples replayed as rates, the data of `perfpilot dump`: every two consecutive
//! samples of a time range give one set of [`Rates`], and the rows of one [`Table`] of them
//! come out as flat JSON objects, ready to print as JSON or CSV or to gather as OpenMetrics
//! gauge families ([`OpenMetrics`]).

use std::collections::{BTreeMap, VecDeque};

use perfpilot_observe::{Rates, Sample};
use serde_json::Value;

use crate::samples::{CorruptRow, SampleIter};
use crate::{Error, Result, Store};

/// What the CPU table's aggregate row (all CPUs together, `cpu` null in JSON) is called where a
/// CPU number is shown: OpenMetrics labels, CSV cells.
pub const ALL_CPUS: &str = "all";

/// A table of rate rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// All CPUs together, then each CPU.
    Cpu,
    /// Processes.
    Process,
    /// Threads.
    Thread,
    /// Block devices.
    Device,
    /// Network interfaces.
    Net,
}

impl Table {
    /// The table's name, as in the OpenMetrics family names (`perfpilot_<name>_<field>`).
    pub fn name(self) -> &'static str {
        match self {
            Table::Cpu => "cpu",
            Table::Process => "process",
            Table::Thread => "thread",
            Table::Device => "device",
            Table::Net => "net",
        }
    }

    /// The fields that identify a row; every other numeric field is a metric.
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            Table::Cpu => &["cpu"],
            Table::Process => &["pid", "comm"],
            Table::Thread => &["pid", "tid", "comm"],
            Table::Device => &["device"],
            Table::Net => &["interface"],
        }
    }

    /// The table's rows of `r` as JSON objects; processes and threads only of `pid` when given.
    pub fn rows(self, r: &Rates, pid: Option<i32>) -> serde_json::Result<Vec<Value>> {
        let keep = |p: i32| pid.is_none_or(|x| x == p);
        match self {
            Table::Cpu => std::iter::once(&r.total)
                .chain(&r.cpus)
                .map(serde_json::to_value)
                .collect(),
            Table::Process => r
                .processes
                .iter()
                .filter(|p| keep(p.pid))
                .map(serde_json::to_value)
                .collect(),
            Table::Thread => r
                .threads
                .iter()
                .filter(|t| keep(t.pid))
                .map(serde_json::to_value)
                .collect(),
            Table::Device => r.disks.iter().map(serde_json::to_value).collect(),
            Table::Net => r.nets.iter().map(serde_json::to_value).collect(),
        }
    }
}

/// The rows of one table over a time range, in time order; see [`Store::replay`].
pub struct Replay<'a> {
    samples: SampleIter<'a>,
    prev: Option<Sample>,
    table: Table,
    pid: Option<i32>,
    pending: VecDeque<Value>,
    gaps: u64,
    path: std::path::PathBuf,
}

impl Store {
    /// Replays the samples with `from_ms <= time_ms <= to_ms` (the one just before `from_ms`
    /// included, so the range's first interval has its rate) as rows of `table`.
    pub fn replay(
        &self,
        from_ms: Option<i64>,
        to_ms: Option<i64>,
        table: Table,
        pid: Option<i32>,
    ) -> Result<Replay<'_>> {
        let mut samples = self.iter_samples(from_ms, to_ms)?;
        let prev = samples.take_before();
        Ok(Replay {
            samples,
            prev,
            table,
            pid,
            pending: VecDeque::new(),
            gaps: 0,
            path: self.path().to_path_buf(),
        })
    }
}

impl Replay<'_> {
    /// Pairs of samples skipped so far because they were not comparable (a reboot or a clock
    /// jump between them).
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// The rows skipped so far because they did not decode.
    pub fn corrupt(&self) -> &[CorruptRow] {
        self.samples.corrupt()
    }
}

impl Iterator for Replay<'_> {
    type Item = Result<Value>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(row) = self.pending.pop_front() {
                return Some(Ok(row));
            }
            let cur = match self.samples.next()? {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            let Some(prev) = self.prev.replace(cur) else {
                continue;
            };
            let Some(cur) = self.prev.as_ref() else {
                continue;
            };
            let Ok(rates) = Rates::between(&prev, cur) else {
                self.gaps += 1;
                continue;
            };
            match self.table.rows(&rates, self.pid) {
                Ok(rows) => self.pending.extend(rows),
                Err(e) => {
                    return Some(Err(Error::Encode {
                        path: self.path.clone(),
                        time_ms: rates.time_ms,
                        reason: format!("the {} rates as JSON: {e}", self.table.name()),
                    }));
                }
            }
        }
    }
}

/// Rows gathered as OpenMetrics gauge families: one family per table and numeric field, one
/// sample per row, labelled by the table's label fields and stamped with the row's time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenMetrics {
    families: BTreeMap<String, Vec<String>>,
}

impl OpenMetrics {
    /// Adds one row's numeric fields as gauge samples with the row's time as timestamp.
    pub fn add(&mut self, table: Table, row: &Value) {
        let Some(obj) = row.as_object() else { return };
        let ts = obj.get("time_ms").and_then(Value::as_i64).unwrap_or(0) as f64 / 1000.0;
        let keys = table.labels();
        let mut label_text = Vec::new();
        for k in keys {
            let v = match obj.get(*k) {
                Some(Value::Null) | None if *k == "cpu" => ALL_CPUS.to_string(),
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
            let family = format!("perfpilot_{}_{k}", table.name());
            self.families
                .entry(family.clone())
                .or_default()
                .push(format!("{family}{{{labels}}} {x} {ts:.3}"));
        }
    }

    /// The exposition text: each family's `# TYPE` line and samples, then `# EOF`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (family, lines) in &self.families {
            out.push_str(&format!("# TYPE {family} gauge\n"));
            for l in lines {
                out.push_str(l);
                out.push('\n');
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_rows_become_labelled_gauges() {
        let mut f = OpenMetrics::default();
        let row = serde_json::json!({"time_ms": 1500, "cpu": null, "busy": 12.5, "user": 10.0, "ctxt_per_s": null});
        f.add(Table::Cpu, &row);
        assert_eq!(
            f.families["perfpilot_cpu_busy"],
            vec!["perfpilot_cpu_busy{cpu=\"all\"} 12.5 1.500".to_string()]
        );
        assert!(!f.families.contains_key("perfpilot_cpu_ctxt_per_s"));
        let row = serde_json::json!({"time_ms": 2000, "pid": 7, "comm": "a\"b", "cpu": 3.0, "cmdline": "x"});
        f.add(Table::Process, &row);
        assert_eq!(
            f.families["perfpilot_process_cpu"],
            vec!["perfpilot_process_cpu{pid=\"7\",comm=\"a\\\"b\"} 3 2.000".to_string()]
        );
    }
}
