//! glibc malloc arenas: a many-threaded process with large anonymous memory and no
//! `MALLOC_ARENA_MAX` in its environment may keep up to 8 arenas per CPU, each holding on to
//! memory it freed.

use perfpilot_sys::process::ProcReader;
use perfpilot_units::{bytes, count};

use super::{Ctx, Found, Refused, base};
use crate::finding::{Evidence, Severity, Verify};

const CHECK: &str = "malloc_arenas";
/// Threads from which arenas multiply.
const MANY_THREADS: u32 = 16;
/// Anonymous memory from which the arenas' slack is worth measuring.
const LARGE: u64 = 1 << 30;

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let cpus = ctx.online.as_ref().map_or(1, |o| o.len().max(1));
    let default_arenas = 8 * cpus;
    let mut reader = ProcReader::new(ctx.fs);
    let mut refused = Refused::default();
    for p in &ctx.procs.list {
        if p.status.threads < MANY_THREADS || p.status.rss_anon < LARGE {
            continue;
        }
        let set = match reader.environ_var(p.pid, "MALLOC_ARENA_MAX") {
            Ok(v) => v,
            Err(e) => {
                refused.note(&e);
                continue;
            }
        };
        if set.is_some() {
            continue;
        }
        // Only glibc has these arenas (musl, jemalloc and tcmalloc do not read the variable).
        let maps = match ctx.fs.read(&format!("proc/{}/maps", p.pid)) {
            Ok(m) => m,
            Err(e) => {
                refused.note(&super::vanished_as_such(e));
                continue;
            }
        };
        if !maps.contains("/libc.so.6") || maps.contains("jemalloc") || maps.contains("tcmalloc") {
            continue;
        }
        let threads = u64::from(p.status.threads);
        let arenas = (default_arenas as u64).min(threads);
        let command = p.cmdline_joined();
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("Threads", count(threads), format!("/proc/{}/status", p.pid)),
                Evidence::new("RssAnon", bytes(p.status.rss_anon), format!("/proc/{}/status", p.pid)),
                Evidence::new("MALLOC_ARENA_MAX", "not set", format!("/proc/{}/environ", p.pid)),
                Evidence::new("online CPUs", count(cpus as u64), "/sys/devices/system/cpu/online"),
            ],
            why: "glibc mallopt(3), M_ARENA_MAX: by default up to 8 arenas per CPU on 64-bit systems, each keeping the memory freed in it; seed 000 tunes memory allocation for the scoring JVMs (the study's MALLOC_ARENA_MAX factor)".into(),
            effect: "less resident memory from per-arena slack; throughput may change either way with heavy malloc use, which the study measures".into(),
            apply: "MALLOC_ARENA_MAX=4 in its environment and a restart (systemd: Environment=MALLOC_ARENA_MAX=4)".into(),
            verify: Verify::Study {
                file: crate::study::env_study(
                    "malloc-arenas",
                    &command,
                    "MALLOC_ARENA_MAX",
                    &[&default_arenas.to_string(), "4", "2"],
                ),
            },
            cmdline: Some(command.clone()),
            ..base(
                "malloc.arena-max-unset",
                p.subject(),
                Severity::Info,
                format!(
                    "{} threads may use up to {} glibc malloc arenas ({} of anonymous memory)",
                    count(threads),
                    count(arenas),
                    bytes(p.status.rss_anon)
                ),
            )
        });
    }
    refused.report(CHECK, "environment of many-threaded processes", found);
}
