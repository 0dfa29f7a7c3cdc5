//! nginx: the `stub_status` page, its `requests` count. The page's path is the config's, or
//! the first of the usual ones that answers with a real `stub_status` page.

use std::time::Duration;

use perfpilot_drive::fetch::{self, FetchFailure};

use super::reader::{Fault, Session};
use super::{Endpoint, PresetSettings, Reading, snippet};

/// The paths where `stub_status` is usually enabled, tried in order.
pub const STATUS_PATHS: [&str; 3] = ["/nginx_status", "/stub_status", "/basic_status"];
/// The largest page read (a `stub_status` page is about 100 bytes).
const PAGE_LIMIT: u64 = 64 << 10;

/// The numbers of a `stub_status` page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StubStatus {
    /// Open client connections.
    pub active: u64,
    /// Connections accepted so far.
    pub accepts: u64,
    /// Connections handled so far.
    pub handled: u64,
    /// Requests served so far: the counter read.
    pub requests: u64,
}

/// Parses a `stub_status` page:
///
/// ```text
/// Active connections: 1
/// server accepts handled requests
///  4 4 4
/// Reading: 0 Writing: 1 Waiting: 0
/// ```
pub fn parse_stub_status(text: &str) -> Option<StubStatus> {
    let mut lines = text.lines().map(str::trim);
    let active = lines
        .next()?
        .strip_prefix("Active connections:")?
        .trim()
        .parse()
        .ok()?;
    if lines.next()?.split_whitespace().collect::<Vec<_>>()
        != ["server", "accepts", "handled", "requests"]
    {
        return None;
    }
    let n: Vec<u64> = lines
        .next()?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [accepts, handled, requests] = n[..] else {
        return None;
    };
    Some(StubStatus {
        active,
        accepts,
        handled,
        requests,
    })
}

/// One nginx server's `stub_status`, read over a kept HTTP connection.
pub(crate) struct Nginx {
    endpoint: Endpoint,
    /// The path that answered last, or the configured one.
    path: Option<String>,
    configured: bool,
    client: fetch::Client,
}

impl Nginx {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Nginx {
        Nginx {
            endpoint,
            configured: settings.path.is_some(),
            path: settings.path,
            client: fetch::Client::new(),
        }
    }

    fn get(&self, path: &str, limit: Duration) -> Result<Result<StubStatus, Fault>, Fault> {
        let url = format!("http://{}{path}", self.endpoint);
        match self.client.get_capped(&url, limit, PAGE_LIMIT) {
            Ok(r) => Ok(parse_stub_status(&r.body).ok_or_else(|| {
                Fault::Garbage(format!("{path}: {}", snippet(r.body.as_bytes(), 80)))
            })),
            Err(e) => match e.failure {
                FetchFailure::Status(code) => Ok(Err(Fault::MetricMissing(format!(
                    "a stub_status page ({path} answered status {code})"
                )))),
                other => Err(http_fault(other)),
            },
        }
    }
}

impl Session for Nginx {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        let paths: Vec<String> = match &self.path {
            Some(p) => vec![p.clone()],
            None => STATUS_PATHS.iter().map(|p| p.to_string()).collect(),
        };
        let mut last = None;
        for path in paths {
            match self.get(&path, io_limit)? {
                Ok(s) => {
                    let source = format!("requests from stub_status at {path}");
                    self.path = Some(path);
                    return Ok(Reading {
                        value: s.requests as f64,
                        source,
                    });
                }
                Err(f) => last = Some(f),
            }
        }
        Err(match last {
            Some(Fault::MetricMissing(_)) if !self.configured => Fault::MetricMissing(format!(
                "a stub_status page at {}: enable `stub_status` in a location, or set `url`",
                STATUS_PATHS.join(", ")
            )),
            Some(f) => f,
            None => Fault::MetricMissing("a stub_status page".into()),
        })
    }

    fn reset(&mut self) {
        // A path that worked once is kept; only a guessed one is guessed again.
        if !self.configured {
            self.path = None;
        }
        self.client = fetch::Client::new();
    }
}

/// The fault of an HTTP failure other than a status.
pub(crate) fn http_fault(f: FetchFailure) -> Fault {
    match f {
        FetchFailure::Connect(why) => Fault::Unreachable(why),
        FetchFailure::Timeout(_) => Fault::Timeout,
        FetchFailure::TooLarge(limit) => Fault::TooLarge(limit),
        FetchFailure::Status(code) => Fault::Failed(format!("status {code}")),
        FetchFailure::Url(why) | FetchFailure::Body(why) => Fault::Failed(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx 1.22's stub_status after three requests.
    const CAPTURED: &str = include_str!("testdata/nginx-stub-status.txt");

    #[test]
    fn the_captured_stub_status_page_gives_its_numbers() {
        assert_eq!(
            parse_stub_status(CAPTURED),
            Some(StubStatus {
                active: 1,
                accepts: 4,
                handled: 4,
                requests: 4
            })
        );
    }

    #[test]
    fn pages_that_are_not_stub_status_are_refused() {
        for page in [
            "",
            "ok\n",
            "<html><body>404</body></html>",
            "Active connections: 1\nserver accepts handled requests\n 1 2\n",
            "Active connections: x\nserver accepts handled requests\n 1 2 3\n",
            "Active connections: 1\nsomething else\n 1 2 3\n",
        ] {
            assert_eq!(parse_stub_status(page), None, "{page:?}");
        }
    }
}
