//! The reference real-time scoring service, the SPSS study's system under test in small.
//!
//! It scores JSON records with predictive models read from PMML files in a model directory
//! (`NAME.pmml` is model `NAME`), keeps parsed models in an LRU cache whose size is a flag (a
//! model that does not fit is parsed from disk again on its next request — the study's key
//! setting, 2 vs 300), runs on a worker pool whose size is a flag (the study's 50 web container
//! threads), can echo the inputs in its responses (the study's best practice is not to), and
//! exposes Prometheus metrics.
//!
//! HTTP API:
//! - `POST /score/NAME` with `{"field": value, …}` (or `{"inputs": {…}}`) →
//!   `{"model": NAME, "prediction": …, "probabilities": {…}}` (plus `"inputs"` when echoing);
//!   404 for an unknown model, 400 for a bad record, 500 for a malformed model file (the error
//!   names the file and element).
//! - `GET /models` lists the model names; `GET /health` answers `ok`; `GET /metrics` is the
//!   Prometheus text format.

pub mod pmml;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value as Json, json};
use tokio::net::TcpListener;

use pmml::{Model, PmmlError, Record, Value};

/// Service settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory of `NAME.pmml` files.
    pub model_dir: PathBuf,
    /// Parsed models kept in memory (at least 1).
    pub cache_size: usize,
    /// Echo the request's inputs in each response.
    pub echo_inputs: bool,
}

/// Why a model could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model {name:?}: no file {path} (known models: {known})")]
    Unknown {
        name: String,
        path: PathBuf,
        known: String,
    },
    #[error(transparent)]
    Pmml(#[from] PmmlError),
}

/// An LRU cache of parsed models.
pub struct ModelCache {
    dir: PathBuf,
    capacity: usize,
    inner: Mutex<CacheInner>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

struct CacheInner {
    tick: u64,
    entries: HashMap<String, (Arc<Model>, u64)>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.')
}

impl ModelCache {
    pub fn new(dir: &Path, capacity: usize) -> Self {
        ModelCache {
            dir: dir.to_path_buf(),
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner {
                tick: 0,
                entries: HashMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Model names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let p = e.path();
                        (p.extension().is_some_and(|x| x == "pmml"))
                            .then(|| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                            .flatten()
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The model `name`, from the cache or parsed from its file.
    pub fn get(&self, name: &str) -> Result<Arc<Model>, ModelError> {
        {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.tick += 1;
            let tick = g.tick;
            if let Some(e) = g.entries.get_mut(name) {
                e.1 = tick;
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(e.0.clone());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{name}.pmml"));
        if !valid_name(name) || !path.is_file() {
            return Err(ModelError::Unknown {
                name: name.to_string(),
                path,
                known: self.names().join(", "),
            });
        }
        // Parse outside the lock: a miss costs the requesting worker, not everyone.
        let model = Arc::new(pmml::load(&path)?);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.tick += 1;
        let tick = g.tick;
        g.entries.insert(name.to_string(), (model.clone(), tick));
        while g.entries.len() > self.capacity {
            let oldest = g
                .entries
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    g.entries.remove(&k);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        Ok(model)
    }

    /// (hits, misses, evictions).
    pub fn stats(&self) -> (u64, u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            self.evictions.load(Ordering::Relaxed),
        )
    }
}

/// Upper bounds of the latency histogram, seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Counters for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    scores: AtomicU64,
    errors: Mutex<HashMap<&'static str, u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Metrics {
    fn observe(&self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add((secs * 1e9) as u64, Ordering::Relaxed);
    }

    fn error(&self, kind: &'static str) {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *g.entry(kind).or_default() += 1;
    }

    fn render(&self, cache: &ModelCache) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP scoring_scores_total Records scored successfully."
        );
        let _ = writeln!(s, "# TYPE scoring_scores_total counter");
        let _ = writeln!(
            s,
            "scoring_scores_total {}",
            self.scores.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP scoring_errors_total Failed score requests by kind."
        );
        let _ = writeln!(s, "# TYPE scoring_errors_total counter");
        {
            let g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            let mut kinds: Vec<_> = g.iter().collect();
            kinds.sort();
            for (k, v) in kinds {
                let _ = writeln!(s, "scoring_errors_total{{kind=\"{k}\"}} {v}");
            }
        }
        let _ = writeln!(
            s,
            "# HELP scoring_request_duration_seconds Score request latency."
        );
        let _ = writeln!(s, "# TYPE scoring_request_duration_seconds histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                s,
                "scoring_request_duration_seconds_bucket{{le=\"{b}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "scoring_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            s,
            "scoring_request_duration_seconds_sum {}",
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(s, "scoring_request_duration_seconds_count {count}");
        let (h, m, e) = cache.stats();
        for (name, help, v) in [
            ("scoring_model_cache_hits_total", "Model cache hits.", h),
            (
                "scoring_model_cache_misses_total",
                "Model cache misses (model parsed from disk).",
                m,
            ),
            (
                "scoring_model_cache_evictions_total",
                "Models evicted from the cache.",
                e,
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} counter");
            let _ = writeln!(s, "{name} {v}");
        }
        s
    }
}

/// The shared state of a running service.
pub struct Service {
    pub config: Config,
    pub cache: ModelCache,
    pub metrics: Metrics,
}

impl Service {
    pub fn new(config: Config) -> Self {
        let cache = ModelCache::new(&config.model_dir, config.cache_size);
        Service {
            config,
            cache,
            metrics: Metrics::default(),
        }
    }

    /// Scores `body` (JSON) with model `name`: (status, JSON response).
    pub fn score(&self, name: &str, body: &[u8]) -> (StatusCode, Json) {
        let start = Instant::now();
        let (status, out) = self.score_inner(name, body);
        if status == StatusCode::OK {
            self.metrics.scores.fetch_add(1, Ordering::Relaxed);
        }
        self.metrics.observe(start.elapsed().as_secs_f64());
        (status, out)
    }

    fn score_inner(&self, name: &str, body: &[u8]) -> (StatusCode, Json) {
        let model = match self.cache.get(name) {
            Ok(m) => m,
            Err(e @ ModelError::Unknown { .. }) => {
                self.metrics.error("unknown_model");
                return (StatusCode::NOT_FOUND, json!({"error": e.to_string()}));
            }
            Err(e) => {
                self.metrics.error("bad_model");
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error": e.to_string()}),
                );
            }
        };
        let parsed: Json = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                self.metrics.error("bad_request");
                return (
                    StatusCode::BAD_REQUEST,
                    json!({"error": format!("request body is not JSON: {e}")}),
                );
            }
        };
        let fields = match parsed.get("inputs").unwrap_or(&parsed) {
            Json::Object(m) => m.clone(),
            _ => {
                self.metrics.error("bad_request");
                return (
                    StatusCode::BAD_REQUEST,
                    json!({"error": "request body must be a JSON object of input fields"}),
                );
            }
        };
        let record = to_record(&fields);
        match model.score(&record) {
            Ok(p) => {
                let mut out = Map::new();
                out.insert("model".to_string(), json!(name));
                out.insert(
                    "prediction".to_string(),
                    match p.value {
                        Value::Num(v) => json!(v),
                        Value::Str(s) => json!(s),
                    },
                );
                if !p.probabilities.is_empty() {
                    out.insert("probabilities".to_string(), json!(p.probabilities));
                }
                if self.config.echo_inputs {
                    out.insert("inputs".to_string(), Json::Object(fields));
                }
                (StatusCode::OK, Json::Object(out))
            }
            Err(e) => {
                self.metrics.error("bad_request");
                (StatusCode::BAD_REQUEST, json!({"error": e.to_string()}))
            }
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let reply = |status: StatusCode, ctype: &'static str, body: Vec<u8>| {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = status;
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(ctype),
            );
            r
        };
        match (method, path.as_str()) {
            (Method::POST, p) if p.starts_with("/score/") => {
                let name = p.trim_start_matches("/score/").to_string();
                let body = match req.into_body().collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => {
                        return reply(
                            StatusCode::BAD_REQUEST,
                            "application/json",
                            json!({"error": format!("cannot read body: {e}")}).to_string().into_bytes(),
                        );
                    }
                };
                let (status, out) = self.score(&name, &body);
                reply(status, "application/json", out.to_string().into_bytes())
            }
            (Method::GET, "/metrics") => reply(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.metrics.render(&self.cache).into_bytes(),
            ),
            (Method::GET, "/models") => reply(
                StatusCode::OK,
                "application/json",
                json!({"models": self.cache.names()}).to_string().into_bytes(),
            ),
            (Method::GET, "/health") => reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()),
            _ => reply(
                StatusCode::NOT_FOUND,
                "application/json",
                json!({"error": format!("no route {path}; use POST /score/MODEL, GET /models, GET /metrics")})
                    .to_string()
                    .into_bytes(),
            ),
        }
    }
}

fn to_record(fields: &Map<String, Json>) -> Record {
    fields
        .iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Json::Number(n) => Value::Num(n.as_f64()?),
                Json::String(s) => Value::Str(s.clone()),
                Json::Bool(b) => Value::Str(b.to_string()),
                _ => return None,
            };
            Some((k.clone(), v))
        })
        .collect()
}

/// Serves HTTP/1.1 keep-alive connections on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, service: Arc<Service>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let svc = service.clone();
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |req| {
                let svc = svc.clone();
                async move { Ok::<_, std::convert::Infallible>(svc.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handler)
                .await;
        });
    }
}
