//! The run loop: driver threads with single-threaded event loops, per-task recorders merged at
//! the end, live progress and Ctrl-C on the calling thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::client::{ErrKind, Target};
use crate::error::{DriveError, invalid};
use crate::interval::{Interval, Shard, merge_by_second};
use crate::kinds::KindTally;
use crate::link::Link;
use crate::measurement::{Measurement, SeriesPoint};
use crate::recorder::{Recorder, Window, assemble};
use crate::request::{Outgoing, Prepared, RequestShape, exchange};
use crate::spec::{DriveSpec, Load, ThinkTime};
use perfpilot_stats::Rng;
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

/// Drives the load described by `spec` and returns its measurement. Blocks until the run ends
/// (or Ctrl-C when `control.ctrl_c`). Transport errors and non-2xx responses are counted in the
/// result; only a bad spec or a failure to start threads is an `Err`.
pub fn run(spec: &DriveSpec, control: &RunControl) -> Result<Measurement, DriveError> {
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
    let shape = Arc::new(RequestShape::from_spec(spec, &targets)?);
    let slots = match spec.load {
        Load::Closed { users, .. } => users,
        Load::Open { connections, .. } => connections,
    };
    if slots == 0 {
        return Err(invalid(
            "load",
            "0",
            "needs at least one user or connection",
        ));
    }
    let threads = spec.threads.clamp(1, slots);
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let live = Arc::new(Live::default());
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
        let my_slots: Vec<Slot> = (0..slots)
            .filter(|i| i % threads == t)
            .map(|i| Slot {
                index: spec.slot_offset + i,
                target: targets[i % targets.len()].clone(),
                shard: shard.clone(),
                kinds: kinds.clone(),
                phase: spec.schedule_offset,
                seed: spec.seed,
            })
            .collect();
        let load = spec.load.clone();
        let shape = shape.clone();
        let stop = stop_rx.clone();
        let live = live.clone();
        let seq = seq.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DriveError::Runtime)?;
        let h = std::thread::Builder::new()
            .name(format!("drive-{t}"))
            .spawn(move || {
                rt.block_on(async move {
                    let mut tasks = Vec::new();
                    for slot in my_slots {
                        let (load, shape, stop, live, seq) = (
                            load.clone(),
                            shape.clone(),
                            stop.clone(),
                            live.clone(),
                            seq.clone(),
                        );
                        tasks.push(tokio::spawn(async move {
                            match load {
                                Load::Closed { think, .. } => {
                                    closed_user(slot, think, &shape, window, stop, &live, &seq)
                                        .await
                                }
                                Load::Open { rate, connections } => {
                                    open_lane(
                                        slot,
                                        rate,
                                        connections,
                                        &shape,
                                        window,
                                        stop,
                                        &live,
                                        &seq,
                                    )
                                    .await
                                }
                            }
                        }));
                    }
                    let mut recs = Vec::new();
                    for t in tasks {
                        if let Ok(r) = t.await {
                            recs.push(r);
                        }
                    }
                    recs
                })
            })
            .map_err(DriveError::Runtime)?;
        handles.push(h);
    }

    let mut sup = Supervised {
        window_start_ms: (begin_wall + spec.warmup)
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        ..Default::default()
    };
    supervise(
        spec, control, &handles, &stop_tx, &live, window, &shards, &mut sup,
    )?;
    let mut recs = Vec::new();
    for h in handles {
        if let Ok(r) = h.join() {
            recs.extend(r);
        }
    }
    let cpu_end = control.cpu_clock.map(|clock| clock());
    // What is left: the last seconds of the window.
    sup.pass_on(
        control,
        merge_by_second(shards.iter().flat_map(|s| s.drain_before(u64::MAX))),
    );
    let end = sup.stopped_at.unwrap_or(window.end).min(window.end);
    let mut m = assemble(
        spec,
        recs,
        sup.seconds,
        window,
        end,
        begin_wall,
        &targets,
        &tallies,
    );
    if let (Some(start), Some(end)) = (sup.cpu_start, cpu_end)
        && m.requests > 0
    {
        let cpu_s = end.saturating_sub(start).as_secs_f64();
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
    Ok(m)
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
}

impl Supervised {
    /// Keeps the drained seconds' points and sends the seconds to the live outputs.
    fn pass_on(&mut self, control: &RunControl, drained: Vec<Interval>) {
        for mut i in drained {
            i.window_start_ms = self.window_start_ms;
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
    stop_tx: &watch::Sender<bool>,
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
                        let _ = stop_tx.send(true);
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
                    let _ = stop_tx.send(true);
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

/// Granularity of tokio's timer.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// Sleeps until `deadline` unless stopped; returns false when stopped.
async fn sleep_until(deadline: Instant, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep_until(deadline.into()) => true,
        _ = stop.wait_for(|v| *v) => false,
    }
}

/// One request (connecting first when needed), bounded by the timeout, the stop signal and the
/// end of the run. Returns `None` when stopped.
#[allow(clippy::too_many_arguments)]
async fn attempt(
    conn: &mut Option<Link>,
    slot: &Slot,
    shape: &RequestShape,
    prepared: &Prepared,
    out: &Outgoing,
    stop: &mut watch::Receiver<bool>,
    end: Instant,
) -> Option<Result<u16, ErrKind>> {
    let work = async {
        // A kept-alive connection the server closed while idle fails on first use; that is
        // not the server's answer to this request, so it is retried once on a new connection.
        if let Some(c) = conn.as_mut() {
            match exchange(c, &slot.target, shape, prepared, out).await {
                Err(ErrKind::Reset) => *conn = None,
                other => return other,
            }
        }
        let c = conn.insert(shape.connector.connect(&slot.target).await?);
        exchange(c, &slot.target, shape, prepared, out).await
    };
    let result = tokio::select! {
        r = tokio::time::timeout(shape.timeout, work) => r.unwrap_or(Err(ErrKind::Timeout)),
        _ = stop.wait_for(|v| *v) => return None,
        // A response still outstanding when the window closes is not waited for.
        _ = tokio::time::sleep_until(end.into()) => return None,
    };
    if result.is_err() || conn.as_ref().is_some_and(Link::closed) {
        *conn = None;
    }
    Some(result)
}

async fn closed_user(
    slot: Slot,
    think: ThinkTime,
    shape: &RequestShape,
    w: Window,
    mut stop: watch::Receiver<bool>,
    live: &Live,
    seq: &AtomicU64,
) -> Recorder {
    let mut rec = Recorder::new(slot.target.clone(), slot.shard.clone(), slot.kinds.clone());
    let mut rng = Rng::new(0x5EED ^ slot.seed ^ (slot.index as u64).wrapping_mul(0x9E37_79B9));
    let prepared = shape.prepare(&slot.target);
    let mut conn: Option<Link> = None;
    let mut backoff = Backoff::default();
    // Users start spread over the first think time, as users arriving at random would.
    if think != ThinkTime::Zero {
        let first = think.sample(rng.next_f64()).mul_f64(rng.next_f64());
        if !sleep_until(Instant::now() + first, &mut stop).await {
            return rec;
        }
    }
    let mut late_s = 0.0_f64;
    while Instant::now() < w.end && !*stop.borrow() {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let out = shape.outgoing(n, &mut rng);
        let sent = Instant::now();
        let Some(result) =
            attempt(&mut conn, &slot, shape, &prepared, &out, &mut stop, w.end).await
        else {
            break;
        };
        let done = Instant::now();
        live.done.fetch_add(1, Ordering::Relaxed);
        let latency = match result {
            Ok(_) => Some(done - sent),
            Err(_) => {
                live.errors.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let h2 = conn.as_ref().is_some_and(Link::is_h2);
        rec.record(&w, done, latency, result, h2, out.kind);
        let mut pause = think.sample(rng.next_f64());
        if let Some(wait) = backoff.after(result) {
            pause = pause.max(wait);
        }
        // Timer wake-ups land late (millisecond wheel, busy CPUs); carry the lateness over as
        // a debt subtracted from the next think time, so the mean think time is the one
        // asked for and X = N / (R + Z) holds.
        if !pause.is_zero() {
            let aim = pause.as_secs_f64() - late_s;
            if aim > 0.0 && !sleep_until(done + Duration::from_secs_f64(aim), &mut stop).await {
                break;
            }
            let actual = done.elapsed();
            late_s = (late_s + actual.as_secs_f64() - pause.as_secs_f64()).clamp(-0.1, 1.0);
            if think != ThinkTime::Zero {
                rec.record_pause(&w, done, actual);
            }
        }
    }
    rec
}

#[allow(clippy::too_many_arguments)]
async fn open_lane(
    slot: Slot,
    rate: f64,
    lanes: usize,
    shape: &RequestShape,
    w: Window,
    mut stop: watch::Receiver<bool>,
    live: &Live,
    seq: &AtomicU64,
) -> Recorder {
    let mut rec = Recorder::new(slot.target.clone(), slot.shard.clone(), slot.kinds.clone());
    let mut rng = Rng::new(0x0BE2 ^ slot.seed ^ (slot.index as u64).wrapping_mul(0x9E37_79B9));
    let prepared = shape.prepare(&slot.target);
    let mut conn: Option<Link> = None;
    let mut backoff = Backoff::default();
    // Lane i sends at begin + (i + k * lanes) / rate: together the lanes send every 1/rate.
    let mut k: u64 = 0;
    loop {
        let offset = (slot.index as f64 + k as f64 * lanes as f64) / rate;
        let intended = w.begin + slot.phase + Duration::from_secs_f64(offset);
        if intended >= w.end || *stop.borrow() {
            break;
        }
        k += 1;
        // The timer wheel has millisecond granularity and wakes late, never early: aim one
        // tick before the intended time so sends are on schedule to within a tick.
        if intended > Instant::now() + TIMER_TICK
            && !sleep_until(intended - TIMER_TICK, &mut stop).await
        {
            break;
        }
        let sent = Instant::now();
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let out = shape.outgoing(n, &mut rng);
        let Some(result) =
            attempt(&mut conn, &slot, shape, &prepared, &out, &mut stop, w.end).await
        else {
            break;
        };
        let done = Instant::now();
        live.done.fetch_add(1, Ordering::Relaxed);
        // Latency counts from when the request *should* have been sent, so time spent waiting
        // behind a slow response is not omitted (no coordinated omission). A send slightly
        // ahead of schedule counts from its actual send.
        let latency = match result {
            Ok(_) => Some(done.saturating_duration_since(intended.min(sent))),
            Err(_) => {
                live.errors.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let h2 = conn.as_ref().is_some_and(Link::is_h2);
        rec.record(&w, done, latency, result, h2, out.kind);
        if let Some(wait) = backoff.after(result) {
            let _ = sleep_until(Instant::now() + wait, &mut stop).await;
        }
    }
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

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
