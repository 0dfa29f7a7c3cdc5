//! `run.budget`: how many trials a raced run may take.

use serde::{Deserialize, Serialize};

/// A race's budget (F-Race's computational budget): the trials a run may take, race and
/// confirmation together.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Budget {
    /// At most this many trials.
    Trials(usize),
    /// At most this share (0–1] of the trials an exhaustive run takes (every configuration
    /// in every round, and the confirmation).
    Share(f64),
}

impl Budget {
    /// `120` (trials) or `50%` (of an exhaustive run's trials); `None` otherwise.
    pub fn parse(s: &str) -> Option<Budget> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let x: f64 = p.trim().parse().ok()?;
            return (x > 0.0 && x <= 100.0).then_some(Budget::Share(x / 100.0));
        }
        let n: usize = s.parse().ok()?;
        (n > 0).then_some(Budget::Trials(n))
    }

    /// The trials it allows a run whose exhaustive run takes `exhaustive` trials.
    pub fn trials(&self, exhaustive: usize) -> usize {
        match self {
            Budget::Trials(n) => *n,
            Budget::Share(x) => (x * exhaustive as f64).floor() as usize,
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Trials(n) => write!(f, "{n} trials"),
            Budget::Share(x) => write!(f, "{} % of an exhaustive run's trials", x * 100.0),
        }
    }
}
