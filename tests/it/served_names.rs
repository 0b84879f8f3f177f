//! A serving certificate that no longer names the node. etcd's serving
//! certificate was issued (openssl, 355 days ago under libfaketime, for 365 days) for
//! `localhost`, `controller-0` and 127.0.0.1; the node's address has since changed to
//! 127.0.0.2, and kubeadm's etcd manifest advertises and listens on it.
//!
//! - Before: a Go client (etcdctl) connecting by 127.0.0.2 to etcd serving that certificate
//!   fails, saying the certificate is not valid for it; `check` names the missing address
//!   and where it was found.
//! - With the setting off (the default), the renewal keeps the old names: alarm 500.220 is
//!   raised and the metric says 1.
//! - With `add_missing_names = true`, `renew --dry-run --force` says which names it would
//!   add and changes nothing; `renew --force` adds them after the old ones, every other
//!   extension and the subject kept; the alarm clears, the metric says 0, and etcdctl by
//!   127.0.0.2 to etcd on the renewed certificate succeeds.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::etcd_one::{self, ETCD, ETCDCTL, Tls, etcdctl, free_port, text};
use common::pki::{Run, run_bin, toml_str};
use common::skip;

const NEW_ADDRESS: &str = "127.0.0.2";

struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::tempdir().expect("temp dir");
        let pki = tmp.path().join("etc/etcd");
        fs::create_dir_all(&pki).unwrap();
        common::sh(
            &pki,
            r#"
cat > server.ext <<'EOF'
subjectAltName = DNS:localhost, DNS:controller-0, IP:127.0.0.1
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
EOF
printf 'extendedKeyUsage = clientAuth\n' > client.ext
faketime -f -700d openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt \
    -subj /CN=etcd-ca -days 3650 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
    -out server.csr -subj /CN=controller-0 2>/dev/null
faketime -f -355d openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 365 -extfile server.ext -out server.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client.key \
    -out client.csr -subj /CN=root 2>/dev/null
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile client.ext -out client.crt 2>/dev/null
rm -f *.csr *.ext ca.srl
"#,
        );
        let n = Node { tmp };
        // kubeadm's etcd manifest, after the node's address changed.
        fs::create_dir_all(n.manifests()).unwrap();
        fs::write(
            n.manifest(),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - etcd\n    \
                 - --advertise-client-urls=https://{NEW_ADDRESS}:2379\n    - --cert-file={}\n    - --key-file={}\n    \
                 - --listen-client-urls=https://127.0.0.1:2379,https://{NEW_ADDRESS}:2379\n    - --name=controller-0\n",
                n.cert().display(),
                n.pki().join("server.key").display()
            ),
        )
        .unwrap();
        n.write_config("");
        n
    }

    fn pki(&self) -> PathBuf {
        self.tmp.path().join("etc/etcd")
    }
    fn cert(&self) -> PathBuf {
        self.pki().join("server.crt")
    }
    /// The client identity etcdctl connects with.
    fn client(&self) -> Tls {
        Tls {
            ca: self.pki().join("ca.crt"),
            cert: self.pki().join("client.crt"),
            key: self.pki().join("client.key"),
        }
    }
    fn manifests(&self) -> PathBuf {
        self.tmp.path().join("manifests")
    }
    fn manifest(&self) -> PathBuf {
        self.manifests().join("etcd.yaml")
    }
    fn config(&self) -> PathBuf {
        self.tmp.path().join("certrenewd.toml")
    }
    fn metrics(&self) -> PathBuf {
        self.tmp.path().join("certrenewd.prom")
    }

    fn write_config(&self, watch_extra: &str) {
        let text = format!(
            "state_dir = {}\nmanifests_dir = {}\nmetrics_file = {}\n[[watch]]\npath = {}\nunits = []\n{watch_extra}\n",
            toml_str(&self.tmp.path().join("state")),
            toml_str(&self.manifests()),
            toml_str(&self.metrics()),
            toml_str(&self.pki()),
        );
        fs::write(self.config(), common::single_node(&text)).unwrap();
    }

    fn run(&self, args: &[&str]) -> Run {
        run_bin(&self.config(), args)
    }

    fn check_entry(&self) -> serde_json::Value {
        let run = self.run(&["check", "--output", "json"]);
        assert_eq!(run.code, 0, "{run}");
        let doc = run.json();
        let certs = doc["certificates"].as_array().expect("certificates");
        let path = self.cert().display().to_string();
        certs
            .iter()
            .find(|c| c["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} not in check: {doc:#}"))
            .clone()
    }

    fn names_alarm(&self) -> Option<serde_json::Value> {
        let run = self.run(&["alarms", "--output", "json"]);
        assert_eq!(run.code, 0, "{run}");
        let entity_end = format!("certificate={}", self.cert().display());
        run.json()["alarms"]
            .as_array()
            .expect("alarms")
            .iter()
            .find(|a| a["id"] == "500.220" && a["entity"].as_str().unwrap().ends_with(&entity_end))
            .cloned()
    }

    fn metric(&self) -> String {
        let text = fs::read_to_string(self.metrics()).expect("metrics file");
        text.lines()
            .find(|l| l.starts_with("certrenewd_certificate_names_missing{"))
            .unwrap_or_else(|| panic!("no names_missing metric in:\n{text}"))
            .to_string()
    }
}

fn sans(cert: &Path) -> String {
    common::x509(cert, &["-ext", "subjectAltName"])
}

/// etcd serving the node's certificate on `https://127.0.0.1:PORT` (a name it has) and
/// `https://127.0.0.2:PORT` (the new address), client certificates required.
struct Etcd {
    _member: etcd_one::Etcd,
    /// By the old address, then by the new one.
    urls: [String; 2],
}

impl Etcd {
    /// Starts it and waits until it answers by the old address.
    fn start(n: &Node) -> Etcd {
        let urls = ["127.0.0.1", NEW_ADDRESS].map(|ip| format!("https://{ip}:{}", free_port(ip)));
        let peer = format!("http://127.0.0.1:{}", free_port("127.0.0.1"));
        let flags = [
            format!("--listen-client-urls={}", urls.join(",")),
            format!("--advertise-client-urls={}", urls[1]),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=controller-0={peer}"),
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", n.pki().join("ca.crt").display()),
            format!("--cert-file={}", n.cert().display()),
            format!("--key-file={}", n.pki().join("server.key").display()),
        ];
        let member = etcd_one::Etcd::start("controller-0", &flags, || {
            etcdctl(&urls[0], &n.client(), &["endpoint", "health"])
        });
        Etcd {
            _member: member,
            urls,
        }
    }

    /// `etcdctl endpoint health` by the old (0) or new (1) address, with the client
    /// certificate.
    fn health(&self, n: &Node, by: usize) -> Output {
        etcdctl(&self.urls[by], &n.client(), &["endpoint", "health"])
    }

    /// `kubectl get --raw /version` by the new address (etcd answers it too): Go's own
    /// words when it refuses the certificate.
    fn kubectl_version(&self, n: &Node) -> Output {
        let pki = n.pki();
        Command::new("kubectl")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &pki)
            .arg(format!("--server={}", self.urls[1]))
            .arg(format!(
                "--certificate-authority={}",
                pki.join("ca.crt").display()
            ))
            .arg(format!(
                "--client-certificate={}",
                pki.join("client.crt").display()
            ))
            .arg(format!("--client-key={}", pki.join("client.key").display()))
            .args(["--request-timeout=10s", "get", "--raw", "/version"])
            .stdin(Stdio::null())
            .output()
            .expect("kubectl (Debian package kubernetes-client)")
    }
}

#[test]
fn a_certificate_that_no_longer_names_the_node_is_reported_and_with_the_setting_gets_the_name() {
    if ![ETCD, ETCDCTL].iter().all(|b| Path::new(b).exists()) {
        skip::skip("etcd or etcdctl missing (Debian packages etcd-server, etcd-client)");
        return;
    }
    let n = Node::new();
    let path = n.cert().display().to_string();
    let old_sans = sans(&n.cert());
    assert!(old_sans.contains("IP Address:127.0.0.1"), "{old_sans}");

    // Go clients connecting by the new address refuse the certificate, by the old one
    // they take it.
    {
        let etcd = Etcd::start(&n);
        let out = etcd.health(&n, 1);
        assert!(
            !out.status.success(),
            "etcdctl by {NEW_ADDRESS}: {}",
            text(&out)
        );
        let out = etcd.kubectl_version(&n);
        let said = text(&out);
        assert!(
            !out.status.success()
                && said.contains("certificate is valid for")
                && said.contains("not 127.0.0.2"),
            "kubectl by {NEW_ADDRESS} with the old names: {said}"
        );
    }

    // check names the address and where it was found.
    let entry = n.check_entry();
    let manifest = n.manifest().display().to_string();
    assert_eq!(
        entry["names_missing"],
        serde_json::json!([{ "name": NEW_ADDRESS, "flag": "--advertise-client-urls", "file": manifest }]),
        "{entry:#}"
    );
    let table = n.run(&["check"]);
    let want = format!("does not name {NEW_ADDRESS} (--advertise-client-urls in {manifest})");
    assert!(
        table
            .stdout
            .replace('\n', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&want),
        "{table}"
    );

    // The setting off: the due certificate is renewed with its names as they were.
    let run = n.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("renewed"), "{run}");
    assert_eq!(
        sans(&n.cert()),
        old_sans,
        "names changed with the setting off"
    );
    let alarm = n.names_alarm().expect("500.220 raised");
    let reason = alarm["reason"].as_str().unwrap();
    assert!(
        reason.contains(&path)
            && reason.contains(&format!(
                "{NEW_ADDRESS} (--advertise-client-urls in {manifest})"
            )),
        "{alarm:#}"
    );
    assert!(n.metric().ends_with(" 1"), "{}", n.metric());
    // Not due any more, but still missing the name: check --fail-due says so.
    assert_eq!(n.check_entry()["status"], "ok");
    let failing = n.run(&["check", "--fail-due"]);
    assert_eq!(
        failing.code, 1,
        "check --fail-due with a name missing: {failing}"
    );
    // The renewal with the setting off kept the names: the note says what adds them now,
    // never that the renewal does.
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let table = flat(&n.run(&["check"]).stdout);
    assert!(
        table.contains(&format!(
            "(alarm 500.220; add_missing_names = true, then `certrenewd renew --force {path}` adds it)"
        )),
        "{table}"
    );

    // The setting on: a dry run says what it would add and touches nothing.
    n.write_config("add_missing_names = true");
    let table = flat(&n.run(&["check"]).stdout);
    assert!(
        table.contains("(alarm 500.220; its next renewal adds it (add_missing_names))"),
        "{table}"
    );
    let before = fs::read(n.cert()).unwrap();
    let dry = n.run(&["renew", "--dry-run", "--force", &path]);
    assert_eq!(dry.code, 0, "{dry}");
    assert!(
        dry.stdout.contains(&format!(
            "would add names IP:{NEW_ADDRESS} (add_missing_names)"
        )),
        "{dry}"
    );
    let dry_json = n.run(&["renew", "--dry-run", "--force", "--output", "json", &path]);
    assert_eq!(
        dry_json.json()["certificates"][0]["names_added"],
        serde_json::json!([format!("IP:{NEW_ADDRESS}")]),
        "{dry_json}"
    );
    assert_eq!(
        fs::read(n.cert()).unwrap(),
        before,
        "a dry run changed the file"
    );

    // The renewal adds the name after the old ones; nothing else changes.
    let others = |c: &Path| common::x509(c, &["-subject", "-ext", "keyUsage,extendedKeyUsage"]);
    let others_before = others(&n.cert());
    let run = n.run(&["renew", "--force", &path]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains(&format!("names added IP:{NEW_ADDRESS}")),
        "{run}"
    );
    assert_eq!(
        sans(&n.cert()),
        format!("{old_sans}, IP Address:{NEW_ADDRESS}"),
        "the names after the renewal"
    );
    assert_eq!(others(&n.cert()), others_before);
    let ca = n.pki().join("ca.crt");
    common::openssl(&["verify", "-CAfile", ca.to_str().unwrap(), &path]);
    assert!(n.names_alarm().is_none(), "500.220 not cleared");
    assert!(n.check_entry().get("names_missing").is_none());
    let clean = n.run(&["check", "--fail-due"]);
    assert_eq!(
        clean.code, 0,
        "check --fail-due once the name is there: {clean}"
    );
    assert!(n.metric().ends_with(" 0"), "{}", n.metric());

    // And Go clients connecting by the new address now succeed.
    let etcd = Etcd::start(&n);
    let out = etcd.health(&n, 1);
    assert!(
        out.status.success(),
        "etcdctl by {NEW_ADDRESS}: {}",
        text(&out)
    );
    let out = etcd.kubectl_version(&n);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("etcdserver"),
        "kubectl by {NEW_ADDRESS}: {}",
        text(&out)
    );
}

/// etcd's static pod is known by what it runs, not by its manifest's name: here etcd runs
/// from `etcd-main.yaml`, and an `etcd.yaml` runs kube-vip with flags of etcd's names. The
/// address missing is etcd's, found in its manifest; kube-vip's flags say nothing.
#[test]
fn etcd_is_found_by_its_command_whatever_its_manifest_is_named() {
    let n = Node::new();
    let main = n.manifests().join("etcd-main.yaml");
    fs::rename(n.manifest(), &main).unwrap();
    fs::write(
        n.manifest(),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-vip\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - /kube-vip\n    \
             - --advertise-client-urls=https://127.0.0.9:2379\n    - --cert-file={}\n    name: kube-vip\n",
            n.cert().display()
        ),
    )
    .unwrap();
    let entry = n.check_entry();
    assert_eq!(
        entry["names_missing"],
        serde_json::json!([{ "name": NEW_ADDRESS, "flag": "--advertise-client-urls", "file": main.display().to_string() }]),
        "{entry:#}"
    );
}
