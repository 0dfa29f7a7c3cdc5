//! The statistics perfpilot's optimizer and study runner share, in one place.
//!
//! - [`describe`]: mean, sample standard deviation, coefficient of variation. The standard
//!   deviation of fewer than two values is undefined and is `NaN` everywhere.
//! - [`interval`]: Student-t quantiles, the interval of a mean, the gain of paired runs as a
//!   ratio (a t interval on the paired log ratios) and of independent windows (Welch, on the log
//!   of the ratio of means), the one-sided upper bound of a mean.
//! - [`selection`]: ranking and selection: the expected loss of choosing a leader over a rival,
//!   and the conditional power of a continued comparison.
//! - [`bootstrap`]: each alternative's chance of being the best, from resampled blocks.
//! - [`serial`]: the same ratio for windows measured one after another, and the mean of a
//!   series (a switchback trial's pair differences), widened for their lag-1 autocorrelation
//!   (AR(1)).
//! - [`prior`]: a normal belief about an effect from earlier trials' estimates, updated with a
//!   new one (credible intervals).
//! - [`warmup`]: MSER-5 truncation of a series' warm-up.
//! - [`shift`]: a level shift inside a series (where a plateau steps to another level), or a
//!   trend (a slow climb).
//! - [`rng`]: SplitMix64, the seeded generator behind round orders, resamples, request bodies
//!   and the reference workloads' data.
//! - [`weighted`]: a weighted choice of an index (the load driver's request mix).
//!
//! Distributions come from `statrs`. Rank tests (Friedman, Wilcoxon, Hodges–Lehmann) belong to
//! the study runner and live there.

pub mod bootstrap;
pub mod describe;
pub mod interval;
pub mod prior;
pub mod rng;
pub mod selection;
pub mod serial;
pub mod shift;
pub mod warmup;
pub mod weighted;

pub use bootstrap::chance_best;
pub use describe::{Summary, cv, mean, median, stdev};
pub use interval::{
    MeanCi, RatioCi, mean_ci, paired_ratio_ci, ratio_of_means_ci, t_quantile, upper_bound,
};
pub use prior::Belief;
pub use rng::Rng;
pub use selection::{conditional_power, expected_loss};
pub use serial::{SerialCi, serial_mean_ci, serial_ratio_of_means_ci};
pub use shift::{Shift, Trend, level_shift, trend};
pub use warmup::{Mser, mser, mser5};
pub use weighted::WeightedChoice;
