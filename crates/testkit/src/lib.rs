//! Throw-away third-party servers for perfpilot's integration tests (a dev-dependency only).
//!
//! Each `start_*` function starts a real server (installed by `scripts/install-deps`) on a free
//! loopback port with its files in a temporary directory, waits until it listens, and returns a
//! [`ServerProcess`] guard that stops the server and removes the directory on drop, also when
//! the test panics. A missing binary fails the test with an install hint. How each kind is
//! started is `perfpilot_lab::server`'s (the study, capacity and proof runs start theirs the
//! same way); this crate adds throw-away directories and ports, and panics instead of errors.
//! Servers of our own that print the address they bound are started on port 0 with
//! [`spawn_listening`], which reads that address back.

// Test helpers: a failure to set up is a test failure, so panicking is the right answer here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod listening;
pub mod tls;

pub use listening::{Listening, Stream, spawn_listening};

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use perfpilot_lab::process::{self, NotReady, StopSignal};
use perfpilot_lab::server::postgres::{self, LocalAuth};
use perfpilot_lab::server::{self as lab_server, Server, ServerError, memcached, nginx, redis};

/// How long a server may take to start listening.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    perfpilot_lab::port::free_port().expect("free port")
}

/// Waits until `port` on 127.0.0.1 accepts connections; panics if `child` exits first or
/// after 30 s.
pub fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    match process::wait_ready(
        child,
        START_LIMIT,
        || process::accepts("127.0.0.1", port),
        &|| false,
    ) {
        Ok(()) => {}
        Err(NotReady::Exited(status)) => panic!("{what} exited before listening: {status}"),
        Err(_) => panic!("{what} did not listen on 127.0.0.1:{port} within {START_LIMIT:?}"),
    }
}

/// The path of `tool` (`perfpilot_lab::tool::find`: `PATH`, the `sbin` directories, the
/// newest PostgreSQL's); panics with an install hint when it is missing.
pub fn require(tool: &str) -> PathBuf {
    find(tool).unwrap_or_else(|| {
        panic!(
            "{tool} is not installed: run scripts/install-deps (it installs nginx-light, wrk, \
             redis-server, redis-tools, postgresql, memcached, mariadb-server)"
        )
    })
}

/// The path of `tool` like [`require`], or `None` when it is not installed.
pub fn find(tool: &str) -> Option<PathBuf> {
    perfpilot_lab::tool::find(tool)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory under the system's temporary directory, named after `tag`.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "perfpilot-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
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

/// A started server, stopped (SIGTERM, then SIGKILL after 5 s) and reaped on drop, also when
/// a test panics; its temporary directory goes with it.
pub struct ServerProcess {
    /// The server process (the server itself, not a wrapper, so signals reach it).
    pub server: Server,
    /// The loopback TCP port it listens on.
    pub port: u16,
    /// Its Unix socket, for servers started with one.
    pub socket: Option<PathBuf>,
    /// Its temporary directory (configuration, data, sockets, `server.log`).
    pub dir: TempDir,
}

impl ServerProcess {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }
}

/// Panics with a lab error's message (a test's set-up failed).
fn fail<T>(what: &str) -> impl FnOnce(ServerError) -> T + '_ {
    move |e| panic!("{what}: {e}")
}

/// Starts `cmd` as `name` with its output in `DIR/server.log`, and waits until it listens on
/// 127.0.0.1:`port` (and creates `socket`, when given); panics with the end of its log when it
/// exits first or is not ready within 30 s.
pub fn serve(
    name: &str,
    cmd: Command,
    dir: TempDir,
    port: u16,
    socket: Option<PathBuf>,
) -> ServerProcess {
    let log = dir.0.join("server.log");
    let mut server = Server::spawn(name, cmd, &log)
        .unwrap_or_else(fail(name))
        .stopped_by(StopSignal::Terminate, Duration::from_secs(5));
    server
        .wait_port("127.0.0.1", port, START_LIMIT, &|| false)
        .unwrap_or_else(fail(name));
    if let Some(path) = &socket {
        server
            .wait_path(path, START_LIMIT, &|| false)
            .unwrap_or_else(fail(name));
    }
    ServerProcess {
        server,
        port,
        socket,
        dir,
    }
}

/// nginx on a free loopback port with a temporary config: `/` → 200 "ok", `/missing` → 404,
/// and `/nginx_status` → the `stub_status` page.
pub fn start_nginx() -> ServerProcess {
    require("nginx");
    let dir = TempDir::new("nginx");
    let port = free_port();
    let mut conf = nginx::Conf::new(&dir.0);
    conf.http = format!(
        "  server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} location /missing {{ return 404; }}\n    location = /nginx_status {{ stub_status; }} }}\n"
    );
    let cmd = conf.command().unwrap_or_else(fail("nginx"));
    serve("nginx", cmd, dir, port, None)
}

/// redis-server on a free loopback port and a Unix socket (`redis.sock` in its directory),
/// no persistence.
pub fn start_redis() -> ServerProcess {
    redis_with(&[])
}

/// Like [`start_redis`], but every client must first `AUTH` with `password` (`requirepass`).
pub fn start_redis_with_password(password: &str) -> ServerProcess {
    redis_with(&["--requirepass", password])
}

fn redis_with(extra: &[&str]) -> ServerProcess {
    require("redis-server");
    let dir = TempDir::new("redis");
    let port = free_port();
    let socket = dir.0.join("redis.sock");
    let mut cmd = redis::command(port, &dir.0).unwrap_or_else(fail("redis-server"));
    cmd.args(["--unixsocketperm", "700", "--unixsocket"])
        .arg(&socket)
        .args(extra);
    serve("redis-server", cmd, dir, port, Some(socket))
}

/// memcached on a free loopback port (64 MiB, as user `nobody` when started as root, since
/// memcached refuses to keep root).
pub fn start_memcached() -> ServerProcess {
    require("memcached");
    let dir = TempDir::new("memcached");
    let port = free_port();
    let mut cmd = memcached::command(port, 64).unwrap_or_else(fail("memcached"));
    if is_root() {
        cmd.args(["-u", "nobody"]);
    }
    serve("memcached", cmd, dir, port, None)
}

/// A binary of this workspace next to the running test's own (cargo test --workspace builds
/// them all); built with `cargo build -p PACKAGE --bin BIN` when a narrower test run did not.
pub fn workspace_bin(bin: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in target/<profile>/deps")
        .to_path_buf();
    let path = dir.join(bin);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let st = Command::new(cargo)
            .args(["build", "-p", package, "--bin", bin])
            .current_dir(repo)
            .status()
            .expect("running cargo");
        assert!(st.success(), "building {bin} (package {package})");
    }
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A throw-away PostgreSQL 15 cluster (initdb into a temp dir) on a free loopback port, with
/// its Unix socket (`.s.PGSQL.<port>`) in that dir. TCP connections are trusted as any user;
/// Unix-socket connections use peer authentication (the OS user must match the role).
pub fn start_postgres() -> ServerProcess {
    start_postgres_with(&[])
}

/// As [`start_postgres`], with server settings (`("shared_buffers", "1GB")`) given as `-c`.
pub fn start_postgres_with(settings: &[(&str, &str)]) -> ServerProcess {
    require("initdb");
    let dir = TempDir::new("pg");
    if is_root() {
        lab_server::chown(&dir.0, postgres::USER).unwrap_or_else(fail("postgres"));
    }
    let data = dir.0.join("data");
    let initdb = postgres::initdb(&data, LocalAuth::Peer).unwrap_or_else(fail("initdb"));
    perfpilot_lab::run::quick("initdb", initdb).unwrap_or_else(|e| panic!("initdb failed: {e}"));
    let port = free_port();
    let all: Vec<(String, String)> = std::iter::once(("fsync", "off"))
        .chain(settings.iter().copied())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let listen = postgres::Listen {
        port,
        addresses: &["127.0.0.1".to_string()],
        sockets: &dir.0,
    };
    let mut cmd = postgres::server(&data, &listen, &all).unwrap_or_else(fail("postgres"));
    lab_server::as_user_if_root(&mut cmd, postgres::USER).unwrap_or_else(fail("postgres"));
    let socket = postgres::socket(&dir.0, port);
    let mut pg = serve("postgres", cmd, dir, port, Some(socket));
    postgres::wait_ready(&mut pg.server, port, Duration::from_secs(60), &|| false)
        .unwrap_or_else(fail("postgres"));
    pg
}

/// A throw-away MariaDB server (`mariadb-install-db` into a temp dir) on a free loopback port
/// and its Unix socket `mysqld.sock` in that dir, no binary log, a small buffer pool. Its
/// `root@localhost` logs in through `unix_socket` authentication (as on Debian): a client
/// running as the OS user root, over the socket, with no password. When the tests do not run
/// as root, the server runs as their user, and that user is the one admitted by `unix_socket`.
pub fn start_mariadb() -> ServerProcess {
    let install = require("mariadb-install-db");
    let mariadbd = require("mariadbd");
    let dir = TempDir::new("mariadb");
    let data = dir.0.join("data");
    let socket = dir.0.join("mysqld.sock");
    // Each server's own temp dir: bootstraps running side by side in a shared /tmp collide on
    // their `#sql-temptable-…` files ("Unknown table 'mysql.tmp_user_sys'", 2 of 18 parallel
    // installs by hand), which failed CI once.
    let tmp = dir.0.join("tmp");
    std::fs::create_dir(&tmp).expect("create the mariadb temp dir");
    let tmp_flag = format!("--tmpdir={}", tmp.display());
    // mariadbd will not run as root: as root, both run as `mysql` (they switch themselves).
    let (user_flag, socket_user) = if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "mysql:mysql"])
            .arg(&dir.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot chown the temp dir to the mysql user");
        (Some("--user=mysql"), "root".to_string())
    } else {
        let me = Command::new("id").arg("-un").output().expect("run id -un");
        (None, String::from_utf8_lossy(&me.stdout).trim().to_string())
    };
    // The redo log's default is 96 MiB; a test needs far less.
    let small = ["--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M"];
    let out = Command::new(&install)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(&tmp_flag)
        .args(user_flag)
        .args([
            "--auth-root-authentication-method=socket",
            &format!("--auth-root-socket-user={socket_user}"),
            "--skip-test-db",
            "--skip-name-resolve",
        ])
        .args(small)
        .output()
        .expect("run mariadb-install-db");
    assert!(
        out.status.success(),
        "mariadb-install-db failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let d = &dir.0;
    let mut cmd = Command::new(mariadbd);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", d.join("mariadbd.pid").display()))
        .arg(format!("--log-error={}", d.join("error.log").display()))
        .arg(format!("--port={port}"))
        .arg(&tmp_flag)
        .args(user_flag)
        .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
        .args(small);
    serve("mariadbd", cmd, dir, port, Some(socket))
}
