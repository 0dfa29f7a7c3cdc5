//! The fleet's say in proposals, and the class status gives each workload.

use std::collections::BTreeMap;

use super::{engine, propose_steady, rates, two_threads};
use crate::engine::WorkloadClass;
use crate::fleet::{Outcome, Priors};
use crate::tunables::Level;

fn priors(signature: &str, strategy: &str, kept: usize, reverted: usize) -> Priors {
    let mut pairs = BTreeMap::new();
    pairs.insert(
        (signature.to_string(), strategy.to_string()),
        Outcome {
            kept,
            reverted,
            ..Outcome::default()
        },
    );
    Priors {
        pairs,
        quorum: 0.5,
        min_hosts: 2,
    }
}

#[test]
fn a_strategy_reverted_on_two_hosts_is_skipped_on_the_third_and_status_says_so() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    e.set_fleet(Some(priors(&w.signature, "cache_affinity", 0, 2)));
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert_eq!(
        states[&w.signature],
        "optimized: nothing more to do; cache_affinity skipped: fleet: reverted on 2 of 2 hosts"
    );
    assert!(e.actions.trials.is_empty());
    assert!(e.store.actions(false, 10).unwrap().is_empty());
    // Without the fleet (Prometheus down: no priors), the host decides alone and tries it.
    e.set_fleet(None);
    let states = propose_steady(&mut e, &w, &rates(2, 0.0));
    assert!(
        states[&w.signature].starts_with("trial of cache_affinity (action 1)"),
        "{states:?}"
    );
}

#[test]
fn a_strategy_kept_on_most_hosts_is_tried_first_and_status_says_why() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    e.set_fleet(Some(priors(&w.signature, "cache_affinity", 3, 1)));
    let states = propose_steady(&mut e, &w, &rates(2, 0.0));
    assert!(
        states[&w.signature].starts_with(
            "trial of cache_affinity (action 1), first: fleet: kept on 3 of 4 hosts; "
        ),
        "{states:?}"
    );
}

#[test]
fn status_classes_workloads_as_excluded_or_needing_a_signal() {
    let (_tmp, mut e) =
        engine("[[workload]]\nmatch = { comm = \"other\" }\naction = \"exclude\"\n");
    let w = two_threads(0.3);
    let r = rates(2, 0.0);
    let choice = e.signal_choice(&w, &r);
    // The fixture workload has a CPU signal at least: managed.
    assert_eq!(e.class_of(&w, true, &choice), WorkloadClass::Managed);
    let (_tmp2, mut ex) = engine(&format!(
        "[[workload]]\nmatch = {{ comm = \"{}\" }}\naction = \"exclude\"\n",
        w.comm
    ));
    let choice = ex.signal_choice(&w, &r);
    assert_eq!(ex.class_of(&w, true, &choice), WorkloadClass::Excluded);
    let mut no_signal = choice.clone();
    no_signal.signal = Err("none".into());
    assert_eq!(e.class_of(&w, true, &no_signal), WorkloadClass::NeedsSignal);
    e.tun.allow_unverified = true;
    assert_eq!(e.class_of(&w, true, &no_signal), WorkloadClass::Managed);
}
