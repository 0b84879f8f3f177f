//! One reading of the node: the control-plane components it runs as static pods and as
//! systemd units, what each runs (from its command, never from its name), the settings it
//! runs with, and the files of the host it reads. For a pod, its container paths mapped
//! through its `volumeMounts` to the host paths, and the files of the host it mounts one by
//! one (a pod that mounts a file reads it: kube-vip mounts `admin.conf` and names it in no
//! flag). For a unit, its `ExecStart` with the variables of its `Environment` and
//! `EnvironmentFile`s put in, as systemd tells them over D-Bus (`units.rs`), and etcd's
//! `ETCD_*_FILE` variables (kubespray's bare `ExecStart=etcd` with `/etc/etcd.env`).
//! Restarts and roll-backs are chosen per file from it: a renewed file restarts the
//! components that read it, not every pod and unit of its directory.
//!
//! What cannot be followed makes a component's files unknown, never "unused": a container
//! with no command (the image's entrypoint), a unit running a program certrenewd does not
//! follow (a wrapper script), settings in a config file certrenewd does not read
//! (`--config`, `--config-file`), a path on no volume the pod mounts, a kubeconfig or
//! environment file that cannot be read. Nothing is executed and nothing is dialed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::format::kubeconfig::Kubeconfig;
use crate::format::manifest::{Container, PodManifest, Probe};

pub mod reload_rules;
mod units;
pub use units::UnitSettings;

/// The largest manifest or kubeconfig read; kubeadm's are a few KiB.
const MAX_FILE: u64 = 1 << 20;
/// The most manifests read from one directory.
const MAX_MANIFESTS: usize = 64;

/// The units the control-plane programs run as when installed by hand or by an installer
/// (the hard way, kubespray, StarlingX, Debian's etcd), read whether or not a watch names
/// them: one that reads a renewed file and that no watch restarts is reported, never
/// restarted.
pub const USUAL_UNITS: [&str; 6] = [
    "etcd.service",
    "etcd-events.service",
    "kube-apiserver.service",
    "kube-controller-manager.service",
    "kube-scheduler.service",
    "kubelet.service",
];

/// The control-plane programs whose files certrenewd follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Etcd,
    ApiServer,
    ControllerManager,
    Scheduler,
    Kubelet,
}

impl Kind {
    /// The program a command runs, from its first word's file name.
    pub fn of_command(first: &str) -> Option<Kind> {
        let name = first.rsplit('/').next().unwrap_or(first);
        Some(match name {
            "etcd" => Kind::Etcd,
            "kube-apiserver" => Kind::ApiServer,
            "kube-controller-manager" => Kind::ControllerManager,
            "kube-scheduler" => Kind::Scheduler,
            "kubelet" => Kind::Kubelet,
            _ => return None,
        })
    }

    /// Its program's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::ApiServer => "kube-apiserver",
            Kind::ControllerManager => "kube-controller-manager",
            Kind::Scheduler => "kube-scheduler",
            Kind::Kubelet => "kubelet",
        }
    }
}

/// How a component runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs {
    /// A static pod, from its manifest.
    Pod(PathBuf),
    /// A systemd unit, by name (`etcd.service`).
    Unit(String),
}

/// One component of the node, as its manifest or its unit says it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// How it runs.
    pub runs: Runs,
    /// What its (first) container runs, when it is one of the programs certrenewd follows.
    pub kind: Option<Kind>,
    /// Each container's command and arguments, as kubelet runs them.
    pub settings: Vec<Vec<String>>,
    /// The host files its settings name (through its kubeconfigs too), as host paths.
    pub reads: BTreeSet<PathBuf>,
    /// Why `reads` may not be all it reads; `None` when the manifest was read whole.
    pub unknown: Option<String>,
    /// A unit's environment as its process gets it (`Environment=`, then each
    /// `EnvironmentFile=`); empty for a pod.
    pub env: Vec<(String, String)>,
    /// A unit's environment files that were read, in order.
    pub env_files: Vec<PathBuf>,
    /// Each file a setting names, by the setting (`etcd-certfile`; etcd's `ETCD_CERT_FILE`
    /// as `cert-file`), as a host path, in the order read.
    pub files: Vec<(String, PathBuf)>,
    /// A pod's probes that name a host and a port, each container's in order: where kubelet
    /// asks its process (empty for a unit).
    pub probes: Vec<Probe>,
}

impl Component {
    /// The host file its setting `flag` names, the first one given.
    pub fn file(&self, flag: &str) -> Option<&Path> {
        (self.files.iter())
            .find(|(f, _)| f == flag)
            .map(|(_, p)| p.as_path())
    }
}

impl Component {
    /// Its name as a watch gives it: a unit's name, a static pod's manifest file name
    /// without `.yaml` (`kube-apiserver`).
    pub fn name(&self) -> String {
        let manifest = match &self.runs {
            Runs::Unit(unit) => return unit.clone(),
            Runs::Pod(manifest) => manifest,
        };
        let file = manifest.file_name().unwrap_or_default().to_string_lossy();
        file.strip_suffix(".yaml").unwrap_or(&file).to_string()
    }

    /// Whether it is a program certrenewd follows and every file it reads is known.
    pub fn known(&self) -> bool {
        self.kind.is_some() && self.unknown.is_none()
    }

    /// Whether it reads `file` (compared as written and as the file system resolves both).
    pub fn reads(&self, file: &Path) -> bool {
        let real = std::fs::canonicalize(file).ok();
        self.reads.iter().any(|r| {
            r == file
                || real
                    .as_ref()
                    .is_some_and(|real| std::fs::canonicalize(r).is_ok_and(|rr| &rr == real))
        })
    }
}

/// What the node runs, read once and handed to whoever decides from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReading {
    /// The static pods of the manifest directory, by manifest file name order.
    pub pods: Vec<Component>,
    /// The units systemd told the settings of, in the order asked.
    pub units: Vec<Component>,
}

impl NodeReading {
    /// Reads every manifest (`*.yaml`, `*.yml`, `*.json`) in `manifests_dir`, and the units
    /// whose settings systemd gave; a directory that is missing or unreadable holds no pod
    /// known, and a unit not given is not known.
    pub fn read_with(manifests_dir: &Path, units: &[UnitSettings]) -> NodeReading {
        NodeReading {
            units: units.iter().map(units::read).collect(),
            ..NodeReading::read(manifests_dir)
        }
    }

    /// [`NodeReading::read_with`] no unit.
    pub fn read(manifests_dir: &Path) -> NodeReading {
        let Ok(entries) = std::fs::read_dir(manifests_dir) else {
            return NodeReading::default();
        };
        let mut manifests: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                !name.starts_with('.')
                    && [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e))
            })
            .collect();
        manifests.sort();
        manifests.truncate(MAX_MANIFESTS);
        NodeReading {
            pods: manifests.iter().map(|m| read_pod(m)).collect(),
            units: Vec::new(),
        }
    }

    /// The static pod whose manifest is `manifest`, if it was read.
    pub fn pod(&self, manifest: &Path) -> Option<&Component> {
        (self.pods.iter()).find(|c| matches!(&c.runs, Runs::Pod(m) if m == manifest))
    }

    /// The first unit read that runs `kind` (a watched one before the usual ones), as
    /// systemd runs it: where its settings come
    /// from, for messages (`etcd.service (as systemd runs it, with /etc/default/etcd)`), and
    /// its settings as text (command lines, then `NAME=value` environment lines), for the
    /// readers of settings files.
    pub fn unit_running(&self, kind: Kind) -> Option<(String, String)> {
        let unit = (self.units.iter()).find(|c| c.kind == Some(kind))?;
        let text = unit.settings_text();
        let files: Vec<String> = (unit.env_files.iter())
            .map(|f| f.display().to_string())
            .collect();
        let from = match files.is_empty() {
            true => format!("{} (as systemd runs it)", unit.name()),
            false => format!(
                "{} (as systemd runs it, with {})",
                unit.name(),
                files.join(", ")
            ),
        };
        Some((from, text))
    }

    /// The first static pod read that runs `kind`, known by its command, never by its
    /// manifest's name: its manifest, for messages, and its settings as text (one command
    /// line per container), for the readers of settings files.
    pub fn pod_running(&self, kind: Kind) -> Option<(String, String)> {
        let pod = (self.pods.iter()).find(|c| c.kind == Some(kind))?;
        let Runs::Pod(manifest) = &pod.runs else {
            return None;
        };
        Some((manifest.display().to_string(), pod.settings_text()))
    }

    /// The etcd client pairs the node's own settings name, as (certificate, key, CA): the
    /// API server's (`--etcd-certfile`, `--etcd-keyfile`, `--etcd-cafile`), then etcd's own
    /// peer and serving pairs with its trusted CA (kubespray's member pair serves clients
    /// too). Whether a pair may be used as a client is for its reader to check.
    pub fn etcd_clients(&self) -> Vec<(PathBuf, PathBuf, PathBuf)> {
        let all: Vec<&Component> = self.pods.iter().chain(&self.units).collect();
        let of = |kind: Kind| all.iter().filter(move |c| c.kind == Some(kind));
        let triple = |c: &Component, cert: &str, key: &str, ca: &str| {
            Some((
                c.file(cert)?.to_path_buf(),
                c.file(key)?.to_path_buf(),
                c.file(ca)?.to_path_buf(),
            ))
        };
        let apiserver = of(Kind::ApiServer)
            .filter_map(|c| triple(c, "etcd-certfile", "etcd-keyfile", "etcd-cafile"));
        let etcd = of(Kind::Etcd).flat_map(|c| {
            [
                triple(c, "peer-cert-file", "peer-key-file", "trusted-ca-file"),
                triple(c, "cert-file", "key-file", "trusted-ca-file"),
            ]
            .into_iter()
            .flatten()
        });
        let mut out: Vec<(PathBuf, PathBuf, PathBuf)> = Vec::new();
        for t in apiserver.chain(etcd) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// The etcd client URLs the API servers are given (`--etcd-servers`, in order, each
    /// once): where the cluster is asked when this node runs no member of it (external
    /// etcd).
    pub fn etcd_servers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let apiservers = (self.pods.iter().chain(&self.units))
            .filter(|c| c.kind == Some(Kind::ApiServer))
            .flat_map(|c| &c.settings);
        for argv in apiservers {
            let mut args = argv.iter();
            while let Some(arg) = args.next() {
                let value = match arg.strip_prefix("--etcd-servers") {
                    Some("") => args.next().map(String::as_str).unwrap_or_default(),
                    Some(v) => match v.strip_prefix('=') {
                        Some(v) => v,
                        None => continue,
                    },
                    None => continue,
                };
                for url in value.split(',').map(str::trim).filter(|u| !u.is_empty()) {
                    if !out.iter().any(|o| o == url) {
                        out.push(url.to_string());
                    }
                }
            }
        }
        out
    }

    /// The unit `unit`, if systemd told its settings.
    pub fn unit(&self, unit: &str) -> Option<&Component> {
        (self.units.iter()).find(|c| matches!(&c.runs, Runs::Unit(u) if u == unit))
    }

    /// The static pods and units found to read `file`, by the name a watch gives them (the
    /// manifest's file name without `.yaml`; the unit).
    pub fn readers_of(&self, file: &Path) -> Vec<String> {
        (self.pods.iter().chain(&self.units))
            .filter(|c| c.reads(file))
            .map(|c| c.name())
            .collect()
    }
}

impl Component {
    /// Its settings as text: each command line, then a unit's environment as `NAME=value`
    /// lines (what the readers of settings files read).
    pub fn settings_text(&self) -> String {
        let mut text: String = (self.settings.iter())
            .map(|argv| argv.join(" ") + "\n")
            .collect();
        for (k, v) in &self.env {
            text.push_str(&format!("{k}={v}\n"));
        }
        text
    }

    fn new(runs: Runs) -> Component {
        Component {
            runs,
            kind: None,
            settings: Vec::new(),
            reads: BTreeSet::new(),
            unknown: None,
            env: Vec::new(),
            env_files: Vec::new(),
            files: Vec::new(),
            probes: Vec::new(),
        }
    }
}

/// Reads one manifest; an unreadable one is a component whose files are unknown.
fn read_pod(manifest: &Path) -> Component {
    let mut c = Component::new(Runs::Pod(manifest.to_path_buf()));
    let pod = match crate::fsutil::read_regular(manifest, MAX_FILE, crate::fsutil::Follow::Yes) {
        Err(e) => Err(e.to_string()),
        Ok(data) => PodManifest::parse(&data).map_err(|e| e.to_string()),
    };
    let pod = match pod {
        Ok(pod) if !pod.containers.is_empty() => pod,
        Ok(_) => return unknown(c, "its manifest has no container".into()),
        Err(e) => return unknown(c, format!("its manifest cannot be read: {e}")),
    };
    c.kind = pod
        .containers
        .first()
        .and_then(|k| k.command.first())
        .and_then(|first| Kind::of_command(first));
    for container in &pod.containers {
        let argv: Vec<String> = container
            .command
            .iter()
            .chain(&container.args)
            .cloned()
            .collect();
        if container.command.is_empty() {
            note(
                &mut c,
                format!(
                    "container {:?} runs its image's entrypoint, which the manifest does not say",
                    container.name
                ),
            );
        }
        let mounts = Mounts {
            pod: &pod,
            container,
        };
        // The first word of a command is the program; `args` alone are all flags.
        let skip = usize::from(!container.command.is_empty());
        for (flag, path) in paths_in(&argv[skip..]) {
            if flag == "config" || flag == "config-file" {
                note(
                    &mut c,
                    format!("--{flag}={path}: certrenewd does not read that file's settings"),
                );
                continue;
            }
            match mounts.host(&path) {
                Err(why) => note(&mut c, why.to_string()),
                Ok(None) => {}
                Ok(Some(host)) => {
                    if flag.ends_with("kubeconfig") {
                        kubeconfig_files(&mut c, &|p| mounts.host(p), &path, &host);
                    }
                    c.files.push((flag, host.clone()));
                    c.reads.insert(host);
                }
            }
        }
        c.settings.push(argv);
        c.probes.extend(container.probes.iter().cloned());
        for mount in &container.mounts {
            if let Ok(Some(host)) = mounts.host(&mount.path)
                && std::fs::metadata(&host).is_ok_and(|m| m.is_file())
            {
                c.reads.insert(host);
            }
        }
    }
    c
}

fn unknown(mut c: Component, why: String) -> Component {
    c.unknown = Some(why);
    c
}

/// Adds `why` to the reasons the component's files are not all known.
/// Each reason once: kube-controller-manager names one kubeconfig in three flags.
fn note(c: &mut Component, why: String) {
    c.unknown = Some(match c.unknown.take() {
        Some(before) if before.split("; ").any(|b| b == why) => before,
        Some(before) => format!("{before}; {why}"),
        None => why,
    });
}

/// Why a path as a static pod's container sees it is not mapped to the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmapped {
    /// On no volume: the container's image holds it, or the manifest misses a mount.
    #[error("{0} is on no volume the pod mounts")]
    NoVolume(String),
    /// On a volume the pod does not define.
    #[error("{path} is on volume {volume:?}, which the pod does not define")]
    NoSuchVolume { path: String, volume: String },
}

/// Where a path as the component sees it is on the host: `Ok(None)` for no path of the host
/// (a ConfigMap's volume), an error for a path it cannot map.
type HostPath<'a> = dyn Fn(&str) -> Result<Option<PathBuf>, Unmapped> + 'a;

/// The files a kubeconfig the component reads names (`client-certificate`, `client-key`),
/// relative to the kubeconfig's directory as the container sees it.
fn kubeconfig_files(c: &mut Component, map: &HostPath, path: &str, host: &Path) {
    let conf = crate::fsutil::read_regular(host, MAX_FILE, crate::fsutil::Follow::Yes)
        .map_err(|e| e.to_string())
        .and_then(|data| Kubeconfig::parse(&data).map_err(|e| e.to_string()));
    let conf = match conf {
        Ok(conf) => conf,
        Err(e) => return note(c, format!("cannot read its kubeconfig {path}: {e}")),
    };
    let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
    for user in &conf.users {
        for named in [&user.cert_file, &user.key_file].into_iter().flatten() {
            let in_container = dir.join(&named.text);
            match map(&in_container.to_string_lossy()) {
                Err(why) => note(c, why.to_string()),
                Ok(None) => {}
                Ok(Some(host)) => {
                    c.reads.insert(host);
                }
            }
        }
    }
}

/// Every absolute path a flag's value names, with the flag's name: `--flag=/a,/b:names`
/// (comma lists, and `--tls-sni-cert-key`'s names after a colon) and `--flag /a`.
fn paths_in(flags: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut words = flags.iter().peekable();
    while let Some(word) = words.next() {
        let Some(flag) = word.strip_prefix("--").or_else(|| word.strip_prefix('-')) else {
            continue;
        };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, v.to_string()),
            None => match words.peek() {
                Some(v) if v.starts_with('/') => (flag, words.next().cloned().unwrap_or_default()),
                _ => continue,
            },
        };
        for piece in value.split(',') {
            let path = piece.split(':').next().unwrap_or_default();
            if path.starts_with('/') {
                out.push((name.to_string(), path.to_string()));
            }
        }
    }
    out
}

/// Where a container's paths are on the host.
struct Mounts<'a> {
    pod: &'a PodManifest,
    container: &'a Container,
}

impl Mounts<'_> {
    /// The host path of `path` as the container sees it: through the mount nearest to it.
    /// `Ok(None)` for a file on a volume that is no path of the host (a ConfigMap); an error
    /// for a path on no volume, which the container's image holds or the manifest misses.
    fn host(&self, path: &str) -> Result<Option<PathBuf>, Unmapped> {
        let inside = |m: &str| {
            let m = m.trim_end_matches('/');
            path == m || path.strip_prefix(m).is_some_and(|r| r.starts_with('/')) || m.is_empty()
        };
        let mount = self
            .container
            .mounts
            .iter()
            .filter(|m| inside(&m.path))
            .max_by_key(|m| m.path.trim_end_matches('/').len())
            .ok_or_else(|| Unmapped::NoVolume(path.to_string()))?;
        let volume = self
            .pod
            .volumes
            .iter()
            .find(|v| v.name == mount.volume)
            .ok_or_else(|| Unmapped::NoSuchVolume {
                path: path.to_string(),
                volume: mount.volume.clone(),
            })?;
        let Some(host) = &volume.host_path else {
            return Ok(None);
        };
        let mut at = PathBuf::from(host);
        if let Some(sub) = &mount.sub_path {
            at.push(sub);
        }
        let rest = path[mount.path.trim_end_matches('/').len()..].trim_start_matches('/');
        if !rest.is_empty() {
            at.push(rest);
        }
        Ok(Some(at))
    }
}

#[cfg(test)]
mod tests;
