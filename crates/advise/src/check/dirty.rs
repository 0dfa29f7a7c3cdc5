//! Dirty page cache: `vm.dirty_*` thresholds against the dirty and writeback memory now
//! (`/proc/meminfo`). Writers are throttled in the kernel once dirty memory passes the hard
//! threshold; on machines with much memory the ratio defaults let gigabytes pile up first.

use perfpilot_units::bytes;

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const CHECK: &str = "dirty";
const WHY: &str = "Documentation/admin-guide/sysctl/vm.rst (dirty_background_ratio, dirty_ratio, dirty_bytes): past the background threshold the flusher writes back; past the hard one, every writer waits in the kernel";
/// A background threshold from which a write burst piles up gigabytes before writeback starts.
const LARGE_BACKGROUND: u64 = 2 << 30;
/// The share of the hard threshold dirty memory must reach for writers to be near throttling.
const NEAR: f64 = 0.5;

/// A threshold in bytes: `*_bytes` when set (non-zero), else the ratio of available memory.
fn threshold(
    ctx: &Ctx,
    bytes_knob: &str,
    ratio_knob: &str,
    available: u64,
) -> Option<(u64, String)> {
    // `vm.dirty_ratio` for `proc/sys/vm/dirty_ratio`.
    let sysctl = |rel: &str| rel.trim_start_matches("proc/sys/").replace('/', ".");
    let b: u64 = super::knob(ctx.fs, bytes_knob).ok()??.parse().ok()?;
    if b > 0 {
        return Some((b, format!("{} = {b}", sysctl(bytes_knob))));
    }
    let r: u64 = super::knob(ctx.fs, ratio_knob).ok()??.parse().ok()?;
    Some((
        available / 100 * r,
        format!("{} = {r} % of available memory", sysctl(ratio_knob)),
    ))
}

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let meminfo = match perfpilot_sys::stat::read_meminfo(ctx.fs) {
        Ok(m) => m,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let available = meminfo
        .get("MemAvailable")
        .or_else(|| meminfo.get("MemFree"))
        .copied()
        .unwrap_or(0);
    let dirty =
        meminfo.get("Dirty").copied().unwrap_or(0) + meminfo.get("Writeback").copied().unwrap_or(0);
    let (Some((background, bg_src)), Some((hard, hard_src))) = (
        threshold(
            ctx,
            "proc/sys/vm/dirty_background_bytes",
            "proc/sys/vm/dirty_background_ratio",
            available,
        ),
        threshold(
            ctx,
            "proc/sys/vm/dirty_bytes",
            "proc/sys/vm/dirty_ratio",
            available,
        ),
    ) else {
        return found.skip(
            CHECK,
            "could not read /proc/sys/vm/dirty_{background_,}{bytes,ratio}",
        );
    };
    let evidence = vec![
        Evidence::new("Dirty + Writeback", bytes(dirty), "/proc/meminfo"),
        Evidence::new(
            "background threshold",
            format!("{} ({bg_src})", bytes(background)),
            "/proc/sys/vm/dirty_background_*",
        ),
        Evidence::new(
            "hard threshold",
            format!("{} ({hard_src})", bytes(hard)),
            "/proc/sys/vm/dirty_*",
        ),
    ];
    let apply = "sudo sysctl -w vm.dirty_background_bytes=268435456 vm.dirty_bytes=1073741824   # 256 MiB and 1 GiB: writeback starts early and evenly; persist in /etc/sysctl.d/".to_string();
    if hard > 0 && dirty as f64 >= NEAR * hard as f64 {
        found.add(super::Finding {
            evidence: evidence.clone(),
            why: WHY.into(),
            effect: "writers stop stalling in balance_dirty_pages: writeback keeps pace before the burst reaches the hard threshold".into(),
            apply: apply.clone(),
            verify: Verify::Observe {
                command: "grep -E '^(Dirty|Writeback):' /proc/meminfo   # during the write burst".into(),
                expect: "the sum staying near the background threshold".into(),
            },
            ..base(
                "vm.dirty-near-limit",
                "system",
                Severity::Warning,
                format!("{} dirty or under writeback, {} of the threshold at which writers wait", bytes(dirty), pct(dirty, hard)),
            )
        });
    } else if background >= LARGE_BACKGROUND {
        found.add(super::Finding {
            evidence,
            why: WHY.into(),
            effect: "write bursts flush in smaller, earlier pieces: no multi-second storms of writeback that stall reads and fsync".into(),
            apply,
            verify: Verify::Observe {
                command: "grep -E '^(Dirty|Writeback):' /proc/meminfo; iostat -x 1   # during a write burst".into(),
                expect: "steady writes instead of long bursts at full device utilisation".into(),
            },
            ..base(
                "vm.dirty-background-large",
                "system",
                Severity::Info,
                format!("{} of writes may pile up before writeback starts", bytes(background)),
            )
        });
    }
}
