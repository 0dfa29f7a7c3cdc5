//! What a user or lane sends: the request of a spec (fixed, or with a rendered body) or a kind
//! drawn from its request profile, built as HTTP/1.1 bytes or an HTTP/2 request, and one
//! exchange of it on an open connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::client::{ErrKind, Target};
use crate::error::{DriveError, invalid};
use crate::h1;
use crate::link::{Connector, H2Request, Link};
use crate::profile::RequestProfile;
use crate::spec::{DriveSpec, HttpVersion};
use crate::template::BodyTemplate;
use perfpilot_stats::Rng;

/// Request headers, name and value.
type Headers = Vec<(String, String)>;

/// Everything a task needs to build requests.
pub(crate) struct RequestShape {
    method: String,
    headers: Headers,
    body: Option<BodyTemplate>,
    /// The request profile, and each of its kinds' headers after the spec's.
    profile: Option<(RequestProfile, Vec<Headers>)>,
    /// Per-request timeout.
    pub timeout: Duration,
    http: HttpVersion,
    /// How to connect.
    pub connector: Connector,
}

/// What one attempt sends: the spec's request, or a kind drawn from the profile with its path.
pub(crate) struct Outgoing {
    /// The profile's kind, with a profile.
    pub kind: Option<usize>,
    /// The kind's path and query for this request (empty without a profile).
    path: String,
    /// The body, rendered or the kind's.
    body: Option<Bytes>,
}

/// Whether `s` is an HTTP token (a method or header name).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl RequestShape {
    /// Checks the spec's method and headers and builds what every task shares; `http1_only`
    /// for the event loop, which speaks HTTP/1.1 and offers only it by ALPN.
    pub(crate) fn from_spec(
        spec: &DriveSpec,
        targets: &[Arc<Target>],
        http1_only: bool,
    ) -> Result<Self, DriveError> {
        if !is_token(&spec.method) {
            return Err(invalid("HTTP method", &spec.method, "not a valid method"));
        }
        for (k, v) in &spec.headers {
            if !is_token(k) {
                return Err(invalid("header name", k, "not a valid header name"));
            }
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid("header value", v, "contains a line break"));
            }
            if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("host") {
                return Err(invalid("header name", k, "is set by the driver"));
            }
        }
        let profile = spec.profile.as_ref().map(|p| {
            let headers = p
                .kinds
                .iter()
                .map(|k| spec.headers.iter().chain(&k.headers).cloned().collect())
                .collect();
            (p.clone(), headers)
        });
        let http = if http1_only {
            HttpVersion::Http1
        } else {
            spec.http
        };
        Ok(RequestShape {
            method: spec.method.clone(),
            headers: spec.headers.clone(),
            body: spec.body.clone(),
            profile,
            timeout: spec.timeout,
            http,
            connector: Connector::new(targets, http, &spec.tls)?,
        })
    }

    /// The next request: the spec's with its body rendered, or a kind drawn from the profile.
    pub(crate) fn outgoing(&self, seq: u64, rng: &mut Rng) -> Outgoing {
        match &self.profile {
            Some((p, _)) => {
                let (kind, path) = p.draw(seq, rng);
                Outgoing {
                    kind: Some(kind),
                    path,
                    body: p.kinds[kind].body.clone(),
                }
            }
            None => Outgoing {
                kind: None,
                path: String::new(),
                body: self.body.as_ref().map(|t| Bytes::from(t.render(seq, rng))),
            },
        }
    }

    /// Whether each request differs (a rendered body, a profile's draw): only then do the
    /// slots count requests in the run's shared sequence.
    pub(crate) fn varies(&self) -> bool {
        self.profile.is_some() || self.body.is_some()
    }

    /// The HTTP/1.1 bytes of `out` and whether it is a HEAD request: the prepared bytes when
    /// the request never changes (shared, not copied), else built.
    pub(crate) fn h1_request(
        &self,
        target: &Target,
        prepared: &Prepared,
        out: &Outgoing,
    ) -> (Bytes, bool) {
        let head = self.head_of(target, out).0 == "HEAD";
        match &prepared.fixed_h1 {
            Some(r) if out.kind.is_none() => (r.clone(), head),
            _ => (Bytes::from(self.build(target, out)), head),
        }
    }

    /// The method, path and headers of `out` (`target`'s path without a profile).
    fn head_of<'a>(
        &'a self,
        target: &'a Target,
        out: &'a Outgoing,
    ) -> (&'a str, &'a str, &'a [(String, String)]) {
        match (&self.profile, out.kind) {
            (Some((p, headers)), Some(k)) => (p.kinds[k].method.as_str(), &out.path, &headers[k]),
            _ => (&self.method, &target.path, &self.headers),
        }
    }

    /// The HTTP/1.1 bytes of `out`.
    fn build(&self, target: &Target, out: &Outgoing) -> Vec<u8> {
        let (method, path, headers) = self.head_of(target, out);
        h1::build_request(
            method,
            path,
            &target.host_header,
            headers,
            out.body.as_deref(),
        )
    }

    /// What a slot sends, prepared once (nothing with a profile: its requests vary).
    pub(crate) fn prepare(&self, target: &Target) -> Prepared {
        if self.profile.is_some() {
            return Prepared {
                fixed_h1: None,
                h2: None,
            };
        }
        let may_h2 =
            self.http == HttpVersion::Http2 || (target.tls && self.http == HttpVersion::Auto);
        let bare = Outgoing {
            kind: None,
            path: String::new(),
            body: None,
        };
        Prepared {
            fixed_h1: self
                .body
                .is_none()
                .then(|| Bytes::from(self.build(target, &bare))),
            h2: may_h2
                .then(|| H2Request::new(target, &target.path, &self.method, &self.headers))
                .flatten(),
        }
    }
}

/// A slot's requests, built once: the HTTP/1.1 bytes when the request never changes, and the
/// HTTP/2 request head when the target may speak HTTP/2.
pub(crate) struct Prepared {
    fixed_h1: Option<Bytes>,
    h2: Option<H2Request>,
}

/// One exchange on an open connection, in the protocol it speaks.
pub(crate) async fn exchange(
    link: &mut Link,
    target: &Target,
    shape: &RequestShape,
    prepared: &Prepared,
    out: &Outgoing,
) -> Result<u16, ErrKind> {
    let (method, path, headers) = shape.head_of(target, out);
    let head = method == "HEAD";
    if let Link::H2(c) = link {
        let drawn;
        let req = if out.kind.is_some() {
            drawn = H2Request::new(target, path, method, headers);
            drawn.as_ref()
        } else {
            prepared.h2.as_ref()
        };
        // A header HTTP/2 forbids (Connection, Keep-Alive, …) makes every request an error.
        let Some(req) = req else {
            return Err(ErrKind::Http);
        };
        return c.exchange(req, out.body.clone(), head).await;
    }
    let (request, head) = shape.h1_request(target, prepared, out);
    match link {
        Link::Plain(c) => c.exchange(&request, head).await,
        Link::Tls(c) => c.exchange(&request, head).await,
        Link::H2(_) => Err(ErrKind::Http),
    }
}
