//! The `[coordination]` table: how the controllers of one cluster take turns restarting,
//! through the etcd cluster they already run, so that no two restart etcd at once (the
//! behaviour is in `crate::coordinate`).

use std::path::PathBuf;
use std::time::Duration;

use super::reader::{Reader, Value};

const KEYS: &[&str] = &[
    "enabled",
    "endpoints",
    "member_name",
    "external_members",
    "cert",
    "key",
    "ca",
    "lock_prefix",
    "lease_ttl_secs",
    "lock_timeout_secs",
    "gate_timeout_secs",
    "two_member_restarts",
    "apiservers",
];

/// Whether restarts are coordinated through etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enabled {
    /// On when the etcd cluster answering at the endpoints has more than one member.
    Auto,
    /// Always: a single-member cluster still takes the lock.
    On,
    /// Never: restart as soon as the files are installed (the behaviour before coordination).
    Off,
}

/// The `[coordination]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordination {
    /// `enabled`: auto (default), true or false.
    pub enabled: Enabled,
    /// etcd client URLs (`https://host:port`); any member answering gives the member list.
    pub endpoints: Vec<String>,
    /// This node's etcd member name; `None`: the hostname.
    pub member_name: Option<String>,
    /// The etcd members that are no controller by design (external etcd hosts, which run
    /// no certrenewd): not expected to publish a record, so never alarmed as quiet.
    pub external_members: Vec<String>,
    /// Client certificate, key and CA bundle; `None`: found among the node's own files.
    pub cert: Option<PathBuf>,
    /// See `cert`.
    pub key: Option<PathBuf>,
    /// See `cert`.
    pub ca: Option<PathBuf>,
    /// The election (lock) name: keys under `<lock_prefix>/`.
    pub lock_prefix: String,
    /// The lease the lock is held on: a holder that dies loses the lock after this long.
    pub lease_ttl: Duration,
    /// How long a pass waits for the lock before giving up until the next pass.
    pub lock_timeout: Duration,
    /// How long a pass waits for the members to be healthy around its etcd restart.
    pub gate_timeout: Duration,
    /// Whether etcd is restarted in a cluster of two voting members, where it stops serving
    /// while either restarts (no quorum is left); held, with 250.003, when not.
    pub two_member_restarts: bool,
    /// The other controllers' API servers (`https://HOST:PORT`), besides those the other
    /// controllers' records name: before this node's API server restarts, one of them must
    /// answer `/readyz`, and with any named the API servers take turns through the lock even
    /// when etcd has one member (StarlingX duplex).
    pub apiservers: Vec<String>,
    /// The static pod manifest directory (the top-level `manifests_dir`, not a key of this
    /// table), where etcd's manifest says how this node's member runs; `None`: kubeadm's,
    /// `/etc/kubernetes/manifests` under the node's root.
    pub manifests: Option<PathBuf>,
}

impl Default for Coordination {
    fn default() -> Coordination {
        Coordination {
            enabled: Enabled::Auto,
            endpoints: vec!["https://127.0.0.1:2379".into()],
            member_name: None,
            external_members: Vec::new(),
            cert: None,
            key: None,
            ca: None,
            lock_prefix: "/certrenewd/restart-lock".into(),
            lease_ttl: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(1800),
            gate_timeout: Duration::from_secs(300),
            two_member_restarts: false,
            apiservers: Vec::new(),
            manifests: None,
        }
    }
}

impl Reader<'_> {
    /// The `[coordination]` table over the defaults; `None` when it is not a table.
    pub(super) fn coordination(&mut self, k: &str, v: &Value<'_>) -> Option<Coordination> {
        let Some(table) = v.get_ref().as_table() else {
            self.problem(Some(v.span()), k, "expected a [coordination] table");
            return None;
        };
        self.unknown_keys(table, KEYS, "coordination.");
        let mut c = Coordination::default();
        for (key, v) in table.iter() {
            let name = key.get_ref().as_ref();
            let full = format!("coordination.{name}");
            self.coordination_key(&mut c, name, &full, v);
        }
        if c.cert.is_some() != c.key.is_some() {
            self.problem(
                Some(v.span()),
                "coordination.cert",
                "`cert` and `key` go together: set both, or neither to use the node's own etcd client certificate",
            );
        }
        Some(c)
    }

    fn coordination_key(&mut self, c: &mut Coordination, name: &str, k: &str, v: &Value<'_>) {
        let secs = |r: &mut Self, range| r.integer(k, v, range).map(Duration::from_secs);
        match name {
            "enabled" => c.enabled = self.enabled(k, v).unwrap_or(c.enabled),
            "endpoints" => c.endpoints = self.endpoints(k, v).unwrap_or_default(),
            "member_name" => c.member_name = self.string(k, v).filter(|s| !s.is_empty()),
            "external_members" => c.external_members = self.strings(k, v).unwrap_or_default(),
            "cert" => c.cert = self.abs_path(k, v),
            "key" => c.key = self.abs_path(k, v),
            "ca" => c.ca = self.abs_path(k, v),
            "lock_prefix" => c.lock_prefix = self.lock_prefix(k, v).unwrap_or_default(),
            "lease_ttl_secs" => c.lease_ttl = secs(self, 5..3_601).unwrap_or(c.lease_ttl),
            "lock_timeout_secs" => c.lock_timeout = secs(self, 1..86_401).unwrap_or(c.lock_timeout),
            "gate_timeout_secs" => c.gate_timeout = secs(self, 1..3_601).unwrap_or(c.gate_timeout),
            "two_member_restarts" => {
                c.two_member_restarts = self.boolean(k, v).unwrap_or(c.two_member_restarts)
            }
            "apiservers" => c.apiservers = self.apiservers(k, v).unwrap_or_default(),
            _ => {} // reported by unknown_keys
        }
    }

    fn enabled(&mut self, k: &str, v: &Value<'_>) -> Option<Enabled> {
        if let Some(b) = v.get_ref().as_bool() {
            return Some(if b { Enabled::On } else { Enabled::Off });
        }
        if v.get_ref().as_str() == Some("auto") {
            return Some(Enabled::Auto);
        }
        let why = "expected true, false or \"auto\" (on when etcd has more than one member)";
        self.problem(Some(v.span()), k, why);
        None
    }

    fn endpoints(&mut self, k: &str, v: &Value<'_>) -> Option<Vec<String>> {
        let list = self.strings(k, v)?;
        if list.is_empty() {
            self.problem(
                Some(v.span()),
                k,
                "needs at least one etcd client URL, e.g. \"https://127.0.0.1:2379\"",
            );
            return None;
        }
        for e in &list {
            let ok = e
                .strip_prefix("https://")
                .or_else(|| e.strip_prefix("http://"));
            if ok.is_none_or(|rest| !rest.contains(':')) {
                let why = format!(
                    "{e:?} is not an etcd client URL: use https://HOST:PORT, e.g. \"https://10.0.0.1:2379\""
                );
                self.problem(Some(v.span()), k, why);
            }
        }
        Some(list)
    }

    fn apiservers(&mut self, k: &str, v: &Value<'_>) -> Option<Vec<String>> {
        let list = self.strings(k, v)?;
        for a in &list {
            if crate::format::flags::host_port(a).is_none() || !a.starts_with("https://") {
                let why = format!(
                    "{a:?} is not an API server URL: use https://HOST:PORT, e.g. \"https://10.0.0.2:6443\""
                );
                self.problem(Some(v.span()), k, why);
            }
        }
        Some(list)
    }

    fn lock_prefix(&mut self, k: &str, v: &Value<'_>) -> Option<String> {
        let p = self.string(k, v)?;
        if !p.starts_with('/') || p.ends_with('/') || p.len() < 2 {
            let why = format!(
                "{p:?}: an etcd key prefix starting with / and not ending with /, e.g. \"/certrenewd/restart-lock\""
            );
            self.problem(Some(v.span()), k, why);
            return None;
        }
        Some(p)
    }
}
