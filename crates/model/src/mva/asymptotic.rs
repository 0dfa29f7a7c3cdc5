//! Asymptotic bounds (Lazowska et al., QSP ch. 5): the throughput and response-time limits
//! that hold at any population, computed from the declared network alone.

use crate::network::{Network, StationKind};

use super::Bounds;

/// Bounds of class `c` computed from the declared network.
pub fn bounds(net: &Network, c: usize, population: u32) -> Bounds {
    BoundsBase::new(net, c).at(population)
}

/// The population-independent parts of the bounds of one class.
pub(super) struct BoundsBase {
    d_total: f64,
    d_max: f64,
    z: f64,
    r_upper_fixed: f64,
    r_upper_per_n: f64,
    single: bool,
}

impl BoundsBase {
    /// The parts of class `c`'s bounds that do not depend on its population.
    pub(super) fn new(net: &Network, c: usize) -> BoundsBase {
        let mut b = BoundsBase {
            d_total: 0.0,
            d_max: 0.0,
            z: net.classes[c].think_time,
            r_upper_fixed: 0.0,
            r_upper_per_n: 0.0,
            single: net.classes.len() == 1,
        };
        for s in &net.stations {
            let d = s.demand[c];
            if d == 0.0 {
                continue;
            }
            if s.kind == StationKind::Delay {
                b.d_total += d;
                b.r_upper_fixed += d;
            } else {
                b.d_total += d * s.kind.fastest_per_customer();
                b.d_max = b.d_max.max(d / s.kind.max_rate());
                b.r_upper_per_n += d / s.kind.min_rate();
            }
        }
        b
    }

    /// The bounds at `population` customers.
    pub(super) fn at(&self, population: u32) -> Bounds {
        let n = f64::from(population);
        let (d_total, d_max, z) = (self.d_total, self.d_max, self.z);
        let x_opt = n / (d_total + z);
        let throughput_upper = if d_max > 0.0 {
            x_opt.min(1.0 / d_max)
        } else {
            x_opt
        };
        let response_upper = self.r_upper_fixed + n * self.r_upper_per_n;
        Bounds {
            demand_total: d_total,
            demand_max: d_max,
            think_time: z,
            n_star: if d_max > 0.0 {
                (d_total + z) / d_max
            } else {
                f64::INFINITY
            },
            throughput_upper,
            throughput_lower: self.single.then(|| n / (response_upper + z)),
            response_lower: d_total.max(n * d_max - z),
            response_upper: self.single.then_some(response_upper),
        }
    }

    /// The bounds of an open class: no population and no think time, throughput up to the
    /// bottleneck's capacity, response time at least the sum of the demands.
    pub(super) fn open(&self) -> Bounds {
        Bounds {
            demand_total: self.d_total,
            demand_max: self.d_max,
            think_time: 0.0,
            n_star: f64::INFINITY,
            throughput_upper: if self.d_max > 0.0 {
                1.0 / self.d_max
            } else {
                f64::INFINITY
            },
            throughput_lower: None,
            response_lower: self.d_total,
            response_upper: None,
        }
    }
}
