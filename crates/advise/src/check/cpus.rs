//! Threads against the CPUs their affinity or cpuset allows (`Cpus_allowed_list`): a bound
//! process with far more threads than CPUs, and instances of one program whose bindings
//! overlap.

use std::collections::BTreeMap;

use perfpilot_sys::CpuSet;
use perfpilot_sys::process::ProcReader;
use perfpilot_units::count;

use super::{Ctx, Found, base};
use crate::finding::{Evidence, Severity, Verify};
use crate::procs::Proc;

/// Threads per allowed CPU from which a bound process is said to be oversubscribed.
const THREADS_PER_CPU: u32 = 4;
const WHY_BIND: &str = "seed 000 (IBM SPSS C&DS on POWER8: processor binding is most effective when instances are bound to non-overlapping sets of cores, with the thread pools and JVM GC threads matched to the binding)";

/// Runs both checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let Some(online) = &ctx.online else {
        return found.skip("cpus", "could not read /sys/devices/system/cpu/online");
    };
    oversubscribed(ctx, online, found);
    overlapping(ctx, online, found);
}

/// The CPUs a process may use, when narrower than the online CPUs.
fn bound(p: &Proc, online: &CpuSet) -> Option<CpuSet> {
    let allowed = p.status.cpus_allowed.as_ref()?.intersection(online);
    (!allowed.is_empty() && !online.is_subset(&allowed)).then_some(allowed)
}

fn oversubscribed(ctx: &Ctx, online: &CpuSet, found: &mut Found) {
    let mut reader = ProcReader::new(ctx.fs);
    for p in &ctx.procs.list {
        let Some(allowed) = bound(p, online) else {
            continue;
        };
        let cpus = allowed.len() as u32;
        let threads = p.status.threads;
        if threads < THREADS_PER_CPU * cpus.max(1) || threads < 8 {
            continue;
        }
        // Runnable threads now (state R): many runnable threads on few CPUs is queueing now;
        // sleeping ones are a risk when load comes.
        let mut runnable = 0u32;
        let mut read = true;
        if reader
            .task_stats(p.pid, |r| {
                if let Ok(t) = r
                    && t.state == 'R'
                {
                    runnable += 1;
                }
            })
            .is_err()
        {
            read = false;
        }
        let severity = if runnable > cpus {
            Severity::Warning
        } else {
            Severity::Info
        };
        let mut evidence = vec![
            Evidence::new(
                "Threads",
                count(u64::from(threads)),
                format!("/proc/{}/status", p.pid),
            ),
            Evidence::new(
                "Cpus_allowed_list",
                allowed.to_string(),
                format!("/proc/{}/status", p.pid),
            ),
        ];
        if read {
            evidence.push(Evidence::new(
                "runnable threads now",
                count(u64::from(runnable)),
                format!("/proc/{}/task/*/stat", p.pid),
            ));
        }
        found.add(super::Finding {
            evidence,
            why: WHY_BIND.into(),
            effect: "fewer involuntary context switches and less run-queue wait: size its thread pools to the CPUs it has, or give it more CPUs".into(),
            apply: format!(
                "size its worker/GC thread pools to {cpus} (e.g. -XX:ParallelGCThreads={cpus}, a server's threads/workers setting), or widen its binding: sudo taskset -a -cp {} {}",
                online, p.pid
            ),
            verify: Verify::Observe {
                command: format!("grep ctxt_switches /proc/{}/status   # twice, a minute apart", p.pid),
                expect: "nonvoluntary switches growing far slower than voluntary ones".into(),
            },
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "cpu.oversubscribed",
                p.subject(),
                severity,
                format!(
                    "{} threads on {} allowed CPU{} ({allowed})",
                    count(u64::from(threads)),
                    cpus,
                    if cpus == 1 { "" } else { "s" }
                ),
            )
        });
    }
}

fn overlapping(ctx: &Ctx, online: &CpuSet, found: &mut Found) {
    // Bound processes by program name, one per instance: instances of one program.
    let mut by_name: BTreeMap<&str, Vec<(&Proc, CpuSet)>> = BTreeMap::new();
    for p in &ctx.procs.list {
        if ctx.procs.is_part_of_parent(p) {
            continue;
        }
        if let Some(set) = bound(p, online) {
            by_name.entry(&p.status.name).or_default().push((p, set));
        }
    }
    for (name, procs) in by_name {
        for (i, (a, sa)) in procs.iter().enumerate() {
            // Only the first overlap of each process, so that n instances on one set give n-1
            // findings, not n².
            let Some((b, sb)) = procs[i + 1..]
                .iter()
                .find(|(_, sb)| !sa.intersection(sb).is_empty())
            else {
                continue;
            };
            let shared = sa.intersection(sb);
            let own = sb.difference(sa);
            let apply = if own.is_empty() {
                format!(
                    "bind each instance to its own cores: sudo taskset -a -cp CPUS {}   # CPUS: cores no other {name} instance uses",
                    b.pid
                )
            } else {
                format!("sudo taskset -a -cp {own} {}", b.pid)
            };
            found.add(super::Finding {
                evidence: vec![
                    Evidence::new(format!("pid {} Cpus_allowed_list", a.pid), sa.to_string(), format!("/proc/{}/status", a.pid)),
                    Evidence::new(format!("pid {} Cpus_allowed_list", b.pid), sb.to_string(), format!("/proc/{}/status", b.pid)),
                    Evidence::new("shared CPUs", shared.to_string(), "the two lists"),
                ],
                why: WHY_BIND.into(),
                effect: "each instance keeps its cores and their caches to itself: less run-queue wait and fewer cache misses from the other instance".into(),
                apply,
                verify: Verify::Observe {
                    command: format!("grep Cpus_allowed_list /proc/{}/status /proc/{}/status", a.pid, b.pid),
                    expect: "two lists with no CPU in common".into(),
                },
                cmdline: Some(b.cmdline_joined()),
                ..base(
                    "cpu.overlapping-bindings",
                    format!("pids {} and {} ({name})", a.pid, b.pid),
                    Severity::Warning,
                    format!("two {name} instances are bound to overlapping CPUs ({shared})"),
                )
            });
        }
    }
}
