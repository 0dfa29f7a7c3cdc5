//! The CPU frequency governor of each online CPU
//! (`/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor`). Virtual machines usually have no
//! cpufreq: the check then says so.

use std::collections::BTreeMap;

use super::{Ctx, Found, base};
use crate::finding::{Evidence, Severity, Verify};

const CHECK: &str = "governor";
const WHY: &str = "Documentation/admin-guide/pm/cpufreq.rst (kernel): powersave keeps the lowest frequency, ondemand and conservative raise it only after a sampling period of load";

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let Some(online) = &ctx.online else {
        return found.skip(CHECK, "could not read /sys/devices/system/cpu/online");
    };
    // Governor → the CPUs that use it; the driver of the first CPU read.
    let mut by_gov: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut driver = None;
    for cpu in online.iter() {
        let rel = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor");
        match super::knob(ctx.fs, &rel) {
            Ok(Some(g)) => by_gov.entry(g).or_default().push(cpu),
            Ok(None) => {}
            Err(e) => return found.skip_err(CHECK, &e),
        }
        if driver.is_none() {
            driver = super::knob(
                ctx.fs,
                &format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_driver"),
            )
            .ok()
            .flatten();
        }
    }
    if by_gov.is_empty() {
        return found.skip(
            CHECK,
            "could not read /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor (absent: no cpufreq driver, as in most virtual machines; the host sets the frequency)",
        );
    }
    let driver = driver.unwrap_or_default();
    // intel_pstate and amd-pstate in active mode choose frequencies themselves: their
    // `powersave` is a dynamic policy, not the lowest frequency.
    let active_pstate = driver == "intel_pstate" || driver == "amd-pstate-epp";
    for (gov, cpus) in &by_gov {
        let severity = match gov.as_str() {
            "powersave" if !active_pstate => Severity::Warning,
            "powersave" | "ondemand" | "conservative" | "schedutil" => Severity::Info,
            _ => continue,
        };
        let list = cpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let first = cpus.first().copied().unwrap_or(0);
        let knobs: Vec<String> = cpus
            .iter()
            .map(|c| format!("sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"))
            .collect();
        let knob_refs: Vec<&str> = knobs.iter().map(String::as_str).collect();
        found.add(super::Finding {
            evidence: vec![
                Evidence::new(
                    "scaling_governor",
                    format!("{gov} on CPUs {list}"),
                    format!("/sys/devices/system/cpu/cpu{first}/cpufreq/scaling_governor"),
                ),
                Evidence::new(
                    "scaling_driver",
                    if driver.is_empty() { "unknown" } else { &driver },
                    format!("/sys/devices/system/cpu/cpu{first}/cpufreq/scaling_driver"),
                ),
            ],
            why: WHY.into(),
            effect: "shorter latency on bursts of work (the CPU is at speed when a request arrives), at the cost of power".into(),
            apply: "sudo cpupower frequency-set -g performance   # or: echo performance | sudo tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor".into(),
            verify: Verify::Study {
                file: crate::study::knob_study("governor", None, "governor", &knob_refs, &[gov, "performance"]),
            },
            ..base(
                "cpu.governor",
                "system",
                severity,
                format!("CPUs {list} run the {gov} governor ({driver})"),
            )
        });
    }
}
