//! Parallel trials across hosts (`perfpilot study run FILE --hosts A,B`): study workers
//! (`perfpilot study worker`, [`worker`]) run the trials they are sent on their own host; the
//! coordinator (the runner) gives each host whole rounds, as many rounds at a time as there
//! are hosts ([`pool`](self)). A round runs on one host in its seeded order, so the host is a
//! blocking factor that the rounds absorb and every comparison stays paired within a host; a
//! host lost during a round loses that round, which runs again on another host. The messages
//! are in [`wire`]; they travel over SSH (the worker started for the run) or mutual TLS (a
//! listening worker), as `perfpilot_drive::coord` carries them.

mod lost;
mod pool;
mod remote;
pub mod wire;
pub mod worker;

use perfpilot_observe::Topology;

use crate::error::StudyError;
use crate::spec::Study;

pub use lost::HostLost;
pub use perfpilot_drive::coord::{Admission, Dialer};
pub use pool::LOCAL;
pub(crate) use pool::{Event, Host, LocalHost, Pool, PoolEnd, RoundJob};
pub use remote::HOST_SILENCE;
pub(crate) use remote::RemoteHost;
pub use worker::{OPENING, WorkerConfig, serve, serve_stdio};

/// perfpilot's version: a coordinator and its workers must run the same.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The hosts of `--hosts` connected, in order: `None` for `local` (this process), else the
/// worker, which has checked `study` on its host. Any host that cannot be used is an error
/// naming it: nothing has run yet.
pub(crate) fn connect(
    hosts: &[String],
    dialer: &Dialer,
    study: &Study,
) -> Result<Vec<Option<RemoteHost>>, StudyError> {
    let workdir = std::env::current_dir()
        .map_err(|e| StudyError::Failed(format!("cannot read the current directory: {e}")))?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for h in hosts {
        let h = h.trim();
        if h.is_empty() {
            continue;
        }
        if !seen.insert(h.to_string()) {
            return Err(StudyError::Host {
                addr: h.to_string(),
                reason: "named twice in --hosts; each host runs one round at a time".into(),
            });
        }
        out.push(if h == LOCAL {
            None
        } else {
            Some(RemoteHost::connect(h, dialer, VERSION, study, &workdir)?)
        });
    }
    if out.is_empty() {
        return Err(StudyError::Failed(
            "--hosts names no host; give ssh://HOST (a `perfpilot study worker --stdio` over SSH), HOST:PORT of a listening `perfpilot study worker`, or `local`"
                .into(),
        ));
    }
    Ok(out)
}

/// What tells machines' layouts apart: nodes, LLC domains, cores, threads per core.
fn shape(t: &Topology) -> String {
    format!(
        "{} node(s), {} LLC domain(s), {} core(s), {} thread(s) per core",
        t.nodes.len(),
        t.llcs().count(),
        t.cores().count(),
        t.smt_width()
    )
}

/// A warning for each host whose machine is shaped unlike `first`'s (the layouts are planned
/// on the first host's topology; on another shape a configuration may not fit).
pub(crate) fn shape_warnings(hosts: &[(&str, &Topology)]) -> Vec<String> {
    let Some((first, t0)) = hosts.first() else {
        return Vec::new();
    };
    let s0 = shape(t0);
    hosts[1..]
        .iter()
        .filter(|(_, t)| shape(t) != s0)
        .map(|(name, t)| {
            format!(
                "host {name} has {} but {first} has {s0}: the plan follows {first}; a configuration that does not fit {name} fails there. Use alike hosts",
                shape(t)
            )
        })
        .collect()
}
