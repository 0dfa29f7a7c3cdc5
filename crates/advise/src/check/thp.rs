//! Transparent huge pages: the `enabled`, `defrag` and `shmem_enabled` modes against the
//! processes that hold large anonymous or shared memory with low huge-page coverage
//! (`AnonHugePages`, `ShmemPmdMapped` of `smaps_rollup`).

use perfpilot_sys::process::{ProcReader, SmapsRollup};
use perfpilot_units::bytes;

use super::{Ctx, Found, Refused, base, pct};
use crate::finding::{Evidence, Severity, Verify};
use crate::procs::Proc;

const CHECK: &str = "thp";
const DIR: &str = "sys/kernel/mm/transparent_hugepage";
/// Anonymous or shared memory from which huge pages matter (TLB reach of 4 KiB pages is a few
/// MiB; at a GiB the page walks show in the profile).
pub(crate) const LARGE: u64 = 1 << 30;
/// Coverage under which the memory is said to be mostly in small pages.
const LOW_COVERAGE: f64 = 0.2;
const WHY: &str = "Documentation/admin-guide/mm/transhuge.rst (kernel); seed 002 (IBM AIX Dynamic System Optimizer: large page optimization of workloads with large, hot memory)";

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let thp = match perfpilot_sys::stat::read_thp(ctx.fs) {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let Some(enabled) = thp.enabled.clone() else {
        return found.skip(
            CHECK,
            format!(
                "could not read /{DIR}/enabled (absent: a kernel without transparent huge pages)"
            ),
        );
    };
    let modes = Modes {
        enabled,
        defrag: thp.defrag.clone().unwrap_or_default(),
        shmem: thp.shmem_enabled.clone().unwrap_or_default(),
    };
    defrag_always(&modes, found);
    let mut reader = ProcReader::new(ctx.fs);
    let mut refused = Refused::default();
    for p in &ctx.procs.list {
        let st = &p.status;
        if st.rss_anon < LARGE && st.rss_shmem < LARGE {
            continue;
        }
        let rollup = match reader.smaps_rollup(p.pid) {
            Ok(r) => r,
            Err(e) => {
                refused.note(&e);
                continue;
            }
        };
        low_anon_coverage(&modes, p, &rollup, found);
        shmem_in_small_pages(ctx, &modes, p, &rollup, found);
    }
    refused.report(CHECK, "huge-page coverage of large processes", found);
}

/// The three modes of transparent huge pages.
struct Modes {
    enabled: String,
    defrag: String,
    shmem: String,
}

/// A mode as evidence, with its file.
fn mode(name: &str, v: &str) -> Evidence {
    Evidence::new(name, v, format!("/{DIR}/{name}"))
}

/// `defrag = always` with `enabled = always`: every fault may stall in direct compaction.
fn defrag_always(m: &Modes, found: &mut Found) {
    let (enabled, defrag) = (&m.enabled, &m.defrag);
    if enabled == "always" && defrag == "always" {
        found.add(super::Finding {
            evidence: vec![mode("enabled", enabled), mode("defrag", defrag)],
            why: WHY.into(),
            effect: "page faults stop stalling in direct compaction; huge pages still come from khugepaged and from regions that ask for them".into(),
            apply: format!("echo defer+madvise | sudo tee /{DIR}/defrag"),
            verify: Verify::Study {
                file: crate::study::knob_study(
                    "thp-defrag",
                    None,
                    "defrag",
                    &[&format!("{DIR}/defrag")],
                    &["always", "defer+madvise"],
                ),
            },
            ..base(
                "thp.defrag-always",
                "system",
                Severity::Info,
                "every page fault may stall compacting memory for a huge page (defrag = always)".into(),
            )
        });
    }
}

/// A process with a large anonymous memory mostly in small pages.
fn low_anon_coverage(m: &Modes, p: &Proc, rollup: &SmapsRollup, found: &mut Found) {
    let enabled = &m.enabled;
    let src = format!("/proc/{}/smaps_rollup", p.pid);
    let anon_cov = rollup.anon_huge as f64 / rollup.anonymous.max(1) as f64;
    if rollup.anonymous >= LARGE && anon_cov < LOW_COVERAGE {
        let (apply, effect) = if enabled == "never" {
            (
                format!(
                    "echo madvise | sudo tee /{DIR}/enabled   # then let the daemon collapse it, or restart the process with enabled = always"
                ),
                "fewer TLB misses and page walks on its anonymous memory (the daemon measures how much)",
            )
        } else {
            (
                format!(
                    "perfpilot daemon   # its large_pages strategy collapses pid {}'s memory with MADV_COLLAPSE and measures it",
                    p.pid
                ),
                "fewer TLB misses and page walks on its anonymous memory (the daemon measures how much)",
            )
        };
        found.add(super::Finding {
            evidence: vec![
                mode("enabled", enabled),
                Evidence::new("Anonymous", bytes(rollup.anonymous), &src),
                Evidence::new("AnonHugePages", bytes(rollup.anon_huge), &src),
                Evidence::new(
                    "huge-page coverage",
                    pct(rollup.anon_huge, rollup.anonymous),
                    &src,
                ),
            ],
            why: WHY.into(),
            effect: effect.into(),
            apply,
            verify: Verify::DaemonWillTry {
                strategy: "large_pages".into(),
            },
            strategy: Some("large_pages".into()),
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "thp.low-anon-coverage",
                p.subject(),
                Severity::Warning,
                format!(
                    "{} of anonymous memory, {} of it in huge pages (enabled = {enabled})",
                    bytes(rollup.anonymous),
                    pct(rollup.anon_huge, rollup.anonymous)
                ),
            )
        });
    }
}

/// A process with large shared memory in small pages while `shmem_enabled` refuses huge ones.
fn shmem_in_small_pages(ctx: &Ctx, m: &Modes, p: &Proc, rollup: &SmapsRollup, found: &mut Found) {
    let (st, shmem) = (&p.status, &m.shmem);
    let src = format!("/proc/{}/smaps_rollup", p.pid);
    let shm_cov = rollup.shmem_pmd_mapped as f64 / st.rss_shmem.max(1) as f64;
    // Shared memory is the instance's: said once, of the parent (the postmaster).
    if st.rss_shmem >= LARGE
        && !ctx.procs.is_part_of_parent(p)
        && shm_cov < LOW_COVERAGE
        && rollup.shared_hugetlb == 0
        && matches!(shmem.as_str(), "never" | "deny")
    {
        found.add(super::Finding {
            evidence: vec![
                mode("shmem_enabled", shmem),
                Evidence::new("RssShmem", bytes(st.rss_shmem), format!("/proc/{}/status", p.pid)),
                Evidence::new("ShmemPmdMapped", bytes(rollup.shmem_pmd_mapped), &src),
            ],
            why: WHY.into(),
            effect: "its shared memory (a database's buffer cache) can be mapped by huge pages: fewer TLB misses, smaller page tables per attached process".into(),
            apply: format!("echo advise | sudo tee /{DIR}/shmem_enabled   # then restart the process: memory mapped before stays misaligned"),
            verify: Verify::DaemonWillTry {
                strategy: "large_pages".into(),
            },
            strategy: Some("large_pages".into()),
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "thp.shmem-disabled-large-shm",
                p.subject(),
                Severity::Warning,
                format!(
                    "{} of shared memory in small pages (shmem_enabled = {shmem})",
                    bytes(st.rss_shmem)
                ),
            )
        });
    }
}
