//! What a model file answers, each in one call: its network solved, its demands fitted, a
//! prediction sweep with the cost ranking, and the validation against its measured points.
//! The file's `[predict]` and `[fit]` sections fill in what the caller leaves out, so a front
//! end (`perfpilot model`) parses its flags, calls one of these and prints the result.

use std::path::Path;

use perfpilot_units::counted;

use serde::Serialize;

use crate::error::ModelError;
use crate::file::ModelFile;
use crate::fit::{FitReport, fit};
use crate::mva::{Solution, SolveOptions, solve};
use crate::network::Network;
use crate::predict::{CostRow, PredictionRow, Validation, predict, rank_by_cost, validate};

/// What to predict over, beyond what the file's `[predict]` section says. An empty list or
/// `None` takes the file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweep {
    /// Client counts (file's `clients`, else the network's total population).
    pub clients: Vec<u32>,
    /// Station to replicate behind a balancer (file's `replicate`).
    pub replicate: Option<String>,
    /// Replica counts of that station (file's `replicas`, else 1).
    pub replicas: Vec<u32>,
}

/// The predictions of a [`Sweep`] and the file's configurations ranked by cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictReport {
    /// The station that was replicated, if any.
    #[serde(skip)]
    pub replicated: Option<String>,
    /// One row per replica count and client count.
    pub rows: Vec<PredictionRow>,
    /// The file's `[[configurations]]` by throughput per cost, best first (empty without any).
    pub cost: Vec<CostRow>,
}

/// The file's measured points against the model's predictions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Measured vs predicted, point by point.
    pub validation: Validation,
    /// Predictions at the file's [predict] clients that no measured point covers.
    pub predicted_only: Vec<PredictionRow>,
    /// The fit the network came from, when the file asked for one.
    #[serde(skip)]
    pub fit: Option<FitReport>,
    /// Labels of the points the demands were fitted from (empty without a fit).
    #[serde(skip)]
    pub fitted_from: Vec<String>,
}

impl ModelFile {
    /// The file's network (fitted when it asks for it) with the single class's population set
    /// to `population` when given, and its solution.
    pub fn solve_at(
        &self,
        population: Option<u32>,
        opts: &SolveOptions,
    ) -> Result<(Network, Solution), ModelError> {
        let (mut net, _) = self.resolved()?;
        if let Some(n) = population {
            if net.classes.len() != 1 {
                return Err(ModelError::File(format!(
                    "a population override needs a single-class model; this one has {} classes",
                    net.classes.len()
                )));
            }
            net = net.with_populations(&[n])?;
        }
        let sol = solve(&net, opts)?;
        Ok((net, sol))
    }

    /// The demands of the file's single class fitted from its `[fit]` points, with the
    /// residuals of the utilization law and the response-time-law check.
    pub fn fit_demands(&self) -> Result<FitReport, ModelError> {
        let classes = self.classes()?;
        if classes.len() != 1 {
            return Err(ModelError::File(format!(
                "fitting supports one class; the file has {}",
                classes.len()
            )));
        }
        fit(&self.skeleton()?, &classes[0], &self.fit_points()?)
    }

    /// Predicts the file's network over `sweep` (filled in from `[predict]`) and ranks the
    /// file's configurations by throughput per cost at `[predict] cost_clients` (default: the
    /// total population).
    pub fn predict_sweep(
        &self,
        sweep: &Sweep,
        opts: &SolveOptions,
    ) -> Result<PredictReport, ModelError> {
        let (net, _) = self.resolved()?;
        let spec = self.predict.clone().unwrap_or_default();
        let clients = if !sweep.clients.is_empty() {
            sweep.clients.clone()
        } else if !spec.clients.is_empty() {
            spec.clients.clone()
        } else {
            vec![net.total_population()]
        };
        let replicated = sweep.replicate.clone().or(spec.replicate.clone());
        let replicas = if sweep.replicas.is_empty() {
            spec.replicas.clone()
        } else {
            sweep.replicas.clone()
        };
        let counts = if replicas.is_empty() {
            vec![1]
        } else {
            replicas
        };
        let rows = predict(
            &net,
            &clients,
            replicated.as_deref().map(|r| (r, counts.as_slice())),
            opts,
        )?;
        let cost = if self.configurations.is_empty() {
            Vec::new()
        } else {
            let at = spec.cost_clients.unwrap_or(net.total_population());
            rank_by_cost(&net, &self.configurations, &self.prices()?, at, opts)?
        };
        Ok(PredictReport {
            replicated,
            rows,
            cost,
        })
    }

    /// Predicts every measured point and compares, marking the points the demands were fitted
    /// from; adds predictions at the `[predict]` client counts no point measured.
    pub fn validation(&self, opts: &SolveOptions) -> Result<ValidationReport, ModelError> {
        if self.measurements.is_empty() {
            return Err(ModelError::File(
                "no [[measurements]] to validate against".into(),
            ));
        }
        let (net, fit) = self.resolved()?;
        let fitted_from: Vec<String> = if fit.is_some() {
            self.fit_points()?.iter().map(|m| m.name()).collect()
        } else {
            Vec::new()
        };
        let validation = validate(&net, &self.measurements, &fitted_from, opts)?;
        let extra: Vec<u32> = self
            .predict
            .as_ref()
            .map(|p| p.clients.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !self.measurements.iter().any(|m| m.clients == *c))
            .collect();
        let predicted_only = if extra.is_empty() {
            Vec::new()
        } else {
            predict(&net, &extra, None, opts)?
        };
        Ok(ValidationReport {
            validation,
            predicted_only,
            fit,
            fitted_from,
        })
    }

    /// The file in the format `path`'s extension names: `.toml`, `.json`, or `.xml`/`.jmva`
    /// (JMT JMVA, of the resolved network).
    pub fn render_for(&self, path: &Path) -> Result<String, ModelError> {
        self.render(path).map(|r| r.text)
    }

    /// As [`ModelFile::render_for`], with what the text holds and what the format left out,
    /// for a front end to say what it wrote.
    pub fn render(&self, path: &Path) -> Result<Rendered, ModelError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let (text, format) = match ext.as_str() {
            "xml" | "jmva" => return self.render_jmva(),
            "toml" => (self.to_toml()?, "TOML"),
            "json" => (self.to_json()?, "JSON"),
            _ => {
                return Err(ModelError::File(format!(
                    "{}: unknown output extension; use .toml, .json, .xml or .jmva",
                    path.display()
                )));
            }
        };
        let mut holds = vec![
            counted(self.classes.len() as u64, "class", "classes"),
            counted(self.stations.len() as u64, "station", "stations"),
        ];
        holds.extend(self.sections(false));
        Ok(Rendered {
            text,
            format,
            holds: holds.join(", "),
            left_out: Vec::new(),
        })
    }

    /// The parts of the file beyond the network, in words: measured points, `[fit]`,
    /// `[predict]`, a `[solver]` other than the default (when `solver` is asked), configurations.
    fn sections(&self, solver: bool) -> Vec<String> {
        let mut parts = Vec::new();
        if !self.measurements.is_empty() {
            parts.push(counted(
                self.measurements.len() as u64,
                "measured point",
                "measured points",
            ));
        }
        for (present, section) in [
            (self.fit.is_some(), "[fit]"),
            (self.predict.is_some(), "[predict]"),
            (solver && self.solver != SolveOptions::default(), "[solver]"),
        ] {
            if present {
                parts.push(section.to_string());
            }
        }
        if !self.configurations.is_empty() {
            parts.push(counted(
                self.configurations.len() as u64,
                "configuration",
                "configurations",
            ));
        }
        parts
    }

    /// JMVA holds the resolved network only: fitted demands, not the points they came from.
    fn render_jmva(&self) -> Result<Rendered, ModelError> {
        let (net, fit) = self.resolved()?;
        let text = crate::jmva::write(&net)?;
        let mut holds = format!(
            "the network: {}, {}",
            counted(net.classes.len() as u64, "class", "classes"),
            counted(net.stations.len() as u64, "station", "stations")
        );
        if fit.is_some() {
            let points = self.fit_points()?.len();
            holds.push_str(&format!(
                ", demands fitted from {}",
                counted(points as u64, "measured point", "measured points")
            ));
        }
        let mut left_out = Vec::new();
        if !self.name.is_empty() || !self.description.is_empty() {
            left_out.push("name and description".to_string());
        }
        left_out.extend(self.sections(true));
        Ok(Rendered {
            text,
            format: "JMT JMVA XML",
            holds,
            left_out,
        })
    }
}

/// A model file rendered in the format an output path's extension names, with what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The text to write.
    pub text: String,
    /// The format: `TOML`, `JSON` or `JMT JMVA XML`.
    pub format: &'static str,
    /// What the text holds, in words: `1 class, 3 stations, 4 measured points, [fit]`.
    pub holds: String,
    /// What the file held that the format cannot carry (JMVA holds the network only), e.g.
    /// `4 measured points`, `[predict]`; empty when nothing was left out.
    pub left_out: Vec<String>,
}
