//! The store's Prometheus metrics (OpenMetrics text on `/metrics`): requests by operation and
//! status (`filestore_requests_total`, the name the daemon's Prometheus preset picks), request
//! latency by operation, bytes in and out, and the number of documents.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// What a request did.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Op {
    /// PUT /docs/ID or POST /docs: ingest a document.
    put,
    /// GET /docs/ID: retrieve a document's content.
    get,
    /// GET /docs/ID/meta: a document's catalog entry.
    meta,
    /// GET /docs: a page of the listing.
    list,
    /// GET /search: a page of a metadata search.
    search,
    /// GET /metrics and /health.
    admin,
    /// Anything else (answered 404 or 405).
    other,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    op: Op,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: Op,
}

/// Latency buckets from 50 µs to about 3.3 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 17))
}

/// The counters behind `/metrics`.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<OpLabel, Histogram, fn() -> Histogram>,
    ingested: Counter,
    served: Counter,
    documents: Gauge,
}

impl Metrics {
    /// Metrics of a store that holds `documents` documents.
    pub fn new(documents: u64) -> Metrics {
        let mut registry = Registry::with_prefix("filestore");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<OpLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let (ingested, served, docs) = (Counter::default(), Counter::default(), Gauge::default());
        docs.set(i64::try_from(documents).unwrap_or(i64::MAX));
        registry.register(
            "requests",
            "HTTP requests by operation and status",
            requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its response, by operation",
            Unit::Seconds,
            latency.clone(),
        );
        registry.register_with_unit(
            "ingested",
            "Document bytes stored",
            Unit::Bytes,
            ingested.clone(),
        );
        registry.register_with_unit(
            "served",
            "Document bytes served by GET",
            Unit::Bytes,
            served.clone(),
        );
        registry.register("documents", "Documents in the catalog", docs.clone());
        Metrics {
            registry,
            requests,
            latency,
            ingested,
            served,
            documents: docs,
        }
    }

    /// Counts a request of `op` answered with `status` after `secs`.
    pub fn request(&self, op: Op, status: u16, secs: f64) {
        self.requests
            .get_or_create(&RequestLabels { op, status })
            .inc();
        self.latency.get_or_create(&OpLabel { op }).observe(secs);
    }

    /// Counts `bytes` of document content stored; `new` when the document was not there
    /// before.
    pub fn ingested(&self, bytes: u64, new: bool) {
        self.ingested.inc_by(bytes);
        if new {
            self.documents.inc();
        }
    }

    /// Counts `bytes` of document content served.
    pub fn served(&self, bytes: u64) {
        self.served.inc_by(bytes);
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_operation_and_status_under_a_requests_total_name() {
        let m = Metrics::new(3);
        m.request(Op::get, 200, 0.0001);
        m.request(Op::get, 200, 0.0002);
        m.request(Op::put, 507, 0.01);
        m.ingested(10, true);
        m.served(7);
        let text = m.render();
        for line in [
            "filestore_requests_total{op=\"get\",status=\"200\"} 2",
            "filestore_requests_total{op=\"put\",status=\"507\"} 1",
            "filestore_request_duration_seconds_count{op=\"get\"} 2",
            "filestore_ingested_bytes_total 10",
            "filestore_served_bytes_total 7",
            "filestore_documents 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        assert!(text.contains("# TYPE filestore_requests counter"), "{text}");
    }
}
