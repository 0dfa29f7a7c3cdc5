//! The servers among the workloads: what each listens on, which built-in preset answers for it
//! (found without configuration, tried in order, the first that answers kept), and its
//! readings turned into per-window observations.

use std::collections::HashMap;
use std::time::Duration;

use perfpilot_observe::workload::Workload;
use perfpilot_sys::Fs;
use perfpilot_sys::net::{self, Listener};
use perfpilot_sys::process::ProcReader;
use tracing::{debug, info};

use super::choose::PresetOffer;
use super::preset::{self, Candidate, Endpoint, Identity, PresetConfig, PresetReader};
use super::proxy::per_cpu_second;
use super::{Observation, SignalKind, SpanWindow, Windowed};
use crate::config::ValueKind;

/// After a preset failed, how long before it is tried again.
const RETRY_FAILED_MS: i64 = 60_000;

/// After no preset matched, how long before the workload is looked at again (sooner when its
/// processes change).
const RETRY_ABSENT_MS: i64 = 300_000;

/// What is known of one workload as a server.
struct Slot {
    /// Its processes when it was looked at: a restart means looking again.
    members: Vec<(i32, u64)>,
    /// The kind of server (a preset's name, or "a server" when it only listens), if it listens
    /// or is a known server.
    serves: Option<String>,
    preset: PresetState,
    /// When it may be looked at again (ms since the epoch); never while a preset answers.
    retry_ms: i64,
    windowed: Windowed,
    /// For a counter that moves in lumps: windows of several scans.
    span: Option<SpanWindow>,
}

/// A lumpy counter's window holds at least this many of its lumps (one lump more or less is
/// then at most an eighth of it).
const LUMPS_PER_WINDOW: f64 = 8.0;

enum PresetState {
    Ready {
        reader: Box<PresetReader>,
        signal: SignalKind,
    },
    Failed(String),
    Absent,
}

/// The servers among the workloads, by workload signature.
pub struct Servers {
    fs: Fs,
    reader: ProcReader,
    overrides: Vec<PresetConfig>,
    slots: HashMap<String, Slot>,
}

impl Servers {
    /// Servers over `fs`, with the config's `[[preset]]` entries.
    pub fn new(fs: &Fs, overrides: Vec<PresetConfig>) -> Servers {
        Servers {
            fs: fs.clone(),
            reader: ProcReader::new(fs),
            overrides,
            slots: HashMap::new(),
        }
    }

    /// Looks at the workloads `ws` that are new, restarted or due for another try; forgets the
    /// ones that exited (`all` is every workload of the scan).
    pub fn refresh(&mut self, all: &[Workload], ws: &[&Workload], timeout: Duration) {
        self.slots
            .retain(|sig, _| all.iter().any(|w| &w.signature == sig));
        let now = perfpilot_sys::clock::now_ms();
        for w in ws {
            let members: Vec<(i32, u64)> = w.members.iter().map(|m| (m.pid, m.starttime)).collect();
            let due = match self.slots.get(&w.signature) {
                None => true,
                Some(s) if !same_processes(&s.members, &members) => true,
                Some(s) => !matches!(s.preset, PresetState::Ready { .. }) && now >= s.retry_ms,
            };
            if due {
                let slot = self.look_at(w, members, timeout, now);
                self.slots.insert(w.signature.clone(), slot);
            }
        }
    }

    /// The processes whose sockets and identity stand for `w`: its own, and the parents of
    /// its members that run the same program — a pre-forked server's workers (PostgreSQL's
    /// backends) close the listening sockets their parent holds, and the parent, idle and
    /// small, may not be in the workload at all. The oldest comes first.
    fn stand_ins(&mut self, w: &Workload) -> Vec<i32> {
        let mut pids: Vec<(u64, i32)> = w.members.iter().map(|m| (m.starttime, m.pid)).collect();
        for m in &w.members {
            let Ok(st) = self.reader.status(m.pid) else {
                continue;
            };
            if st.ppid <= 1 || pids.iter().any(|(_, p)| *p == st.ppid) {
                continue;
            }
            if let (Ok(parent), Ok(start)) =
                (self.reader.status(st.ppid), self.reader.stat(st.ppid))
                && parent.name == st.name
            {
                pids.push((start.starttime, st.ppid));
            }
        }
        pids.sort();
        pids.into_iter().map(|(_, p)| p).collect()
    }

    /// Finds the presets that match `w` and keeps the first that answers.
    fn look_at(
        &mut self,
        w: &Workload,
        members: Vec<(i32, u64)>,
        timeout: Duration,
        now: i64,
    ) -> Slot {
        let pids = self.stand_ins(w);
        let listeners = net::listeners_of(&self.fs, &pids);
        let endpoints: Vec<Endpoint> = listeners
            .iter()
            .map(|l| match l {
                Listener::Tcp(a) => Endpoint::Tcp(*a),
                Listener::Unix(p) => Endpoint::Unix(p.clone()),
            })
            .collect();
        let id = self.identity(w, pids.first().copied());
        let candidates = preset::detect(&id, &endpoints, &self.overrides);
        let serves = candidates
            .first()
            .map(|c| c.kind.as_str().to_string())
            .or_else(|| (!endpoints.is_empty()).then(|| "a server".to_string()));
        let mut windowed = Windowed::default();
        let mut failures = Vec::new();
        for c in candidates {
            let mut reader = PresetReader::new(c.clone());
            match reader.read(timeout) {
                Ok(r) => {
                    info!(workload = %w.name, "signal: preset {} ({})", c.kind, c.why);
                    windowed.feed(ValueKind::Counter, perfpilot_sys::clock::mono_s(), r.value);
                    let signal = preset_signal(&c, &r);
                    return Slot {
                        members,
                        serves,
                        preset: PresetState::Ready {
                            reader: Box::new(reader),
                            signal,
                        },
                        retry_ms: now,
                        windowed,
                        span: c
                            .kind
                            .lump_period_s()
                            .map(|p| SpanWindow::new(LUMPS_PER_WINDOW * p)),
                    };
                }
                Err(e) => {
                    debug!(workload = %w.name, "preset {} did not answer: {e}", c.kind);
                    failures.push(e.to_string());
                }
            }
        }
        let (preset, retry) = if failures.is_empty() {
            (PresetState::Absent, RETRY_ABSENT_MS)
        } else {
            let why = failures.join("; ");
            info!(workload = %w.name, "no preset answered (tried again in {} s): {why}", RETRY_FAILED_MS / 1000);
            (PresetState::Failed(why), RETRY_FAILED_MS)
        };
        Slot {
            members,
            serves,
            preset,
            retry_ms: now + retry,
            windowed,
            span: None,
        }
    }

    /// What the workload's oldest process (`pid`, a stand-in) is: its name, executable,
    /// command line and ids; the workload's own where that process cannot be read.
    fn identity(&mut self, w: &Workload, pid: Option<i32>) -> Identity {
        let mut id =
            Identity::read(&mut self.reader, pid.unwrap_or_default()).unwrap_or_else(|| Identity {
                comm: w.comm.clone(),
                uid: w.uid,
                ..Identity::default()
            });
        if id.cmdline.is_empty() {
            id.cmdline = w.cmdline.clone();
        }
        id
    }

    /// What a preset offers the workload `signature` now.
    pub fn preset_offer(&self, signature: &str) -> PresetOffer {
        match self.slots.get(signature).map(|s| &s.preset) {
            Some(PresetState::Ready { signal, .. }) => PresetOffer::Ready(signal.clone()),
            Some(PresetState::Failed(why)) => PresetOffer::Failed(why.clone()),
            Some(PresetState::Absent) | None => PresetOffer::Absent,
        }
    }

    /// The kind of server the workload is, when it listens on a socket or is a known server.
    pub fn serves(&self, signature: &str) -> Option<&str> {
        self.slots.get(signature)?.serves.as_deref()
    }

    /// Starts the workload's windows afresh at its next reading.
    pub fn restart_windows(&mut self, signature: &str) {
        if let Some(slot) = self.slots.get_mut(signature) {
            slot.windowed.reset();
            if let Some(span) = slot.span.as_mut() {
                span.reset();
            }
        }
    }

    /// The length of the workload's windows, when its preset reads them over several scans.
    pub fn window_s(&self, signature: &str) -> Option<f64> {
        let slot = self.slots.get(signature)?;
        slot.span.as_ref().map(|s| s.min_s())
    }

    /// This window's observation of workload `w` by its preset: the counter's rate per
    /// CPU-second (`t_s`: monotonic seconds). A failed reading is an error and starts the rate
    /// afresh.
    pub fn observe(&mut self, w: &Workload, t_s: f64, timeout: Duration) -> Observation {
        let Some(slot) = self.slots.get_mut(&w.signature) else {
            return Err("its preset is gone (the server was not seen this scan)".into());
        };
        let PresetState::Ready { reader, .. } = &mut slot.preset else {
            return Err("its preset no longer answers".into());
        };
        match reader.read(timeout) {
            Ok(r) => match slot.span.as_mut() {
                Some(span) => Ok(span.feed(t_s, r.value, w.cpu_cores)),
                None => Ok(per_cpu_second(
                    slot.windowed.feed(ValueKind::Counter, t_s, r.value),
                    w,
                )),
            },
            Err(e) => {
                slot.windowed.reset();
                if let Some(span) = slot.span.as_mut() {
                    span.reset();
                }
                Err(e.to_string())
            }
        }
    }
}

/// A preset's signal as trials and status describe it.
fn preset_signal(c: &Candidate, r: &preset::Reading) -> SignalKind {
    SignalKind::Preset {
        preset: c.kind.as_str().to_string(),
        endpoint: c.endpoint.to_string(),
        counter: r.source.clone(),
    }
}

/// Whether two member lists are the same processes (order aside).
fn same_processes(a: &[(i32, u64)], b: &[(i32, u64)]) -> bool {
    // A pre-forked server's workers come and go; its oldest process stays.
    let oldest = |m: &[(i32, u64)]| m.iter().min_by_key(|x| x.1).copied();
    oldest(a) == oldest(b)
}
