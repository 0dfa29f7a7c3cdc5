//! Simulated signals for the designs' tests: windows of a server's work per CPU-second with
//! nothing changed, as recorded traces show them — noise alike from one window to the next
//! (AR(1) on the log scale), a slow wander over minutes, and steps to another level.

use perfpilot_stats::Rng;

/// How a simulated signal wanders.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wander {
    /// The windows' coefficient of variation around the drift.
    pub(crate) cv: f64,
    /// Their lag-1 autocorrelation.
    pub(crate) rho: f64,
    /// The amplitude of a slow sinusoidal drift (share of the level).
    pub(crate) drift: f64,
    /// Its period in windows.
    pub(crate) drift_period: f64,
    /// The chance per window of a step to a new level, and its size (share, either way).
    pub(crate) step_chance: f64,
    pub(crate) step: f64,
}

impl Wander {
    /// PostgreSQL's windows on a shared VM: cv 5 %, lag-1 0.6, ±6 % over 150 windows, a ±8 %
    /// step now and then.
    pub(crate) const POSTGRES: Wander = Wander {
        cv: 0.05,
        rho: 0.6,
        drift: 0.06,
        drift_period: 150.0,
        step_chance: 0.01,
        step: 0.08,
    };

    /// `n` windows from `seed`, around 1000.
    pub(crate) fn series(&self, seed: u64, n: usize) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut e = rng.normal();
        let mut level = 0.0f64;
        let phase = rng.next_f64() * std::f64::consts::TAU;
        (0..n)
            .map(|i| {
                if rng.next_f64() < self.step_chance {
                    level += if rng.next_f64() < 0.5 {
                        self.step
                    } else {
                        -self.step
                    };
                    level = level.clamp(-2.0 * self.step, 2.0 * self.step);
                }
                let drift = self.drift
                    * (phase + std::f64::consts::TAU * i as f64 / self.drift_period).sin();
                let v = 1000.0 * (self.cv * e + drift + level).exp();
                e = self.rho * e + (1.0 - self.rho * self.rho).sqrt() * rng.normal();
                v
            })
            .collect()
    }
}
