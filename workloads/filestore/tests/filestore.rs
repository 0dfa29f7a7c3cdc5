//! The `filestore` binary on a loopback port: ingest, retrieve, list, search and `/metrics`
//! over HTTP; malformed requests; and a full file system — a small tmpfs out of bytes and an
//! ext4 made with 64 inodes out of inodes — answering 507 while reads go on. The file-system
//! tests need root (mount, loop devices) and say so where they cannot run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use perfpilot_sys::scratchfs::{self, ScratchSpec};
use perfpilot_testkit::{Listening, Stream, is_root, spawn_listening};
use serde_json::Value;

/// A running `filestore`, killed when dropped (also on panic).
struct Server {
    _run: Listening,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    /// Starts one on a port the kernel picks (port 0; a port drawn before the bind could be
    /// taken by another test's server in between) and reads the address it prints.
    fn start(dir: &Path) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_filestore"));
        cmd.arg("--dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--threads", "2"]);
        let run = spawn_listening(
            cmd,
            Stream::Stdout,
            "filestore: listening on ",
            Duration::from_secs(30),
        );
        // Printed once bound: connections queue from here, no readiness wait is needed.
        Server {
            base: format!("http://{}", run.addr),
            _run: run,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into(),
        }
    }

    /// PUTs `body` to `path` with `headers`: (status, body).
    fn put(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        let mut req = self.agent.put(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.send(body).unwrap();
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    }

    /// GETs `path`: (status, content type, body).
    fn get(&self, path: &str) -> (u16, String, Vec<u8>) {
        let mut resp = self
            .agent
            .get(format!("{}{path}", self.base))
            .call()
            .unwrap();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let status = resp.status().as_u16();
        (status, ctype, resp.body_mut().read_to_vec().unwrap())
    }

    fn get_json(&self, path: &str) -> (u16, Value) {
        let (status, _, body) = self.get(path);
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// The value of the sample `line_start` (the whole name with labels) on `/metrics`.
    fn metric(&self, sample: &str) -> f64 {
        let (_, _, body) = self.get("/metrics");
        let text = String::from_utf8(body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn documents_are_ingested_retrieved_listed_searched_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let gets_before = s.metric("filestore_requests_total{op=\"get\",status=\"200\"}");

    let (st, body) = s.put(
        "/docs/memo-1?author=Ann+Lee",
        &[("content-type", "text/plain"), ("x-meta-dept", "hr")],
        b"first memo",
    );
    assert_eq!(st, 201, "{body}");
    assert_eq!(s.put("/docs/memo-2?dept=sales", &[], b"second").0, 201);
    assert_eq!(s.put("/docs/memo-3?dept=hr", &[], b"third").0, 201);
    let (st, body) = s.put("/docs/memo-3?dept=hr&year=2026", &[], b"third, revised");
    assert_eq!(st, 200, "a replaced document answers 200: {body}");

    let (st, ctype, content) = s.get("/docs/memo-1");
    assert_eq!(
        (st, ctype.as_str(), content.as_slice()),
        (200, "text/plain", &b"first memo"[..])
    );
    assert_eq!(s.get("/docs/memo-3").2, b"third, revised");
    let (st, meta) = s.get_json("/docs/memo-1/meta");
    assert_eq!(st, 200);
    assert_eq!(meta["meta"]["author"], "Ann Lee");
    assert_eq!(meta["meta"]["dept"], "hr");
    assert_eq!(meta["size"], 10);

    let (_, page) = s.get_json("/docs?limit=2");
    assert_eq!(ids(&page), ["memo-1", "memo-2"]);
    assert_eq!(page["next"], "memo-2");
    let (_, page) = s.get_json("/docs?limit=2&after=memo-2");
    assert_eq!(ids(&page), ["memo-3"]);
    assert!(page["next"].is_null());

    let (_, found) = s.get_json("/search?dept=hr");
    assert_eq!(ids(&found), ["memo-1", "memo-3"]);
    let (_, found) = s.get_json("/search?dept=hr&year=2026");
    assert_eq!(ids(&found), ["memo-3"]);

    // A POST makes the id.
    let (st, body) = s.put_post(b"no name");
    assert_eq!(st, 201, "{body}");
    let made: Value = serde_json::from_str(&body).unwrap();
    let id = made["id"].as_str().unwrap();
    assert_eq!(s.get(&format!("/docs/{id}")).2, b"no name");

    assert_eq!(
        s.metric("filestore_requests_total{op=\"get\",status=\"200\"}") - gets_before,
        3.0
    );
    assert_eq!(
        s.metric("filestore_requests_total{op=\"put\",status=\"201\"}"),
        4.0
    );
    assert_eq!(
        s.metric("filestore_requests_total{op=\"put\",status=\"200\"}"),
        1.0
    );
    assert_eq!(
        s.metric("filestore_requests_total{op=\"search\",status=\"200\"}"),
        2.0
    );
    assert_eq!(s.metric("filestore_documents"), 4.0);
    assert_eq!(
        s.metric("filestore_ingested_bytes_total"),
        (10 + 6 + 5 + 14 + 7) as f64
    );
    assert!(s.metric("filestore_request_duration_seconds_count{op=\"get\"}") >= 3.0);
}

impl Server {
    fn put_post(&self, body: &[u8]) -> (u16, String) {
        let mut resp = self
            .agent
            .post(format!("{}/docs?dept=ops", self.base))
            .send(body)
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    }
}

#[test]
fn malformed_requests_get_400_with_the_reason_and_unknown_ones_404() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    for (path, says) in [
        ("/docs/.hidden", "document id"),
        ("/docs/ok?bad%20key=1", "metadata key"),
        ("/docs/ok?x=%FF", "not UTF-8"),
    ] {
        let (st, body) = s.put(path, &[], b"x");
        assert_eq!(st, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    for (path, says) in [
        ("/docs?limit=0", "from 1 to 1000"),
        ("/docs?dept=hr", "use GET /search?dept=VALUE"),
        ("/search", "at least one metadata field"),
    ] {
        let (st, v) = s.get_json(path);
        assert_eq!(st, 400, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{path}: {v}");
    }
    let (st, v) = s.get_json("/docs/absent");
    assert_eq!(st, 404);
    assert!(v["error"].as_str().unwrap().contains("absent"), "{v}");
    assert_eq!(s.get_json("/docs/absent/meta").0, 404);
    assert_eq!(s.get_json("/elsewhere").0, 404);
    assert_eq!(
        s.metric("filestore_requests_total{op=\"put\",status=\"400\"}"),
        3.0
    );
    assert_eq!(
        s.metric("filestore_requests_total{op=\"get\",status=\"404\"}"),
        1.0
    );

    // Not HTTP at all: the server answers 400 and goes on serving.
    let port = s.base.rsplit(':').next().unwrap();
    let mut raw = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(b"HELLO THERE\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = raw.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert_eq!(s.get("/health").0, 200);
}

/// A file system the test mounted, unmounted (and its loop device removed) when dropped.
enum Mounted {
    Tmpfs(PathBuf),
    Loop { backing: PathBuf, mount: PathBuf },
}

impl Drop for Mounted {
    fn drop(&mut self) {
        match self {
            Mounted::Tmpfs(p) => {
                let _ = Command::new("umount").arg(&*p).status();
            }
            Mounted::Loop { backing, mount } => {
                if let Err(e) = scratchfs::remove(backing, mount) {
                    eprintln!("cleanup failed: {e}");
                }
            }
        }
    }
}

/// Ingests 64 KiB documents until one is refused; returns the ids stored and the refusal.
fn fill(s: &Server) -> (Vec<String>, u16, String) {
    let doc = vec![b'z'; 64 << 10];
    let mut stored = Vec::new();
    for i in 0..10_000 {
        let id = format!("doc-{i:05}");
        let (st, body) = s.put(&format!("/docs/{id}?dept=fill"), &[], &doc);
        if st != 201 {
            eprintln!("{} documents stored, then {st}: {body}", stored.len());
            return (stored, st, body);
        }
        stored.push(id);
    }
    panic!("10,000 documents went in without the file system filling up");
}

/// Reads still work on the full store and the refused document left nothing behind.
fn reads_go_on(s: &Server, dir: &Path, stored: &[String]) {
    assert!(stored.len() >= 2, "only {} documents fit", stored.len());
    for id in [&stored[0], &stored[stored.len() - 1]] {
        let (st, _, content) = s.get(&format!("/docs/{id}"));
        assert_eq!((st, content.len()), (200, 64 << 10), "{id}");
    }
    let (st, page) = s.get_json("/docs?limit=1000");
    assert_eq!(st, 200);
    assert_eq!(ids(&page).len(), stored.len());
    assert_eq!(ids(&s.get_json("/search?dept=fill").1).len(), stored.len());
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0);
    assert_eq!(
        s.metric("filestore_requests_total{op=\"put\",status=\"507\"}"),
        1.0
    );
    assert_eq!(s.metric("filestore_documents"), stored.len() as f64);
}

#[test]
fn a_full_file_system_answers_507_and_reads_go_on() {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,nr_inodes=1000", "tmpfs"])
        .arg(dir.path())
        .output()
        .unwrap();
    if !out.status.success() {
        // A container without CAP_SYS_ADMIN; the ENOSPC → 507 mapping is still tested on
        // injected errors (error.rs).
        eprintln!(
            "skipped: mount -t tmpfs failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    }
    let _mounted = Mounted::Tmpfs(dir.path().to_path_buf());
    let s = Server::start(dir.path());
    let (stored, status, body) = fill(&s);
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("no space left"), "{body}");
    reads_go_on(&s, dir.path(), &stored);
}

#[test]
fn inode_exhaustion_with_blocks_to_spare_answers_507() {
    if let Some(why) = scratchfs::unavailable("ext4") {
        eprintln!("skipped: no loop-device ext4 here: {why}");
        assert!(!why.is_empty());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = ScratchSpec {
        backing: dir.path().join("few-inodes.img"),
        size_bytes: 64 << 20,
        fstype: "ext4".into(),
        mkfs_options: ["-N", "64"].map(String::from).to_vec(),
        mount: dir.path().join("mnt"),
        mount_options: String::new(),
    };
    let _mounted = Mounted::Loop {
        backing: spec.backing.clone(),
        mount: spec.mount.clone(),
    };
    scratchfs::create(&spec).unwrap();
    let s = Server::start(&spec.mount);
    let (stored, status, body) = fill(&s);
    assert_eq!(status, 507, "{body}");
    // Out of inodes, not of blocks: the documents stored take a fraction of the space.
    let df = Command::new("df")
        .args(["--output=iavail,avail", "-B1"])
        .arg(&spec.mount)
        .output()
        .unwrap();
    let df = String::from_utf8_lossy(&df.stdout).into_owned();
    let nums: Vec<u64> = df
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(nums[0], 0, "inodes left: {df}");
    assert!(nums[1] > 16 << 20, "blocks should be left: {df}");
    reads_go_on(&s, &spec.mount, &stored);
}
