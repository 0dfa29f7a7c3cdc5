//! JVMs, from their command lines: the heap (`-Xmx`) against the memory limit of their cgroup,
//! explicit GC threads against the CPUs their affinity or cpuset gives them (seed 000's binding
//! lesson), and large heaps without `-XX:+UseTransparentHugePages` under THP `madvise`.

use perfpilot_units::bytes;

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Severity, Verify};
use crate::procs::Proc;

const WHY_GC: &str = "seed 000 (IBM SPSS C&DS on POWER8: JVM GC threads matched to the processor binding; more GC threads than bound CPUs only queue)";
/// Heap share of the cgroup limit from which the rest of the JVM (metaspace, code cache,
/// thread stacks, direct buffers) is likely not to fit: a warning, and critical from 90 %.
const HEAP_WARN: f64 = 0.75;
const HEAP_CRITICAL: f64 = 0.9;

/// Whether a process is a JVM (`java`, or a command whose program is a `java` binary).
pub(crate) fn is_jvm(p: &Proc) -> bool {
    p.status.name == "java"
        || p.cmdline
            .first()
            .is_some_and(|c| c == "java" || c.ends_with("/java"))
}

/// A JVM size (`4g`, `512m`, `1024k`, `123`) in bytes.
pub(crate) fn jvm_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'g' | 'G' => (&s[..s.len() - 1], 1u64 << 30),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
        't' | 'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// The value of the last `-XX:Name=VALUE` or `-Xname` (prefix) flag.
fn flag<'a>(p: &'a Proc, prefix: &str) -> Option<&'a str> {
    p.cmdline.iter().rev().find_map(|a| a.strip_prefix(prefix))
}

/// Runs the three checks on every JVM.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let thp = crate::check::knob(ctx.fs, "sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .flatten();
    for p in ctx.procs.list.iter().filter(|p| is_jvm(p)) {
        let heap = flag(p, "-Xmx").and_then(jvm_size);
        let command = p.cmdline.join(" ");
        if let Some(heap) = heap {
            heap_vs_limit(ctx, p, heap, found);
        }
        gc_threads(ctx, p, found);
        if let (Some(heap), Some("madvise")) = (heap, thp.as_deref())
            && heap >= super::thp::LARGE
            && !p
                .cmdline
                .iter()
                .any(|a| a == "-XX:+UseTransparentHugePages" || a == "-XX:+UseLargePages")
        {
            let template = command.replacen(" -Xmx", " {thp} -Xmx", 1);
            found.add(super::Finding {
                evidence: vec![
                    Evidence::new("-Xmx", bytes(heap), format!("/proc/{}/cmdline", p.pid)),
                    Evidence::new("-XX:+UseTransparentHugePages", "absent", format!("/proc/{}/cmdline", p.pid)),
                    Evidence::new("enabled", "madvise", "/sys/kernel/mm/transparent_hugepage/enabled"),
                ],
                why: "Documentation/admin-guide/mm/transhuge.rst: under `madvise` only regions that ask get huge pages, and HotSpot asks only with -XX:+UseTransparentHugePages; seed 002 (AIX DSO: large pages for large heaps)".into(),
                effect: "the heap in 2 MiB pages: fewer TLB misses in GC and in the application".into(),
                apply: "add -XX:+UseTransparentHugePages to its command line and restart it".into(),
                verify: Verify::Study {
                    file: crate::study::command_study(
                        "jvm-thp",
                        &template,
                        "thp",
                        &["-XX:-UseTransparentHugePages", "-XX:+UseTransparentHugePages"],
                    ),
                },
                cmdline: Some(command.clone()),
                ..base(
                    "jvm.no-thp-flag",
                    p.subject(),
                    Severity::Info,
                    format!("a {} heap without -XX:+UseTransparentHugePages under THP madvise", bytes(heap)),
                )
            });
        }
    }
}

fn heap_vs_limit(ctx: &Ctx, p: &Proc, heap: u64, found: &mut Found) {
    let Some((limit, src)) = crate::cgroup::memory_limit(ctx.fs, p.pid) else {
        return;
    };
    let share = heap as f64 / limit as f64;
    let severity = if share >= HEAP_CRITICAL {
        Severity::Critical
    } else if share >= HEAP_WARN {
        Severity::Warning
    } else {
        return;
    };
    let suggested = (limit as f64 * 0.7) as u64 >> 20;
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("-Xmx", bytes(heap), format!("/proc/{}/cmdline", p.pid)),
            Evidence::new("memory limit", bytes(limit), &src),
            Evidence::new("heap share of the limit", pct(heap, limit), "the two above"),
        ],
        why: "the JVM needs memory beyond the heap (metaspace, code cache, thread stacks, GC structures, direct buffers); a cgroup at its limit reclaims and then OOM-kills the JVM (Java SE troubleshooting guide: native memory tracking)".into(),
        effect: "no OOM kill or reclaim stalls when the heap fills".into(),
        apply: format!("-Xmx{suggested}m (about 70 % of the limit), or -XX:MaxRAMPercentage=70 instead of -Xmx, or raise the cgroup's memory limit"),
        verify: Verify::Observe {
            command: format!("jcmd {} VM.native_memory summary   # with -XX:NativeMemoryTracking=summary", p.pid),
            expect: "the total committed well under the limit".into(),
        },
        cmdline: Some(p.cmdline.join(" ")),
        ..base(
            "jvm.heap-near-cgroup-limit",
            p.subject(),
            severity,
            format!("-Xmx {} is {} of its cgroup's memory limit of {}", bytes(heap), pct(heap, limit), bytes(limit)),
        )
    });
}

fn gc_threads(ctx: &Ctx, p: &Proc, found: &mut Found) {
    let Some(n) = flag(p, "-XX:ParallelGCThreads=").and_then(|v| v.parse::<u64>().ok()) else {
        return;
    };
    let Some(allowed) = &p.status.cpus_allowed else {
        return;
    };
    let allowed = match &ctx.online {
        Some(o) => allowed.intersection(o),
        None => allowed.clone(),
    };
    let cpus = allowed.len() as u64;
    if cpus == 0 || n <= cpus {
        return;
    }
    let template = p
        .cmdline
        .iter()
        .map(|a| {
            if a.starts_with("-XX:ParallelGCThreads=") {
                "-XX:ParallelGCThreads={gc}".to_string()
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("-XX:ParallelGCThreads", n.to_string(), format!("/proc/{}/cmdline", p.pid)),
            Evidence::new("Cpus_allowed_list", format!("{allowed} ({cpus} CPUs)"), format!("/proc/{}/status", p.pid)),
        ],
        why: WHY_GC.into(),
        effect: "shorter GC pauses: the GC threads stop queueing for the few CPUs the binding gives".into(),
        apply: format!("-XX:ParallelGCThreads={cpus} (or leave it out: current JVMs size it from the CPUs they may use)"),
        verify: Verify::Study {
            file: crate::study::command_study("jvm-gc-threads", &template, "gc", &[&n.to_string(), &cpus.to_string()]),
        },
        cmdline: Some(p.cmdline.join(" ")),
        ..base(
            "jvm.gc-threads-over-cpus",
            p.subject(),
            Severity::Warning,
            format!("{n} parallel GC threads on {cpus} allowed CPUs"),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::jvm_size;

    #[test]
    fn jvm_sizes_take_their_suffixes() {
        assert_eq!(jvm_size("4g"), Some(4 << 30));
        assert_eq!(jvm_size("512M"), Some(512 << 20));
        assert_eq!(jvm_size("1024k"), Some(1 << 20));
        assert_eq!(jvm_size("100"), Some(100));
        assert_eq!(jvm_size("x"), None);
    }
}
