//! The network stack's counters since boot: listen-queue overflows against `somaxconn`
//! (`/proc/net/netstat`), TCP retransmits (`/proc/net/snmp`), and packets dropped or squeezed
//! in softirq processing (`/proc/net/softnet_stat`).

use perfpilot_units::count;

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Severity, Verify};

const SOMAXCONN: &str = "proc/sys/net/core/somaxconn";
const WHY_IP: &str = "Documentation/networking/ip-sysctl.rst (kernel)";
/// Segments sent below which the retransmit share means little.
const MIN_SEGMENTS: u64 = 10_000;

/// Runs the three checks.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    listen_overflows(ctx, found);
    retransmits(ctx, found);
    softnet(ctx, found);
}

/// The value of `prefix:` field `name` in a `/proc/net/{netstat,snmp}` text: a line of names
/// followed by a line of values with the same prefix.
pub(crate) fn counter(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let i = names.split_ascii_whitespace().position(|n| n == name);
        if let Some(i) = i {
            return values.split_ascii_whitespace().nth(i)?.parse().ok();
        }
    }
    None
}

fn listen_overflows(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "listen_backlog";
    let netstat = match ctx.fs.read("proc/net/netstat") {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let Some(overflows) = counter(&netstat, "TcpExt:", "ListenOverflows") else {
        return found.skip(
            CHECK,
            "could not read ListenOverflows in /proc/net/netstat (no such field)",
        );
    };
    if overflows == 0 {
        return;
    }
    let somaxconn = match super::knob(ctx.fs, SOMAXCONN) {
        Ok(Some(v)) => v.parse::<u64>().ok(),
        _ => None,
    };
    let low = somaxconn.is_some_and(|s| s < 4096);
    let mut evidence = vec![Evidence::new(
        "TcpExt ListenOverflows (since boot)",
        count(overflows),
        "/proc/net/netstat",
    )];
    if let Some(s) = somaxconn {
        evidence.push(Evidence::new(
            "net.core.somaxconn",
            count(s),
            format!("/{SOMAXCONN}"),
        ));
    }
    let apply = if low {
        "sudo sysctl -w net.core.somaxconn=4096 net.ipv4.tcp_max_syn_backlog=8192   # then restart the server (the backlog is fixed at listen()) and raise its own backlog setting (nginx: listen … backlog=4096)".to_string()
    } else {
        "raise the server's own backlog (nginx: listen … backlog=N; PostgreSQL, Redis: tcp-backlog) and restart it: somaxconn already allows it".to_string()
    };
    found.add(super::Finding {
        evidence,
        why: format!("{WHY_IP}: somaxconn caps every listen() backlog; a full accept queue drops the SYN or the final ACK and the client waits a retransmit timeout (1 s, then 3 s)"),
        effect: "no connection attempts dropped at bursts: no 1 s or 3 s stalls on connect".into(),
        apply,
        verify: Verify::Observe {
            command: "nstat -az TcpExtListenOverflows; ss -ltn   # Recv-Q against Send-Q (the backlog) per listener".into(),
            expect: "the counter no longer growing under load".into(),
        },
        ..base(
            "net.listen-overflows",
            "system",
            if low { Severity::Warning } else { Severity::Info },
            format!(
                "{} connections overflowed a listen queue since boot (somaxconn {})",
                count(overflows),
                somaxconn.map_or("unknown".to_string(), count)
            ),
        )
    });
}

fn retransmits(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "tcp_retransmits";
    let snmp = match ctx.fs.read("proc/net/snmp") {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let (Some(out), Some(retrans)) = (
        counter(&snmp, "Tcp:", "OutSegs"),
        counter(&snmp, "Tcp:", "RetransSegs"),
    ) else {
        return found.skip(
            CHECK,
            "could not read OutSegs and RetransSegs in /proc/net/snmp",
        );
    };
    if out < MIN_SEGMENTS {
        return;
    }
    let share = retrans as f64 / out as f64;
    let severity = if share >= 0.05 {
        Severity::Warning
    } else if share >= 0.01 {
        Severity::Info
    } else {
        return;
    };
    found.add(super::Finding {
        evidence: vec![
            Evidence::new("Tcp OutSegs (since boot)", count(out), "/proc/net/snmp"),
            Evidence::new("Tcp RetransSegs (since boot)", format!("{} ({})", count(retrans), pct(retrans, out)), "/proc/net/snmp"),
        ],
        why: format!("{WHY_IP}; RFC 6298: each retransmission waits at least a retransmit timeout (200 ms minimum on Linux), and halves the congestion window"),
        effect: "fewer latency spikes of 200 ms and more; higher throughput on lossy paths".into(),
        apply: "find the connections and the link that lose packets: ss -ti | grep -B1 retrans; ip -s link   # errors and drops per interface; then fix that link, or its ring size (ethtool -G)".into(),
        verify: Verify::Observe {
            command: "nstat -az TcpRetransSegs TcpOutSegs   # twice, a minute apart".into(),
            expect: "retransmits under 1 % of the segments sent in between".into(),
        },
        ..base(
            "net.tcp-retransmits",
            "system",
            severity,
            format!("{} of TCP segments sent since boot were retransmits", pct(retrans, out)),
        )
    });
}

fn softnet(ctx: &Ctx, found: &mut Found) {
    const CHECK: &str = "softnet";
    let text = match ctx.fs.read("proc/net/softnet_stat") {
        Ok(t) => t,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    let (mut processed, mut dropped, mut squeezed) = (0u64, 0u64, 0u64);
    for line in text.lines() {
        let v: Vec<u64> = line
            .split_ascii_whitespace()
            .take(3)
            .filter_map(|h| u64::from_str_radix(h, 16).ok())
            .collect();
        if let [p, d, s] = v[..] {
            processed += p;
            dropped += d;
            squeezed += s;
        }
    }
    let src = "/proc/net/softnet_stat";
    if dropped > 0 {
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("packets processed (all CPUs)", count(processed), src),
                Evidence::new("dropped: backlog full", count(dropped), src),
            ],
            why: format!("{WHY_IP} and Documentation/admin-guide/sysctl/net.rst (netdev_max_backlog): packets arriving faster than softirq processing drains the per-CPU backlog are dropped"),
            effect: "no packets dropped in the kernel at bursts (each one a retransmit for TCP)".into(),
            apply: "sudo sysctl -w net.core.netdev_max_backlog=16384 && echo 'net.core.netdev_max_backlog = 16384' | sudo tee /etc/sysctl.d/90-perfpilot-netdev.conf".into(),
            verify: Verify::Observe {
                command: format!("cat {src}   # column 2 (hex) per CPU, twice under load"),
                expect: "column 2 no longer growing".into(),
            },
            ..base(
                "net.softnet-drops",
                "system",
                Severity::Warning,
                format!("{} packets dropped since boot because a CPU's input backlog was full", count(dropped)),
            )
        });
    }
    if processed > 0 && squeezed as f64 >= 0.001 * processed as f64 {
        found.add(super::Finding {
            evidence: vec![
                Evidence::new("packets processed (all CPUs)", count(processed), src),
                Evidence::new("time squeezes", count(squeezed), src),
            ],
            why: "Documentation/admin-guide/sysctl/net.rst (netdev_budget, netdev_budget_usecs): a squeeze is a softirq round that ran out of budget with packets left".into(),
            effect: "packets leave the NIC's ring sooner at high packet rates".into(),
            apply: "sudo sysctl -w net.core.netdev_budget=600 net.core.netdev_budget_usecs=4000".into(),
            verify: Verify::Observe {
                command: format!("cat {src}   # column 3 (hex) per CPU, twice under load"),
                expect: "column 3 growing far slower".into(),
            },
            ..base(
                "net.softnet-squeezed",
                "system",
                Severity::Info,
                format!("softirq ran out of budget {} times since boot", count(squeezed)),
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::counter;

    #[test]
    fn a_counter_is_read_by_its_name_in_the_matching_pair_of_lines() {
        let t = "Ip: Forwarding X\nIp: 1 2\nTcp: A ListenOverflows B\nTcp: 7 42 9\n";
        assert_eq!(counter(t, "Tcp:", "ListenOverflows"), Some(42));
        assert_eq!(counter(t, "Tcp:", "Nope"), None);
        assert_eq!(counter(t, "Ip:", "X"), Some(2));
    }
}
