//! The run loop: driver threads, per-thread or per-task recorders merged at the end, live
//! progress and Ctrl-C on the calling thread. HTTP/1.1 (plain and TLS) runs on an event loop
//! per thread over `mio` (`evloop.rs`, the cheaper per request); HTTP/2 on a tokio
//! current-thread runtime per thread with a task per user or lane (`tasks.rs`).

mod evloop;
mod sock;
mod tasks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::client::{ErrKind, Target};
use crate::error::{DriveError, invalid};
use crate::hist::LatencyHistogram;
use crate::interval::{Interval, Shard, merge_by_second};
use crate::kinds::KindTally;
use crate::measurement::{Measurement, SeriesPoint};
use crate::recorder::{Recorder, Window, assemble};
use crate::request::RequestShape;
use crate::spec::{DriveSpec, Load};
use perfpilot_units as units;

/// How a run interacts with its caller.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Show live progress on stderr: a bar on a terminal, a plain line every 10 s otherwise.
    pub progress: bool,
    /// Stop early on Ctrl-C (SIGINT) and return the partial measurement.
    pub ctrl_c: bool,
    /// Start at this wall-clock time rather than at once (coordinated workers start together).
    pub start_at: Option<SystemTime>,
    /// Each completed second of the measured window is sent to each of these while the run
    /// goes on (a second is sent once no task can still add to it, one to two seconds late).
    pub live: Vec<std::sync::mpsc::Sender<Interval>>,
    /// This process's CPU time (user + system), read at the start and end of the measured
    /// window to report the driver's own cost per request (`driver_cpu_per_request_ms`).
    pub cpu_clock: Option<fn() -> Duration>,
    /// Stop early when this is set (a coordinator's stop, a test's).
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
struct Live {
    done: AtomicU64,
    errors: AtomicU64,
}

/// One virtual user (closed loop) or one lane (open loop).
struct Slot {
    index: usize,
    target: Arc<Target>,
    shard: Arc<Shard>,
    /// The thread's per-kind counts, with a request profile.
    kinds: Option<Arc<KindTally>>,
    /// Shifts an open lane's schedule (coordinated workers interleave their sends).
    phase: Duration,
    /// The run's seed ([`DriveSpec::seed`]), mixed into the slot's generator.
    seed: u64,
}

/// One driver thread's share of the run.
struct Job {
    slots: Vec<Slot>,
    load: Load,
    shape: Arc<RequestShape>,
    window: Window,
    live: Arc<Live>,
    /// The run's request counter (`{{seq}}`, a profile's sequential rows).
    seq: Arc<AtomicU64>,
    /// The thread's per-second store.
    shard: Arc<Shard>,
    kinds: Option<Arc<KindTally>>,
}

/// Drives the load described by `spec` and returns its measurement. Blocks until the run ends
/// (or Ctrl-C when `control.ctrl_c`). Transport errors and non-2xx responses are counted in the
/// result; only a bad spec or a failure to start threads is an `Err`.
pub fn run(spec: &DriveSpec, control: &RunControl) -> Result<Measurement, DriveError> {
    let (targets, slots) = targets_and_slots(spec)?;
    let event_loop = evloop::serves(spec, &targets);
    let shape = Arc::new(RequestShape::from_spec(spec, &targets, event_loop)?);
    if let Some(at) = control.start_at
        && let Ok(wait) = at.duration_since(SystemTime::now())
    {
        std::thread::sleep(wait);
    }
    let begin = Instant::now();
    let begin_wall = SystemTime::now();
    let window = Window {
        begin,
        measure_start: begin + spec.warmup,
        end: begin + spec.warmup + spec.duration,
    };
    let live = Arc::new(Live::default());
    let drivers = spawn_drivers(spec, &targets, slots, shape, event_loop, window, &live)?;
    let mut sup = Supervised {
        window_start_ms: (begin_wall + spec.warmup)
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        ..Default::default()
    };
    supervise(
        spec,
        control,
        &drivers.handles,
        &drivers.stop,
        &live,
        window,
        &drivers.shards,
        &mut sup,
    )?;
    let mut recs = Vec::new();
    for h in drivers.handles {
        if let Ok(r) = h.join() {
            recs.extend(r);
        }
    }
    let cpu_end = control.cpu_clock.map(|clock| clock());
    // What is left: the last seconds of the window.
    sup.pass_on(
        control,
        merge_by_second(drivers.shards.iter().flat_map(|s| s.drain_before(u64::MAX))),
    );
    let end = sup.stopped_at.unwrap_or(window.end).min(window.end);
    let mut m = assemble(
        spec,
        recs,
        sup.seconds,
        sup.hist,
        window,
        end,
        begin_wall,
        &targets,
        &drivers.tallies,
    );
    if let (Some(start), Some(end)) = (sup.cpu_start, cpu_end) {
        own_cpu(&mut m, end.saturating_sub(start).as_secs_f64());
    }
    Ok(m)
}

/// The servers a run sends to (a profile names its one origin) and the users or connections
/// it keeps: an error for none of either.
fn targets_and_slots(spec: &DriveSpec) -> Result<(Vec<Arc<Target>>, usize), DriveError> {
    // A profile names its one server; its kinds' paths vary per request.
    let urls = match &spec.profile {
        Some(p) => vec![p.origin.clone()],
        None => spec.targets.clone(),
    };
    if urls.is_empty() {
        return Err(invalid("targets", "", "at least one target URL is needed"));
    }
    let targets: Vec<Arc<Target>> = urls
        .iter()
        .map(|u| Target::parse(u).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let slots = spec.load.slots();
    if slots == 0 {
        return Err(invalid(
            "load",
            "0",
            "needs at least one user or connection",
        ));
    }
    Ok((targets, slots))
}

/// The driver threads of a run and what they share with the supervisor.
struct Drivers {
    handles: Vec<std::thread::JoinHandle<Vec<Recorder>>>,
    /// Each thread's per-second tallies.
    shards: Vec<Arc<Shard>>,
    /// Each thread's tally per request kind (profiles only).
    tallies: Vec<Arc<KindTally>>,
    stop: Stop,
}

/// How many driver threads a run of `spec` starts: [`driver_threads_of`] with the CPUs this
/// process may run on (its affinity mask and cgroup quota, as `available_parallelism` reads
/// them).
pub fn driver_threads(spec: &DriveSpec) -> usize {
    let slots = spec.load.slots();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    driver_threads_of(spec.threads, slots, cpus)
}

/// The driver threads for `asked` threads, `slots` users or connections and `cpus` CPUs: at
/// least one, at most one per slot and one per CPU. Each thread is an event loop that never
/// blocks, so a thread beyond the CPUs adds no parallelism, only switches between threads and
/// sleeps and wake-ups split over more loops.
pub fn driver_threads_of(asked: usize, slots: usize, cpus: usize) -> usize {
    asked.min(slots).min(cpus).max(1)
}

/// Starts the driver threads ([`driver_threads`]), the slots dealt round-robin, each an event
/// loop where it serves the run, else a current-thread tokio runtime.
fn spawn_drivers(
    spec: &DriveSpec,
    targets: &[Arc<Target>],
    slots: usize,
    shape: Arc<RequestShape>,
    event_loop: bool,
    window: Window,
    live: &Arc<Live>,
) -> Result<Drivers, DriveError> {
    let threads = driver_threads(spec);
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_flag = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let mut shards = Vec::new();
    let mut tallies = Vec::new();
    for t in 0..threads {
        let shard = Arc::new(Shard::default());
        shards.push(shard.clone());
        let kinds = spec
            .profile
            .as_ref()
            .map(|p| Arc::new(KindTally::new(p.kinds.len())));
        tallies.extend(kinds.clone());
        let job = Job {
            slots: (0..slots)
                .filter(|i| i % threads == t)
                .map(|i| Slot {
                    index: spec.slot_offset + i,
                    target: targets[i % targets.len()].clone(),
                    shard: shard.clone(),
                    kinds: kinds.clone(),
                    phase: spec.schedule_offset,
                    seed: spec.seed,
                })
                .collect(),
            load: spec.load,
            shape: shape.clone(),
            window,
            live: live.clone(),
            seq: seq.clone(),
            shard,
            kinds,
        };
        let builder = std::thread::Builder::new().name(format!("drive-{t}"));
        let h = if event_loop {
            let (el, stop) = (evloop::EventLoop::new(job)?, stop_flag.clone());
            builder.spawn(move || el.run(&stop))
        } else {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(DriveError::Runtime)?;
            let stop = stop_rx.clone();
            builder.spawn(move || tasks::run_thread(rt, job, stop))
        }
        .map_err(DriveError::Runtime)?;
        handles.push(h);
    }
    Ok(Drivers {
        handles,
        shards,
        tallies,
        stop: Stop {
            tx: stop_tx,
            flag: stop_flag,
        },
    })
}

/// Records the driver's own CPU over the run, `cpu_s` seconds: per request and in cores.
fn own_cpu(m: &mut Measurement, cpu_s: f64) {
    if m.requests == 0 {
        return;
    }
    m.extra.insert(
        "driver_cpu_per_request_ms".to_string(),
        cpu_s * 1000.0 / m.requests as f64,
    );
    m.cpu = Some(vec![crate::measurement::CpuUsage {
        name: "perfpilot drive".to_string(),
        pid: Some(std::process::id()),
        tier: None,
        cpu_s,
        cores: cpu_s / m.duration_s.max(1e-9),
    }]);
}

/// What the supervising thread gathered.
#[derive(Default)]
struct Supervised {
    /// When Ctrl-C (or the caller) stopped the run early.
    stopped_at: Option<Instant>,
    /// The CPU clock at the start of the measured window.
    cpu_start: Option<Duration>,
    /// The series so far.
    seconds: Vec<SeriesPoint>,
    /// The wall-clock start of the measured window, ms since the Unix epoch.
    window_start_ms: u64,
    /// The latencies of the seconds so far: the run's histogram.
    hist: LatencyHistogram,
}

/// How the driver threads are told to stop: the tokio engine's tasks wait on the channel, the
/// event loops look at the flag after each poll.
struct Stop {
    tx: watch::Sender<bool>,
    flag: Arc<AtomicBool>,
}

impl Stop {
    fn now(&self) {
        self.flag.store(true, Ordering::Relaxed);
        let _ = self.tx.send(true);
    }
}

impl Supervised {
    /// Keeps the drained seconds' points and sends the seconds to the live outputs.
    fn pass_on(&mut self, control: &RunControl, drained: Vec<Interval>) {
        for mut i in drained {
            i.window_start_ms = self.window_start_ms;
            self.hist.add(&i.hist);
            let point = i.point();
            match self.seconds.iter_mut().find(|p| p.t_s == i.t_s) {
                // A task starved for over a second added to a second already passed on: its
                // counts join the point (the live outputs had that second without them).
                Some(p) => {
                    p.requests += point.requests;
                    p.ok += point.ok;
                    p.errors += point.errors;
                }
                None => self.seconds.push(point),
            }
            for tx in &control.live {
                let _ = tx.send(i.clone());
            }
        }
    }
}

/// Seconds are passed on this long after they end, so no task can still be adding to them.
const SECOND_LAG: Duration = Duration::from_millis(1500);

/// How often a run whose stderr is not a terminal prints a progress line.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Waits for the driver threads while drawing progress, passing completed seconds on and
/// watching for Ctrl-C or the caller's stop.
#[allow(clippy::too_many_arguments)]
fn supervise(
    spec: &DriveSpec,
    control: &RunControl,
    handles: &[std::thread::JoinHandle<Vec<Recorder>>],
    stop: &Stop,
    live: &Live,
    w: Window,
    shards: &[Arc<Shard>],
    sup: &mut Supervised,
) -> Result<(), DriveError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DriveError::Runtime)?;
    let bar = if control.progress {
        let b = indicatif::ProgressBar::with_draw_target(
            Some((spec.warmup + spec.duration).as_secs().max(1)),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len}s {msg}")
        {
            b.set_style(style.progress_chars("=> "));
        }
        Some(b)
    } else {
        None
    };
    let stopped = rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last = (Instant::now(), 0u64);
        let mut measuring = false;
        let ctrl_c = async {
            if control.ctrl_c {
                let _ = tokio::signal::ctrl_c().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(w.measure_start.into()), if !measuring => {
                    measuring = true;
                    sup.cpu_start = control.cpu_clock.map(|clock| clock());
                }
                _ = tick.tick() => {
                    if handles.iter().all(|h| h.is_finished()) {
                        return None;
                    }
                    if control.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                        stop.now();
                        return Some(Instant::now());
                    }
                    let now = Instant::now();
                    if let Some(passed) = now.checked_duration_since(w.measure_start + SECOND_LAG) {
                        let before = passed.as_secs();
                        sup.pass_on(
                            control,
                            merge_by_second(shards.iter().flat_map(|s| s.drain_before(before))),
                        );
                    }
                    if let Some(b) = &bar {
                        let now = Instant::now();
                        // Hidden on a non-terminal: a log gets a plain line every LOG_EVERY.
                        let log_line = b.is_hidden() && now - last.0 >= LOG_EVERY;
                        if !b.is_hidden() || log_line {
                            let done = live.done.load(Ordering::Relaxed);
                            let rate =
                                (done - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-3);
                            last = (now, done);
                            let phase = if now < w.measure_start { "warm-up" } else { "measure" };
                            let msg = format!(
                                "{} requests, {}, {} errors",
                                units::count(done),
                                units::rate(rate, "req"),
                                units::count(live.errors.load(Ordering::Relaxed))
                            );
                            if log_line {
                                eprintln!(
                                    "progress: {phase} {} of {}: {msg}",
                                    units::duration(now - w.begin),
                                    units::duration(spec.warmup + spec.duration)
                                );
                            } else {
                                b.set_prefix(phase);
                                b.set_position((now - w.begin).as_secs());
                                b.set_message(msg);
                            }
                        }
                    }
                }
                _ = &mut ctrl_c => {
                    stop.now();
                    return Some(Instant::now());
                }
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    sup.stopped_at = stopped;
    Ok(())
}

/// The pause before a user or lane reconnects after its connection failed: 1 ms, doubling
/// with each failure in a row up to 1 s, and gone after the next response, so that a server
/// that is down or refusing is not hammered while it stays so.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(1);
    const CAP: Duration = Duration::from_secs(1);

    /// The pause after an attempt that ended in `result`, if there is one.
    fn after(&mut self, result: Result<u16, ErrKind>) -> Option<Duration> {
        match result {
            Ok(_) => {
                self.next = Self::FIRST;
                None
            }
            Err(kind) if kind.reconnects() => {
                let wait = self.next;
                self.next = (self.next * 2).min(Self::CAP);
                Some(wait)
            }
            Err(_) => None,
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Self::FIRST }
    }
}

/// Timers (tokio's wheel, epoll's timeout) have millisecond granularity and wake late, never
/// early: an open lane aims one tick before a send's intended time.
const TIMER_TICK: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_threads_are_capped_at_the_slots_and_at_the_cpus_the_process_may_use() {
        assert_eq!(driver_threads_of(4, 64, 16), 4);
        // Pinned to one CPU: four loops would only take turns on it.
        assert_eq!(driver_threads_of(4, 64, 1), 1);
        assert_eq!(driver_threads_of(8, 3, 16), 3);
        assert_eq!(driver_threads_of(0, 64, 16), 1);
        assert_eq!(driver_threads_of(4, 64, 0), 1);
    }

    #[test]
    fn reconnects_back_off_from_1_ms_doubling_to_1_s_and_reset_on_a_response() {
        let mut b = Backoff::default();
        let refused = Err(ErrKind::Connect(std::io::ErrorKind::ConnectionRefused));
        let waits: Vec<u128> = (0..12)
            .map(|_| b.after(refused).unwrap().as_millis())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000]);
        // A timeout waited its whole timeout already: no pause, and the back-off stays.
        assert_eq!(b.after(Err(ErrKind::Timeout)), None);
        // Any response, even a 503, means the server is there.
        assert_eq!(b.after(Ok(503)), None);
        assert_eq!(b.after(Err(ErrKind::Reset)), Some(Duration::from_millis(1)));
    }
}
