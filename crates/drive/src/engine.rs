//! The run loop: driver threads with single-threaded event loops, per-task recorders merged at
//! the end, live progress and Ctrl-C on the calling thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::client::{ErrKind, Target};
use crate::error::{DriveError, invalid};
use crate::h1::{self, Conn};
use crate::measurement::Measurement;
use crate::recorder::{Recorder, Window, assemble};
use crate::spec::{DriveSpec, Load, ThinkTime};
use crate::template::BodyTemplate;
use perfpilot_stats::Rng;
use perfpilot_units as units;

/// How a run interacts with its caller.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Show live progress on stderr: a bar on a terminal, a plain line every 10 s otherwise.
    pub progress: bool,
    /// Stop early on Ctrl-C (SIGINT) and return the partial measurement.
    pub ctrl_c: bool,
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
struct Live {
    done: AtomicU64,
    errors: AtomicU64,
}

/// Everything a task needs to build requests.
struct RequestShape {
    method: String,
    headers: Vec<(String, String)>,
    body: Option<BodyTemplate>,
    timeout: Duration,
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl RequestShape {
    fn from_spec(spec: &DriveSpec) -> Result<Self, DriveError> {
        if !is_token(&spec.method) {
            return Err(invalid("HTTP method", &spec.method, "not a valid method"));
        }
        for (k, v) in &spec.headers {
            if !is_token(k) {
                return Err(invalid("header name", k, "not a valid header name"));
            }
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid("header value", v, "contains a line break"));
            }
            if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("host") {
                return Err(invalid("header name", k, "is set by the driver"));
            }
        }
        Ok(RequestShape {
            method: spec.method.clone(),
            headers: spec.headers.clone(),
            body: spec.body.clone(),
            timeout: spec.timeout,
        })
    }

    /// The bytes of request number `seq`.
    fn build(&self, target: &Target, seq: u64, rng: &mut Rng) -> Vec<u8> {
        let body = self.body.as_ref().map(|t| t.render(seq, rng));
        h1::build_request(
            &self.method,
            &target.path,
            &target.host_header,
            &self.headers,
            body.as_deref().map(str::as_bytes),
        )
    }
}

/// One virtual user (closed loop) or one lane (open loop).
struct Slot {
    index: usize,
    target: Arc<Target>,
}

/// Drives the load described by `spec` and returns its measurement. Blocks until the run ends
/// (or Ctrl-C when `control.ctrl_c`). Transport errors and non-2xx responses are counted in the
/// result; only a bad spec or a failure to start threads is an `Err`.
pub fn run(spec: &DriveSpec, control: &RunControl) -> Result<Measurement, DriveError> {
    if spec.targets.is_empty() {
        return Err(invalid("targets", "", "at least one target URL is needed"));
    }
    let targets: Vec<Arc<Target>> = spec
        .targets
        .iter()
        .map(|u| Target::parse(u).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let shape = Arc::new(RequestShape::from_spec(spec)?);
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
    for t in 0..threads {
        let my_slots: Vec<Slot> = (0..slots)
            .filter(|i| i % threads == t)
            .map(|i| Slot {
                index: i,
                target: targets[i % targets.len()].clone(),
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

    let stopped_at = supervise(spec, control, &handles, &stop_tx, &live, window)?;
    let mut recs = Vec::new();
    for h in handles {
        if let Ok(r) = h.join() {
            recs.extend(r);
        }
    }
    let end = stopped_at.unwrap_or(window.end).min(window.end);
    Ok(assemble(spec, recs, window, end, begin_wall, &targets))
}

/// How often a run whose stderr is not a terminal prints a progress line.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Waits for the driver threads while drawing progress and watching for Ctrl-C. Returns the
/// instant the run was stopped early, if it was.
fn supervise(
    spec: &DriveSpec,
    control: &RunControl,
    handles: &[std::thread::JoinHandle<Vec<Recorder>>],
    stop_tx: &watch::Sender<bool>,
    live: &Live,
    w: Window,
) -> Result<Option<Instant>, DriveError> {
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
                _ = tick.tick() => {
                    if handles.iter().all(|h| h.is_finished()) {
                        return None;
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
    Ok(stopped)
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
/// end of the run.
/// `fixed` is the request when it is the same every time. Returns `None` when stopped.
#[allow(clippy::too_many_arguments)]
async fn attempt(
    conn: &mut Option<Conn>,
    slot: &Slot,
    shape: &RequestShape,
    fixed: Option<&[u8]>,
    seq: u64,
    rng: &mut Rng,
    stop: &mut watch::Receiver<bool>,
    end: Instant,
) -> Option<Result<u16, ErrKind>> {
    let head = shape.method == "HEAD";
    let built;
    let request: &[u8] = match fixed {
        Some(r) => r,
        None => {
            built = shape.build(&slot.target, seq, rng);
            &built
        }
    };
    let work = async {
        // A kept-alive connection the server closed while idle fails on first use; that is
        // not the server's answer to this request, so it is retried once on a new connection.
        if let Some(c) = conn.as_mut() {
            match c.exchange(request, head).await {
                Err(ErrKind::Reset) => *conn = None,
                other => return other,
            }
        }
        let c = conn.insert(Conn::connect(slot.target.addr).await?);
        c.exchange(request, head).await
    };
    let result = tokio::select! {
        r = tokio::time::timeout(shape.timeout, work) => r.unwrap_or(Err(ErrKind::Timeout)),
        _ = stop.wait_for(|v| *v) => return None,
        // A response still outstanding when the window closes is not waited for.
        _ = tokio::time::sleep_until(end.into()) => return None,
    };
    if result.is_err() || conn.as_ref().is_some_and(|c| c.closed) {
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
    let mut rec = Recorder::for_target(slot.target.clone());
    let mut rng = Rng::new(0x5EED ^ (slot.index as u64).wrapping_mul(0x9E37_79B9));
    let fixed = shape
        .body
        .is_none()
        .then(|| shape.build(&slot.target, 0, &mut rng));
    let mut conn: Option<Conn> = None;
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
        let sent = Instant::now();
        let Some(result) = attempt(
            &mut conn,
            &slot,
            shape,
            fixed.as_deref(),
            n,
            &mut rng,
            &mut stop,
            w.end,
        )
        .await
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
        rec.record(&w, done, latency, result);
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
            let actual = done.elapsed().as_secs_f64();
            late_s = (late_s + actual - pause.as_secs_f64()).clamp(-0.1, 1.0);
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
    let mut rec = Recorder::for_target(slot.target.clone());
    let mut rng = Rng::new(0x0BE2 ^ (slot.index as u64).wrapping_mul(0x9E37_79B9));
    let fixed = shape
        .body
        .is_none()
        .then(|| shape.build(&slot.target, 0, &mut rng));
    let mut conn: Option<Conn> = None;
    let mut backoff = Backoff::default();
    // Lane i sends at begin + (i + k * lanes) / rate: together the lanes send every 1/rate.
    let mut k: u64 = 0;
    loop {
        let offset = (slot.index as f64 + k as f64 * lanes as f64) / rate;
        let intended = w.begin + Duration::from_secs_f64(offset);
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
        let Some(result) = attempt(
            &mut conn,
            &slot,
            shape,
            fixed.as_deref(),
            n,
            &mut rng,
            &mut stop,
            w.end,
        )
        .await
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
        rec.record(&w, done, latency, result);
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
