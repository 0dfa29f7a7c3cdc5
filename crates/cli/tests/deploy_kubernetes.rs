//! `deploy/kubernetes/`: every manifest validates against Kubernetes' own OpenAPI schemas
//! (kubernetes-validate from PyPI ships them, so this runs offline), strictly (an unknown field
//! fails), and the DaemonSet asks for what the daemon needs and no more.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfpilot_optimize::DaemonConfig;
use serde_json::Value;

/// The Kubernetes version whose schemas the manifests are checked against.
const KUBERNETES: &str = "1.37.0";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    v
}

/// `kubernetes-validate --strict` on `files`.
fn validate(files: &[PathBuf]) -> Output {
    Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "-k", KUBERNETES])
        .args(files)
        .output()
        .expect("python3 (scripts/install-deps installs kubernetes-validate with pip)")
}

/// The YAML documents of `file` as JSON (PyYAML comes with kubernetes-validate).
fn documents(file: &Path) -> Vec<Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn one(file: &str, kind: &str) -> Value {
    let docs = documents(&dir().join(file));
    docs.into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {file}"))
}

#[test]
fn every_manifest_passes_strict_validation_against_the_kubernetes_schemas() {
    let files = manifests();
    assert!(files.len() >= 3, "{files:?}");
    let out = validate(&files);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for kind in ["daemonset", "configmap", "namespace"] {
        assert!(
            text.contains(&format!("passed for resource {kind}/perfpilot")),
            "{kind} not checked: {text}"
        );
    }
}

#[test]
fn the_validator_rejects_a_misspelt_field() {
    // The check can fail: the same DaemonSet with `hostPid` for `hostPID`.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("20-daemonset.yaml");
    let text = std::fs::read_to_string(dir().join("20-daemonset.yaml")).unwrap();
    std::fs::write(&bad, text.replace("hostPID:", "hostPid:")).unwrap();
    let out = validate(&[bad]);
    let err =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {err}");
    assert!(err.contains("'hostPid' was unexpected"), "{err}");
}

#[test]
fn the_daemonset_sees_host_pids_with_capabilities_not_privilege() {
    let ds = one("20-daemonset.yaml", "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut added: Vec<String> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("CAP_{}", v.as_str().unwrap()))
        .collect();
    added.sort();
    // The same set as the systemd unit's, where each one's use is written down.
    let unit = std::fs::read_to_string(dir().join("../perfpilot.service")).unwrap();
    let mut bounding: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    bounding.sort();
    assert_eq!(added, bounding);
    assert!(!added.contains(&"CAP_SYS_ADMIN".to_string()));
    // The daemon runs with the config from the ConfigMap and the state on the node.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "daemon",
            "--config",
            "/etc/perfpilot/perfpilot.toml",
            "--state-dir",
            "/var/lib/perfpilot"
        ]
    );
}

#[test]
fn the_daemonset_mounts_sys_writable_and_keeps_its_journal_on_the_node() {
    let ds = one("20-daemonset.yaml", "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let mount = |path: &str| -> Value {
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == path)
            .cloned()
            .unwrap_or_else(|| panic!("nothing mounted at {path}"))
    };
    let volume = |name: &Value| -> Value {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| &v["name"] == name)
            .cloned()
            .unwrap()
    };
    let sys = mount("/sys");
    assert_eq!(sys["readOnly"], false);
    assert_eq!(volume(&sys["name"])["hostPath"]["path"], "/sys");
    let state = mount("/var/lib/perfpilot");
    assert_ne!(state["readOnly"], true);
    assert_eq!(
        volume(&state["name"])["hostPath"]["path"],
        "/var/lib/perfpilot"
    );
    let config = mount("/etc/perfpilot");
    assert_eq!(
        volume(&config["name"])["configMap"]["name"],
        one("10-configmap.yaml", "ConfigMap")["metadata"]["name"]
    );
    // containerd's bundles name each workload's pod, read only at the node's own path (where
    // perfpilot_sys::cgroup::container looks); nothing of the kubelet's pod directories.
    let bundles = "/run/containerd/io.containerd.runtime.v2.task/k8s.io";
    let b = mount(bundles);
    assert_eq!(b["readOnly"], true);
    assert_eq!(volume(&b["name"])["hostPath"]["path"], bundles);
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| !m["mountPath"]
                .as_str()
                .unwrap()
                .starts_with("/var/lib/kubelet")),
        "the kubelet's pod directories hold every pod's secrets"
    );
}

#[test]
fn the_configmap_keeps_actions_at_pod_restarts_and_is_scraped_where_it_listens() {
    let cm = one("10-configmap.yaml", "ConfigMap");
    let text = cm["data"]["perfpilot.toml"].as_str().unwrap();
    let listen = text
        .lines()
        .find_map(|l| l.strip_prefix("listen = "))
        .expect("a listen address for Prometheus");
    assert_eq!(listen, "\"0.0.0.0:10187\"");
    // The whole text is the daemon's config and must load, its listen address included.
    let config = DaemonConfig::parse(text, Path::new("10-configmap.yaml:perfpilot.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.listen.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:10187")
    );
    assert_eq!(
        config.tunables.get("revert_on_stop").map(String::as_str),
        Some("off")
    );
    let ds = one("20-daemonset.yaml", "DaemonSet");
    let notes = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(notes["prometheus.io/scrape"], "true");
    assert_eq!(notes["prometheus.io/port"], "10187");
    assert_eq!(notes["prometheus.io/path"], "/metrics");
    let port = &ds["spec"]["template"]["spec"]["containers"][0]["ports"][0];
    assert_eq!(port["containerPort"], 10187);
    // Liveness by TCP: it holds once TLS or a password guards /metrics, where an HTTP probe
    // without credentials would fail.
    let live = &ds["spec"]["template"]["spec"]["containers"][0]["livenessProbe"];
    assert_eq!(live["tcpSocket"]["port"], "metrics", "{live:?}");
}

#[test]
fn kubectl_apply_on_the_directory_creates_the_namespace_before_what_lives_in_it() {
    // `kubectl apply -f DIR` reads the files in name order.
    let files = manifests();
    let first = documents(&files[0]);
    assert_eq!(first[0]["kind"], "Namespace", "{}", files[0].display());
    let ns = first[0]["metadata"]["name"].clone();
    for f in &files[1..] {
        for d in documents(f) {
            assert_eq!(d["metadata"]["namespace"], ns, "{}: {d:#}", f.display());
        }
    }
}
