//! `perfpilot drive --requests`: a request profile end to end (the summary and the JSON count
//! each kind, bodies arrive with their size), and bad profiles refused before any request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

const BIN: &str = env!("CARGO_BIN_EXE_perfpilot");

/// One request as the server read it: method, path and body size.
type Seen = Arc<Mutex<Vec<(String, String, usize)>>>;

/// A keep-alive HTTP/1.1 server (thread per connection) that reads each request's body by its
/// Content-Length, answers 200 (404 under /missing/) and keeps what it read.
fn serve() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || answer(stream, &log));
        }
    });
    (addr, seen)
}

fn answer(stream: TcpStream, seen: &Seen) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut first = String::new();
        if r.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = first.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let status = if path.starts_with("/missing/") {
            "404 Not Found"
        } else {
            "200 OK"
        };
        seen.lock().unwrap().push((method, path, len));
        let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 3\r\n\r\nok\n");
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn perfpilot(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("perfpilot-profile-{}-{name}", std::process::id()))
}

#[test]
fn a_request_profile_run_prints_each_kind_and_writes_them_into_the_json() {
    let (addr, seen) = serve();
    let csv = tmp("mix.csv");
    std::fs::write(
        &csv,
        "name,weight,method,url,body_bytes\n\
         get,75,GET,/docs/doc-{{rand:1-100}},\n\
         put,20,PUT,/docs/new-{{seq}},512\n\
         gone,5,GET,/missing/{{seq}},\n",
    )
    .unwrap();
    let json = tmp("out.json");
    let base = format!("http://{addr}");
    let out = perfpilot(&[
        "drive",
        "--users",
        "4",
        "--threads",
        "1",
        "--duration",
        "700ms",
        "--no-progress",
        "--requests",
        csv.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        &base,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("by request kind"), "{stdout}");
    for name in ["get", "put", "gone"] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(name)),
            "{name}: {stdout}"
        );
    }
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let kinds = m["request_kinds"].as_array().unwrap();
    let sum = |field: &str| {
        kinds
            .iter()
            .map(|k| k[field].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(sum("requests"), m["requests"].as_u64().unwrap());
    assert_eq!(sum("errors"), m["errors"].as_u64().unwrap());
    assert!(m["requests"].as_u64().unwrap() > 100, "{m}");
    // The existing fields are still there, as before.
    for field in ["throughput_rps", "latency", "status", "series", "histogram"] {
        assert!(!m[field].is_null(), "{field} in {m}");
    }
    assert_eq!(kinds[2]["errors"], kinds[2]["requests"]);
    assert!(kinds[0]["latency"]["p99_ms"].as_f64().is_some());
    let seen = seen.lock().unwrap();
    let puts: Vec<_> = seen.iter().filter(|(m, _, _)| m == "PUT").collect();
    assert!(!puts.is_empty());
    assert!(
        puts.iter()
            .all(|(_, p, len)| p.starts_with("/docs/new-") && *len == 512),
        "{puts:?}"
    );
    let _ = std::fs::remove_file(&csv);
    let _ = std::fs::remove_file(&json);
}

#[test]
fn bad_profiles_fail_before_any_request_naming_file_line_and_field() {
    let (addr, seen) = serve();
    let base = format!("http://{addr}");
    let csv = tmp("bad.csv");
    let run = |extra: &[&str]| {
        let out = perfpilot(&[&["drive", "--duration", "300ms", "--no-progress"], extra].concat());
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = run(&["--requests", "/nonexistent/mix.csv", &base]);
    assert!(
        e.contains("request profile /nonexistent/mix.csv: cannot read it"),
        "{e}"
    );
    std::fs::write(&csv, "name,weight,method,url\nget,zero,GET,/a\n").unwrap();
    let e = run(&["--requests", csv.to_str().unwrap(), &base]);
    assert!(
        e.contains("bad.csv, line 2, weight: \"zero\" is not a number"),
        "{e}"
    );
    std::fs::write(&csv, "name,weight,method,url\nget,1,GET,/a\n").unwrap();
    let e = run(&["--requests", csv.to_str().unwrap(), &base, &base]);
    assert!(e.contains("takes at most one URL"), "{e}");
    let e = run(&["--requests", csv.to_str().unwrap()]);
    assert!(
        e.contains("line 2, url: /a is a path but no base URL was given"),
        "{e}"
    );
    let e = run(&["--requests", csv.to_str().unwrap(), "-X", "POST", &base]);
    assert!(e.contains("cannot be used with"), "{e}");
    assert!(seen.lock().unwrap().is_empty(), "a request was sent");
    let _ = std::fs::remove_file(&csv);
}

/// The request profile at `rel` (from the repository's root), its URLs joined to `base`.
fn example_profile(rel: &str, base: &str) -> perfpilot_drive::RequestProfile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    perfpilot_drive::RequestProfile::from_csv(&path, Some(base)).unwrap()
}

/// Each kind of `p` as its name, method and share of the requests.
fn kinds_of(p: &perfpilot_drive::RequestProfile) -> Vec<(&str, &str, f64)> {
    p.kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (k.name.as_str(), k.method.as_str(), p.share(i)))
        .collect()
}

#[test]
fn the_filestore_example_profile_parses_into_its_three_kinds_on_filestores_routes() {
    let p = example_profile("examples/drive/filestore-mix.csv", "http://127.0.0.1:8080");
    let kinds = kinds_of(&p);
    assert_eq!(
        kinds,
        [
            ("get-doc", "GET", 0.90),
            ("search-meta", "GET", 0.05),
            ("put-doc", "PUT", 0.05)
        ]
    );
    assert_eq!(p.kinds[2].body.as_ref().map(|b| b.len()), Some(2048));
    assert!(p.kinds[0].url.ends_with("/docs/doc-{{rand:1-10000}}"));
}

#[test]
fn the_file_store_studys_profile_draws_from_the_corpus_its_preload_makes() {
    let p = example_profile(
        "examples/studies/filestore-mix.csv",
        "http://127.0.0.1:18480",
    );
    let kinds = kinds_of(&p);
    assert_eq!(
        kinds,
        [
            ("retrieve", "GET", 0.90),
            ("search", "GET", 0.05),
            ("ingest", "PUT", 0.05)
        ]
    );
    // `filestore --preload 20000 --preload-bytes 4096` in the study: doc-1 … doc-20000.
    assert!(p.kinds[0].url.ends_with("/docs/doc-{{rand:1-20000}}"));
    assert_eq!(p.kinds[2].body.as_ref().map(|b| b.len()), Some(4096));
}
