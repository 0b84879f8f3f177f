//! Kubelet's client certificate, renewed kubelet's way, over a tree shaped
//! as kubelet writes it (`tests/fixtures/mkkubelet.sh`, openssl under libfaketime): the
//! pair in use `kubelet-client-<time>.pem` (certificate then key, 0600) behind the symlink
//! `kubelet-client-current.pem`, a pair kubelet rotated away from, and kubelet's
//! self-signed serving pair `kubelet.crt`.
//!
//! - `check` lists the pair by the symlink, passes over the superseded pair saying why, and
//!   says of `kubelet.crt` what it is and what to do.
//! - `renew` writes a new dated pair beside the old one (kubelet's name, order and mode),
//!   moves the symlink to it, leaves the old pair byte for byte; the pair matches, verifies
//!   against the cluster CA, keeps its subject and lifetime; kubectl with kubeadm's
//!   kubelet.conf (which names the symlink) authenticates with it. With `rotate_keys` the
//!   new pair has a new key.
//! - Killed at every step of the install (the failpoints build): the symlink always names a
//!   matching pair that verifies, and the next pass completes the renewal.
//! - In the sandbox (a real systemd user manager): kubelet.service is restarted and starts
//!   on the new pair.

use crate::common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use certrenewd::inventory::kubelet::dated_prefix;
use common::failpoints;
use common::pki::{BIN, Run, SServer, openssl, openssl_out, run_cmd, toml_str};

const MKKUBELET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkkubelet.sh");

/// A kubelet-shaped tree in a temp dir and a config watching it.
struct Node {
    tmp: tempfile::TempDir,
    config: PathBuf,
}

impl Node {
    fn new(extra: &str) -> Node {
        Node::made_with(&[], extra)
    }

    /// The tree `mkkubelet.sh OUTDIR ARGS...` makes.
    fn made_with(args: &[&str], extra: &str) -> Node {
        let tmp = tempfile::tempdir().expect("temp dir");
        let out = Command::new("bash")
            .arg(MKKUBELET)
            .arg(tmp.path())
            .args(args)
            .output()
            .expect("running mkkubelet.sh");
        assert!(
            out.status.success(),
            "mkkubelet.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = tmp.path().join("certrenewd.toml");
        let n = Node { tmp, config };
        fs::write(
            &n.config,
            format!(
                "state_dir = {}\n{extra}\n[[watch]]\npath = {}\nkubeconfigs = []\nstatic_pods = []\n\
                 [[watch]]\npath = {}\nunits = [\"kubelet.service\"]\n",
                toml_str(&n.tmp.path().join("state")),
                toml_str(&n.pki()),
                toml_str(&n.kubelet_dir()),
            ),
        )
        .unwrap();
        n
    }

    fn pki(&self) -> PathBuf {
        self.tmp.path().join("etc/kubernetes/pki")
    }

    fn kubelet_dir(&self) -> PathBuf {
        self.tmp.path().join("var/lib/kubelet/pki")
    }

    fn link(&self) -> PathBuf {
        self.kubelet_dir().join("kubelet-client-current.pem")
    }

    /// The dated pairs, sorted (by name: by time).
    fn dated(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.kubelet_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with("kubelet-client-2") && n.ends_with(".pem")
            })
            .collect();
        v.sort();
        v
    }

    fn run_with(&self, bin: &Path, args: &[&str]) -> Run {
        run_cmd(
            Command::new(bin)
                .arg("--config")
                .arg(&self.config)
                .args(args),
            args,
        )
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(Path::new(BIN), args)
    }
}

/// What the pair file holds: the PEM labels in order.
fn labels(file: &Path) -> Vec<String> {
    fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("-----BEGIN "))
        .map(|l| l.trim_end_matches('-').to_string())
        .collect()
}

/// The certificate's public key and the key's, by openssl; and openssl's verify against
/// the cluster CA.
fn assert_matching_pair(n: &Node, file: &Path, what: &str) {
    let path = file.to_str().unwrap();
    let from_cert = openssl(&["x509", "-in", path, "-noout", "-pubkey"]);
    let from_key = openssl(&["pkey", "-in", path, "-pubout"]);
    assert_eq!(from_cert, from_key, "{what}: {path} is not a matching pair");
    let ca = n.pki().join("ca.crt");
    let v = openssl_out(&["verify", "-CAfile", ca.to_str().unwrap(), path]);
    assert!(v.status.success(), "{what}: {path} does not verify: {v:?}");
}

/// kubelet.crt and kubelet.key as kubelet makes them when it starts without them: the
/// leaf `<host>@<unix time>` (serial 2, the old leaf's names, serverAuth) then the
/// throwaway CA `<host>-ca@<unix time>` (serial 1) that signed it, valid from an hour ago for
/// a year; the leaf's RSA 2048 key in PKCS#1, 0600; the certificate file 0644; the old pair
/// in the backup set.
fn assert_kubelet_serving_pair(n: &Node, old: &[u8], run: &Run) {
    let dir = n.kubelet_dir();
    let (crt, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    let new = fs::read(&crt).unwrap();
    assert_ne!(new, old, "kubelet.crt renewed: {run}");
    assert_eq!(labels(&crt), ["CERTIFICATE", "CERTIFICATE"]);
    assert_eq!(labels(&key), ["RSA PRIVATE KEY"]);
    assert_eq!(fs::metadata(&crt).unwrap().mode() & 0o7777, 0o644);
    assert_eq!(fs::metadata(&key).unwrap().mode() & 0o7777, 0o600);
    // The leaf, then the CA, split apart for openssl.
    let text = String::from_utf8(new).unwrap();
    let end = "-----END CERTIFICATE-----\n";
    let at = text.find(end).unwrap() + end.len();
    let (leaf, ca) = (dir.join("leaf.pem"), dir.join("ca.pem"));
    fs::write(&leaf, &text[..at]).unwrap();
    fs::write(&ca, &text[at..]).unwrap();
    let subject = field(&leaf, "-subject");
    let issuer = field(&leaf, "-issuer");
    println!(
        "kubelet.crt renewed: {} / {}",
        subject.trim(),
        issuer.trim()
    );
    let host = subject.trim().trim_start_matches("subject=CN = ");
    let (host, stamp) = host.rsplit_once('@').expect("<host>@<unix time>");
    assert!(stamp.chars().all(|c| c.is_ascii_digit()), "{subject}");
    assert_eq!(issuer.trim(), format!("issuer=CN = {host}-ca@{stamp}"));
    assert_eq!(
        field(&ca, "-subject").trim(),
        format!("subject=CN = {host}-ca@{stamp}")
    );
    assert_eq!(field(&leaf, "-serial").trim(), "serial=02");
    assert_eq!(field(&ca, "-serial").trim(), "serial=01");
    let v = openssl_out(&[
        "verify",
        "-CAfile",
        ca.to_str().unwrap(),
        leaf.to_str().unwrap(),
    ]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let pubkey = |args: &[&str]| openssl(args);
    assert_eq!(
        pubkey(&["x509", "-in", leaf.to_str().unwrap(), "-noout", "-pubkey"]),
        pubkey(&["pkey", "-in", key.to_str().unwrap(), "-pubout"]),
    );
    let old_leaf = dir.join("old-leaf.pem");
    fs::write(&old_leaf, old).unwrap();
    for e in ["subjectAltName", "extendedKeyUsage"] {
        let ext = |p: &Path| common::x509(p, &["-ext", e]);
        assert_eq!(ext(&leaf), ext(&old_leaf), "the same {e}");
    }
    assert!(
        common::x509(&leaf, &["-ext", "extendedKeyUsage"])
            .contains("TLS Web Server Authentication")
    );
    assert_eq!(common::lifetime_secs(&leaf), 365 * 86_400);
    let backups: Vec<PathBuf> = common::walk::files_under(&n.tmp.path().join("state"))
        .into_iter()
        .filter(|p| p.ends_with("kubelet.crt") || p.ends_with("kubelet.key"))
        .collect();
    assert_eq!(backups.len(), 2, "the old pair backed up: {backups:?}");
    assert!(backups.iter().any(|b| fs::read(b).unwrap() == old));
    for f in [leaf, ca, old_leaf] {
        fs::remove_file(f).unwrap();
    }
}

fn field(path: &Path, flag: &str) -> String {
    common::x509(path, &[flag])
}

fn check_entry(n: &Node, path: &Path) -> serde_json::Value {
    let run = n.run(&["check", "--output", "json"]);
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json();
    doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not in {doc:#}", path.display()))
        .clone()
}

/// A server (openssl s_server) requiring client certificates from the cluster CA, and
/// kubectl with kubeadm's kubelet.conf (client-certificate and client-key: the symlink).
fn kubectl_authenticates(n: &Node) -> Result<(), String> {
    let dir = n.tmp.path();
    let (key, crt) = (dir.join("api.key"), dir.join("api.crt"));
    if !crt.exists() {
        let ca = n.pki();
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
            ]
            .into_iter()
            .chain([
                "-keyout",
                key.to_str().unwrap(),
                "-subj",
                "/CN=kube-apiserver",
            ])
            .chain(["-out", dir.join("api.csr").to_str().unwrap()])
            .collect::<Vec<_>>(),
        );
        fs::write(dir.join("api.ext"), "subjectAltName = IP:127.0.0.1\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            dir.join("api.csr").to_str().unwrap(),
            "-CA",
            ca.join("ca.crt").to_str().unwrap(),
            "-CAkey",
            ca.join("ca.key").to_str().unwrap(),
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            dir.join("api.ext").to_str().unwrap(),
            "-out",
            crt.to_str().unwrap(),
        ]);
    }
    let ca = n.pki().join("ca.crt");
    let server = SServer::start(
        Command::new("openssl"),
        crt.to_str().unwrap(),
        key.to_str().unwrap(),
        ca.to_str().unwrap(),
        "1",
    );
    let accept = &server.accept;
    let conf = dir.join("kubelet.conf");
    fs::write(
        &conf,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: {ca}\n    \
             server: https://{accept}\n  name: default-cluster\ncontexts:\n- context:\n    \
             cluster: default-cluster\n    namespace: default\n    user: default-auth\n  \
             name: default-context\ncurrent-context: default-context\npreferences: {{}}\nusers:\n\
             - name: default-auth\n  user:\n    client-certificate: {link}\n    client-key: {link}\n",
            ca = n.pki().join("ca.crt").display(),
            link = n.link().display()
        ),
    )
    .unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&conf)
        .args(["--request-timeout", "10s", "get", "--raw", "/"])
        .output()
        .expect("kubectl (Debian package kubernetes-client)");
    drop(server);
    match out.status.success() && String::from_utf8_lossy(&out.stdout).contains("<HTML>") {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[test]
fn kubelets_pair_is_renewed_into_a_new_dated_file_and_the_symlink_moved_to_it() {
    for rotate in [false, true] {
        let n = Node::new(&format!("rotate_keys = {rotate}"));
        let prom = n.tmp.path().join("certrenewd.prom");
        let conf = fs::read_to_string(&n.config).unwrap();
        fs::write(
            &n.config,
            format!("metrics_file = {}\n{conf}", toml_str(&prom)),
        )
        .unwrap();
        let before = n.dated();
        assert_eq!(before.len(), 2, "{before:?}");
        let (superseded, in_use) = (&before[0], &before[1]);
        assert_eq!(fs::read_link(n.link()).unwrap(), *in_use);
        let old_bytes: Vec<Vec<u8>> = before.iter().map(|p| fs::read(p).unwrap()).collect();

        // check: the pair by its symlink, due; the superseded pair passed over; kubelet.crt.
        let entry = check_entry(&n, &n.link());
        assert_eq!(entry["status"], "due", "{entry:#}");
        assert_eq!(entry["aliases"][0], in_use.to_str().unwrap(), "{entry:#}");
        let doc = n.run(&["check", "--output", "json"]).json();
        let skipped = doc["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["path"] == superseded.to_str().unwrap())
            .unwrap_or_else(|| panic!("the superseded pair is not passed over: {doc:#}"));
        assert!(
            skipped["reason"].as_str().unwrap().starts_with(&format!(
                "superseded: {} points at {}",
                n.link().display(),
                in_use.display()
            )),
            "{skipped:#}"
        );
        // kubelet.crt's throwaway CA is part of that pair, not a CA of its own.
        let cas: Vec<&serde_json::Value> = (doc["certificates"].as_array().unwrap().iter())
            .filter(|c| c["is_ca"] == true)
            .collect();
        assert_eq!(cas.len(), 1, "only the cluster CA: {cas:#?}");
        // kubelet.crt: due, renewed as kubelet makes it.
        let kubelet_crt = n.kubelet_dir().join("kubelet.crt");
        let serving = check_entry(&n, &kubelet_crt);
        assert_eq!(serving["status"], "due", "{serving:#}");
        assert_eq!(
            serving["lifetime"],
            "365 days, kubelet's: a new self-signed pair with a new throwaway CA, as kubelet makes it",
            "{serving:#}"
        );
        let old_serving = fs::read(&kubelet_crt).unwrap();
        let table = n.run(&["check"]);
        assert!(
            table.stdout.contains(&format!(
                "-> {} (kubelet's pair in use)",
                in_use.file_name().unwrap().to_str().unwrap()
            )),
            "{table}"
        );
        kubectl_authenticates(&n).unwrap_or_else(|e| panic!("before: {e}"));

        // The dry run names kubelet.crt as one pair (its throwaway CA is no row of its own,
        // so no `#1`) and what signs it (there is no CA path to name).
        let dry = n.run(&["renew", "--dry-run"]);
        let line = (dry.stdout.lines())
            .find(|l| l.contains("kubelet.crt"))
            .unwrap_or_else(|| panic!("kubelet.crt not in the dry run: {dry}"));
        assert!(
            line.starts_with(&format!("would renew   {} (due, ", kubelet_crt.display()))
                && line.ends_with("days left; signed by a new throwaway CA, as kubelet makes it)"),
            "{line}"
        );

        let run = n.run(&["renew", "--no-restart"]);
        assert_eq!(run.code, 0, "{run}");
        assert_kubelet_serving_pair(&n, &old_serving, &run);
        // Its series name the certificate now in service: a new leaf and throwaway CA.
        let cn = |flag: &str| {
            let f = field(&kubelet_crt, flag);
            f.trim().rsplit_once("CN = ").expect("a CN").1.to_string()
        };
        let metrics = fs::read_to_string(&prom).unwrap();
        let series = |name: &str| {
            let at = format!("path=\"{}\"", kubelet_crt.display());
            (metrics.lines())
                .find(|l| l.starts_with(name) && l.contains(&at))
                .unwrap_or_else(|| panic!("no {name} for kubelet.crt: {metrics}"))
                .to_string()
        };
        let ours = series("certrenewd_certificate_not_after_seconds{");
        for (label, flag) in [("subject_cn", "-subject"), ("issuer_cn", "-issuer")] {
            assert!(
                ours.contains(&format!("{label}=\"{}\"", cn(flag))),
                "{ours}"
            );
        }
        let theirs = series("x509_cert_not_after{");
        for (label, flag) in [("subject_CN", "-subject"), ("issuer_CN", "-issuer")] {
            assert!(
                theirs.contains(&format!("{label}=\"{}\"", cn(flag))),
                "{theirs}"
            );
        }
        assert!(
            run.stdout
                .contains(&format!("renewed       {} serial ", n.link().display())),
            "{run}"
        );
        let after = n.dated();
        assert_eq!(after.len(), 3, "{after:?}");
        let new = &after[2];
        assert_eq!(&after[..2], &before[..], "the old pairs stay");
        for (p, old) in before.iter().zip(&old_bytes) {
            assert_eq!(&fs::read(p).unwrap(), old, "{} changed", p.display());
        }
        // kubelet's name (the time it was written), its absolute path in the symlink, its
        // order and mode, the old one's owner.
        let name = new.file_name().unwrap().to_str().unwrap();
        let stamp = name
            .strip_prefix("kubelet-client-")
            .and_then(|s| s.strip_suffix(".pem"))
            .unwrap();
        assert_eq!(dated_prefix(name), Some("kubelet-client"), "{name}");
        let (day, time) = stamp.split_at(10);
        let when = format!("{day} {}", time[1..].replace('-', ":"));
        let out = Command::new("date")
            .args(["-d", &when, "+%s"])
            .output()
            .unwrap();
        let written: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (now - written).abs() < 300,
            "{name}: named for the local time written"
        );
        assert_eq!(fs::read_link(n.link()).unwrap(), *new);
        assert_eq!(labels(new), ["CERTIFICATE", "EC PRIVATE KEY"], "{name}");
        let (m_new, m_old) = (fs::metadata(new).unwrap(), fs::metadata(in_use).unwrap());
        assert_eq!(m_new.mode() & 0o7777, 0o600);
        assert_eq!((m_new.uid(), m_new.gid()), (m_old.uid(), m_old.gid()));
        assert_matching_pair(&n, new, "renewed");
        assert_eq!(field(new, "-subject"), field(in_use, "-subject"));
        assert_ne!(field(new, "-serial"), field(in_use, "-serial"));
        assert_eq!(
            common::lifetime_secs(new) / 86_400,
            common::lifetime_secs(in_use) / 86_400,
            "{name}: lifetime"
        );
        let key = |p: &Path| openssl(&["pkey", "-in", p.to_str().unwrap(), "-pubout"]);
        assert_eq!(key(new) != key(in_use), rotate, "rotate_keys = {rotate}");
        assert_eq!(check_entry(&n, &n.link())["status"], "ok");
        kubectl_authenticates(&n).unwrap_or_else(|e| panic!("after: {e}"));
        // Nothing more to do for it at the next pass.
        let again = n.run(&["renew", "--no-restart"]);
        assert!(!again.stdout.contains("renewed"), "{again}");
        assert_eq!(n.dated().len(), 3);
    }
}

/// kubelet with serverTLSBootstrap: its serving pair is signed by the cluster CA, in a
/// dated file behind `kubelet-server-current.pem`, and renewed as the client's is: a new
/// dated file, the symlink moved to it, the old pair kept.
#[test]
fn kubelets_bootstrapped_serving_pair_is_renewed_like_its_client_pair() {
    let n = Node::made_with(&["--server-bootstrap"], "");
    let link = n.kubelet_dir().join("kubelet-server-current.pem");
    let old = fs::read_link(&link).unwrap();
    let old_bytes = fs::read(&old).unwrap();
    let entry = check_entry(&n, &link);
    assert_eq!(entry["status"], "due", "{entry:#}");
    let run = n.run(&["renew", "--no-restart"]);
    assert_eq!(run.code, 0, "{run}");
    let new = fs::read_link(&link).unwrap();
    println!("{} -> {}", link.display(), new.display());
    assert_ne!(new, old, "{run}");
    assert_eq!(
        dated_prefix(new.file_name().unwrap().to_str().unwrap()),
        Some("kubelet-server")
    );
    assert_eq!(fs::read(&old).unwrap(), old_bytes, "the old pair stays");
    assert_matching_pair(&n, &link, "renewed");
    for e in ["-subject", "-ext subjectAltName", "-ext extendedKeyUsage"] {
        let args: Vec<&str> = e.split(' ').collect();
        assert_eq!(common::x509(&new, &args), common::x509(&old, &args), "{e}");
    }
    assert_eq!(fs::metadata(&new).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(check_entry(&n, &link)["status"], "ok");
}

#[test]
fn killed_at_every_step_the_symlink_names_a_matching_pair_and_the_next_pass_completes() {
    let bin = failpoints::binary();
    for point in [
        "before-temp-write",
        "write-cert-temp:error",
        "after-new-pair",
        "after-temps",
        "rename-cert:error",
        "after-renames",
    ] {
        let n = Node::new("");
        let before = n.dated();
        let out = Command::new(bin)
            .arg("--config")
            .arg(&n.config)
            .args(["renew", "--no-restart"])
            .env("CERTRENEWD_FAILPOINT", point)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = point.split(':').next().unwrap();
        assert!(
            stderr.contains(&format!("failpoint {name} hit")),
            "{point}: {stderr}"
        );
        if !point.contains(":error") {
            assert_eq!(out.status.code(), None, "{point}: must have aborted");
        }
        // Whatever happened: the symlink names a pair of the store that matches.
        let target = fs::read_link(n.link()).unwrap();
        assert!(target.starts_with(n.kubelet_dir()), "{point}: {target:?}");
        assert_matching_pair(&n, &n.link(), point);
        // The next pass completes it: one new pair, the symlink on it, nothing left over.
        let run = n.run(&["renew", "--no-restart"]);
        // Killed after its renames, the pass owes kubelet.service a restart that this one,
        // told not to restart, holds: that alone fails it.
        let held = "HELD BACK     kubelet.service: not restarted: owed by an earlier pass";
        assert!(
            run.code == 0 || (run.code == 1 && run.stdout.contains(held)),
            "{point}: {run}"
        );
        assert!(!run.stdout.contains("FAILED"), "{point}: {run}");
        let after = n.dated();
        assert_eq!(after.len(), before.len() + 1, "{point}: {after:?}");
        assert_eq!(
            fs::read_link(n.link()).unwrap(),
            after[after.len() - 1],
            "{point}"
        );
        assert_matching_pair(&n, &n.link(), point);
        assert_eq!(check_entry(&n, &n.link())["status"], "ok", "{point}");
        let left: Vec<_> = fs::read_dir(n.kubelet_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".certrenewd-tmp"))
            .collect();
        assert!(left.is_empty(), "{point}: {left:?}");
        assert!(!n.tmp.path().join("state/pending.json").exists(), "{point}");
    }
}

/// In a real systemd (the sandbox's user manager): a kubelet.service stand-in that reads
/// its client pair through the symlink when it starts is restarted by the pass and starts
/// on the renewed pair.
#[test]
fn kubelet_service_is_restarted_and_starts_on_the_new_pair() {
    let Some(sb) = common::sandbox::Sandbox::start_or_skip() else {
        return;
    };
    let n = Node::new("bus = \"user\"");
    let seen = n.tmp.path().join("kubelet-started-with");
    let unit = format!(
        "[Unit]\nDescription=kubelet stand-in: loads its client pair when it starts\n\n\
         [Service]\nExecStart=/bin/sh -c 'openssl x509 -in {link} -noout -serial >{seen} && exec sleep infinity'\n",
        link = n.link().display(),
        seen = seen.display()
    );
    sb.install_unit("kubelet.service", &unit).unwrap();
    sb.systemctl(["start", "kubelet.service"]).unwrap();
    let serial_seen = || {
        fs::read_to_string(&seen)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let wait = |want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while serial_seen() != want {
            assert!(
                std::time::Instant::now() < deadline,
                "kubelet.service started with {:?}, not {want:?}",
                serial_seen()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let old = field(&n.link(), "-serial");
    wait(old.trim());
    let pid = sb.unit_property("kubelet.service", "MainPID").unwrap();
    let out = common::e2e::certrenewd_in(&sb, &n.config, &["renew"]);
    let said = common::e2e::show(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("restarted     kubelet.service"), "{said}");
    let new = field(&n.link(), "-serial");
    assert_ne!(new, old);
    wait(new.trim());
    assert_ne!(sb.unit_property("kubelet.service", "MainPID").unwrap(), pid);
    assert_eq!(
        sb.unit_property("kubelet.service", "ActiveState").unwrap(),
        "active"
    );
}

/// `renew --force --all` renews every leaf but kubelet's own pairs, as its help says and as
/// `kubeadm certs renew all` does: kubelet rotates them itself. Named by PATH, the pair in
/// use is renewed; due, it is renewed by every pass (the net under kubelet's rotation).
#[test]
fn renew_force_all_leaves_kubelets_own_pairs_to_kubelet() {
    // A window of 5 days: kubelet's pairs (10 days left) are not due.
    let n = Node::new("renew_before_days = 5");
    let dry = n.run(&["renew", "--force", "--all", "--dry-run", "--output", "json"]);
    assert_eq!(dry.code, 0, "{dry}");
    let would: Vec<String> = (dry.json()["certificates"].as_array().unwrap().iter())
        .filter(|c| c["state"] == "would_renew")
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    let kubelet = n.kubelet_dir().display().to_string();
    assert!(would.iter().all(|p| !p.starts_with(&kubelet)), "{dry}");
    let link = n.link();
    let named = n.run(&["renew", "--force", "--dry-run", link.to_str().unwrap()]);
    assert_eq!(named.code, 0, "{named}");
    assert!(
        named
            .stdout
            .starts_with(&format!("would renew   {}", link.display())),
        "{named}"
    );
}
