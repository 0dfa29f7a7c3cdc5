//! Verdict history: what the daemon measured on this host, read from the store's journal
//! (read-only). A finding covered by a strategy is matched to the journal's actions of that
//! strategy on the same workload (the workload signature is the hash of the command line, as
//! the daemon makes it).

use perfpilot_observe::workload::stable_hash;
use perfpilot_store::ActionRecord;

use crate::finding::{Finding, Measured};

/// The most actions read from the journal (newest first).
const MAX_ACTIONS: usize = 10_000;

/// The journal's actions, newest first.
pub(crate) fn read(
    store: &perfpilot_store::Store,
) -> Result<Vec<ActionRecord>, perfpilot_store::Error> {
    store.actions(false, MAX_ACTIONS)
}

/// The hash part of a workload signature (`0123…cdef` of `0123…cdef-shm`).
fn signature_hash(signature: &str) -> &str {
    signature.split('-').next().unwrap_or(signature)
}

/// What the journal says of `f`, if it covers `f`'s strategy and workload.
pub(crate) fn measured(f: &Finding, actions: &[ActionRecord]) -> Option<Measured> {
    let strategy = f.strategy.as_deref()?;
    let cmdline = f.cmdline.as_deref()?;
    let hash = format!("{:016x}", stable_hash(cmdline.as_bytes()));
    let mut m = Measured {
        strategy: strategy.to_string(),
        kept: 0,
        reverted: 0,
        neutral: 0,
        gain: None,
        ci_low: None,
        ci_high: None,
        summary: String::new(),
    };
    let mut latest: Option<(i64, &str)> = None;
    for a in actions
        .iter()
        .filter(|a| a.strategy == strategy && signature_hash(&a.signature) == hash)
    {
        let Some(v) = a
            .verdict
            .as_deref()
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        else {
            continue;
        };
        let decision = v["decision"].as_str().unwrap_or("");
        match decision {
            "keep" => m.kept += 1,
            "revert" => m.reverted += 1,
            "neutral" => m.neutral += 1,
            _ => continue,
        }
        // Newest first: the first judged action with a gain is the latest.
        if m.gain.is_none()
            && let Some(ratio) = v["gain"]["ratio"].as_f64()
        {
            m.gain = Some(ratio);
            m.ci_low = v["gain"]["ci_low"].as_f64();
            m.ci_high = v["gain"]["ci_high"].as_f64();
            latest = Some((
                a.id,
                match decision {
                    "keep" => "kept",
                    "revert" => "reverted",
                    _ => "neutral",
                },
            ));
        }
    }
    if m.kept + m.reverted + m.neutral == 0 {
        return None;
    }
    let latest = match (latest, m.gain) {
        (Some((id, word)), Some(g)) => {
            let ci = match (m.ci_low, m.ci_high) {
                (Some(l), Some(h)) => format!(" [{l:.2}, {h:.2}]"),
                _ => String::new(),
            };
            format!("{word} ×{g:.2}{ci} (action {id}); ")
        }
        _ => String::new(),
    };
    m.summary = format!(
        "measured here: {latest}{} kept, {} reverted, {} no different",
        m.kept, m.reverted, m.neutral
    );
    Some(m)
}
