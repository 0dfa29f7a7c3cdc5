//! `[run]` and `[scaling]`: trial timing, rounds, racing and its defaults, the baseline, and
//! the scaling mode's load sweep.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::budget::Budget;
use super::factor::Config;
use super::raw::{RawRun, RawScaling};
use super::search::config_in;
use super::source::Source;
use super::space::{Fill, Space};
use crate::error::Result;

/// The default conditional power under which a tied configuration leaves the race.
pub const DEFAULT_FUTILITY: f64 = 0.0;

/// Default `run.min_rounds`, irace's `firstTest` (why: `docs/study-file.md`, last section).
pub const DEFAULT_MIN_ROUNDS: usize = 5;

/// Default `run.min_chance` (why: `docs/study-file.md`, Figures behind the defaults).
pub const DEFAULT_MIN_CHANCE: f64 = 0.05;

/// Default `run.far_behind` (why: `docs/study-file.md`, Figures behind the defaults).
pub const DEFAULT_FAR_BEHIND: f64 = 0.2;

/// Default `run.stop_loss` (why: `docs/study-file.md`, Figures behind the defaults).
pub const DEFAULT_STOP_LOSS: f64 = 0.005;

/// Rounds before the far-behind rule ([`DEFAULT_FAR_BEHIND`]): the first with a standard
/// deviation of two paired ratios to judge by.
pub const FAR_BEHIND_MIN_ROUNDS: usize = 3;

/// `run.repetitions` when the file leaves it out.
const DEFAULT_REPETITIONS: usize = 5;

/// `run.alpha` when the file leaves it out.
const DEFAULT_ALPHA: f64 = 0.05;

/// The racing shares of `[run]` (`futility`, `min_chance`, `far_behind`, `stop_loss`) and
/// the bound each must stay below; each is at least 0 (0 turns its rule off).
pub(crate) fn share_below(key: &str) -> f64 {
    match key {
        "min_chance" | "stop_loss" => 0.5,
        _ => 1.0,
    }
}

/// Trial timing, repetitions and racing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Load before each trial's measured window, not measured (default 10 s).
    pub warmup: Duration,
    /// Each trial's measured window (default 30 s).
    pub measure: Duration,
    /// Rounds at most (each alive configuration once per round).
    pub repetitions: usize,
    /// Race out configurations that are significantly worse.
    pub racing: bool,
    /// Rounds before the first rank test (the far-behind rule acts from round 3).
    pub min_rounds: usize,
    /// The level of the racing and confirmation tests (default 0.05).
    pub alpha: f64,
    /// Conditional power below which a configuration tied with the leader leaves the race:
    /// the chance that the rounds left would show it worse, were its observed shortfall real
    /// (0: never).
    pub futility: f64,
    /// From round 7 on, a configuration whose chance of being the best (a bootstrap of the
    /// rounds so far) is below this leaves the race (0: never).
    pub min_chance: f64,
    /// From round 3 on (before `min_rounds` too), a configuration significantly more than this
    /// share behind the leader leaves the race (0: never).
    pub far_behind: f64,
    /// From `min_rounds` on, the race ends when the expected loss of choosing the leader now
    /// (the sum over the others still racing of E[max(0, their advantage)], paired log
    /// ratios with a Student-t posterior) is below this share of its score (0: never).
    pub stop_loss: f64,
    /// The most trials a raced run may take, race and confirmation together: the race ends
    /// before a round that would leave too few for the confirmation (none: no cap).
    pub budget: Option<Budget>,
    /// A configuration practically equivalent to the leader (within `objective.min_effect`)
    /// leaves the race. Off by default: it saves few trials once `min_chance` is on, and a
    /// lucky early leader can push the true best out as "equivalent".
    pub drop_equivalent: bool,
    /// Extra paired rounds of winner and baseline.
    pub confirm_rounds: usize,
    /// Seeds the round orders (default 1).
    pub seed: u64,
    /// The baseline configuration (default: each factor's first level).
    pub baseline: Config,
    /// Pause between stopping one trial and starting the next.
    pub cooldown: Duration,
}

/// The scaling mode: a load sweep of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalingSpec {
    /// Total users at each point.
    pub users: Vec<usize>,
    /// The configuration swept (default: each factor's first level).
    pub config: Config,
}

/// Checks `[run]`: rounds, the test level, the racing shares, the budget, the baseline and
/// the durations.
pub(super) fn run(
    source: &Source,
    r: &RawRun,
    space: &Space,
    at: Option<std::ops::Range<usize>>,
) -> Result<RunSpec> {
    let repetitions = match &r.repetitions {
        None => DEFAULT_REPETITIONS,
        Some(n) if *n.get_ref() == 0 => {
            return Err(source.bad(n, "run.repetitions", "must be at least 1"));
        }
        Some(n) => *n.get_ref(),
    };
    let alpha = match &r.alpha {
        None => DEFAULT_ALPHA,
        Some(a) if *a.get_ref() > 0.0 && *a.get_ref() < 0.5 => *a.get_ref(),
        Some(a) => return Err(source.bad(a, "run.alpha", "must be between 0 and 0.5")),
    };
    let futility = share(source, r.futility.as_ref(), DEFAULT_FUTILITY, "futility")?;
    let min_chance = share(
        source,
        r.min_chance.as_ref(),
        DEFAULT_MIN_CHANCE,
        "min_chance",
    )?;
    let far_behind = share(
        source,
        r.far_behind.as_ref(),
        DEFAULT_FAR_BEHIND,
        "far_behind",
    )?;
    let stop_loss = share(source, r.stop_loss.as_ref(), DEFAULT_STOP_LOSS, "stop_loss")?;
    let budget = r.budget.as_ref().map(|b| budget(source, b)).transpose()?;
    let baseline = config_in(source, space, &r.baseline, "run.baseline", at, Fill::First)?;
    let warmup = source.duration(r.warmup.as_ref(), "run.warmup", Duration::from_secs(10))?;
    let measure = source.duration(r.measure.as_ref(), "run.measure", Duration::from_secs(30))?;
    let cooldown = source.duration(
        r.cooldown.as_ref(),
        "run.cooldown",
        Duration::from_millis(200),
    )?;
    if let Some(m) = &r.measure
        && measure.is_zero()
    {
        return Err(source.bad(m, "run.measure", "must be longer than 0"));
    }
    Ok(RunSpec {
        warmup,
        measure,
        repetitions,
        racing: r.racing.unwrap_or(true),
        min_rounds: r.min_rounds.unwrap_or(DEFAULT_MIN_ROUNDS).max(2),
        alpha,
        futility,
        min_chance,
        far_behind,
        stop_loss,
        budget,
        drop_equivalent: r.drop_equivalent.unwrap_or(false),
        confirm_rounds: r.confirm_rounds.unwrap_or(3),
        seed: r.seed.unwrap_or(1),
        baseline,
        cooldown,
    })
}

/// A racing share `run.{key}` in [0, [`share_below`]): 0 turns its rule off.
fn share(source: &Source, value: Option<&Spanned<f64>>, default: f64, key: &str) -> Result<f64> {
    let Some(v) = value else {
        return Ok(default);
    };
    let below = share_below(key);
    if (0.0..below).contains(v.get_ref()) {
        Ok(*v.get_ref())
    } else {
        Err(source.bad(
            v,
            format!("run.{key}"),
            format!("must be at least 0 (off) and below {below}"),
        ))
    }
}

/// `run.budget`: a number of trials (`120`) or a share of an exhaustive run's (`"50%"`).
fn budget(source: &Source, v: &Spanned<toml::Value>) -> Result<Budget> {
    let parsed = match v.get_ref() {
        toml::Value::Integer(n) => Budget::parse(&n.to_string()),
        toml::Value::String(t) => Budget::parse(t),
        _ => None,
    };
    parsed.ok_or_else(|| {
        source.bad(
            v,
            "run.budget",
            format!(
                "{} is neither a number of trials (120) nor a share of an exhaustive run's trials (\"50%\")",
                v.get_ref()
            ),
        )
    })
}

/// Checks `[scaling]`: the configuration swept and its user counts.
pub(super) fn scaling(
    source: &Source,
    s: &RawScaling,
    space: &Space,
    baseline: &Config,
    at: Option<std::ops::Range<usize>>,
) -> Result<ScalingSpec> {
    // A range has no first level: the baseline's is swept.
    let fill = Fill::FirstThen(baseline);
    let config = config_in(source, space, &s.config, "scaling.config", at, fill)?;
    if let Some(zero) = s.users.iter().find(|u| *u.get_ref() == 0) {
        return Err(source.bad(zero, "scaling.users", "user counts must be at least 1"));
    }
    Ok(ScalingSpec {
        users: s.users.iter().map(|u| *u.get_ref()).collect(),
        config,
    })
}
