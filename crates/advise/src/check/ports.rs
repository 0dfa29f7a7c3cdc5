//! Ephemeral ports: TCP sockets holding a local port of `ip_local_port_range` (outgoing
//! connections, most of them in TIME_WAIT after a burst of short connections) against the
//! size of the range (`/proc/net/tcp`, `/proc/net/tcp6`).

use perfpilot_units::count;

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const CHECK: &str = "ephemeral_ports";
const RANGE: &str = "proc/sys/net/ipv4/ip_local_port_range";
/// The share of the range in use from which a finding is a warning, and critical.
const WARN: f64 = 0.5;
const CRITICAL: f64 = 0.8;
/// `st` of a socket in TIME_WAIT.
const TIME_WAIT: &str = "06";
/// `st` of a listening socket (its port is not taken from the range).
const LISTEN: &str = "0A";

/// Sockets of a `/proc/net/tcp{,6}` text with a local port in `lo..=hi`: (all, in TIME_WAIT).
pub(crate) fn ephemeral_in_use(text: &str, lo: u32, hi: u32) -> (u64, u64) {
    let (mut all, mut tw) = (0, 0);
    for line in text.lines().skip(1) {
        let mut it = line.split_ascii_whitespace();
        let (Some(_), Some(local), Some(_), Some(st)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        if st == LISTEN {
            continue;
        }
        let Some(port) = local
            .rsplit_once(':')
            .and_then(|(_, p)| u32::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        if (lo..=hi).contains(&port) {
            all += 1;
            if st == TIME_WAIT {
                tw += 1;
            }
        }
    }
    (all, tw)
}

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let range = match ctx.fs.read(RANGE) {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let bounds: Vec<u32> = range
        .split_ascii_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let [lo, hi] = bounds[..] else {
        return found.skip(
            CHECK,
            format!(
                "could not read /{RANGE} ({:?} is not two ports)",
                range.trim()
            ),
        );
    };
    let size = u64::from(hi.saturating_sub(lo)) + 1;
    let (mut all, mut tw) = (0, 0);
    for file in ["proc/net/tcp", "proc/net/tcp6"] {
        match ctx.fs.read_opt(file) {
            Ok(Some(text)) => {
                let (a, t) = ephemeral_in_use(&text, lo, hi);
                all += a;
                tw += t;
            }
            Ok(None) => {}
            Err(e) => return found.skip_err(CHECK, &e),
        }
    }
    let share = all as f64 / size as f64;
    let severity = if share >= CRITICAL {
        Severity::Critical
    } else if share >= WARN {
        Severity::Warning
    } else {
        return;
    };
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("ip_local_port_range", format!("{lo}-{hi} ({} ports)", count(size)), format!("/{RANGE}")),
            Evidence::new("sockets on ephemeral ports", format!("{} ({} of the range)", count(all), pct(all, size)), "/proc/net/tcp, /proc/net/tcp6"),
            Evidence::new("of them in TIME_WAIT", count(tw), "/proc/net/tcp, /proc/net/tcp6"),
        ],
        why: "Documentation/networking/ip-sysctl.rst (ip_local_port_range, tcp_tw_reuse): each outgoing connection holds a local port, for 60 s in TIME_WAIT after it closes; connect() fails with EADDRNOTAVAIL when a destination has none left".into(),
        effect: "no failed or slow connects at bursts of short outgoing connections".into(),
        apply: "keep connections open (client keep-alive, a connection pool); and: sudo sysctl -w net.ipv4.ip_local_port_range='1024 65000' net.ipv4.tcp_tw_reuse=1".into(),
        verify: Verify::Observe {
            command: "ss -tan state time-wait | wc -l; cat /proc/sys/net/ipv4/ip_local_port_range".into(),
            expect: "the count well under half the range".into(),
        },
        ..base(
            "net.ephemeral-ports",
            "system",
            severity,
            format!(
                "{} of the {} ephemeral ports are held, {} of them in TIME_WAIT",
                count(all),
                count(size),
                count(tw)
            ),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::ephemeral_in_use;

    #[test]
    fn sockets_on_ephemeral_ports_are_counted_and_listeners_are_not() {
        let t = "  sl  local_address rem_address   st\n   0: 0100007F:1F90 00000000:0000 0A\n   1: 0100007F:8000 0100007F:1F90 06\n   2: 0100007F:8001 0100007F:1F90 01\n   3: 0100007F:0050 0100007F:8002 01\n";
        // 0x8000 and 0x8001 are in 32768..=60999; port 80 (0x50) is not, and 8080 listens.
        assert_eq!(ephemeral_in_use(t, 32768, 60999), (2, 1));
    }
}
