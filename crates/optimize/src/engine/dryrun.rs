//! A dry run: one scan of the engine that proposes without acting, for `perfpilot advise`.
//!
//! The same code decides as in the daemon (listing, `left_alone`, eligibility, the signal,
//! back-offs, each strategy's proposal); only the last step differs: where the daemon would
//! start a trial, the dry run says "would try". Nothing is journaled, applied or enforced:
//! the engine is not begun (no start-up knob, no recovery), the journal's kept actions are read
//! (so a strategy already kept is not proposed again) but not re-adopted, and trials are
//! neither advanced nor started. Presets are read (a read-only query, as the daemon's status).

use std::time::Duration;

use perfpilot_store::journal::ActionState;
use tracing::debug;

use super::enforce::Held;
use super::{Engine, EngineError, Status, startup};
use crate::journal;
use crate::strategy::StrategyKind;

impl Engine {
    /// One dry scan: two samples `settle` apart, then what each workload would get. The status
    /// says it in each workload's `state` ("would try large_pages: …", or why nothing).
    pub fn dry_run(mut self, settle: Duration) -> Result<Status, EngineError> {
        self.dry = true;
        self.read_kept_actions()?;
        self.scan()?;
        std::thread::sleep(settle);
        self.scan()?;
        Ok(self.status)
    }

    /// The journal's kept actions, as held ones (read only: their state is not touched, their
    /// changes not enforced).
    pub(super) fn read_kept_actions(&mut self) -> Result<(), EngineError> {
        for rec in self.store.actions(true, 100_000)? {
            if rec.state != ActionState::Kept || rec.signature == startup::SIGNATURE {
                continue;
            }
            let Some(strategy) = StrategyKind::parse(&rec.strategy) else {
                continue;
            };
            match journal::parse(&rec) {
                Ok((doc, _)) => self.actions.held.push(Held {
                    id: rec.id,
                    signature: rec.signature.clone(),
                    strategy,
                    doc,
                    watch: None,
                }),
                Err(e) => debug!(action = rec.id, "dry run: {e}"),
            }
        }
        Ok(())
    }
}
