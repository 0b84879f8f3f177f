//! Where etcd and kube-apiserver are told which certificate to serve and on which
//! addresses: the static pods and units the node's reading found running them (kubeadm's
//! manifests, the hard way's units), Debian's
//! `/etc/default/etcd`, the `ETCD_*` environment file of StarlingX and RHEL, etcd's YAML
//! config file and the flags of `etcd.service` / `kube-apiserver.service` units (the hard
//! way). Only what a file says itself is used: a certificate flag and the addresses beside
//! it, in the same file.

use std::path::{Path, PathBuf};

use super::{Name, Use};
use crate::components::{Kind, NodeReading};
use crate::format::flags::{host_port, setting, urls};

/// A server and the flags that tie its certificate to its addresses.
pub(super) struct Role {
    /// The flag naming the certificate served.
    cert: &'static str,
    /// Flags holding URLs it listens on or advertises.
    url_flags: &'static [&'static str],
    /// Flags holding a bare address.
    address_flags: &'static [&'static str],
    /// Under this top-level key in etcd's YAML config file.
    yaml_section: Option<&'static str>,
}

pub(super) const ETCD_CLIENT: Role = Role {
    cert: "cert-file",
    url_flags: &["advertise-client-urls", "listen-client-urls"],
    address_flags: &[],
    yaml_section: Some("client-transport-security"),
};
const ETCD_PEER: Role = Role {
    cert: "peer-cert-file",
    url_flags: &["initial-advertise-peer-urls", "listen-peer-urls"],
    address_flags: &[],
    yaml_section: Some("peer-transport-security"),
};
pub(super) const APISERVER: Role = Role {
    cert: "tls-cert-file",
    url_flags: &[],
    address_flags: &["advertise-address", "bind-address"],
    yaml_section: None,
};

/// etcd's settings files besides its manifest, in the order they are read (here, and by
/// `coordinate::node` for the member's cluster).
pub const ETCD_FILES: &[&str] = &[
    "/etc/default/etcd",
    "/etc/etcd/etcd.conf",
    "/etc/etcd/etcd.conf.yml",
    "/etc/etcd/etcd.conf.yaml",
    "/etc/systemd/system/etcd.service",
    "/etc/systemd/system/etcd.service.d/override.conf",
    "/usr/lib/systemd/system/etcd.service",
    "/lib/systemd/system/etcd.service",
];
pub(super) const APISERVER_FILES: &[&str] = &[
    "/etc/systemd/system/kube-apiserver.service",
    "/usr/lib/systemd/system/kube-apiserver.service",
    "/lib/systemd/system/kube-apiserver.service",
];

/// Every (certificate as the flag names it, use) found in what the node's reading `node`
/// says runs etcd and kube-apiserver (a static pod, known by its command; a unit as systemd
/// runs it: kubespray's etcd keeps its settings in `/etc/etcd.env`), then in their settings
/// files under `root` (`/` on a node).
pub(super) fn uses(root: &Path, node: &NodeReading) -> Vec<(PathBuf, Use)> {
    let mut out = Vec::new();
    let runs = |kind: Kind| {
        (node.pod_running(kind).into_iter())
            .chain(node.unit_running(kind))
            .map(|(from, text)| (PathBuf::from(from), text))
    };
    let on_disk = |files: &[&str]| -> Vec<(PathBuf, String)> {
        (files.iter())
            .map(|f| root.join(f.trim_start_matches('/')))
            .filter_map(|f| crate::fsutil::read_to_string(&f).ok().map(|t| (f, t)))
            .collect()
    };
    for (file, text) in runs(Kind::Etcd).chain(on_disk(ETCD_FILES)) {
        read_text(&file, &text, &[ETCD_CLIENT, ETCD_PEER], &mut out);
    }
    for (file, text) in runs(Kind::ApiServer).chain(on_disk(APISERVER_FILES)) {
        read_text(&file, &text, &[APISERVER], &mut out);
    }
    out
}

fn read_text(file: &Path, text: &str, roles: &[Role], out: &mut Vec<(PathBuf, Use)>) {
    let yaml = is_yaml(file);
    for role in roles {
        let Some(cert) = cert_of(text, role, yaml) else {
            continue;
        };
        let at = |flag: &str, name: Name| Use {
            name,
            flag: format!("--{flag}"),
            file: file.to_path_buf(),
        };
        for flag in role.url_flags {
            let Some(v) = setting(text, flag, yaml) else {
                continue;
            };
            for url in urls(&v) {
                if let Some(name) = url_name(&url) {
                    out.push((PathBuf::from(&cert), at(flag, name)));
                }
            }
        }
        for flag in role.address_flags {
            if let Some(name) = setting(text, flag, yaml).and_then(|v| Name::parse(&v)) {
                out.push((PathBuf::from(&cert), at(flag, name)));
            }
        }
    }
}

/// Whether `file` is etcd's YAML config (`key: value`) rather than flags or `ETCD_*` lines.
pub(super) fn is_yaml(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(".conf.yml") || n == "etcd.conf.yaml")
}

/// The certificate `role` serves, as `text` names it.
pub(super) fn cert_of(text: &str, role: &Role, yaml: bool) -> Option<String> {
    match (yaml, role.yaml_section) {
        (true, Some(section)) => yaml_in_section(text, section, "cert-file"),
        _ => setting(text, role.cert, yaml),
    }
}

/// The host a client connecting to an `https://` URL checks the certificate for; `None` for
/// plain HTTP, a Unix socket or a wildcard listen address. etcd's URLs always carry a port.
fn url_name(url: &str) -> Option<Name> {
    let (host, _) = host_port(url.starts_with("https://").then_some(url)?)?;
    Name::parse(&host)
}

/// `key: value` in the block of top-level `section` of a YAML file.
fn yaml_in_section(text: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            inside = line.trim_end().strip_suffix(':') == Some(section);
            continue;
        }
        if let Some(v) = inside
            .then(|| line.trim().strip_prefix(&format!("{key}:")))
            .flatten()
        {
            let v = v.trim().trim_matches(['"', '\'']).trim();
            if !v.is_empty() {
                return Some(v.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(found: &[(PathBuf, Use)], cert: &str) -> Vec<String> {
        found
            .iter()
            .filter(|(c, _)| c == Path::new(cert))
            .map(|(_, u)| format!("{} {}", u.name, u.flag))
            .collect()
    }

    #[test]
    fn urls_give_their_host_and_wildcards_plain_http_and_sockets_give_none() {
        let n = |u| url_name(u).map(|n| n.to_string());
        assert_eq!(n("https://10.0.0.9:2379").as_deref(), Some("10.0.0.9"));
        assert_eq!(n("https://[fd00::9]:2380/").as_deref(), Some("fd00::9"));
        assert_eq!(
            n("https://etcd-0.example:2379").as_deref(),
            Some("etcd-0.example")
        );
        assert_eq!(n("https://0.0.0.0:2379"), None);
        assert_eq!(n("https://[::]:2379"), None);
        assert_eq!(n("http://127.0.0.1:2379"), None);
        assert_eq!(n("unix://localhost:0"), None);
    }

    /// The static pods are known by what they run: the API server's manifest here is not
    /// named `kube-apiserver.yaml`, and a pod running kube-vip says nothing of etcd, though
    /// it has etcd's flags.
    #[test]
    fn a_kubeadm_manifest_an_environment_file_and_a_yaml_config() {
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::write(
            manifests.join("etcd.yaml"),
            "spec:\n  containers:\n  - command:\n    - etcd\n    - --advertise-client-urls=https://10.0.0.9:2379\n    \
             - --cert-file=/etc/kubernetes/pki/etcd/server.crt\n    - --initial-advertise-peer-urls=https://10.0.0.9:2380\n    \
             - --listen-client-urls=https://127.0.0.1:2379,https://10.0.0.9:2379\n    - --listen-peer-urls=https://10.0.0.9:2380\n    \
             - --peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt\n",
        )
        .unwrap();
        std::fs::write(
            manifests.join("apiserver.yaml"),
            "spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=10.0.0.9\n    \
             - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt\n",
        )
        .unwrap();
        std::fs::write(
            manifests.join("vip.yaml"),
            "spec:\n  containers:\n  - command:\n    - /kube-vip\n    - --cert-file=/etc/kubernetes/pki/vip.crt\n    \
             - --advertise-client-urls=https://10.0.0.10:2379\n",
        )
        .unwrap();
        let etc = dir.path().join("etc/default");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("etcd"),
            "ETCD_CERT_FILE=/etc/etcd/server.pem\n#ETCD_ADVERTISE_CLIENT_URLS=https://old:2379\n\
             ETCD_ADVERTISE_CLIENT_URLS=\"https://node1.example:2379\"\nETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:2379\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("etc/etcd")).unwrap();
        std::fs::write(
            dir.path().join("etc/etcd/etcd.conf.yml"),
            "name: a\nlisten-peer-urls: https://10.1.0.1:2380\nclient-transport-security:\n  cert-file: /etc/etcd/c.crt\n\
             peer-transport-security:\n  cert-file: /etc/etcd/p.crt\n",
        )
        .unwrap();
        let found = uses(dir.path(), &NodeReading::read(&manifests));
        assert_eq!(
            names(&found, "/etc/kubernetes/pki/etcd/server.crt"),
            [
                "10.0.0.9 --advertise-client-urls",
                "127.0.0.1 --listen-client-urls",
                "10.0.0.9 --listen-client-urls"
            ]
        );
        assert_eq!(
            names(&found, "/etc/kubernetes/pki/etcd/peer.crt"),
            [
                "10.0.0.9 --initial-advertise-peer-urls",
                "10.0.0.9 --listen-peer-urls"
            ]
        );
        assert_eq!(
            names(&found, "/etc/kubernetes/pki/apiserver.crt"),
            ["10.0.0.9 --advertise-address"]
        );
        assert_eq!(
            names(&found, "/etc/etcd/server.pem"),
            ["node1.example --advertise-client-urls"]
        );
        assert_eq!(names(&found, "/etc/etcd/c.crt"), Vec::<String>::new());
        assert_eq!(
            names(&found, "/etc/kubernetes/pki/vip.crt"),
            Vec::<String>::new()
        );
        assert_eq!(
            names(&found, "/etc/etcd/p.crt"),
            ["10.1.0.1 --listen-peer-urls"]
        );
        let apiserver = found
            .iter()
            .find(|(c, _)| c.ends_with("apiserver.crt"))
            .unwrap();
        assert_eq!(apiserver.1.file, manifests.join("apiserver.yaml"));
    }

    /// kubespray's etcd: a bare `ExecStart` and every setting in its environment file,
    /// which only systemd's account of the unit names.
    #[test]
    fn a_unit_whose_settings_are_in_its_environment_file() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("etcd.env");
        std::fs::write(
            &env,
            "ETCD_ADVERTISE_CLIENT_URLS=https://node1.example:2379\nETCD_CERT_FILE=/etc/ssl/etcd/ssl/member-node1.pem\n",
        )
        .unwrap();
        let unit = crate::components::UnitSettings {
            unit: "etcd.service".into(),
            exec_start: vec![(
                "/usr/local/bin/etcd".into(),
                vec!["/usr/local/bin/etcd".into()],
            )],
            environment: Vec::new(),
            environment_files: vec![(env, false)],
        };
        let node = NodeReading::read_with(&dir.path().join("manifests"), &[unit]);
        let found = uses(dir.path(), &node);
        assert_eq!(
            names(&found, "/etc/ssl/etcd/ssl/member-node1.pem"),
            ["node1.example --advertise-client-urls"]
        );
        let (_, u) = &found[0];
        assert_eq!(
            u.file,
            PathBuf::from(format!(
                "etcd.service (as systemd runs it, with {})",
                dir.path().join("etcd.env").display()
            ))
        );
    }
}
