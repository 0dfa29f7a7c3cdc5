//! `perfpilot observe`: a live view of the machine (mpstat + top + svmon + iostat + sar in one).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Args;
use perfpilot_observe::rates::DiskRate;
use perfpilot_observe::report::{Frame, ProcView, Watch, WatchConfig};
use perfpilot_observe::{Fs, Topology};
use perfpilot_sys::perf::Event;
use serde::Serialize;

use crate::fmt;

#[derive(Args)]
pub struct ObserveArgs {
    /// Time between reports (e.g. 2s, 500ms, 1m).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Stop after this many reports, at least 1 (default: run until interrupted).
    #[arg(long, short = 'n', value_parser = report_count)]
    count: Option<u64>,
    /// Only these processes (repeatable); their memory placement is read on every report.
    #[arg(long = "pid", short = 'p', value_name = "PID")]
    pids: Vec<i32>,
    /// How many processes to show, by CPU.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Show each shown process's threads.
    #[arg(long)]
    threads: bool,
    /// How many of the top processes get the expensive memory readings (numa_maps, smaps_rollup).
    #[arg(long, default_value_t = 5)]
    memory_top: usize,
    /// Take the expensive memory readings every N-th report.
    #[arg(long, default_value_t = 5)]
    memory_every: u32,
    /// One JSON object per report (JSON Lines) instead of tables.
    #[arg(long)]
    json: bool,
}

/// `--count`: a number of reports, at least 1 (clap's own range message would quote
/// `u64::MAX`).
fn report_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => {
            Err("give at least 1 report, or leave --count out to run until interrupted".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(format!("expected a number of reports, at least 1 ({e})")),
    }
}

/// A frame as JSON: its time as RFC 3339, then the frame's fields.
#[derive(Serialize)]
struct JsonFrame<'a> {
    time: String,
    #[serde(flatten)]
    frame: &'a Frame,
}

pub fn run(a: ObserveArgs) -> anyhow::Result<()> {
    let mut watch = Watch::start(
        &Fs::live(),
        WatchConfig {
            interval: a.interval,
            top: a.top,
            threads: a.threads,
            pids: a.pids.clone(),
            memory_top: a.memory_top,
            memory_every: a.memory_every,
        },
    )?;
    // Said once, before the first report. A terminal's screen is redrawn on every report, so
    // there the notes stay at its foot (one copy on the screen); a pipe or file gets them once.
    for n in watch.notes() {
        eprintln!("note: {n}");
    }
    let tty = std::io::stdout().is_terminal() && !a.json;
    let foot = if tty {
        watch.notes().to_vec()
    } else {
        Vec::new()
    };
    let mut n = 0;
    loop {
        if a.count.is_some_and(|c| n >= c) {
            break;
        }
        std::thread::sleep(a.interval);
        let frame = watch.next_frame()?;
        let mut out = std::io::stdout().lock();
        if a.json {
            let json = JsonFrame {
                time: fmt::time_ms(frame.time_ms),
                frame: &frame,
            };
            serde_json::to_writer(&mut out, &json)?;
            writeln!(out)?;
        } else {
            if tty {
                write!(out, "\x1b[H\x1b[2J")?;
            }
            write!(out, "{}", render(&frame, watch.topology(), &foot))?;
        }
        out.flush()?;
        n += 1;
    }
    Ok(())
}

fn render(f: &Frame, topo: &Topology, notes: &[String]) -> String {
    let mut o = String::new();
    cpu_table(&mut o, f, topo);
    process_table(&mut o, f);
    thread_table(&mut o, f, topo);
    memory_table(&mut o, f, topo);
    disk_table(&mut o, f);
    net_table(&mut o, f);
    foot(&mut o, f, notes);
    o
}

/// The heading and the CPUs' busy shares, all of them first.
fn cpu_table(o: &mut String, f: &Frame, topo: &Topology) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "perfpilot observe   {}   interval {:.1} s   {} CPUs online",
        fmt::time_ms(f.time_ms),
        f.interval_s,
        topo.online.len()
    );
    let _ = writeln!(
        o,
        "\n{:<5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>10}",
        "CPU", "busy%", "usr%", "sys%", "irq%", "steal%", "iowait%", "ctxsw/s"
    );
    for c in std::iter::once(&f.total).chain(f.cpus.iter()) {
        let name = c.cpu.map(|n| n.to_string()).unwrap_or_else(|| "all".into());
        let cs = c
            .ctxt_per_s
            .map(|v| format!("{v:.0}"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "{name:<5} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>7.1} {cs:>10}",
            c.busy, c.user, c.system, c.irq, c.steal, c.iowait
        );
    }
}

/// The processes' rates, with their PMU figures where counted.
fn process_table(o: &mut String, f: &Frame) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "\n{:>7} {:<16} {:>6} {:>6} {:>6} {:>4} {:>5} {:>10} {:>4} {:>9} {:>9} {:>9}",
        "PID",
        "COMMAND",
        "CPU%",
        "usr%",
        "sys%",
        "CPU",
        "node",
        "RSS",
        "THR",
        "ctxsw/s",
        "read/s",
        "write/s"
    );
    for p in &f.processes {
        let r = &p.rate;
        let node = p
            .last_cpu_node
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let last = r
            .processor
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let io = |v: Option<f64>| {
            v.map(|b| fmt::bytes(b as u64))
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(
            o,
            "{:>7} {:<16} {:>6.1} {:>6.1} {:>6.1} {last:>4} {node:>5} {:>10} {:>4} {:>9.0} {:>9} {:>9}",
            r.pid,
            fmt::trunc(&r.comm, 16),
            r.cpu,
            r.user,
            r.system,
            fmt::bytes(r.rss),
            r.threads,
            r.ctxt_per_s,
            io(r.read_bytes_per_s),
            io(r.write_bytes_per_s)
        );
        if let (Some(pmu), Some(cpi)) = (&p.pmu, p.cpi()) {
            let g = |e: Event| pmu.get(&e).copied().unwrap_or(0.0);
            let _ = writeln!(
                o,
                "{:>7} PMU: CPI {cpi:.2}, {:.0} LLC misses/s, {:.0} dTLB misses/s",
                "",
                g(Event::LlcMisses),
                g(Event::DtlbMisses)
            );
        }
    }
}

/// The threads' rates, where threads are shown.
fn thread_table(o: &mut String, f: &Frame, topo: &Topology) {
    use std::fmt::Write;
    if !f.threads.is_empty() {
        let _ = writeln!(
            o,
            "\n{:>7} {:>7} {:<16} {:>6} {:>6} {:>6} {:>4} {:>5} {:>3}",
            "PID", "TID", "THREAD", "CPU%", "usr%", "sys%", "CPU", "node", "S"
        );
        for t in &f.threads {
            let last = t
                .processor
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into());
            let node = t
                .processor
                .and_then(|c| topo.locate(c))
                .map(|l| l.node.to_string())
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                o,
                "{:>7} {:>7} {:<16} {:>6.1} {:>6.1} {:>6.1} {last:>4} {node:>5} {:>3}",
                t.pid,
                t.tid,
                fmt::trunc(&t.comm, 16),
                t.cpu,
                t.user,
                t.system,
                t.state
            );
        }
    }
}

/// The processes whose memory was read: per node, anonymous, huge-page coverage, shared memory.
fn memory_table(o: &mut String, f: &Frame, topo: &Topology) {
    use std::fmt::Write;
    let nodes: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
    let with_mem: Vec<&ProcView> = f.processes.iter().filter(|p| p.memory.is_some()).collect();
    if !with_mem.is_empty() {
        let _ = write!(o, "\n{:>7} {:<16}", "PID", "MEMORY (MiB)");
        for n in &nodes {
            let _ = write!(o, " {:>9}", format!("node{n}"));
        }
        let _ = writeln!(
            o,
            " {:>9} {:>10} {:>10} {:>6}  SHM",
            "anon", "anon-huge", "shmem-pmd", "age"
        );
        for p in with_mem {
            let Some(m) = &p.memory else { continue };
            let _ = write!(o, "{:>7} {:<16}", p.rate.pid, fmt::trunc(&p.rate.comm, 16));
            for n in &nodes {
                let _ = write!(
                    o,
                    " {:>9}",
                    fmt::mib(m.per_node.get(n).copied().unwrap_or(0))
                );
            }
            let shm: Vec<String> = m
                .shm
                .iter()
                .map(|s| match s {
                    perfpilot_sys::process::ShmAttach::Sysv { key, shmid } => {
                        format!("sysv:{key:#x}/{shmid}")
                    }
                    perfpilot_sys::process::ShmAttach::Posix { path } => path.clone(),
                    perfpilot_sys::process::ShmAttach::SharedAnon { inode } => {
                        format!("/dev/zero:{inode}")
                    }
                })
                .collect();
            let _ = writeln!(
                o,
                " {:>9} {:>9.0}% {:>10} {:>5.0}s  {}",
                fmt::mib(m.rollup.anonymous),
                m.anon_huge_coverage() * 100.0,
                fmt::mib(m.rollup.shmem_pmd_mapped),
                p.memory_age_s.unwrap_or(0.0),
                if shm.is_empty() {
                    "-".into()
                } else {
                    shm.join(",")
                }
            );
        }
    }
}

/// The disks' rates (idle loop devices left out).
fn disk_table(o: &mut String, f: &Frame) {
    use std::fmt::Write;
    let busy_disks: Vec<&DiskRate> = f
        .disks
        .iter()
        .filter(|d| d.reads_per_s + d.writes_per_s > 0.0 || !d.device.starts_with("loop"))
        .collect();
    if !busy_disks.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}",
            "DEVICE", "r/s", "w/s", "rMB/s", "wMB/s", "await", "svc-ms", "util%", "queue"
        );
        for d in busy_disks {
            let _ = writeln!(
                o,
                "{:<10} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6.1} {:>6.2}",
                d.device,
                d.reads_per_s,
                d.writes_per_s,
                d.read_mb_per_s,
                d.write_mb_per_s,
                d.await_ms,
                d.service_ms,
                d.util,
                d.queue
            );
        }
    }
}

/// The network interfaces' rates.
fn net_table(o: &mut String, f: &Frame) {
    use std::fmt::Write;
    if !f.nets.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<12} {:>10} {:>10} {:>9} {:>9}",
            "INTERFACE", "rx pkt/s", "tx pkt/s", "rxMB/s", "txMB/s"
        );
        for n in &f.nets {
            let _ = writeln!(
                o,
                "{:<12} {:>10.1} {:>10.1} {:>9.3} {:>9.3}",
                n.interface, n.rx_packets_per_s, n.tx_packets_per_s, n.rx_mb_per_s, n.tx_mb_per_s
            );
        }
    }
}

/// Pressure, memory, what could not be read, and the notes.
fn foot(o: &mut String, f: &Frame, notes: &[String]) {
    use std::fmt::Write;
    let psi = |name: &str, p: &Option<perfpilot_sys::stat::Pressure>| match p {
        Some(p) => {
            let full = p
                .full
                .map(|f| format!(" full {:.2}%", f.avg10))
                .unwrap_or_default();
            format!("{name} some {:.2}%{full}", p.some.avg10)
        }
        None => format!("{name} n/a"),
    };
    let _ = writeln!(
        o,
        "\nPSI avg10   {}   {}   {}",
        psi("cpu", &f.pressure.cpu),
        psi("memory", &f.pressure.memory),
        psi("io", &f.pressure.io)
    );
    let m = &f.memory;
    let _ = writeln!(
        o,
        "memory {} total, {} available, AnonHugePages {}, ShmemPmdMapped {}",
        fmt::bytes(m.total),
        fmt::bytes(m.available),
        fmt::bytes(m.anon_huge),
        fmt::bytes(m.shmem_pmd_mapped)
    );
    let sk = &f.skips;
    if sk.vanished + sk.permission + sk.malformed + sk.other > 0 {
        let _ = writeln!(
            o,
            "skipped: {} exited while read, {} not permitted, {} malformed, {} other",
            sk.vanished, sk.permission, sk.malformed, sk.other
        );
        for msg in &sk.messages {
            let _ = writeln!(o, "  {msg}");
        }
    }
    for n in notes {
        let _ = writeln!(o, "note: {n}");
    }
}
