//! `fit`: the CPU-heavy job. Reads the first `fit_rows` rows of the table and fits a logistic
//! regression of the label on the columns by Newton's method for a fixed number of iterations
//! (no early stop, so its CPU time does not depend on how soon it converges).

use std::io::{BufReader, Read};

use crate::Error;
use crate::batch::BatchConfig;
use crate::data::{FEATURES, ROW_BYTES, Row};
use crate::job::{SessionFiles, open_input};

/// Runs the job; the result is the coefficients and the log-likelihood.
pub fn run(cfg: &BatchConfig, files: &SessionFiles) -> Result<String, Error> {
    let f = open_input(cfg, files)?;
    let n = cfg.fit_rows.min(cfg.rows()) as usize;
    let mut r = BufReader::with_capacity(cfg.bufsize, f);
    let mut xs: Vec<[f64; FEATURES]> = Vec::with_capacity(n);
    let mut ys: Vec<f64> = Vec::with_capacity(n);
    let mut b = [0u8; ROW_BYTES];
    for _ in 0..n {
        r.read_exact(&mut b)
            .map_err(|e| Error::io("read", &files.input, e))?;
        let row = Row::decode(&b);
        xs.push(row.x);
        ys.push(f64::from(row.label));
    }
    let (coef, ll) = newton(&xs, &ys, cfg.fit_iterations);
    if !ll.is_finite() {
        return Err(Error::Check(format!(
            "the fit diverged (log-likelihood {ll})"
        )));
    }
    let c: Vec<String> = coef.iter().map(|c| format!("{c:.3}")).collect();
    Ok(format!("coef [{}], log-likelihood {ll:.1}", c.join(", ")))
}

/// Logistic regression without an intercept by `iterations` Newton steps; returns the
/// coefficients and the final log-likelihood.
// Matrix code reads best with indices.
#[allow(clippy::needless_range_loop)]
pub fn newton(xs: &[[f64; FEATURES]], ys: &[f64], iterations: u32) -> ([f64; FEATURES], f64) {
    let mut beta = [0.0; FEATURES];
    for _ in 0..iterations {
        let mut g = [0.0; FEATURES];
        let mut h = [[0.0; FEATURES]; FEATURES];
        for (x, &y) in xs.iter().zip(ys) {
            let z: f64 = x.iter().zip(&beta).map(|(a, b)| a * b).sum();
            let p = 1.0 / (1.0 + (-z).exp());
            let w = p * (1.0 - p);
            for j in 0..FEATURES {
                g[j] += (y - p) * x[j];
                for k in 0..=j {
                    h[j][k] += w * x[j] * x[k];
                }
            }
        }
        for j in 0..FEATURES {
            for k in 0..j {
                h[k][j] = h[j][k];
            }
        }
        match solve(h, g) {
            Some(step) => {
                for j in 0..FEATURES {
                    beta[j] += step[j];
                }
            }
            None => break,
        }
    }
    let ll = xs
        .iter()
        .zip(ys)
        .map(|(x, &y)| {
            let z: f64 = x.iter().zip(&beta).map(|(a, b)| a * b).sum();
            // log(1 + e^z) without overflow.
            let softplus = if z > 0.0 {
                z + (-z).exp().ln_1p()
            } else {
                z.exp().ln_1p()
            };
            y * z - softplus
        })
        .sum();
    (beta, ll)
}

/// Solves `a x = b` by Gaussian elimination with partial pivoting (`None`: singular).
#[allow(clippy::needless_range_loop)]
fn solve(mut a: [[f64; FEATURES]; FEATURES], mut b: [f64; FEATURES]) -> Option<[f64; FEATURES]> {
    for col in 0..FEATURES {
        let piv = (col..FEATURES).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        for r in col + 1..FEATURES {
            let f = a[r][col] / a[col][col];
            for c in col..FEATURES {
                a[r][c] -= f * a[col][c];
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = [0.0; FEATURES];
    for r in (0..FEATURES).rev() {
        let s: f64 = (r + 1..FEATURES).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{TRUE_COEF, row};

    #[test]
    fn the_fit_finds_the_coefficients_the_labels_were_drawn_from() {
        let rows: Vec<Row> = (0..40_000).map(|i| row(3, 0, i)).collect();
        let xs: Vec<_> = rows.iter().map(|r| r.x).collect();
        let ys: Vec<_> = rows.iter().map(|r| f64::from(r.label)).collect();
        let (beta, ll) = newton(&xs, &ys, 10);
        for (b, t) in beta.iter().zip(TRUE_COEF) {
            assert!((b - t).abs() < 0.15, "{beta:?} vs {TRUE_COEF:?}");
        }
        let (_, ll0) = newton(&xs, &ys, 0);
        assert!(
            ll > ll0,
            "the fit must raise the log-likelihood: {ll0} -> {ll}"
        );
    }

    #[test]
    fn a_singular_system_has_no_solution() {
        assert!(solve([[0.0; FEATURES]; FEATURES], [1.0; FEATURES]).is_none());
    }
}
