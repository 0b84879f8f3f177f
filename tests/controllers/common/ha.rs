//! Three booted Debian controllers forming one etcd cluster with mutual TLS, certrenewd's
//! `.deb` on each (tests/controllers/ha.rs, tests/controllers/kubeadm_ha.rs).
//!
//! Two [`Layout`]s of the same cluster. [`STARLINGX`]: `mkpki.sh ha-etcd` makes the PKI with
//! openssl: one CA, and per node a StarlingX-shaped /etc/etcd (ca.crt + ca.key, etcd-server,
//! etcd-peer, etcd-client), all due together (issued 355 days ago with a 365-day lifetime),
//! bound into node n; Debian's `etcd.service` on node n serves clients on
//! https://127.0.0.n:2379 and peers on https://127.0.0.n:2380, both requiring client
//! certificates of the CA. [`KUBEADM`]: `mkpki.sh ha-kubeadm`, kubeadm's
//! /etc/kubernetes/pki/etcd and apiserver-etcd-client per node, bound with /etc/kubernetes;
//! etcd runs as a static pod under the kubelet stand-in (tests/controllers/common/kubelet.rs) from
//! the manifests the test writes. A probe certificate (not due) is kept on the host.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::controllers::{Cluster, Controller, Host, Spec, Turn};
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

/// Where a shape of controller keeps etcd's files (paths inside a node), and what runs etcd.
pub struct Layout {
    /// mkpki.sh's layout of the three nodes' trees (OUTDIR/nodeN/...).
    pub mkpki: &'static str,
    /// The directory of node n's tree bound at the same path inside it.
    pub bound: &'static str,
    /// The members' CA, and the client identity etcdctl and `served` use (certificate, key).
    pub ca: &'static str,
    pub client: (&'static str, &'static str),
    /// The certificates due on every node: (name, path).
    pub leaves: &'static [(&'static str, &'static str)],
    /// What each member serves: (port, certificate path).
    pub served: [(u16, &'static str); 2],
    /// The systemd unit that is etcd, or `None` for a static pod.
    pub unit: Option<&'static str>,
    /// Node n's etcd member name is this and n (`node1`; kubespray's `etcd1`).
    pub member: &'static str,
}

/// StarlingX's /etc/etcd, run by Debian's etcd.service from /etc/default/etcd.
pub const STARLINGX: Layout = Layout {
    mkpki: "ha-etcd",
    bound: "/etc/etcd",
    ca: "/etc/etcd/ca.crt",
    client: ("/etc/etcd/etcd-client.crt", "/etc/etcd/etcd-client.key"),
    leaves: &[
        ("etcd-server", "/etc/etcd/etcd-server.crt"),
        ("etcd-peer", "/etc/etcd/etcd-peer.crt"),
        ("etcd-client", "/etc/etcd/etcd-client.crt"),
    ],
    served: [
        (2379, "/etc/etcd/etcd-server.crt"),
        (2380, "/etc/etcd/etcd-peer.crt"),
    ],
    unit: Some(ETCD),
    member: "node",
};

/// kubespray's /etc/ssl/etcd/ssl, run by kubespray's own etcd.service from /etc/etcd.env:
/// node n's member pair is `member-node{n}.pem` (every host's pairs are on every node).
pub const KUBESPRAY: Layout = Layout {
    mkpki: "ha-kubespray",
    bound: "/etc/ssl/etcd",
    ca: "/etc/ssl/etcd/ssl/ca.pem",
    client: (
        "/etc/ssl/etcd/ssl/admin-node1.pem",
        "/etc/ssl/etcd/ssl/admin-node1-key.pem",
    ),
    leaves: &[("member", "/etc/ssl/etcd/ssl/member-node{n}.pem")],
    served: [
        (2379, "/etc/ssl/etcd/ssl/member-node{n}.pem"),
        (2380, "/etc/ssl/etcd/ssl/member-node{n}.pem"),
    ],
    unit: Some(ETCD),
    member: "etcd",
};

/// kubeadm's /etc/kubernetes: the etcd leaves it makes, etcd a static pod.
pub const KUBEADM: Layout = Layout {
    mkpki: "ha-kubeadm",
    bound: "/etc/kubernetes",
    ca: "/etc/kubernetes/pki/etcd/ca.crt",
    client: (
        "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
        "/etc/kubernetes/pki/etcd/healthcheck-client.key",
    ),
    leaves: &[
        ("server", "/etc/kubernetes/pki/etcd/server.crt"),
        ("peer", "/etc/kubernetes/pki/etcd/peer.crt"),
        (
            "healthcheck-client",
            "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
        ),
        (
            "apiserver-etcd-client",
            "/etc/kubernetes/pki/apiserver-etcd-client.crt",
        ),
    ],
    served: [
        (2379, "/etc/kubernetes/pki/etcd/server.crt"),
        (2380, "/etc/kubernetes/pki/etcd/peer.crt"),
    ],
    unit: None,
    member: "node",
};

/// The client URL of member n (1-based).
pub fn endpoint(n: usize) -> String {
    format!("https://127.0.0.{n}:2379")
}

pub fn endpoints() -> Vec<String> {
    (1..=MEMBERS).map(endpoint).collect()
}

/// /etc/default/etcd of member n: mTLS for clients and peers, a new cluster of three.
pub fn etcd_vars(n: usize) -> Vec<(String, String)> {
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
    /// Its name in the layout's leaves (etcd-server, etcd-peer or etcd-client in StarlingX's).
    pub name: &'static str,
    pub host: PathBuf,
    pub not_after: String,
}

/// The three controllers, their PKI on the host, and the probe's identity.
pub struct Ha {
    pub cluster: Cluster,
    pub pki: PathBuf,
    pub layout: &'static Layout,
    _tmp: tempfile::TempDir,
    /// This test's turn, the whole machine (dropped last, after the controllers halted):
    /// taken before the PKI is made, so that making it does not slow another test's cluster.
    /// Two clusters at once on a 2-CPU machine (six etcd members, six daemons, two probes)
    /// starve each other: elections and timeouts then measure the machine, not certrenewd.
    _turn: Turn,
}

impl Ha {
    /// Makes the PKI (`mkpki.sh ha-etcd DIR ARGS`), boots node1..node3 on one network,
    /// installs the `.deb` on each and starts etcd on each (without waiting for it).
    pub fn boot(host: &Host, mkpki_args: &[&str]) -> Ha {
        let ha = Ha::boot_layout(host, &STARLINGX, mkpki_args);
        let started = Instant::now();
        for (i, node) in ha.cluster.nodes.iter().enumerate() {
            ha.chown_etcd_keys(i + 1, node);
            let mut vars = etcd_vars(i + 1);
            // mkpki's --ca-left: the members trust their peers through the bundle holding
            // the CA (a copy that certrenewd must replace when it renews the CA).
            if ha.etc_etcd(i + 1).join("ca-bundle.pem").exists() {
                for (k, v) in vars.iter_mut() {
                    if k == "ETCD_PEER_TRUSTED_CA_FILE" {
                        *v = "/etc/etcd/ca-bundle.pem".into();
                    }
                }
            }
            let vars: Vec<(&str, &str)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            node.etcd_defaults(&vars).unwrap();
            node.systemctl(&["restart", "--no-block", ETCD]).unwrap();
        }
        say(&format!(
            "ha: etcd starting ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
        ha
    }

    /// Makes the PKI (`mkpki.sh LAYOUT DIR ARGS`), boots node1..node3 on one network, node n
    /// with its tree's `layout.bound` bound in, and installs the `.deb` on each. Nothing runs
    /// etcd yet.
    pub fn boot_layout(host: &Host, layout: &'static Layout, mkpki_args: &[&str]) -> Ha {
        let turn = Turn::take(MEMBERS);
        let started = Instant::now();
        let tmp = tempfile::Builder::new()
            .prefix("certrenewd-ha.")
            .tempdir()
            .unwrap();
        let pki = tmp.path().join("pki");
        let out = Command::new("bash")
            .arg(MKPKI)
            .args([layout.mkpki, &pki.display().to_string()])
            .args(mkpki_args)
            .output()
            .expect("running mkpki.sh");
        assert!(
            out.status.success(),
            "mkpki.sh {}: {}",
            layout.mkpki,
            String::from_utf8_lossy(&out.stderr)
        );
        let specs = (1..=MEMBERS)
            .map(|n| {
                let tree = pki.join(format!("node{n}"));
                let mut spec = Spec::new(&format!("node{n}"));
                // And, when the layout binds something else, mkpki's ha-etcd --ca-left: the
                // node's admin.conf, a copy of the CA.
                let mut dirs = vec![layout.bound, "/etc/kubernetes"];
                dirs.dedup();
                for dir in dirs {
                    let on_host = tree.join(dir.trim_start_matches('/'));
                    if on_host.exists() {
                        spec = spec.bind(&on_host, dir);
                    }
                }
                spec
            })
            .collect();
        let cluster = Cluster::boot(host, specs).unwrap_or_else(|e| panic!("{e:#}"));
        let ha = Ha {
            cluster,
            pki,
            layout,
            _tmp: tmp,
            _turn: turn,
        };
        for node in &ha.cluster.nodes {
            node.install_deb(&host.deb)
                .unwrap_or_else(|e| panic!("{e:#}"));
        }
        say(&format!(
            "ha: 3 controllers booted, .deb installed ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
        ha
    }

    /// A path inside node n, as the host sees it in the node's tree (under `layout.bound`).
    /// `{n}` in `inside` stands for the node's number (kubespray names a member's pair by
    /// its host).
    pub fn on_host(&self, n: usize, inside: &str) -> PathBuf {
        let inside = inside.replace("{n}", &n.to_string());
        self.pki
            .join(format!("node{n}"))
            .join(inside.trim_start_matches('/'))
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
        let Some(unit) = self.layout.unit else {
            self.wait_members_answer();
            return;
        };
        for node in &self.cluster.nodes {
            node.wait_active(unit, Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("{e:#}"));
        }
        self.wait_members_answer();
        // A full mesh: no member (in its current run) refuses another's certificate. (A
        // connection closed before its handshake, "EOF", is not a refusal.)
        for node in &self.cluster.nodes {
            let run = node.unit_property(unit, "InvocationID").unwrap();
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

    /// Waits until every member answers healthy (`etcdctl endpoint health --cluster`), however
    /// etcd is run.
    pub fn wait_members_answer(&self) {
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
    }

    /// `etcdctl` inside node n with its own client certificate (the layout's), against every
    /// member.
    pub fn etcdctl(&self, n: usize, args: &[&str]) -> anyhow::Result<String> {
        self.etcdctl_at(n, &endpoints(), args)
    }

    /// [`Ha::etcdctl`] against the members at `endpoints` only.
    pub fn etcdctl_at(
        &self,
        n: usize,
        endpoints: &[String],
        args: &[&str],
    ) -> anyhow::Result<String> {
        let endpoints = format!("--endpoints={}", endpoints.join(","));
        let l = self.layout;
        let (ca, cert, key) = (
            format!("--cacert={}", l.ca),
            format!("--cert={}", l.client.0),
            format!("--key={}", l.client.1),
        );
        let mut argv = vec![
            "etcdctl",
            endpoints.as_str(),
            &ca,
            &cert,
            &key,
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
    /// in its `[coordination]` table, as an operator edits it, and every watch saying
    /// `on_renew = "restart"`: these clusters put the restart lock and gate to the test, and
    /// by default a member is not restarted for its serving and peer certificates.
    pub fn write_config(&self, keys: &str) {
        self.write_config_edited(keys, &[]);
    }

    /// [`Ha::write_config`], with each `(from, to)` of `edits` replaced in the shipped file
    /// first (each must be there).
    pub fn write_config_edited(&self, keys: &str, edits: &[(&str, &str)]) {
        self.write_configuration(keys, edits, true);
    }

    /// [`Ha::write_config_edited`] with the shipped `on_renew` default (`"reload"`).
    pub fn write_config_as_shipped(&self, keys: &str, edits: &[(&str, &str)]) {
        self.write_configuration(keys, edits, false);
    }

    fn write_configuration(&self, keys: &str, edits: &[(&str, &str)], restart: bool) {
        let mut shipped = fs::read_to_string(SHIPPED_CONFIG).unwrap();
        if restart {
            let watch = "\n[[watch]]\n";
            assert!(shipped.contains(watch), "{SHIPPED_CONFIG} has no watch");
            shipped = shipped.replace(watch, "\n[[watch]]\non_renew = \"restart\"\n");
        }
        for (from, to) in edits {
            assert!(shipped.contains(from), "{SHIPPED_CONFIG} has no {from:?}");
            shipped = shipped.replacen(from, to, 1);
        }
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
            for &(name, inside) in self.layout.leaves {
                let host = self.on_host(n, inside);
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
            // etcd as a static pod logs to the kubelet stand-in's file, not the journal.
            let etcd_log = format!("{}/etcd.log", super::kubelet::RUN_DIR);
            if let Ok(text) = node.read_file(&etcd_log) {
                fs::write(dir.join(format!("{test}-node{}-etcd.log", i + 1)), text).unwrap();
            }
            let text = node.journal(&[
                "-u",
                DAEMON,
                "-u",
                ETCD,
                "-u",
                "kubelet.service",
                "-o",
                "short-precise",
            ]);
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
        let Layout {
            ca,
            client: (cert, key),
            ..
        } = self.layout;
        let out = self
            .node(n)
            .sh(&format!(
                "openssl s_client -connect 127.0.0.{n}:{port} -CAfile {ca} \
                 -cert {cert} -key {key} </dev/null 2>/dev/null \
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
            assert_ne!(
                now, d.not_after,
                "node{}'s {} ({name}) was not renewed",
                d.node, d.name
            );
            x509(&d.host, &["-checkend", &(300 * 86_400).to_string()]);
            let ca = self.on_host(d.node, self.layout.ca);
            openssl(&[
                "verify",
                "-CAfile",
                &ca.display().to_string(),
                &name.to_string(),
            ]);
        }
        for n in 1..=MEMBERS {
            for (port, file) in self.layout.served {
                let want = x509(&self.on_host(n, file), &["-fingerprint", "-sha256"]);
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

/// The lease TTL of the tests' restart lock: small, so a dead holder's lock goes quickly.
pub const LEASE_TTL_SECS: u64 = 5;
/// The lock prefix (the shipped default).
pub const LOCK_PREFIX: &str = "/certrenewd/restart-lock";

/// The same `[coordination]` on every node: every member's client URL, a small lease TTL.
/// `extra`: more keys of the table (an explicit identity).
pub fn coordination_on(gate_timeout_secs: u64, extra: &str) -> String {
    let endpoints: Vec<String> = endpoints().iter().map(|e| format!("\"{e}\"")).collect();
    format!(
        "enabled = true\nendpoints = [{}]\nlease_ttl_secs = {LEASE_TTL_SECS}\n\
         gate_timeout_secs = {gate_timeout_secs}\nlock_timeout_secs = 600\n{extra}",
        endpoints.join(", ")
    )
}

/// Every alarm of every node, as (node, alarm), once the alarms raised on the other
/// controllers' behalf (500.230, 500.240, 500.250) have settled: a controller that could not
/// publish its record while its own certificates were expired, or while it waited for the
/// lock, is rightly called quiet by the others until their next look after it did, within
/// a lease TTL. Those still raised after two TTLs are returned with the rest.
pub fn all_alarms(ha: &Ha) -> Vec<(usize, Value)> {
    let peers =
        |a: &Value| ["500.230", "500.240", "500.250"].contains(&a["id"].as_str().unwrap_or(""));
    let every = || -> Vec<(usize, Value)> {
        (1..=MEMBERS)
            .flat_map(|n| ha.alarms(n).into_iter().map(move |a| (n, a)))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(2 * LEASE_TTL_SECS + 5);
    loop {
        let all = every();
        if !all.iter().any(|(_, a)| peers(a)) || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every node held the lock and released it; a node that waited said for whom, in the
/// message and in the journal field CERTRENEWD_HOLDER, naming another node.
pub fn assert_turns_were_taken_and_said(ha: &Ha) {
    let mut waited = 0;
    for n in 1..=MEMBERS {
        let entries = ha.node(n).journal_json(&["-u", DAEMON]);
        let said = |text: &str| {
            entries
                .iter()
                .filter(|e| e["MESSAGE"].as_str().is_some_and(|m| m.contains(text)))
                .cloned()
                .collect::<Vec<Value>>()
        };
        assert!(
            !said("holding the restart lock").is_empty(),
            "node{n} never held the lock"
        );
        assert!(
            !said("released the restart lock").is_empty(),
            "node{n} never released it"
        );
        for e in said("waiting for the restart lock") {
            let holder = e["CERTRENEWD_HOLDER"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let msg = e["MESSAGE"].as_str().unwrap_or_default();
            let prefix = ha.layout.member;
            assert!(
                holder.starts_with(prefix) && holder != format!("{prefix}{n}"),
                "{e}"
            );
            assert!(msg.contains(&format!("(held by {holder})")), "{msg}");
            waited += 1;
        }
    }
    assert!(
        waited > 0,
        "no node waited for the lock: the passes did not overlap"
    );
}

/// Nothing is left under the lock prefix (etcdctl on node1, with its client certificate):
/// its queue is every key under `<lock_prefix>/` (a CA's re-issue is published beside it).
pub fn assert_lock_free(ha: &Ha) {
    let queue = format!("{LOCK_PREFIX}/");
    let left = ha
        .etcdctl(1, &["get", "--prefix", "--keys-only", &queue])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(left.trim().is_empty(), "left under {LOCK_PREFIX}: {left}");
}

/// 250.003 on node n, its reason (panics unless exactly that alarm is active).
pub fn one_250_003(ha: &Ha, n: usize) -> String {
    let alarms = ha.alarms(n);
    let found: Vec<&Value> = alarms.iter().filter(|a| a["id"] == "250.003").collect();
    assert_eq!(found.len(), 1, "node{n}: alarms {alarms:#?}");
    found[0]["reason"].as_str().unwrap_or("").to_string()
}

/// The node whose daemon says it holds the restart lock, once one does.
pub fn wait_holder(ha: &Ha, nodes: &[usize], deadline: Instant) -> usize {
    loop {
        for &n in nodes {
            let status = ha
                .node(n)
                .unit_property(DAEMON, "StatusText")
                .unwrap_or_default();
            if status.contains("holding the restart lock") {
                return n;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no node ever held the restart lock"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the three daemons one right after the other and waits for every pass; returns the
/// statuses and the wall time from the first start to the last pass's end. That the passes
/// overlapped is not timed here but shown by what they did: a node that waited for another's
/// lock (`assert_turns_were_taken_and_said`), or, without coordination, the quorum lost.
pub fn run_passes(ha: &Ha) -> (Vec<String>, Duration) {
    let nodes: Vec<usize> = (1..=MEMBERS).collect();
    let starts = ha.start_daemons(&nodes);
    let spread = starts[MEMBERS - 1] - starts[0];
    say(&format!(
        "ha: {DAEMON} started on node1..node{MEMBERS} within {} ms",
        spread.as_millis()
    ));
    let deadline = Instant::now() + PASS_TIMEOUT;
    let statuses = nodes
        .iter()
        .map(|&n| ha.wait_pass(n, "", deadline))
        .collect();
    (statuses, starts[0].elapsed())
}

/// systemd's journal message IDs for a unit stopping and a unit started (sd-messages.h).
const UNIT_STOPPING: &str = "de5b426a63be47a7b6ac3eaac82e2f6f";
const UNIT_STARTED: &str = "39f53479d3a045ac8e11786248231fbf";

/// A time a service was down on a node: from when it began to stop to when it was up again,
/// in µs of the host's realtime clock (the controllers share it).
#[derive(Clone, Copy, Debug)]
pub struct Down {
    pub node: usize,
    pub from: u64,
    pub to: u64,
}

/// The times `down` and `up` (predicates on journal entries) bracket in `entries`.
fn down_times(
    node: usize,
    entries: &[Value],
    down: impl Fn(&Value) -> bool,
    up: impl Fn(&Value) -> bool,
) -> Vec<Down> {
    let at = |e: &Value| -> u64 {
        e["__REALTIME_TIMESTAMP"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    let mut from = None;
    for e in entries {
        if from.is_none() && down(e) {
            from = Some(at(e));
        } else if let Some(f) = from
            && up(e)
        {
            out.push(Down {
                node,
                from: f,
                to: at(e),
            });
            from = None;
        }
    }
    if let Some(f) = from {
        out.push(Down {
            node,
            from: f,
            to: u64::MAX,
        });
    }
    out
}

impl Ha {
    /// Every restart of systemd unit `unit` on node n: from "Stopping" to "Started", as
    /// systemd logged them (by message ID).
    pub fn unit_restarts(&self, n: usize, unit: &str) -> Vec<Down> {
        let entries = self.node(n).journal_json(&["-u", unit]);
        let id = |e: &Value, want: &str| e["MESSAGE_ID"] == want && e["UNIT"] == unit;
        down_times(
            n,
            &entries,
            |e| id(e, UNIT_STOPPING),
            |e| id(e, UNIT_STARTED),
        )
    }

    /// Every restart node n's journal tells by messages containing `stopped` and `started`,
    /// from the journal of `unit`.
    pub fn said_restarts(&self, n: usize, unit: &str, stopped: &str, started: &str) -> Vec<Down> {
        let entries = self.node(n).journal_json(&["-u", unit]);
        let says = |e: &Value, text: &str| e["MESSAGE"].as_str().is_some_and(|m| m.contains(text));
        down_times(n, &entries, |e| says(e, stopped), |e| says(e, started))
    }

    /// The etcd members node n's certrenewd has TCP connections open to (its client port),
    /// from /proc/net/tcp of the shared network and the daemon's socket inodes.
    pub fn daemon_connected_to(&self, n: usize) -> Vec<usize> {
        let script = format!(
            "pid=$(systemctl show -P MainPID {DAEMON}); \
             for f in /proc/$pid/fd/*; do readlink \"$f\"; done \
             | sed -n 's/^socket:\\[\\([0-9]*\\)\\]$/\\1/p' > /run/inodes; \
             awk 'NR == FNR {{ want[$1] = 1; next }} $4 == \"01\" && ($10 in want) {{ print $3 }}' \
             /run/inodes /proc/net/tcp"
        );
        let out = self.node(n).sh(&script).unwrap_or_else(|e| panic!("{e:#}"));
        let mut members: Vec<usize> = out
            .lines()
            .filter_map(|l| {
                // 0300007F:094B: 127.0.0.3, port 2379 (hex, the address little-endian).
                let (addr, port) = l.trim().split_once(':')?;
                (u16::from_str_radix(port, 16).ok()? == 2379).then_some(())?;
                let last = u8::from_str_radix(addr.get(0..2)?, 16).ok()?;
                Some(last as usize)
            })
            .filter(|m| (1..=MEMBERS).contains(m))
            .collect();
        members.sort();
        members.dedup();
        members
    }
}

/// Panics if the services of two nodes were ever down at the same time.
pub fn assert_one_at_a_time(what: &str, mut downs: Vec<Down>) {
    downs.sort_by_key(|d| d.from);
    for pair in downs.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.node == b.node || a.to <= b.from,
            "{what} on node{} was down until {} µs, but node{}'s went down at {} µs: two \
             members of the cluster were down together",
            a.node,
            a.to,
            b.node,
            b.from
        );
    }
}

/// Every node's `check --output json` says its restarts are coordinated under `auto`, as
/// member nodeN of 3, learnt from `source` (a file of the node).
pub fn assert_check_coordinated(ha: &Ha, source: &str) {
    for n in 1..=MEMBERS {
        let out = ha
            .node(n)
            .run(["certrenewd", "check", "--output", "json"])
            .unwrap_or_else(|e| panic!("{e:#}"));
        let doc: Value = serde_json::from_str(&out).expect("check's JSON");
        let co = &doc["coordination"];
        say(&format!("node{n}: check: coordination {co}"));
        assert_eq!(co["enabled"], "auto", "node{n}: {co}");
        assert_eq!(co["restarts"], "coordinated", "node{n}: {co}");
        let why = co["why"].as_str().unwrap_or("");
        // What the cluster said, and where the node's own settings are.
        assert!(
            why.starts_with(&format!("etcd member node{n} of 3 (")),
            "node{n}: {why}"
        );
        assert!(why.contains("the cluster's member list"), "node{n}: {why}");
        assert!(
            why.contains(&format!("this node's etcd settings: {source}")),
            "node{n}: {why}"
        );
    }
}

/// After a rolling renewal: each node's etcd (`what`) restarted exactly once and never two
/// together (`restarts`), the probe never below 2 of 3 healthy, the turns taken and said, no
/// alarm, nothing left locked, every certificate renewed and served.
pub fn assert_rolled_once_each(
    ha: &Ha,
    what: &str,
    restarts: Vec<Down>,
    r: &super::etcd_probe::Report,
    due: &[Due],
) {
    for n in 1..=MEMBERS {
        let mine = restarts.iter().filter(|d| d.node == n).count();
        assert_eq!(
            mine, 1,
            "node{n}: {what} restarted {mine} times: {restarts:?}"
        );
    }
    assert_one_at_a_time(what, restarts);
    assert_quorum_kept(r);
    assert_turns_were_taken_and_said(ha);
    let alarms = all_alarms(ha);
    assert!(alarms.is_empty(), "alarms: {alarms:#?}");
    assert_lock_free(ha);
    ha.assert_renewed_and_served(due);
}

/// Nothing went down while every node renewed in its turn: each took the lock and said so,
/// the probe saw all members healthy and every write committed at every sample, no alarm,
/// the lock free.
pub fn assert_kept_up_in_turn(ha: &Ha, r: &super::etcd_probe::Report) {
    assert_turns_were_taken_and_said(ha);
    r.assert_nothing_went_down(MEMBERS);
    let alarms = all_alarms(ha);
    assert!(alarms.is_empty(), "alarms: {alarms:#?}");
    assert_lock_free(ha);
}

/// Every node presented its renewed client pairs to its member, which accepted them with a
/// real request: each of `clients` before anything restarted, and `peer` (`{n}` the node's
/// number) at its turn as a peer's client.
pub fn assert_pairs_accepted(ha: &Ha, clients: &[&str], peer: &str) {
    for n in 1..=MEMBERS {
        let peer = peer.replace("{n}", &n.to_string());
        let said = ha.node(n).journal(&["-u", DAEMON, "-o", "cat"]);
        let accepted = "accepted it (GET /version said 200)";
        for client in clients {
            let line = format!("renewed client pair {client} accepted: ");
            assert!(
                (said.lines()).any(|l| l.contains(&line) && l.contains(accepted)),
                "node{n}: no {line:?} in:\n{said}"
            );
        }
        let line = format!("{peer} as a peer's client: ");
        assert!(
            (said.lines()).any(|l| l.contains(&line) && l.contains(accepted)),
            "node{n}: no {line:?} in:\n{said}"
        );
    }
}

/// The probe, awake, saw the quorum at every sample: at least 2 of 3 members healthy, or
/// the sample's write committed (with `require_leader`: only a quorum commits it). The
/// second is an election's moment: a leader that stops hands over, and for that moment
/// every member answers without a leader ("o" in the summary) while the cluster commits.
/// Two members down together fail both.
pub fn assert_quorum_kept(r: &super::etcd_probe::Report) {
    r.assert_awake();
    let lost = r.seen().find(|s| s.healthy_count() < 2 && !s.wrote);
    if let Some(at) = lost {
        panic!(
            "quorum in danger at {}: {} of {MEMBERS} healthy ({} answering) and the write failed\n{}",
            r.wall(at.start),
            at.healthy_count(),
            at.up_count(),
            r.summary()
        );
    }
}

/// A line on stderr now (libtest captures println! of passing tests; these are timings).
pub fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The state directory of the shipped configuration, where a pass records etcd's member list.
pub const STATE_DIR: &str = "/var/lib/certrenewd";

impl Ha {
    /// Node n's three leaves expired, as after its member crash-looped while they ran out:
    /// each signed again by the CA with its own key and extensions, for a 365-day lifetime
    /// that ended 3 days ago (openssl under libfaketime, as mkpki's `--expired`).
    pub fn expire_leaves(&self, n: usize) {
        // Each leaf beside its CA (ca.crt, ca.key) in the layout's etcd directory.
        let leaves: Vec<PathBuf> = self
            .layout
            .leaves
            .iter()
            .map(|&(_, inside)| self.on_host(n, inside).with_extension(""))
            .collect();
        let script: String = leaves
            .iter()
            .map(|l| {
                let l = l.display();
                format!(
                    "openssl x509 -x509toreq -in {l}.crt -key {l}.key -copy_extensions copyall \
                     -out {l}.csr\n\
                     faketime -f -368d openssl x509 -req -in {l}.csr -CA ca.crt -CAkey ca.key \
                     -days 365 -copy_extensions copyall -set_serial 0x$(openssl rand -hex 15) \
                     -out {l}.crt\n\
                     rm {l}.csr\n"
                )
            })
            .collect();
        let dir = leaves[0].parent().expect("the leaves' directory");
        super::sh(dir, &script);
        for l in &leaves {
            let cert = l.with_extension("crt");
            let out = Command::new("openssl")
                .args(["x509", "-noout", "-checkend", "0", "-in"])
                .arg(&cert)
                .output()
                .unwrap();
            assert!(!out.status.success(), "{} has not expired", cert.display());
        }
    }

    /// The probe started whatever the cluster's state (a cluster that is down: it does not
    /// wait for a healthy sample, unlike [`Ha::probe`]).
    pub fn probe_any(&self) -> Probe {
        let netns = Path::new("/run/netns").join(self.cluster.network());
        Probe::start(&netns, &endpoints(), &self.probe_tls()).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// How many times systemd started `unit` on node n (by message ID), however it was
    /// stopped before: a unit stopped or failed is started again without a "Stopping".
    pub fn unit_starts(&self, n: usize, unit: &str) -> usize {
        let entries = self.node(n).journal_json(&["-u", unit]);
        entries
            .iter()
            .filter(|e| e["MESSAGE_ID"] == UNIT_STARTED && e["UNIT"] == unit)
            .count()
    }
}
