//! Three booted Debian controllers forming one etcd cluster with mutual TLS, certrenewd's
//! `.deb` on each (tests/controllers_ha.rs, issue 15).
//!
//! `mkpki.sh ha-etcd` makes the PKI with openssl: one CA, and per node a StarlingX-shaped
//! /etc/etcd (ca.crt + ca.key, etcd-server, etcd-peer, etcd-client), all due together (issued
//! 355 days ago with a 365-day lifetime), bound into node n. Debian's `etcd.service` on node n
//! serves clients on https://127.0.0.n:2379 and peers on https://127.0.0.n:2380, both
//! requiring client certificates of the CA. A probe certificate (not due) is kept on the host.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::controllers::{Cluster, Controller, Host, Spec};
use super::etcd_probe::{Probe, Tls};
use super::{openssl, x509};

pub const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");
pub const SHIPPED_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/certrenewd.toml");
pub const CONFIG: &str = "/etc/certrenewd/certrenewd.toml";
pub const DAEMON: &str = "certrenewd.service";
pub const ETCD: &str = "etcd.service";
pub const MEMBERS: usize = 3;
/// A pass that waits for the restart lock behind two others, each restarting etcd.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(240);
/// The certificates of each node, under /etc/etcd.
pub const LEAVES: [&str; 3] = ["etcd-server", "etcd-peer", "etcd-client"];

/// The client URL of member n (1-based).
pub fn endpoint(n: usize) -> String {
    format!("https://127.0.0.{n}:2379")
}

pub fn endpoints() -> Vec<String> {
    (1..=MEMBERS).map(endpoint).collect()
}

/// /etc/default/etcd of member n: mTLS for clients and peers, a new cluster of three.
fn etcd_vars(n: usize) -> Vec<(String, String)> {
    let ip = format!("127.0.0.{n}");
    let cluster: Vec<String> = (1..=MEMBERS)
        .map(|m| format!("node{m}=https://127.0.0.{m}:2380"))
        .collect();
    [
        ("ETCD_NAME", format!("node{n}")),
        ("ETCD_DATA_DIR", "/var/lib/etcd/default".into()),
        ("ETCD_LISTEN_CLIENT_URLS", format!("https://{ip}:2379")),
        ("ETCD_ADVERTISE_CLIENT_URLS", format!("https://{ip}:2379")),
        ("ETCD_LISTEN_PEER_URLS", format!("https://{ip}:2380")),
        (
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            format!("https://{ip}:2380"),
        ),
        ("ETCD_INITIAL_CLUSTER", cluster.join(",")),
        ("ETCD_INITIAL_CLUSTER_STATE", "new".into()),
        ("ETCD_INITIAL_CLUSTER_TOKEN", "certrenewd-ha".into()),
        ("ETCD_CERT_FILE", "/etc/etcd/etcd-server.crt".into()),
        ("ETCD_KEY_FILE", "/etc/etcd/etcd-server.key".into()),
        ("ETCD_TRUSTED_CA_FILE", "/etc/etcd/ca.crt".into()),
        ("ETCD_CLIENT_CERT_AUTH", "true".into()),
        ("ETCD_PEER_CERT_FILE", "/etc/etcd/etcd-peer.crt".into()),
        ("ETCD_PEER_KEY_FILE", "/etc/etcd/etcd-peer.key".into()),
        ("ETCD_PEER_TRUSTED_CA_FILE", "/etc/etcd/ca.crt".into()),
        ("ETCD_PEER_CLIENT_CERT_AUTH", "true".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A certificate the pass must renew, as it was before.
#[derive(Clone, Debug)]
pub struct Due {
    /// Member number (1-based).
    pub node: usize,
    /// etcd-server, etcd-peer or etcd-client.
    pub name: &'static str,
    pub host: PathBuf,
    pub not_after: String,
}

/// The three controllers, their PKI on the host, and the probe's identity.
pub struct Ha {
    pub cluster: Cluster,
    pub pki: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Ha {
    /// Makes the PKI (`mkpki.sh ha-etcd DIR ARGS`), boots node1..node3 on one network,
    /// installs the `.deb` on each and starts etcd on each (without waiting for it).
    pub fn boot(host: &Host, mkpki_args: &[&str]) -> Ha {
        let started = Instant::now();
        let tmp = tempfile::Builder::new()
            .prefix("certrenewd-ha.")
            .tempdir()
            .unwrap();
        let pki = tmp.path().join("pki");
        let out = Command::new("bash")
            .arg(MKPKI)
            .args(["ha-etcd", &pki.display().to_string()])
            .args(mkpki_args)
            .output()
            .expect("running mkpki.sh");
        assert!(
            out.status.success(),
            "mkpki.sh ha-etcd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let specs = (1..=MEMBERS)
            .map(|n| {
                Spec::new(&format!("node{n}"))
                    .bind(&pki.join(format!("node{n}/etc/etcd")), "/etc/etcd")
            })
            .collect();
        let cluster = Cluster::boot(host, specs).unwrap_or_else(|e| panic!("{e:#}"));
        let ha = Ha {
            cluster,
            pki,
            _tmp: tmp,
        };
        for (i, node) in ha.cluster.nodes.iter().enumerate() {
            node.install_deb(&host.deb)
                .unwrap_or_else(|e| panic!("{e:#}"));
            ha.chown_etcd_keys(i + 1, node);
            let vars = etcd_vars(i + 1);
            let vars: Vec<(&str, &str)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            node.etcd_defaults(&vars).unwrap();
            node.systemctl(&["restart", "--no-block", ETCD]).unwrap();
        }
        say(&format!(
            "ha: 3 controllers booted, .deb installed, etcd starting ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
        ha
    }

    /// etcd runs as user `etcd`: its server and peer keys must be readable by it.
    fn chown_etcd_keys(&self, n: usize, node: &Controller) {
        let (uid, gid) = node.ids("etcd").unwrap();
        for key in ["etcd-server.key", "etcd-peer.key"] {
            let path = self.etc_etcd(n).join(key);
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        }
    }

    /// Node n's /etc/etcd as the host sees it.
    pub fn etc_etcd(&self, n: usize) -> PathBuf {
        self.pki.join(format!("node{n}/etc/etcd"))
    }

    /// Node n (1-based).
    pub fn node(&self, n: usize) -> &Controller {
        &self.cluster.nodes[n - 1]
    }

    /// Waits until etcd.service is active on every node and the cluster answers as one.
    pub fn wait_cluster_healthy(&self) {
        let started = Instant::now();
        for node in &self.cluster.nodes {
            node.wait_active(ETCD, Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("{e:#}"));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.etcdctl(1, &["endpoint", "health", "--cluster"]);
            if out.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster is not healthy: {out:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        // A full mesh: no member (in its current run) refuses another's certificate. (A
        // connection closed before its handshake, "EOF", is not a refusal.)
        for node in &self.cluster.nodes {
            let run = node.unit_property(ETCD, "InvocationID").unwrap();
            let run = format!("_SYSTEMD_INVOCATION_ID={run}");
            let grep = "rejected connection.*(tls|x509|certificate)";
            let refused = node.journal(&[&run, "--grep", grep, "-n", "3"]);
            assert!(
                !refused.contains("rejected connection"),
                "{}: etcd refuses connections:\n{refused}",
                node.hostname()
            );
        }
        say(&format!(
            "ha: 3-member etcd cluster healthy ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
    }

    /// `etcdctl` inside node n with its own client certificate (CN=root), against every member.
    pub fn etcdctl(&self, n: usize, args: &[&str]) -> anyhow::Result<String> {
        let endpoints = format!("--endpoints={}", endpoints().join(","));
        let mut argv = vec![
            "etcdctl",
            endpoints.as_str(),
            "--cacert=/etc/etcd/ca.crt",
            "--cert=/etc/etcd/etcd-client.crt",
            "--key=/etc/etcd/etcd-client.key",
            "--dial-timeout=2s",
            "--command-timeout=3s",
        ];
        argv.extend_from_slice(args);
        self.node(n).run(argv)
    }

    /// Asserts the cluster is down: after `settle`, etcd.service is still starting on every
    /// node (Type=notify: a member is ready only once it has reached a quorum).
    pub fn assert_cluster_down(&self, settle: Duration) {
        std::thread::sleep(settle);
        for node in &self.cluster.nodes {
            let state = node.unit_property(ETCD, "ActiveState").unwrap();
            assert_eq!(
                state,
                "activating",
                "{}: etcd.service is {state}",
                node.hostname()
            );
        }
        say(&format!(
            "ha: etcd has not come up on any node after {settle:?}"
        ));
    }

    /// The probe's identity: CN=root, not due.
    pub fn probe_tls(&self) -> Tls {
        let dir = self.pki.join("probe");
        Tls {
            ca: dir.join("ca.crt"),
            cert: dir.join("probe.crt"),
            key: dir.join("probe.key"),
        }
    }

    /// Starts the probe inside the cluster's network and waits for its first good sample.
    pub fn probe(&self) -> Probe {
        let netns = Path::new("/run/netns").join(self.cluster.network());
        let probe = Probe::start(&netns, &endpoints(), &self.probe_tls())
            .unwrap_or_else(|e| panic!("{e:#}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let good = probe
                .samples()
                .iter()
                .any(|s| s.wrote && s.healthy_count() == MEMBERS);
            if good {
                return probe;
            }
            assert!(
                Instant::now() < deadline,
                "the probe never saw a healthy cluster"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The same configuration on every node: the shipped file with `keys` (TOML lines) set
    /// in its `[coordination]` table, as an operator edits it.
    pub fn write_config(&self, keys: &str) {
        let shipped = fs::read_to_string(SHIPPED_CONFIG).unwrap();
        let table = "\n[coordination]\n";
        assert!(
            shipped.contains(table),
            "{SHIPPED_CONFIG} has no [coordination] table"
        );
        let text = shipped.replacen(table, &format!("{table}{keys}"), 1);
        for node in &self.cluster.nodes {
            node.write_file(CONFIG, text.as_bytes(), 0o644).unwrap();
        }
    }

    /// Every due certificate of every node, as it is now.
    pub fn due(&self) -> Vec<Due> {
        let mut due = Vec::new();
        for n in 1..=MEMBERS {
            for name in LEAVES {
                let host = self.etc_etcd(n).join(format!("{name}.crt"));
                due.push(Due {
                    node: n,
                    name,
                    not_after: x509(&host, &["-enddate"]),
                    host,
                });
            }
        }
        due
    }

    /// InvocationID of `unit` on every node.
    pub fn invocations(&self, unit: &str) -> Vec<String> {
        self.cluster
            .nodes
            .iter()
            .map(|n| n.unit_property(unit, "InvocationID").unwrap_or_default())
            .collect()
    }

    /// `systemctl start --no-block certrenewd.service` on the given nodes, one right after
    /// the other (all within the same second: each call takes some 20-50 ms). Returns the
    /// host time each was started.
    pub fn start_daemons(&self, nodes: &[usize]) -> Vec<Instant> {
        nodes
            .iter()
            .map(|&n| {
                let at = Instant::now();
                self.node(n)
                    .systemctl(&["start", "--no-block", DAEMON])
                    .unwrap_or_else(|e| panic!("{e:#}"));
                at
            })
            .collect()
    }

    /// Waits for the end of the first pass of a run of the daemon on node n other than
    /// `before` (an InvocationID; "" before its first start): its STATUS= shows a last pass.
    /// Returns that status.
    pub fn wait_pass(&self, n: usize, before: &str, deadline: Instant) -> String {
        self.node(n).wait_daemon_pass(before, deadline)
    }

    /// Keeps each node's journal of certrenewd and etcd (with the time of every line) in
    /// `$CARGO_TARGET_TMPDIR/controllers-ha/TEST-nodeN.log`, for the reader of a failure.
    pub fn keep_journals(&self, test: &str) {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("controllers-ha");
        fs::create_dir_all(&dir).unwrap();
        for (i, node) in self.cluster.nodes.iter().enumerate() {
            let text = node.journal(&["-u", DAEMON, "-u", ETCD, "-o", "short-precise"]);
            let file = dir.join(format!("{test}-node{}.log", i + 1));
            fs::write(&file, text).unwrap();
        }
        say(&format!(
            "ha: journals in {}/{test}-node*.log",
            dir.display()
        ));
    }

    /// The active alarms of node n (`certrenewd alarms --output json`).
    pub fn alarms(&self, n: usize) -> Vec<Value> {
        let text = self
            .node(n)
            .run(["certrenewd", "alarms", "--output", "json"])
            .unwrap_or_else(|e| panic!("{e:#}"));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        v["alarms"].as_array().cloned().unwrap_or_default()
    }

    /// SHA-256 fingerprint of the certificate member n serves on `port` (2379 clients, 2380
    /// peers), read with `openssl s_client` inside node n with its own client certificate.
    pub fn served(&self, n: usize, port: u16) -> String {
        let out = self
            .node(n)
            .sh(&format!(
                "openssl s_client -connect 127.0.0.{n}:{port} -CAfile /etc/etcd/ca.crt \
                 -cert /etc/etcd/etcd-client.crt -key /etc/etcd/etcd-client.key </dev/null 2>/dev/null \
                 | openssl x509 -noout -fingerprint -sha256"
            ))
            .unwrap_or_else(|e| panic!("{e:#}"));
        out.trim().to_string()
    }

    /// Every due certificate renewed (a new notAfter 300 days ahead, it verifies against the
    /// CA) and served: each member's client and peer ports present the new files.
    pub fn assert_renewed_and_served(&self, due: &[Due]) {
        for d in due {
            let name = d.host.display();
            let now = x509(&d.host, &["-enddate"]);
            assert_ne!(now, d.not_after, "{name} was not renewed");
            x509(&d.host, &["-checkend", &(300 * 86_400).to_string()]);
            let ca = self.etc_etcd(d.node).join("ca.crt");
            openssl(&[
                "verify",
                "-CAfile",
                &ca.display().to_string(),
                &name.to_string(),
            ]);
        }
        for n in 1..=MEMBERS {
            for (port, file) in [(2379, "etcd-server.crt"), (2380, "etcd-peer.crt")] {
                let want = x509(&self.etc_etcd(n).join(file), &["-fingerprint", "-sha256"]);
                assert_eq!(
                    self.served(n, port),
                    want,
                    "node{n} does not serve the renewed {file} on port {port}"
                );
            }
        }
    }
}

impl Drop for Ha {
    /// A failing test keeps the journals (before the controllers halt).
    fn drop(&mut self) {
        if std::thread::panicking() {
            let name = std::thread::current().name().unwrap_or("ha").to_string();
            self.keep_journals(&name);
        }
    }
}

/// A line on stderr now (libtest captures println! of passing tests; these are timings).
pub fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}
