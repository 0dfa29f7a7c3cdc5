//! Block devices and read-ahead: which devices the strategy is asked about
//! (`read_ahead_devices`), and which workload judges a device's action.

use perfpilot_observe::{Rates, Sample};

use super::{app_rate, engine, rates, two_threads};
use crate::engine::Engine;

/// Two samples 1 s apart from the fixture, in which `devices` each read 5,000 single pages,
/// none merged (random reads: the strategy would lower their read-ahead to 32 KiB).
fn random_reads(e: &mut Engine, devices: &[&str]) -> (Sample, Sample) {
    let prev = e.watch.sampler.sample().expect("a sample of the fixture");
    let mut cur = prev.clone();
    for d in cur
        .disks
        .iter_mut()
        .filter(|d| devices.contains(&d.name.as_str()))
    {
        d.reads += 5000;
        d.sectors_read += 5000 * 8;
    }
    (prev, cur)
}

fn device_trials(e: &Engine) -> Vec<(String, String)> {
    e.actions
        .trials
        .iter()
        .filter(|t| t.signature.starts_with("device:"))
        .map(|t| (t.signature.clone(), t.judge.clone()))
        .collect()
}

#[test]
fn read_ahead_devices_keeps_the_strategy_off_the_devices_it_does_not_list() {
    let r = rates(2, 10.0);
    // Every device: both reading devices are asked (unverified: nobody reads to judge it);
    // vda's read-ahead was set by hand (8192 KiB where the kernel gives 128), so it stays and
    // status says so.
    let (_t, mut e) = engine("[tunables]\nallow_unverified = true\n");
    let (prev, cur) = random_reads(&mut e, &["vda", "loop0"]);
    e.propose(&[], &r, &prev, &cur).expect("proposing");
    let all: Vec<String> = device_trials(&e).into_iter().map(|t| t.0).collect();
    assert_eq!(all, ["device:loop0"]);
    let left = &e.status.devices_left_alone;
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].evidence.starts_with("vda: read_ahead_kb 8192")
            && left[0].evidence.contains("not the kernel's default 128"),
        "{left:?}"
    );
    // Named in the config, it is perfpilot's to tune.
    let (_t, mut e) =
        engine("read_ahead_devices = [\"vda\", \"loop0\"]\n[tunables]\nallow_unverified = true\n");
    let (prev, cur) = random_reads(&mut e, &["vda", "loop0"]);
    e.propose(&[], &r, &prev, &cur).expect("proposing");
    let mut all: Vec<String> = device_trials(&e).into_iter().map(|t| t.0).collect();
    all.sort();
    assert_eq!(all, ["device:loop0", "device:vda"]);
    assert!(e.status.devices_left_alone.is_empty());
    // Listed by name, or by a prefix: only those.
    for list in ["\"loop0\"", "\"loop*\""] {
        let (_t, mut e) = engine(&format!(
            "read_ahead_devices = [{list}]\n[tunables]\nallow_unverified = true\n"
        ));
        let (prev, cur) = random_reads(&mut e, &["vda", "loop0"]);
        e.propose(&[], &r, &prev, &cur).expect("proposing");
        assert_eq!(
            device_trials(&e),
            [("device:loop0".to_string(), "device:loop0".to_string())],
            "{list}"
        );
    }
}

#[test]
fn a_devices_judge_is_never_a_workload_the_config_leaves_alone() {
    // The only reader is not matched under only_matched: it does not judge the device's action
    // (judged by it, the action would wait for its I/O signal to be steady, and start no trial
    // on this scan); unverified, the device's trial has no judge but itself.
    let (_t, mut e) = engine(
        "only_matched = true\nread_ahead_devices = [\"vda\"]\n[[workload]]\nmatch = { comm = \"other\" }\n[tunables]\nallow_unverified = true\n",
    );
    let w = two_threads(0.5);
    let mut r: Rates = rates(2, 10.0);
    r.processes.push(app_rate(100.0, 50e6, 10_000.0));
    let (prev, cur) = random_reads(&mut e, &["vda"]);
    e.propose(std::slice::from_ref(&w), &r, &prev, &cur)
        .expect("proposing");
    assert_eq!(
        device_trials(&e),
        [("device:vda".to_string(), "device:vda".to_string())]
    );
    let t = &e.actions.trials[0];
    assert!(t.signal.is_none() && t.judge != w.signature);
}
