//! Latency histogram in microseconds, serialized as base64 of HdrHistogram's V2 deflate format.

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

use crate::error::DriveError;
use crate::measurement::{HistogramData, Latency};

/// The encoding name written into [`HistogramData::encoding`].
pub const HISTOGRAM_ENCODING: &str = "hdrhistogram-v2-deflate-base64";

/// Latencies in microseconds, 3 significant digits, auto-resizing (no upper bound to clip).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        let mut inner = Histogram::<u64>::new(3).expect("3 significant digits is a valid setting");
        inner.auto(true);
        Self { inner }
    }

    /// Records one latency in microseconds (0 is recorded as 0).
    pub fn record_us(&mut self, us: u64) {
        // `record` grows the auto-resizing histogram; `saturating_record` would clip to the
        // current top instead. Only a value beyond what any histogram can hold falls back.
        if self.inner.record(us).is_err() {
            self.inner.saturating_record(us);
        }
    }

    /// Adds every count of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        // Both histograms auto-resize, so adding cannot go out of range.
        let _ = self.inner.add(&other.inner);
    }

    /// The HdrHistogram itself (for its log writers).
    pub fn inner(&self) -> &Histogram<u64> {
        &self.inner
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Value at quantile `q` (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.inner.value_at_quantile(q)
    }

    /// Latency summary in milliseconds; `None` when empty.
    pub fn latency(&self) -> Option<Latency> {
        if self.inner.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Latency {
            count: Some(self.inner.len()),
            mean_ms: Some(self.inner.mean() / 1000.0),
            stdev_ms: Some(self.inner.stdev() / 1000.0),
            min_ms: Some(ms(self.inner.min())),
            p50_ms: Some(ms(self.inner.value_at_quantile(0.50))),
            p75_ms: Some(ms(self.inner.value_at_quantile(0.75))),
            p90_ms: Some(ms(self.inner.value_at_quantile(0.90))),
            p95_ms: Some(ms(self.inner.value_at_quantile(0.95))),
            p99_ms: Some(ms(self.inner.value_at_quantile(0.99))),
            p99_9_ms: Some(ms(self.inner.value_at_quantile(0.999))),
            max_ms: Some(ms(self.inner.max())),
        })
    }

    /// Serializes into the JSON-embeddable form.
    pub fn to_data(&self) -> HistogramData {
        let mut buf = Vec::new();
        // Writing into a Vec cannot fail for an in-range histogram.
        let data = match V2DeflateSerializer::new().serialize(&self.inner, &mut buf) {
            Ok(_) => base64::engine::general_purpose::STANDARD.encode(&buf),
            Err(_) => String::new(),
        };
        HistogramData {
            unit: "us".to_string(),
            encoding: HISTOGRAM_ENCODING.to_string(),
            data,
        }
    }

    /// Decodes what [`LatencyHistogram::to_data`] wrote.
    pub fn from_data(data: &HistogramData) -> Result<Self, DriveError> {
        let decode = |reason: String| DriveError::Decode {
            what: "histogram".to_string(),
            reason,
        };
        if data.encoding != HISTOGRAM_ENCODING {
            return Err(decode(format!(
                "unknown encoding {:?} (expected {HISTOGRAM_ENCODING})",
                data.encoding
            )));
        }
        if data.unit != "us" {
            return Err(decode(format!("unit {:?} (expected \"us\")", data.unit)));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.data.as_bytes())
            .map_err(|e| decode(format!("base64: {e}")))?;
        let mut inner: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| decode(format!("{e:?}")))?;
        inner.auto(true);
        Ok(Self { inner })
    }
}
