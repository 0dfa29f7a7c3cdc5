//! The container and Kubernetes pod a cgroup path names, as the runtimes and the kubelet lay
//! them out:
//!
//! | layout | path |
//! |---|---|
//! | kubelet, systemd driver (v2, and v1 with systemd) | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope` (a Guaranteed pod sits right under `kubepods.slice`; the UID's `-` are `_`) |
//! | kubelet, cgroupfs driver | `/kubepods/burstable/pod<UID>/<ID>` (Guaranteed: `/kubepods/pod<UID>/<ID>`) |
//! | Docker | `/system.slice/docker-<ID>.scope`, `/docker/<ID>` |
//! | Podman | `…/libpod-<ID>.scope`, `/libpod_parent/libpod-<ID>` |
//! | CRI-O, containerd without Kubernetes | `crio-<ID>.scope`, `cri-containerd-<ID>.scope`, `nerdctl-<ID>.scope` |
//! | LXC, systemd-nspawn | `/lxc.payload.<NAME>`, `/lxc/<NAME>`, `/machine.slice/machine-<NAME>.scope` |
//!
//! A pod's namespace and name are not in the path: they are read from the container runtime's
//! state (the OCI `config.json` annotations of containerd and CRI-O) or, failing that, from the
//! kubelet's pod directory (`/var/lib/kubelet/pods/<UID>`: the namespace of its service-account
//! volume, the pod's host name in `etc-hosts`). A DaemonSet sees them when it mounts those
//! directories (deploy/kubernetes).

use serde::{Deserialize, Serialize};

use crate::Fs;

/// A container, as far as its cgroup path and the runtime's state say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// The runtime the path names (`containerd`, `cri-o`, `docker`, `podman`, `lxc`,
    /// `systemd-nspawn`).
    pub runtime: String,
    /// The container's id (64 hex digits for OCI runtimes) or name (LXC, nspawn).
    pub id: String,
    /// The Kubernetes pod it belongs to, where the path is the kubelet's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
    /// The container's name in its pod, where the runtime's state gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A Kubernetes pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// The pod's UID (with dashes, as the API prints it).
    pub uid: String,
    /// Its QoS class from the path: `guaranteed`, `burstable` or `besteffort`.
    pub qos: String,
    /// Its namespace, where found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name, where found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Container {
    /// A short label: `pod NAMESPACE/NAME (container NAME)` for a pod, else `RUNTIME ID12`.
    pub fn describe(&self) -> String {
        let short: String = self.id.chars().take(12).collect();
        match &self.pod {
            Some(p) => {
                let pod = match (&p.namespace, &p.name) {
                    (Some(ns), Some(n)) => format!("{ns}/{n}"),
                    (None, Some(n)) => n.clone(),
                    _ => format!("uid {}", p.uid),
                };
                let c = match &self.name {
                    Some(n) => format!("container {n}"),
                    None => format!("container {short}"),
                };
                format!("pod {pod} ({c}, {} QoS)", p.qos)
            }
            None => format!("{} {short}", self.runtime),
        }
    }
}

/// The runtime prefixes of a scope's or directory's name, and the runtime each names.
const PREFIXES: [(&str, &str); 7] = [
    ("cri-containerd-", "containerd"),
    ("crio-conmon-", "cri-o"),
    ("crio-", "cri-o"),
    ("docker-", "docker"),
    ("libpod-conmon-", "podman"),
    ("libpod-", "podman"),
    ("nerdctl-", "containerd"),
];

fn is_id(s: &str) -> bool {
    s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pod UID of a path component (`kubepods-burstable-pod1234_5678….slice`, `pod1234-…`).
fn pod_uid(component: &str) -> Option<String> {
    let c = component.strip_suffix(".slice").unwrap_or(component);
    let i = c.rfind("pod")?;
    let uid = c[i + 3..].replace('_', "-");
    let ok = uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// The QoS class of the components between `kubepods` and the pod.
fn qos(components: &[&str], pod_at: usize) -> String {
    let between = &components[..pod_at];
    for q in ["burstable", "besteffort"] {
        if between.iter().any(|c| c.contains(q)) {
            return q.to_string();
        }
    }
    "guaranteed".to_string()
}

/// The container a cgroup path names, from the path alone (no pod namespace or name: see
/// [`identify`]). `None` for a path no runtime lays out (a service, a session, the root).
pub fn parse_path(path: &str) -> Option<Container> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let kube = comps
        .iter()
        .position(|c| *c == "kubepods" || *c == "kubepods.slice");
    let mut pod = None;
    if let Some(k) = kube {
        for (i, c) in comps.iter().enumerate().skip(k + 1) {
            if let Some(uid) = pod_uid(c) {
                pod = Some((
                    i,
                    Pod {
                        uid,
                        qos: qos(&comps[k + 1..], i - k - 1),
                        ..Pod::default()
                    },
                ));
                break;
            }
        }
    }
    // The container: the innermost component that a runtime names.
    for (i, c) in comps.iter().enumerate().rev() {
        let name = c.strip_suffix(".scope").unwrap_or(c);
        for (prefix, runtime) in PREFIXES {
            if let Some(id) = name.strip_prefix(prefix)
                && is_id(id)
            {
                return Some(Container {
                    runtime: runtime.to_string(),
                    id: id.to_string(),
                    pod: pod.map(|(_, p)| p),
                    name: None,
                });
            }
        }
        // cgroupfs driver: the bare id right under the pod, or under `/docker`.
        if is_id(c) {
            let parent = i.checked_sub(1).map(|p| comps[p]);
            if let Some((at, p)) = &pod
                && *at + 1 == i
            {
                return Some(Container {
                    runtime: "containerd".to_string(),
                    id: c.to_string(),
                    pod: Some(p.clone()),
                    name: None,
                });
            }
            if parent == Some("docker") {
                return Some(Container {
                    runtime: "docker".to_string(),
                    id: c.to_string(),
                    pod: None,
                    name: None,
                });
            }
        }
        if let Some(n) = c.strip_prefix("lxc.payload.") {
            return Some(named("lxc", n));
        }
        if i > 0 && comps[i - 1] == "lxc" {
            return Some(named("lxc", c));
        }
        if let Some(n) = c
            .strip_prefix("machine-")
            .and_then(|n| n.strip_suffix(".scope"))
        {
            return Some(named("systemd-nspawn", n));
        }
    }
    // A pod's own cgroup (its sandbox's processes, or a process the kubelet put there).
    pod.map(|(_, p)| Container {
        runtime: String::new(),
        id: String::new(),
        pod: Some(p),
        name: None,
    })
}

fn named(runtime: &str, name: &str) -> Container {
    Container {
        runtime: runtime.to_string(),
        id: name.to_string(),
        pod: None,
        name: None,
    }
}

/// Where containerd and CRI-O keep each running container's OCI bundle (`config.json`).
const BUNDLES: [&str; 3] = [
    "run/containerd/io.containerd.runtime.v2.task/k8s.io",
    "run/containerd/io.containerd.runtime.v2.task/moby",
    "run/containers/storage/overlay-containers",
];

/// The annotations that name a container's pod, in containerd's and CRI-O's spelling:
/// (namespace, pod name, container name).
const ANNOTATIONS: [(&str, &str, &str); 2] = [
    (
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.container-name",
    ),
    (
        "io.kubernetes.pod.namespace",
        "io.kubernetes.pod.name",
        "io.kubernetes.container.name",
    ),
];

/// The container a cgroup path names, with its pod's namespace and name and its own name
/// where the runtime's state or the kubelet's pod directory (under `fs`) gives them.
pub fn identify(fs: &Fs, path: &str) -> Option<Container> {
    let mut c = parse_path(path)?;
    if !c.id.is_empty() {
        from_bundle(fs, &mut c);
    }
    if let Some(p) = &mut c.pod
        && (p.namespace.is_none() || p.name.is_none())
    {
        from_kubelet(fs, p);
    }
    Some(c)
}

fn from_bundle(fs: &Fs, c: &mut Container) {
    for dir in BUNDLES {
        let candidates = [
            format!("{dir}/{}/config.json", c.id),
            format!("{dir}/{}/userdata/config.json", c.id),
        ];
        for rel in candidates {
            let Ok(Some(text)) = fs.read_opt(&rel) else {
                continue;
            };
            let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            let ann = &doc["annotations"];
            let get = |k: &str| {
                ann[k]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            for (ns, pod, name) in ANNOTATIONS {
                if c.name.is_none() {
                    c.name = get(name);
                }
                if let Some(p) = &mut c.pod {
                    p.namespace = p.namespace.take().or_else(|| get(ns));
                    p.name = p.name.take().or_else(|| get(pod));
                }
            }
            return;
        }
    }
}

fn from_kubelet(fs: &Fs, p: &mut Pod) {
    let base = format!("var/lib/kubelet/pods/{}", p.uid);
    if p.namespace.is_none() {
        // The service-account token volume holds the pod's namespace.
        let projected = format!("{base}/volumes/kubernetes.io~projected");
        let mut vols = fs.list(&projected).unwrap_or_default();
        vols.sort();
        p.namespace = vols.iter().find_map(|v| {
            let t = fs.read_opt(&format!("{projected}/{v}/namespace")).ok()??;
            let t = t.trim();
            (!t.is_empty()).then(|| t.to_string())
        });
    }
    if p.name.is_none() {
        // The kubelet writes the pod's host name (its name unless spec.hostname says
        // otherwise) last on the last line of the pod's hosts file (`IP [FQDN] NAME`).
        p.name = fs
            .read_opt(&format!("{base}/etc-hosts"))
            .ok()
            .flatten()
            .and_then(|t| {
                t.lines()
                    .rev()
                    .map(str::trim)
                    .find(|l| !l.is_empty() && !l.starts_with('#'))
                    .and_then(|l| {
                        l.split_ascii_whitespace()
                            .skip(1)
                            .last()
                            .map(str::to_string)
                    })
            });
    }
}
