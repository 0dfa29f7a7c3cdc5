//! Adapters: turn the output of other load drivers into a [`Measurement`].
//!
//! Each adapter has a pure parser (`parse_*`, tested on captured output in `tests/fixtures`)
//! and a runner (`run_*`) that starts the tool, captures its output and stamps the window.
//! Figures a tool does not print stay `None` (no invented percentiles).

use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::error::DriveError;
use crate::measurement::{Latency, LoadShape, Measurement, SeriesPoint};

/// Output and timing of one external command.
#[derive(Clone, Debug)]
pub struct Captured {
    /// What it printed on standard output (lossily decoded as UTF-8).
    pub stdout: String,
    /// What it printed on standard error (lossily decoded as UTF-8).
    pub stderr: String,
    /// When it was started.
    pub start: SystemTime,
    /// When it exited.
    pub end: SystemTime,
}

/// Runs `program args…`, failing with its stderr when it exits non-zero.
pub fn run_captured(program: &str, args: &[String]) -> Result<Captured, DriveError> {
    let command = command_line(program, args);
    let start = SystemTime::now();
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| DriveError::Command {
            command: command.clone(),
            reason: format!("cannot be started: {e} (is it installed and on PATH?)"),
        })?;
    let end = SystemTime::now();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(DriveError::Command {
            command,
            reason: format!("failed ({}): {}", out.status, stderr.trim()),
        });
    }
    Ok(Captured {
        stdout,
        stderr,
        start,
        end,
    })
}

fn stamp(m: &mut Measurement, c: &Captured) {
    m.start = humantime::format_rfc3339_millis(c.start).to_string();
    m.end = humantime::format_rfc3339_millis(c.end).to_string();
    if m.duration_s == 0.0 {
        m.duration_s = c
            .end
            .duration_since(c.start)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
    }
}

fn describe(program: &str, args: &[String]) -> LoadShape {
    LoadShape::External {
        description: command_line(program, args),
    }
}

/// `program args…` as one line a shell would split back into the same words (an argument
/// with spaces or quotes is quoted); plainly joined if an argument holds a NUL, which no
/// shell line can carry.
fn command_line(program: &str, args: &[String]) -> String {
    let words = || std::iter::once(program).chain(args.iter().map(String::as_str));
    shlex::try_join(words()).unwrap_or_else(|_| words().collect::<Vec<_>>().join(" "))
}

fn perr(tool: &'static str, reason: impl Into<String>) -> DriveError {
    DriveError::Parse {
        tool,
        reason: reason.into(),
    }
}

/// Parses `84.00us`, `3.15ms`, `1.20s`, `2.00m` into milliseconds.
fn wrk_time_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    for (suffix, scale) in [
        ("us", 1e-3),
        ("ms", 1.0),
        ("s", 1e3),
        ("m", 60e3),
        ("h", 3600e3),
    ] {
        if let Some(n) = s.strip_suffix(suffix)
            && let Ok(v) = n.parse::<f64>()
        {
            return Some(v * scale);
        }
    }
    None
}

/// Parses `36.00MB`, `512B`, `1.2k` into a plain number.
fn wrk_amount(s: &str) -> Option<f64> {
    let s = s.trim();
    for (suffix, scale) in [
        ("GB", 1024.0 * 1024.0 * 1024.0),
        ("MB", 1024.0 * 1024.0),
        ("KB", 1024.0),
        ("B", 1.0),
        ("k", 1e3),
        ("M", 1e6),
    ] {
        if let Some(n) = s.strip_suffix(suffix)
            && let Ok(v) = n.parse::<f64>()
        {
            return Some(v * scale);
        }
    }
    s.parse().ok()
}

/// Parses wrk's standard output (with or without `--latency`).
pub fn parse_wrk(stdout: &str) -> Result<Measurement, DriveError> {
    let mut m = Measurement::empty(
        "wrk",
        LoadShape::External {
            description: "wrk".to_string(),
        },
    );
    let mut lat = Latency::default();
    let mut responses: Option<u64> = None;
    let mut non2xx = 0u64;
    let mut in_distribution = false;
    for line in stdout.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ")
            && let Some((_, target)) = rest.split_once(" @ ")
        {
            m.targets.push(target.trim().to_string());
        } else if t.starts_with("Latency Distribution") {
            in_distribution = true;
        } else if let Some(rest) = t.strip_prefix("Latency ")
            && !in_distribution
        {
            let f: Vec<&str> = rest.split_whitespace().collect();
            lat.mean_ms = f.first().and_then(|v| wrk_time_ms(v));
            lat.stdev_ms = f.get(1).and_then(|v| wrk_time_ms(v));
            lat.max_ms = f.get(2).and_then(|v| wrk_time_ms(v));
        } else if in_distribution && t.contains('%') && !t.contains("requests") {
            let mut f = t.split_whitespace();
            let (Some(p), Some(v)) = (f.next(), f.next()) else {
                continue;
            };
            let v = wrk_time_ms(v);
            match p {
                "50%" => lat.p50_ms = v,
                "75%" => lat.p75_ms = v,
                "90%" => lat.p90_ms = v,
                "99%" => lat.p99_ms = v,
                _ => {}
            }
        } else if t.contains(" requests in ") {
            in_distribution = false;
            // "246746 requests in 2.10s, 36.00MB read"
            let mut f = t.split_whitespace();
            responses = f.next().and_then(|n| n.parse().ok());
            let secs = t
                .split(" requests in ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(wrk_time_ms)
                .map(|ms| ms / 1000.0);
            m.duration_s = secs.unwrap_or(0.0);
            if let Some(b) = t
                .split(", ")
                .nth(1)
                .and_then(|r| r.strip_suffix(" read"))
                .and_then(wrk_amount)
            {
                // wrk prints 2 decimals of MB: 43232788.48 bytes is not a measurement of a fraction.
                m.extra.insert("read_bytes".to_string(), b.round());
            }
        } else if let Some(n) = t.strip_prefix("Non-2xx or 3xx responses:") {
            non2xx = n
                .trim()
                .parse()
                .map_err(|_| perr("wrk", format!("bad line {t:?}")))?;
        } else if let Some(rest) = t.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let mut f = part.split_whitespace();
                if let (Some(kind), Some(n)) =
                    (f.next(), f.next().and_then(|n| n.parse::<u64>().ok()))
                    && n > 0
                {
                    *m.errors_by_kind.entry(kind.to_string()).or_default() += n;
                }
            }
        } else if let Some(v) = t.strip_prefix("Requests/sec:") {
            if let Ok(v) = v.trim().parse::<f64>() {
                m.extra.insert("responses_per_s".to_string(), v);
            }
        } else if let Some(v) = t.strip_prefix("Transfer/sec:")
            && let Some(b) = wrk_amount(v)
        {
            m.extra
                .insert("transfer_bytes_per_s".to_string(), b.round());
        }
    }
    let responses = responses
        .ok_or_else(|| perr("wrk", "no \"N requests in T\" line; is this wrk's output?"))?;
    if non2xx > 0 {
        m.errors_by_kind.insert("status".to_string(), non2xx);
    }
    let socket_errors: u64 = m
        .errors_by_kind
        .iter()
        .filter(|(k, _)| k.as_str() != "status")
        .map(|(_, v)| v)
        .sum();
    m.requests = responses + socket_errors;
    m.ok = responses.saturating_sub(non2xx);
    m.errors = m.requests - m.ok;
    m.throughput_rps = if m.duration_s > 0.0 {
        m.ok as f64 / m.duration_s
    } else {
        0.0
    };
    lat.count = Some(responses);
    m.latency = Some(lat);
    Ok(m)
}

/// Runs wrk with `args` (add `--latency` for percentiles) and parses its output.
pub fn run_wrk(args: &[String]) -> Result<Measurement, DriveError> {
    let c = run_captured("wrk", args)?;
    let mut m = parse_wrk(&c.stdout)?;
    m.load = describe("wrk", args);
    stamp(&mut m, &c);
    Ok(m)
}

fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.trim().strip_prefix(key).map(str::trim)
}

fn first_number(s: &str) -> Option<f64> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e' || c == '+'))
        .find(|t| !t.is_empty() && t.parse::<f64>().is_ok())
        .and_then(|t| t.parse().ok())
}

/// Parses pgbench's report (stdout) and its `--progress` lines (stderr, may be empty).
pub fn parse_pgbench(stdout: &str, stderr: &str) -> Result<Measurement, DriveError> {
    let mut m = Measurement::empty(
        "pgbench",
        LoadShape::External {
            description: "pgbench".to_string(),
        },
    );
    let mut lat = Latency::default();
    let mut processed: Option<u64> = None;
    let mut failed = 0u64;
    let mut tps: Option<f64> = None;
    for line in stdout.lines() {
        if let Some(v) = after(line, "number of transactions actually processed:") {
            // "9908" or "200/200"
            processed = v.split('/').next().and_then(|n| n.trim().parse().ok());
        } else if let Some(v) = after(line, "number of failed transactions:") {
            failed = v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if let Some(v) = after(line, "latency average =") {
            lat.mean_ms = first_number(v);
        } else if let Some(v) = after(line, "latency stddev =") {
            lat.stdev_ms = first_number(v);
        } else if let Some(v) = after(line, "tps =") {
            tps = first_number(v);
        } else if let Some(v) = after(line, "duration:") {
            m.duration_s = first_number(v).unwrap_or(0.0);
        } else if let Some(v) = after(line, "number of clients:") {
            if let Some(n) = first_number(v) {
                m.extra.insert("clients".to_string(), n);
            }
        } else if let Some(v) = after(line, "initial connection time =")
            && let Some(n) = first_number(v)
        {
            m.extra.insert("initial_connection_ms".to_string(), n);
        }
    }
    let processed = processed.ok_or_else(|| {
        perr(
            "pgbench",
            "no \"number of transactions actually processed\" line; is this pgbench's report?",
        )
    })?;
    let tps = tps.ok_or_else(|| perr("pgbench", "no \"tps =\" line"))?;
    m.ok = processed;
    m.errors = failed;
    m.requests = processed + failed;
    if failed > 0 {
        m.errors_by_kind.insert("failed".to_string(), failed);
    }
    m.throughput_rps = tps;
    if m.duration_s == 0.0 && tps > 0.0 {
        m.duration_s = processed as f64 / tps;
    }
    lat.count = Some(processed);
    m.latency = Some(lat);
    // progress: 1.0 s, 3360.9 tps, lat 0.585 ms stddev 0.830, 0 failed
    let mut prev_t = 0.0;
    for line in stderr.lines() {
        let Some(rest) = after(line, "progress:") else {
            continue;
        };
        let fields: Vec<&str> = rest.split(',').map(str::trim).collect();
        let t = fields.first().and_then(|f| first_number(f));
        let tps = fields
            .iter()
            .find(|f| f.ends_with("tps"))
            .and_then(|f| first_number(f));
        let lat = fields
            .iter()
            .find(|f| f.starts_with("lat "))
            .and_then(|f| first_number(f));
        let failed = fields
            .iter()
            .find(|f| f.ends_with("failed"))
            .and_then(|f| first_number(f))
            .unwrap_or(0.0);
        if let (Some(t), Some(tps)) = (t, tps) {
            let span = (t - prev_t).max(0.0);
            prev_t = t;
            let ok = (tps * span).round() as u64;
            m.series.push(SeriesPoint {
                t_s: (t - span).max(0.0).round() as u64,
                requests: ok + failed as u64,
                ok,
                errors: failed as u64,
                mean_ms: lat,
                ..Default::default()
            });
        }
    }
    Ok(m)
}

/// Runs pgbench with `args` (add `-P 1` for the per-second series) and parses its output.
pub fn run_pgbench(args: &[String]) -> Result<Measurement, DriveError> {
    let c = run_captured("pgbench", args)?;
    let mut m = parse_pgbench(&c.stdout, &c.stderr)?;
    m.load = describe("pgbench", args);
    stamp(&mut m, &c);
    Ok(m)
}

/// Parses `redis-benchmark --csv` output: one measurement per test. `requests_per_test` is
/// redis-benchmark's `-n` (the CSV does not repeat it).
pub fn parse_redis_benchmark_csv(
    stdout: &str,
    requests_per_test: u64,
) -> Result<Vec<Measurement>, DriveError> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(stdout.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| perr("redis-benchmark", format!("CSV header: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (Some(test_col), Some(rps_col)) = (col("test"), col("rps")) else {
        return Err(perr(
            "redis-benchmark",
            "expected a CSV header with \"test\" and \"rps\" (run it with --csv)",
        ));
    };
    let mut out = Vec::new();
    for rec in reader.records() {
        let rec = rec.map_err(|e| perr("redis-benchmark", format!("CSV row: {e}")))?;
        let get = |i: Option<usize>| {
            i.and_then(|i| rec.get(i))
                .and_then(|v| v.parse::<f64>().ok())
        };
        let rps = get(Some(rps_col)).ok_or_else(|| perr("redis-benchmark", "a row has no rps"))?;
        let mut m = Measurement::empty(
            "redis-benchmark",
            LoadShape::External {
                description: "redis-benchmark".to_string(),
            },
        );
        m.name = rec.get(test_col).map(str::to_string);
        m.requests = requests_per_test;
        m.ok = requests_per_test;
        m.throughput_rps = rps;
        m.duration_s = if rps > 0.0 {
            requests_per_test as f64 / rps
        } else {
            0.0
        };
        m.latency = Some(Latency {
            count: Some(requests_per_test),
            mean_ms: get(col("avg_latency_ms")),
            min_ms: get(col("min_latency_ms")),
            p50_ms: get(col("p50_latency_ms")),
            p95_ms: get(col("p95_latency_ms")),
            p99_ms: get(col("p99_latency_ms")),
            max_ms: get(col("max_latency_ms")),
            ..Default::default()
        });
        out.push(m);
    }
    if out.is_empty() {
        return Err(perr("redis-benchmark", "no test rows in the CSV"));
    }
    Ok(out)
}

/// Runs redis-benchmark with `args` (`--csv` is added when missing) and parses each test.
pub fn run_redis_benchmark(args: &[String]) -> Result<Vec<Measurement>, DriveError> {
    let mut args = args.to_vec();
    if !args.iter().any(|a| a == "--csv") {
        args.push("--csv".to_string());
    }
    let n = args
        .iter()
        .position(|a| a == "-n")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let c = run_captured("redis-benchmark", &args)?;
    let mut ms = parse_redis_benchmark_csv(&c.stdout, n)?;
    for m in &mut ms {
        m.load = describe("redis-benchmark", &args);
        stamp(m, &c);
    }
    Ok(ms)
}

/// What the number a command prints means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberMeaning {
    /// Operations per second.
    Throughput,
    /// A latency in milliseconds.
    LatencyMs,
    /// Anything else: kept in `extra["value"]` only.
    Value,
}

/// The last number in `text` (`"score: 1234.5 ops/s"` → 1234.5).
pub fn last_number(text: &str) -> Option<f64> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '=' || c == ':')
        .filter_map(|t| {
            let t = t.trim_matches(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'));
            t.parse::<f64>().ok().filter(|v| v.is_finite())
        })
        .next_back()
}

/// Builds a measurement from a command's output.
pub fn parse_command_output(
    stdout: &str,
    meaning: NumberMeaning,
) -> Result<Measurement, DriveError> {
    let v = last_number(stdout).ok_or_else(|| perr("command", "printed no number"))?;
    let mut m = Measurement::empty(
        "command",
        LoadShape::External {
            description: "command".to_string(),
        },
    );
    m.extra.insert("value".to_string(), v);
    match meaning {
        NumberMeaning::Throughput => m.throughput_rps = v,
        NumberMeaning::LatencyMs => {
            m.latency = Some(Latency {
                mean_ms: Some(v),
                ..Default::default()
            })
        }
        NumberMeaning::Value => {}
    }
    Ok(m)
}

/// Runs `argv` and reads the last number it prints on stdout.
pub fn run_command(argv: &[String], meaning: NumberMeaning) -> Result<Measurement, DriveError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(DriveError::Command {
            command: String::new(),
            reason: "is empty".to_string(),
        });
    };
    let c = run_captured(program, args)?;
    let mut m = parse_command_output(&c.stdout, meaning).map_err(|_| DriveError::Command {
        command: command_line(program, args),
        reason: format!("printed no number on stdout: {:?}", c.stdout.trim()),
    })?;
    m.load = describe(program, args);
    stamp(&mut m, &c);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = include_str!("../tests/fixtures/wrk-latency.txt");
    const WRK_PLAIN: &str = include_str!("../tests/fixtures/wrk-plain.txt");
    const WRK_404: &str = include_str!("../tests/fixtures/wrk-non2xx.txt");
    const PG_OUT: &str = include_str!("../tests/fixtures/pgbench.stdout");
    const PG_ERR: &str = include_str!("../tests/fixtures/pgbench.stderr");
    const REDIS: &str = include_str!("../tests/fixtures/redis-benchmark.csv");

    #[test]
    fn wrk_with_latency_distribution() {
        let m = parse_wrk(WRK).unwrap();
        assert_eq!(m.requests, 246_746);
        assert_eq!(m.ok, 246_746);
        assert_eq!(m.targets, vec!["http://127.0.0.1:18181/".to_string()]);
        assert!((m.duration_s - 2.10).abs() < 1e-9);
        let l = m.latency.unwrap();
        assert_eq!(l.p50_ms, Some(0.084));
        assert_eq!(l.p99_ms, Some(3.15));
        assert!((l.mean_ms.unwrap() - 0.2216).abs() < 1e-9);
        assert_eq!(l.max_ms, Some(8.07));
        assert_eq!(l.p99_9_ms, None);
        assert_eq!(m.extra["responses_per_s"], 117_542.76);
    }

    #[test]
    fn wrk_plain_and_non2xx() {
        let m = parse_wrk(WRK_PLAIN).unwrap();
        assert_eq!(m.requests, 94_887);
        assert_eq!(m.latency.unwrap().p50_ms, None);
        let m = parse_wrk(WRK_404).unwrap();
        assert_eq!(m.ok, 0);
        assert_eq!(m.errors, 121_999);
        assert_eq!(m.errors_by_kind["status"], 121_999);
        assert_eq!(m.throughput_rps, 0.0);
        assert!(parse_wrk("hello").is_err());
    }

    #[test]
    fn pgbench_report_and_progress() {
        let m = parse_pgbench(PG_OUT, PG_ERR).unwrap();
        assert_eq!(m.ok, 9908);
        assert_eq!(m.errors, 0);
        assert!((m.throughput_rps - 3314.542673).abs() < 1e-6);
        assert_eq!(m.duration_s, 3.0);
        let l = m.latency.unwrap();
        assert_eq!(l.mean_ms, Some(0.602));
        assert_eq!(l.stdev_ms, Some(0.872));
        assert_eq!(m.series.len(), 3);
        assert_eq!(m.series[0].t_s, 0);
        assert_eq!(m.series[1].ok, 2966);
        assert_eq!(m.series[2].mean_ms, Some(0.558));
        assert_eq!(m.extra["clients"], 2.0);
        assert!(parse_pgbench("nothing", "").is_err());
    }

    #[test]
    fn redis_benchmark_csv() {
        let ms = parse_redis_benchmark_csv(REDIS, 2000).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].name.as_deref(), Some("SET"));
        assert_eq!(ms[0].throughput_rps, 124_999.99);
        assert_eq!(ms[1].latency.as_ref().unwrap().p99_ms, Some(0.087));
        assert!(parse_redis_benchmark_csv("a,b\n1,2\n", 10).is_err());
    }

    #[test]
    fn command_lines_quote_the_arguments_that_need_it() {
        let args = ["-c".to_string(), "echo 'a b'".to_string()];
        assert_eq!(command_line("sh", &args), r#"sh -c "echo 'a b'""#);
        assert_eq!(
            command_line("wrk", &["-t1".into(), "http://h/".into()]),
            "wrk -t1 http://h/"
        );
        assert_eq!(command_line("x", &["a\0b".into()]), "x a\0b");
    }

    #[test]
    fn command_numbers() {
        assert_eq!(last_number("score: 1234.5 ops/s\n"), Some(1234.5));
        assert_eq!(last_number("a=1, b=2"), Some(2.0));
        assert_eq!(last_number("none"), None);
        let m = parse_command_output("42\n", NumberMeaning::Throughput).unwrap();
        assert_eq!(m.throughput_rps, 42.0);
        let m = parse_command_output("lat 3.5", NumberMeaning::LatencyMs).unwrap();
        assert_eq!(m.latency.unwrap().mean_ms, Some(3.5));
        assert!(parse_command_output("nothing", NumberMeaning::Value).is_err());
    }
}
