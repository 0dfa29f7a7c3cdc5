//! What the log says of an applied step.

use perfpilot_sys::change::{Applied, Change};
use perfpilot_sys::collapse::{CollapseFailure, CollapseOutcome, RangeFailure};

use super::super::apply::outcome;

const MIB: u64 = 1 << 20;

fn failure(start: u64, len: u64, errno: i32, reason: CollapseFailure) -> RangeFailure {
    RangeFailure {
        start,
        len,
        errno,
        reason,
    }
}

/// A collapse step over `ranges` (MiB each) that `o` reports on.
fn step(ranges: &[u64], o: CollapseOutcome) -> (Change, Applied) {
    let c = Change::Collapse {
        pid: 100,
        ranges: ranges
            .iter()
            .enumerate()
            .map(|(i, len)| ((i as u64 + 1) << 30, len * MIB))
            .collect(),
    };
    (c, Applied::Collapse(o))
}

#[test]
fn a_partly_collapsed_step_is_one_line_of_sizes_with_the_skipped_ranges_detailed_apart() {
    let (c, a) = step(
        &[1024, 2, 2],
        CollapseOutcome {
            ranges_ok: 1,
            bytes_ok: 1024 * MIB,
            failed: vec![
                failure(2 << 30, 2 * MIB, 22, CollapseFailure::Ineligible),
                failure(3 << 30, 2 * MIB, 22, CollapseFailure::Ineligible),
            ],
            vanished_bytes: 0,
        },
    );
    let o = outcome(&c, &a);
    assert!(o.effective);
    assert_eq!(
        o.summary,
        "1024 of 1028 MiB collapsed; 2 ranges (4 MiB) skipped: not populated (or not eligible for huge pages)"
    );
    assert_eq!(o.details.len(), 2);
    assert!(
        o.details[0].starts_with("not collapsed: 0x80000000+0x200000: range cannot be collapsed"),
        "{}",
        o.details[0]
    );
}

#[test]
fn ranges_skipped_for_different_reasons_are_grouped_by_reason() {
    let (c, a) = step(
        &[1024, 2],
        CollapseOutcome {
            ranges_ok: 0,
            bytes_ok: 96 * MIB,
            failed: vec![
                failure(1 << 30, 928 * MIB, 12, CollapseFailure::NoMemory),
                failure(2 << 30, 2 * MIB, 22, CollapseFailure::Ineligible),
            ],
            vanished_bytes: 0,
        },
    );
    assert_eq!(
        outcome(&c, &a).summary,
        "96 of 1026 MiB collapsed; 2 ranges (930 MiB) skipped: 1 (928 MiB) no free huge page (or not mapped), 1 (2 MiB) not populated (or not eligible for huge pages)"
    );
}

#[test]
fn a_collapse_that_did_nothing_because_the_process_exited_says_so() {
    let (c, a) = step(
        &[64],
        CollapseOutcome {
            vanished_bytes: 64 * MIB,
            ..CollapseOutcome::default()
        },
    );
    let o = outcome(&c, &a);
    assert!(!o.effective);
    assert_eq!(
        o.summary,
        "0 of 64 MiB collapsed; 64 MiB not tried: the process exited"
    );
    assert!(o.details.is_empty());
}
