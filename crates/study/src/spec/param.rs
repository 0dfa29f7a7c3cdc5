//! `[parameters]`: typed parameters — integer and real ranges (optionally on a log scale),
//! ordinal and categorical lists — each with an optional condition (`when`). The built-in
//! factors may be typed parameters too (`instances = { integer = [1, 4] }`). Checked here: a
//! range's bounds (min ≤ max; above 0 on a log scale), the digits of a real, the built-ins'
//! values, and the condition's syntax; its names and types are checked once every parameter
//! is known (`space`).

use std::collections::BTreeMap;

use toml::Spanned;

use super::expr::Expr;
use super::factor::{Domain, Factor, check_level, levels_of};
use super::raw::RawParam;
use super::source::Source;
use crate::error::Result;

/// Significant digits of a real parameter when the file leaves them out (irace's default).
pub const DEFAULT_DIGITS: u32 = 4;

/// The most significant digits a real parameter may keep (an f64 holds about 15).
const MAX_DIGITS: u32 = 12;

/// The parameters of `[parameters]` with their spans' starts (for the file's order).
pub(super) fn parameters(
    source: &Source,
    table: &BTreeMap<String, Spanned<RawParam>>,
    allocators: &BTreeMap<String, String>,
) -> Result<Vec<(usize, Factor)>> {
    let mut out = Vec::new();
    for (name, raw) in table {
        let field = format!("parameters.{name}");
        let p = raw.get_ref();
        let kinds = [
            p.integer.as_ref().map(|v| ("integer", v)),
            p.real.as_ref().map(|v| ("real", v)),
            p.ordinal.as_ref().map(|v| ("ordinal", v)),
            p.categorical.as_ref().map(|v| ("categorical", v)),
        ];
        let given: Vec<(&str, &Spanned<Vec<toml::Value>>)> = kinds.into_iter().flatten().collect();
        let (kind, values) = match given.as_slice() {
            [one] => *one,
            [] => {
                return Err(source.bad(
                    raw,
                    &field,
                    "needs one of integer = [min, max], real = [min, max], ordinal = [levels…] or categorical = [levels…]",
                ));
            }
            [_, second, ..] => {
                return Err(source.bad(
                    second.1,
                    &field,
                    format!(
                        "gives both {} and {}: a parameter has one type",
                        given[0].0, second.0
                    ),
                ));
            }
        };
        let sub = format!("{field}.{kind}");
        let domain = match kind {
            "integer" | "real" => range(source, name, raw, kind, values, &sub)?,
            _ => {
                let levels = levels_of(name, values.get_ref(), allocators)
                    .map_err(|m| source.bad(values, &sub, m))?;
                for (opt, v) in [("log", p.log.is_some()), ("digits", p.digits.is_some())] {
                    if v {
                        return Err(source.bad(
                            raw,
                            &field,
                            format!(
                                "{opt} applies to integer and real ranges, not to {kind} levels"
                            ),
                        ));
                    }
                }
                if kind == "ordinal" {
                    Domain::Ordinal(levels)
                } else {
                    Domain::Categorical(levels)
                }
            }
        };
        let when = match &p.when {
            None => None,
            Some(w) => Some(
                Expr::parse(w.get_ref()).map_err(|m| source.bad(w, format!("{field}.when"), m))?,
            ),
        };
        out.push((
            raw.span().start,
            Factor {
                name: name.clone(),
                domain,
                when,
            },
        ));
    }
    Ok(out)
}

/// An integer or real range `[min, max]` of parameter `name` (`kind`), with its `log` and
/// `digits` options.
fn range(
    source: &Source,
    name: &str,
    raw: &Spanned<RawParam>,
    kind: &str,
    values: &Spanned<Vec<toml::Value>>,
    field: &str,
) -> Result<Domain> {
    let p = raw.get_ref();
    let bad = |m: String| source.bad(values, field, m);
    let [lo, hi] = values.get_ref().as_slice() else {
        return Err(bad(format!(
            "a range is [min, max]: two numbers, not {}",
            values.get_ref().len()
        )));
    };
    let log = p.log.as_ref().is_some_and(|l| *l.get_ref());
    if kind == "integer" {
        let (Some(min), Some(max)) = (lo.as_integer(), hi.as_integer()) else {
            return Err(bad(format!(
                "an integer range takes integers: [{lo}, {hi}] (use real = [...] for fractions)"
            )));
        };
        if let Some(d) = &p.digits {
            return Err(source.bad(
                d,
                format!("parameters.{name}.digits"),
                "digits applies to real ranges; an integer range holds whole numbers",
            ));
        }
        check_bounds(min as f64, max as f64, log).map_err(|e| bad(e.to_string()))?;
        for v in [min, max] {
            check_level(name, &super::Level::Int(v), &BTreeMap::new())
                .map_err(|m| bad(format!("{v}: {m}")))?;
        }
        return Ok(Domain::Integer { min, max, log });
    }
    let num = |v: &toml::Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    let (Some(min), Some(max)) = (num(lo), num(hi)) else {
        return Err(bad(format!("a real range takes numbers: [{lo}, {hi}]")));
    };
    if super::BUILTIN_FACTORS.contains(&name) {
        return Err(bad(format!(
            "{name} is a built-in factor of whole numbers: use integer = [{}, {}] or a list",
            min.ceil(),
            max.floor()
        )));
    }
    check_bounds(min, max, log).map_err(|e| bad(e.to_string()))?;
    let digits = match &p.digits {
        None => DEFAULT_DIGITS,
        Some(d) if (1..=MAX_DIGITS).contains(d.get_ref()) => *d.get_ref(),
        Some(d) => {
            return Err(source.bad(
                d,
                format!("parameters.{name}.digits"),
                format!("must be 1 to {MAX_DIGITS} (significant digits a value keeps)"),
            ));
        }
    };
    Ok(Domain::Real {
        min,
        max,
        log,
        digits,
    })
}

/// A range's bounds: finite, min ≤ max, above 0 on a log scale.
fn check_bounds(min: f64, max: f64, log: bool) -> std::result::Result<(), BadBounds> {
    if !min.is_finite() || !max.is_finite() {
        return Err(BadBounds::NotFinite);
    }
    if min > max {
        return Err(BadBounds::Reversed { min, max });
    }
    if log && min <= 0.0 {
        return Err(BadBounds::LogThroughZero { min, max });
    }
    Ok(())
}

/// Why a range's bounds are refused ([`check_bounds`]).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub(super) enum BadBounds {
    /// A bound is infinite or not a number.
    #[error("the bounds must be finite numbers")]
    NotFinite,
    /// The minimum is above the maximum.
    #[error("min {min} is above max {max}: write the range as [{max}, {min}]")]
    Reversed {
        /// The range's first bound.
        min: f64,
        /// The range's second bound.
        max: f64,
    },
    /// A log scale over a range that reaches 0 or below.
    #[error(
        "a log scale needs a range above 0, and [{min}, {max}] reaches {}: start it above 0 (e.g. [1, {max}]) or drop log = true",
        reach(*.min)
    )]
    LogThroughZero {
        /// The range's lower bound (0 or below).
        min: f64,
        /// The range's upper bound.
        max: f64,
    },
}

/// How far a log range's lower bound `min` (at most 0) reaches, in words.
fn reach(min: f64) -> &'static str {
    if min == 0.0 { "0" } else { "below 0" }
}

/// Every parameter's condition names parameters of the study, by their types, none its own
/// parameter, and no cycle: errors at the condition's line.
pub(super) fn check_conditions(
    source: &Source,
    table: &BTreeMap<String, Spanned<RawParam>>,
    factors: &[Factor],
) -> Result<()> {
    let kinds = super::space::kinds(factors);
    let at = |name: &str| table.get(name).and_then(|p| p.get_ref().when.as_ref());
    for f in factors {
        let (Some(w), Some(span)) = (&f.when, at(&f.name)) else {
            continue;
        };
        let field = format!("parameters.{}.when", f.name);
        if w.names().contains(&f.name) {
            return Err(source.bad(
                span,
                field,
                format!(
                    "{}'s condition names {} itself: a condition is on other parameters",
                    f.name, f.name
                ),
            ));
        }
        w.check(&kinds).map_err(|m| source.bad(span, &field, m))?;
    }
    if let Err(i) = super::space::condition_order(factors) {
        let f = &factors[i];
        if let Some(span) = at(&f.name) {
            return Err(source.bad(
                span,
                format!("parameters.{}.when", f.name),
                format!(
                    "the conditions of {} and the parameters it names form a cycle: each waits for another's value; make one of them unconditional",
                    f.name
                ),
            ));
        }
    }
    Ok(())
}
