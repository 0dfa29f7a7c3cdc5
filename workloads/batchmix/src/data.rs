//! The generated table: fixed 64-byte rows, every byte a function of the seed, the session and
//! the row number, so a lookup can recompute the row it expects and any two runs with one seed
//! write identical files.

use perfpilot_stats::rng::mix64;

/// Bytes per row.
pub const ROW_BYTES: usize = 64;

/// Numeric columns per row.
pub const FEATURES: usize = 6;

/// Distinct groups rows fall into (the aggregation's `BY` variable).
pub const GROUPS: u32 = 1000;

/// One row of a session's table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// A random key (the sort's second key, the lookups' check).
    pub key: u64,
    /// The group, `0..GROUPS` (the sort's first key and the aggregation's `BY`).
    pub group: u32,
    /// The response of the model fit: 0 or 1.
    pub label: u32,
    /// Numeric columns in `[-1, 1)`.
    pub x: [f64; FEATURES],
}

/// The true coefficients the label is drawn from, so the fit has something to find.
pub const TRUE_COEF: [f64; FEATURES] = [1.5, -2.0, 0.75, 0.0, 3.0, -0.5];

/// Row `i` of session `session`'s table for `seed`.
pub fn row(seed: u64, session: u32, i: u64) -> Row {
    let base = mix64(seed ^ (u64::from(session) << 48)) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let r = |k: u64| mix64(base.wrapping_add(k));
    let unit = |v: u64| (v >> 11) as f64 / (1u64 << 53) as f64;
    let mut x = [0.0; FEATURES];
    for (k, v) in x.iter_mut().enumerate() {
        *v = unit(r(k as u64 + 2)) * 2.0 - 1.0;
    }
    let z: f64 = x.iter().zip(TRUE_COEF).map(|(a, b)| a * b).sum();
    let p = 1.0 / (1.0 + (-z).exp());
    Row {
        key: r(0),
        group: (r(1) % u64::from(GROUPS)) as u32,
        label: u32::from(unit(r(9)) < p),
        x,
    }
}

impl Row {
    /// The row's bytes (little-endian: key, group, label, then the columns).
    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.key.to_le_bytes());
        out[8..12].copy_from_slice(&self.group.to_le_bytes());
        out[12..16].copy_from_slice(&self.label.to_le_bytes());
        for (k, v) in self.x.iter().enumerate() {
            out[16 + 8 * k..24 + 8 * k].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// A row from its 64 bytes.
    pub fn decode(b: &[u8]) -> Row {
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        let mut x = [0.0; FEATURES];
        for (k, v) in x.iter_mut().enumerate() {
            *v = f64::from_bits(u64_at(16 + 8 * k));
        }
        Row {
            key: u64_at(0),
            group: u32_at(8),
            label: u32_at(12),
            x,
        }
    }

    /// The sort order of the sort job: by group, then key.
    pub fn sort_key(&self) -> (u32, u64) {
        (self.group, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_survives_encoding_and_decoding() {
        let r = row(7, 3, 12345);
        let mut b = [0u8; ROW_BYTES];
        r.encode(&mut b);
        assert_eq!(Row::decode(&b), r);
    }

    #[test]
    fn rows_depend_on_seed_session_and_number_only() {
        assert_eq!(row(1, 0, 5), row(1, 0, 5));
        assert_ne!(row(1, 0, 5).key, row(2, 0, 5).key);
        assert_ne!(row(1, 0, 5).key, row(1, 1, 5).key);
        assert_ne!(row(1, 0, 5).key, row(1, 0, 6).key);
    }

    #[test]
    fn groups_and_columns_stay_in_range_and_labels_follow_the_model() {
        let mut ones = 0;
        let mut agree = 0;
        for i in 0..20_000 {
            let r = row(42, 0, i);
            assert!(r.group < GROUPS);
            assert!(r.x.iter().all(|v| (-1.0..1.0).contains(v)));
            let z: f64 = r.x.iter().zip(TRUE_COEF).map(|(a, b)| a * b).sum();
            ones += r.label;
            agree += u32::from((z > 0.0) == (r.label == 1));
        }
        // Labels are drawn from the logistic model: mostly on the side of the hyperplane.
        assert!(agree > 14_000, "{agree} of 20000 agree with the model");
        assert!((5_000..15_000).contains(&ones), "{ones} ones");
    }
}
