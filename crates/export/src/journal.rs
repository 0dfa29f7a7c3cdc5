//! The daemon's actions as the metrics need them, kept current from the store by reading only
//! what changed since the last scan (a journal of thousands of actions is not read again).

use std::collections::BTreeMap;

use perfpilot_store::{ActionRecord, Store};
use tracing::warn;

/// One action, as the metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Act {
    /// The workload's signature.
    pub signature: String,
    /// Its readable name.
    pub workload: String,
    /// The strategy.
    pub strategy: String,
    /// Whether it still has something in the system.
    pub open: bool,
    /// Its verdict's decision (`keep`, `revert`, `neutral`), once decided.
    pub decision: Option<String>,
    /// Its verdict's gain (> 1 is better), where measured.
    pub gain: Option<f64>,
    /// When it last changed (ms since the epoch).
    pub updated_ms: i64,
}

impl Act {
    /// The action of a journal record.
    pub fn of(r: &ActionRecord) -> Act {
        let v: Option<serde_json::Value> = r
            .verdict
            .as_deref()
            .and_then(|v| serde_json::from_str(v).ok());
        Act {
            signature: r.signature.clone(),
            workload: r.workload.clone(),
            strategy: r.strategy.clone(),
            open: r.state.is_open(),
            decision: v
                .as_ref()
                .and_then(|v| v["decision"].as_str().map(str::to_string)),
            gain: v.as_ref().and_then(|v| v["gain"]["ratio"].as_f64()),
            updated_ms: r.updated_ms,
        }
    }
}

/// Every action of the journal, by id.
#[derive(Debug, Default)]
pub struct Journal {
    /// The actions.
    pub acts: BTreeMap<i64, Act>,
    since_ms: i64,
}

impl Journal {
    /// Takes in what changed in `store` since the last call (a failure is logged; the copy
    /// stays as it was).
    pub fn refresh(&mut self, store: &Store) {
        match store.actions_since(self.since_ms) {
            Ok(rs) => self.take(&rs),
            Err(e) => warn!("metrics: cannot read the journal: {e}"),
        }
    }

    /// Takes in changed records.
    pub fn take(&mut self, records: &[ActionRecord]) {
        for r in records {
            self.since_ms = self.since_ms.max(r.updated_ms);
            self.acts.insert(r.id, Act::of(r));
        }
    }
}
