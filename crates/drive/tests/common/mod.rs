//! Test helpers: an in-process HTTP test server with delays, statuses, resets and a global
//! stall; the guards for real third-party servers come from `perfpilot-testkit`.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A loopback HTTP/1.1 server on its own runtime thread, stopped when dropped.
///
/// Routes: `/` → 200; `/delay/MS` → 200 after MS ms; `/status/CODE` → CODE; `/reset` → the
/// connection is closed without a response; `/missing/…` → 404. When a stall is armed, every
/// request arriving inside the stall window waits until it ends (a server-wide pause, like a GC
/// stop). Every request's method, path and body size is kept ([`TestServer::received`]).
pub struct TestServer {
    pub addr: SocketAddr,
    stall: Arc<Mutex<Option<(Instant, Instant)>>>,
    received: Arc<Mutex<Vec<Received>>>,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub method: String,
    /// The path with its query.
    pub path: String,
    pub body_len: usize,
}

impl TestServer {
    pub fn start() -> Self {
        let std_listener = StdListener::bind("127.0.0.1:0").expect("bind loopback");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("local addr");
        let stall: Arc<Mutex<Option<(Instant, Instant)>>> = Arc::new(Mutex::new(None));
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let st = stall.clone();
        let log = received.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let (st, log) = (st.clone(), log.clone());
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(move |req| {
                                handle(req, st.clone(), log.clone())
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = rx => {}
                }
            });
        });
        TestServer {
            addr,
            stall,
            received,
            _shutdown: tx,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The requests received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every request arriving between `after` from now and `after + length` waits for its end.
    pub fn stall_once(&self, after: Duration, length: Duration) {
        let from = Instant::now() + after;
        *self.stall.lock().unwrap() = Some((from, from + length));
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Dropping the oneshot sender ends the accept loop; the thread then exits.
        let (tx, _) = tokio::sync::oneshot::channel();
        drop(std::mem::replace(&mut self._shutdown, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    stall: Arc<Mutex<Option<(Instant, Instant)>>>,
    received: Arc<Mutex<Vec<Received>>>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    use http_body_util::BodyExt;
    let window = *stall.lock().unwrap();
    if let Some((from, until)) = window {
        let now = Instant::now();
        if now >= from && now < until {
            tokio::time::sleep_until(until.into()).await;
        }
    }
    let path = req.uri().path().to_string();
    let method = req.method().to_string();
    let full = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |p| p.to_string());
    let body_len = req
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes()
        .len();
    received.lock().unwrap().push(Received {
        method,
        path: full,
        body_len,
    });
    if let Some(ms) = path.strip_prefix("/delay/") {
        let ms: u64 = ms.parse().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if path == "/reset" {
        return Err(std::io::Error::other("reset on purpose"));
    }
    let status = if path.starts_with("/missing/") {
        404
    } else {
        path.strip_prefix("/status/")
            .and_then(|c| c.parse::<u16>().ok())
            .unwrap_or(200)
    };
    let mut r = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    Ok::<_, std::io::Error>(r)
}

#[allow(unused)]
fn _infallible(_: Infallible) {}

// The real third-party servers (and free ports, temp dirs) live in perfpilot-testkit.
#[allow(unused_imports)]
pub use perfpilot_testkit::*;
