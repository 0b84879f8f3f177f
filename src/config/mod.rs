//! Configuration: the TOML file -> defaults filled in -> validated, typed `Settings`.
//!
//! Every mistake in a file is collected (unknown keys, wrong types, bad values) and reported
//! together with the file, line and key, so an operator fixes them all in one edit.

mod coordination;
mod cron;
mod error;
mod parse;
mod reader;
mod watch;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use coordination::{Coordination, Enabled};
pub use cron::parse_cron;
pub use error::{ConfigError, Problem};

/// Where the configuration is read from when nothing names a file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/certrenewd/certrenewd.toml";

/// The most of a configuration file read (the shipped one, comments and all, is 10 KiB): a
/// larger one is refused, not read until memory runs out.
pub const MAX_CONFIG_SIZE: u64 = 1024 * 1024;

/// Which systemd manager to talk to over D-Bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bus {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` honoured).
    System,
    /// The session bus of a user manager (`DBUS_SESSION_BUS_ADDRESS` honoured).
    User,
}

/// How a unit is restarted after its certificates were renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// `TryRestartUnit`: restart only if running; an inactive unit stays inactive.
    TryRestart,
    /// `RestartUnit`: restart, starting the unit if it was inactive.
    Restart,
}

/// What a renewal does to the components that read a file when they read it again by
/// themselves (`components::reload_rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRenew {
    /// Restart them, as for every other file.
    Restart,
    /// Install the file under the restart lock and prove they took it in; restart only
    /// what cannot be proven.
    Reload,
}

/// A watched directory and the units that use the certificates below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// Directory walked recursively.
    pub path: PathBuf,
    /// systemd units restarted when a certificate below `path` is renewed.
    pub units: Vec<String>,
    /// TLS endpoints (`host:port`) that must serve the renewed certificates after the restart.
    pub verify_endpoints: Vec<String>,
    /// Its etcd and kube-apiserver count as back from a restart only once they serve the
    /// renewed certificate and answer their health path, where their flags say where.
    pub wait_serving: bool,
    /// Whether a file its components read again by themselves is reloaded or restarted.
    pub on_renew: OnRenew,
    /// kubeconfig files whose client certificates belong to this watch.
    pub kubeconfigs: Vec<PathBuf>,
    /// `kubeconfigs` is the kubeadm default: files that do not exist are passed over quietly.
    pub kubeconfigs_default: bool,
    /// Static pods (manifest names in `manifests_dir`) restarted when this watch renews.
    pub static_pods: Vec<String>,
    /// `static_pods` is the kubeadm default: manifests that do not exist are passed over quietly.
    pub static_pods_default: bool,
    /// A directory this node may not have (a default for several node shapes): its absence
    /// is not an error. A present but unreadable one still is.
    pub optional: bool,
    /// Lifetime of the certificates this watch renews, before the global `validity_days`.
    pub validity_days: Option<u32>,
    /// CAs of this watch are renewed this many days before they end, before the global
    /// `ca_renew_before_days`.
    pub ca_renew_before_days: Option<u32>,
    /// Renewals of this watch add the names its serving certificates miss, before the
    /// global `add_missing_names`.
    pub add_missing_names: Option<bool>,
    /// Run (argv, no shell) after a pass renewed certificates of this watch, once its units
    /// and static pods were restarted: for what is not a unit (certmonger's post-save).
    pub post_renew_command: Option<Vec<String>>,
    /// What some of its units and static pods run, as the watch says (`components`), for
    /// what the node's reading cannot see (a wrapper script): by unit or static pod name.
    pub components: Vec<(String, Program)>,
    /// A watch no configuration wrote: the files a component's settings name outside every
    /// watch (kubespray's `/etc/ssl/etcd/ssl/member-node1.pem`, named by `/etc/etcd.env`).
    /// Only these files of its directory are watched, with their keys (that directory may
    /// hold other hosts' pairs); `None` for a configured watch.
    pub named: Option<Vec<PathBuf>>,
}

/// A program a watch may say one of its units or static pods runs: restarted under its
/// gate (etcd's quorum, the other API servers' readiness) and ordered as it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Etcd,
    ApiServer,
}

/// The kubeadm PKI directory: a watch of it gets kubeconfigs and static pods by default.
pub const KUBEADM_PKI: &str = "/etc/kubernetes/pki";
/// The kubeconfig files kubeadm writes with embedded client certificates.
pub const KUBEADM_KUBECONFIGS: &[&str] = &[
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
];
/// The control-plane static pods kubeadm writes manifests for, in restart order.
pub const KUBEADM_STATIC_PODS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The units that read `/etc/kubernetes/pki` on a controller run as systemd services (the
/// hard way); kubeadm's run as static pods instead. Not the kubelet: its own certificates
/// are under /var/lib/kubelet (it rotates them), and a CA re-issued here keeps its key.
pub const KUBERNETES_UNITS: &[&str] = &[
    "kube-apiserver.service",
    "kube-controller-manager.service",
    "kube-scheduler.service",
];

/// kubelet's certificate directory (its client pair, kubelet's way: `renew::link`).
pub const KUBELET_PKI: &str = "/var/lib/kubelet/pki";

/// The built-in watches, as the shipped configuration has them: `/etc/etcd`,
/// `/etc/kubernetes/pki` and `/var/lib/kubelet/pki`, each optional (an etcd-only node has
/// no `/etc/kubernetes`, a kubeadm node no `/etc/etcd`); a node with none is an error of
/// the pass.
pub fn default_watches() -> Vec<Watch> {
    let mut watches = vec![
        Watch::new("/etc/etcd", &["etcd.service"]),
        Watch::new(KUBEADM_PKI, KUBERNETES_UNITS),
        Watch::new(KUBELET_PKI, &["kubelet.service"]),
    ];
    for w in &mut watches {
        w.optional = true;
    }
    watches
}

impl Watch {
    /// A watch of `path` restarting `units`, with the kubeadm defaults when `path` is
    /// `/etc/kubernetes/pki`.
    pub fn new(path: impl Into<PathBuf>, units: &[&str]) -> Watch {
        let path = path.into();
        let kubeadm = path == Path::new(KUBEADM_PKI);
        let list = |l: &[&str]| {
            if kubeadm {
                l.iter().map(|s| s.to_string()).collect()
            } else {
                Vec::new()
            }
        };
        Watch {
            units: units.iter().map(|u| u.to_string()).collect(),
            verify_endpoints: Vec::new(),
            wait_serving: true,
            on_renew: OnRenew::Reload,
            kubeconfigs: list(KUBEADM_KUBECONFIGS)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            kubeconfigs_default: kubeadm,
            static_pods: list(KUBEADM_STATIC_PODS),
            static_pods_default: kubeadm,
            optional: false,
            validity_days: None,
            ca_renew_before_days: None,
            add_missing_names: None,
            post_renew_command: None,
            components: Vec::new(),
            named: None,
            path,
        }
    }

    /// Where the manifest of static pod `name` lives: `<dir>/<name>.yaml` unless `name` has
    /// its own `.yaml`, `.yml` or `.json` ending.
    pub fn manifest_path(dir: &Path, name: &str) -> PathBuf {
        if [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e)) {
            dir.join(name)
        } else {
            dir.join(format!("{name}.yaml"))
        }
    }
}

/// The validated settings every command runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file these settings came from; `None` for the built-in defaults.
    pub source: Option<PathBuf>,
    /// Cron expression with a seconds field, local time.
    pub schedule: String,
    /// Also run a pass when the daemon starts.
    pub run_on_start: bool,
    /// Leaf certificates expiring within this many days are renewed.
    pub renew_before_days: u32,
    /// CA certificates expiring within this many days are reported.
    pub ca_warning_days: u32,
    /// CAs whose key is on the node are re-issued with the same key, subject and key
    /// identifier as they near their end, so that what they signed keeps verifying; `false`
    /// only reports them.
    pub renew_cas: bool,
    /// How many days before its end a CA is renewed (see `renew_cas`).
    pub ca_renew_before_days: u32,
    /// Alarm state, pending records, lock and backups live here.
    pub state_dir: PathBuf,
    /// Previous certificates and keys are copied here before being replaced.
    pub backup_dir: PathBuf,
    /// Backup sets kept (the newest backup of each file is always kept).
    pub backup_keep: u32,
    /// Backup sets older than this many days are pruned (the newest of each file is kept).
    pub backup_max_age_days: u32,
    /// Which systemd manager to talk to.
    pub bus: Bus,
    /// Watched directories in config order.
    pub watches: Vec<Watch>,
    /// kubelet's static pod directory (`staticPodPath`).
    pub manifests_dir: PathBuf,
    /// How long a static pod's manifest stays out of `manifests_dir` (kubelet must notice).
    pub static_pod_wait: Duration,
    /// Each scheduled pass waits a random delay up to this long (`RandomizedDelaySec=`).
    pub randomized_delay: Duration,
    /// Generate a new key with every renewal instead of reusing the old one.
    pub rotate_keys: bool,
    /// Lifetime of renewed certificates; `None` keeps the old certificate's lifetime.
    pub validity_days: Option<u32>,
    /// Renewals add the names a serving certificate misses (the addresses its server is
    /// told to use); off: they are reported, and a renewal keeps the names it had.
    pub add_missing_names: bool,
    /// After a failed pass, the next attempt comes this much later (unless cron comes first).
    pub retry_interval: Duration,
    /// How units are restarted.
    pub restart_mode: RestartPolicy,
    /// How long a unit may take to come back active after a restart.
    pub restart_timeout: Duration,
    /// How long a restarted unit must then stay active in its new run to count as back.
    pub restart_settle: Duration,
    /// Restore the previous certificate and key when a unit does not come back with the new one.
    pub rollback_on_failure: bool,
    /// How long a command waits for another certrenewd holding the lock.
    pub lock_timeout: Duration,
    /// Program (argv, no shell) run on every alarm raise and clear.
    pub alarm_command: Option<Vec<String>>,
    /// How long `alarm_command` may run before it is killed.
    pub alarm_command_timeout: Duration,
    /// Files whose existence defers passes (e.g. an upgrade-in-progress flag).
    pub inhibit_paths: Vec<PathBuf>,
    /// An inhibit older than this is warned about at every deferred pass.
    pub inhibit_max_age: Duration,
    /// Prometheus textfile-collector output, written after every pass.
    pub metrics_file: Option<PathBuf>,
    /// How the controllers of one cluster take turns restarting (`[coordination]`).
    pub coordination: Coordination,
}

impl Settings {
    /// What the watches say their units and static pods run (each watch's `components`).
    pub fn components(&self) -> Vec<(String, Program)> {
        (self.watches.iter())
            .flat_map(|w| w.components.clone())
            .collect()
    }

    /// What a pass writes to: the watched paths and the kubeconfigs that exist (the pass
    /// locks their directories, see `pass::lock`).
    pub fn written_paths(&self) -> Vec<PathBuf> {
        let kubeconfigs = self
            .watches
            .iter()
            .flat_map(|w| &w.kubeconfigs)
            .filter(|k| k.exists());
        self.watches
            .iter()
            .map(|w| &w.path)
            .chain(kubeconfigs)
            .cloned()
            .collect()
    }

    /// The built-in defaults (what applies without a config file).
    pub fn defaults() -> Settings {
        let state_dir = PathBuf::from("/var/lib/certrenewd");
        Settings {
            source: None,
            schedule: "0 0 0 * * *".into(),
            run_on_start: true,
            renew_before_days: 15,
            ca_warning_days: 180,
            renew_cas: true,
            ca_renew_before_days: 365,
            backup_dir: state_dir.join("backup"),
            state_dir,
            backup_keep: 10,
            backup_max_age_days: 365,
            bus: Bus::System,
            watches: default_watches(),
            manifests_dir: "/etc/kubernetes/manifests".into(),
            static_pod_wait: Duration::from_secs(20),
            randomized_delay: Duration::from_secs(1800),
            rotate_keys: false,
            validity_days: None,
            add_missing_names: false,
            retry_interval: Duration::from_secs(3600),
            restart_mode: RestartPolicy::TryRestart,
            restart_timeout: Duration::from_secs(90),
            restart_settle: Duration::from_secs(5),
            rollback_on_failure: true,
            lock_timeout: Duration::from_secs(60),
            alarm_command: None,
            alarm_command_timeout: Duration::from_secs(30),
            inhibit_paths: Vec::new(),
            inhibit_max_age: Duration::from_secs(72 * 3600),
            metrics_file: None,
            coordination: Coordination::default(),
        }
    }

    /// Loads the settings (at most [`MAX_CONFIG_SIZE`] bytes of a regular file, opened
    /// without blocking: a FIFO or a device is refused): `explicit` (from `--config` or `$CERTRENEWD_CONFIG`) must exist;
    /// without it the default path is read if present, else the built-in defaults apply.
    pub fn load(explicit: Option<&Path>) -> Result<Settings, ConfigError> {
        let (path, must_exist) = match explicit {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        use crate::fsutil::{Follow, ReadError, read_regular};
        match read_regular(&path, MAX_CONFIG_SIZE, Follow::Yes) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Self::from_toml(&text, Some(&path)),
                Err(_) => Err(ConfigError::unreadable(&path, "not UTF-8 text")),
            },
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                Ok(Self::defaults())
            }
            Err(e) => Err(ConfigError::unreadable(&path, &e)),
        }
    }

    /// Parses and validates a TOML document; `file` is named in errors.
    pub fn from_toml(text: &str, file: Option<&Path>) -> Result<Settings, ConfigError> {
        parse::parse(text, file)
    }

    /// The watch a path belongs to: the one listing it as a kubeconfig, else the most
    /// specific watched directory holding it.
    pub fn watch_for(&self, path: &Path) -> Option<&Watch> {
        if let Some(w) = self
            .watches
            .iter()
            .find(|w| w.kubeconfigs.iter().any(|k| k == path))
        {
            return Some(w);
        }
        self.watches
            .iter()
            .filter(|w| path.starts_with(&w.path))
            .max_by_key(|w| w.path.components().count())
    }
}

#[cfg(test)]
mod tests;
