//! NUMA: automatic NUMA balancing together with a running numad (two placers moving the same
//! pages), and processes whose memory spans nodes although it would fit in one
//! (`/proc/PID/numa_maps`).

use std::collections::BTreeMap;

use perfpilot_sys::process::ProcReader;
use perfpilot_units::bytes;

use super::{Ctx, Found, Refused, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const BALANCING: &str = "proc/sys/kernel/numa_balancing";
/// Resident memory from which a process's placement is worth a look.
const LARGE: u64 = 1 << 30;
/// The share of a process's memory a second node must hold for it to count as spanning.
const SPAN_SHARE: f64 = 0.1;
/// The share of a node's memory a process may take and still be said to fit in it.
const FITS_SHARE: f64 = 0.75;

/// Runs both checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    balancing_with_numad(ctx, found);
    spanning(ctx, found);
}

fn balancing_with_numad(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "numa_balancing";
    let value = match super::knob(ctx.fs, BALANCING) {
        Ok(Some(v)) => v,
        Ok(None) => {
            return found.skip(
                CHECK,
                format!("could not read /{BALANCING} (absent: a kernel without NUMA balancing)"),
            );
        }
        Err(e) => return found.skip_err(CHECK, &e),
    };
    if value == "0" {
        return;
    }
    let Some(numad) = ctx.procs.list.iter().find(|p| p.status.name == "numad") else {
        return;
    };
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("kernel.numa_balancing", &value, format!("/{BALANCING}")),
            Evidence::new("numad", format!("running as pid {}", numad.pid), format!("/proc/{}/status", numad.pid)),
        ],
        why: "Documentation/admin-guide/sysctl/kernel.rst (numa_balancing) and numad(8): both move processes and their pages between nodes, each undoing the other's placement".into(),
        effect: "one placer: pages stop migrating back and forth; fewer page faults from NUMA hinting".into(),
        apply: "sudo sysctl -w kernel.numa_balancing=0 && echo 'kernel.numa_balancing = 0' | sudo tee /etc/sysctl.d/90-perfpilot-numa.conf   # or stop numad: sudo systemctl disable --now numad".into(),
        verify: Verify::Study {
            file: crate::study::knob_study("numa-balancing", None, "balancing", &[BALANCING], &[&value, "0"]),
        },
        ..base(
            "numa.balancing-with-numad",
            "system",
            Severity::Warning,
            format!("automatic NUMA balancing ({value}) and numad (pid {}) both place memory", numad.pid),
        )
    });
}

fn spanning(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "numa_placement";
    let nodes = match perfpilot_sys::node::read_nodes(ctx.fs) {
        Ok(n) => n,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    if nodes.len() < 2 {
        return;
    }
    let smallest = nodes.iter().map(|n| n.mem_total).min().unwrap_or(0);
    let mut reader = ProcReader::new(ctx.fs);
    let mut refused = Refused::default();
    for p in &ctx.procs.list {
        let rss = p.status.vm_rss;
        if rss < LARGE || rss as f64 > FITS_SHARE * smallest as f64 {
            continue;
        }
        let ranges = match reader.numa_maps(p.pid) {
            Ok(r) => r,
            Err(e) => {
                refused.note(&e);
                continue;
            }
        };
        let mut per_node: BTreeMap<u32, u64> = BTreeMap::new();
        for r in &ranges {
            for (n, b) in r.bytes_per_node() {
                *per_node.entry(n).or_default() += b;
            }
        }
        let total: u64 = per_node.values().sum();
        let spans = per_node
            .values()
            .filter(|&&b| b as f64 >= SPAN_SHARE * total as f64)
            .count();
        if total == 0 || spans < 2 {
            continue;
        }
        let layout: Vec<String> = per_node
            .iter()
            .map(|(n, b)| format!("node {n}: {} ({})", bytes(*b), pct(*b, total)))
            .collect();
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("memory per node", layout.join(", "), format!("/proc/{}/numa_maps", p.pid)),
                Evidence::new("VmRSS", bytes(rss), format!("/proc/{}/status", p.pid)),
                Evidence::new("smallest node", bytes(smallest), "/sys/devices/system/node/node*/meminfo"),
            ],
            why: "seed 000 (IBM SPSS C&DS on POWER8: memory affinity with the binding) and seed 002 (AIX DSO: memory affinity optimization); Documentation/admin-guide/mm/numa_memory_policy.rst".into(),
            effect: "its memory and threads on one node: local memory accesses instead of remote ones".into(),
            apply: format!(
                "perfpilot daemon   # its memory_affinity strategy binds pid {} to one node and migrates its pages, and measures it; by hand: numactl --cpunodebind=N --membind=N COMMAND",
                p.pid
            ),
            verify: Verify::DaemonWillTry {
                strategy: "memory_affinity".into(),
            },
            strategy: Some("memory_affinity".into()),
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "numa.spans-nodes",
                p.subject(),
                Severity::Warning,
                format!("{} spread over {spans} nodes though one node holds {}", bytes(total), bytes(smallest)),
            )
        });
    }
    refused.report(CHECK, "memory placement of large processes", found);
}
