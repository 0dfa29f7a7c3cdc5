use super::*;

fn plan() -> Result<PeriodPlan, PeriodRefused> {
    Ok(PeriodPlan {
        settle: 1,
        measure: 2,
        pairs_min: 3,
        pairs_max: 10,
    })
}

fn facts(strategy: StrategyKind, cheap_undo: bool) -> Facts {
    Facts {
        strategy,
        cheap_undo,
        split: Err("the kernel refused the write".into()),
        sibling: None,
        periods: plan(),
    }
}

#[test]
fn a_change_undone_cheaply_is_switched_back_and_forth_unless_its_signal_cannot_be() {
    let c = choose(&facts(StrategyKind::CacheAffinity, true));
    assert_eq!(c.kind, DesignKind::Switchback);
    assert!(
        c.why.contains("periods of 3 windows (1 settling)"),
        "{}",
        c.why
    );
    let mut f = facts(StrategyKind::ReadAhead, true);
    f.periods = Err(PeriodRefused {
        why: "its windows of 8 s do not fit".into(),
    });
    let c = choose(&f);
    assert_eq!(c.kind, DesignKind::BeforeAfter);
    assert!(c.why.contains("its windows of 8 s do not fit"), "{}", c.why);
}

#[test]
fn huge_pages_take_a_control_where_a_sibling_exists_then_switchback_where_they_split_else_one_way()
{
    let mut f = facts(StrategyKind::LargePages, false);
    let c = choose(&f);
    assert_eq!(c.kind, DesignKind::OneWay);
    assert!(c.why.contains("the kernel refused the write"), "{}", c.why);
    f.split = Ok(());
    assert_eq!(choose(&f).kind, DesignKind::Switchback);
    f.sibling = Some("sharedcache (pid 42)".into());
    let c = choose(&f);
    assert_eq!(c.kind, DesignKind::Control);
    assert!(
        c.why.contains("sharedcache (pid 42) is left as it is"),
        "{}",
        c.why
    );
}

#[test]
fn every_end_reason_has_a_label_of_its_own_and_only_bad_data_abandons() {
    let all = [
        EndReason::Complete,
        EndReason::WorkloadExited,
        EndReason::SignalFailed {
            times: 7,
            error: "refused".into(),
        },
        EndReason::ManualMask {
            pid: 1,
            mask: "0".into(),
        },
        EndReason::NothingApplied {
            problem: "no memory".into(),
        },
        EndReason::NotSettled { dropped: 30 },
        EndReason::Restarted { pid: 2 },
        EndReason::RestMoved {
            before: 0.1,
            after: 1.0,
        },
        EndReason::ControlLost {
            control: "redis".into(),
        },
        EndReason::SplitRefused {
            error: "EPERM".into(),
        },
        EndReason::TimeBound { after_s: 330.0 },
    ];
    let labels: Vec<&str> = all.iter().map(|e| e.label()).collect();
    assert_eq!(labels, EndReason::LABELS);
    let abandoned: Vec<&str> = all
        .iter()
        .filter(|e| e.abandoned())
        .map(|e| e.label())
        .collect();
    assert_eq!(abandoned, ["restarted", "rest_moved"]);
    assert!(
        all[2]
            .to_string()
            .contains("failed 7 times in a row: refused")
    );
}
