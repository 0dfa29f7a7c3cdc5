//! `perfpilot topology`: the machine as nodes → LLC domains → cores → CPUs.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use perfpilot_observe::{Fs, Topology};

use crate::fmt;

#[derive(Args)]
pub struct TopologyArgs {
    /// Print JSON instead of the tree.
    #[arg(long)]
    json: bool,
    /// Read a captured tree instead of the live system (its `sys/` and `proc/`).
    #[arg(long, value_name = "DIR", hide = true)]
    root: Option<PathBuf>,
}

pub fn run(a: TopologyArgs) -> anyhow::Result<()> {
    let fs = a.root.map(Fs::at).unwrap_or_default();
    let topo = Topology::read(&fs).context("reading the topology")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&topo)?);
        return Ok(());
    }
    print!("{}", render(&topo));
    Ok(())
}

/// The tree view (the `lssrad -av` of the source studies, with caches and SMT siblings).
pub fn render(t: &Topology) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let llcs = t.llcs().count();
    let cores = t.cores().count();
    let _ = writeln!(
        s,
        "{} node{}, {} LLC domain{}, {} core{}, {} logical CPU{} online (SMT {})",
        t.nodes.len(),
        plural(t.nodes.len()),
        llcs,
        plural(llcs),
        cores,
        plural(cores),
        t.online.len(),
        plural(t.online.len()),
        t.smt_width()
    );
    let _ = writeln!(
        s,
        "online {}   offline {}   isolated {}",
        fmt::cpus(&t.online),
        fmt::cpus(&t.offline),
        fmt::cpus(&t.isolated)
    );
    if let Some(gap) = &t.memory_gap {
        let _ = writeln!(s, "memory: {}", gap.describe(fmt::bytes));
    }
    for n in &t.nodes {
        let dist: Vec<String> = n.distances.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(
            s,
            "node {}   cpus {}   memory {} (free {})   distances {}",
            n.id,
            fmt::cpus(&n.cpus),
            fmt::bytes(n.mem_total),
            fmt::bytes(n.mem_free),
            dist.join(" ")
        );
        for l in &n.llcs {
            let size = l
                .size_bytes
                .map(fmt::bytes)
                .unwrap_or_else(|| "size unknown".into());
            let level = if l.level > 0 {
                format!("L{}", l.level)
            } else {
                "no cache info".into()
            };
            let _ = writeln!(
                s,
                "  llc {:<3} {level} {size}   cpus {}",
                l.id,
                fmt::cpus(&l.cpus)
            );
            for c in &l.cores {
                let _ = writeln!(
                    s,
                    "    core {:<4} package {}   cpus {}",
                    c.id,
                    c.package,
                    fmt::cpus(&c.cpus)
                );
            }
        }
    }
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
