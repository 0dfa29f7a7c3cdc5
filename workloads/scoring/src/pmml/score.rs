//! Scoring: a [`Model`] applied to one [`Record`] of input values.

use std::collections::BTreeMap;

use super::{
    Combine, Expr, Function, Kind, Model, Norm, Op, Predicate, Prediction, Record, RegressionTable,
    ScoreError, Segment, TreeNode, Value,
};

fn eval_predicate(p: &Predicate, rec: &Record) -> Option<bool> {
    match p {
        Predicate::True => Some(true),
        Predicate::False => Some(false),
        Predicate::Simple { field, op, value } => {
            let v = rec.get(field);
            match op {
                Op::Missing => return Some(v.is_none()),
                Op::NotMissing => return Some(v.is_some()),
                _ => {}
            }
            let v = v?;
            let ord = match (v.as_f64(), value.trim().parse::<f64>()) {
                (Some(a), Ok(b)) => a.partial_cmp(&b)?,
                _ => v.as_string().as_str().cmp(value.as_str()),
            };
            use std::cmp::Ordering::*;
            Some(match op {
                Op::Eq => ord == Equal,
                Op::Ne => ord != Equal,
                Op::Lt => ord == Less,
                Op::Le => ord != Greater,
                Op::Gt => ord == Greater,
                Op::Ge => ord != Less,
                Op::Missing | Op::NotMissing => false,
            })
        }
        Predicate::Set {
            field,
            is_in,
            values,
        } => {
            let v = rec.get(field)?.as_string();
            Some(values.contains(&v) == *is_in)
        }
        Predicate::And(ps) => {
            let mut unknown = false;
            for p in ps {
                match eval_predicate(p, rec) {
                    Some(false) => return Some(false),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(true) }
        }
        Predicate::Or(ps) => {
            let mut unknown = false;
            for p in ps {
                match eval_predicate(p, rec) {
                    Some(true) => return Some(true),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(false) }
        }
        Predicate::Xor(ps) => {
            let mut acc = false;
            for p in ps {
                acc ^= eval_predicate(p, rec)?;
            }
            Some(acc)
        }
        Predicate::Surrogate(ps) => ps.iter().find_map(|p| eval_predicate(p, rec)),
    }
}

fn norm_link(norm: &Norm, y: f64) -> f64 {
    match norm {
        Norm::Logit => 1.0 / (1.0 + (-y).exp()),
        Norm::Exp => y.exp(),
        Norm::Cloglog => 1.0 - (-(y.exp())).exp(),
        Norm::Probit => 0.5 * (1.0 + erf(y / std::f64::consts::SQRT_2)),
        _ => y,
    }
}

/// Abramowitz–Stegun 7.1.26 (|error| < 1.5e-7), enough for probit links.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

impl Model {
    /// Scores one record of input values.
    pub fn score(&self, inputs: &Record) -> Result<Prediction, ScoreError> {
        let mut rec = inputs.clone();
        for (name, expr) in &self.derived {
            let v = match expr {
                Expr::FieldRef(f) => rec.get(f).cloned(),
                Expr::Constant(v) => Some(v.clone()),
            };
            if let Some(v) = v {
                rec.insert(name.clone(), v);
            }
        }
        match &self.kind {
            Kind::Regression { norm, tables } => self.score_regression(norm, tables, &rec),
            Kind::Tree { root } => self.score_tree(root, &rec),
            Kind::Mining { combine, segments } => self.score_mining(*combine, segments, &rec),
        }
    }

    fn score_regression(
        &self,
        norm: &Norm,
        tables: &[RegressionTable],
        rec: &Record,
    ) -> Result<Prediction, ScoreError> {
        let mut ys = Vec::with_capacity(tables.len());
        for t in tables {
            let mut y = t.intercept;
            for (f, c, e) in &t.numeric {
                let x = rec
                    .get(f)
                    .and_then(Value::as_f64)
                    .ok_or_else(|| ScoreError::MissingInput(f.clone()))?;
                y += c * x.powi(*e);
            }
            for (f, v, c) in &t.categorical {
                let x = rec
                    .get(f)
                    .ok_or_else(|| ScoreError::MissingInput(f.clone()))?;
                if x.as_string() == *v {
                    y += c;
                }
            }
            ys.push(y);
        }
        if self.function == Function::Regression {
            let y = ys.first().copied().unwrap_or(0.0);
            let y = match norm {
                Norm::Softmax => norm_link(&Norm::Logit, y),
                n => norm_link(n, y),
            };
            return Ok(Prediction {
                value: Value::Num(y),
                probabilities: BTreeMap::new(),
            });
        }
        let k = ys.len();
        let probs: Vec<f64> = match norm {
            Norm::Softmax => {
                let m = ys.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = ys.iter().map(|y| (y - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.iter().map(|v| v / s).collect()
            }
            Norm::Simplemax => {
                let s: f64 = ys.iter().sum();
                ys.iter().map(|y| y / s).collect()
            }
            Norm::None => {
                // Raw values for the first k-1 categories; the last takes the rest.
                let mut p: Vec<f64> = ys[..k - 1].to_vec();
                p.push(1.0 - p.iter().sum::<f64>());
                p
            }
            n => {
                let mut p: Vec<f64> = ys[..k - 1].iter().map(|y| norm_link(n, *y)).collect();
                p.push(1.0 - p.iter().sum::<f64>());
                p
            }
        };
        let mut probabilities = BTreeMap::new();
        let mut best: Option<(usize, f64)> = None;
        for (i, (t, p)) in tables.iter().zip(&probs).enumerate() {
            probabilities.insert(t.category.clone().unwrap_or_default(), *p);
            if best.is_none_or(|(_, b)| *p > b) {
                best = Some((i, *p));
            }
        }
        let (i, _) = best.ok_or_else(|| ScoreError::NoPrediction("no tables".to_string()))?;
        Ok(Prediction {
            value: Value::Str(tables[i].category.clone().unwrap_or_default()),
            probabilities,
        })
    }

    fn score_tree(&self, root: &TreeNode, rec: &Record) -> Result<Prediction, ScoreError> {
        if eval_predicate(&root.predicate, rec) != Some(true) {
            return Err(ScoreError::NoPrediction(
                "the root predicate is false".to_string(),
            ));
        }
        let mut node = root;
        while let Some(c) = node
            .children
            .iter()
            .find(|c| eval_predicate(&c.predicate, rec) == Some(true))
        {
            node = c;
        }
        let score = node.score.clone().ok_or_else(|| {
            ScoreError::NoPrediction("no leaf matches (an input may be missing)".to_string())
        })?;
        let total: f64 = node.distribution.iter().map(|(_, w)| w).sum();
        let probabilities = if self.function == Function::Classification && total > 0.0 {
            node.distribution
                .iter()
                .map(|(k, w)| (k.clone(), w / total))
                .collect()
        } else {
            BTreeMap::new()
        };
        let value = match self.function {
            Function::Regression => Value::Num(score.trim().parse().map_err(|_| {
                ScoreError::NoPrediction(format!("score {score:?} is not a number"))
            })?),
            Function::Classification => Value::Str(score),
        };
        Ok(Prediction {
            value,
            probabilities,
        })
    }

    fn score_mining(
        &self,
        combine: Combine,
        segments: &[Segment],
        rec: &Record,
    ) -> Result<Prediction, ScoreError> {
        let mut results = Vec::new();
        for s in segments {
            if eval_predicate(&s.predicate, rec) == Some(true) {
                let p = s.model.score(rec)?;
                if combine == Combine::SelectFirst {
                    return Ok(p);
                }
                results.push((s.weight, p));
            }
        }
        if results.is_empty() {
            return Err(ScoreError::NoPrediction("no segment applies".to_string()));
        }
        let total_w: f64 = results.iter().map(|(w, _)| w).sum();
        let n = results.len() as f64;
        match self.function {
            Function::Regression => {
                let mut sum = 0.0;
                for (w, p) in &results {
                    let v = match &p.value {
                        Value::Num(v) => *v,
                        other => other.as_f64().ok_or_else(|| {
                            ScoreError::NoPrediction("a segment gave a category".to_string())
                        })?,
                    };
                    sum += match combine {
                        Combine::WeightedAverage => w * v,
                        _ => v,
                    };
                }
                let value = match combine {
                    Combine::Sum => sum,
                    Combine::WeightedAverage => sum / total_w,
                    _ => sum / n,
                };
                Ok(Prediction {
                    value: Value::Num(value),
                    probabilities: BTreeMap::new(),
                })
            }
            Function::Classification => {
                let mut acc: BTreeMap<String, f64> = BTreeMap::new();
                for (w, p) in &results {
                    match combine {
                        Combine::MajorityVote | Combine::WeightedMajorityVote => {
                            let wt = if combine == Combine::WeightedMajorityVote {
                                *w
                            } else {
                                1.0
                            };
                            *acc.entry(p.value.as_string()).or_default() += wt;
                        }
                        Combine::WeightedAverage => {
                            for (k, v) in &p.probabilities {
                                *acc.entry(k.clone()).or_default() += w * v;
                            }
                        }
                        _ => {
                            for (k, v) in &p.probabilities {
                                *acc.entry(k.clone()).or_default() += v;
                            }
                        }
                    }
                }
                let denom = match combine {
                    Combine::WeightedMajorityVote | Combine::WeightedAverage => total_w,
                    _ => n,
                };
                let probabilities: BTreeMap<String, f64> =
                    acc.into_iter().map(|(k, v)| (k, v / denom)).collect();
                let best = probabilities
                    .iter()
                    .fold(None::<(&String, f64)>, |b, (k, v)| match b {
                        Some((_, bv)) if bv >= *v => b,
                        _ => Some((k, *v)),
                    })
                    .map(|(k, _)| k.clone())
                    .ok_or_else(|| {
                        ScoreError::NoPrediction("segments gave no classes".to_string())
                    })?;
                Ok(Prediction {
                    value: Value::Str(best),
                    probabilities,
                })
            }
        }
    }
}
