//! The figures of each kind of request of a run with a [`RequestProfile`]: every driver
//! thread's tasks count into the thread's [`KindTally`] (one histogram per kind and thread, not
//! per user), and the run's [`KindResult`]s are merged from them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::DriveError;
use crate::hist::LatencyHistogram;
use crate::measurement::{HistogramData, Latency};
use crate::profile::RequestProfile;

/// What the requests of one kind (one row of the profile) did in the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindResult {
    /// The row's name.
    pub name: String,
    /// Its method.
    pub method: String,
    /// Its URL as written (with its placeholders).
    pub url: String,
    /// The share of requests its weight asks for, 0..=1.
    pub weight_share: f64,
    /// Completed attempts: responses of any status plus transport errors.
    pub requests: u64,
    /// Responses with a 2xx or 3xx status.
    pub ok: u64,
    /// `requests - ok`.
    pub errors: u64,
    /// Response counts by HTTP status code.
    #[serde(default)]
    pub status: BTreeMap<String, u64>,
    /// Latency summary of its responses (of any status), ms.
    #[serde(default)]
    pub latency: Option<Latency>,
    /// Its latencies, so that runs merge exactly.
    #[serde(default)]
    pub histogram: Option<HistogramData>,
}

/// One kind's counts on one thread.
#[derive(Debug, Default)]
struct KindCounts {
    requests: u64,
    ok: u64,
    status: BTreeMap<u16, u64>,
    hist: LatencyHistogram,
}

/// The counts of every kind on one driver thread. Only the thread's own tasks lock it, one at
/// a time, so the lock is uncontended.
#[derive(Debug)]
pub(crate) struct KindTally(Mutex<Vec<KindCounts>>);

impl KindTally {
    /// An empty tally of `kinds` kinds.
    pub fn new(kinds: usize) -> Self {
        KindTally(Mutex::new(
            (0..kinds).map(|_| KindCounts::default()).collect(),
        ))
    }

    /// Counts one attempt of `kind` in the measured window.
    pub fn record(&self, kind: usize, latency_us: Option<u64>, status: Option<u16>, ok: bool) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = all.get_mut(kind) else {
            return;
        };
        c.requests += 1;
        if ok {
            c.ok += 1;
        }
        if let Some(s) = status {
            *c.status.entry(s).or_default() += 1;
        }
        if let Some(us) = latency_us {
            c.hist.record_us(us);
        }
    }
}

/// The run's result per kind, from every thread's tally.
pub(crate) fn kind_results(profile: &RequestProfile, tallies: &[&KindTally]) -> Vec<KindResult> {
    let locked: Vec<_> = tallies
        .iter()
        .map(|t| t.0.lock().unwrap_or_else(|p| p.into_inner()))
        .collect();
    profile
        .kinds
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut hist = LatencyHistogram::new();
            let mut out = KindResult {
                name: k.name.clone(),
                method: k.method.as_str().to_string(),
                url: k.url.clone(),
                weight_share: profile.share(i),
                requests: 0,
                ok: 0,
                errors: 0,
                status: BTreeMap::new(),
                latency: None,
                histogram: None,
            };
            for c in locked.iter().filter_map(|t| t.get(i)) {
                out.requests += c.requests;
                out.ok += c.ok;
                for (s, n) in &c.status {
                    *out.status.entry(s.to_string()).or_default() += n;
                }
                hist.add(&c.hist);
            }
            out.errors = out.requests - out.ok;
            out.latency = hist.latency();
            out.histogram = (!hist.is_empty()).then(|| hist.to_data());
            out
        })
        .collect()
}

/// Merges the kinds of runs that ran at the same time, by name, in order of first appearance:
/// counts add and latencies are recomputed from the added histograms (a kind a part lacks a
/// histogram for keeps none).
pub(crate) fn merge_kinds(parts: &[&[KindResult]]) -> Result<Vec<KindResult>, DriveError> {
    let mut out: Vec<(KindResult, Option<LatencyHistogram>)> = Vec::new();
    for part in parts {
        for k in *part {
            let h = k
                .histogram
                .as_ref()
                .map(LatencyHistogram::from_data)
                .transpose()?;
            match out.iter_mut().find(|(o, _)| o.name == k.name) {
                Some((o, hist)) => {
                    o.requests += k.requests;
                    o.ok += k.ok;
                    o.errors += k.errors;
                    for (s, n) in &k.status {
                        *o.status.entry(s.clone()).or_default() += n;
                    }
                    match (hist.as_mut(), &h) {
                        (Some(a), Some(b)) => a.add(b),
                        (_, None) if k.requests > 0 => *hist = None,
                        _ => {}
                    }
                }
                None => out.push((k.clone(), h)),
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|(mut k, h)| {
            if let Some(h) = h.filter(|h| !h.is_empty()) {
                k.latency = h.latency();
                k.histogram = Some(h.to_data());
            }
            k
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn each_kind_adds_up_over_threads_and_merges_by_name() {
        let profile = RequestProfile::parse(
            "name,weight,method,url\nget,3,GET,http://127.0.0.1:1/a\nput,1,PUT,http://127.0.0.1:1/b\n",
            Path::new("p.csv"),
            None,
        )
        .unwrap();
        let (a, b) = (KindTally::new(2), KindTally::new(2));
        a.record(0, Some(1000), Some(200), true);
        a.record(0, None, None, false);
        b.record(0, Some(3000), Some(200), true);
        b.record(1, Some(2000), Some(507), false);
        let r = kind_results(&profile, &[&a, &b]);
        assert_eq!((r[0].requests, r[0].ok, r[0].errors), (3, 2, 1));
        assert_eq!(r[0].status.get("200"), Some(&2));
        assert_eq!(r[0].weight_share, 0.75);
        assert_eq!(r[1].status.get("507"), Some(&1));
        let l = r[0].latency.as_ref().unwrap();
        assert_eq!((l.count, l.max_ms.map(f64::round)), (Some(2), Some(3.0)));
        let merged = merge_kinds(&[&r, &r]).unwrap();
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].requests, merged[0].errors), (6, 2));
        assert_eq!(merged[0].latency.as_ref().unwrap().count, Some(4));
        assert_eq!(merged[1].status.get("507"), Some(&2));
    }
}
