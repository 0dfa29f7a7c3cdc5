//! `[search]`: how the space is searched — every configuration (`grid`, the default) or
//! iterated racing (`iterated`, irace's scheme: `crate::iterate`) — the forbidden rules, the
//! initial configurations, and the iterated search's schedule (iterations, elites) with the
//! budget it needs. The checks that need the whole space (a rule that forbids everything, a
//! grid too large to list or over a real range, a budget smaller than one iteration) are here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::expr::Expr;
use super::factor::{Config, Domain, Factor, Level};
use super::raw::{RawSearch, SpannedTable};
use super::source::Source;
use super::space::{ENUMERATE_LIMIT, Fill, SHARE_DRAWS, Space, SpaceSize, kinds};
use super::{Budget, RunSpec};
use crate::error::Result;

/// How the space is searched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every configuration, raced (F-Race) or run exhaustively.
    #[default]
    Grid,
    /// Iterated racing: configurations sampled around the elites, iteration after iteration.
    Iterated,
}

/// `[search]` as validated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchSpec {
    /// Grid or iterated racing.
    pub method: Method,
    /// Configurations for which one of these holds are not in the space.
    pub forbidden: Vec<Expr>,
    /// Configurations the first iteration races besides those it samples (iterated only).
    pub initial: Vec<Config>,
    /// Iterations (default 2 + log2 of the parameters, irace's N_iter).
    pub iterations: Option<usize>,
    /// Elites kept from each race (default 2 + log2 of the parameters, irace's N_min).
    pub elites: Option<usize>,
}

/// An iterated search's schedule: irace's formulas (López-Ibáñez et al. 2016, §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Iterations: ⌊2 + log2(parameters)⌋ unless `search.iterations` says.
    pub iterations: usize,
    /// Elites each race keeps (its end once no more are left): ⌊2 + log2(parameters)⌋
    /// unless `search.elites` says.
    pub elites: usize,
    /// Rounds before the first rank test (`run.min_rounds`, irace's μ / `firstTest`).
    pub first_test: usize,
}

impl Schedule {
    /// The schedule of a search over `parameters` varying parameters.
    pub fn new(search: &SearchSpec, parameters: usize, min_rounds: usize) -> Schedule {
        let auto = (2.0 + (parameters.max(1) as f64).log2()).floor() as usize;
        Schedule {
            iterations: search.iterations.unwrap_or(auto).max(1),
            elites: search.elites.unwrap_or(auto).max(1),
            first_test: min_rounds,
        }
    }

    /// The rounds' worth of trials each configuration of iteration `j` (from 1) is budgeted:
    /// μ + min(5, j), irace's divisor of the iteration's budget.
    pub fn rounds_per_configuration(&self, j: usize) -> usize {
        self.first_test + j.min(5)
    }

    /// Race trials the iterations need at least: every iteration with one configuration more
    /// than the elites (irace's minimum budget, for races that do not reuse the elites'
    /// earlier trials).
    pub fn minimum_trials(&self) -> usize {
        (self.elites + 1) * self.iterations * self.rounds_per_configuration(self.iterations.min(5))
    }
}

/// The parameters that vary (irace's `nbVariable`: those with more than one value).
pub fn varying(factors: &[Factor]) -> usize {
    factors
        .iter()
        .filter(|f| f.domain.count().is_none_or(|n| n > 1))
        .count()
}

/// `search.method`, `search.forbidden` (each rule checked against the parameters' types),
/// `search.iterations` and `search.elites`; the initial configurations come later
/// ([`initial`]), once the baseline they default to is known.
pub(super) fn search(source: &Source, r: &RawSearch, factors: &[Factor]) -> Result<SearchSpec> {
    let method = match &r.method {
        None => Method::Grid,
        Some(m) => match m.get_ref().as_str() {
            "grid" => Method::Grid,
            "iterated" => Method::Iterated,
            other => {
                return Err(source.bad(
                    m,
                    "search.method",
                    format!("{other:?}: use \"grid\" (every configuration) or \"iterated\" (iterated racing)"),
                ));
            }
        },
    };
    let kinds = kinds(factors);
    let mut forbidden = Vec::new();
    for (i, rule) in r.forbidden.iter().enumerate() {
        let field = format!("search.forbidden[{i}]");
        let e = Expr::parse(rule.get_ref())
            .and_then(|e| e.check(&kinds).map(|()| e))
            .map_err(|m| source.bad(rule, &field, m))?;
        forbidden.push(e);
    }
    for (key, v) in [("iterations", &r.iterations), ("elites", &r.elites)] {
        if let Some(n) = v
            && *n.get_ref() == 0
        {
            return Err(source.bad(n, format!("search.{key}"), "must be at least 1"));
        }
    }
    if method == Method::Grid {
        for (key, given) in [
            ("iterations", r.iterations.as_ref().map(Spanned::span)),
            ("elites", r.elites.as_ref().map(Spanned::span)),
            ("initial", r.initial.first().map(|i| i.span())),
        ] {
            if let Some(span) = given {
                return Err(source.invalid(
                    span,
                    format!("search.{key}"),
                    "applies to an iterated search: set search.method = \"iterated\" (a grid runs every configuration)",
                ));
            }
        }
    }
    Ok(SearchSpec {
        method,
        forbidden,
        initial: Vec::new(),
        iterations: r.iterations.as_ref().map(|n| *n.get_ref()),
        elites: r.elites.as_ref().map(|n| *n.get_ref()),
    })
}

/// The levels a table names, as TOML gives them (a value that is no level is an error at its
/// line, under `section.NAME`).
pub(super) fn table_levels(
    source: &Source,
    table: &SpannedTable,
    section: &str,
) -> Result<BTreeMap<String, Level>> {
    table
        .iter()
        .map(|(k, v)| {
            Level::from_toml(v.get_ref())
                .map(|l| (k.clone(), l))
                .ok_or_else(|| {
                    source.bad(
                        v,
                        format!("{section}.{k}"),
                        "must be a number, string or boolean",
                    )
                })
        })
        .collect()
}

/// The configuration of table `table` at field `section` in `space`, parameters left out
/// filled as `fill` says. Errors name the value's line, else `at`'s (the table's).
pub(super) fn config_in(
    source: &Source,
    space: &Space,
    table: &SpannedTable,
    section: &str,
    at: Option<std::ops::Range<usize>>,
    fill: Fill<'_>,
) -> Result<Config> {
    let levels = table_levels(source, table, section)?;
    space.from_table(&levels, fill).map_err(|(name, m)| {
        let span = name
            .as_ref()
            .and_then(|n| table.get(n))
            .map(Spanned::span)
            .or_else(|| table.values().next().map(Spanned::span))
            .or(at.clone())
            .unwrap_or(0..0);
        let field = match name {
            Some(n) => format!("{section}.{n}"),
            None => section.to_string(),
        };
        source.invalid(span, field, m)
    })
}

/// `search.initial`: each a configuration of the space (parameters left out take the
/// baseline's levels), none twice.
pub(super) fn initial(
    source: &Source,
    r: &RawSearch,
    space: &Space,
    baseline: &Config,
) -> Result<Vec<Config>> {
    let mut out: Vec<Config> = Vec::new();
    for (i, t) in r.initial.iter().enumerate() {
        let section = format!("search.initial[{i}]");
        let c = config_in(
            source,
            space,
            t.get_ref(),
            &section,
            Some(t.span()),
            Fill::From(baseline),
        )?;
        if out.contains(&c) {
            return Err(source.invalid(t.span(), section, format!("{c} is listed twice")));
        }
        out.push(c);
    }
    Ok(out)
}

/// The forbidden rules leave some configuration: else an error at the rule that forbids
/// everything alone, or at the first when they do together.
pub(super) fn check_not_empty(
    source: &Source,
    factors: &[Factor],
    forbidden: &[Expr],
    anchors: &Anchors,
) -> Result<()> {
    // Listed when the space can be, else none of its uniform draws allowed.
    let empty = |rules: &[Expr]| {
        let space = Space::new(factors, rules);
        match space.enumerate(ENUMERATE_LIMIT) {
            Some(all) => all.is_empty(),
            None => {
                let mut rng = crate::stats::Rng::new(0x5BACE);
                (0..SHARE_DRAWS).all(|_| space.forbidding(&space.draw_uniform(&mut rng)).is_some())
            }
        }
    };
    if forbidden.is_empty() || !empty(forbidden) {
        return Ok(());
    }
    let alone = (0..forbidden.len()).find(|&i| empty(std::slice::from_ref(&forbidden[i])));
    let (i, why) = match alone {
        Some(i) => (
            i,
            format!(
                "`{}` forbids every configuration of the space",
                forbidden[i]
            ),
        ),
        None => (
            0,
            "these rules together forbid every configuration of the space".into(),
        ),
    };
    let span = anchors.forbidden.get(i).cloned().unwrap_or(0..0);
    Err(source.invalid(
        span,
        format!("search.forbidden[{i}]"),
        format!("{why}: loosen it so that some configuration is left"),
    ))
}

/// Spans the whole-space checks point at.
pub(super) struct Anchors {
    /// `search.method`'s value, when given.
    pub method: Option<std::ops::Range<usize>>,
    /// Each forbidden rule's.
    pub forbidden: Vec<std::ops::Range<usize>>,
    /// Each parameter's (`[factors]` lists and `[parameters]`), by name.
    pub parameters: BTreeMap<String, std::ops::Range<usize>>,
    /// `run.budget`'s value, when given.
    pub budget: Option<std::ops::Range<usize>>,
}

/// The checks over the whole space: a grid can list its configurations (no real range, at most [`ENUMERATE_LIMIT`]); an iterated search has a
/// budget that holds its iterations. Returns the space's size.
pub(super) fn check_space(
    source: &Source,
    study: (&[Factor], &SearchSpec, &RunSpec),
    anchors: &Anchors,
) -> Result<SpaceSize> {
    let (factors, search, run) = study;
    let space = Space::new(factors, &search.forbidden);
    let size = space.size();
    let first_param = anchors.parameters.values().min_by_key(|s| s.start).cloned();
    let method_at = anchors
        .method
        .clone()
        .or(first_param.clone())
        .unwrap_or(0..0);
    match search.method {
        Method::Grid => {
            if let Some(f) = factors
                .iter()
                .find(|f| matches!(f.domain, Domain::Real { .. }))
            {
                let span = anchors.parameters.get(&f.name).cloned().unwrap_or(0..0);
                return Err(source.invalid(
                    span,
                    format!("parameters.{}", f.name),
                    "a real range cannot be listed for a grid search: set [search] method = \"iterated\", or list values (ordinal = [...])",
                ));
            }
            if !matches!(size, SpaceSize::Exact(_)) {
                return Err(source.invalid(
                    method_at,
                    "search.method",
                    format!(
                        "a grid runs every configuration, and this space holds {size} (a grid lists at most {ENUMERATE_LIMIT}): set [search] method = \"iterated\" with a run.budget"
                    ),
                ));
            }
        }
        Method::Iterated => check_budget(source, factors, search, run, &size, anchors, method_at)?,
    }
    Ok(size)
}

/// An iterated search's budget: given, in trials where the space is unbounded, and enough
/// for its iterations and the confirmation.
fn check_budget(
    source: &Source,
    factors: &[Factor],
    search: &SearchSpec,
    run: &RunSpec,
    size: &SpaceSize,
    anchors: &Anchors,
    method_at: std::ops::Range<usize>,
) -> Result<()> {
    let Some(budget) = run.budget else {
        return Err(source.invalid(
            method_at,
            "search.method",
            "an iterated search stops on its budget: set run.budget to the trials it may take (e.g. 300), or a share of an exhaustive run's (\"10%\")",
        ));
    };
    let at = anchors.budget.clone().unwrap_or(0..0);
    let trials = match (budget, size.estimate()) {
        (Budget::Trials(n), _) => n,
        (Budget::Share(_), None) => {
            return Err(source.invalid(
                at,
                "run.budget",
                format!("a share of an exhaustive run means nothing for a space that is {size}: give a number of trials (e.g. 300)"),
            ));
        }
        (b @ Budget::Share(_), Some(n)) => {
            let exhaustive = (n.round() as usize).saturating_mul(run.repetitions);
            b.trials(exhaustive.saturating_add(2 * run.confirm_rounds))
        }
    };
    let schedule = Schedule::new(search, varying(factors), run.min_rounds);
    let reserve = 2 * run.confirm_rounds;
    let need = schedule.minimum_trials() + reserve;
    if trials < need {
        return Err(source.invalid(
            at,
            "run.budget",
            format!(
                "{trials} trials are smaller than one iteration of this search: each of its {} iterations races at least {} configurations ({} elites and one more) for {} rounds' worth of trials, {} in all, plus {reserve} for the confirmation; give at least {need} trials, or fewer search.iterations, search.elites or run.min_rounds",
                schedule.iterations,
                schedule.elites + 1,
                schedule.elites,
                schedule.rounds_per_configuration(schedule.iterations.min(5)),
                schedule.minimum_trials()
            ),
        ));
    }
    Ok(())
}
