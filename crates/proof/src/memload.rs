//! The harness's memcached load: Debian 12's libmemcached-tools has `memcslap`/`memcaslap`, but
//! they print no latency percentiles, so this is a small closed loop of its own over memcached's
//! text protocol: one thread per connection, one request in flight each, keys drawn uniformly
//! from the dataset, a share of sets; ops/s and percentiles from an HDR histogram, printed as a
//! perfpilot-drive Measurement.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use perfpilot_drive::{Latency, LoadShape, Measurement};
use perfpilot_stats::Rng;

use crate::options::MemcachedLoadArgs;

/// One connection's figures.
struct Tally {
    ok: u64,
    errors: u64,
    hist: Histogram<u64>,
}

fn connect(addr: &str) -> Result<(BufReader<TcpStream>, TcpStream)> {
    let s = TcpStream::connect(addr)
        .with_context(|| format!("connecting to memcached at {addr}: is it up?"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok((BufReader::new(s.try_clone()?), s))
}

/// Reads one reply to a `get`: `VALUE … bytes` + data, then `END` (a miss is just `END`).
fn read_get(r: &mut BufReader<TcpStream>, line: &mut String) -> Result<bool> {
    line.clear();
    r.read_line(line)?;
    if line.starts_with("END") {
        return Ok(true);
    }
    let Some(n) = line
        .strip_prefix("VALUE ")
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse::<usize>().ok())
    else {
        bail!("memcached answered a get with {:?}", line.trim_end());
    };
    let mut data = vec![0u8; n + 2];
    r.read_exact(&mut data)?;
    line.clear();
    r.read_line(line)?;
    Ok(line.starts_with("END"))
}

fn set_command(key: u64, value: &[u8]) -> Vec<u8> {
    let mut c = format!("set key:{key} 0 0 {}\r\n", value.len()).into_bytes();
    c.extend_from_slice(value);
    c.extend_from_slice(b"\r\n");
    c
}

/// Stores keys `from..to`, 500 sets a batch.
fn populate_range(addr: &str, from: u64, to: u64, value: &[u8]) -> Result<()> {
    let (mut r, s) = connect(addr)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, s);
    let mut line = String::new();
    let mut k = from;
    while k < to {
        let end = (k + 500).min(to);
        for i in k..end {
            w.write_all(&set_command(i, value))?;
        }
        w.flush()?;
        for _ in k..end {
            line.clear();
            r.read_line(&mut line)?;
            if !line.starts_with("STORED") {
                bail!(
                    "memcached refused a set while populating: {:?} (is -m large enough for the dataset?)",
                    line.trim_end()
                );
            }
        }
        k = end;
    }
    Ok(())
}

fn run_connection(a: &MemcachedLoadArgs, id: usize, end: Instant) -> Result<Tally> {
    let (mut r, mut s) = connect(&a.addr)?;
    let mut rng = Rng::new(0x6d656d63 ^ id as u64);
    let value = vec![b'v'; a.value];
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
    let (mut ok, mut errors) = (0u64, 0u64);
    let mut line = String::new();
    while Instant::now() < end {
        let key = rng.next_u64() % a.keys.max(1);
        let t0 = Instant::now();
        let good = if rng.next_f64() < a.set_ratio {
            s.write_all(&set_command(key, &value))?;
            line.clear();
            r.read_line(&mut line)?;
            line.starts_with("STORED")
        } else {
            s.write_all(format!("get key:{key}\r\n").as_bytes())?;
            read_get(&mut r, &mut line)?
        };
        let us = t0.elapsed().as_micros() as u64;
        let _ = hist.record(us.max(1));
        if good { ok += 1 } else { errors += 1 }
    }
    Ok(Tally { ok, errors, hist })
}

/// Runs the load (or the populate) described by `a` and writes its Measurement.
pub fn main(a: &MemcachedLoadArgs) -> Result<()> {
    let conns = a.connections.max(1);
    if a.populate {
        let value = vec![b'v'; a.value];
        let per = a.keys.div_ceil(conns as u64);
        let handles: Vec<_> = (0..conns as u64)
            .map(|i| {
                let (addr, value) = (a.addr.clone(), value.clone());
                let (from, to) = (i * per, ((i + 1) * per).min(a.keys));
                std::thread::spawn(move || populate_range(&addr, from, to, &value))
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a populating thread panicked"))??;
        }
        return Ok(());
    }
    let start = SystemTime::now();
    let t0 = Instant::now();
    let end = t0 + a.duration;
    let handles: Vec<_> = (0..conns)
        .map(|i| {
            let a = a.clone();
            std::thread::spawn(move || run_connection(&a, i, end))
        })
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
    let (mut ok, mut errors) = (0u64, 0u64);
    for h in handles {
        let t = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        ok += t.ok;
        errors += t.errors;
        hist.add(&t.hist).context("merging histograms")?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut m = Measurement::empty(
        "memcached-load",
        LoadShape::External {
            description: format!(
                "perfpilot-proof memcached-load --addr {} --keys {} --value {} --connections {conns} --set-ratio {}",
                a.addr, a.keys, a.value, a.set_ratio
            ),
        },
    );
    m.targets = vec![a.addr.clone()];
    m.start = humantime::format_rfc3339_millis(start).to_string();
    m.end = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    m.duration_s = secs;
    m.requests = ok + errors;
    m.ok = ok;
    m.errors = errors;
    m.throughput_rps = if secs > 0.0 { ok as f64 / secs } else { 0.0 };
    let ms = |q: f64| Some(hist.value_at_quantile(q) as f64 / 1000.0);
    m.latency = (!hist.is_empty()).then(|| Latency {
        count: Some(hist.len()),
        mean_ms: Some(hist.mean() / 1000.0),
        min_ms: Some(hist.min() as f64 / 1000.0),
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        p99_9_ms: ms(0.999),
        max_ms: Some(hist.max() as f64 / 1000.0),
        ..Default::default()
    });
    let text = m.to_json();
    if a.json.as_os_str() == "-" {
        println!("{text}");
    } else {
        std::fs::write(&a.json, text + "\n")
            .with_context(|| format!("writing {}", a.json.display()))?;
    }
    Ok(())
}
