//! Where a restarted etcd or kube-apiserver can be reached, from its own settings, so that
//! the restart stage can wait until it serves again: systemd saying `active`, or a manifest
//! being back, comes long before the server answers. The same settings as
//! [`super::sources`]: a static pod's command as the node's reading read it from its
//! manifest, the unit's flags and etcd's environment or YAML files for a unit. Nothing
//! found means nothing to wait for, never a guess.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::sources::{self, APISERVER, APISERVER_FILES, ETCD_CLIENT, ETCD_FILES, Role};
use crate::components::{Component, Kind, NodeReading, Runs};
use crate::format::flags::{host_port, setting, urls};

/// The servers whose listeners can be learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// etcd's client listener.
    Etcd,
    /// kube-apiserver's secure port.
    ApiServer,
}

/// kube-apiserver's `--secure-port` when the flag is not given.
const APISERVER_PORT: u16 = 6443;

/// One address a server listens on, with the certificate it must serve there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Which server.
    pub server: Server,
    /// `host:port` (`[v6]:port`) to connect to.
    pub addr: String,
    /// The certificate file its flags name.
    pub cert: PathBuf,
    /// The flag the address comes from (`--advertise-address`).
    pub flag: String,
    /// The file the flags are in.
    pub file: PathBuf,
}

impl Listener {
    /// `127.0.0.1:6443 (--advertise-address in /etc/kubernetes/manifests/kube-apiserver.yaml)`.
    pub fn describe(&self) -> String {
        format!("{} ({} in {})", self.addr, self.flag, self.file.display())
    }
}

/// An address a process of the node listens on: refused there, that process has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// `host:port` (`[v6]:port`) to connect to.
    pub addr: String,
    /// Where it was read: `127.0.0.1:10259 (livenessProbe in …/kube-scheduler.yaml)`.
    pub from: String,
}

impl Listener {
    /// Its address, as a port to see its process end by.
    pub fn port(&self) -> Port {
        Port {
            addr: self.addr.clone(),
            from: self.describe(),
        }
    }
}

/// Where the static pod `pod` (as the node's reading read it) answers kubelet's probes:
/// each container's probe that names a host and a port, each address once. A pod whose
/// flags name no listener (kube-controller-manager, kube-scheduler) is seen to end there.
pub fn probes_of_pod(pod: &Component) -> Vec<Port> {
    let Runs::Pod(manifest) = &pod.runs else {
        return Vec::new();
    };
    let mut out: Vec<Port> = Vec::new();
    for probe in &pod.probes {
        let port = Port {
            addr: addr(&probe.host, probe.port),
            from: format!(
                "{} ({} in {})",
                addr(&probe.host, probe.port),
                probe.kind,
                manifest.display()
            ),
        };
        if !out.iter().any(|o| o.addr == port.addr) {
            out.push(port);
        }
    }
    out
}

/// The listeners of the static pod `pod` (as the node's reading read it) for the restart
/// of `server`, from its command lines: also when it runs the server through a wrapper
/// (`sh -c "etcd …"`), whose flags are in its command all the same; an unproven restart
/// must not read as back.
pub fn of_pod(pod: &Component, server: Server) -> Vec<Listener> {
    match &pod.runs {
        Runs::Pod(manifest) => of_text(manifest, &pod.settings_text(), server),
        Runs::Unit(_) => Vec::new(),
    }
}

/// The listeners of the `server` run as a systemd unit: from its settings as systemd runs
/// it (`unit`: its name and settings text, from the node's reading), else from the first
/// of its settings files under `root` (`/` on a node) that names them, an override before
/// the packaged file.
pub fn of_unit(root: &Path, server: Server, unit: Option<&(String, String)>) -> Vec<Listener> {
    if let Some((name, text)) = unit {
        let found = of_text(Path::new(name), text, server);
        if !found.is_empty() {
            return found;
        }
    }
    let files = match server {
        Server::Etcd => ETCD_FILES,
        Server::ApiServer => APISERVER_FILES,
    };
    files
        .iter()
        .map(|f| of_file(&root.join(f.trim_start_matches('/')), server))
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

fn of_file(file: &Path, server: Server) -> Vec<Listener> {
    match crate::fsutil::read_to_string(file) {
        Ok(text) => of_text(file, &text, server),
        Err(_) => Vec::new(),
    }
}

/// The listeners `text` (the settings read from `file`) names.
fn of_text(file: &Path, text: &str, server: Server) -> Vec<Listener> {
    let yaml = sources::is_yaml(file);
    let role: &Role = match server {
        Server::Etcd => &ETCD_CLIENT,
        Server::ApiServer => &APISERVER,
    };
    let Some(cert) = sources::cert_of(text, role, yaml) else {
        return Vec::new();
    };
    let at = |(addr, flag): (String, &str)| Listener {
        server,
        addr,
        cert: PathBuf::from(&cert),
        flag: format!("--{flag}"),
        file: file.to_path_buf(),
    };
    let found = match server {
        Server::Etcd => etcd(text, yaml),
        Server::ApiServer => apiserver(text).into_iter().collect(),
    };
    let mut out: Vec<Listener> = Vec::new();
    for l in found.into_iter().map(at) {
        if !out.iter().any(|o| o.addr == l.addr) {
            out.push(l);
        }
    }
    out
}

/// etcd's `https://` client listeners (a wildcard one reached on loopback); the advertised
/// URLs only when no listen URL is given. A plain-HTTP listener serves no certificate.
fn etcd(text: &str, yaml: bool) -> Vec<(String, &'static str)> {
    for flag in ["listen-client-urls", "advertise-client-urls"] {
        let Some(v) = setting(text, flag, yaml) else {
            continue;
        };
        return urls(&v)
            .iter()
            .filter(|u| u.starts_with("https://"))
            .filter_map(|u| host_port(u))
            .map(|(host, port)| (addr(&host, port), flag))
            .collect();
    }
    Vec::new()
}

/// kube-apiserver's secure port on the address it binds (a wildcard bind reached on
/// loopback), else on its advertised address (it binds every address by default).
fn apiserver(text: &str) -> Option<(String, &'static str)> {
    let port = setting(text, "secure-port", false)
        .and_then(|p| p.parse().ok())
        .unwrap_or(APISERVER_PORT);
    let bind = setting(text, "bind-address", false);
    let bound = bind.as_deref().filter(|b| !is_wildcard(b));
    if let Some(host) = bound {
        return Some((addr(host, port), "bind-address"));
    }
    if let Some(host) = setting(text, "advertise-address", false) {
        return Some((addr(&host, port), "advertise-address"));
    }
    bind.map(|b| (addr(&b, port), "bind-address"))
}

/// The node's API servers, as `host:port`: where the other controllers reach each
/// (`advertised`: its `--advertise-address`, else a `--bind-address` that is no wildcard,
/// with its `--secure-port`), and every address that is this node's own (`own`: those and
/// where it listens, a wildcard bind's loopback too), by what runs (a static pod's command,
/// a unit's settings).
pub fn apiservers(node: &NodeReading) -> (Vec<String>, Vec<String>) {
    let (mut advertised, mut own): (Vec<String>, Vec<String>) = Default::default();
    let all = node.pods.iter().chain(&node.units);
    for text in all
        .filter(|c| c.kind == Some(Kind::ApiServer))
        .map(Component::settings_text)
    {
        let port = setting(&text, "secure-port", false)
            .and_then(|p| p.parse().ok())
            .unwrap_or(APISERVER_PORT);
        let bind = setting(&text, "bind-address", false).filter(|b| !is_wildcard(b));
        let shown = setting(&text, "advertise-address", false).or(bind);
        let heard = apiserver(&text).map(|(a, _)| a);
        let found = shown.map(|h| addr(&h, port));
        for a in found.iter().chain(&heard) {
            if !own.contains(a) {
                own.push(a.clone());
            }
        }
        advertised.extend(found.filter(|a| !advertised.contains(a)));
    }
    (advertised, own)
}

pub(super) fn is_wildcard(host: &str) -> bool {
    let host = host.trim_matches(['[', ']']);
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
}

/// The host to connect to for `host`: a wildcard is reached on loopback.
pub(super) fn dialled(host: &str) -> String {
    let host = host.trim_matches(['[', ']']);
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) if ip.is_unspecified() => "127.0.0.1".into(),
        Ok(IpAddr::V6(ip)) if ip.is_unspecified() => "::1".into(),
        Ok(IpAddr::V6(ip)) => ip.to_string(),
        _ => host.to_string(),
    }
}

/// `host:port` to connect to: a wildcard is reached on loopback, an IPv6 address in brackets.
pub(super) fn addr(host: &str, port: u16) -> String {
    let host = dialled(host);
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::NodeReading;

    fn addrs(l: &[Listener]) -> Vec<String> {
        l.iter().map(|l| format!("{} {}", l.addr, l.flag)).collect()
    }

    /// The node with kube-apiserver as a static pod in `dir`, run with `flags` (manifest
    /// lines) and its serving certificate.
    fn apiserver_pod(dir: &Path, flags: &str) -> NodeReading {
        let text = format!(
            "spec:\n  containers:\n  - command:\n    - kube-apiserver\n{flags}    - --tls-cert-file=/pki/a.crt\n"
        );
        std::fs::write(dir.join("kube-apiserver.yaml"), text).unwrap();
        NodeReading::read(dir)
    }

    #[test]
    fn an_api_server_is_reached_by_others_at_its_advertised_address_and_by_this_node_at_more() {
        let dir = tempfile::tempdir().unwrap();
        let flags = |f: &str| apiservers(&apiserver_pod(dir.path(), f));
        let (advertised, own) = flags(
            "    - --advertise-address=10.0.0.9\n    - --bind-address=127.0.0.2\n    - --secure-port=8443\n",
        );
        assert_eq!(advertised, ["10.0.0.9:8443"]);
        assert_eq!(own, ["10.0.0.9:8443", "127.0.0.2:8443"]);
        let (advertised, own) =
            flags("    - --advertise-address=fd00::9\n    - --bind-address=::\n");
        assert_eq!(advertised, ["[fd00::9]:6443"]);
        assert_eq!(own, ["[fd00::9]:6443"]);
        // Bound to every address, advertising none: nothing the others could dial.
        let (advertised, own) = flags("    - --bind-address=0.0.0.0\n");
        assert!(advertised.is_empty());
        assert_eq!(own, ["127.0.0.1:6443"]);
    }

    #[test]
    fn apiserver_binds_its_bind_address_else_every_address_and_its_secure_port() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("kube-apiserver.yaml");
        let flags = |f: &str| {
            let node = apiserver_pod(dir.path(), f);
            addrs(&of_pod(&node.pods[0], Server::ApiServer))
        };
        assert_eq!(
            flags("    - --advertise-address=10.0.0.9\n"),
            ["10.0.0.9:6443 --advertise-address"]
        );
        assert_eq!(
            flags(
                "    - --advertise-address=10.0.0.9\n    - --bind-address=127.0.0.2\n    - --secure-port=8443\n"
            ),
            ["127.0.0.2:8443 --bind-address"]
        );
        assert_eq!(
            flags("    - --bind-address=0.0.0.0\n"),
            ["127.0.0.1:6443 --bind-address"]
        );
        assert_eq!(
            flags("    - --advertise-address=fd00::9\n"),
            ["[fd00::9]:6443 --advertise-address"]
        );
        // Only the certificate: where it listens is not said, so nothing is waited for.
        assert!(flags("").is_empty());
        // etcd run through a wrapper: its flags are in the command all the same.
        std::fs::write(
            &m,
            "spec:\n  containers:\n  - command:\n    - /bin/sh\n    - -c\n    - exec etcd --cert-file=/pki/a.crt --listen-client-urls=https://127.0.0.1:2379\n",
        )
        .unwrap();
        let node = NodeReading::read(dir.path());
        assert_eq!(
            addrs(&of_pod(&node.pods[0], Server::Etcd)),
            ["127.0.0.1:2379 --listen-client-urls"]
        );
    }

    #[test]
    fn etcd_listens_on_its_https_client_urls_from_the_first_file_that_says() {
        let root = tempfile::tempdir().unwrap();
        let default = root.path().join("etc/default");
        std::fs::create_dir_all(&default).unwrap();
        std::fs::write(
            default.join("etcd"),
            "ETCD_CERT_FILE=/etc/etcd/server.crt\n\
             ETCD_LISTEN_CLIENT_URLS=\"https://0.0.0.0:2379,http://127.0.0.1:4001\"\n\
             ETCD_ADVERTISE_CLIENT_URLS=https://10.0.0.9:2379\n",
        )
        .unwrap();
        let unit = root.path().join("lib/systemd/system");
        std::fs::create_dir_all(&unit).unwrap();
        std::fs::write(
            unit.join("etcd.service"),
            "ExecStart=/usr/bin/etcd --cert-file=/x.crt --listen-client-urls=https://10.9.9.9:2379\n",
        )
        .unwrap();
        let l = of_unit(root.path(), Server::Etcd, None);
        assert_eq!(addrs(&l), ["127.0.0.1:2379 --listen-client-urls"]);
        assert_eq!(l[0].cert, Path::new("/etc/etcd/server.crt"));
        std::fs::write(
            default.join("etcd"),
            "ETCD_CERT_FILE=/etc/etcd/server.crt\nETCD_ADVERTISE_CLIENT_URLS=https://10.0.0.9:2379\n",
        )
        .unwrap();
        assert_eq!(
            addrs(&of_unit(root.path(), Server::Etcd, None)),
            ["10.0.0.9:2379 --advertise-client-urls"]
        );
        assert!(of_unit(root.path(), Server::ApiServer, None).is_empty());
        // What systemd runs comes first: kubespray's etcd, all in its environment file.
        let unit = (
            "etcd.service (as systemd runs it, with /etc/etcd.env)".to_string(),
            "/usr/local/bin/etcd\nETCD_CERT_FILE=/etc/ssl/etcd/ssl/member-node1.pem\nETCD_LISTEN_CLIENT_URLS=https://127.0.206.2:2379,https://127.0.0.1:2379\n".to_string(),
        );
        let l = of_unit(root.path(), Server::Etcd, Some(&unit));
        assert_eq!(
            addrs(&l),
            [
                "127.0.206.2:2379 --listen-client-urls",
                "127.0.0.1:2379 --listen-client-urls"
            ]
        );
        assert_eq!(l[0].cert, Path::new("/etc/ssl/etcd/ssl/member-node1.pem"));
        let from = "etcd.service (as systemd runs it, with /etc/etcd.env)";
        assert_eq!(l[0].file, Path::new(from));
    }
}
