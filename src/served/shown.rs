//! Where a component shows a file it reads again by itself, by its own settings: each
//! address it serves the file on, the name its clients dial there, and the trust file they
//! verify it with. A reload is proven there (`restart::reload_proof`). Nothing found is nothing
//! to prove by, never a guess: the component restarts instead.

use std::path::PathBuf;

use super::listen::{addr as connect_to, dialled, is_wildcard};
use crate::components::reload_rules::{Proof, Rule};
use crate::components::{Component, Kind, Runs};
use crate::format::flags::{host_port, setting, urls};

/// One place a served file is shown, and how its clients take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The file served (a host path).
    pub cert: PathBuf,
    /// `host:port` to connect to: a wildcard listener is reached on loopback.
    pub addr: String,
    /// The name its clients dial, to verify the certificate for.
    pub name: String,
    /// The trust file its clients verify it with (a host path).
    pub trust: PathBuf,
    /// Where it was read: `--listen-peer-urls in /etc/kubernetes/manifests/etcd.yaml`.
    pub from: String,
}

/// The advertised URLs for each listener setting: what the component tells its clients
/// (and its peers) to dial.
fn advertised(listen: &str) -> Option<&'static str> {
    match listen {
        "listen-client-urls" => Some("advertise-client-urls"),
        "listen-peer-urls" => Some("initial-advertise-peer-urls"),
        _ => None,
    }
}

/// Where `c` shows the file of `rule`'s setting; Err says why it cannot be shown there
/// (then the file's renewal restarts `c`).
pub fn shown(c: &Component, rule: &Rule) -> anyhow::Result<Vec<Shown>> {
    let Proof::Serves { listen, trust } = rule.proof else {
        anyhow::bail!("--{} is not a file it serves", rule.setting);
    };
    if c.kind != Some(Kind::Etcd) || rule.kind != Kind::Etcd {
        anyhow::bail!(
            "where {} serves --{} is not proven by this version",
            rule.kind.name(),
            rule.setting
        );
    }
    let cert = c
        .file(rule.setting)
        .ok_or_else(|| anyhow::anyhow!("its settings name no --{}", rule.setting))?;
    let trust = c.file(trust).ok_or_else(|| {
        anyhow::anyhow!("its settings name no --{trust}: which CA its clients trust is not known")
    })?;
    let (text, yaml) = (c.settings_text(), false);
    let value = |key: &str| setting(&text, key, yaml);
    let listening =
        value(listen).ok_or_else(|| anyhow::anyhow!("its settings name no --{listen}"))?;
    let told: Vec<(String, u16)> = (advertised(listen).and_then(value))
        .map(|v| urls(&v).iter().filter_map(|u| host_port(u)).collect())
        .unwrap_or_default();
    let whence = match &c.runs {
        Runs::Pod(manifest) => manifest.display().to_string(),
        Runs::Unit(unit) => unit.clone(),
    };
    let mut out: Vec<Shown> = Vec::new();
    let (assigned, mut not_own) = (super::own::assigned(), Vec::new());
    for url in urls(&listening)
        .iter()
        .filter(|u| u.starts_with("https://"))
    {
        let Some((host, port)) = host_port(url) else {
            continue;
        };
        let wildcard = is_wildcard(&host);
        // Dialled there, a proof must reach this node's own process.
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>()
            && !wildcard
            && let Err(why) = super::own::reaches_own(ip, &assigned)
        {
            not_own.push(format!("{url}: {why}"));
            continue;
        }
        // The names its clients dial on this port: those it tells them, and the address
        // it listens on when that is one.
        let mut names: Vec<String> = (told.iter())
            .filter(|(_, p)| *p == port)
            .map(|(h, _)| h.clone())
            .collect();
        if !wildcard && !names.contains(&host) {
            names.push(host.clone());
        }
        for name in names {
            let s = Shown {
                cert: cert.to_path_buf(),
                addr: connect_to(&host, port),
                name,
                trust: trust.to_path_buf(),
                from: format!("--{listen} in {whence}"),
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    if out.is_empty() && !not_own.is_empty() {
        anyhow::bail!(
            "--{listen} names no https:// address of this node's own ({})",
            not_own.join("; ")
        );
    }
    if out.is_empty() {
        anyhow::bail!("--{listen} names no https:// address");
    }
    Ok(out)
}

/// kubelet's port when its settings say none (`port` in its `--config` file, or `--port`).
const KUBELET_PORT: u16 = 10250;

/// Where kubelet serves its API (`address` and `port` of its `--config` file, else its
/// `--address` and `--port` flags, else every address on 10250), as `host:port` to dial
/// from this node and the host in it: a wildcard on loopback; an address of its own that
/// does not float; or why there is none.
pub fn kubelet(c: &Component) -> anyhow::Result<(String, String)> {
    let flags = c.settings_text();
    let config = (c.file("config"))
        .map(|p| crate::fsutil::read(p).map(|d| String::from_utf8_lossy(&d).into_owned()))
        .transpose()
        .map_err(|e| anyhow::anyhow!("its --config cannot be read: {e:#}"))?
        .unwrap_or_default();
    let value = |key: &str| setting(&config, key, true).or_else(|| setting(&flags, key, false));
    let port = match value("port") {
        Some(p) => p
            .parse()
            .map_err(|_| anyhow::anyhow!("its port {p:?} is no port"))?,
        None => KUBELET_PORT,
    };
    let host = value("address").unwrap_or_else(|| "0.0.0.0".into());
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>()
        && !is_wildcard(&host)
    {
        super::own::reaches_own(ip, &super::own::assigned())
            .map_err(|why| anyhow::anyhow!("its address {host}: {why}"))?;
    }
    Ok((connect_to(&host, port), dialled(&host)))
}

/// [`shown`], one per address (its first name): where a client connects to present a pair,
/// whatever name it dials. None where it cannot be shown.
pub fn by_address(c: &Component, rule: &Rule) -> Vec<Shown> {
    let mut out: Vec<Shown> = Vec::new();
    for s in shown(c, rule).unwrap_or_default() {
        if !out.iter().any(|a| a.addr == s.addr) {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::components::NodeReading;
    use crate::components::reload_rules::{Version, decide};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

    fn rule(setting: &str) -> &'static Rule {
        decide(Kind::Etcd, setting, Some(Version(3, 5, 15)), false).unwrap()
    }

    fn lines(s: &[Shown]) -> Vec<String> {
        s.iter()
            .map(|s| format!("{} as {} trusting {}", s.addr, s.name, s.trust.display()))
            .collect()
    }

    /// kubeadm's etcd manifest as `kubeadm init` writes it: the client certificate served
    /// on loopback and the node's address, the peer certificate on the node's address only.
    #[test]
    fn kubeadms_etcd_shows_its_server_and_peer_certificates_where_it_listens() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(format!("{FIXTURES}/kubeadm-manifests/etcd.yaml"))
            .unwrap()
            .replace("{{IP}}", "127.0.0.7")
            .replace("{{NAME}}", "node-1")
            .replace("{{ROOT}}", "");
        std::fs::write(dir.path().join("etcd.yaml"), text).unwrap();
        let node = NodeReading::read(dir.path());
        let etcd = &node.pods[0];
        let ca = "/etc/kubernetes/pki/etcd/ca.crt";
        assert_eq!(
            lines(&shown(etcd, rule("cert-file")).unwrap()),
            [
                format!("127.0.0.1:2379 as 127.0.0.7 trusting {ca}"),
                format!("127.0.0.1:2379 as 127.0.0.1 trusting {ca}"),
                format!("127.0.0.7:2379 as 127.0.0.7 trusting {ca}"),
            ]
        );
        let peer = shown(etcd, rule("peer-cert-file")).unwrap();
        assert_eq!(
            lines(&peer),
            [format!("127.0.0.7:2380 as 127.0.0.7 trusting {ca}")]
        );
        assert_eq!(
            peer[0].cert,
            PathBuf::from("/etc/kubernetes/pki/etcd/peer.crt")
        );
        assert!(
            peer[0].from.starts_with("--listen-peer-urls in "),
            "{}",
            peer[0].from
        );
    }

    /// kubespray's `etcd.service` runs a bare `etcd` with every setting in `/etc/etcd.env`:
    /// its member pair is served to clients (on its address and loopback) and to peers.
    #[test]
    fn kubesprays_member_pair_is_shown_to_clients_and_peers() {
        use crate::components::UnitSettings;
        let unit = UnitSettings {
            unit: "etcd.service".into(),
            exec_start: vec![(
                "/usr/local/bin/etcd".into(),
                vec!["/usr/local/bin/etcd".into()],
            )],
            environment: Vec::new(),
            environment_files: vec![(format!("{FIXTURES}/kubespray/etcd.env").into(), false)],
        };
        let node = NodeReading::read_with(Path::new("/nonexistent"), &[unit]);
        let etcd = &node.units[0];
        let ca = "/etc/ssl/etcd/ssl/ca.pem";
        assert_eq!(
            lines(&shown(etcd, rule("cert-file")).unwrap()),
            [
                format!("127.0.206.2:2379 as 127.0.206.2 trusting {ca}"),
                format!("127.0.0.1:2379 as 127.0.206.2 trusting {ca}"),
                format!("127.0.0.1:2379 as 127.0.0.1 trusting {ca}"),
            ]
        );
        let peer = shown(etcd, rule("peer-cert-file")).unwrap();
        assert_eq!(
            lines(&peer),
            [format!("127.0.206.2:2380 as 127.0.206.2 trusting {ca}")]
        );
        assert_eq!(
            peer[0].cert,
            PathBuf::from("/etc/ssl/etcd/ssl/member-node1.pem")
        );
    }

    /// Debian's etcd reads its settings from the environment (`/etc/default/etcd`); a
    /// wildcard listener is reached on loopback, and verified for the names it advertises.
    #[test]
    fn an_etcd_unit_with_its_environment_shows_a_wildcard_listener_on_loopback() {
        let mut c = Component {
            runs: Runs::Unit("etcd.service".into()),
            kind: Some(Kind::Etcd),
            settings: vec![vec!["/usr/bin/etcd".into()]],
            reads: Default::default(),
            unknown: None,
            env: Vec::new(),
            env_files: Vec::new(),
            files: Vec::new(),
            probes: Vec::new(),
        };
        c.env = [
            ("ETCD_LISTEN_CLIENT_URLS", "https://0.0.0.0:2379"),
            ("ETCD_ADVERTISE_CLIENT_URLS", "https://etcd-1.example:2379"),
            ("ETCD_LISTEN_PEER_URLS", "http://127.0.0.1:2380"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
        c.files = [
            ("cert-file", "/etc/etcd/server.crt"),
            ("trusted-ca-file", "/etc/etcd/ca.crt"),
            ("peer-cert-file", "/etc/etcd/peer.crt"),
            ("peer-trusted-ca-file", "/etc/etcd/ca.crt"),
        ]
        .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
        .to_vec();
        assert_eq!(
            lines(&shown(&c, rule("cert-file")).unwrap()),
            ["127.0.0.1:2379 as etcd-1.example trusting /etc/etcd/ca.crt"]
        );
        assert_eq!(
            shown(&c, rule("peer-cert-file")).map_err(|e| e.to_string()),
            Err("--listen-peer-urls names no https:// address".into()),
            "a plain-HTTP peer listener serves no certificate"
        );
        // A listener on an address this node does not hold (bound with ip_nonlocal_bind,
        // a VIP on the other controller) reaches another host: never dialled.
        c.env[0].1 = "https://192.0.2.44:2379,https://127.0.0.1:2379".into();
        assert_eq!(
            lines(&shown(&c, rule("cert-file")).unwrap()),
            [
                "127.0.0.1:2379 as etcd-1.example trusting /etc/etcd/ca.crt",
                "127.0.0.1:2379 as 127.0.0.1 trusting /etc/etcd/ca.crt"
            ]
        );
        c.env[0].1 = "https://192.0.2.44:2379".into();
        assert_eq!(
            shown(&c, rule("cert-file")).map_err(|e| e.to_string()),
            Err(
                "--listen-client-urls names no https:// address of this node's own \
                 (https://192.0.2.44:2379: 192.0.2.44 is not an address of this node (held by \
                 another))"
                    .into()
            ),
        );
        c.files.retain(|(k, _)| k != "trusted-ca-file");
        let why = shown(&c, rule("cert-file")).unwrap_err().to_string();
        assert!(
            why.contains("which CA its clients trust is not known"),
            "{why}"
        );
    }

    /// kubelet's API: its `--config` file's `address` and `port`, else its flags, else
    /// every address on 10250 (reached on loopback); never an address not its node's own.
    #[test]
    fn kubelets_api_is_where_its_config_says() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        let node = |files: Vec<(String, PathBuf)>, flags: &[&str]| Component {
            runs: Runs::Unit("kubelet.service".into()),
            kind: Some(Kind::Kubelet),
            settings: vec![
                std::iter::once("/usr/bin/kubelet")
                    .chain(flags.iter().copied())
                    .map(String::from)
                    .collect(),
            ],
            reads: Default::default(),
            unknown: None,
            env: Vec::new(),
            env_files: Vec::new(),
            files,
            probes: Vec::new(),
        };
        let with_config = || vec![("config".to_string(), config.clone())];
        assert_eq!(
            kubelet(&node(Vec::new(), &[])).unwrap(),
            ("127.0.0.1:10250".into(), "127.0.0.1".into())
        );
        assert_eq!(
            kubelet(&node(Vec::new(), &["--port=10260", "--address=::"])).unwrap(),
            ("[::1]:10260".into(), "::1".into())
        );
        std::fs::write(
            &config,
            "kind: KubeletConfiguration\nhealthzPort: 10248\nport: 10251\n",
        )
        .unwrap();
        assert_eq!(
            kubelet(&node(with_config(), &["--port=1"])).unwrap(),
            ("127.0.0.1:10251".into(), "127.0.0.1".into())
        );
        std::fs::write(&config, "address: 192.0.2.7\n").unwrap();
        let err = kubelet(&node(with_config(), &[])).unwrap_err().to_string();
        assert!(
            err.starts_with("its address 192.0.2.7: 192.0.2.7 is not an address of this node"),
            "{err}"
        );
    }
}
