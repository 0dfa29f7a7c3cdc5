//! Non-negative least squares for the tier demands (the utilization law over the fitted
//! points), small enough to solve by enumeration.

/// Non-negative least squares `min |A x − b|²`, `x ≥ 0`, for a handful of unknowns: every
/// subset of free unknowns is solved by its normal equations and the best feasible one kept
/// (exact, and cheap for the one to four request classes a capacity model has).
pub(super) fn nnls(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = a.first().map_or(0, Vec::len);
    let mut best = (f64::INFINITY, vec![0.0; n]);
    for mask in 0u32..(1 << n) {
        let free: Vec<usize> = (0..n).filter(|j| mask >> j & 1 == 1).collect();
        let k = free.len();
        let mut m = vec![vec![0.0; k + 1]; k];
        for (r, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate() {
                m[r][c] = a.iter().map(|row| row[i] * row[j]).sum();
            }
            m[r][k] = a.iter().zip(b).map(|(row, y)| row[i] * y).sum();
        }
        let Some(sol) = gauss(m) else { continue };
        if sol.iter().any(|&v| v < 0.0) {
            continue;
        }
        let mut x = vec![0.0; n];
        for (&j, &v) in free.iter().zip(&sol) {
            x[j] = v;
        }
        let resid: f64 = a
            .iter()
            .zip(b)
            .map(|(row, y)| (row.iter().zip(&x).map(|(p, q)| p * q).sum::<f64>() - y).powi(2))
            .sum();
        if resid < best.0 - 1e-18 {
            best = (resid, x);
        }
    }
    best.1
}

/// Solves an augmented `k × (k+1)` system by Gaussian elimination; `None` when singular.
fn gauss(mut m: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = m.len();
    for col in 0..k {
        let piv = (col..k).max_by(|&p, &q| m[p][col].abs().total_cmp(&m[q][col].abs()))?;
        if m[piv][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, piv);
        let pivot = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot[col];
                for (v, p) in row.iter_mut().zip(&pivot).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    Some((0..k).map(|r| m[r][k] / m[r][r]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_two_class_demands_and_holds_a_negative_one_at_zero() {
        let a = vec![vec![10.0, 0.0], vec![0.0, 20.0], vec![10.0, 20.0]];
        let b = vec![0.2, 0.1, 0.3];
        let x = nnls(&a, &b);
        assert!((x[0] - 0.02).abs() < 1e-12 && (x[1] - 0.005).abs() < 1e-12);
        // b says the second unknown is negative: it is held at 0.
        let x = nnls(&[vec![1.0, 1.0], vec![1.0, 2.0]], &[2.0, 1.0]);
        assert_eq!(x[1], 0.0);
        assert!(x[0] > 0.0);
    }
}
