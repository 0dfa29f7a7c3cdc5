//! The HTTP surface: routes, request parsing and the accept loop.
//!
//! | request | answer |
//! |---|---|
//! | `PUT /docs/ID?KEY=VALUE…` (metadata also as `x-meta-KEY` headers) | 201 new, 200 replaced; 507 when the file system is full |
//! | `POST /docs?…` | as PUT, with an id the store makes (in the JSON answer) |
//! | `GET /docs/ID` | the content with its content type; 404 unknown |
//! | `GET /docs/ID/meta` | the catalog entry as JSON |
//! | `GET /docs?after=ID&limit=N` | a page of ids in order, `next` for the following page |
//! | `GET /search?KEY=VALUE…&after=ID&limit=N` | documents with every field given |
//! | `GET /metrics`, `GET /health` | Prometheus text; `ok` |

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use crate::error::StoreError;
use crate::metrics::Op;
use crate::query;
use crate::store::Store;

/// The content type a document is stored with when the request gives none.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(ctype) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn json_reply(status: StatusCode, v: &serde_json::Value) -> Reply {
    reply(status, "application/json", v.to_string())
}

fn error_reply(e: &StoreError) -> Reply {
    json_reply(e.status(), &json!({"error": e.to_string()}))
}

/// What the path asks for, before the method is checked.
enum Route<'a> {
    Doc(&'a str),
    DocMeta(&'a str),
    Docs,
    Search,
    Metrics,
    Health,
    Unknown,
}

fn route(path: &str) -> Route<'_> {
    match path {
        "/docs" | "/docs/" => Route::Docs,
        "/search" => Route::Search,
        "/metrics" => Route::Metrics,
        "/health" => Route::Health,
        p => match p.strip_prefix("/docs/") {
            Some(rest) => match rest.strip_suffix("/meta") {
                Some(id) => Route::DocMeta(id),
                None => Route::Doc(rest),
            },
            None => Route::Unknown,
        },
    }
}

impl Store {
    /// Answers one request and counts it.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        let start = Instant::now();
        let (op, r) = self.clone().dispatch(req).await;
        self.metrics
            .request(op, r.status().as_u16(), start.elapsed().as_secs_f64());
        r
    }

    async fn dispatch(self: Arc<Self>, req: Request<Incoming>) -> (Op, Reply) {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let not_allowed = |op: Op, allowed: &str| {
            (
                op,
                json_reply(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &json!({"error": format!("{method} {path}: use {allowed}")}),
                ),
            )
        };
        match (route(&path), &method) {
            (Route::Doc(id), &Method::PUT) => {
                let id = id.to_string();
                (Op::put, self.ingest(Some(id), req).await)
            }
            (Route::Docs, &Method::POST) => (Op::put, self.ingest(None, req).await),
            (Route::Doc(id), &Method::GET) => (Op::get, self.get(id)),
            (Route::Doc(_), _) => not_allowed(Op::other, "GET or PUT"),
            (Route::DocMeta(id), &Method::GET) => (Op::meta, self.meta(id)),
            (Route::Docs, &Method::GET) => (Op::list, self.list(req.uri().query())),
            (Route::Search, &Method::GET) => (Op::search, self.search(req.uri().query())),
            (Route::Metrics, &Method::GET) => (
                Op::admin,
                reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    self.metrics.render(),
                ),
            ),
            (Route::Health, &Method::GET) => {
                (Op::admin, reply(StatusCode::OK, "text/plain", "ok\n"))
            }
            (Route::Unknown, _) => (
                Op::other,
                json_reply(
                    StatusCode::NOT_FOUND,
                    &json!({"error": format!("no route {path}; use PUT|GET /docs/ID, POST /docs, GET /docs/ID/meta, GET /docs, GET /search?KEY=VALUE, GET /metrics")}),
                ),
            ),
            (Route::DocMeta(_) | Route::Search | Route::Metrics | Route::Health, _) => {
                not_allowed(Op::other, "GET")
            }
            (Route::Docs, _) => not_allowed(Op::other, "GET (a page) or POST (ingest)"),
        }
    }

    /// Ingest: reads the body (up to the limit), then writes file and catalog on a blocking
    /// thread, as both may wait on the disk.
    async fn ingest(self: Arc<Self>, id: Option<String>, req: Request<Incoming>) -> Reply {
        let id = id.unwrap_or_else(|| format!("{:016x}", fastrand::u64(..)));
        if let Err(e) = crate::blobs::check_id(&id) {
            return error_reply(&e);
        }
        let meta = match query::metadata(req.uri().query(), req.headers()) {
            Ok(m) => m,
            Err(e) => return error_reply(&e),
        };
        let content_type = match req.headers().get(CONTENT_TYPE).map(|v| v.to_str()) {
            None => DEFAULT_CONTENT_TYPE.to_string(),
            Some(Ok(v)) => v.to_string(),
            Some(Err(_)) => {
                return error_reply(&StoreError::BadRequest(
                    "content-type: the value is not visible ASCII".into(),
                ));
            }
        };
        let limit = self.max_doc_bytes;
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(size) = declared.filter(|s| *s > limit) {
            return error_reply(&StoreError::TooLarge { size, limit });
        }
        let body = match Limited::new(
            req.into_body(),
            usize::try_from(limit).unwrap_or(usize::MAX),
        )
        .collect()
        .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return error_reply(&StoreError::TooLarge {
                    size: limit + 1,
                    limit,
                });
            }
            Err(e) => {
                return error_reply(&StoreError::BadRequest(format!(
                    "cannot read the request body: {e}"
                )));
            }
        };
        let store = self.clone();
        let id2 = id.clone();
        let size = body.len() as u64;
        let done =
            tokio::task::spawn_blocking(move || store.put(&id2, &content_type, &meta, &body)).await;
        match done {
            Ok(Ok(new)) => {
                let status = if new {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                json_reply(status, &json!({"id": id, "size": size, "new": new}))
            }
            Ok(Err(e)) => error_reply(&e),
            Err(e) => error_reply(&StoreError::Catalog(format!("the ingest task failed: {e}"))),
        }
    }

    /// Retrieve. Done on the runtime's thread: a small document in the page cache is read in
    /// microseconds, less than a hand-off to a blocking thread costs.
    fn get(&self, id: &str) -> Reply {
        match self.read(id) {
            Ok((ctype, content)) => {
                self.metrics.served(content.len() as u64);
                reply(StatusCode::OK, &ctype, content)
            }
            Err(e) => error_reply(&e),
        }
    }

    fn meta(&self, id: &str) -> Reply {
        match self.info(id) {
            Ok(d) => json_reply(StatusCode::OK, &json!(d)),
            Err(e) => error_reply(&e),
        }
    }

    fn list(&self, q: Option<&str>) -> Reply {
        let page = query::fields(q)
            .and_then(query::page)
            .and_then(|p| match p.filters.first() {
                Some((k, _)) => Err(StoreError::BadRequest(format!(
                    "GET /docs takes after and limit; {k} is a metadata field: use GET /search?{k}=VALUE"
                ))),
                None => self.catalog.list(&p.after, p.limit),
            });
        match page {
            Ok(p) => json_reply(StatusCode::OK, &json!(p)),
            Err(e) => error_reply(&e),
        }
    }

    fn search(&self, q: Option<&str>) -> Reply {
        let page = query::fields(q)
            .and_then(query::page)
            .and_then(|p| {
                if p.filters.is_empty() {
                    Err(StoreError::BadRequest(
                        "GET /search needs at least one metadata field, e.g. /search?dept=hr (GET /docs lists all)".into(),
                    ))
                } else {
                    self.catalog.search(&p.filters, &p.after, p.limit)
                }
            });
        match page {
            Ok(p) => json_reply(StatusCode::OK, &json!(p)),
            Err(e) => error_reply(&e),
        }
    }
}

/// Serves HTTP/1.1 keep-alive connections on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, store: Arc<Store>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let store = store.clone();
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |req| {
                let store = store.clone();
                async move { Ok::<_, std::convert::Infallible>(store.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handler)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_routes_with_the_id_taken_out() {
        assert!(matches!(route("/docs/a-1"), Route::Doc("a-1")));
        assert!(matches!(route("/docs/a-1/meta"), Route::DocMeta("a-1")));
        assert!(matches!(route("/docs"), Route::Docs));
        assert!(matches!(route("/docs/"), Route::Docs));
        assert!(matches!(route("/search"), Route::Search));
        assert!(matches!(route("/nope"), Route::Unknown));
        // An id with a slash reaches check_id, which refuses it with a clear message.
        assert!(matches!(route("/docs/a/b"), Route::Doc("a/b")));
    }
}
