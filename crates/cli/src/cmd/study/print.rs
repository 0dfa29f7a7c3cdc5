//! The text `perfpilot study` prints for a validation, a run, a load sweep, a replay and the
//! comparison of two runs.

use std::path::Path;

use perfpilot_study::compare::{Agreement, Comparison, Side};
use perfpilot_study::replay::Replay;
use perfpilot_study::report::{chance_best_line, figures_line, iteration_line};
use perfpilot_study::spec::{Finding, Method};
use perfpilot_study::{RunOutcome, Scaling, Validation};

/// `study validate`: the study, what a run needs that this machine lacks (`findings`), where
/// each configuration runs, the trials, time and budget.
pub(super) fn print_validation(v: &Validation, findings: &[Finding]) {
    let (study, plan) = (&v.study, &v.plan);
    let errors = findings.iter().filter(|f| f.is_error()).count();
    let iterated = plan.method == Method::Iterated;
    // A grid counts its configurations; an iterated search's space may only be estimated.
    let size = match iterated {
        false => format!("{} configuration(s)", plan.configurations),
        true => format!("a space of {}", plan.size),
    };
    if errors == 0 {
        println!(
            "{}: study {:?} is valid: {} factor(s), {size}, {} runnable here",
            study.path.display(),
            study.name,
            study.factors.len(),
            plan.feasible
        );
    } else {
        println!(
            "{}: study {:?} cannot run here as it stands: {errors} error(s); {} factor(s), {size}, {} with a layout here",
            study.path.display(),
            study.name,
            study.factors.len(),
            plan.feasible
        );
    }
    for f in findings {
        println!("{f}");
    }
    println!("objective: {}", study.objective.goal.describe());
    if !study.objective.constraints.is_empty() {
        println!("constraints: {}", study.objective.constraints.join(", "));
    }
    println!("baseline: {}", study.run.baseline);
    if iterated {
        print_space(v);
    }
    for (c, layout) in &v.layouts {
        match layout {
            Ok(l) => {
                let sets: Vec<String> = l
                    .instances
                    .iter()
                    .map(|i| {
                        if i.bound {
                            i.cpuset.to_string()
                        } else {
                            "unbound".into()
                        }
                    })
                    .collect();
                println!("  {c}: CPUs {}", sets.join(" | "));
            }
            Err(e) => println!("  {c}: cannot run here: {e}"),
        }
    }
    if iterated {
        println!(
            "trials: at most {} (run.budget, with {} for the confirmation), each ~{:.0} s; an exhaustive run with {} repetitions would take {}",
            plan.max_trials,
            plan.confirm_trials,
            plan.seconds_per_trial,
            study.run.repetitions,
            plan.exhaustive_trials
        );
    } else {
        println!(
            "trials: at most {} ({} repetitions × {} configurations + {} confirmation), each ~{:.0} s",
            plan.max_trials,
            study.run.repetitions,
            plan.feasible,
            plan.confirm_trials,
            plan.seconds_per_trial
        );
    }
    println!(
        "estimated duration: at most {}{}",
        perfpilot_units::clock(plan.max_duration),
        if study.run.racing {
            " (racing usually stops earlier)"
        } else {
            ""
        }
    );
    if let Some(b) = &v.budget {
        let n = b.trials;
        println!(
            "budget: {}, at most {n} trials with the confirmation (~{}); the race ends before a round that would pass it",
            b.budget,
            perfpilot_units::clock(b.duration)
        );
        if !iterated && !b.reaches_first_test() {
            println!(
                "warning: run.budget ({n} trials) holds fewer than min_rounds ({}) rounds of the {} configurations and the confirmation ({} trials): the race may end before its first rank test",
                study.run.min_rounds, plan.feasible, b.first_test_trials
            );
        }
    }
}

/// An iterated search's space and schedule: the parameters with their domains and
/// conditions, the forbidden rules, the iterations as planned.
fn print_space(v: &Validation) {
    let study = &v.study;
    println!("search: iterated racing over a space of {}", v.plan.size);
    for f in &study.factors {
        let when = f
            .when
            .as_ref()
            .map_or(String::new(), |w| format!(" when {w}"));
        println!("  {}: {}{when}", f.name, f.domain.describe());
    }
    for rule in &study.search.forbidden {
        println!("  forbidden: {rule}");
    }
    for c in &study.search.initial {
        println!("  initial: {c}");
    }
    if let Some(it) = &v.iterations {
        let s = &it.schedule;
        let steps: Vec<String> = it
            .steps
            .iter()
            .enumerate()
            .map(|(j, (b, n))| format!("{}: {n} configurations, {b} trials", j + 1))
            .collect();
        println!(
            "iterations: {} (elites kept {}, first test after {} rounds), {} race trials: {}; final selection among the elites: {} trials and what the iterations leave",
            s.iterations,
            s.elites,
            s.first_test,
            it.race_trials,
            steps.join("; "),
            it.final_trials
        );
    }
    println!("layouts (one configuration each):");
}

/// `study run`: the run's trials, who left the race, the winner and its evidence.
pub(super) fn print_run(out: &RunOutcome, path: &Path) {
    let s = &out.summary;
    println!(
        "study run {} ({}): {} trials in {} rounds, {:.0} s",
        out.run,
        path.display(),
        s.trials_run,
        s.rounds,
        s.elapsed_s
    );
    // Race trials of the whole run against every feasible configuration in every round;
    // confirmation is extra in both.
    if s.racing && out.exhaustive_race_trials > 0 {
        let (raced, all) = (out.race_trials, out.exhaustive_race_trials);
        println!(
            "  raced: {raced} race trials of the {all} an exhaustive run takes ({:.1} %)",
            100.0 * raced as f64 / all as f64
        );
    }
    match &s.search {
        // Hundreds of configurations leave an iterated search: its iterations tell it.
        Some(search) => {
            for it in &search.iterations {
                println!("  {}", iteration_line(it));
            }
        }
        None => {
            for e in &s.eliminated {
                println!(
                    "  left the race after round {}: {} — {}",
                    e.round, e.config, e.reason
                );
            }
        }
    }
    match &s.winner {
        Some(w) => println!("best: {w}\n  {}", s.verdict),
        None => println!("no winner: {}", s.verdict),
    }
    if let Some(line) = figures_line(s) {
        println!("  {line}");
    }
    if !s.indistinguishable.is_empty() {
        println!(
            "  not significantly different from it (or equivalent, or tied within the rounds run): {}",
            s.indistinguishable.join("; ")
        );
    }
    if let Some(line) = chance_best_line(&s.chance_best) {
        println!("  {line}");
    }
    for w in &s.warnings {
        println!("warning: {w}");
    }
    for n in &s.notes {
        println!("note: {n}");
    }
    println!(
        "report: perfpilot study report {} --store {} [--html|--md|--json] [--apply DIR]",
        out.run,
        path.display()
    );
}

/// `study scale`: the sweep's points, saturation and knee, and the model file's measurements.
pub(super) fn print_scaling(s: &Scaling) {
    println!("load sweep of {} (study run {})", s.config, s.run);
    println!(
        "{:>6} {:>12} {:>12} {:>10} {:>8} {:>10} {:>13}",
        "users", "req/s", "mean ms", "p99 ms", "errors", "CPU cores", "driver cores"
    );
    for p in &s.points {
        println!(
            "{:>6} {:>12.1} {:>12.2} {:>10.2} {:>8} {:>10.2} {:>13.2}",
            p.users,
            p.throughput,
            p.response_time_s.unwrap_or(f64::NAN) * 1000.0,
            p.p99_ms.unwrap_or(f64::NAN),
            p.errors,
            p.cpu.get("app").copied().unwrap_or(f64::NAN),
            p.driver_cores.unwrap_or(f64::NAN)
        );
    }
    for (u, r) in &s.failed {
        println!("{u} users: failed: {r}");
    }
    for w in &s.warnings {
        println!("warning: {w}");
    }
    println!(
        "saturation (95 % of peak throughput): {} users; knee (max throughput/response time): {} users",
        s.saturation_users.map_or("–".into(), |u| u.to_string()),
        s.knee_users.map_or("–".into(), |u| u.to_string())
    );
    println!("\n# points for a model file ([[measurements]], perfpilot model fit):");
    print!("{}", s.model_toml(0.0));
}

/// `study replay`: the exhaustive run, the race in its stored order and over shuffled orders.
pub(super) fn print_replay(run: i64, r: &Replay) {
    let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
    let first = &r.stored_order;
    println!(
        "exhaustive run {run}: {} race trials over {} rounds; winner {}",
        r.exhaustive_trials,
        r.rounds,
        r.exhaustive_winner.as_deref().unwrap_or("–")
    );
    if !r.exhaustive_not_worse.is_empty() {
        println!(
            "  not significantly worse than it over every round: {}",
            r.exhaustive_not_worse.join("; ")
        );
    }
    if let Some(line) = chance_best_line(&r.exhaustive_chance_best) {
        println!("  {line}");
    }
    println!(
        "race in the stored order: {} trials ({:.1} % of exhaustive) in {} rounds; winner {}",
        first.trials,
        pct(first.trials as f64, r.exhaustive_trials as f64),
        first.rounds,
        first.winner.as_deref().unwrap_or("–")
    );
    for e in &first.left {
        println!("  round {}: {} — {}", e.round, e.config, e.reason);
    }
    println!(
        "over {} round orders: race trials mean {:.1} ({:.1} % of exhaustive), min {}, max {}, over half in {} ({:.1} %); same winner {} ({:.1} %); a winner the exhaustive run cannot tell from its own {} ({:.1} %)",
        r.orders,
        r.trials_mean,
        pct(r.trials_mean, r.exhaustive_trials as f64),
        r.trials_min,
        r.trials_max,
        r.over_half,
        pct(r.over_half as f64, r.orders as f64),
        r.same_winner,
        pct(r.same_winner as f64, r.orders as f64),
        r.acceptable_winner,
        pct(r.acceptable_winner as f64, r.orders as f64)
    );
    println!(
        "  the races' winners, judged on every exhaustive round: {:.1} % of the exhaustive winner's score on average, {:.1} % at worst",
        100.0 * r.winner_share_mean,
        100.0 * r.winner_share_min
    );
    if r.budget_ended > 0 {
        println!(
            "  run.budget ended the race in {} orders ({:.1} %)",
            r.budget_ended,
            pct(r.budget_ended as f64, r.orders as f64)
        );
    }
}

/// The comparison of runs named `la` and `lb`.
pub(super) fn print_comparison(c: &Comparison, la: &str, lb: &str) {
    if let Some(x) = &c.cross {
        super::cross::print_machines(x, la, lb);
    }
    if !c.same_study {
        println!("note: {la} and {lb} ran different study files");
    }
    print_side(&c.a, la, &c.b, lb);
    print_side(&c.b, lb, &c.a, la);
    if let Some(p) = &c.pooled {
        println!(
            "over both runs' rounds: {la}'s winner vs {lb}'s ×{:.3} (95 % CI {:.3}–{:.3}, {} rounds)",
            p.ratio, p.low, p.high, p.pairs
        );
    }
    if c.contradict {
        println!(
            "the runs contradict each other: each separates its own winner from the other's, so their order changed with the machine's conditions between the runs"
        );
    }
    let better = match &c.pooled {
        Some(p) if p.ratio >= 1.0 => la,
        _ => lb,
    };
    println!(
        "{}",
        match c.agreement {
            Agreement::SameWinner => "agree: the same winner".to_string(),
            Agreement::NotSignificantlyDifferent if c.pooled.is_some() =>
                "agree within what the runs resolve: different winners, not significantly different over both runs' rounds (the 95 % interval of their ratio includes 1); either is a sound pick"
                    .to_string(),
            Agreement::NotSignificantlyDifferent =>
                "agree within what the runs resolve: different winners, and neither run separates them"
                    .to_string(),
            Agreement::Disagree if c.pooled.is_some() => format!(
                "disagree: over both runs' rounds {better}'s winner is significantly better; run more rounds or longer measurements before choosing"
            ),
            Agreement::Disagree =>
                "disagree: a run dropped the other's winner as worse, and they share too few rounds to compare them directly"
                    .to_string(),
            Agreement::NoWinner => "no comparison: a run has no winner".to_string(),
        }
    );
    if let Some(x) = &c.cross {
        super::cross::print_ratios(x, la, lb);
    }
}

/// One run's view of the other run's winner (`me_label`, `other_label`: how to name them).
fn print_side(me: &Side, me_label: &str, other: &Side, other_label: &str) {
    println!("{me_label}: winner {}", me.winner.as_deref().unwrap_or("–"));
    let Some(o) = other
        .winner
        .as_deref()
        .filter(|o| Some(*o) != me.winner.as_deref())
    else {
        return;
    };
    if let Some(e) = &me.other_left {
        println!(
            "  {other_label}'s winner left this race after round {}: {}",
            e.round, e.reason
        );
    } else if me.holds_other {
        println!("  {other_label}'s winner {o} is among those it cannot tell from its own");
    }
    if let Some(r) = &me.ratio {
        println!(
            "  its winner vs {other_label}'s, paired over its rounds: ×{:.3} (95 % CI {:.3}–{:.3}, {} rounds): {}",
            r.ratio,
            r.low,
            r.high,
            r.pairs,
            if me.separates {
                "separated"
            } else {
                "not significantly different"
            }
        );
    }
}
