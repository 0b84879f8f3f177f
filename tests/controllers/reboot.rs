//! A crash between a key and its certificate, on Debian booted with systemd as PID 1
//! (tests/controllers/common/controllers.rs): a crash between the renames of a rotated key and its
//! certificate, then a reboot. At boot, certrenewd (the `.deb`'s binary and shipped unit, enabled,
//! `run_on_start = false`) repairs the pair before READY=1, and Debian's own etcd.service, also
//! enabled and ordered after certrenewd only by the shipped unit's `Before=`, comes up on the
//! matching pair. Before the reboot, etcd is shown to die on the mismatched pair: it reports ready,
//! then exits 1 (and no TLS handshake succeeds meanwhile).
//!
//! certrenewd's start is made 3 s slower (a drop-in sleeps before it starts, as a large
//! inventory would), so that only the ordering keeps etcd waiting: without the `Before=`
//! line, etcd starts at once, dies on the mismatched pair, and only the restart certrenewd
//! owes brings it back (seen here when the line was removed).
//!
//! A controller's writable layer is gone at halt (`--volatile=overlay`), so what a reboot
//! must keep is bound in from the host: the PKI tree, certrenewd's state directory, the
//! package's files, the configurations, and the `multi-user.target.wants` links that enable
//! both services at boot.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::controllers::{
    Controller, Host, Spec, etcd_defaults_text, host_or_skip, one_member_etcd,
};

const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");
const DAEMON: &str = "certrenewd.service";
const ETCD: &str = "etcd.service";
const TIMEOUT: Duration = Duration::from_secs(120);
/// The hard way's etcd-only tree: `kubernetes.pem` (etcd's serving certificate) is due.
const CA: &str = "/etc/etcd/ca.pem";
const CERT: &str = "/etc/etcd/kubernetes.pem";
const KEY: &str = "/etc/etcd/kubernetes-key.pem";

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the certificate and key on the host have the same public key (openssl CLI).
fn pair_matches(cert: &Path, key: &Path) -> bool {
    let of_key = common::openssl(&[
        "pkey".as_ref(),
        "-pubout".as_ref(),
        "-in".as_ref(),
        key.as_os_str(),
    ]);
    common::x509(cert, &["-pubkey"]) == of_key
}

/// The files a reboot keeps, on the host, bound into the controller by [`spec`].
struct Persistent {
    _tmp: tempfile::TempDir,
    etcd: PathBuf,
    state: PathBuf,
    package: PathBuf,
    unit: PathBuf,
    config: PathBuf,
    drop_in: PathBuf,
    etcd_default: PathBuf,
    wants: PathBuf,
}

impl Persistent {
    fn new(host: &Host) -> Persistent {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("hardway-etcd");
        run(Command::new("bash").arg(MKPKI).args([
            "hardway-etcd",
            &tree.display().to_string(),
            "--backdate",
        ]));
        let etcd = tree.join("etc/etcd");
        let state = tmp.path().join("state");
        fs::create_dir(&state).unwrap();
        let package = tmp.path().join("package");
        run(Command::new("dpkg-deb")
            .arg("-x")
            .arg(&host.deb)
            .arg(&package));
        let unit = ["lib", "usr/lib"]
            .iter()
            .map(|d| package.join(d).join("systemd/system/certrenewd.service"))
            .find(|p| p.is_file())
            .expect("the package's certrenewd.service");
        let config = tmp.path().join("certrenewd.toml");
        fs::write(
            &config,
            "schedule = \"0 0 0 1 1 *\"\nrun_on_start = false\nrotate_keys = true\n\
             restart_settle_secs = 2\n\n[[watch]]\npath = \"/etc/etcd\"\nunits = [\"etcd.service\"]\n",
        )
        .unwrap();
        let drop_in = tmp.path().join("certrenewd.service.d");
        fs::create_dir(&drop_in).unwrap();
        fs::write(
            drop_in.join("slow.conf"),
            "# test: a start slower than etcd's, so that only Before= orders them\n[Service]\nExecStartPre=/bin/sleep 3\n",
        )
        .unwrap();
        let etcd_default = tmp.path().join("etcd.default");
        fs::write(
            &etcd_default,
            etcd_defaults_text(&one_member_etcd(CA, CERT, KEY)),
        )
        .unwrap();
        // etcd runs as user etcd: its key must stay readable by it (a renewal keeps owners).
        let (uid, gid) = etcd_ids(&host.base);
        std::os::unix::fs::chown(etcd.join("kubernetes-key.pem"), Some(uid), Some(gid)).unwrap();
        let wants = tmp.path().join("multi-user.target.wants");
        enable_at_boot(&host.base, &wants);
        Persistent {
            _tmp: tmp,
            etcd,
            state,
            package,
            unit,
            config,
            drop_in,
            etcd_default,
            wants,
        }
    }

    /// The controller, with everything a reboot must keep bound in.
    fn spec(&self, failpoints: &Path) -> Spec {
        Spec::new("controller-0")
            .bind(&self.etcd, "/etc/etcd")
            .bind(&self.state, "/var/lib/certrenewd")
            .bind_ro(
                &self.package.join("usr/bin/certrenewd"),
                "/usr/bin/certrenewd",
            )
            .bind_ro(&self.unit, "/etc/systemd/system/certrenewd.service")
            .bind_ro(&self.config, "/etc/certrenewd/certrenewd.toml")
            .bind_ro(&self.drop_in, "/etc/systemd/system/certrenewd.service.d")
            .bind_ro(&self.etcd_default, "/etc/default/etcd")
            .bind_ro(&self.wants, "/etc/systemd/system/multi-user.target.wants")
            .bind_ro(failpoints, "/usr/local/bin/certrenewd-failpoints")
    }
}

/// The uid and gid of user etcd in the base root's /etc/passwd.
fn etcd_ids(base: &Path) -> (u32, u32) {
    let passwd = fs::read_to_string(base.join("etc/passwd")).unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("etcd:"))
        .expect("user etcd in the base root");
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

/// `wants`: the base root's `multi-user.target.wants` links, plus etcd.service and
/// certrenewd.service (what `systemctl enable` would add).
fn enable_at_boot(base: &Path, wants: &Path) {
    fs::create_dir(wants).unwrap();
    let there = base.join("etc/systemd/system/multi-user.target.wants");
    for entry in fs::read_dir(&there).unwrap().flatten() {
        let target = fs::read_link(entry.path()).unwrap();
        symlink(target, wants.join(entry.file_name())).unwrap();
    }
    symlink("/lib/systemd/system/etcd.service", wants.join(ETCD)).unwrap();
    symlink("/etc/systemd/system/certrenewd.service", wants.join(DAEMON)).unwrap();
}

/// The journal entries about `unit` in this boot: (monotonic µs, MESSAGE), oldest first.
fn entries(ctl: &Controller, unit: &str) -> Vec<(u64, String)> {
    ctl.journal_json(&["-b", "-u", unit])
        .iter()
        .map(|e| {
            let t = e["__MONOTONIC_TIMESTAMP"].as_str().unwrap_or("0");
            let m = e["MESSAGE"].as_str().unwrap_or_default();
            (t.parse().unwrap_or(0), m.to_string())
        })
        .collect()
}

/// When the first entry of `unit` containing `needle` was written.
fn first(entries: &[(u64, String)], needle: &str) -> Option<u64> {
    entries
        .iter()
        .find(|(_, m)| m.contains(needle))
        .map(|(t, _)| *t)
}

/// SHA-256 fingerprint of the certificate etcd serves (`openssl s_client` inside, with the
/// pair of the tree as client certificate); an error when no TLS handshake succeeds.
fn served(ctl: &Controller) -> anyhow::Result<String> {
    let fingerprint = ctl.sh(&format!(
        "openssl s_client -connect 127.0.0.1:2379 -CAfile {CA} -cert {CERT} -key {KEY} </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256"
    ))?;
    Ok(fingerprint.trim().to_string())
}

#[test]
fn after_a_crash_between_the_renames_etcd_boots_on_a_matching_pair() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let files = Persistent::new(host);
    let spec = files.spec(common::failpoints::binary());
    let (cert, key) = (
        files.etcd.join("kubernetes.pem"),
        files.etcd.join("kubernetes-key.pem"),
    );

    // First boot: both services start; etcd serves the due certificate.
    let mut ctl = Controller::boot(host, spec.clone()).unwrap_or_else(|e| panic!("{e:#}"));
    for unit in [ETCD, DAEMON] {
        ctl.wait_active(unit, TIMEOUT)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    let due = served(&ctl).unwrap_or_else(|e| panic!("{e:#}"));
    // The crash: the failpoints build aborts between the new key's rename and the certificate's.
    let crash = ctl.exec([
        "env",
        "CERTRENEWD_FAILPOINT=between-key-and-cert",
        "/usr/local/bin/certrenewd-failpoints",
        "renew",
        "--no-restart",
    ]);
    let stderr = String::from_utf8_lossy(&crash.stderr);
    assert!(
        crash.status.code().is_none() && stderr.contains("failpoint between-key-and-cert hit"),
        "{}: {stderr}",
        crash.status
    );
    assert!(files.state.join("pending.json").exists(), "pending record");
    assert!(
        !pair_matches(&cert, &key),
        "a mismatched pair after the crash"
    );
    // etcd, started again on it, serves nothing and dies.
    ctl.systemctl(&["restart", ETCD])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        served(&ctl).is_err(),
        "etcd served TLS on a mismatched pair"
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    while ctl.unit_property(ETCD, "ActiveState").unwrap() != "failed" {
        assert!(
            std::time::Instant::now() < deadline,
            "etcd.service kept running on a mismatched pair"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ctl.halt().unwrap_or_else(|e| panic!("{e:#}"));
    drop(ctl);

    // The reboot: certrenewd repairs before READY=1, etcd starts after it on a whole pair.
    let ctl = Controller::boot(host, spec).unwrap_or_else(|e| panic!("{e:#}"));
    for unit in [DAEMON, ETCD] {
        ctl.wait_active(unit, TIMEOUT)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    let (daemon, etcd) = (entries(&ctl, DAEMON), entries(&ctl, ETCD));
    let log: Vec<&str> = daemon.iter().map(|(_, m)| m.as_str()).collect();
    println!("certrenewd at boot:\n{}", log.join("\n"));
    let ready = first(&daemon, "Started certrenewd.service").expect("certrenewd's READY=1");
    let etcd_began = first(&etcd, "Starting etcd.service").expect("etcd's start");
    assert!(
        etcd_began > ready,
        "etcd.service began at {etcd_began} µs, before certrenewd's READY=1 at {ready} µs: {etcd:#?}"
    );
    assert!(
        !etcd.iter().any(|(_, m)| m.contains("Failed with result")),
        "etcd.service failed in this boot: {etcd:#?}"
    );
    let log = log.join("\n");
    let repaired = log.find("an interrupted renewal was completed");
    let started = log.find("started: ");
    assert!(
        repaired.is_some() && started.is_some() && repaired < started,
        "repaired before READY=1"
    );
    assert!(pair_matches(&cert, &key), "the pair matches");
    assert!(
        !files.state.join("pending.json").exists(),
        "pending record gone"
    );
    let now = served(&ctl).unwrap_or_else(|e| panic!("{e:#}"));
    assert_ne!(now, due, "etcd serves the renewed certificate");
    let on_disk = common::x509(&cert, &["-fingerprint", "-sha256"]);
    assert_eq!(now, on_disk, "etcd serves kubernetes.pem as it is on disk");
}
