//! The machine a run ran on: the facts a study stores with its run, the proof harness heads
//! its table with and a capacity report lists, read once through `perfpilot-sys`'s `Fs` (the
//! live system or a fixture tree).

use perfpilot_observe::topology::Topology;
use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

/// What a run's figures depend on; what could not be read (or an older run did not record) is
/// `None`. The fields' order is the stored JSON's (a study's `studies.host`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MachineFacts {
    /// The online CPUs as a list (`0-7`).
    pub online: Option<String>,
    /// NUMA nodes.
    pub nodes: Option<usize>,
    /// Last-level cache domains.
    pub llcs: Option<usize>,
    /// Physical cores.
    pub cores: Option<usize>,
    /// Hardware threads per core.
    pub smt: Option<usize>,
    /// The CPU model (`model name` of /proc/cpuinfo, or `cpu` on POWER).
    pub cpu_model: Option<String>,
    /// The kernel release.
    pub kernel: Option<String>,
    /// The host name.
    pub hostname: Option<String>,
    /// MemTotal, bytes.
    pub memory_bytes: Option<u64>,
}

impl MachineFacts {
    /// The machine under `fs`, its CPUs from the topology read there (left unknown when it
    /// cannot be read).
    pub fn read(fs: &Fs) -> MachineFacts {
        match Topology::read(fs) {
            Ok(topo) => MachineFacts::with_topology(fs, &topo),
            Err(_) => MachineFacts::without_topology(fs),
        }
    }

    /// The machine under `fs` with the CPUs of `topo` (a study's topology, which may be a
    /// fixture's or a worker's).
    pub fn with_topology(fs: &Fs, topo: &Topology) -> MachineFacts {
        MachineFacts {
            online: Some(topo.online.to_string()),
            nodes: Some(topo.nodes.len()),
            llcs: Some(topo.llcs().count()),
            cores: Some(topo.cores().count()),
            smt: Some(topo.smt_width()),
            ..MachineFacts::without_topology(fs)
        }
    }

    /// The facts that do not come from the topology.
    fn without_topology(fs: &Fs) -> MachineFacts {
        let text = |rel: &str| fs.read(rel).ok().map(|t| t.trim().to_string());
        MachineFacts {
            cpu_model: text("proc/cpuinfo").and_then(|t| cpu_model(&t)),
            kernel: text("proc/sys/kernel/osrelease"),
            hostname: text("proc/sys/kernel/hostname"),
            memory_bytes: perfpilot_sys::stat::read_meminfo(fs)
                .ok()
                .and_then(|m| m.get("MemTotal").copied()),
            ..MachineFacts::default()
        }
    }

    /// The facts of stored JSON (a study's `studies.host`); JSON that does not parse leaves
    /// them all unknown, fields it lacks are unknown and fields it has beyond them are ignored.
    pub fn from_json(json: &str) -> MachineFacts {
        serde_json::from_str(json).unwrap_or_default()
    }

    /// The facts as JSON, as a study stores them.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// How many CPUs were online.
    pub fn cpus(&self) -> Option<usize> {
        let list = self.online.as_deref()?;
        perfpilot_sys::CpuSet::parse(list).ok().map(|s| s.len())
    }
}

/// The CPU model in /proc/cpuinfo's text: x86's `model name`, else POWER's `cpu` (matched
/// whole: x86's `cpu family` is a number, not the model).
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    let field = |name: &str| {
        cpuinfo
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_string())
    };
    field("model name").or_else(|| field("cpu"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_model_name_not_the_cpu_family() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2445.434\n";
        assert_eq!(cpu_model(x86).as_deref(), Some("AMD EPYC"));
        let power = "processor\t: 0\ncpu\t\t: POWER8E (raw), altivec supported\nclock\t\t: 3690.000000MHz\n";
        assert_eq!(
            cpu_model(power).as_deref(),
            Some("POWER8E (raw), altivec supported")
        );
        assert_eq!(cpu_model("processor\t: 0\n"), None);
    }

    #[test]
    fn stored_facts_keep_their_field_order_and_read_back_the_same() {
        let f = MachineFacts {
            online: Some("0-1".into()),
            cores: Some(2),
            memory_bytes: Some(1024),
            ..MachineFacts::default()
        };
        let json = f.to_json();
        assert!(
            json.starts_with(r#"{"online":"0-1","nodes":null"#),
            "{json}"
        );
        assert!(json.ends_with(r#""memory_bytes":1024}"#), "{json}");
        assert_eq!(MachineFacts::from_json(&json), f);
    }
}
