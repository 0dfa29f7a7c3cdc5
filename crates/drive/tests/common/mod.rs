//! Test helpers: an in-process HTTP test server with delays, statuses, resets and a global
//! stall; and guards for real third-party servers that stop them on drop (also on panic).

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A loopback HTTP/1.1 server on its own runtime thread, stopped when dropped.
///
/// Routes: `/` → 200; `/delay/MS` → 200 after MS ms; `/status/CODE` → CODE; `/reset` → the
/// connection is closed without a response. When a stall is armed, every request arriving
/// inside the stall window waits until it ends (a server-wide pause, like a GC stop).
pub struct TestServer {
    pub addr: SocketAddr,
    stall: Arc<Mutex<Option<(Instant, Instant)>>>,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start() -> Self {
        let std_listener = StdListener::bind("127.0.0.1:0").expect("bind loopback");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("local addr");
        let stall: Arc<Mutex<Option<(Instant, Instant)>>> = Arc::new(Mutex::new(None));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let st = stall.clone();
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
                        let st = st.clone();
                        tokio::spawn(async move {
                            let svc =
                                hyper::service::service_fn(move |req| handle(req, st.clone()));
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
            _shutdown: tx,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
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
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let window = *stall.lock().unwrap();
    if let Some((from, until)) = window {
        let now = Instant::now();
        if now >= from && now < until {
            tokio::time::sleep_until(until.into()).await;
        }
    }
    let path = req.uri().path().to_string();
    if let Some(ms) = path.strip_prefix("/delay/") {
        let ms: u64 = ms.parse().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if path == "/reset" {
        return Err(std::io::Error::other("reset on purpose"));
    }
    let status = path
        .strip_prefix("/status/")
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(200);
    let mut r = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    Ok::<_, std::io::Error>(r)
}

#[allow(unused)]
fn _infallible(_: Infallible) {}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until `port` accepts connections.
pub fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on 127.0.0.1:{port} within 20 s");
}

/// Fails with an install hint when a tool is missing.
pub fn require(tool: &str) -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/usr/lib/postgresql/15/bin"])
    {
        let p = Path::new(dir).join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{tool} is not installed: run scripts/install-deps (it installs nginx-light, wrk, redis-server, redis-tools, postgresql)"
    );
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "perfpilot-{tag}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ (free_port() as u128)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A spawned server process, killed and reaped on drop (also when a test panics).
pub struct ServerProcess {
    pub child: Child,
    pub port: u16,
    pub dir: TempDir,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SIGTERM first so servers such as PostgreSQL shut down cleanly, then SIGKILL.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx serving `/` (200) and `/missing` (404) on a free loopback port, with a temp config.
pub fn start_nginx() -> ServerProcess {
    let nginx = require("nginx");
    let dir = TempDir::new("nginx");
    let port = free_port();
    let d = dir.0.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  uwsgi_temp_path {d}; scgi_temp_path {d};\n  keepalive_requests 1000000;\n\
           server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} location /missing {{ return 404; }} }}\n}}\n"
    );
    let conf_path = dir.0.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("write nginx.conf");
    let mut child = Command::new(nginx)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    wait_for_port(port, &mut child, "nginx");
    ServerProcess { child, port, dir }
}

/// redis-server on a free loopback port, no persistence.
pub fn start_redis() -> ServerProcess {
    let redis = require("redis-server");
    let dir = TempDir::new("redis");
    let port = free_port();
    let mut child = Command::new(redis)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    wait_for_port(port, &mut child, "redis-server");
    ServerProcess { child, port, dir }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .expect("run id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a postgres user exists (it comes with the postgresql package)")
}

/// Runs a PostgreSQL binary, as the `postgres` user when we are root (initdb refuses root).
/// The process is the server itself (no runuser in between), so the guard signals it directly.
fn pg_command(bin: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(bin);
    if is_root() {
        c.gid(id_of("-g")).uid(id_of("-u"));
    }
    c
}

/// A throw-away PostgreSQL 15 cluster (initdb into a temp dir) on a free loopback port.
pub fn start_postgres() -> ServerProcess {
    let initdb = require("initdb");
    let postgres = initdb.with_file_name("postgres");
    let dir = TempDir::new("pg");
    if is_root() {
        let ok = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot chown the temp dir to the postgres user");
    }
    let data = dir.0.join("data");
    let out = pg_command(&initdb)
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "--no-sync"])
        .output()
        .expect("run initdb");
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let mut child = pg_command(&postgres)
        .arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir.0)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            "fsync=off",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start postgres");
    wait_for_port(port, &mut child, "postgres");
    ServerProcess { child, port, dir }
}
