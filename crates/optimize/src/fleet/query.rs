//! Instant queries against the Prometheus HTTP API (`GET /api/v1/query`), through the
//! project's one HTTP client (`perfpilot_fetch`), each within a timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use perfpilot_fetch as fetch;

/// A query that failed: the server, the query and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromError {
    /// No answer, an HTTP error, or a timeout.
    #[error("Prometheus at {url}: {why}")]
    Unreachable {
        /// The server.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// An answer that is not the API's JSON, or an error from Prometheus.
    #[error("Prometheus at {url} answered {query:?} with {why}")]
    Answer {
        /// The server.
        url: String,
        /// The PromQL query.
        query: String,
        /// What was wrong with the answer.
        why: String,
    },
}

/// One series of an instant vector: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The labels, with `__name__` where the series has one.
    pub labels: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// A label's value, or "".
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

/// A Prometheus server.
#[derive(Debug, Clone)]
pub struct Prometheus {
    base: String,
    timeout: Duration,
}

impl Prometheus {
    /// The server at `base` (`http://host:9090`), each query within `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Prometheus {
        Prometheus {
            base: base.trim_end_matches('/').to_string(),
            timeout,
        }
    }

    /// The server's address.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Runs an instant query; a scalar answer is one sample without labels.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, PromError> {
        let url = format!(
            "{}/api/v1/query?query={}",
            self.base,
            utf8_percent_encode(promql, NON_ALPHANUMERIC)
        );
        let body = fetch::get(&url, self.timeout)
            .map_err(|e| PromError::Unreachable {
                url: self.base.clone(),
                why: e.failure.to_string(),
            })?
            .body;
        parse(&body).map_err(|why| PromError::Answer {
            url: self.base.clone(),
            query: promql.to_string(),
            why,
        })
    }
}

/// Reads the API's answer to an instant query.
pub fn parse(body: &str) -> Result<Vec<Sample>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("a body that is not JSON ({e})"))?;
    if v["status"] != "success" {
        return Err(format!(
            "an error: {}",
            v["error"].as_str().unwrap_or("no reason given")
        ));
    }
    let value = |pair: &serde_json::Value| -> Result<f64, String> {
        pair[1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| format!("a sample value that is not a number: {pair}"))
    };
    match v["data"]["resultType"].as_str() {
        Some("vector") => v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                Ok(Sample {
                    labels,
                    value: value(&r["value"])?,
                })
            })
            .collect(),
        Some("scalar") => Ok(vec![Sample {
            labels: BTreeMap::new(),
            value: value(&v["data"]["result"])?,
        }]),
        other => Err(format!("a result of type {other:?}, not a vector")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_answer_gives_each_series_labels_and_value() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"up","instance":"10.0.0.2:9187"},"value":[1700000000.1,"1"]},
            {"metric":{"instance":"10.0.0.3:9187"},"value":[1700000000.1,"0.5"]}]}}"#;
        let s = parse(body).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label("instance"), "10.0.0.2:9187");
        assert_eq!(s[1].value, 0.5);
    }

    #[test]
    fn an_error_answer_says_what_prometheus_said() {
        let body = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        assert!(parse(body).unwrap_err().contains("parse error at char 3"));
        assert!(parse("<html>").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_server_that_never_answers_gives_an_error_at_the_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts and holds the connection without a word.
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let p = Prometheus::new(&format!("http://{addr}"), Duration::from_millis(300));
        let e = p.query("up").unwrap_err();
        assert!(matches!(e, PromError::Unreachable { .. }), "{e}");
        drop(held.join());
    }

    #[test]
    fn a_server_that_is_not_there_fails_within_the_timeout() {
        // Port 9 on loopback (discard) has no listener here: the connection is refused.
        let p = Prometheus::new("http://127.0.0.1:9", Duration::from_millis(500));
        let e = p.query("up").unwrap_err();
        assert!(matches!(e, PromError::Unreachable { .. }), "{e}");
    }
}
