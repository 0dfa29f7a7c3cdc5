//! Virtual memory: `vm.swappiness` against processes with large anonymous memory, and
//! `vm.max_map_count` against the process with the most mappings (lines of `/proc/PID/maps`).

use perfpilot_units::{bytes, count};

use super::{Ctx, Found, Refused, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const SWAPPINESS: &str = "proc/sys/vm/swappiness";
const MAX_MAP_COUNT: &str = "proc/sys/vm/max_map_count";
const WHY_VM: &str = "Documentation/admin-guide/sysctl/vm.rst (kernel)";
/// Swappiness at or above which anonymous memory is swapped about as readily as page cache is
/// dropped (60 is the default).
const HIGH_SWAPPINESS: u64 = 30;
/// The share of memory a process's anonymous memory must reach for swapping it to matter.
const LARGE_SHARE: f64 = 0.25;

/// Runs both checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    swappiness(ctx, found);
    max_map_count(ctx, found);
}

fn number(ctx: &Ctx, rel: &str) -> Result<Option<u64>, String> {
    match super::knob(ctx.fs, rel) {
        Ok(Some(v)) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("could not read /{rel} ({v:?} is not a number)")),
        Ok(None) => Ok(None),
        Err(e) => {
            let (what, hint) = crate::finding::describe(&e);
            Err(format!("{what}{hint}"))
        }
    }
}

fn swappiness(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "swappiness";
    let swappiness = match number(ctx, SWAPPINESS) {
        Ok(Some(v)) => v,
        Ok(None) => return found.skip(CHECK, format!("could not read /{SWAPPINESS} (absent)")),
        Err(why) => return found.skip(CHECK, why),
    };
    let meminfo = match perfpilot_sys::stat::read_meminfo(ctx.fs) {
        Ok(m) => m,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let total = meminfo.get("MemTotal").copied().unwrap_or(0);
    let swap = meminfo.get("SwapTotal").copied().unwrap_or(0);
    if swappiness < HIGH_SWAPPINESS || swap == 0 || total == 0 {
        return;
    }
    for p in &ctx.procs.list {
        let anon = p.status.rss_anon;
        if (anon as f64) < LARGE_SHARE * total as f64 {
            continue;
        }
        let command = p.cmdline_joined();
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("vm.swappiness", swappiness.to_string(), format!("/{SWAPPINESS}")),
                Evidence::new("SwapTotal", bytes(swap), "/proc/meminfo"),
                Evidence::new("MemTotal", bytes(total), "/proc/meminfo"),
                Evidence::new("RssAnon", format!("{} ({} of memory)", bytes(anon), pct(anon, total)), format!("/proc/{}/status", p.pid)),
            ],
            why: format!("{WHY_VM}: swappiness weighs swapping anonymous memory against dropping page cache"),
            effect: "its heap stays in memory under page-cache pressure: no major faults on its hot data after a burst of file I/O".into(),
            apply: "sudo sysctl -w vm.swappiness=10 && echo 'vm.swappiness = 10' | sudo tee /etc/sysctl.d/90-perfpilot-swappiness.conf".into(),
            verify: Verify::Study {
                file: crate::study::knob_study(
                    "swappiness",
                    Some(&command),
                    "swappiness",
                    &[SWAPPINESS],
                    &[&swappiness.to_string(), "10"],
                ),
            },
            cmdline: Some(command.clone()),
            ..base(
                "vm.swappiness-large-anon",
                p.subject(),
                Severity::Warning,
                format!(
                    "{} of anonymous memory may be swapped readily (vm.swappiness = {swappiness}, {} of swap)",
                    bytes(anon),
                    bytes(swap)
                ),
            )
        });
    }
}

fn max_map_count(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "max_map_count";
    let limit = match number(ctx, MAX_MAP_COUNT) {
        Ok(Some(v)) if v > 0 => v,
        Ok(_) => return found.skip(CHECK, format!("could not read /{MAX_MAP_COUNT} (absent)")),
        Err(why) => return found.skip(CHECK, why),
    };
    let mut refused = Refused::default();
    // The process nearest the limit.
    let mut nearest: Option<(u64, &crate::procs::Proc)> = None;
    for p in &ctx.procs.list {
        let rel = format!("proc/{}/maps", p.pid);
        let n = match ctx.fs.read(&rel) {
            Ok(text) => text.bytes().filter(|&b| b == b'\n').count() as u64,
            Err(e) => {
                refused.note(&super::vanished_as_such(e));
                continue;
            }
        };
        if nearest.is_none_or(|(m, _)| n > m) {
            nearest = Some((n, p));
        }
    }
    refused.report(CHECK, "mappings of processes", found);
    let Some((n, p)) = nearest else { return };
    let share = n as f64 / limit as f64;
    let severity = if share >= 0.9 {
        Severity::Critical
    } else if share >= 0.5 {
        Severity::Warning
    } else {
        return;
    };
    let suggested = (limit * 4).max(262_144);
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("vm.max_map_count", count(limit), format!("/{MAX_MAP_COUNT}")),
            Evidence::new("mappings", format!("{} ({} of the limit)", count(n), pct(n, limit)), format!("/proc/{}/maps", p.pid)),
        ],
        why: format!("{WHY_VM}: max_map_count; a process at the limit gets ENOMEM from mmap and malloc (Elasticsearch and JVMs with many threads or mapped files meet it first)"),
        effect: "mmap and malloc keep working as the process grows; no ENOMEM with free memory".into(),
        apply: format!("sudo sysctl -w vm.max_map_count={suggested} && echo 'vm.max_map_count = {suggested}' | sudo tee /etc/sysctl.d/90-perfpilot-max-map-count.conf"),
        verify: Verify::Observe {
            command: format!("wc -l < /proc/{}/maps; sysctl vm.max_map_count", p.pid),
            expect: "the count well under half the limit".into(),
        },
        cmdline: Some(p.cmdline_joined()),
        ..base(
            "vm.max-map-count",
            p.subject(),
            severity,
            format!("{} mappings, {} of vm.max_map_count", count(n), pct(n, limit)),
        )
    });
}
