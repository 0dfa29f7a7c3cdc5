//! The sampling models of an iterated search (irace's, López-Ibáñez et al. 2016, §3.2–3.3):
//! each elite configuration has a model of its own, one entry per parameter — a spread for
//! numbers and ordered levels, sampled from a normal truncated to the domain and centred on
//! the elite's value (on a log scale for `log` ranges), and a probability for each level of a
//! categorical parameter. After each race the spreads shrink by (1 / N_new)^(1 / N_param),
//! and each elite's probabilities move toward its own level by (j − 1) / N_iter, capped at
//! 0.2^(1 / N_param) (irace's elitist cap). A new configuration picks a parent elite by rank
//! and takes each parameter from the parent's model; a parameter the parent leaves inactive
//! is drawn uniformly. Draws that are forbidden, cannot run here or repeat a configuration
//! already raced are drawn again; repeats mean a model has collapsed, and trigger irace's
//! soft restart of the parents that made them (once per iteration).

use std::collections::{BTreeMap, BTreeSet};

use perfpilot_stats::WeightedChoice;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::spec::space::{real_value, uniform};
use crate::spec::{Config, Domain, Factor, Level, Space};
use crate::stats::Rng;

mod model;

/// Draws per configuration wanted before sampling gives up (irace tries 100 times).
const DRAWS_PER_CONFIGURATION: usize = 100;

/// The most candidates a model's proposal scores: the whole space when it holds no more,
/// else as many draws.
const CANDIDATES: usize = 5000;

/// One parameter's entry in an elite's model.
#[derive(Clone, Debug, PartialEq)]
enum Param {
    /// The standard deviation of the truncated normal, in the domain's units (log units for
    /// `log` ranges, positions for ordinal levels).
    Spread(f64),
    /// The probability of each level (categorical).
    Probs(Vec<f64>),
}

/// Why draws were drawn again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Redrawn {
    /// Draws a `search.forbidden` rule forbade.
    pub forbidden: usize,
    /// Draws this machine cannot run (their layout, or their file system).
    pub cannot_run: usize,
    /// Draws that repeated a configuration raced before or drawn already.
    pub repeated: usize,
    /// One reason a draw could not run here, as an example.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

/// One parameter's sampling distribution over the elites, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamSpread {
    /// The parameter.
    pub parameter: String,
    /// The distribution in words: the spread as a share of the range and the elites' values,
    /// or the likeliest levels with their probabilities.
    pub spread: String,
}

/// The elites' models and the draws made from them.
pub(crate) struct Sampler<'a> {
    space: &'a Space<'a>,
    /// Varying parameters (irace's N_param, `nbVariable`).
    nvar: f64,
    /// Each elite's model, by key.
    models: BTreeMap<String, Vec<Param>>,
    /// The model each configuration drawn in the current iteration was drawn from (its
    /// parent's), which it takes over should it become an elite.
    inherited: BTreeMap<String, Vec<Param>>,
}

/// What one iteration's draws gave.
pub(crate) struct Draws {
    /// The new configurations.
    pub configs: Vec<Config>,
    /// Draws made again, and why.
    pub redrawn: Redrawn,
    /// Whether the models were soft-restarted.
    pub restarted: bool,
}

impl<'a> Sampler<'a> {
    /// A sampler over `space` with `nvar` varying parameters.
    pub(crate) fn new(space: &'a Space<'a>, nvar: usize) -> Sampler<'a> {
        Sampler {
            space,
            nvar: nvar.max(1) as f64,
            models: BTreeMap::new(),
            inherited: BTreeMap::new(),
        }
    }

    fn factors(&self) -> &'a [Factor] {
        self.space.factors()
    }

    /// The first model: uniform probabilities, spreads of half the range.
    fn initial(&self) -> Vec<Param> {
        self.factors().iter().map(|f| initial(&f.domain)).collect()
    }

    /// The first iteration's configurations: `given` (the baseline and `search.initial`), then
    /// uniform draws up to `n` in all.
    pub(crate) fn first(
        &mut self,
        given: &[Config],
        n: usize,
        runnable: &dyn Fn(&Config) -> Option<String>,
        seen: &mut BTreeSet<String>,
        rng: &mut Rng,
    ) -> Draws {
        let mut configs: Vec<Config> = Vec::new();
        for c in given {
            if seen.insert(c.key()) {
                self.inherited.insert(c.key(), self.initial());
                configs.push(c.clone());
            }
        }
        let mut redrawn = Redrawn::default();
        let mut tries = DRAWS_PER_CONFIGURATION * n.max(1);
        while configs.len() < n && tries > 0 {
            tries -= 1;
            let c = self.space.draw_uniform(rng);
            if self.accept(&c, runnable, seen, &mut redrawn) {
                self.inherited.insert(c.key(), self.initial());
                configs.push(c);
            }
        }
        Draws {
            configs,
            redrawn,
            restarted: false,
        }
    }

    /// Whether draw `c` may race: allowed, runnable, new (then it is `seen`).
    fn accept(
        &self,
        c: &Config,
        runnable: &dyn Fn(&Config) -> Option<String>,
        seen: &mut BTreeSet<String>,
        redrawn: &mut Redrawn,
    ) -> bool {
        if self.space.forbidding(c).is_some() {
            redrawn.forbidden += 1;
            return false;
        }
        if let Some(why) = runnable(c) {
            redrawn.cannot_run += 1;
            redrawn
                .example
                .get_or_insert_with(|| format!("{}: {why}", c.key()));
            return false;
        }
        if !seen.insert(c.key()) {
            redrawn.repeated += 1;
            return false;
        }
        true
    }

    /// Keeps `elites` (best first) as the models to sample from: an elite keeps its own model,
    /// a new one takes over the model it was drawn from.
    pub(crate) fn keep(&mut self, elites: &[Config]) {
        let mut next = BTreeMap::new();
        for e in elites {
            let k = e.key();
            let m = self
                .models
                .remove(&k)
                .or_else(|| self.inherited.remove(&k))
                .unwrap_or_else(|| self.initial());
            next.insert(k, m);
        }
        self.models = next;
        self.inherited.clear();
    }

    /// irace's update before iteration `j` of `n_iter` that draws `n_new` configurations:
    /// spreads shrink by (1 / n_new)^(1 / N_param); each elite's probabilities move toward its
    /// own level by (j − 1) / n_iter, capped at 0.2^(1 / N_param).
    pub(crate) fn update(&mut self, elites: &[Config], j: usize, n_iter: usize, n_new: usize) {
        let step = (j as f64 - 1.0) / n_iter.max(j) as f64;
        let shrink = (1.0 / n_new.max(1) as f64).powf(1.0 / self.nvar);
        let cap = 0.2f64.powf(1.0 / self.nvar);
        let factors = self.factors();
        for e in elites {
            let Some(model) = self.models.get_mut(&e.key()) else {
                continue;
            };
            for (f, p) in factors.iter().zip(model.iter_mut()) {
                match p {
                    Param::Spread(s) => *s *= shrink,
                    Param::Probs(w) => {
                        let levels = f.levels().unwrap_or_default();
                        let Some(v) = e
                            .get(&f.name)
                            .and_then(|l| levels.iter().position(|x| x == l))
                        else {
                            continue;
                        };
                        for x in w.iter_mut() {
                            *x *= 1.0 - step;
                        }
                        w[v] += step;
                        normalize(w);
                        for x in w.iter_mut() {
                            *x = x.min(cap);
                        }
                        normalize(w);
                    }
                }
            }
        }
    }

    /// irace's soft restart of the model of elite `key` in an iteration of `n` configurations:
    /// probabilities flattened (0.9·p + 0.1·max p), spreads widened back (to two iterations
    /// ago, at most the second iteration's).
    fn restart(&mut self, key: &str, n: usize) {
        let initial = self.initial();
        let n = n.max(1) as f64;
        let Some(model) = self.models.get_mut(key) else {
            return;
        };
        for (p, first) in model.iter_mut().zip(initial) {
            match (p, first) {
                (Param::Probs(w), _) => {
                    let max = w.iter().copied().fold(0.0, f64::max);
                    for x in w.iter_mut() {
                        *x = 0.9 * *x + 0.1 * max;
                    }
                    normalize(w);
                }
                (Param::Spread(s), Param::Spread(s0)) => {
                    *s = (*s * n.powf(2.0 / self.nvar)).min(s0 * (1.0 / n).powf(1.0 / self.nvar));
                }
                _ => {}
            }
        }
    }

    /// `n` new configurations drawn around `elites` (best first; parent chosen with weight
    /// N − rank + 1), each allowed, runnable and never raced; `n_iteration` is the
    /// iteration's configurations in all (the soft restart's scale).
    pub(crate) fn around(
        &mut self,
        elites: &[Config],
        n: usize,
        n_iteration: usize,
        runnable: &dyn Fn(&Config) -> Option<String>,
        seen: &mut BTreeSet<String>,
        rng: &mut Rng,
    ) -> Draws {
        let weights: Vec<f64> = (0..elites.len())
            .map(|r| (elites.len() - r) as f64)
            .collect();
        let mut redrawn = Redrawn::default();
        let mut configs = Vec::new();
        let Some(pick) = WeightedChoice::new(&weights) else {
            return Draws {
                configs,
                redrawn,
                restarted: false,
            };
        };
        let mut restarted = false;
        let mut repeaters: Vec<String> = Vec::new();
        let mut tries = DRAWS_PER_CONFIGURATION * n.max(1);
        let mut first_pass = n;
        while configs.len() < n && tries > 0 {
            tries -= 1;
            let parent = &elites[pick.draw(rng)];
            let c = self.draw_near(parent, rng);
            let repeats = redrawn.repeated;
            if self.accept(&c, runnable, seen, &mut redrawn) {
                let model = self.models.get(&parent.key()).cloned();
                self.inherited
                    .insert(c.key(), model.unwrap_or_else(|| self.initial()));
                configs.push(c);
            } else if redrawn.repeated > repeats && !repeaters.contains(&parent.key()) {
                repeaters.push(parent.key());
            }
            first_pass = first_pass.saturating_sub(1);
            // After as many draws as configurations wanted: repeats mean collapsed models.
            if first_pass == 0 && !restarted && !repeaters.is_empty() {
                for k in &repeaters {
                    self.restart(k, n_iteration);
                }
                restarted = true;
            }
        }
        Draws {
            configs,
            redrawn,
            restarted,
        }
    }

    /// `n` new configurations proposed by a model of the surface fitted to `observed` (every
    /// configuration raced, with its effect and that effect's variance, [`model`]): the space's configurations when it can be listed (at
    /// most [`CANDIDATES`]), else as many draws, half uniform and half around `elites`, scored
    /// by expected improvement; each allowed, runnable and never raced. A new configuration
    /// takes over the best elite's sampling model should it become an elite. Empty when no
    /// model can be fitted.
    pub(crate) fn proposed(
        &mut self,
        observed: &[(Config, f64, f64)],
        elites: &[Config],
        n: usize,
        runnable: &dyn Fn(&Config) -> Option<String>,
        seen: &mut BTreeSet<String>,
        rng: &mut Rng,
    ) -> Vec<Config> {
        let obs = self.observed(observed);
        let groups = model::groups(self.factors());
        let Some(fitted) = model::Model::fit(&obs, &groups) else {
            return Vec::new();
        };
        let incumbent = (obs.iter())
            .map(|o| fitted.predict(&o.x).0)
            .fold(f64::NEG_INFINITY, f64::max);
        let pool = match self.space.enumerate(CANDIDATES) {
            Some(all) => all,
            None => (0..CANDIDATES)
                .map(|i| match elites.get(i % (2 * elites.len().max(1))) {
                    Some(parent) => self.draw_near(parent, rng),
                    None => self.space.draw_uniform(rng),
                })
                .collect(),
        };
        let mut keys = BTreeSet::new();
        let candidates: Vec<Config> = pool
            .into_iter()
            .filter(|c| !seen.contains(&c.key()) && keys.insert(c.key()))
            .filter(|c| self.space.forbidding(c).is_none() && runnable(c).is_none())
            .collect();
        let xs: Vec<Vec<f64>> = (candidates.iter())
            .map(|c| model::encode(self.factors(), c))
            .collect();
        let parent = elites
            .first()
            .and_then(|e| self.models.get(&e.key()).cloned());
        let mut out = Vec::new();
        for i in fitted.propose(&xs, n, incumbent) {
            let c = candidates[i].clone();
            seen.insert(c.key());
            let m = parent.clone().unwrap_or_else(|| self.initial());
            self.inherited.insert(c.key(), m);
            out.push(c);
        }
        out
    }

    /// `observed` as the model's observations.
    fn observed(&self, observed: &[(Config, f64, f64)]) -> Vec<model::Observed> {
        observed
            .iter()
            .map(|(c, y, var)| model::Observed {
                x: model::encode(self.factors(), c),
                y: *y,
                var: *var,
            })
            .collect()
    }

    /// One configuration drawn from `parent`'s model, parameter by parameter in the space's
    /// order (not yet checked).
    fn draw_near(&self, parent: &Config, rng: &mut Rng) -> Config {
        let model = self.models.get(&parent.key());
        let factors = self.factors();
        self.space.build(|i, _| {
            let f = &factors[i];
            match (model.map(|m| &m[i]), parent.get(&f.name)) {
                (Some(p), Some(v)) => near(&f.domain, v, p, rng),
                // A parameter its parent leaves inactive: uniform (irace).
                _ => uniform(&f.domain, rng),
            }
        })
    }

    /// Each parameter's distribution over `elites` (weighted as parents are chosen), in words.
    pub(crate) fn describe(&self, elites: &[Config]) -> Vec<ParamSpread> {
        let n = elites.len();
        let total: f64 = (1..=n).map(|r| r as f64).sum();
        let initial = self.initial();
        self.factors()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.domain.count().is_none_or(|c| c > 1))
            .map(|(i, f)| {
                let mut avg_spread = 0.0;
                let mut avg_probs: Vec<f64> = Vec::new();
                for (r, e) in elites.iter().enumerate() {
                    let w = (n - r) as f64 / total;
                    match self.models.get(&e.key()).map(|m| &m[i]) {
                        Some(Param::Spread(s)) => avg_spread += w * s,
                        Some(Param::Probs(p)) => {
                            avg_probs.resize(p.len(), 0.0);
                            for (a, x) in avg_probs.iter_mut().zip(p) {
                                *a += w * x;
                            }
                        }
                        None => {}
                    }
                }
                let spread = match &initial[i] {
                    Param::Spread(s0) => {
                        let values: Vec<String> = elites
                            .iter()
                            .map(|e| e.get(&f.name).map_or("–".into(), Level::to_string))
                            .collect();
                        format!(
                            "σ {:.0} % of the range, around {}",
                            100.0 * avg_spread / (2.0 * s0).max(f64::MIN_POSITIVE),
                            values.join(", ")
                        )
                    }
                    Param::Probs(_) => {
                        let levels = f.levels().unwrap_or_default();
                        let mut top: Vec<(usize, f64)> =
                            avg_probs.iter().copied().enumerate().collect();
                        top.sort_by(|a, b| b.1.total_cmp(&a.1));
                        top.iter()
                            .take(3)
                            .map(|(j, p)| format!("{} {:.0} %", levels[*j], p * 100.0))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                };
                ParamSpread {
                    parameter: f.name.clone(),
                    spread,
                }
            })
            .collect()
    }
}

/// The first model of a domain: uniform probabilities, or half the range as the spread.
fn initial(d: &Domain) -> Param {
    match d {
        Domain::Categorical(l) => Param::Probs(vec![1.0 / l.len() as f64; l.len()]),
        Domain::Ordinal(l) => Param::Spread((l.len() as f64 - 1.0) / 2.0),
        Domain::Integer { min, max, log } => {
            let (a, b) = transformed(*min as f64, *max as f64 + 1.0, *log);
            Param::Spread((b - a) / 2.0)
        }
        Domain::Real { min, max, log, .. } => {
            let (a, b) = transformed(*min, *max, *log);
            Param::Spread((b - a) / 2.0)
        }
    }
}

/// A range's bounds in sampling units (logarithms on a log scale).
fn transformed(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if log { (lo.ln(), hi.ln()) } else { (lo, hi) }
}

/// A value of `d` drawn near `v` with `p` (a truncated normal centred on it, or the level
/// probabilities).
fn near(d: &Domain, v: &Level, p: &Param, rng: &mut Rng) -> Level {
    match (d, p) {
        (Domain::Categorical(l), Param::Probs(w)) => match WeightedChoice::new(w) {
            Some(c) => l[c.draw(rng)].clone(),
            None => uniform(d, rng),
        },
        (Domain::Ordinal(l), Param::Spread(s)) => {
            let Some(at) = l.iter().position(|x| x == v) else {
                return uniform(d, rng);
            };
            let x = truncated_normal(at as f64 + 0.5, *s, 0.0, l.len() as f64, rng);
            l[(x.floor() as usize).min(l.len() - 1)].clone()
        }
        (Domain::Integer { min, max, log }, Param::Spread(s)) => {
            let Level::Int(v) = v else {
                return uniform(d, rng);
            };
            // Integers are the floors of a real in [min, max + 1), centred on v + 0.5.
            let (a, b) = transformed(*min as f64, *max as f64 + 1.0, *log);
            let (c, _) = transformed(*v as f64 + 0.5, 0.0, *log);
            let x = truncated_normal(c, *s, a, b, rng);
            let x = if *log { x.exp() } else { x };
            Level::Int((x.floor() as i64).clamp(*min, *max))
        }
        (
            Domain::Real {
                min,
                max,
                log,
                digits,
            },
            Param::Spread(s),
        ) => {
            let v = match v {
                Level::Float(x) => *x,
                Level::Int(i) => *i as f64,
                _ => return uniform(d, rng),
            };
            let (a, b) = transformed(*min, *max, *log);
            let (c, _) = transformed(v, 0.0, *log);
            let x = truncated_normal(c, *s, a, b, rng);
            let x = if *log { x.exp() } else { x };
            Level::Float(real_value(x, *min, *max, *digits))
        }
        _ => uniform(d, rng),
    }
}

/// A draw from the normal N(`mean`, `sd`) truncated to [lo, hi], by inverting its CDF (on the
/// side of the mean, for precision in the tails); the nearer bound when the interval holds no
/// probability the doubles can see.
pub(crate) fn truncated_normal(mean: f64, sd: f64, lo: f64, hi: f64, rng: &mut Rng) -> f64 {
    if !(sd > 0.0 && sd.is_finite()) || lo >= hi {
        return mean.clamp(lo, hi);
    }
    let Ok(n) = Normal::new(0.0, 1.0) else {
        return mean.clamp(lo, hi);
    };
    let (a, b) = ((lo - mean) / sd, (hi - mean) / sd);
    // Mirror an interval above the mean, so that its CDF values are far from 1.
    let (a2, b2, flip) = if a > 0.0 {
        (-b, -a, true)
    } else {
        (a, b, false)
    };
    let (pa, pb) = (n.cdf(a2), n.cdf(b2));
    let z = if pb > pa {
        let u = pa + rng.next_f64() * (pb - pa);
        n.inverse_cdf(u.clamp(pa, pb)).clamp(a2, b2)
    } else {
        // No visible probability: the bound nearer the mean.
        b2
    };
    let z = if flip { -z } else { z };
    (mean + sd * z).clamp(lo, hi)
}

/// Scales `w` to sum to 1 (uniform when it sums to nothing).
fn normalize(w: &mut [f64]) {
    let sum: f64 = w.iter().sum();
    if sum > 0.0 && sum.is_finite() {
        for x in w.iter_mut() {
            *x /= sum;
        }
    } else {
        let n = w.len().max(1) as f64;
        for x in w.iter_mut() {
            *x = 1.0 / n;
        }
    }
}

#[cfg(test)]
mod tests;
