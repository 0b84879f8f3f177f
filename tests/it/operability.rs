//! Maintenance inhibit and the Prometheus metrics file, driven through the real binary.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new(extra: &str) -> Tree {
        let dir = tempfile::tempdir().unwrap();
        crate::common::e2e::mkpki("starlingx", &dir.path().join("pki"));
        let t = Tree { dir };
        fs::write(
            t.config(),
            format!(
                "state_dir = \"{0}/state\"\nvalidity_days = 365\nmetrics_file = \"{0}/certrenewd.prom\"\ninhibit_paths = [\"{0}/upgrade-in-progress\"]\n{extra}\n[[watch]]\npath = \"{0}/pki/etc/etcd\"\nunits = []\n\n[[watch]]\npath = \"{0}/pki/etc/kubernetes/pki\"\nunits = []\n",
                t.path().display()
            ),
        )
        .unwrap();
        t
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn config(&self) -> PathBuf {
        self.path().join("c.toml")
    }
    fn flag(&self) -> PathBuf {
        self.path().join("upgrade-in-progress")
    }
    /// Isolated: never this machine's journal nor its system bus.
    fn run(&self, args: &[&str]) -> (i32, String) {
        crate::common::pki::run_text(&self.config(), args)
    }
    fn tree_bytes(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.path().join("pki")];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((p.clone(), fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }
}

#[test]
fn inhibit_defers_renewal_but_still_alarms_expired_certificates() {
    let t = Tree::new("");
    let before = t.tree_bytes();

    fs::write(t.flag(), "").unwrap();
    let (code, out) = t.run(&["renew", "--no-restart"]);
    assert_eq!(code, 1, "due certificates stay due while deferred: {out}");
    assert!(out.contains("pass deferred: inhibited by"), "{out}");
    assert_eq!(t.tree_bytes(), before, "nothing written while inhibited");
    let (_, alarms) = t.run(&["alarms", "--output", "json"]);
    let alarms: serde_json::Value = serde_json::from_str(&alarms).unwrap();
    let ids: Vec<&str> = alarms["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["500.210"],
        "only the expired certificate is alarmed: {alarms}"
    );

    // The command inhibit works the same, and lifts with --clear.
    fs::remove_file(t.flag()).unwrap();
    let (code, out) = t.run(&["inhibit", "--reason", "upgrade to 26.09", "--until", "2h"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("upgrade to 26.09"), "{out}");
    let (code, out) = t.run(&["renew", "--no-restart"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("upgrade to 26.09"), "{out}");
    assert_eq!(t.tree_bytes(), before);
    let (_, out) = t.run(&["inhibit", "--clear"]);
    assert!(out.contains("not inhibited"), "{out}");
    let (code, out) = t.run(&["renew", "--no-restart"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("renewed"), "{out}");
    assert_ne!(t.tree_bytes(), before);

    // Bad --until is a usage error.
    let (code, _) = t.run(&["inhibit", "--reason", "x", "--until", "yesterday"]);
    assert_eq!(code, 2);
}

/// Listens on a NOTIFY_SOCKET like systemd does.
fn notify_socket(dir: &Path) -> (UnixDatagram, PathBuf) {
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    (sock, path)
}

fn wait_for_status(sock: &UnixDatagram, want: &str, limit: Duration) -> String {
    let start = Instant::now();
    let mut buf = vec![0u8; 65536];
    let mut seen = String::new();
    while start.elapsed() < limit {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.contains(want) {
                return msg;
            }
            seen.push_str(&msg);
            seen.push('\n');
        }
    }
    panic!("no notification containing {want:?} within {limit:?}; saw:\n{seen}");
}

#[test]
fn the_daemon_says_why_it_defers_warns_when_too_old_and_runs_once_lifted() {
    let t = Tree::new("retry_interval_secs = 1\ninhibit_max_age_hours = 1\n");
    fs::write(t.flag(), "").unwrap();
    // The flag has been there for two hours: older than inhibit_max_age_hours.
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(t.flag())
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let (sock, sock_path) = notify_socket(t.path());
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(t.config())
        .arg("run")
        .env("NOTIFY_SOCKET", &sock_path)
        .env(
            "CERTRENEWD_JOURNAL_SOCKET",
            "/nonexistent/certrenewd-test/journal.socket",
        )
        .env_remove("JOURNAL_STREAM")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    wait_for_status(&sock, "READY=1", Duration::from_secs(20));
    let status = wait_for_status(&sock, "deferred (inhibited by", Duration::from_secs(20));
    assert!(status.contains(&t.flag().display().to_string()), "{status}");
    let before = t.tree_bytes();

    fs::remove_file(t.flag()).unwrap();
    let status = wait_for_status(&sock, "last pass: ok", Duration::from_secs(30));
    assert!(status.contains("renewed"), "{status}");
    assert_ne!(
        t.tree_bytes(),
        before,
        "the pass ran once the inhibit lifted"
    );

    // SIGTERM: STOPPING=1 and exit 0.
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    wait_for_status(&sock, "STOPPING=1", Duration::from_secs(10));
    assert!(child.wait().unwrap().success());
    let lines = log.join().unwrap().join("\n");
    assert!(
        lines.contains("renewals have been deferred for 2 hours"),
        "warning about an old inhibit:\n{lines}"
    );
}

#[test]
fn the_metrics_file_parses_and_matches_check() {
    let t = Tree::new("");
    // Remove a CA key so one certificate is unrenewable and alarmed.
    fs::rename(
        t.path().join("pki/etc/etcd/ca.key"),
        t.path().join("ca.key.aside"),
    )
    .unwrap();
    // And a certificate file cut short: a read error.
    let broken = t.path().join("pki/etc/etcd/broken.crt");
    fs::write(&broken, "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
    let (code, out) = t.run(&["renew", "--no-restart"]);
    assert_eq!(code, 1, "{out}");
    let (_, check) = t.run(&["check", "--output", "json"]);
    // The JSON document, then what check logged on stderr (the broken file).
    let check: serde_json::Value = serde_json::Deserializer::from_str(&check)
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    let prom = t.path().join("certrenewd.prom");
    // Parse with the reference parser of the Prometheus text format node_exporter's textfile
    // collector reads (promtool's verdict is in tests/it/metrics_readers.rs).
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
out = []
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let parsed = Command::new("python3")
        .args(["-c", script])
        .arg(&prom)
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "prometheus_client could not parse the file (pip install prometheus_client): {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let samples: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    let samples = samples.as_array().unwrap();
    let value = |name: &str, label: Option<(&str, &str)>| -> Option<f64> {
        samples
            .iter()
            .find(|s| {
                s["name"] == name && label.is_none_or(|(k, v)| s["labels"][k].as_str() == Some(v))
            })
            .and_then(|s| s["value"].as_f64())
    };
    for c in check["certificates"].as_array().unwrap() {
        let path = c["path"].as_str().unwrap();
        let not_after = time::OffsetDateTime::parse(
            c["not_after"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
        .unix_timestamp() as f64;
        assert_eq!(
            value(
                "certrenewd_certificate_not_after_seconds",
                Some(("path", path))
            ),
            Some(not_after),
            "{path}"
        );
        // The exporter's labels: CA or leaf, and the common names as openssl reads them.
        let sample = samples
            .iter()
            .find(|s| {
                s["name"] == "certrenewd_certificate_not_after_seconds"
                    && s["labels"]["path"] == path
            })
            .unwrap();
        assert_eq!(
            sample["labels"]["is_ca"].as_str(),
            Some(if c["is_ca"] == true { "true" } else { "false" }),
            "{sample}"
        );
        if c.get("kubeconfig").is_none() {
            let cn = |what: &str| {
                let out = Command::new("openssl")
                    .args(["x509", "-in", path, "-noout", what, "-nameopt", "RFC2253"])
                    .output()
                    .unwrap();
                // "subject=CN=etcd-ca,O=..." (RFC 2253: most significant last).
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let line = text.split_once('=').map_or("", |(_, dn)| dn).to_string();
                line.split(',')
                    .find_map(|rdn| rdn.trim().strip_prefix("CN="))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            assert_eq!(
                sample["labels"]["subject_cn"].as_str(),
                Some(cn("-subject").as_str()),
                "{sample}"
            );
            assert_eq!(
                sample["labels"]["issuer_cn"].as_str(),
                Some(cn("-issuer").as_str()),
                "{sample}"
            );
        }
        let renewable = c["renewable"].as_bool().expect("renewable in check's JSON");
        assert_eq!(
            value("certrenewd_certificate_renewable", Some(("path", path))),
            Some(if renewable { 1.0 } else { 0.0 }),
            "{path}"
        );
    }
    assert_eq!(value("certrenewd_last_pass_success", None), Some(0.0));
    let errors = check["errors"].as_array().map_or(0, Vec::len);
    assert_eq!(errors, 1, "{check:#}");
    assert_eq!(
        value("certrenewd_read_errors", None),
        Some(1.0),
        "the read-errors gauge counts check's errors"
    );
    assert!(value("certrenewd_last_pass_timestamp_seconds", None).unwrap() > 1.7e9);
    // A counter's family is its sample's name, `_total` included.
    assert_eq!(value("certrenewd_renewals_total", None), Some(0.0));
    let (_, alarms) = t.run(&["alarms", "--output", "json"]);
    let alarms: serde_json::Value = serde_json::from_str(&alarms).unwrap();
    let alarms = alarms["alarms"].as_array().unwrap();
    assert!(!alarms.is_empty());
    for a in alarms {
        let entity = a["entity"].as_str().unwrap();
        assert!(
            samples
                .iter()
                .any(|s| s["name"] == "certrenewd_alarm_active"
                    && s["labels"]["id"] == a["id"]
                    && s["labels"]["entity"].as_str() == Some(entity)
                    && s["value"] == 1.0),
            "alarm {entity} missing from the metrics"
        );
    }

    // Put the key back and the broken file away: the renewals are counted.
    fs::remove_file(&broken).unwrap();
    fs::rename(
        t.path().join("ca.key.aside"),
        t.path().join("pki/etc/etcd/ca.key"),
    )
    .unwrap();
    let (code, out) = t.run(&["renew", "--no-restart"]);
    assert_eq!(code, 0, "{out}");
    let text = fs::read_to_string(&prom).unwrap();
    let line = |name: &str| {
        (text.lines())
            .find(|l| l.starts_with(&format!("{name}{{node=")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert!(
        line("certrenewd_last_pass_success").ends_with("} 1"),
        "{text}"
    );
    assert!(line("certrenewd_renewals_total").ends_with("} 3"), "{text}");
    assert!(line("certrenewd_read_errors").ends_with("} 0"), "{text}");
    assert!(!text.contains("certrenewd_alarm_active{"), "{text}");
}

#[test]
fn a_forced_renewal_that_cannot_happen_fails() {
    let t = Tree::new("");
    let ok_cert = t.path().join("pki/etc/kubernetes/pki/apiserver.crt");
    fs::remove_file(t.path().join("pki/etc/kubernetes/pki/ca.key")).unwrap();
    let before = t.tree_bytes();
    let (code, out) = t.run(&[
        "renew",
        "--no-restart",
        "--force",
        ok_cert.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED") && out.contains("CA key not on this host"),
        "{out}"
    );
    assert_eq!(t.tree_bytes(), before);
}
