//! Go acceptance: certificates renewed by certrenewd are loaded and accepted by a real etcd
//! (Go's crypto/tls, `/usr/bin/etcd`) as server, peer and client certificates, and by
//! `etcdctl` as a client: `endpoint health`, `put` and `get` over mutual TLS.
//! One layout made with cfssl (kubeadm, Go encoding), one with openssl (starlingx).

use crate::common;

use common::etcd_one::{self, ETCD, ETCDCTL, Tls, etcdctl, free_port, text};
use common::{pki, skip, walk};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pki::{Tree, first_cert_der, path_str};

const LAYOUTS: &[&str] = &["kubeadm", "starlingx"];

fn etcd_missing() -> bool {
    for bin in [ETCD, ETCDCTL] {
        if !Path::new(bin).exists() {
            skip::skip(&format!(
                "{bin} is missing (Debian package etcd-server / etcd-client)"
            ));
            return true;
        }
    }
    false
}

/// A single-member etcd on loopback ([`etcd_one::Etcd`]) and its client URL.
struct Etcd {
    member: etcd_one::Etcd,
    client_url: String,
}

impl Etcd {
    /// Starts etcd with `server` for clients (client certificates required, from the same
    /// CA) and `peer` for the peer listener, and waits until `client` gets a healthy answer.
    fn start(server: &Tls, peer: &Tls, client: &Tls) -> Etcd {
        let (c, p) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let client_url = format!("https://127.0.0.1:{c}");
        let peer_url = format!("https://127.0.0.1:{p}");
        let flags = [
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=certrenewd-test={peer_url}"),
            "--initial-cluster-state=new".into(),
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", server.ca.display()),
            format!("--cert-file={}", server.cert.display()),
            format!("--key-file={}", server.key.display()),
            "--peer-client-cert-auth".into(),
            format!("--peer-trusted-ca-file={}", peer.ca.display()),
            format!("--peer-cert-file={}", peer.cert.display()),
            format!("--peer-key-file={}", peer.key.display()),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        let member = etcd_one::Etcd::start("certrenewd-test", &flags, || {
            etcdctl(&client_url, client, &["endpoint", "health"])
        });
        Etcd { member, client_url }
    }

    fn log_text(&self) -> String {
        self.member.log()
    }

    /// `etcdctl` (API v3) against this etcd with the `tls` client identity.
    fn ctl(&self, tls: &Tls, args: &[&str]) -> Output {
        etcdctl(&self.client_url, tls, args)
    }

    /// Like `ctl`, but it must succeed; returns stdout and stderr, in that order.
    fn ctl_ok(&self, tls: &Tls, args: &[&str]) -> String {
        let out = self.ctl(tls, args);
        assert!(
            out.status.success(),
            "etcdctl {} with {} failed: {}\n--- etcd log (tail)\n{}",
            args.join(" "),
            tls.cert.display(),
            text(&out),
            tail(&self.log_text(), 30)
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// The certificate the client port serves, as openssl sees it after verifying it
    /// against `tls.ca` for IP 127.0.0.1 (mutual TLS with `tls`).
    fn served_cert(&self, tls: &Tls) -> Vec<u8> {
        let hostport = self.client_url.trim_start_matches("https://");
        let out = Command::new("openssl")
            .args(["s_client", "-connect", hostport, "-verify_return_error"])
            .args(["-verify_ip", "127.0.0.1"])
            .arg("-CAfile")
            .arg(&tls.ca)
            .arg("-cert")
            .arg(&tls.cert)
            .arg("-key")
            .arg(&tls.key)
            .stdin(Stdio::null())
            .output()
            .expect("running openssl s_client");
        assert!(out.status.success(), "openssl s_client: {}", text(&out));
        first_cert_der(&out.stdout)
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn tls(tree: &Tree, ca: &str, cert: &str, key: &str) -> Tls {
    Tls {
        ca: tree.abs(ca),
        cert: tree.abs(cert),
        key: tree.abs(key),
    }
}

/// Renews the tree (plus `force`d PATHs) and checks each of `renewed` was rewritten and is
/// now ok.
fn renew(tree: &Tree, force: &[&str], renewed: &[&str]) {
    let before = tree.snapshot();
    let r = tree.run(&["renew", "--no-restart"]);
    assert_eq!(r.code, 0, "{r}");
    for f in force {
        let abs = tree.abs(f);
        let r = tree.run(&["renew", "--force", "--no-restart", path_str(&abs)]);
        assert_eq!(r.code, 0, "{r}");
    }
    let after = tree.snapshot();
    let doc = tree.check_json();
    for rel in renewed {
        let abs = tree.abs(rel);
        assert_ne!(
            walk::bytes_in(&before, &abs),
            walk::bytes_in(&after, &abs),
            "{rel} was not renewed"
        );
        let c = doc["certificates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["path"].as_str() == Some(path_str(&abs)))
            .unwrap_or_else(|| panic!("{rel} not listed"));
        assert_eq!(c["status"], "ok", "{rel} after renewal: {c}");
    }
}

/// The server certificate names 127.0.0.1 (else the client could not verify it).
fn assert_san_has_loopback(cert: &Path) {
    let out = pki::openssl(&[
        "x509",
        "-in",
        path_str(cert),
        "-noout",
        "-ext",
        "subjectAltName",
    ]);
    assert!(
        out.contains("IP Address:127.0.0.1"),
        "{} has no IP:127.0.0.1 SAN: {out}",
        cert.display()
    );
}

/// The client is the one the renewed CA trusts; a client from another CA is refused.
fn exercise(etcd: &Etcd, server: &Tls, clients: &[&Tls], stranger: &Tls, tag: &str) {
    for (i, c) in clients.iter().enumerate() {
        let health = etcd.ctl_ok(c, &["endpoint", "health"]);
        assert!(health.contains("is healthy"), "{health}");
        let key = format!("/certrenewd/{tag}/{i}");
        let value = format!("renewed-by-certrenewd-{i}");
        etcd.ctl_ok(c, &["put", &key, &value]);
        let got = etcd.ctl_ok(c, &["get", &key, "--print-value-only"]);
        assert_eq!(
            got.lines().next().map(str::trim),
            Some(value.as_str()),
            "{got}"
        );
    }
    // Every client sees what the others wrote.
    let all = etcd.ctl_ok(
        clients[0],
        &[
            "get",
            &format!("/certrenewd/{tag}/"),
            "--prefix",
            "--keys-only",
        ],
    );
    for i in 0..clients.len() {
        assert!(all.contains(&format!("/certrenewd/{tag}/{i}")), "{all}");
    }
    // client-cert-auth is on: a certificate from another CA is refused.
    let out = etcd.ctl(stranger, &["endpoint", "health"]);
    assert!(
        !out.status.success(),
        "a client certificate from another CA was accepted: {}",
        text(&out)
    );
    // The served certificate is the renewed file, and openssl verifies it for 127.0.0.1.
    let served = etcd.served_cert(clients[0]);
    let on_disk = first_cert_der(&std::fs::read(&server.cert).expect("server cert"));
    assert!(
        served == on_disk,
        "etcd serves a certificate other than {}",
        server.cert.display()
    );
}

/// kubeadm (cfssl, Go encoding, PKCS#1 keys): etcd/server.crt + etcd/peer.crt renewed, the
/// renewed healthcheck-client and (forced) apiserver-etcd-client as clients.
#[test]
fn renewed_kubeadm_certificates_work_with_etcd() {
    if etcd_missing() {
        return;
    }
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let p = "etc/kubernetes/pki";
    let client_rel = format!("{p}/apiserver-etcd-client.crt");
    renew(
        &tree,
        &[&client_rel],
        &[
            &format!("{p}/etcd/server.crt"),
            &format!("{p}/etcd/peer.crt"),
            &format!("{p}/etcd/healthcheck-client.crt"),
            &client_rel,
        ],
    );
    let ca = format!("{p}/etcd/ca.crt");
    let server = tls(
        &tree,
        &ca,
        &format!("{p}/etcd/server.crt"),
        &format!("{p}/etcd/server.key"),
    );
    let peer = tls(
        &tree,
        &ca,
        &format!("{p}/etcd/peer.crt"),
        &format!("{p}/etcd/peer.key"),
    );
    let health = tls(
        &tree,
        &ca,
        &format!("{p}/etcd/healthcheck-client.crt"),
        &format!("{p}/etcd/healthcheck-client.key"),
    );
    let apiserver = tls(
        &tree,
        &ca,
        &client_rel,
        &format!("{p}/apiserver-etcd-client.key"),
    );
    let stranger = tls(
        &tree,
        &ca,
        &format!("{p}/front-proxy-client.crt"),
        &format!("{p}/front-proxy-client.key"),
    );
    assert_san_has_loopback(&server.cert);
    assert_san_has_loopback(&peer.cert);
    let etcd = Etcd::start(&server, &peer, &health);
    exercise(&etcd, &server, &[&health, &apiserver], &stranger, "kubeadm");
}

/// StarlingX (openssl, UTF8String names, PKCS#8 keys): etcd-server renewed, the renewed
/// apiserver-etcd-client (in the other directory) and the renewed, formerly expired,
/// etcd-client (CN=root) as clients.
#[test]
fn renewed_starlingx_certificates_work_with_etcd() {
    if etcd_missing() {
        return;
    }
    let tree = Tree::new(LAYOUTS, "starlingx");
    renew(
        &tree,
        &[],
        &[
            "etc/etcd/etcd-server.crt",
            "etc/etcd/etcd-client.crt",
            "etc/kubernetes/pki/apiserver-etcd-client.crt",
        ],
    );
    let ca = "etc/etcd/ca.crt";
    let server = tls(
        &tree,
        ca,
        "etc/etcd/etcd-server.crt",
        "etc/etcd/etcd-server.key",
    );
    let apiserver = tls(
        &tree,
        ca,
        "etc/kubernetes/pki/apiserver-etcd-client.crt",
        "etc/kubernetes/pki/apiserver-etcd-client.key",
    );
    let root = tls(
        &tree,
        ca,
        "etc/etcd/etcd-client.crt",
        "etc/etcd/etcd-client.key",
    );
    let stranger = tls(
        &tree,
        ca,
        "etc/kubernetes/pki/apiserver.crt",
        "etc/kubernetes/pki/apiserver.key",
    );
    assert_san_has_loopback(&server.cert);
    let etcd = Etcd::start(&server, &server, &apiserver);
    exercise(&etcd, &server, &[&apiserver, &root], &stranger, "starlingx");
}

/// A CA re-issued with the same key by certrenewd (the aging root of
/// `tests/fixtures/mkca-aging.sh`, made by openssl under faketime, 250 days left), its leaves
/// untouched. Go (etcd and etcdctl) holding only the old CA certificate and holding only the
/// new one work alike: etcd still running on the old trust file accepts a client that trusts
/// only the new CA, and etcd restarted on the new trust file accepts a client that trusts
/// only the old one.
#[test]
fn go_clients_with_only_the_old_or_only_the_new_ca_work_after_a_ca_renewal() {
    if etcd_missing() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let made = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/mkca-aging.sh"
        ))
        .arg(dir.path())
        .output()
        .expect("mkca-aging.sh");
    assert!(made.status.success(), "{}", text(&made));
    let pki = dir.path().join("pki");
    let old_ca = dir.path().join("old-ca.crt");
    std::fs::copy(pki.join("ca.crt"), &old_ca).unwrap();
    let at = |f: &str| pki.join(f);
    let server = |ca: &Path| Tls {
        ca: ca.to_path_buf(),
        cert: at("etcd-server.crt"),
        key: at("etcd-server.key"),
    };
    let client = |ca: &Path| Tls {
        ca: ca.to_path_buf(),
        cert: at("etcd-client.crt"),
        key: at("etcd-client.key"),
    };
    // etcd on the old trust file, before the renewal.
    let before = Etcd::start(&server(&old_ca), &server(&old_ca), &client(&old_ca));
    let config = dir.path().join("certrenewd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[[watch]]\npath = \"{}\"\n",
            dir.path().join("state").display(),
            pki.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_certrenewd"))
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .output()
        .expect("certrenewd renew");
    assert!(out.status.success(), "{}", text(&out));
    let new_ca = at("ca.crt");
    assert_ne!(
        std::fs::read(&new_ca).unwrap(),
        std::fs::read(&old_ca).unwrap(),
        "the CA was re-issued"
    );
    // Still on the old trust file: a client trusting only the new CA.
    let health = before.ctl_ok(&client(&new_ca), &["endpoint", "health"]);
    assert!(health.contains("is healthy"), "{health}");
    before.ctl_ok(&client(&new_ca), &["put", "/certrenewd/ca/new-client", "1"]);
    drop(before);
    // Restarted on the new trust file: a client trusting only the old CA, and one the new.
    let after = Etcd::start(&server(&new_ca), &server(&new_ca), &client(&old_ca));
    for (ca, tag) in [(&old_ca, "old"), (&new_ca, "new")] {
        let key = format!("/certrenewd/ca/{tag}");
        after.ctl_ok(&client(ca), &["put", &key, tag]);
        let got = after.ctl_ok(&client(ca), &["get", &key, "--print-value-only"]);
        assert_eq!(got.lines().next().map(str::trim), Some(tag), "{got}");
    }
    // And it serves the leaf it served before: nothing but the CA was re-issued.
    let served = after.served_cert(&client(&old_ca));
    assert_eq!(
        served,
        first_cert_der(&std::fs::read(at("etcd-server.crt")).unwrap())
    );
}

/// Whether `cert` is still valid now (`openssl x509 -checkend 0`).
fn still_valid(cert: &Path) -> bool {
    pki::openssl_out(&["x509", "-checkend", "0", "-noout", "-in", path_str(cert)])
        .status
        .success()
}

/// `kubectl get --raw /version` against `etcd` with the kubeconfig `conf` (its cluster's
/// `certificate-authority-data`, its user's client certificate).
fn kubectl_version(conf: &Path, etcd: &Etcd) -> Output {
    Command::new("kubectl")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", conf.parent().unwrap_or(Path::new("/")))
        .arg("--kubeconfig")
        .arg(conf)
        .args(["--server", &etcd.client_url, "--request-timeout", "10s"])
        .args(["get", "--raw", "/version"])
        .stdin(Stdio::null())
        .output()
        .expect("kubectl (Debian package kubernetes-client)")
}

/// A CA's end, which need not be a flag day, in real time, on Go: the root (`mkca-aging.sh --ends-in`) ends 30
/// seconds after it is made; certrenewd re-issues it before then, with its copies (the trust
/// bundle etcd runs on, admin.conf). When the old root has passed its end, on the real clock
/// Go reads (libfaketime cannot move it), etcd keeps serving and restarts on the renewed
/// files, and etcdctl and kubectl on the renewed CA work with the leaves the old root signed;
/// the same clients holding only the old root fail, "expired", as they would have everywhere.
#[test]
fn past_the_old_cas_end_in_real_time_etcd_etcdctl_and_kubectl_on_the_renewed_copies_work() {
    if etcd_missing() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let made = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/mkca-aging.sh"
        ))
        .arg(dir.path())
        .args(["--copies", "--ends-in", "30"])
        .output()
        .expect("mkca-aging.sh");
    assert!(made.status.success(), "{}", text(&made));
    let pki = dir.path().join("pki");
    let at = |f: &str| pki.join(f);
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    for (from, to) in [
        (at("ca.crt"), "ca.crt"),
        (dir.path().join("admin.conf"), "admin.conf"),
    ] {
        std::fs::copy(from, old.join(to)).unwrap();
    }
    let config = dir.path().join("certrenewd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[[watch]]\npath = \"{}\"\nkubeconfigs = [\"{}\"]\n",
            dir.path().join("state").display(),
            pki.display(),
            dir.path().join("admin.conf").display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_certrenewd"))
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .output()
        .expect("certrenewd renew");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        still_valid(&old.join("ca.crt")),
        "the renewal must end before the old root does, or this test shows nothing"
    );
    let new_ca = at("ca.crt");
    assert_ne!(
        std::fs::read(&new_ca).unwrap(),
        std::fs::read(old.join("ca.crt")).unwrap(),
        "the CA was re-issued"
    );
    let bundle = at("trust/ca-bundle.pem");
    let renewed_conf = dir.path().join("admin.conf");
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    assert!(
        bundle_text.contains(std::fs::read_to_string(&new_ca).unwrap().trim()),
        "the trust bundle holds the renewed CA"
    );
    // etcd restarted on the renewed files (as certrenewd's restart would), clients verifying
    // with the renewed root; it was made before the old root's end and runs through it.
    let server = Tls {
        ca: bundle.clone(),
        cert: at("etcd-server.crt"),
        key: at("etcd-server.key"),
    };
    let client = |ca: &Path| Tls {
        ca: ca.to_path_buf(),
        cert: at("etcd-client.crt"),
        key: at("etcd-client.key"),
    };
    let running = Etcd::start(&server, &server, &client(&new_ca));
    let deadline = Instant::now() + Duration::from_secs(90);
    while still_valid(&old.join("ca.crt")) {
        assert!(Instant::now() < deadline, "the old root did not end");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(1));
    let check = |etcd: &Etcd, tag: &str| {
        let key = format!("/certrenewd/flag-day/{tag}");
        etcd.ctl_ok(&client(&new_ca), &["put", &key, tag]);
        let got = etcd.ctl_ok(&client(&new_ca), &["get", &key, "--print-value-only"]);
        assert_eq!(got.lines().next().map(str::trim), Some(tag), "{got}");
        let k = kubectl_version(&renewed_conf, etcd);
        assert!(
            k.status.success() && String::from_utf8_lossy(&k.stdout).contains("etcdserver"),
            "{tag}: kubectl with the renewed admin.conf: {}",
            text(&k)
        );
        // The same clients holding only the old root: refused, because it has expired.
        let o = etcd.ctl(&client(&old.join("ca.crt")), &["endpoint", "health"]);
        assert!(
            !o.status.success(),
            "{tag}: etcdctl on the old root: {}",
            text(&o)
        );
        let k = kubectl_version(&old.join("admin.conf"), etcd);
        assert!(
            !k.status.success() && text(&k).contains("expired"),
            "{tag}: kubectl with the old admin.conf: {}",
            text(&k)
        );
    };
    check(&running, "through");
    drop(running);
    let restarted = Etcd::start(&server, &server, &client(&new_ca));
    check(&restarted, "restarted");
}
