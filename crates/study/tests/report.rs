//! The report of a stored run with known figures: race and confirmation kept apart, the
//! winner's and the baseline's figures quoted with the gain, and the apply script deploying the
//! baseline when the winner is not shown better than it (the winner's with `force`).

use std::path::Path;

use perfpilot_drive::{LoadShape, Measurement};
use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{RunState, Store, TrialPhase, TrialRecord, TrialStatus};
use perfpilot_study::report::{self, ReportOptions};
use perfpilot_study::stats::RatioCi;
use perfpilot_study::summary::ConfigSummary;
use perfpilot_study::trial::TrialDetail;
use perfpilot_study::{Study, Summary, plan};

const STUDY: &str = r#"
name = "known"
[deployment]
command = "app --port {port} --x {x}"
[load]
url = "http://127.0.0.1:{port}/"
[factors]
x = [1, 2]
[run]
repetitions = 4
confirm_rounds = 2
"#;

const BASELINE: &str = "x=1";
const WINNER: &str = "x=2";

/// Race rounds 1–4 (x=1: 100, 102, 98, 100; x=2: 110, 112, 108, 110) and confirmation rounds
/// 1–2 where the winner fell to 90 and 92 against the baseline's 100 and 100: a mean over both
/// phases would put the winner at 105.33 instead of its race mean 110.
const VALUES: [(TrialPhase, i64, &str, f64); 12] = [
    (TrialPhase::Race, 1, BASELINE, 100.0),
    (TrialPhase::Race, 1, WINNER, 110.0),
    (TrialPhase::Race, 2, BASELINE, 102.0),
    (TrialPhase::Race, 2, WINNER, 112.0),
    (TrialPhase::Race, 3, BASELINE, 98.0),
    (TrialPhase::Race, 3, WINNER, 108.0),
    (TrialPhase::Race, 4, BASELINE, 100.0),
    (TrialPhase::Race, 4, WINNER, 110.0),
    (TrialPhase::Confirm, 1, BASELINE, 100.0),
    (TrialPhase::Confirm, 1, WINNER, 90.0),
    (TrialPhase::Confirm, 2, BASELINE, 100.0),
    (TrialPhase::Confirm, 2, WINNER, 92.0),
];

/// A store holding run 1 of [`STUDY`] with [`VALUES`] (throughput = the objective) and a
/// summary whose gain is `gain`.
fn stored(dir: &Path, gain: RatioCi) -> Store {
    let study = Study::parse(STUDY, Path::new("known.toml")).unwrap();
    let topo = Topology::read(&Fs::live()).unwrap();
    let mut store = Store::open(dir.join("s.db")).unwrap();
    let run = store
        .study_begin(&study.name, "known.toml", STUDY, "{}")
        .unwrap();
    for (phase, round, key, value) in VALUES {
        let config = study
            .configurations()
            .into_iter()
            .find(|c| c.key() == key)
            .unwrap();
        let layout = plan(
            &topo,
            config.instances(),
            config.cores_per_instance(),
            config.binding(),
        )
        .unwrap();
        let detail = TrialDetail {
            layout: Some(layout),
            ..TrialDetail::default()
        };
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 4,
                think_time: "0".into(),
            },
        );
        m.throughput_rps = value;
        store
            .trial_add(&TrialRecord {
                id: 0,
                study: run,
                phase,
                round,
                config: key.into(),
                factors: serde_json::to_string(&config).unwrap(),
                status: TrialStatus::Ok,
                reason: String::new(),
                value: Some(value),
                measurement: Some(m.to_json()),
                detail: serde_json::to_string(&detail).unwrap(),
                created_ms: 0,
            })
            .unwrap();
    }
    let verdict = if gain.low > 1.0 {
        format!("better than the baseline: gain ×{:.3}", gain.ratio)
    } else {
        format!(
            "not significantly different from the baseline: ×{:.3}",
            gain.ratio
        )
    };
    let figures = |key: &str| ConfigSummary {
        config: key.into(),
        trials: 0,
        ok: 0,
        mean: None,
        stdev: None,
        throughput: None,
        cpu_cores: None,
        eliminated_round: None,
    };
    // Figures as a run before the phases were kept apart stored them: the report reads them
    // again from the trials.
    let summary = Summary {
        goal: "maximize throughput (requests/s)".into(),
        unit: "req/s".into(),
        higher_is_better: true,
        baseline: BASELINE.into(),
        winner: Some(WINNER.into()),
        gain: Some(gain),
        gain_p_value: Some(0.2),
        verdict,
        configurations: vec![figures(BASELINE), figures(WINNER)],
        rounds: 4,
        trials_run: 12,
        elapsed_s: 60.0,
        racing: true,
        ..Summary::default()
    };
    let json = serde_json::to_string(&summary).unwrap();
    store
        .study_set_state(run, RunState::Done, Some(&json))
        .unwrap();
    store
}

const NOT_SHOWN: RatioCi = RatioCi {
    ratio: 1.022,
    low: 0.867,
    high: 1.204,
    pairs: 6,
};

#[test]
fn race_and_confirmation_figures_are_kept_apart_and_both_sides_are_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let store = stored(dir.path(), NOT_SHOWN);
    let r = report::build(&store, 1).unwrap();
    let sum = r.summary.as_ref().unwrap();
    let race = |k: &str| sum.configurations.iter().find(|c| c.config == k).unwrap();
    assert_eq!(race(WINNER).trials, 4);
    assert_eq!(race(WINNER).mean, Some(110.0), "race rounds only");
    assert_eq!(race(BASELINE).mean, Some(100.0));
    let confirm = |k: &str| sum.confirmation.iter().find(|c| c.config == k).unwrap();
    assert_eq!(confirm(WINNER).trials, 2);
    assert_eq!(confirm(WINNER).mean, Some(91.0));
    assert_eq!(confirm(BASELINE).mean, Some(100.0));
    // Over the six rounds both completed: (440 + 182) / 6 and 600 / 6.
    let a = sum.against_baseline.as_ref().unwrap();
    assert_eq!(a.rounds, 6);
    assert!((a.winner.value - 622.0 / 6.0).abs() < 1e-9, "{a:?}");
    assert_eq!(a.baseline.throughput, Some(100.0));

    let md = report::to_markdown(&r);
    let race_table = md
        .split("### Configurations in the race (race trials only)")
        .nth(1)
        .and_then(|t| t.split("### Confirmation").next())
        .unwrap_or_else(|| panic!("a race table, then a confirmation table:\n{md}"));
    assert!(race_table.contains("| x=2 | 4 | 4 | 110.00 |"), "{md}");
    assert!(md.contains("| x=2 | 2 | 2 | 91.00 |"), "{md}");
    assert!(
        md.contains(
            "Means over the 6 rounds both completed (race and confirmation): x=2 103.7 req/s; the baseline x=1 100.0 req/s."
        ),
        "{md}"
    );
    assert!(
        md.contains("Gain over the baseline: ×1.022, 95 % CI 0.867–1.204"),
        "{md}"
    );
    assert!(md.contains("## Race trials") && md.contains("## Confirmation trials"));
    let html = report::to_html(&r);
    for heading in [
        "<h3>Configurations in the race (race trials only)</h3>\n<table>",
        "<h3>Confirmation (paired rounds of the winner and the baseline after the race)</h3>\n<table>",
        "<h2>Race trials</h2>\n<table>",
        "<h2>Confirmation trials</h2>\n<table>",
    ] {
        assert!(html.contains(heading), "{heading}:\n{html}");
    }
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&r)).unwrap();
    assert_eq!(json["summary"]["confirmation"][0]["trials"], 2);
}

#[test]
fn a_winner_not_shown_better_gets_the_baselines_apply_script_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let store = stored(dir.path(), NOT_SHOWN);
    let r = report::build(&store, 1).unwrap();
    let apply = r.apply.as_ref().expect("the baseline's script");
    assert_eq!(apply.config, BASELINE);
    assert!(
        apply.shell.starts_with(
            "#!/bin/sh\n# NOTE: this deploys the BASELINE x=1, not the race's winner x=2"
        ),
        "{}",
        apply.shell
    );
    assert!(apply.shell.contains("--x 1 &"), "{}", apply.shell);
    let note = r.apply_note.as_deref().unwrap();
    assert!(note.contains("--force"), "{note}");
    assert!(report::to_markdown(&r).contains("## Apply script (x=1)"));

    let forced = report::build_with(&store, 1, ReportOptions { force: true }).unwrap();
    let apply = forced.apply.as_ref().expect("the winner's script");
    assert_eq!(apply.config, WINNER);
    assert!(
        apply
            .shell
            .starts_with("#!/bin/sh\n# CAUTION: this deploys the race's winner x=2, which is NOT shown significantly better"),
        "{}",
        apply.shell
    );
    assert!(apply.shell.contains("--x 2 &"), "{}", apply.shell);
    // Said on stderr too when the script runs.
    assert!(apply.shell.contains(">&2\n"), "{}", apply.shell);
}

#[test]
fn a_winner_shown_better_gets_its_own_apply_script() {
    let dir = tempfile::tempdir().unwrap();
    let better = RatioCi {
        ratio: 1.10,
        low: 1.05,
        high: 1.15,
        pairs: 6,
    };
    let store = stored(dir.path(), better);
    let r = report::build(&store, 1).unwrap();
    let apply = r.apply.as_ref().unwrap();
    assert_eq!(apply.config, WINNER);
    assert!(
        apply.shell.starts_with(
            "#!/bin/sh\n# Deploys the best configuration of study \"known\" (perfpilot study run 1):"
        ),
        "{}",
        apply.shell
    );
    assert!(!apply.shell.contains("NOTE") && !apply.shell.contains("CAUTION"));
    assert_eq!(r.apply_note, None);
}

#[test]
fn a_baseline_that_won_is_quoted_with_its_race_mean() {
    let dir = tempfile::tempdir().unwrap();
    let store = stored(dir.path(), NOT_SHOWN);
    let mut sum = report::build(&store, 1).unwrap().summary.unwrap();
    sum.winner = Some(BASELINE.into());
    sum.against_baseline = None;
    assert_eq!(
        report::figures_line(&sum).as_deref(),
        Some("the baseline x=1's mean over its 4 completed race trials: 100.0 req/s")
    );
    sum.winner = None;
    assert_eq!(report::figures_line(&sum), None, "no winner, no figures");
}
