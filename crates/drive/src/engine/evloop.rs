//! The event loop: one `mio` poll per driver thread serving all of its users (closed loop) or
//! lanes (open loop) over HTTP/1.1, plain or TLS. A request costs a write, a read and a share
//! of an `epoll_wait`: no task to wake, no timer armed per request (timeouts are swept every
//! [`SWEEP`]), no read that only finds the socket empty (`sock.rs`), one clock reading per
//! poll for the responses it brought, and one recorder per thread whose seconds go to the
//! shard once they are over. The semantics are the tokio engine's (`tasks.rs`): a user's think
//! time with its lateness carried over, a lane's schedule with latency from the intended send,
//! one retry on a new connection when a kept-alive one was closed, back-off after failures.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::{Events, Poll, Token};
use rustls::pki_types::ServerName;

use super::sock::Sock;
use super::{Backoff, Job, Live, Slot, TIMER_TICK};
use crate::client::{ErrKind, Target};
use crate::error::DriveError;
use crate::h1::Response;
use crate::recorder::{Attempt, Recorder, Window};
use crate::request::{Outgoing, Prepared, RequestShape};
use crate::spec::{DriveSpec, HttpVersion, Load, ThinkTime};
use crate::tls;
use perfpilot_stats::Rng;

/// How often requests in flight are checked against their timeout.
const SWEEP: Duration = Duration::from_millis(10);

/// The longest poll: how soon a stop is seen.
const LONGEST_POLL: Duration = Duration::from_millis(20);

/// Whether the event loop serves the run: HTTP/1.1 only, or `auto` where every `https://`
/// server picks HTTP/1.1 when offered both by ALPN (one handshake each, before the run, tells).
/// HTTP/2 is the tokio engine's.
pub(super) fn serves(spec: &DriveSpec, targets: &[Arc<Target>]) -> bool {
    match spec.http {
        HttpVersion::Http1 => true,
        HttpVersion::Http2 => false,
        HttpVersion::Auto => {
            let mut asked: Vec<(&str, std::net::SocketAddr)> = Vec::new();
            targets.iter().filter(|t| t.tls).all(|t| {
                if asked.contains(&(t.host.as_str(), t.addr)) {
                    return true;
                }
                asked.push((t.host.as_str(), t.addr));
                picks_http1(t, spec)
            })
        }
    }
}

/// Whether `target`'s server picks HTTP/1.1 (or no protocol) when offered HTTP/2 and HTTP/1.1;
/// false when the handshake fails (the tokio engine then reports it as before).
fn picks_http1(target: &Target, spec: &DriveSpec) -> bool {
    let probe = || -> Option<bool> {
        let config = tls::client_config(&spec.tls, HttpVersion::Auto).ok()?;
        let name = tls::server_name(&target.host).ok()?;
        let wait = spec.timeout.min(Duration::from_secs(5));
        let mut tcp = std::net::TcpStream::connect_timeout(&target.addr, wait).ok()?;
        tcp.set_read_timeout(Some(wait)).ok()?;
        tcp.set_write_timeout(Some(wait)).ok()?;
        let mut conn = rustls::ClientConnection::new(config, name).ok()?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).ok()?;
        }
        Some(conn.alpn_protocol() != Some(b"h2"))
    };
    probe().unwrap_or(false)
}

/// What a waiting lane does when its time comes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Then {
    /// Send (a user's first request after its spread-out start).
    Begin,
    /// End a think pause, then send.
    PauseOver,
    /// An open lane's send due at this time.
    Send(Instant),
    /// An open lane after a back-off: find its next send.
    Schedule,
}

/// A request in flight.
struct Flight {
    out: Outgoing,
    request: Bytes,
    written: usize,
    /// When it was sent (a send ahead of schedule counts from here).
    sent: Instant,
    /// An open lane's intended send time.
    intended: Option<Instant>,
    deadline: Instant,
    response: Response,
    head: bool,
    /// It runs on a connection that carried responses before: a reset is retried once.
    reused: bool,
}

/// One user or lane.
struct Lane {
    slot: Slot,
    rng: Rng,
    prepared: Prepared,
    name: Option<ServerName<'static>>,
    sock: Option<Sock>,
    flight: Option<Flight>,
    /// When it next acts, and what it does then, while it waits.
    wake: Option<(Instant, Then)>,
    /// A think pause under way: when it began and the pause drawn.
    pause: Option<(Instant, Duration)>,
    backoff: Backoff,
    /// Think-time lateness carried over, seconds.
    late_s: f64,
    /// An open lane's next send in its schedule.
    k: u64,
    finished: bool,
}

/// One driver thread's loop.
pub(super) struct EventLoop {
    poll: Poll,
    lanes: Vec<Lane>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    rec: Recorder,
    shape: Arc<RequestShape>,
    load: Load,
    w: Window,
    live: Arc<Live>,
    seq: Arc<std::sync::atomic::AtomicU64>,
    /// Attempts and errors not yet added to the live counters.
    done: u64,
    errors: u64,
    last_sweep: Instant,
    finished: usize,
}

impl EventLoop {
    /// The loop of `job`'s slots (its poll opened here, so that a failure is the run's error).
    pub(super) fn new(job: Job) -> Result<EventLoop, DriveError> {
        let poll = Poll::new().map_err(DriveError::Runtime)?;
        let seed_mix = match job.load {
            Load::Closed { .. } => 0x5EED,
            Load::Open { .. } => 0x0BE2,
        };
        let lanes = job
            .slots
            .into_iter()
            .map(|slot| Lane {
                rng: Rng::new(seed_mix ^ slot.seed ^ (slot.index as u64).wrapping_mul(0x9E37_79B9)),
                prepared: job.shape.prepare(&slot.target),
                name: slot
                    .target
                    .tls
                    .then(|| tls::server_name(&slot.target.host).ok())
                    .flatten(),
                slot,
                sock: None,
                flight: None,
                wake: None,
                pause: None,
                backoff: Backoff::default(),
                late_s: 0.0,
                k: 0,
                finished: false,
            })
            .collect();
        Ok(EventLoop {
            poll,
            lanes,
            timers: BinaryHeap::new(),
            rec: Recorder::new(job.shard, job.kinds, true),
            shape: job.shape,
            load: job.load,
            w: job.window,
            live: job.live,
            seq: job.seq,
            done: 0,
            errors: 0,
            last_sweep: Instant::now(),
            finished: 0,
        })
    }

    /// Runs until the window ends, every lane is done or `stop` is set; returns the recorder.
    pub(super) fn run(mut self, stop: &AtomicBool) -> Vec<Recorder> {
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<(usize, bool)> = Vec::with_capacity(1024);
        let now = Instant::now();
        for i in 0..self.lanes.len() {
            self.start(i, now);
        }
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if now >= self.w.end || self.finished == self.lanes.len() {
                self.end_pauses();
                break;
            }
            let timeout = self.next_timeout(now);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                break;
            }
            // One clock reading for the responses this poll brought: they had all arrived.
            let now = Instant::now();
            ready.clear();
            ready.extend(events.iter().map(|e| {
                let readable = e.is_readable() || e.is_read_closed() || e.is_error();
                (e.token().0, readable)
            }));
            for &(i, readable) in &ready {
                if let Some(s) = self.lanes.get_mut(i).and_then(|l| l.sock.as_mut()) {
                    s.event(readable);
                    self.progress(i, now);
                }
            }
            self.fire_timers(now);
            if now.duration_since(self.last_sweep) >= SWEEP {
                self.sweep(now);
            }
            self.rec.flush_before(&self.w, now);
            self.publish();
        }
        self.publish();
        self.rec.flush();
        vec![self.rec]
    }

    /// How long the next poll may wait: until the next timer, sweep or the window's end.
    fn next_timeout(&mut self, now: Instant) -> Duration {
        let mut until = (now + LONGEST_POLL).min(self.w.end);
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if self.lanes[i].wake.is_some_and(|(at, _)| at == t) {
                until = until.min(t);
                break;
            }
            self.timers.pop();
        }
        if self.lanes.iter().any(|l| l.flight.is_some()) {
            until = until.min(self.last_sweep + SWEEP);
        }
        until.saturating_duration_since(now)
    }

    fn publish(&mut self) {
        if self.done > 0 {
            self.live.done.fetch_add(self.done, Ordering::Relaxed);
            self.done = 0;
        }
        if self.errors > 0 {
            self.live.errors.fetch_add(self.errors, Ordering::Relaxed);
            self.errors = 0;
        }
    }

    fn wait(&mut self, i: usize, at: Instant, then: Then) {
        self.lanes[i].wake = Some((at, then));
        self.timers.push(Reverse((at, i)));
    }

    fn finish_lane(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        if !lane.finished {
            lane.finished = true;
            lane.sock = None;
            self.finished += 1;
        }
    }

    /// A lane's start: a user spread over the first think time (as users arriving at random
    /// would be) or at once; a lane at its first send.
    fn start(&mut self, i: usize, now: Instant) {
        match self.load {
            Load::Closed { think, .. } => {
                if think == ThinkTime::Zero {
                    self.begin(i, now, None);
                } else {
                    let rng = &mut self.lanes[i].rng;
                    let first = think.sample(rng.next_f64()).mul_f64(rng.next_f64());
                    self.wait(i, now + first, Then::Begin);
                }
            }
            Load::Open { .. } => self.schedule(i, now),
        }
    }

    /// Acts on the timers that are due.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some((at, then)) = self.lanes[i].wake else {
                continue;
            };
            if at != t {
                continue;
            }
            self.lanes[i].wake = None;
            match then {
                Then::Begin => self.begin(i, now, None),
                Then::PauseOver => self.pause_over(i, now),
                Then::Send(intended) => self.begin(i, now, Some(intended)),
                Then::Schedule => self.schedule(i, now),
            }
        }
    }

    /// An open lane's next send: lane i sends at begin + (i + k * lanes) / rate, so that
    /// together the lanes send every 1/rate.
    fn schedule(&mut self, i: usize, now: Instant) {
        let Load::Open { rate, connections } = self.load else {
            return;
        };
        let lane = &mut self.lanes[i];
        let offset = (lane.slot.index as f64 + lane.k as f64 * connections as f64) / rate;
        let intended = self.w.begin + lane.slot.phase + Duration::from_secs_f64(offset);
        if intended >= self.w.end {
            self.finish_lane(i);
            return;
        }
        lane.k += 1;
        // Wake-ups land late, never early: aim one tick before the intended time.
        if intended > now + TIMER_TICK {
            self.wait(i, intended - TIMER_TICK, Then::Send(intended));
        } else {
            self.begin(i, now, Some(intended));
        }
    }

    /// Ends a user's think pause: its lateness is carried over as a debt on the next one.
    fn pause_over(&mut self, i: usize, now: Instant) {
        let lane = &mut self.lanes[i];
        if let Some((began, pause)) = lane.pause.take() {
            let actual = now.saturating_duration_since(began);
            lane.late_s =
                (lane.late_s + actual.as_secs_f64() - pause.as_secs_f64()).clamp(-0.1, 1.0);
            self.rec.record_pause(&self.w, began, actual);
        }
        self.begin(i, now, None);
    }

    /// Pauses under way at the window's end count with the length they were drawn.
    fn end_pauses(&mut self) {
        for lane in &mut self.lanes {
            if let Some((began, pause)) = lane.pause.take() {
                self.rec.record_pause(&self.w, began, pause);
            }
        }
    }

    /// Sends a lane's next request (an open lane's due at `intended`), connecting first when
    /// it has no connection.
    fn begin(&mut self, i: usize, now: Instant, intended: Option<Instant>) {
        if now >= self.w.end {
            self.finish_lane(i);
            return;
        }
        let n = if self.shape.varies() {
            self.seq.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let lane = &mut self.lanes[i];
        let out = self.shape.outgoing(n, &mut lane.rng);
        let (request, head) = self
            .shape
            .h1_request(&lane.slot.target, &lane.prepared, &out);
        let sent = Instant::now();
        lane.flight = Some(Flight {
            out,
            request,
            written: 0,
            sent,
            intended,
            deadline: sent + self.shape.timeout,
            response: Response::new(head),
            head,
            reused: lane.sock.as_ref().is_some_and(|s| s.served > 0),
        });
        if lane.sock.is_none()
            && let Err(e) = self.connect(i)
        {
            self.finish(i, Err(e), now);
            return;
        }
        self.progress(i, now);
    }

    fn connect(&mut self, i: usize) -> Result<(), ErrKind> {
        let lane = &mut self.lanes[i];
        let tls = match (lane.slot.target.tls, self.shape.connector.tls_config()) {
            (false, _) => None,
            (true, Some(config)) => Some((
                config,
                lane.name
                    .as_ref()
                    .ok_or(ErrKind::Tls(crate::client::TlsFailure::Protocol))?,
            )),
            (true, None) => return Err(ErrKind::Tls(crate::client::TlsFailure::Protocol)),
        };
        lane.sock = Some(Sock::connect(
            lane.slot.target.addr,
            self.poll.registry(),
            Token(i),
            tls,
        )?);
        Ok(())
    }

    /// Moves a lane's request on as far as its socket allows.
    fn progress(&mut self, i: usize, now: Instant) {
        let lane = &mut self.lanes[i];
        let (Some(f), Some(s)) = (lane.flight.as_mut(), lane.sock.as_mut()) else {
            return;
        };
        let mut step = || -> Result<Option<u16>, ErrKind> {
            if !s.open()? {
                return Ok(None);
            }
            if f.written == 0 && s.out_of_sync() {
                return Err(ErrKind::Http);
            }
            if f.written < f.request.len() && !s.send(&f.request, &mut f.written)? {
                return Ok(None);
            }
            s.receive(&mut f.response)
        };
        match step() {
            Ok(None) => {}
            Ok(Some(status)) => self.finish(i, Ok(status), now),
            Err(e) => self.finish(i, Err(e), now),
        }
    }

    /// Ends a lane's attempt: retried once on a new connection when a kept-alive one was
    /// closed under it, else counted, and the lane's next request planned.
    fn finish(&mut self, i: usize, result: Result<u16, ErrKind>, now: Instant) {
        let lane = &mut self.lanes[i];
        let Some(mut f) = lane.flight.take() else {
            return;
        };
        // A kept-alive connection the server closed while idle fails on first use; that is
        // not the server's answer to this request, so it is retried once on a new connection.
        if result == Err(ErrKind::Reset) && f.reused {
            lane.sock = None;
            f.reused = false;
            f.written = 0;
            f.response = Response::new(f.head);
            lane.flight = Some(f);
            match self.connect(i) {
                Ok(()) => self.progress(i, now),
                Err(e) => self.finish(i, Err(e), now),
            }
            return;
        }
        if result.is_err() || lane.sock.as_ref().is_some_and(|s| s.closed) {
            lane.sock = None;
        }
        self.done += 1;
        let latency = match result {
            Ok(_) => {
                Some(now.saturating_duration_since(f.intended.map_or(f.sent, |t| t.min(f.sent))))
            }
            Err(_) => {
                self.errors += 1;
                None
            }
        };
        let attempt = Attempt {
            at: now,
            latency,
            outcome: result,
            h2: false,
            kind: f.out.kind,
        };
        self.rec.record(&self.w, &lane.slot.target, attempt);
        let wait = lane.backoff.after(result);
        match self.load {
            Load::Closed { think, .. } => {
                let mut pause = think.sample(lane.rng.next_f64());
                if let Some(wait) = wait {
                    pause = pause.max(wait);
                }
                if pause.is_zero() {
                    self.begin(i, now, None);
                    return;
                }
                // Wake-ups land late (millisecond timeouts, busy CPUs); the lateness is a debt
                // subtracted from the next think time, so the mean think time is the one asked
                // for and X = N / (R + Z) holds.
                lane.pause = (think != ThinkTime::Zero).then_some((now, pause));
                let aim = pause.as_secs_f64() - lane.late_s;
                if aim > 0.0 {
                    self.wait(i, now + Duration::from_secs_f64(aim), Then::PauseOver);
                } else {
                    self.pause_over(i, now);
                }
            }
            Load::Open { .. } => match wait {
                Some(wait) => self.wait(i, now + wait, Then::Schedule),
                None => self.schedule(i, now),
            },
        }
    }

    /// Requests past their timeout end as timeouts (their connection is dropped).
    fn sweep(&mut self, now: Instant) {
        self.last_sweep = now;
        for i in 0..self.lanes.len() {
            if self.lanes[i]
                .flight
                .as_ref()
                .is_some_and(|f| now >= f.deadline)
            {
                self.finish(i, Err(ErrKind::Timeout), now);
            }
        }
    }
}
