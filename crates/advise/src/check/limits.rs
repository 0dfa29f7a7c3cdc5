//! Resources that run out before the machine does: inodes of mounted file systems (seed 004:
//! content stores run out of inodes before bytes) and processes' open-file limits against the
//! descriptors they hold.

use perfpilot_units::{bytes, count};

use super::{Ctx, Found, Refused, base, pct};
use crate::finding::{Evidence, Severity, Verify};
use crate::mounts::parse_mounts;

/// Share of inodes or descriptors in use from which a finding is a warning.
const WARN: f64 = 0.8;
/// Share from which it is critical.
const CRITICAL: f64 = 0.95;

/// Runs both checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    inodes(ctx, found);
    open_files(ctx, found);
}

fn severity_of(share: f64) -> Option<Severity> {
    if share >= CRITICAL {
        Some(Severity::Critical)
    } else if share >= WARN {
        Some(Severity::Warning)
    } else {
        None
    }
}

fn inodes(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "inodes";
    let text = match ctx.fs.read("proc/self/mounts") {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    if !ctx.fs.is_live() && *ctx.mounts == crate::mounts::MountFigures::Live {
        // statvfs would describe this machine's mounts, not the tree's.
        return found.skip(
            CHECK,
            format!(
                "no figures for the mounts of {} (statvfs is a live call; give them in Options::mounts)",
                ctx.fs.root().display()
            ),
        );
    }
    let mut missing = Vec::new();
    for m in parse_mounts(&text) {
        let fig = match ctx.mounts.of(&m.point) {
            Ok(f) => f,
            Err(e) => {
                missing.push(e.to_string());
                continue;
            }
        };
        if fig.inodes == 0 {
            continue;
        }
        let used = fig.inodes.saturating_sub(fig.inodes_free);
        let share = used as f64 / fig.inodes as f64;
        let Some(severity) = severity_of(share) else {
            continue;
        };
        let bytes_used = fig.bytes.saturating_sub(fig.bytes_free);
        let src = format!("statvfs({})", m.point);
        let apply = match m.fstype.as_str() {
            "xfs" => format!(
                "sudo xfs_growfs -m 50 {}   # raise the share of space inodes may take",
                m.point
            ),
            "tmpfs" => format!(
                "sudo mount -o remount,nr_inodes={} {}",
                (fig.inodes * 4).max(1 << 20),
                m.point
            ),
            _ => format!(
                "delete or archive small files under {}, or copy the data to a file system made with more inodes: mkfs.{} -N {} DEVICE (ext4 cannot add inodes in place)",
                m.point,
                m.fstype,
                fig.inodes * 4
            ),
        };
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("inodes used", format!("{} of {} ({})", count(used), count(fig.inodes), pct(used, fig.inodes)), &src),
                Evidence::new("inodes free", count(fig.inodes_free), &src),
                Evidence::new("bytes used", format!("{} of {} ({})", bytes(bytes_used), bytes(fig.bytes), pct(bytes_used, fig.bytes)), &src),
                Evidence::new("device, type", format!("{} {}", m.device, m.fstype), "/proc/self/mounts"),
            ],
            why: "seed 004 (Spectrum Scale for an ECM system: content stores run out of inodes before bytes, and then writes fail with \"No space left on device\")".into(),
            effect: "file creation keeps working: no ENOSPC with free bytes".into(),
            apply,
            verify: Verify::Observe {
                command: format!("df -i {}", m.point),
                expect: "IUse% under 80 %".into(),
            },
            ..base(
                "fs.inodes-low",
                format!("mount {}", m.point),
                severity,
                format!(
                    "{} of the inodes of {} are used ({} free), {} of its bytes",
                    pct(used, fig.inodes),
                    m.point,
                    count(fig.inodes_free),
                    pct(bytes_used, fig.bytes)
                ),
            )
        });
    }
    if let Some(first) = missing.first() {
        let more = if missing.len() > 1 {
            format!(" and {} more mounts", missing.len() - 1)
        } else {
            String::new()
        };
        found.skip(CHECK, format!("{first}{more}"));
    }
}

/// The soft `Max open files` of a `/proc/PID/limits` text; `None` for `unlimited` or a line
/// it lacks.
pub(crate) fn soft_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open_files(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "open_files";
    let mut refused = Refused::default();
    for p in &ctx.procs.list {
        let limits_rel = format!("proc/{}/limits", p.pid);
        let soft = match ctx.fs.read(&limits_rel) {
            Ok(t) => soft_nofile(&t),
            Err(e) => {
                refused.note(&super::vanished_as_such(e));
                continue;
            }
        };
        let Some(soft) = soft.filter(|&s| s > 0) else {
            continue;
        };
        let fd_rel = format!("proc/{}/fd", p.pid);
        let fds = match ctx.fs.list(&fd_rel) {
            Ok(v) => v.len() as u64,
            Err(e) => {
                refused.note(&super::vanished_as_such(e));
                continue;
            }
        };
        let Some(severity) = severity_of(fds as f64 / soft as f64) else {
            continue;
        };
        let new = (soft * 4).max(65_536);
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("Max open files (soft)", count(soft), format!("/{limits_rel}")),
                Evidence::new("open descriptors", format!("{} ({} of the limit)", count(fds), pct(fds, soft)), format!("/{fd_rel}")),
            ],
            why: "getrlimit(2), RLIMIT_NOFILE: at the limit accept() and open() fail with EMFILE; servers then drop connections (seed 004: file-system heavy ECM stacks raise nofile)".into(),
            effect: "no EMFILE failures as connections or open files grow".into(),
            apply: format!("sudo prlimit --pid {} --nofile={new}:{new}   # and for restarts: LimitNOFILE={new} in its systemd unit, or nofile in /etc/security/limits.conf", p.pid),
            verify: Verify::Observe {
                command: format!("ls /proc/{pid}/fd | wc -l; grep 'open files' /proc/{pid}/limits", pid = p.pid),
                expect: "the count well under the soft limit".into(),
            },
            cmdline: Some(p.cmdline_joined()),
            ..base(
                "proc.open-files-near-limit",
                p.subject(),
                severity,
                format!("{} open descriptors, {} of its limit of {}", count(fds), pct(fds, soft), count(soft)),
            )
        });
    }
    refused.report(CHECK, "open descriptors of processes", found);
}

#[cfg(test)]
mod tests {
    use super::soft_nofile;

    #[test]
    fn the_soft_open_file_limit_is_read_and_unlimited_is_none() {
        let t = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(soft_nofile(t), Some(1024));
        let u = "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(soft_nofile(u), None);
    }
}
