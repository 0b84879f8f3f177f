//! The metrics file as the programs that read it see it: Prometheus' own `promtool check
//! metrics` and the classic text parser (what node_exporter's textfile collector runs),
//! x509-certificate-exporter's series beside certrenewd's, and the shipped alert rules under
//! `promtool test rules`. promtool is Debian's `prometheus` package (.ci/packages).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Debian's promtool, or `None` after a skip (a failure in CI).
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output();
    match found {
        Ok(out) if out.status.success() => Some("promtool"),
        _ => {
            common::skip::skip("no promtool (apt-get install --no-install-recommends prometheus)");
            None
        }
    }
}

/// A kubeadm tree whose leaves expired 3 days ago (made under faketime by mkpki.sh) with
/// etcd's CA key set aside, so that a pass renews the kubernetes and front-proxy leaves and
/// the kubeconfigs' users and leaves etcd's expired; a file cut short is a read error.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        common::e2e::mkpki_with("kubeadm", &dir.path().join("pki"), &["--expired"]);
        let n = Node { dir };
        let etc = n.path().join("pki/etc/kubernetes");
        fs::rename(etc.join("pki/etcd/ca.key"), n.path().join("etcd-ca.key")).unwrap();
        fs::write(
            etc.join("pki/broken.crt"),
            "-----BEGIN CERTIFICATE-----\nMIIB\n",
        )
        .unwrap();
        let confs: Vec<String> = ["admin", "scheduler"]
            .iter()
            .map(|c| format!("\"{}\"", etc.join(format!("{c}.conf")).display()))
            .collect();
        fs::write(
            n.config(),
            common::single_node(&format!(
                "state_dir = \"{0}/state\"\nvalidity_days = 365\nmetrics_file = \"{0}/certrenewd.prom\"\n\n[[watch]]\npath = \"{1}/pki\"\nunits = []\nkubeconfigs = [{2}]\n",
                n.path().display(),
                etc.display(),
                confs.join(", ")
            )),
        )
        .unwrap();
        n
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn config(&self) -> PathBuf {
        self.path().join("c.toml")
    }
    fn prom(&self) -> PathBuf {
        self.path().join("certrenewd.prom")
    }
    /// Isolated: never this machine's journal nor its system bus (check asks systemd what
    /// units run).
    fn run(&self, args: &[&str]) -> (i32, String) {
        common::pki::run_text(&self.config(), args)
    }
    /// A pass (it fails: etcd's leaves cannot be renewed here) and `check`'s JSON after it.
    fn pass(&self) -> Value {
        let (code, out) = self.run(&["renew", "--no-restart"]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("renewed"), "{out}");
        let (_, check) = self.run(&["check", "--output", "json"]);
        serde_json::Deserializer::from_str(&check)
            .into_iter()
            .next()
            .unwrap()
            .unwrap()
    }
}

/// Every sample of the file as the classic text parser of Python's prometheus_client reads
/// it: `{family, type, name, labels, value}`.
fn classic_samples(prom: &Path) -> Vec<Value> {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    if not fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": None, "labels": {}, "value": None})
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let parsed = Command::new("python3")
        .args(["-c", script])
        .arg(prom)
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "prometheus_client could not parse {} (pip install prometheus_client): {}",
        prom.display(),
        String::from_utf8_lossy(&parsed.stderr)
    );
    let all: Value = serde_json::from_slice(&parsed.stdout).unwrap();
    all.as_array().unwrap().clone()
}

/// This machine's hostname as uname(1) gives it.
fn hostname() -> String {
    let out = Command::new("uname").arg("-n").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The decimal form of a hexadecimal serial (Python's `int(hex, 16)`), as Go's
/// `big.Int.String()` writes it in the exporter's `serial_number`.
fn decimal(hex: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(int(sys.argv[1], 16))", hex])
        .output()
        .unwrap();
    assert!(out.status.success(), "{hex}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The attribute `key` (`CN`, `O`, ...) of a name as `check` prints it (`O=x, CN=y`).
fn attr(name: &str, key: &str) -> String {
    name.split(", ")
        .find_map(|rdn| rdn.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_metrics_file_passes_promtool_and_the_classic_parser() {
    let Some(promtool) = promtool() else {
        return;
    };
    let n = Node::new();
    n.pass();
    let text = fs::read_to_string(n.prom()).unwrap();
    let out = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(fs::File::open(n.prom()).unwrap())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\n{text}"
    );
    let samples = classic_samples(&n.prom());
    for s in &samples {
        // A family declared without samples, or samples of a family never declared: the
        // classic parser makes an empty family and an untyped one of them.
        assert!(
            s["name"].is_string(),
            "a family without samples: {s}\n{text}"
        );
        assert_ne!(s["type"], "unknown", "an untyped sample: {s}\n{text}");
        for (k, v) in s["labels"].as_object().unwrap() {
            assert_ne!(v, "", "empty label {k} on {s}");
        }
    }
    let renewals = samples
        .iter()
        .find(|s| s["name"] == "certrenewd_renewals_total")
        .expect("certrenewd_renewals_total");
    assert_eq!(renewals["type"], "counter", "{renewals}");
    assert!(renewals["value"].as_f64().unwrap() >= 1.0, "{renewals}");
}

#[test]
fn x509_certificate_exporter_series_match_the_certificates() {
    let n = Node::new();
    let check = n.pass();
    let samples = classic_samples(&n.prom());
    let text = fs::read_to_string(n.prom()).unwrap();
    let node = hostname();
    for s in &samples {
        assert_eq!(
            s["labels"]["node"].as_str(),
            Some(node.as_str()),
            "every series names the node: {s}"
        );
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as f64;
    let time_of = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
        .unix_timestamp() as f64
    };
    let certs = check["certificates"].as_array().unwrap();
    let (mut expired, mut renewed_users) = (0, 0);
    for c in certs {
        let path = c["path"].as_str().unwrap();
        let user = c["kubeconfig"]["user"].as_str();
        let find = |name: &str| -> &Value {
            let found: Vec<&Value> = samples
                .iter()
                .filter(|s| {
                    s["name"] == name
                        && s["labels"]["filepath"] == path
                        && s["labels"]["embedded_key"].as_str() == user
                })
                .collect();
            assert_eq!(found.len(), 1, "{name} of {path} {user:?}:\n{text}");
            found[0]
        };
        let not_after = find("x509_cert_not_after");
        let labels = &not_after["labels"];
        assert_eq!(not_after["type"], "gauge");
        assert_eq!(not_after["value"].as_f64(), Some(time_of(&c["not_after"])));
        let not_before = find("x509_cert_not_before");
        assert_eq!(not_before["labels"], *labels);
        assert_eq!(
            not_before["value"].as_f64(),
            Some(time_of(&c["not_before"]))
        );
        let is_expired = find("x509_cert_expired");
        assert_eq!(is_expired["labels"], *labels);
        let gone = time_of(&c["not_after"]) < now;
        assert_eq!(
            is_expired["value"].as_f64(),
            Some(f64::from(u8::from(gone)))
        );
        expired += usize::from(gone);
        // The exporter's labels: the file, its name, the serial in decimal, the names'
        // attributes; a kubeconfig's user is `embedded_kind="user"`, `embedded_key=NAME`.
        assert_eq!(
            labels["filename"].as_str(),
            Path::new(path).file_name().and_then(|f| f.to_str())
        );
        assert_eq!(
            labels["serial_number"].as_str(),
            Some(decimal(c["serial"].as_str().unwrap()).as_str()),
            "{c}"
        );
        for key in ["CN", "O", "OU", "C", "ST", "L"] {
            for (which, name) in [("subject", &c["subject"]), ("issuer", &c["issuer"])] {
                let want = attr(name.as_str().unwrap(), key);
                let label = format!("{which}_{key}");
                // An attribute the name lacks is no label at all (Prometheus' reading of
                // the exporter's empty value).
                assert_eq!(
                    labels[&label].as_str().unwrap_or_default(),
                    want,
                    "{label} of {path}: {labels}"
                );
            }
        }
        match user {
            Some(u) => {
                assert_eq!(labels["embedded_kind"], "user", "{labels}");
                assert_eq!(labels["embedded_key"], u, "{labels}");
                renewed_users += usize::from(c["status"] == "ok");
            }
            None => assert!(labels.get("embedded_kind").is_none(), "{labels}"),
        }
    }
    // Every series is one of the certificates: x509_cert_* has no others.
    let listed = |name: &str| samples.iter().filter(|s| s["name"] == name).count();
    for name in [
        "x509_cert_not_after",
        "x509_cert_not_before",
        "x509_cert_expired",
    ] {
        assert_eq!(listed(name), certs.len(), "{name}:\n{text}");
    }
    assert!(expired >= 3, "etcd's leaves stay expired:\n{text}");
    assert_eq!(renewed_users, 2, "both users renewed:\n{check:#}");
    let errors = check["errors"].as_array().map_or(0, Vec::len);
    assert_eq!(errors, 1, "{check:#}");
    let read_errors = samples
        .iter()
        .find(|s| s["name"] == "x509_read_errors")
        .expect("x509_read_errors");
    assert_eq!(read_errors["type"], "gauge");
    assert_eq!(read_errors["value"].as_f64(), Some(1.0));
    // A failed pass: the last success is not this one.
    let last = |name: &str| {
        samples
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["value"].as_f64())
    };
    assert_eq!(last("certrenewd_last_pass_success"), Some(0.0));
    assert_eq!(
        last("certrenewd_last_success_timestamp_seconds"),
        Some(0.0),
        "no pass has succeeded yet:\n{text}"
    );
}

#[test]
fn the_last_success_is_kept_across_failed_passes() {
    let n = Node::new();
    let etc = n.path().join("pki/etc/kubernetes");
    // A pass that succeeds: the key back, the broken file gone.
    fs::rename(n.path().join("etcd-ca.key"), etc.join("pki/etcd/ca.key")).unwrap();
    fs::remove_file(etc.join("pki/broken.crt")).unwrap();
    let (code, out) = n.run(&["renew", "--no-restart"]);
    assert_eq!(code, 0, "{out}");
    let value = |name: &str| {
        classic_samples(&n.prom())
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["value"].as_f64())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let success = value("certrenewd_last_success_timestamp_seconds");
    assert_eq!(success, value("certrenewd_last_pass_timestamp_seconds"));
    // Then one that fails: the success stays where it was.
    fs::write(
        etc.join("pki/broken.crt"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (code, out) = n.run(&["renew", "--no-restart"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(value("certrenewd_last_pass_success"), 0.0);
    assert!(value("certrenewd_last_pass_timestamp_seconds") > success);
    assert_eq!(value("certrenewd_last_success_timestamp_seconds"), success);
}

/// A metrics file that cannot be written is an ERROR naming it, not a pass failure, and
/// `check` says so until a pass writes it: its directory missing (node_exporter's textfile
/// directory not made yet), then a write that fails (a directory in the file's place).
#[test]
fn a_metrics_file_not_written_is_an_error_and_check_says_so() {
    let n = Node::new();
    let etc = n.path().join("pki/etc/kubernetes");
    fs::rename(n.path().join("etcd-ca.key"), etc.join("pki/etcd/ca.key")).unwrap();
    fs::remove_file(etc.join("pki/broken.crt")).unwrap();
    let textfile = n.path().join("textfile");
    let prom = textfile.join("certrenewd.prom");
    let config = fs::read_to_string(n.config()).unwrap();
    let config = config.replace(&n.prom().display().to_string(), &prom.display().to_string());
    fs::write(n.config(), config).unwrap();
    let check = || {
        let (code, text) = n.run(&["check"]);
        let (_, json) = n.run(&["check", "--output", "json"]);
        let json: Value = serde_json::Deserializer::from_str(&json)
            .into_iter()
            .next()
            .unwrap()
            .unwrap();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        (code, text, json["metrics_not_written"].clone())
    };

    let (code, out) = n.run(&["renew", "--no-restart"]);
    assert_eq!(code, 0, "not a pass failure: {out}");
    assert!(
        out.contains("ERROR") && out.contains(&format!("writing metrics to {}", prom.display())),
        "{out}"
    );
    let (code, text, json) = check();
    assert_eq!(code, 0, "{text}");
    let missing = format!("its directory {} does not exist", textfile.display());
    assert_eq!(json["file"], prom.display().to_string(), "{json}");
    assert_eq!(json["why"], missing.as_str(), "{json}");
    assert!(
        text.contains(&format!(
            "The metrics file {} is not being written: {missing}.",
            prom.display()
        )),
        "{text}"
    );

    // The directory made, a directory where the file goes: the pass's error is recorded.
    fs::create_dir_all(&prom).unwrap();
    let (code, out) = n.run(&["renew", "--no-restart", "--force", "--all"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ERROR"), "{out}");
    let (_, _, json) = check();
    let why = json["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("could not write it: writing metrics to"),
        "{json}"
    );

    // Written again: nothing said.
    fs::remove_dir(&prom).unwrap();
    let (code, out) = n.run(&["renew", "--no-restart"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("ERROR"), "{out}");
    assert!(prom.is_file());
    let (_, text, json) = check();
    assert!(json.is_null(), "{json}");
    assert!(!text.contains("is not being written"), "{text}");
}

#[test]
fn the_shipped_alert_rules_pass_promtool_test_rules() {
    let Some(promtool) = promtool() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = root.join("config/certrenewd.rules.yml");
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(promtool)
        .args(["test", "rules"])
        .arg(root.join("tests/prometheus/certrenewd.rules.test.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The package installs it.
    let cargo = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains(
            r#"["config/certrenewd.rules.yml", "usr/share/certrenewd/prometheus/certrenewd.rules.yml", "644"]"#
        ),
        "Cargo.toml's deb assets do not install config/certrenewd.rules.yml"
    );
}
