//! The service: scoring requests against the cached models, the HTTP routes, and the accept
//! loop.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value as Json, json};
use tokio::net::TcpListener;

use crate::ServiceConfig;
use crate::cache::{ModelCache, ModelError};
use crate::lookup::Lookup;
use crate::metrics::Metrics;
use crate::pmml::{Record, Value};

/// The shared state of a running service.
pub struct Service {
    /// The settings it was started with.
    pub config: ServiceConfig,
    /// The parsed models.
    pub cache: ModelCache,
    /// The counters behind `/metrics`.
    pub metrics: Metrics,
    /// The per-request database lookup, when started with `--db`.
    pub lookup: Option<Lookup>,
}

impl Service {
    /// A service with an empty cache over `config.model_dir`.
    pub fn new(config: ServiceConfig) -> Self {
        let cache = ModelCache::new(&config.model_dir, config.cache_size);
        Service {
            config,
            cache,
            metrics: Metrics::default(),
            lookup: None,
        }
    }

    /// The service with a per-request database lookup after each score, and `GET /lookup/KEY`.
    pub fn with_lookup(mut self, lookup: Lookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// The lookup of `key`, as JSON for a response; `None` without `--db`.
    async fn lookup(&self, key: i32) -> Option<Result<Json, String>> {
        let l = self.lookup.as_ref()?;
        Some(
            l.query(key)
                .await
                .map(|(rows, sum)| json!({"rows": rows, "sum": sum})),
        )
    }

    /// Scores `body` (JSON) with model `name`: (status, JSON response).
    pub fn score(&self, name: &str, body: &[u8]) -> (StatusCode, Json) {
        let start = Instant::now();
        let (status, out) = self.score_inner(name, body);
        if status == StatusCode::OK {
            self.metrics.scored();
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
                let (status, mut out) = self.score(&name, &body);
                if status == StatusCode::OK
                    && let Some(r) = self.lookup(fastrand::i32(0..i32::MAX)).await
                {
                    match r {
                        Ok(v) => out["lookup"] = v,
                        Err(e) => {
                            self.metrics.error("lookup");
                            return reply(
                                StatusCode::BAD_GATEWAY,
                                "application/json",
                                json!({"error": e}).to_string().into_bytes(),
                            );
                        }
                    }
                }
                reply(status, "application/json", out.to_string().into_bytes())
            }
            (Method::GET, p) if p.starts_with("/lookup/") => {
                let key = p.trim_start_matches("/lookup/").parse::<i32>();
                match (key, self.lookup(0).await.is_some()) {
                    (_, false) => reply(
                        StatusCode::NOT_FOUND,
                        "application/json",
                        json!({"error": "no database: start the service with --db"}).to_string().into_bytes(),
                    ),
                    (Err(_), true) => reply(
                        StatusCode::BAD_REQUEST,
                        "application/json",
                        json!({"error": format!("{p}: the key must be an integer")}).to_string().into_bytes(),
                    ),
                    (Ok(k), true) => match self.lookup(k).await {
                        Some(Ok(v)) => reply(StatusCode::OK, "application/json", v.to_string().into_bytes()),
                        Some(Err(e)) => {
                            self.metrics.error("lookup");
                            reply(StatusCode::BAD_GATEWAY, "application/json", json!({"error": e}).to_string().into_bytes())
                        }
                        None => reply(StatusCode::NOT_FOUND, "application/json", b"{}".to_vec()),
                    },
                }
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

/// The numeric, string and boolean fields of a request as a record (other fields are left
/// out, so the model reports them missing if it needs them).
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
