//! The parameter space: the parameters in an order where every condition's parameters come
//! first, which parameters a configuration holds (a condition false leaves its parameter
//! out), the forbidden rules, whether a configuration belongs to the space, every
//! configuration of a space small enough to list, its size, uniform draws, and the
//! configurations a table names (`run.baseline`, `scaling.config`, `search.initial`).

use std::collections::BTreeMap;

use super::expr::{Expr, Kind, level_kind};
use super::factor::{Config, Domain, Factor, Level, round_digits};
use crate::stats::Rng;

/// Configurations a space may hold to be listed (`study validate` counts them exactly, a grid
/// runs them); beyond it a size is estimated and a grid is refused.
pub const ENUMERATE_LIMIT: usize = 200_000;

/// Uniform draws behind an estimated share of allowed configurations.
pub const SHARE_DRAWS: usize = 20_000;

/// Why a configuration is not one of a space's ([`Space::check`]); the message follows the
/// configuration's key ("`key` …").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotInSpace {
    /// It names a parameter the study does not have.
    #[error("{0:?} is not a parameter of this study")]
    Unknown(String),
    /// A parameter's value lies outside its domain.
    #[error("{name} = {value} is outside its domain ({domain})")]
    OutsideDomain {
        /// The parameter.
        name: String,
        /// The value given, as the study file writes it.
        value: String,
        /// The domain in words.
        domain: String,
    },
    /// An active parameter has no value.
    #[error("gives no value of {0}")]
    Missing(String),
    /// A parameter whose condition is false has a value.
    #[error("sets {name} but its condition `{condition}` is false here: leave it out")]
    Inactive {
        /// The parameter.
        name: String,
        /// Its condition (`when`).
        condition: String,
    },
    /// A `search.forbidden` rule holds for it.
    #[error("is forbidden by search.forbidden rule `{0}`")]
    Forbidden(String),
}

/// How many configurations a space holds.
#[derive(Clone, Debug, PartialEq)]
pub enum SpaceSize {
    /// Every allowed configuration counted.
    Exact(u128),
    /// `total` configurations before the forbidden rules (exact, or `upper` bound when the
    /// conditions could not be followed), of which a share `allowed` of [`SHARE_DRAWS`]
    /// uniform draws is allowed.
    About {
        /// Configurations before the forbidden rules.
        total: u128,
        /// Whether `total` ignores the conditions (an upper bound).
        upper: bool,
        /// The allowed share among the draws.
        allowed: f64,
    },
    /// Real parameters make the space continuous.
    Unbounded {
        /// The real parameters.
        reals: Vec<String>,
    },
}

impl SpaceSize {
    /// The configurations it holds, estimated where it is not exact (`None`: unbounded).
    pub fn estimate(&self) -> Option<f64> {
        match self {
            SpaceSize::Exact(n) => Some(*n as f64),
            SpaceSize::About { total, allowed, .. } => Some(*total as f64 * allowed),
            SpaceSize::Unbounded { .. } => None,
        }
    }
}

impl std::fmt::Display for SpaceSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpaceSize::Exact(n) => write!(f, "{} configurations", group(*n)),
            SpaceSize::About {
                total,
                upper,
                allowed,
            } => write!(
                f,
                "about {} configurations ({}{} before the forbidden rules, {:.1} % of {SHARE_DRAWS} uniform draws allowed)",
                group((*total as f64 * allowed).round() as u128),
                if *upper { "at most " } else { "" },
                group(*total),
                allowed * 100.0
            ),
            SpaceSize::Unbounded { reals } => write!(
                f,
                "unbounded: real parameter(s) {} (values kept to their digits)",
                reals.join(", ")
            ),
        }
    }
}

/// `n` with thousands separators (`12,288`).
fn group(n: u128) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The types of the parameters, as expressions see them.
pub(super) fn kinds(factors: &[Factor]) -> BTreeMap<String, Kind> {
    factors
        .iter()
        .map(|f| {
            let k = match &f.domain {
                Domain::Integer { .. } | Domain::Real { .. } => Kind::Number,
                Domain::Categorical(l) | Domain::Ordinal(l) => {
                    l.first().map_or(Kind::Text, level_kind)
                }
            };
            (f.name.clone(), k)
        })
        .collect()
}

/// An order of `factors` (indices) in which each condition's parameters come before the
/// parameter it conditions; `Err(i)` names a parameter on a cycle of conditions.
pub(super) fn condition_order(factors: &[Factor]) -> Result<Vec<usize>, usize> {
    let index: BTreeMap<&str, usize> = factors
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name.as_str(), i))
        .collect();
    let deps: Vec<Vec<usize>> = factors
        .iter()
        .map(|f| {
            f.when.as_ref().map_or(Vec::new(), |w| {
                w.names()
                    .iter()
                    .filter_map(|n| index.get(n.as_str()).copied())
                    .collect()
            })
        })
        .collect();
    let mut order = Vec::new();
    let mut placed = vec![false; factors.len()];
    while order.len() < factors.len() {
        // The first parameter, in the file's order, whose conditions' parameters are placed.
        let next = (0..factors.len()).find(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]));
        match next {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => return Err((0..factors.len()).find(|&i| !placed[i]).unwrap_or(0)),
        }
    }
    Ok(order)
}

/// A study's parameter space.
#[derive(Clone, Debug)]
pub struct Space<'a> {
    factors: &'a [Factor],
    forbidden: &'a [Expr],
    order: Vec<usize>,
}

impl<'a> Space<'a> {
    /// The space of `factors` under the `forbidden` rules (conditions already checked for
    /// cycles; should one remain, the file's order is used).
    pub fn new(factors: &'a [Factor], forbidden: &'a [Expr]) -> Space<'a> {
        let order = condition_order(factors).unwrap_or_else(|_| (0..factors.len()).collect());
        Space {
            factors,
            forbidden,
            order,
        }
    }

    /// The parameters, in the file's order.
    pub fn factors(&self) -> &'a [Factor] {
        self.factors
    }

    /// The parameters' indices in sampling order (conditions' parameters first).
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.factors.iter().position(|f| f.name == name)
    }

    /// Whether parameter `i` has a value given the values chosen so far (`values` by index).
    pub fn active(&self, i: usize, values: &[Option<Level>]) -> bool {
        match &self.factors[i].when {
            None => true,
            Some(e) => e.holds(|n| self.index(n).and_then(|j| values[j].as_ref())),
        }
    }

    /// A configuration built in sampling order: `choose(i, values so far)` gives each active
    /// parameter's level.
    pub fn build(&self, mut choose: impl FnMut(usize, &[Option<Level>]) -> Level) -> Config {
        let mut values: Vec<Option<Level>> = vec![None; self.factors.len()];
        for &i in &self.order {
            if self.active(i, &values) {
                values[i] = Some(choose(i, &values));
            }
        }
        self.config(values)
    }

    fn config(&self, values: Vec<Option<Level>>) -> Config {
        Config(
            self.factors
                .iter()
                .zip(values)
                .filter_map(|(f, v)| Some((f.name.clone(), v?)))
                .collect(),
        )
    }

    /// The first forbidden rule `c` breaks, if any.
    pub fn forbidding(&self, c: &Config) -> Option<&'a Expr> {
        self.forbidden.iter().find(|e| e.holds(|n| c.get(n)))
    }

    /// Whether `c` is a configuration of the space: each active parameter has a value of its
    /// domain, each inactive one none, no other name, no forbidden rule broken. The error
    /// says what is wrong.
    pub fn check(&self, c: &Config) -> Result<(), NotInSpace> {
        if let Some((n, _)) = c.0.iter().find(|(n, _)| self.index(n).is_none()) {
            return Err(NotInSpace::Unknown(n.clone()));
        }
        let mut values: Vec<Option<Level>> = vec![None; self.factors.len()];
        for &i in &self.order {
            let f = &self.factors[i];
            let given = c.get(&f.name);
            match (self.active(i, &values), given) {
                (true, Some(l)) if f.domain.contains(l) => values[i] = Some(l.clone()),
                (true, Some(l)) => {
                    return Err(NotInSpace::OutsideDomain {
                        name: f.name.clone(),
                        value: l.repr(),
                        domain: f.domain.describe(),
                    });
                }
                (true, None) => return Err(NotInSpace::Missing(f.name.clone())),
                (false, Some(_)) => {
                    return Err(NotInSpace::Inactive {
                        name: f.name.clone(),
                        condition: f.when.as_ref().map(Expr::to_string).unwrap_or_default(),
                    });
                }
                (false, None) => {}
            }
        }
        match self.forbidding(c) {
            Some(rule) => Err(NotInSpace::Forbidden(rule.to_string())),
            None => Ok(()),
        }
    }

    /// An upper bound on the configurations: the product of the domains' sizes (`None`: a
    /// real parameter).
    fn upper_bound(&self) -> Option<u128> {
        self.factors
            .iter()
            .try_fold(1u128, |acc, f| Some(acc.saturating_mul(f.domain.count()?)))
    }

    /// Every configuration, in a stable order (the file's last parameter varying fastest, as
    /// grids always ran), forbidden ones left out; `None` when the space holds a real
    /// parameter or its domains' product is above `limit`.
    pub fn enumerate(&self, limit: usize) -> Option<Vec<Config>> {
        if self.upper_bound()? > limit as u128 {
            return None;
        }
        let values: Vec<Vec<Level>> = self
            .factors
            .iter()
            .map(|f| f.domain.values(limit))
            .collect::<Option<_>>()?;
        let mut out = Vec::new();
        // The file's order, each parameter's levels in turn; an inactive parameter is skipped.
        // Conditions name earlier parameters in sampling order, which is not the file's: a
        // configuration is checked once complete.
        let mut partial: Vec<Option<Level>> = vec![None; self.factors.len()];
        self.walk(0, &values, &mut partial, &mut out);
        Some(out)
    }

    fn walk(
        &self,
        at: usize,
        values: &[Vec<Level>],
        partial: &mut Vec<Option<Level>>,
        out: &mut Vec<Config>,
    ) {
        if at == self.factors.len() {
            // Keep the assignment only where each parameter's activity agrees with its
            // condition over the complete assignment.
            let ok =
                (0..self.factors.len()).all(|i| self.active(i, partial) == partial[i].is_some());
            if ok {
                let c = self.config(partial.clone());
                if self.forbidding(&c).is_none() {
                    out.push(c);
                }
            }
            return;
        }
        let conditional = self.factors[at].when.is_some();
        for l in &values[at] {
            partial[at] = Some(l.clone());
            self.walk(at + 1, values, partial, out);
        }
        if conditional {
            partial[at] = None;
            self.walk(at + 1, values, partial, out);
        }
        partial[at] = None;
    }

    /// How many configurations the space holds: counted when it can be listed, estimated
    /// otherwise (the conditions followed, the forbidden rules' share from uniform draws).
    pub fn size(&self) -> SpaceSize {
        let reals: Vec<String> = self
            .factors
            .iter()
            .filter(|f| matches!(f.domain, Domain::Real { .. }))
            .map(|f| f.name.clone())
            .collect();
        if !reals.is_empty() {
            return SpaceSize::Unbounded { reals };
        }
        if let Some(all) = self.enumerate(ENUMERATE_LIMIT) {
            return SpaceSize::Exact(all.len() as u128);
        }
        let (total, upper) = match self.count_unforbidden() {
            Some(n) => (n, false),
            None => (self.upper_bound().unwrap_or(u128::MAX), true),
        };
        let mut rng = Rng::new(SIZE_SEED);
        let allowed = (0..SHARE_DRAWS)
            .filter(|_| self.forbidding(&self.draw_uniform(&mut rng)).is_none())
            .count();
        if self.forbidden.is_empty() && !upper {
            return SpaceSize::Exact(total);
        }
        SpaceSize::About {
            total,
            upper,
            allowed: allowed as f64 / SHARE_DRAWS as f64,
        }
    }

    /// The configurations before the forbidden rules, following the conditions: the
    /// parameters conditions name are walked, the others multiply. `None` when those
    /// parameters cannot be listed.
    fn count_unforbidden(&self) -> Option<u128> {
        let named: Vec<bool> = (0..self.factors.len())
            .map(|i| {
                self.factors.iter().any(|f| {
                    f.when
                        .as_ref()
                        .is_some_and(|w| w.names().contains(&self.factors[i].name))
                })
            })
            .collect();
        let values: Vec<Option<Vec<Level>>> = self
            .factors
            .iter()
            .zip(&named)
            .map(|(f, n)| if *n { f.domain.values(10_000) } else { None })
            .collect();
        if named.iter().zip(&values).any(|(n, v)| *n && v.is_none()) {
            return None;
        }
        let mut partial: Vec<Option<Level>> = vec![None; self.factors.len()];
        let mut budget = 1_000_000usize;
        self.count_from(0, &values, &mut partial, &mut budget)
    }

    /// Counts completions from position `at` of the sampling order.
    fn count_from(
        &self,
        at: usize,
        values: &[Option<Vec<Level>>],
        partial: &mut Vec<Option<Level>>,
        budget: &mut usize,
    ) -> Option<u128> {
        *budget = budget.checked_sub(1)?;
        let Some(&i) = self.order.get(at) else {
            return Some(1);
        };
        if !self.active(i, partial) {
            return self.count_from(at + 1, values, partial, budget);
        }
        match &values[i] {
            Some(levels) => {
                let mut n = 0u128;
                for l in levels {
                    partial[i] = Some(l.clone());
                    n = n.saturating_add(self.count_from(at + 1, values, partial, budget)?);
                }
                partial[i] = None;
                Some(n)
            }
            None => {
                let k = self.factors[i].domain.count()?;
                Some(k.saturating_mul(self.count_from(at + 1, values, partial, budget)?))
            }
        }
    }

    /// A configuration drawn uniformly parameter by parameter (each active parameter's value
    /// uniform over its domain, on a log scale for `log` ranges), forbidden or not.
    pub fn draw_uniform(&self, rng: &mut Rng) -> Config {
        self.build(|i, _| uniform(&self.factors[i].domain, rng))
    }

    /// The configuration `table` names: each name an active parameter, each value of its
    /// domain; a parameter left out is filled as `fill` says (a range has no first level:
    /// without another configuration to take it from, an error). The error is `(name,
    /// message)`, the name `None` for the table as a whole.
    pub fn from_table<'c>(
        &self,
        table: &BTreeMap<String, Level>,
        fill: Fill<'c>,
    ) -> Result<Config, (Option<String>, String)> {
        for name in table.keys() {
            if self.index(name).is_none() {
                return Err((
                    Some(name.clone()),
                    format!("{name:?} is not a factor of this study"),
                ));
            }
        }
        let mut values: Vec<Option<Level>> = vec![None; self.factors.len()];
        for &i in &self.order {
            let f = &self.factors[i];
            let active = self.active(i, &values);
            match (active, table.get(&f.name)) {
                (true, Some(l)) => match f.domain.canonical(l) {
                    Some(c) => values[i] = Some(c),
                    None => {
                        let what = match f.domain.levels() {
                            Some(levels) => format!(
                                "is not one of the factor's levels ({})",
                                levels
                                    .iter()
                                    .map(Level::repr)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            None => format!("is outside its range ({})", f.domain.describe()),
                        };
                        return Err((Some(f.name.clone()), format!("{} {what}", l.repr())));
                    }
                },
                (true, None) => {
                    let from = |c: Option<&'c Config>| {
                        c.and_then(|c| c.get(&f.name))
                            .filter(|l| f.domain.contains(l))
                    };
                    let first = f.domain.levels().and_then(|l| l.first());
                    let lowest = lowest(&f.domain);
                    let fallback = match fill {
                        Fill::First => first,
                        Fill::FirstThen(c) => first.or_else(|| from(Some(c))),
                        Fill::From(c) => from(Some(c)).or(first),
                        Fill::Lowest(c) => from(Some(c)).or(first).or(lowest.as_ref()),
                    };
                    match fallback {
                        Some(l) => values[i] = Some(l.clone()),
                        None => {
                            return Err((
                                None,
                                format!(
                                    "give {} a value: a range ({}) has no first level to default to",
                                    f.name,
                                    f.domain.describe()
                                ),
                            ));
                        }
                    }
                }
                (false, Some(_)) => {
                    return Err((
                        Some(f.name.clone()),
                        format!(
                            "{} is inactive here: its condition `{}` is false; leave it out",
                            f.name,
                            f.when.as_ref().map(Expr::to_string).unwrap_or_default()
                        ),
                    ));
                }
                (false, None) => {}
            }
        }
        let c = self.config(values);
        match self.forbidding(&c) {
            Some(rule) => Err((
                None,
                format!("{c} is forbidden by search.forbidden rule `{rule}`"),
            )),
            None => Ok(c),
        }
    }
}

/// How [`Space::from_table`] fills the parameters a table leaves out.
#[derive(Clone, Copy, Debug)]
pub enum Fill<'c> {
    /// Each one's first level (`run.baseline`).
    First,
    /// Each one's first level, a range's level in this configuration (`scaling.config`, from
    /// the baseline).
    FirstThen(&'c Config),
    /// Each one's level in this configuration, else its first (`search.initial`, from the
    /// baseline).
    From(&'c Config),
    /// As `From`, and a range's lowest value where neither has one (the configurations
    /// `preflight` checks).
    Lowest(&'c Config),
}

/// A range's lowest value (`None`: a listed domain).
fn lowest(d: &Domain) -> Option<Level> {
    match d {
        Domain::Integer { min, .. } => Some(Level::Int(*min)),
        Domain::Real { min, .. } => Some(Level::Float(*min)),
        _ => None,
    }
}

/// A seed of its own for the draws behind an estimated size, so `validate` prints the same.
const SIZE_SEED: u64 = 0x5BACE;

/// A value drawn uniformly from `d` (on a log scale for `log` ranges).
pub fn uniform(d: &Domain, rng: &mut Rng) -> Level {
    match d {
        Domain::Categorical(l) | Domain::Ordinal(l) => l[rng.below(l.len())].clone(),
        Domain::Integer { min, max, log } => {
            if *log {
                // Uniform in log(min)..log(max + 1), floored: each decade alike.
                let (a, b) = ((*min as f64).ln(), (*max as f64 + 1.0).ln());
                let x = (a + rng.next_f64() * (b - a)).exp().floor() as i64;
                Level::Int(x.clamp(*min, *max))
            } else {
                let span = (*max as i128 - *min as i128 + 1) as u128;
                let k = (rng.next_u64() as u128 % span) as i128;
                Level::Int((*min as i128 + k) as i64)
            }
        }
        Domain::Real {
            min,
            max,
            log,
            digits,
        } => {
            let u = rng.next_f64();
            let x = if *log {
                (min.ln() + u * (max.ln() - min.ln())).exp()
            } else {
                min + u * (max - min)
            };
            Level::Float(real_value(x, *min, *max, *digits))
        }
    }
}

/// `x` kept to `digits` within [min, max]: rounded, and pulled back onto the range when the
/// rounding crossed a bound (a bound holds itself even when it has more digits).
pub fn real_value(x: f64, min: f64, max: f64, digits: u32) -> f64 {
    let r = round_digits(x.clamp(min, max), digits);
    if r > max {
        max
    } else if r < min {
        min
    } else {
        r
    }
}
