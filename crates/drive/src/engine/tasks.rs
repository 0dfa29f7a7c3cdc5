//! The tokio engine: a current-thread runtime per driver thread and a task per user or lane.
//! It serves what the event loop (`evloop.rs`) does not: HTTP/2 (the `h2` crate needs tokio),
//! and `https://` targets whose server may pick HTTP/2 by ALPN.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Backoff, Live, Slot, TIMER_TICK};
use crate::client::ErrKind;
use crate::link::Link;
use crate::recorder::{Attempt, Recorder, Window};
use crate::request::{Outgoing, Prepared, RequestShape, exchange};
use crate::spec::{Load, ThinkTime};
use perfpilot_stats::Rng;

/// One driver thread's share: its slots, run as tasks of a current-thread runtime until the
/// window ends or the run is stopped; returns their recorders.
pub(super) fn run_thread(
    rt: tokio::runtime::Runtime,
    job: super::Job,
    stop: watch::Receiver<bool>,
) -> Vec<Recorder> {
    let super::Job {
        slots,
        load,
        shape,
        window,
        live,
        seq,
        ..
    } = job;
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for slot in slots {
            let (load, shape, stop, live, seq) =
                (load, shape.clone(), stop.clone(), live.clone(), seq.clone());
            tasks.push(tokio::spawn(async move {
                match load {
                    Load::Closed { think, .. } => {
                        closed_user(slot, think, &shape, window, stop, &live, &seq).await
                    }
                    Load::Open { rate, connections } => {
                        open_lane(slot, rate, connections, &shape, window, stop, &live, &seq).await
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
}

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

/// Counts an attempt that ended now (its latency from `from` when it got a response) in the
/// recorder and the live counters; returns when it ended.
#[allow(clippy::too_many_arguments)]
fn count(
    rec: &mut Recorder,
    w: &Window,
    slot: &Slot,
    live: &Live,
    conn: &Option<Link>,
    result: Result<u16, ErrKind>,
    from: Instant,
    kind: Option<usize>,
) -> Instant {
    let done = Instant::now();
    live.done.fetch_add(1, Ordering::Relaxed);
    let latency = match result {
        Ok(_) => Some(done.saturating_duration_since(from)),
        Err(_) => {
            live.errors.fetch_add(1, Ordering::Relaxed);
            None
        }
    };
    let attempt = Attempt {
        at: done,
        latency,
        outcome: result,
        h2: conn.as_ref().is_some_and(Link::is_h2),
        kind,
    };
    rec.record(w, &slot.target, attempt);
    done
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
    let mut rec = Recorder::new(slot.shard.clone(), slot.kinds.clone(), false);
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
        let done = count(&mut rec, &w, &slot, live, &conn, result, sent, out.kind);
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
    let mut rec = Recorder::new(slot.shard.clone(), slot.kinds.clone(), false);
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
        // Latency counts from when the request *should* have been sent, so time spent waiting
        // behind a slow response is not omitted (no coordinated omission). A send slightly
        // ahead of schedule counts from its actual send.
        let from = intended.min(sent);
        count(&mut rec, &w, &slot, live, &conn, result, from, out.kind);
        if let Some(wait) = backoff.after(result) {
            let _ = sleep_until(Instant::now() + wait, &mut stop).await;
        }
    }
    rec
}
