//! Issue 26, part 1: kubelet's client certificate, renewed kubelet's way, over a tree shaped
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

mod common;

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
        let tmp = tempfile::tempdir().expect("temp dir");
        let out = Command::new("bash")
            .arg(MKKUBELET)
            .arg(tmp.path())
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
        let serving = check_entry(&n, &n.kubelet_dir().join("kubelet.crt"));
        assert_eq!(serving["status"], "unrenewable", "{serving:#}");
        assert!(
            serving["reason"]
                .as_str()
                .unwrap()
                .starts_with("kubelet's self-signed serving certificate"),
            "{serving:#}"
        );
        let table = n.run(&["check"]);
        assert!(
            table.stdout.contains(&format!(
                "-> {} (kubelet's pair in use)",
                in_use.file_name().unwrap().to_str().unwrap()
            )),
            "{table}"
        );
        kubectl_authenticates(&n).unwrap_or_else(|e| panic!("before: {e}"));

        let run = n.run(&["renew", "--no-restart"]);
        // kubelet.crt is due and cannot be renewed: the pass says so and fails.
        assert_eq!(run.code, 1, "{run}");
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
        assert_eq!(run.code, 1, "{point}: kubelet.crt fails the pass: {run}");
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
    let test = "kubelet_service_is_restarted_and_starts_on_the_new_pair";
    let Some(sb) = common::sandbox::Sandbox::start_or_skip(test) else {
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
    // kubelet.crt is due and cannot be renewed here: the pass fails for it alone.
    assert_eq!(out.status.code(), Some(1), "{said}");
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
