//! `sort-agg`: the I/O- and memory-heavy job. A sequential scan keeps the rows passing a filter,
//! sorts them by group and key in runs of at most `sortsize` bytes written to the work area, merges
//! the runs into the sorted table, and aggregates one column per group on the way (count, mean,
//! standard deviation, minimum, maximum), as `PROC SORT` followed by `PROC MEANS BY` would.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::Error;
use crate::batch::BatchConfig;
use crate::data::{ROW_BYTES, Row};
use crate::job::{SessionFiles, open_input};

/// Rows whose first column is above this pass the filter (about 70 % of them).
const FILTER_ABOVE: f64 = -0.4;

/// Runs the job; the result is the rows written and the groups aggregated.
pub fn run(cfg: &BatchConfig, files: &SessionFiles) -> Result<String, Error> {
    for d in [&files.work, &files.out] {
        std::fs::create_dir_all(d).map_err(|e| Error::io("create", d, e))?;
    }
    let runs = scan_and_sort(cfg, files)?;
    let merged = merge(cfg, files, &runs);
    for r in &runs {
        let _ = std::fs::remove_file(r);
    }
    let (rows, groups) = merged?;
    Ok(format!("{rows} rows sorted, {groups} groups"))
}

/// The scan: filtered rows in sorted runs of at most `sortsize` bytes; returns the runs' files.
fn scan_and_sort(cfg: &BatchConfig, files: &SessionFiles) -> Result<Vec<PathBuf>, Error> {
    let f = open_input(cfg, files)?;
    let mut r = BufReader::with_capacity(cfg.bufsize, f);
    let per_run = (cfg.sortsize / ROW_BYTES).max(1);
    let mut chunk: Vec<Row> = Vec::with_capacity(per_run.min(1 << 20));
    let mut runs = Vec::new();
    let mut b = [0u8; ROW_BYTES];
    loop {
        match r.read_exact(&mut b) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(Error::io("read", &files.input, e)),
        }
        let row = Row::decode(&b);
        if row.x[0] > FILTER_ABOVE {
            chunk.push(row);
            if chunk.len() == per_run {
                runs.push(write_run(files, runs.len(), &mut chunk)?);
            }
        }
    }
    if !chunk.is_empty() {
        runs.push(write_run(files, runs.len(), &mut chunk)?);
    }
    Ok(runs)
}

fn write_run(files: &SessionFiles, n: usize, chunk: &mut Vec<Row>) -> Result<PathBuf, Error> {
    chunk.sort_unstable_by_key(Row::sort_key);
    let path = files.work.join(format!("run{n:04}.dat"));
    let f = File::create(&path).map_err(|e| Error::io("create", &path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut b = [0u8; ROW_BYTES];
    for row in chunk.iter() {
        row.encode(&mut b);
        w.write_all(&b).map_err(|e| Error::io("write", &path, e))?;
    }
    w.flush().map_err(|e| Error::io("write", &path, e))?;
    chunk.clear();
    Ok(path)
}

/// Reads the next row of a run (`None` at its end).
fn next_row(r: &mut BufReader<File>, path: &Path) -> Result<Option<Row>, Error> {
    let mut b = [0u8; ROW_BYTES];
    match r.read_exact(&mut b) {
        Ok(()) => Ok(Some(Row::decode(&b))),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

/// One group's running figures of column 1.
struct Agg {
    group: u32,
    n: u64,
    sum: f64,
    sumsq: f64,
    min: f64,
    max: f64,
}

impl Agg {
    fn new(group: u32) -> Agg {
        Agg {
            group,
            n: 0,
            sum: 0.0,
            sumsq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
        self.sumsq += v * v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn line(&self) -> String {
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = if self.n > 1 {
            ((self.sumsq - n * mean * mean) / (n - 1.0)).max(0.0)
        } else {
            0.0
        };
        format!(
            "{},{},{:.6},{:.6},{:.6},{:.6}\n",
            self.group,
            self.n,
            mean,
            var.sqrt(),
            self.min,
            self.max
        )
    }
}

/// Merges the runs into `sorted.dat`, checking the order, and writes `means.csv`; returns the
/// rows and groups.
fn merge(cfg: &BatchConfig, files: &SessionFiles, runs: &[PathBuf]) -> Result<(u64, u64), Error> {
    let mut readers = Vec::with_capacity(runs.len());
    let mut heap = BinaryHeap::new();
    // Each run gets an equal share of the sort memory as its read buffer.
    let buf = (cfg.sortsize / runs.len().max(1)).clamp(64 << 10, 4 << 20);
    for (i, p) in runs.iter().enumerate() {
        let f = File::open(p).map_err(|e| Error::io("open", p, e))?;
        let mut r = BufReader::with_capacity(buf, f);
        if let Some(row) = next_row(&mut r, p)? {
            heap.push(Reverse((row.sort_key(), i, RowBits(row))));
        }
        readers.push(r);
    }
    let sorted = files.out.join("sorted.dat");
    let means = files.out.join("means.csv");
    let f = File::create(&sorted).map_err(|e| Error::io("create", &sorted, e))?;
    let mut w = BufWriter::with_capacity(cfg.bufsize, f);
    let mut csv = String::from("group,n,mean,std,min,max\n");
    let mut b = [0u8; ROW_BYTES];
    let mut rows = 0u64;
    let mut groups = 0u64;
    let mut last: Option<(u32, u64)> = None;
    let mut agg: Option<Agg> = None;
    while let Some(Reverse((k, i, RowBits(row)))) = heap.pop() {
        if last.is_some_and(|l| l > k) {
            return Err(Error::Check(format!(
                "the merge went backwards at row {rows}: {last:?} before {k:?}"
            )));
        }
        last = Some(k);
        row.encode(&mut b);
        w.write_all(&b)
            .map_err(|e| Error::io("write", &sorted, e))?;
        rows += 1;
        match &mut agg {
            Some(a) if a.group == row.group => a.add(row.x[1]),
            _ => {
                if let Some(a) = agg.take() {
                    csv.push_str(&a.line());
                }
                groups += 1;
                let mut a = Agg::new(row.group);
                a.add(row.x[1]);
                agg = Some(a);
            }
        }
        if let Some(next) = next_row(&mut readers[i], &runs[i])? {
            heap.push(Reverse((next.sort_key(), i, RowBits(next))));
        }
    }
    if let Some(a) = agg {
        csv.push_str(&a.line());
    }
    w.flush().map_err(|e| Error::io("write", &sorted, e))?;
    std::fs::write(&means, csv).map_err(|e| Error::io("write", &means, e))?;
    Ok((rows, groups))
}

/// A row in the merge heap: ordered only by the key beside it, so its floats need no order.
struct RowBits(Row);

impl PartialEq for RowBits {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for RowBits {}
impl PartialOrd for RowBits {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RowBits {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}
