//! The blocking HTTP client, for single requests outside load generation: built on `ureq`
//! (HTTP/1.1 over std sockets, `http://` only: every endpoint perfpilot reads this way is a
//! local or in-cluster metrics or readiness page).

use std::time::Duration;

/// The largest body [`get`] reads; a bigger one is a [`FetchFailure::TooLarge`] (a metrics
/// page is kilobytes, so this only guards against a runaway endpoint).
pub const BODY_LIMIT: u64 = 16 << 20;

/// A successful (2xx) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code, 200 to 299.
    pub status: u16,
    /// The body, decoded as UTF-8.
    pub body: String,
}

/// A request that failed: the method, the URL, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{method} {url}: {failure}")]
pub struct FetchError {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The URL as given.
    pub url: String,
    /// What went wrong.
    pub failure: FetchFailure,
}

/// What went wrong with a GET.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchFailure {
    /// The URL could not be used (not `http://host[:port]/path`).
    #[error("not a usable http:// URL: {0}")]
    Url(String),
    /// No connection, or it broke before a response arrived.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// No complete response within the timeout.
    #[error("no complete response within {0:?}")]
    Timeout(Duration),
    /// The server answered with a status outside 2xx.
    #[error("status {0}")]
    Status(u16),
    /// The response could not be read or decoded (bad HTTP, not UTF-8).
    #[error("unreadable response: {0}")]
    Body(String),
    /// The body is larger than the cap (in bytes) the caller allowed.
    #[error("the body is larger than {0} bytes")]
    TooLarge(u64),
}

/// GETs `url` (`http://` only), giving up after `timeout` in all (connecting, waiting and
/// reading the body). Redirects are followed. Anything but a 2xx status is an error, and so
/// is a body larger than [`BODY_LIMIT`].
pub fn get(url: &str, timeout: Duration) -> Result<Response, FetchError> {
    get_capped(url, timeout, BODY_LIMIT)
}

/// [`get`] with a body cap of `limit` bytes: a longer body is [`FetchFailure::TooLarge`],
/// read no further than the cap.
pub fn get_capped(url: &str, timeout: Duration, limit: u64) -> Result<Response, FetchError> {
    Client::new().get_capped(url, timeout, limit)
}

/// A client that keeps its connections open between requests (HTTP/1.1 keep-alive), for a
/// caller that GETs the same server again and again: a preset read every scan would otherwise
/// open (and leave in TIME_WAIT) one connection per read.
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    /// A client with an empty connection pool.
    pub fn new() -> Client {
        Client {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into(),
        }
    }

    /// [`get_capped`] through this client's connections: an idle one to the same server is
    /// used again, and the connection stays open after a complete response.
    pub fn get_capped(
        &self,
        url: &str,
        timeout: Duration,
        limit: u64,
    ) -> Result<Response, FetchError> {
        let fail = |failure| FetchError {
            method: "GET",
            url: url.to_string(),
            failure,
        };
        let mut resp = self
            .agent
            .get(url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| fail(classify(e, timeout, limit, FetchFailure::Connect)))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(fail(FetchFailure::Status(status)));
        }
        let body = resp
            .body_mut()
            .with_config()
            // ureq refuses a read once the cap is used up, even at the end of the body; one
            // more byte of room lets a body of exactly `limit` bytes through.
            .limit(limit.saturating_add(1))
            .read_to_string()
            .map_err(|e| fail(classify(e, timeout, limit, FetchFailure::Body)))?;
        Ok(Response { status, body })
    }
}

impl Client {
    /// POSTs `body` with `headers` to `url` (`http://` only), giving up after `timeout` in all;
    /// anything but a 2xx status is an error, with the start of the server's answer (a remote
    /// write endpoint says there why it refused a batch).
    pub fn post(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout: Duration,
    ) -> Result<Response, FetchError> {
        let fail = |failure| FetchError {
            method: "POST",
            url: url.to_string(),
            failure,
        };
        let mut req = self.agent.post(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(body)
            .map_err(|e| fail(classify(e, timeout, BODY_LIMIT, FetchFailure::Connect)))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_string()
            .unwrap_or_default();
        if !(200..300).contains(&status) {
            let why = text.trim().chars().take(200).collect::<String>();
            return Err(fail(if why.is_empty() {
                FetchFailure::Status(status)
            } else {
                // Kept in `Body` so the callers' exhaustive matches stay as they are.
                FetchFailure::Body(format!("status {status}: {why}"))
            }));
        }
        Ok(Response { status, body: text })
    }
}

/// Sorts a ureq error; `io` says what an I/O error means at this point (before the response:
/// a connection problem; while reading the body: an unreadable response).
fn classify(
    e: ureq::Error,
    timeout: Duration,
    limit: u64,
    io: fn(String) -> FetchFailure,
) -> FetchFailure {
    match e {
        ureq::Error::Timeout(_) => FetchFailure::Timeout(timeout),
        ureq::Error::BodyExceedsLimit(_) => FetchFailure::TooLarge(limit),
        ureq::Error::BadUri(why) => FetchFailure::Url(why),
        ureq::Error::Http(why) => FetchFailure::Url(why.to_string()),
        ureq::Error::HostNotFound => FetchFailure::Url("the host does not resolve".into()),
        ureq::Error::TlsRequired | ureq::Error::Tls(_) => {
            FetchFailure::Url("https is not supported; use http://".into())
        }
        ureq::Error::Io(why) => io(why.to_string()),
        ureq::Error::ConnectionFailed => FetchFailure::Connect("connection failed".into()),
        e => FetchFailure::Body(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Serves one connection: reads the request head, then writes `answer` (if any) and
    /// keeps the connection open for `hold`.
    fn serve_once(answer: Option<String>, hold: Duration) -> (String, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            if let Some(a) = answer {
                let _ = s.write_all(a.as_bytes());
            }
            std::thread::sleep(hold);
        });
        (url, h)
    }

    fn answer(status: &str, body: &str) -> Option<String> {
        Some(format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    }

    #[test]
    fn a_client_sends_its_second_request_on_the_connection_of_the_first() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        // One accepted connection answers two requests; a second connection is never accepted.
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let mut answered = 0;
            let mut pending = Vec::new();
            while answered < 2 {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                pending.extend_from_slice(&buf[..n]);
                while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                    pending.drain(..end + 4);
                    answered += 1;
                    let body = format!("requests_total {answered}\n");
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    s.write_all(head.as_bytes()).unwrap();
                    s.write_all(body.as_bytes()).unwrap();
                }
            }
            answered
        });
        let client = Client::new();
        let t = Duration::from_secs(5);
        let first = client.get_capped(&url, t, 1024).unwrap();
        let second = client.get_capped(&url, t, 1024).unwrap();
        assert_eq!(first.body, "requests_total 1\n");
        assert_eq!(second.body, "requests_total 2\n");
        assert_eq!(server.join().unwrap(), 2);
    }

    #[test]
    fn a_2xx_answer_gives_its_status_and_body() {
        let (url, h) = serve_once(answer("200 OK", "ops_total 7\n"), Duration::ZERO);
        let r = get(&url, Duration::from_secs(5)).unwrap();
        h.join().unwrap();
        assert_eq!(
            r,
            Response {
                status: 200,
                body: "ops_total 7\n".into()
            }
        );
    }

    #[test]
    fn a_non_2xx_status_is_an_error_naming_the_url_and_the_status() {
        let (url, h) = serve_once(answer("503 Service Unavailable", ""), Duration::ZERO);
        let e = get(&url, Duration::from_secs(5)).unwrap_err();
        h.join().unwrap();
        assert_eq!(e.failure, FetchFailure::Status(503));
        assert_eq!(e.to_string(), format!("GET {url}: status 503"));
    }

    #[test]
    fn a_body_over_the_cap_is_too_large_and_one_at_the_cap_is_read() {
        let body = "x".repeat(100);
        let (url, h) = serve_once(answer("200 OK", &body), Duration::ZERO);
        let e = get_capped(&url, Duration::from_secs(5), 99).unwrap_err();
        h.join().unwrap();
        assert_eq!(e.failure, FetchFailure::TooLarge(99));
        assert!(e.to_string().contains("larger than 99 bytes"), "{e}");
        let (url, h) = serve_once(answer("200 OK", &body), Duration::ZERO);
        let r = get_capped(&url, Duration::from_secs(5), 100).unwrap();
        h.join().unwrap();
        assert_eq!(r.body, body);
    }

    #[test]
    fn a_refused_connection_is_a_connect_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        drop(l);
        let e = get(&url, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e.failure, FetchFailure::Connect(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("GET {url}: cannot connect"))
        );
    }

    #[test]
    fn a_server_that_never_answers_is_a_timeout() {
        let (url, h) = serve_once(None, Duration::from_millis(800));
        let e = get(&url, Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.failure, FetchFailure::Timeout(Duration::from_millis(300)));
        h.join().unwrap();
    }

    #[test]
    fn a_url_that_is_not_http_is_a_url_error() {
        let e = get("no scheme here", Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e.failure, FetchFailure::Url(_)), "{e}");
        assert!(e.to_string().starts_with("GET no scheme here:"), "{e}");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let e = get(
            &format!("https://{}/", l.local_addr().unwrap()),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("https is not supported"), "{e}");
    }
}
