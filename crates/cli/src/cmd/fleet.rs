//! `perfpilot fleet status`: the fleet's verdicts and its daemons, read from Prometheus.

use std::time::Duration;

use clap::{Args, Subcommand};
use perfpilot_export::fleet_status::FleetStatus;
use perfpilot_optimize::fleet::Prometheus;

use crate::fmt;

#[derive(Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    what: FleetWhat,
}

#[derive(Subcommand)]
enum FleetWhat {
    /// Per workload signature × strategy: hosts that tried it, kept, reverted, neutral; the
    /// median gain and its range; daemons down or with a stretched interval.
    Status(StatusArgs),
    /// Run one PromQL instant query and print each series: labels and value.
    Query(QueryArgs),
}

#[derive(Args)]
struct QueryArgs {
    /// The Prometheus to ask (http://host:9090).
    #[arg(long, value_name = "URL")]
    prometheus: String,
    /// How long the query may take.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// JSON (a list of {labels, value}) instead of text.
    #[arg(long)]
    json: bool,
    /// The PromQL expression.
    expr: String,
}

#[derive(Args)]
struct StatusArgs {
    /// The Prometheus that scrapes the daemons (http://host:9090).
    #[arg(long, value_name = "URL")]
    prometheus: String,
    /// The scrape job of the daemons.
    #[arg(long, default_value = "perfpilot")]
    job: String,
    /// How long each query may take.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: FleetArgs) -> anyhow::Result<()> {
    match a.what {
        FleetWhat::Status(s) => status(s),
        FleetWhat::Query(q) => query(q),
    }
}

fn query(a: QueryArgs) -> anyhow::Result<()> {
    let samples = Prometheus::new(&a.prometheus, a.timeout).query(&a.expr)?;
    if a.json {
        let v: Vec<serde_json::Value> = samples
            .iter()
            .map(|s| serde_json::json!({ "labels": s.labels, "value": s.value }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for s in &samples {
        let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        println!("{{{}}} {}", labels.join(", "), s.value);
    }
    Ok(())
}

fn status(a: StatusArgs) -> anyhow::Result<()> {
    let prom = Prometheus::new(&a.prometheus, a.timeout);
    let st = FleetStatus::read(&prom, &a.job)?;
    if a.json {
        let rows: Vec<serde_json::Value> = st
            .rows()
            .iter()
            .map(|((sig, strategy), o)| {
                serde_json::json!({
                    "signature": sig, "workload": o.workload, "strategy": strategy,
                    "tried": o.tried(), "kept": o.kept, "reverted": o.reverted, "neutral": o.neutral,
                    "median_gain": (!o.gains.is_empty()).then(|| o.median_gain()),
                    "gain_range": o.gain_range(), "hosts": o.hosts,
                })
            })
            .collect();
        let notes: Vec<serde_json::Value> = st
            .notes
            .iter()
            .map(|n| serde_json::json!({ "instance": n.instance, "what": n.what }))
            .collect();
        let out = serde_json::json!({
            "daemons": st.daemons, "up": st.up, "verdicts": rows, "hosts": notes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "fleet: {} daemons scraped by {}, {} up",
        st.daemons,
        prom.url(),
        st.up
    );
    for n in &st.notes {
        println!("host {}: {}", n.instance, n.what);
    }
    if st.tally.pairs.is_empty() {
        println!("\nno verdicts yet");
        return Ok(());
    }
    println!(
        "\n{:<18} {:<20} {:<16} {:>5} {:>5} {:>8} {:>7}  GAIN (median [min, max])",
        "SIGNATURE", "WORKLOAD", "STRATEGY", "TRIED", "KEPT", "REVERTED", "NEUTRAL"
    );
    for ((sig, strategy), o) in st.rows() {
        let gain = match o.gain_range() {
            Some((lo, hi)) => format!("x{:.3} [{lo:.3}, {hi:.3}]", o.median_gain()),
            None => "-".into(),
        };
        println!(
            "{:<18} {:<20} {:<16} {:>5} {:>5} {:>8} {:>7}  {gain}",
            sig,
            fmt::trunc(&o.workload, 20),
            strategy,
            o.tried(),
            o.kept,
            o.reverted,
            o.neutral
        );
    }
    Ok(())
}
