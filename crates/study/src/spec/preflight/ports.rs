//! The ports a study's instances will take: `deployment.base_port` up to the largest instance
//! count, each checked by the runner's own free-port check (`net::port_free`); a busy one is
//! named with its holder (`perfpilot_sys::net` reads `/proc/net/tcp{,6}` and `/proc/*/fd`).

use perfpilot_sys::{Fs, net};

use super::{FindingKind, Findings, PortHolder, Severity};
use crate::spec::{Config, Study};

/// What to do about a busy port (the runner would skip it and take the next free one).
const FIX: &str = "stop that process or set deployment.base_port to a free range; otherwise the runner skips the port and takes the next free one";

/// Binds each port instances will take and names the busy ones.
pub(super) fn check(study: &Study, configs: &[Config], out: &mut Findings) {
    let most = configs.iter().map(Config::instances).max().unwrap_or(1);
    let base = usize::from(study.deployment.base_port);
    let fs = Fs::live();
    for instance in 0..most {
        let Ok(port) = u16::try_from(base + instance) else {
            break;
        };
        if net::port_free(port) {
            continue;
        }
        let holder = holder(&fs, port);
        out.push(
            Severity::Warning,
            "deployment.base_port",
            FindingKind::PortBusy {
                port,
                instance,
                holder,
            },
            FIX,
        );
    }
}

/// Who holds `port`: a listening socket's owner before any other bound to it.
fn holder(fs: &Fs, port: u16) -> Option<PortHolder> {
    let held = net::holder_of_tcp_port(fs, port)?;
    Some(PortHolder {
        uid: held.uid,
        process: held
            .owner
            .and_then(|o| Some((u32::try_from(o.pid).ok()?, o.comm))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 888 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn the_listening_socket_of_a_port_is_found_with_its_process() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("proc/net")).unwrap();
        std::fs::write(r.join("proc/net/tcp"), TCP).unwrap();
        std::fs::create_dir_all(r.join("proc/42/fd")).unwrap();
        std::fs::write(r.join("proc/42/comm"), "nginx\n").unwrap();
        std::os::unix::fs::symlink("socket:[777]", r.join("proc/42/fd/3")).unwrap();
        let fs = Fs::at(r);
        assert_eq!(
            holder(&fs, 0x1F90),
            Some(PortHolder {
                uid: 1000,
                process: Some((42, "nginx".into()))
            })
        );
        assert_eq!(
            holder(&fs, 0x1F91),
            Some(PortHolder {
                uid: 0,
                process: None
            })
        );
        assert_eq!(holder(&fs, 0x1F92), None);
    }
}
