//! rollback_on_failure on a real systemd user manager: a unit that refuses the renewed
//! certificate gets the old pair back, runs again, and 250.003 says so.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::e2e::mkpki;
use common::etcd_e2e::Ports;
use common::sandbox::Sandbox;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

#[test]
fn a_unit_that_refuses_the_new_certificate_gets_the_old_pair_back() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("pki");
    mkpki("starlingx", &tree);
    let etcd = tree.join("etc/etcd");
    let cert = etcd.join("etcd-server.crt");
    let key = etcd.join("etcd-server.key");
    let old_cert = fs::read(&cert).unwrap();
    let old_key = fs::read(&key).unwrap();
    // Snapshot the certificate the service accepts; it refuses to start with any other.
    let accepted = tmp.path().join("accepted.crt");
    fs::copy(&cert, &accepted).unwrap();
    sb.install_unit(
        "picky.service",
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'cmp -s {} {} && exec sleep infinity; echo refusing the new certificate; exit 3'\n",
            cert.display(),
            accepted.display()
        ),
    )
    .unwrap();
    sb.systemctl(["start", "picky.service"]).unwrap();
    let pid_before = sb.unit_property("picky.service", "MainPID").unwrap();

    let config = tmp.path().join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\nrotate_keys = true\nrestart_timeout_secs = 5\n\n[[watch]]\npath = \"{}\"\nunits = [\"picky.service\"]\n",
            tmp.path().join("state").display(),
            etcd.display()
        ),
    )
    .unwrap();
    let out = sb.exec(BIN, ["--config", config.to_str().unwrap(), "renew"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The old pair is back, byte for byte, and the unit runs again with it.
    assert_eq!(fs::read(&cert).unwrap(), old_cert, "certificate restored");
    assert_eq!(fs::read(&key).unwrap(), old_key, "rotated key restored");
    assert_eq!(
        sb.unit_property("picky.service", "ActiveState").unwrap(),
        "active"
    );
    let pid_after = sb.unit_property("picky.service", "MainPID").unwrap();
    assert_ne!(pid_before, pid_after, "restarted after the rollback");
    assert!(stdout.contains("NOT ACTIVE    picky.service"), "{stdout}");
    // The report says what is on disk: the previous pair, not `renewed`.
    assert!(
        stdout.contains(&format!(
            "ROLLED BACK   {}: picky.service did not come back",
            cert.display()
        )),
        "{stdout}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.starts_with("renewed") && l.contains("etcd-server.crt")),
        "{stdout}"
    );
    // The tree's etcd-client.crt had expired: it is not put back (its new pair stays).
    assert!(
        stdout.contains("not rolled back: the previous certificate expired on"),
        "{stdout}"
    );

    // The renewed pair is kept in the backups for inspection; nothing else lies around.
    let leftovers: Vec<_> = walk(&etcd)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".certrenewd-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // 250.003 "renewed but not all services have been updated", naming the unit and the rollback.
    let entries = sb.journal_json(["ALARM_ID=250.003", "ALARM_STATE=set"]);
    let services: Vec<_> = entries
        .iter()
        .filter(|e| {
            e["MESSAGE"]
                .as_str()
                .is_some_and(|m| m.contains("not all services have been updated"))
        })
        .collect();
    assert_eq!(services.len(), 1, "{entries:#?}");
    let reason = services[0]["ALARM_REASON"].as_str().unwrap();
    assert!(reason.contains("picky.service"), "{reason}");
    assert!(
        reason.contains("rolled back to the previous certificate"),
        "{reason}"
    );
    assert!(reason.contains("active again"), "{reason}");
    let reasons = active_not_updated(&config);
    assert!(
        reasons.iter().any(|r| r.contains("rolled back")),
        "{reasons:?}"
    );

    // `check` shows the back-off holding the rolled-back certificate.
    let check = |args: &[&str]| {
        let out = common::pki::isolate(
            Command::new(BIN)
                .args(["--config", config.to_str().unwrap(), "check"])
                .args(args),
        )
        .output()
        .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let doc: serde_json::Value = serde_json::from_str(&check(&["--output", "json"])).unwrap();
    let server = doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == cert.display().to_string())
        .expect("etcd-server.crt in check");
    let held = server["backoff"]
        .as_str()
        .unwrap_or_else(|| panic!("{server}"));
    assert!(
        held.starts_with("renewal held back: 1 attempt was rolled back"),
        "{held}"
    );
    let text = check(&[]).replace('\n', " ");
    assert!(
        text.contains("The back-off holds") && text.contains("next attempt not before"),
        "{text}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A restart that fails under coordination is rolled back without waiting for the
/// restart lock or the quorum gate. Here the lock is lost (its key deleted) while the etcd
/// unit that refuses its new certificate is starting: the gate refuses everything after,
/// but the unit, down, is still started again on the old pair. A member that is down can
/// always be started; holding it down would keep the quorum short.
#[test]
fn a_failed_etcd_restart_is_started_again_even_when_the_gate_refuses() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let ports = Ports { base: 9000 };
    ports.assert_free();
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("pki");
    mkpki("starlingx", &tree);
    let etcd = tree.join("etc/etcd");
    let client = tree.join("etc/kubernetes/pki/apiserver-etcd-client");
    let vars = [
        ("SANDBOX_ETCD_PORT_BASE", ports.base.to_string()),
        (
            "SANDBOX_ETCD_CLIENT_CERT",
            client.with_extension("crt").display().to_string(),
        ),
        (
            "SANDBOX_ETCD_CLIENT_KEY",
            client.with_extension("key").display().to_string(),
        ),
    ];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    sb.start_etcd(&etcd, &vars).expect("etcd cluster");

    // An etcd-named unit (restarted as the etcd step, under the gate) that runs on the
    // certificate it accepts, and on any other dies 3 s after starting (inside the 5 s
    // settle: its restart fails).
    let cert = etcd.join("etcd-server.crt");
    let old_cert = fs::read(&cert).unwrap();
    let accepted = tmp.path().join("accepted.crt");
    fs::copy(&cert, &accepted).unwrap();
    let unit = "etcd-picky.service";
    sb.install_unit(
        unit,
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'cmp -s {} {} && exec sleep infinity; sleep 3; exit 3'\n",
            cert.display(),
            accepted.display()
        ),
    )
    .unwrap();
    sb.systemctl(["start", unit]).unwrap();
    let pid_before = sb.unit_property(unit, "MainPID").unwrap();

    let endpoints: Vec<String> = (1..=3)
        .map(|n| format!("\"https://127.0.0.1:{}\"", ports.client(n)))
        .collect();
    let config = tmp.path().join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\nrestart_timeout_secs = 10\n\n\
             [coordination]\nenabled = true\nmember_name = \"etcd-picky\"\nendpoints = [{}]\n\
             cert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\nlease_ttl_secs = 30\ngate_timeout_secs = 120\n\n\
             [[watch]]\npath = \"{}\"\nunits = [\"{unit}\"]\n",
            tmp.path().join("state").display(),
            endpoints.join(", "),
            client.with_extension("crt").display(),
            client.with_extension("key").display(),
            etcd.join("ca.crt").display(),
            etcd.display()
        ),
    )
    .unwrap();
    let out = std::thread::scope(|scope| {
        let renew = scope.spawn(|| sb.exec(BIN, ["--config", config.to_str().unwrap(), "renew"]));
        // The unit's new run has started (on the new certificate): the lock's key is
        // deleted, as when this node's lease expired and another node may have the lock.
        let deadline = Instant::now() + Duration::from_secs(60);
        while sb.unit_property(unit, "MainPID").unwrap() == pid_before {
            assert!(Instant::now() < deadline, "the unit was never restarted");
            std::thread::sleep(Duration::from_millis(50));
        }
        let prefix = "/certrenewd/restart-lock/";
        let (keys, _) = sb.etcdctl(&etcd, &vars, &["get", "--prefix", "--keys-only", prefix]);
        let key = keys
            .lines()
            .find(|l| !l.trim().is_empty())
            .expect("the lock's key");
        sb.etcdctl(&etcd, &vars, &["del", key.trim()]);
        renew.join().unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    // Rolled back, and started again on the old pair even though the lock was gone.
    assert_eq!(fs::read(&cert).unwrap(), old_cert, "certificate restored");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.unit_property(unit, "ActiveState").unwrap() != "active" {
        assert!(
            Instant::now() < deadline,
            "{unit} was left down after the roll-back:\n{stdout}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !stdout.contains(&format!("{unit} after rollback: not started again")),
        "{stdout}"
    );
}

/// A StarlingX tree (openssl-made) in a temp dir, with `picky.service` running on its
/// etcd-server.crt: it starts only on the certificate it was first started on (a copy kept
/// in `accepted`), and on any other exits 3. The config watches the tree's /etc/etcd with it.
/// The temp dir lives as long as this.
struct Picky {
    _tmp: tempfile::TempDir,
    etcd: std::path::PathBuf,
    cert: std::path::PathBuf,
    accepted: std::path::PathBuf,
    state: std::path::PathBuf,
    config: std::path::PathBuf,
}

impl Picky {
    fn new(sb: &Sandbox, extra: &str) -> Picky {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("pki");
        mkpki("starlingx", &tree);
        let etcd = tree.join("etc/etcd");
        let cert = etcd.join("etcd-server.crt");
        let accepted = tmp.path().join("accepted.crt");
        fs::copy(&cert, &accepted).unwrap();
        sb.install_unit(
            "picky.service",
            &format!(
                "[Service]\nExecStart=/bin/sh -c 'cmp -s {} {} && exec sleep infinity; exit 3'\n",
                cert.display(),
                accepted.display()
            ),
        )
        .unwrap();
        sb.systemctl(["start", "picky.service"]).unwrap();
        let (state, config) = (tmp.path().join("state"), tmp.path().join("c.toml"));
        fs::write(
            &config,
            format!(
                "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\nrestart_timeout_secs = 5\n{extra}\n\n[[watch]]\npath = \"{}\"\nunits = [\"picky.service\"]\n",
                state.display(),
                etcd.display()
            ),
        )
        .unwrap();
        Picky {
            _tmp: tmp,
            etcd,
            cert,
            accepted,
            state,
            config,
        }
    }
}

/// The 250.003 alarms active now, by `certrenewd alarms --output json`.
fn active_not_updated(config: &Path) -> Vec<String> {
    let out = Command::new(BIN)
        .args([
            "--config",
            config.to_str().unwrap(),
            "alarms",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["id"] == "250.003")
        .map(|a| a["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `renew --no-restart` forgives the restarts of what it renews itself, not those
/// an earlier pass owes: they stay in restarts.json, their 250.003 stays raised, and the
/// next plain pass does them.
#[test]
fn renew_no_restart_keeps_the_restarts_earlier_passes_owe() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let p = Picky::new(&sb, "rollback_on_failure = false");
    let (cert, accepted, state, config) = (&p.cert, &p.accepted, &p.state, &p.config);
    let renew = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), "renew"];
        all.extend(args);
        let out = sb.exec(BIN, all);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The unit does not take its new certificate: owed, and alarmed.
    let first = renew(&[]);
    let record = state.join("restarts.json");
    let owed = fs::read_to_string(&record).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(owed.contains("picky.service"), "{owed}");
    assert_eq!(active_not_updated(config).len(), 1, "{first}");

    // `renew --no-restart` (nothing is due now): the earlier debt and its alarm stay.
    let second = renew(&["--no-restart"]);
    eprintln!("{second}");
    let owed = fs::read_to_string(&record)
        .unwrap_or_else(|e| panic!("restarts.json wiped by --no-restart ({e}): {second}"));
    assert!(owed.contains("picky.service"), "{owed}");
    let alarms = active_not_updated(config);
    assert_eq!(alarms.len(), 1, "250.003 cleared by --no-restart: {second}");
    assert!(alarms[0].contains("picky.service"), "{alarms:?}");

    // The unit fixed, a plain pass restarts it: nothing owed, the alarm cleared.
    fs::copy(cert, accepted).unwrap();
    let third = renew(&[]);
    assert!(!record.exists(), "{third}");
    assert!(active_not_updated(config).is_empty(), "{third}");
    assert_eq!(
        sb.unit_property("picky.service", "ActiveState").unwrap(),
        "active"
    );
}

/// A roll-back never puts an expired certificate back. The StarlingX tree's
/// etcd-client.crt has expired: when the unit using it does not come back on the renewed
/// pair, etcd-server.crt (still valid) is rolled back, etcd-client.crt keeps its new, valid
/// pair, and the report and 250.003 say why.
#[test]
fn a_roll_back_does_not_put_an_expired_certificate_back() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let p = Picky::new(&sb, "");
    let (server, client) = (&p.cert, p.etcd.join("etcd-client.crt"));
    let (old_server, old_client) = (fs::read(server).unwrap(), fs::read(&client).unwrap());
    let config = &p.config;
    let out = sb.exec(BIN, ["--config", config.to_str().unwrap(), "renew"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        fs::read(server).unwrap(),
        old_server,
        "the valid one rolled back"
    );
    assert_ne!(
        fs::read(&client).unwrap(),
        old_client,
        "the expired one not put back"
    );
    let checked = Command::new("openssl")
        .args(["x509", "-noout", "-checkend", "86400", "-in"])
        .arg(&client)
        .status()
        .unwrap();
    assert!(checked.success(), "the new etcd-client.crt is valid");
    assert!(
        stdout.contains("not rolled back: the previous certificate expired on"),
        "{stdout}"
    );
    let reasons = active_not_updated(config);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("the previous certificate expired on")),
        "{reasons:?}"
    );
}
