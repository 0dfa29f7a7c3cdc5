//! Waiting for resources: pressure-stall information (`/proc/pressure/{cpu,memory,io}`) and the
//! CPU throttling of the cgroups processes run in (`cpu.stat`: `nr_throttled` of `nr_periods`,
//! cgroup v2 or v1).

use std::collections::BTreeSet;

use perfpilot_units::{count, percent};

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const WHY_PSI: &str = "Documentation/accounting/psi.rst (kernel): the share of wall time in which tasks were stalled waiting for the resource";
/// `some avg60` (percent) from which a stall is a finding.
const SOME_WARN: f64 = 10.0;
/// `full avg60` (percent) from which memory or I/O stalls are critical.
const FULL_CRITICAL: f64 = 10.0;
/// The share of periods throttled from which a cgroup is a finding.
const THROTTLED_SHARE: f64 = 0.05;

/// Runs both checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    psi(ctx, found);
    throttling(ctx, found);
}

fn psi(ctx: &Ctx, found: &mut Found) {
    for resource in ["cpu", "memory", "io"] {
        let p = match perfpilot_sys::stat::read_pressure(ctx.fs, resource) {
            Ok(Some(p)) => p,
            Ok(None) => {
                found.skip(
                    "psi",
                    format!("could not read /proc/pressure/{resource} (absent: a kernel without PSI, or psi=0 on its command line)"),
                );
                continue;
            }
            Err(e) => {
                found.skip_err("psi", &e);
                continue;
            }
        };
        let full = p.full.map_or(0.0, |f| f.avg60);
        let severity = if resource != "cpu" && full >= FULL_CRITICAL {
            Severity::Critical
        } else if p.some.avg60 >= SOME_WARN {
            Severity::Warning
        } else {
            continue;
        };
        let src = format!("/proc/pressure/{resource}");
        let (effect, apply) = match resource {
            "cpu" => (
                "shorter run-queue waits: requests stop queueing behind each other for CPU",
                "perfpilot observe   # who uses the CPUs; then fewer threads or instances, more CPUs, or the daemon's cache_affinity for the busiest",
            ),
            "memory" => (
                "no stalls in reclaim and refaults: the working set fits",
                "perfpilot observe   # who holds the memory; then smaller caches or heaps, more memory, or a memory.high on the cgroup that can wait",
            ),
            _ => (
                "shorter waits for storage",
                "iostat -x 5   # which device is saturated; then the daemon's read_ahead, a faster device, or less synchronous I/O",
            ),
        };
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("some avg60", percent(p.some.avg60), &src),
                Evidence::new(
                    "full avg60",
                    p.full.map_or("n/a".into(), |f| percent(f.avg60)),
                    &src,
                ),
                Evidence::new("some avg300", percent(p.some.avg300), &src),
            ],
            why: WHY_PSI.into(),
            effect: effect.into(),
            apply: apply.into(),
            verify: Verify::Observe {
                command: format!("cat {src}"),
                expect: format!("some avg60 under {} %", SOME_WARN),
            },
            ..base(
                &format!("psi.{resource}"),
                "system",
                severity,
                if resource == "cpu" {
                    format!(
                        "tasks waited for a CPU {} of the last minute",
                        percent(p.some.avg60)
                    )
                } else {
                    format!(
                        "tasks stalled on {resource} {} of the last minute, every task at once {}",
                        percent(p.some.avg60),
                        percent(full)
                    )
                },
            )
        });
    }
}

fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn throttling(ctx: &Ctx, found: &mut Found) {
    let mut seen = BTreeSet::new();
    for p in &ctx.procs.list {
        let Some(dir) = crate::cgroup::dir_of(ctx.fs, p.pid, "cpu") else {
            continue;
        };
        if !seen.insert(dir.clone()) {
            continue;
        }
        let Ok(stat) = ctx.fs.read(&format!("{dir}/cpu.stat")) else {
            continue;
        };
        let (Some(periods), Some(throttled)) = (
            stat_value(&stat, "nr_periods"),
            stat_value(&stat, "nr_throttled"),
        ) else {
            continue;
        };
        if periods == 0 || (throttled as f64) < THROTTLED_SHARE * periods as f64 {
            continue;
        }
        let quota = ctx
            .fs
            .read(&format!("{dir}/cpu.max"))
            .or_else(|_| ctx.fs.read(&format!("{dir}/cpu.cfs_quota_us")))
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cg = dir
            .trim_start_matches("sys/fs/cgroup")
            .trim_start_matches("/cpu,cpuacct")
            .trim_start_matches("/cpu")
            .to_string();
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("nr_throttled of nr_periods", format!("{} of {} ({})", count(throttled), count(periods), pct(throttled, periods)), format!("/{dir}/cpu.stat")),
                Evidence::new("quota", &quota, format!("/{dir}/cpu.max (v2) or cpu.cfs_quota_us (v1)")),
                Evidence::new("a process in it", p.subject(), format!("/proc/{}/cgroup", p.pid)),
            ],
            why: "Documentation/admin-guide/cgroup-v2.rst (cpu.max, cpu.stat) and Documentation/scheduler/sched-bwc.rst: a throttled cgroup stops running for the rest of the period (100 ms by default), a latency spike for every request in flight".into(),
            effect: "no pauses of up to a period when the quota runs out; tail latency drops".into(),
            apply: format!("raise the quota or remove it: sudo systemctl set-property UNIT CPUQuota=N%   # for a systemd unit; or: echo 'max 100000' | sudo tee /{dir}/cpu.max (v2); or size the threads to the quota"),
            verify: Verify::Observe {
                command: format!("cat /{dir}/cpu.stat   # twice, a minute apart"),
                expect: "nr_throttled growing by under 5 % of nr_periods".into(),
            },
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "cgroup.cpu-throttled",
                format!("cgroup {cg}"),
                Severity::Warning,
                format!("throttled in {} of its CPU periods (quota {quota})", pct(throttled, periods)),
            )
        });
    }
}
