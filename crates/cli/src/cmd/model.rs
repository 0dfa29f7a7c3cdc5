//! `perfpilot model`: solve, fit, predict and validate queueing-network capacity models.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use perfpilot_model::{
    Method, ModelFile, MultiServerMethod, PredictReport, Solution, SolveOptions, Sweep,
    ValidationReport, jmva,
};
use serde::Serialize;

/// Queueing-network capacity models (see docs/model-file.md).
#[derive(Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    cmd: ModelCmd,
}

#[derive(Subcommand)]
enum ModelCmd {
    /// Solve the model by MVA: throughput, response time, per-station utilization and queue,
    /// asymptotic bounds and the bottleneck.
    Solve(SolveArgs),
    /// Fit service demands from the file's measurements (utilization law, least squares) and
    /// check them against the response-time law.
    Fit(FileArgs),
    /// Predict over clients and replicated nodes; rank the file's configurations by throughput
    /// per cost.
    Predict(PredictArgs),
    /// Compare the model's predictions with the file's measured points (error %).
    Validate(FileArgs),
    /// Convert between model formats by extension: .toml, .json, .xml/.jmva (JMT JMVA).
    Convert {
        /// Input model file.
        input: PathBuf,
        /// Output file; its extension picks the format.
        output: PathBuf,
    },
}

#[derive(Args)]
struct FileArgs {
    /// Model file: .toml, .json, or .xml/.jmva (JMT JMVA).
    file: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    solver: SolverArgs,
}

#[derive(Args)]
struct SolverArgs {
    /// Algorithm (default: the file's [solver] method, else exact).
    #[arg(long, value_enum)]
    method: Option<MethodArg>,
    /// Treatment of multi-server stations (default: the file's, else exact).
    #[arg(long, value_enum)]
    multiserver: Option<MultiServerArg>,
    /// Iteration cap of the approximate method.
    #[arg(long)]
    max_iterations: Option<u32>,
}

#[derive(Clone, Copy, ValueEnum)]
enum MethodArg {
    Exact,
    Schweitzer,
}

#[derive(Clone, Copy, ValueEnum)]
enum MultiServerArg {
    Exact,
    Seidmann,
}

#[derive(Args)]
struct SolveArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Population of the (single) class, overriding the file.
    #[arg(long)]
    population: Option<u32>,
    /// Print the whole curve 1..N with bounds (single class, exact method).
    #[arg(long)]
    curve: bool,
    /// Also write the solved network as JMT JMVA XML to this path.
    #[arg(long)]
    jmva_out: Option<PathBuf>,
}

#[derive(Args)]
struct PredictArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Client counts, e.g. 20,40,80 (default: the file's [predict] clients, else the population).
    #[arg(long, value_delimiter = ',')]
    clients: Vec<u32>,
    /// Station to replicate behind a balancer (default: the file's [predict] replicate).
    #[arg(long)]
    replicate: Option<String>,
    /// Replica counts, e.g. 1,2,4 (default: the file's [predict] replicas).
    #[arg(long, value_delimiter = ',')]
    replicas: Vec<u32>,
}

pub fn run(args: ModelArgs) -> Result<()> {
    match args.cmd {
        ModelCmd::Solve(a) => cmd_solve(a),
        ModelCmd::Fit(a) => cmd_fit(a),
        ModelCmd::Predict(a) => cmd_predict(a),
        ModelCmd::Validate(a) => cmd_validate(a),
        ModelCmd::Convert { input, output } => cmd_convert(&input, &output),
    }
}

fn load(path: &Path) -> Result<ModelFile> {
    ModelFile::from_path(path).with_context(|| format!("reading model {}", path.display()))
}

/// The file's `[solver]` options with the flags' overrides.
fn options(file: &ModelFile, a: &SolverArgs) -> SolveOptions {
    let mut o = file.solver;
    if let Some(m) = a.method {
        o.method = match m {
            MethodArg::Exact => Method::Exact,
            MethodArg::Schweitzer => Method::Schweitzer,
        };
    }
    if let Some(m) = a.multiserver {
        o.multiserver = match m {
            MultiServerArg::Exact => MultiServerMethod::Exact,
            MultiServerArg::Seidmann => MultiServerMethod::Seidmann,
        };
    }
    if let Some(i) = a.max_iterations {
        o.max_iterations = i;
    }
    o
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn ms(seconds: f64) -> String {
    format!("{:.3}", seconds * 1000.0)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |u| format!("{:.1}", u * 100.0))
}

fn cmd_solve(a: SolveArgs) -> Result<()> {
    let path = &a.file.file;
    let file = load(path)?;
    let opts = options(&file, &a.file.solver);
    let (net, sol) = file
        .solve_at(a.population, &opts)
        .with_context(|| format!("solving the model {}", path.display()))?;
    if let Some(out) = &a.jmva_out {
        std::fs::write(out, jmva::write(&net)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if a.file.json {
        return print_json(&sol);
    }
    print_solution(&file, &sol);
    if a.curve {
        print_curve(&sol);
    }
    Ok(())
}

fn print_solution(file: &ModelFile, sol: &Solution) {
    if !file.name.is_empty() {
        println!("model: {}", file.name);
    }
    let conv = if sol.exact {
        String::new()
    } else {
        format!(
            " ({} after {} iterations)",
            if sol.converged {
                "converged"
            } else {
                "NOT converged"
            },
            sol.iterations
        )
    };
    println!("method: {}{conv}\n", sol.method);
    println!(
        "{:<16} {:>8} {:>9} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "class", "clients", "think s", "X /s", "R ms", "X upper", "X lower", "N*"
    );
    for c in &sol.classes {
        let b = &c.bounds;
        println!(
            "{:<16} {:>8} {:>9.3} {:>12.3} {:>12} {:>12.3} {:>12} {:>8.1}",
            c.name,
            if c.population == 0 {
                "open".to_string()
            } else {
                c.population.to_string()
            },
            c.think_time,
            c.throughput,
            ms(c.response_time),
            b.throughput_upper,
            b.throughput_lower.map_or("-".into(), |v| format!("{v:.3}")),
            b.n_star
        );
    }
    println!(
        "\n{:<16} {:>10} {:>12} {:>10} {:>8} {:>10} {:>14}",
        "station", "kind", "demand ms", "busy", "util %", "queue", "residence ms"
    );
    for s in &sol.stations {
        let demand: Vec<String> = s.demand.iter().map(|d| ms(*d)).collect();
        let residence: Vec<String> = s.residence.iter().map(|r| ms(*r)).collect();
        println!(
            "{:<16} {:>10} {:>12} {:>10.3} {:>8} {:>10.3} {:>14}",
            s.name,
            s.kind,
            demand.join("/"),
            s.busy,
            pct(s.utilization),
            s.queue,
            residence.join("/")
        );
    }
    println!("\nbottleneck: {}", sol.bottleneck);
}

fn print_curve(sol: &Solution) {
    if sol.curve.is_empty() {
        println!("\n(no curve: multi-class models report the final population only)");
        return;
    }
    println!(
        "\n{:>8} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "N", "X /s", "X upper", "X lower", "R ms", "R lower ms"
    );
    for p in &sol.curve {
        println!(
            "{:>8} {:>12.4} {:>12.4} {:>12.4} {:>12} {:>12}",
            p.population,
            p.throughput,
            p.bounds.throughput_upper,
            p.bounds.throughput_lower.unwrap_or(0.0),
            ms(p.response_time),
            ms(p.bounds.response_lower)
        );
    }
}

fn cmd_fit(a: FileArgs) -> Result<()> {
    let report = load(&a.file)?
        .fit_demands()
        .with_context(|| format!("fitting the demands of {}", a.file.display()))?;
    if a.json {
        return print_json(&report);
    }
    println!("{:<16} {:>14} {:>8}", "station", "demand ms", "points");
    for d in &report.demands {
        let src = if d.points == 0 { "  (stated)" } else { "" };
        println!(
            "{:<16} {:>14} {:>8}{src}",
            d.station,
            ms(d.demand),
            d.points
        );
    }
    println!("\nutilization law (busy cores = X * D):");
    println!(
        "{:<28} {:<12} {:>10} {:>10} {:>10}",
        "point", "station", "measured", "fitted", "residual"
    );
    for r in &report.residuals {
        println!(
            "{:<28} {:<12} {:>10.4} {:>10.4} {:>10.4}",
            r.label, r.station, r.measured, r.fitted, r.residual
        );
    }
    println!(
        "rms relative residual: {:.2} %",
        report.rms_relative_residual * 100.0
    );
    println!("\nresponse-time law (R = N/X - Z):");
    println!(
        "{:<28} {:>8} {:>12} {:>12} {:>10} {:>12}",
        "point", "clients", "R meas ms", "N/X-Z ms", "error %", "sum D ms"
    );
    for c in &report.response_law {
        println!(
            "{:<28} {:>8} {:>12} {:>12} {:>10} {:>12}{}",
            c.label,
            c.clients,
            c.measured_response.map_or("-".into(), ms),
            ms(c.law_response),
            c.error_pct.map_or("-".into(), |e| format!("{e:+.1}")),
            ms(c.demand_total),
            if c.demands_exceed_response {
                "  demands exceed R: measurements disagree"
            } else {
                ""
            }
        );
    }
    Ok(())
}

fn cmd_predict(a: PredictArgs) -> Result<()> {
    let path = &a.file.file;
    let file = load(path)?;
    let opts = options(&file, &a.file.solver);
    let sweep = Sweep {
        clients: a.clients,
        replicate: a.replicate,
        replicas: a.replicas,
    };
    let report = file
        .predict_sweep(&sweep, &opts)
        .with_context(|| format!("predicting from {}", path.display()))?;
    if a.file.json {
        return print_json(&report);
    }
    let PredictReport {
        replicated,
        rows,
        cost,
    } = report;
    if let Some(r) = &replicated {
        println!("replicated station: {r} (replicas are separate stations, visit ratio 1/m)");
    }
    println!(
        "{:>8} {:>8} {:>12} {:>12} {:<12} utilization %",
        "replicas", "clients", "X /s", "R ms", "bottleneck"
    );
    for r in &rows {
        let u: Vec<String> = r
            .utilization
            .iter()
            .map(|(s, u)| format!("{s} {:.1}", u * 100.0))
            .collect();
        println!(
            "{:>8} {:>8} {:>12.3} {:>12} {:<12} {}",
            r.replicas,
            r.clients,
            r.throughput,
            ms(r.response_time),
            r.bottleneck,
            u.join(", ")
        );
    }
    if !cost.is_empty() {
        println!(
            "\nthroughput per cost at {} clients (best first):",
            cost[0].clients
        );
        println!(
            "{:<40} {:>12} {:>12} {:>12} {:>14} {:<12}",
            "configuration", "X /s", "R ms", "cost", "X per 1000", "bottleneck"
        );
        for c in &cost {
            println!(
                "{:<40} {:>12.3} {:>12} {:>12.0} {:>14.4} {:<12}",
                c.name,
                c.throughput,
                ms(c.response_time),
                c.cost,
                c.throughput_per_kcost,
                c.bottleneck
            );
        }
    }
    Ok(())
}

fn cmd_validate(a: FileArgs) -> Result<()> {
    let file = load(&a.file)?;
    let opts = options(&file, &a.solver);
    let report = file
        .validation(&opts)
        .with_context(|| format!("validating {}", a.file.display()))?;
    if a.json {
        return print_json(&report);
    }
    let ValidationReport {
        validation: v,
        predicted_only,
        fit,
        fitted_from: fitted,
    } = report;
    if !file.name.is_empty() {
        println!("model: {}", file.name);
    }
    if let Some(r) = &fit {
        let d: Vec<String> = r
            .demands
            .iter()
            .map(|d| format!("{} {} ms", d.station, ms(d.demand)))
            .collect();
        println!(
            "demands fitted from {}: {}",
            fitted.join(", "),
            d.join(", ")
        );
    }
    println!(
        "\n{:<28} {:>7} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}  utilization busy cores meas/pred (err %)",
        "point", "clients", "X meas", "X pred", "err %", "R meas ms", "R pred ms", "err %"
    );
    for r in &v.rows {
        let u: Vec<String> = r
            .utilization
            .iter()
            .map(|u| {
                format!(
                    "{} {:.3}/{:.3} ({:+.1})",
                    u.station, u.measured, u.predicted, u.error_pct
                )
            })
            .collect();
        println!(
            "{:<28} {:>7} {:>10.2} {:>10.2} {:>+8.1} {:>10}{} {:>10} {:>+8.1}  {}{}",
            r.label,
            r.clients,
            r.measured_throughput,
            r.predicted_throughput,
            r.throughput_error_pct,
            ms(r.measured_response),
            if r.response_derived { "*" } else { " " },
            ms(r.predicted_response),
            r.response_error_pct,
            u.join(", "),
            if r.fitted { "  [fitted]" } else { "" }
        );
    }
    if v.rows.iter().any(|r| r.response_derived) {
        println!("* not measured: derived by the response-time law, R = N/X - Z");
    }
    for r in &predicted_only {
        println!(
            "{:<28} {:>7} {:>10} {:>10.2} {:>8} {:>10}  {:>10} {:>8}  (predicted; no measurement)",
            "-",
            r.clients,
            "-",
            r.throughput,
            "-",
            "-",
            ms(r.response_time),
            "-"
        );
    }
    println!(
        "\nlargest |error| over {} points: throughput {:.1} %, response time {:.1} %",
        if v.rows.iter().all(|r| r.fitted) {
            "the fitted"
        } else {
            "held-out"
        },
        v.max_abs_throughput_error_pct,
        v.max_abs_response_error_pct
    );
    Ok(())
}

fn cmd_convert(input: &Path, output: &Path) -> Result<()> {
    let r = load(input)?
        .render(output)
        .with_context(|| format!("converting {}", input.display()))?;
    std::fs::write(output, &r.text).with_context(|| format!("writing {}", output.display()))?;
    println!(
        "wrote {} ({}, from {}): {}",
        output.display(),
        r.format,
        input.display(),
        r.holds
    );
    if !r.left_out.is_empty() {
        println!("  not in this format: {}", r.left_out.join(", "));
    }
    Ok(())
}
