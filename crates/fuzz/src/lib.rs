//! Fuzz targets: every parser of input from outside perfpilot (procfs and sysfs files, the
//! Prometheus text format, the outputs of load drivers, signal traces, JMVA XML, model, study and daemon files,
//! the Measurement JSON, the lines workers and coordinators send and their framing, the
//! presets' clients of MySQL, Redis, memcached and nginx, the exporter's web config, the
//! store's stored blobs and journal entries), each behind one
//! function that must return for any bytes: an error is fine, a panic is the bug.
//!
//! `fuzz/` runs them under libFuzzer (`scripts/fuzz [SECONDS]`); this crate's test replays the
//! corpus under `fuzz/corpus/TARGET/` and mutations of it as a smoke in CI.

use std::path::Path;

/// One fuzz target: its name (the corpus directory) and what it parses.
pub struct Target {
    /// The name, as `scripts/fuzz` and the corpus directory call it.
    pub name: &'static str,
    /// What it parses.
    pub parses: &'static str,
    /// The function under test.
    pub run: fn(&[u8]),
}

fn text(data: &[u8]) -> &str {
    // Most readers take text; invalid UTF-8 is cut at the first bad byte (the readers' callers
    // turn such files into errors before parsing).
    match std::str::from_utf8(data) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    }
}

fn path() -> &'static Path {
    Path::new("/fuzz/input")
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "proc_stat",
        parses: "/proc/PID/stat and task stat",
        run: |d| {
            let _ = perfpilot_sys::process::parse_stat(d, path());
        },
    },
    Target {
        name: "proc_status",
        parses: "/proc/PID/status and /proc/PID/io",
        run: |d| {
            let _ = perfpilot_sys::process::parse_status(text(d), path());
            let _ = perfpilot_sys::process::parse_io(text(d), path());
        },
    },
    Target {
        name: "smaps_rollup",
        parses: "/proc/PID/smaps_rollup",
        run: |d| {
            let _ = perfpilot_sys::process::parse_smaps_rollup(text(d), path());
        },
    },
    Target {
        name: "numa_maps",
        parses: "/proc/PID/numa_maps",
        run: |d| {
            if let Ok(ranges) = perfpilot_sys::process::parse_numa_maps(text(d), path()) {
                // As the sampler adds them up per node.
                let mut total = 0u64;
                for r in &ranges {
                    for (_, bytes) in r.bytes_per_node() {
                        total = total.saturating_add(bytes);
                    }
                }
                std::hint::black_box(total);
            }
        },
    },
    Target {
        name: "maps",
        parses: "/proc/PID/maps (ranges and System V shared memory attachments)",
        run: |d| {
            if let Ok(ranges) = perfpilot_sys::process::parse_maps(text(d), path()) {
                for r in ranges {
                    let _ = r.collapsible(2 << 20);
                }
            }
            let _ = perfpilot_sys::process::parse_maps_shm(text(d), path());
        },
    },
    Target {
        name: "system_files",
        parses: "/proc/stat, /proc/diskstats, /proc/net/dev, /proc/net/tcp, /proc/net/unix, /proc/sysvipc/shm",
        run: |d| {
            let t = text(d);
            let _ = perfpilot_sys::stat::parse_kernel_stat(t, path());
            let _ = perfpilot_sys::block::parse_diskstats(t, path());
            let _ = perfpilot_sys::net::parse_net_dev(t, path());
            let _ = perfpilot_sys::net::parse_tcp(t, path());
            let _ = perfpilot_sys::net::parse_unix(d, path());
            let _ = perfpilot_sys::ipc::parse_shm_segments(t, path());
        },
    },
    Target {
        name: "cpu_list",
        parses: "topology files (cpulist, online, node cpulists): the kernel's CPU list format",
        run: |d| {
            if let Ok(set) = perfpilot_sys::CpuSet::parse(text(d)) {
                let again = perfpilot_sys::CpuSet::parse(&set.to_string());
                assert_eq!(again.as_ref(), Ok(&set), "a CPU list does not read back");
            }
        },
    },
    Target {
        name: "prometheus",
        parses: "the Prometheus text format (probes and presets)",
        run: |d| {
            let page = perfpilot_optimize::signal::preset::prometheus::parse(text(d));
            for s in &page.samples {
                let _ = s.label("le");
            }
        },
    },
    Target {
        name: "signal_trace",
        parses: "a signal trace (`perfpilot bench verdicts`, scripts/signal-trace)",
        run: |d| {
            use perfpilot_optimize::trace;
            if let Ok(rows) = trace::parse(text(d), "fuzz") {
                let _ = trace::replay_readings(&rows, "fuzz", 1.0, &trace::ReplayPlan::default());
            }
        },
    },
    Target {
        name: "driver_outputs",
        parses: "wrk, pgbench and redis-benchmark outputs, and a command's printed number",
        run: |d| {
            let t = text(d);
            let _ = perfpilot_drive::adapters::parse_wrk(t);
            let _ = perfpilot_drive::adapters::parse_pgbench(t, t);
            let _ = perfpilot_drive::adapters::parse_redis_benchmark_csv(t, 1000);
        },
    },
    Target {
        name: "http1_response",
        parses: "HTTP/1.1 responses as drive's keep-alive client reads them: NUL-separated, one per request (the first byte picks the read size and HEAD)",
        run: |d| {
            let Some((&first, rest)) = d.split_first() else {
                return;
            };
            let step = [1, 2, 3, 7, 16, 61, 512, 16384][usize::from(first & 7)];
            let responses: Vec<&[u8]> = rest.split(|&b| b == 0).take(64).collect();
            let out = perfpilot_drive::replay_http1(&responses, step, first & 8 != 0);
            assert!(out.len() <= responses.len(), "more exchanges than requests");
            let (last, before) = out.split_last().unwrap_or((&Ok(200), &[]));
            for r in before {
                // Only the last exchange may fail: a failure ends the connection.
                assert!(matches!(r, Ok(s) if *s < 1000), "{r:?} before the last");
            }
            assert!(
                !matches!(last, Ok(s) if *s >= 1000),
                "a status of four digits"
            );
        },
    },
    Target {
        name: "jmva",
        parses: "JMT's JMVA XML",
        run: |d| {
            if let Ok(net) = perfpilot_model::jmva::read(text(d)) {
                let _ = perfpilot_model::jmva::write(&net);
            }
        },
    },
    Target {
        name: "model_file",
        parses: "model files, TOML and JSON",
        run: |d| {
            let _ = perfpilot_model::ModelFile::parse_toml(text(d));
            let _ = perfpilot_model::ModelFile::parse_json(text(d));
        },
    },
    Target {
        name: "study_file",
        parses: "study files (TOML)",
        run: |d| {
            let _ = perfpilot_study::Study::parse(text(d), path());
        },
    },
    Target {
        name: "daemon_config",
        parses: "the daemon's configuration (TOML)",
        run: |d| {
            let _ = perfpilot_optimize::DaemonConfig::parse(text(d), path());
        },
    },
    Target {
        name: "measurement_json",
        parses: "the Measurement JSON (drive results, study trials)",
        run: |d| {
            let _ = perfpilot_drive::Measurement::from_json(text(d));
        },
    },
    Target {
        name: "worker_messages",
        parses: "the lines coordinators and workers send (`study worker`, `drive --worker`)",
        run: |d| {
            use perfpilot_drive::coord::wire::Msg;
            use perfpilot_fetch::lines::recv;
            use perfpilot_study::hosts::wire::{Reply, Request};
            let mut r = std::io::BufReader::new(d);
            let _ = recv::<Request>(&mut r);
            let mut r = std::io::BufReader::new(d);
            let _ = recv::<Reply>(&mut r);
            let mut r = std::io::BufReader::new(d);
            let _ = recv::<Msg>(&mut r);
        },
    },
    Target {
        name: "worker_framing",
        parses: "the framing of the worker protocols: lines read in pieces of any size (the first byte picks it), a line over the limit refused, every message kind of both protocols tried",
        run: |d| {
            use perfpilot_drive::coord::wire::Msg;
            use perfpilot_fetch::lines::{MAX_MESSAGE, recv};
            use perfpilot_study::hosts::wire::{Reply, Request};
            let Some((&first, rest)) = d.split_first() else {
                return;
            };
            let capacity = [1, 2, 3, 7, 64, 4096][usize::from(first % 6)];
            let mut r = std::io::BufReader::with_capacity(capacity, rest);
            let mut lines = 0;
            loop {
                let got = match first & 0x30 {
                    0x00 => recv::<Msg>(&mut r).map(|m| m.is_some()),
                    0x10 => recv::<Request>(&mut r).map(|m| m.is_some()),
                    _ => recv::<Reply>(&mut r).map(|m| m.is_some()),
                };
                match got {
                    Ok(true) => lines += 1,
                    Ok(false) => break,
                    // A bad line is the end of a session: nothing after it is read.
                    Err(_) => break,
                }
                assert!(lines <= rest.len(), "more messages than bytes");
            }
            assert!(rest.len() <= MAX_MESSAGE || lines <= rest.len() / 2 + 1);
        },
    },
    Target {
        name: "mysql_session",
        parses: "a MySQL or MariaDB server's bytes as the preset's client reads them: greeting, authentication exchange, the result set of SHOW GLOBAL STATUS (the first byte picks password and socket)",
        run: |d| {
            let _ = perfpilot_optimize::signal::preset::fuzzing::mysql(d);
        },
    },
    Target {
        name: "postgres_session",
        parses: "a PostgreSQL server's bytes as the preset's client reads them: authentication, parameter statuses, the row of its transactions query and ReadyForQuery (the first byte's low bit sets a password)",
        run: |d| {
            let _ = perfpilot_optimize::signal::preset::fuzzing::postgres(d);
        },
    },
    Target {
        name: "resp",
        parses: "RESP replies as the Redis preset reads them (AUTH, INFO stats)",
        run: |d| perfpilot_optimize::signal::preset::fuzzing::resp(d),
    },
    Target {
        name: "memcached_stats",
        parses: "a memcached `stats` answer",
        run: |d| {
            if let Some(v) = perfpilot_optimize::signal::preset::fuzzing::memcached_stats(d) {
                assert!(v >= 0.0, "a negative count {v}");
            }
        },
    },
    Target {
        name: "nginx_stub_status",
        parses: "an nginx `stub_status` page",
        run: |d| {
            let _ = perfpilot_optimize::signal::preset::fuzzing::nginx_stub_status(text(d));
        },
    },
    Target {
        name: "web_config",
        parses: "the exporter's web-config file (YAML, the exporter toolkit's format)",
        run: |d| {
            let _ = perfpilot_export::WebConfig::parse(text(d), Path::new("/nonexistent"));
        },
    },
    Target {
        name: "store_blob",
        parses: "a stored sample (the first byte picks the encoding, the next four the length)",
        run: |d| {
            if d.len() < 5 {
                return;
            }
            let raw_len = i64::from(u32::from_le_bytes([d[1], d[2], d[3], d[4]]) & 0xff_ffff);
            let _ = perfpilot_store::samples::decode(i64::from(d[0] % 3), raw_len, &d[5..]);
        },
    },
    Target {
        name: "journal_entry",
        parses: "the journal's `changes` and `undo` columns",
        run: |d| {
            let rec = perfpilot_store::ActionRecord {
                id: 1,
                signature: String::new(),
                workload: String::new(),
                strategy: String::new(),
                state: perfpilot_store::journal::ActionState::Trial,
                changes: text(d).to_string(),
                undo: text(d).to_string(),
                reason: String::new(),
                note: String::new(),
                verdict: None,
                created_ms: 0,
                updated_ms: 0,
            };
            let _ = perfpilot_optimize::journal::parse(&rec);
            let _ = serde_json::from_str::<Vec<perfpilot_sys::change::Undo>>(text(d));
        },
    },
];

/// Runs target `name` on `data`; false when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|t| t.name == name) {
        Some(t) => {
            (t.run)(data);
            true
        }
        None => false,
    }
}
