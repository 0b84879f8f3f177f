//! The daemon's long life: what a reload changes, and what a start repairs
//! before READY=1. `certrenewd run` is the shipped unit in the sandbox's real `systemd
//! --user` (see `common::e2e::daemon_unit`), over a StarlingX tree made by
//! `tests/fixtures/mkpki.sh`.
//!
//! Each test starts its own sandbox.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::e2e::{
    BIN, DAEMON, SLEEPER, Starlingx, daemon_messages, install_daemon, main_pid, show, wait_for,
    wait_status,
};
use common::sandbox::Sandbox;

const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// `alarm_command` appending "ID STATE" to `log`.
fn hook_to(log: &Path) -> String {
    format!(
        "alarm_command = ['/bin/sh', '-c', 'echo \"$ALARM_ID $ALARM_STATE\" >> {}']",
        log.display()
    )
}

fn lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// SIGHUP makes the alarm sinks again: after a reload that changes `alarm_command`, the
/// next raise or clear runs the new command, and the old one is never run again.
#[test]
fn a_reload_runs_the_new_alarm_command() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let (first, second) = (
        t.tmp.path().join("hook-1.log"),
        t.tmp.path().join("hook-2.log"),
    );
    // Without its CA key, etcd's due and expired certificates cannot be renewed: the pass
    // at start raises 250.003, 500.200 (etcd-server) and 500.210 (etcd-client).
    let ca_key: PathBuf = t.etcd.join("ca.key");
    let aside = t.tmp.path().join("ca.key.aside");
    fs::rename(&ca_key, &aside).unwrap();
    let quick = "restart_timeout_secs = 10\nrestart_settle_secs = 1";
    let yearly = format!("schedule = \"0 0 0 1 1 *\"\n{quick}\n{}", hook_to(&first));
    t.write_config(&yearly, &[t.etcd_watch()]);
    sb.install_unit("etcd.service", SLEEPER).unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    install_daemon(&sb, &t.cfg, t.tmp.path());
    sb.systemctl(["start", DAEMON])
        .expect("starting the daemon");
    wait_status(&sb, "3 alarms active; last pass: FAILED", PASS_TIMEOUT);
    let raised = wait_for("3 raises from the first hook", PASS_TIMEOUT, || {
        let l = lines(&first);
        if l.len() >= 3 { Ok(l) } else { Err(l) }
    });
    assert_eq!(raised, ["250.003 set", "500.200 set", "500.210 set"]);

    // The CA key is back, and a reload names another hook and passes every 2 s: the pass
    // renews and clears the three alarms through the new hook only.
    fs::rename(&aside, &ca_key).unwrap();
    let often = format!(
        "schedule = \"*/2 * * * * *\"\nrandomized_delay_secs = 0\n{quick}\n{}",
        hook_to(&second)
    );
    t.write_config(&often, &[t.etcd_watch()]);
    let daemon_pid = main_pid(&sb, DAEMON);
    sb.systemctl(["reload", DAEMON])
        .expect("reloading the daemon");
    wait_status(&sb, "0 alarms active; last pass: ok", PASS_TIMEOUT);
    let cleared = wait_for("3 clears from the second hook", PASS_TIMEOUT, || {
        let l = lines(&second);
        if l.len() >= 3 { Ok(l) } else { Err(l) }
    });
    assert_eq!(cleared, ["250.003 clear", "500.200 clear", "500.210 clear"]);
    assert_eq!(lines(&first), raised, "the old hook ran no more");
    assert_eq!(
        main_pid(&sb, DAEMON),
        daemon_pid,
        "a reload is not a restart"
    );
    assert!(
        daemon_messages(&sb)
            .iter()
            .any(|l| l == "configuration reloaded"),
        "reloaded"
    );
}

/// A script that exits 0 when every `NAME.crt` in `dir` matches its `NAME.key` (same
/// public key, by the openssl CLI), and appends what it found to `log`.
fn pairs_match_script(dir: &Path, log: &Path) -> String {
    format!(
        r#"#!/bin/sh
cd '{dir}' || exit 2
for crt in *.crt; do
  name=${{crt%.crt}}
  [ -e "$name.key" ] || continue
  a=$(openssl x509 -noout -pubkey -in "$crt") || exit 2
  b=$(openssl pkey -pubout -in "$name.key") || exit 2
  if [ "$a" != "$b" ]; then echo "mismatched $name" >> '{log}'; exit 1; fi
done
echo matched >> '{log}'
"#,
        dir = dir.display(),
        log = log.display()
    )
}

/// One `systemctl show` property as a number.
fn number(sb: &Sandbox, unit: &str, property: &str) -> u64 {
    let v = sb.unit_property(unit, property).expect(property);
    v.parse()
        .unwrap_or_else(|e| panic!("{unit} {property}={v:?}: {e}"))
}

/// A crash between the renames of a rotated key and its certificate leaves a mismatched
/// pair. The daemon, with `run_on_start = false`, repairs it before READY=1; etcd.service,
/// started in the same transaction and ordered after the daemon only by the shipped unit's
/// `Before=`, starts after READY=1 on a matching pair (its stand-in refuses to start on a
/// mismatched one, as etcd does). The restart the interrupted pass owed follows at once.
#[test]
fn an_interrupted_install_is_repaired_before_ready_and_before_etcd_starts() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let quick = "restart_timeout_secs = 10\nrestart_settle_secs = 1";
    t.write_config(
        &format!("schedule = \"0 0 0 1 1 *\"\nrun_on_start = false\nrotate_keys = true\n{quick}"),
        &[t.etcd_watch()],
    );
    let check = t.tmp.path().join("pairs-match.sh");
    let check_log = t.tmp.path().join("pairs-match.log");
    fs::write(&check, pairs_match_script(&t.etcd, &check_log)).unwrap();

    // etcd-server is renewed beforehand, so that etcd-client is the only due certificate:
    // no other renewal of the pass after the repair runs while etcd.service starts.
    let no_journal = t.tmp.path().join("no-journal");
    let server = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&t.cfg)
        .args(["renew", "--no-restart"])
        .arg(t.etcd.join("etcd-server.crt"))
        .env("CERTRENEWD_JOURNAL_SOCKET", &no_journal)
        .output()
        .expect("running certrenewd renew");
    assert!(server.status.success(), "{}", show(&server));
    // The crash: a failpoints build aborts between the new key's rename and the certificate's.
    let crashed = std::process::Command::new(common::failpoints::binary())
        .arg("--config")
        .arg(&t.cfg)
        .args(["renew", "--no-restart"])
        .env("CERTRENEWD_FAILPOINT", "between-key-and-cert")
        .env("CERTRENEWD_JOURNAL_SOCKET", &no_journal)
        .output()
        .expect("running the failpoints build");
    let stderr = String::from_utf8_lossy(&crashed.stderr);
    assert!(
        crashed.status.code().is_none() && stderr.contains("failpoint between-key-and-cert hit"),
        "{stderr}"
    );
    assert!(
        t.state.join("pending.json").exists(),
        "the pending record stays"
    );
    let before = std::process::Command::new("sh")
        .arg(&check)
        .status()
        .unwrap();
    assert_eq!(before.code(), Some(1), "a mismatched pair after the crash");
    fs::remove_file(&check_log).unwrap();

    sb.install_unit(
        "etcd.service",
        &format!(
            "[Unit]\nDescription=etcd stand-in that refuses a mismatched pair\n\n[Service]\nExecStartPre=/bin/sh {}\nExecStart=/bin/sleep infinity\n",
            check.display()
        ),
    )
    .unwrap();
    install_daemon(&sb, &t.cfg, t.tmp.path());
    // One transaction pulling in both, as multi-user.target does at boot (etcd.service
    // named first: the order is the daemon unit's Before=).
    sb.install_unit(
        "boot.target",
        "[Unit]\nDescription=the units started at boot\nWants=etcd.service certrenewd.service\n",
    )
    .unwrap();
    sb.systemctl(["start", "boot.target"])
        .expect("starting etcd.service and the daemon");
    wait_for("etcd.service active", PASS_TIMEOUT, || {
        let st = sb.unit_property("etcd.service", "ActiveState").unwrap();
        let log = fs::read_to_string(&check_log).unwrap_or_default();
        assert!(
            !log.contains("mismatched"),
            "etcd.service saw a mismatched pair"
        );
        if st == "active" { Ok(()) } else { Err(st) }
    });
    assert!(
        fs::read_to_string(&check_log)
            .unwrap()
            .starts_with("matched\n")
    );
    let ready = number(&sb, DAEMON, "ActiveEnterTimestampMonotonic");
    let etcd_began = number(&sb, "etcd.service", "InactiveExitTimestampMonotonic");
    assert!(
        ready > 0 && etcd_began >= ready,
        "etcd.service began at {etcd_began}, before the daemon's READY=1 at {ready}; daemon restarts: {}; daemon log: {:#?}",
        sb.unit_property(DAEMON, "NRestarts").unwrap_or_default(),
        daemon_messages(&sb)
    );
    let log = daemon_messages(&sb);
    let repaired = log
        .iter()
        .position(|l| l.starts_with("an interrupted renewal was completed"));
    let started = log.iter().position(|l| l.starts_with("started: "));
    assert!(
        repaired.is_some() && started.is_some() && repaired < started,
        "repaired, then READY=1: {log:#?}"
    );
    assert!(
        !t.state.join("pending.json").exists(),
        "the pending record is gone"
    );

    // The restart the interrupted pass owed: a pass at once, although run_on_start = false.
    // (Its try-restart may merge with etcd.service's start job if that is still running,
    // as at boot: one start or two, each on a matching pair.)
    let st = wait_status(&sb, "last pass: ok", PASS_TIMEOUT);
    assert!(st.contains(", 1 unit restarted, 0 not active)"), "{st}");
    let starts = fs::read_to_string(&check_log).unwrap();
    assert!(
        !starts.is_empty() && starts.lines().all(|l| l == "matched"),
        "every start of etcd.service on a matching pair: {starts:?}"
    );
    assert!(
        !t.state.join("restarts.json").exists(),
        "nothing owed any more"
    );
    assert!(
        daemon_messages(&sb)
            .iter()
            .any(|l| l == "pass starting (Recovery)"),
        "the pass ran for the repair"
    );
    let after = std::process::Command::new("sh")
        .arg(&check)
        .status()
        .unwrap();
    assert_eq!(after.code(), Some(0), "every pair matches");
}

/// Restarts an earlier pass owes (in `restarts.json`: its unit did not come back,
/// or the pass was killed after installing) are done by a pass as soon as the daemon starts,
/// also with `run_on_start = false`, as docs/interface.md says; not at the next scheduled time.
#[test]
fn restarts_owed_are_done_at_start_without_run_on_start() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    t.write_config(
        "schedule = \"0 0 0 1 1 *\"\nrun_on_start = false\nrollback_on_failure = false\nrestart_timeout_secs = 10\nrestart_settle_secs = 1",
        &[t.etcd_watch()],
    );
    // etcd.service refuses any certificate but the one it was started on.
    let cert = t.etcd.join("etcd-server.crt");
    let accepted = t.tmp.path().join("accepted.crt");
    fs::copy(&cert, &accepted).unwrap();
    sb.install_unit(
        "etcd.service",
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'cmp -s {} {} && exec sleep infinity; exit 3'\n",
            cert.display(),
            accepted.display()
        ),
    )
    .unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    // A pass renews, and etcd.service does not come back: its restart is owed.
    let out = sb.exec(BIN, ["--config", t.cfg.to_str().unwrap(), "renew"]);
    let record = t.state.join("restarts.json");
    let owed = fs::read_to_string(&record).unwrap_or_else(|e| panic!("{e}: {}", show(&out)));
    assert!(owed.contains("etcd.service"), "{owed}");
    // The operator starts it on the new certificate by hand; the restart stays owed.
    fs::copy(&cert, &accepted).unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    let pid = main_pid(&sb, "etcd.service");

    install_daemon(&sb, &t.cfg, t.tmp.path());
    sb.systemctl(["start", DAEMON])
        .expect("starting the daemon");
    let st = wait_status(&sb, "last pass: ok", PASS_TIMEOUT);
    assert!(st.contains(", 1 unit restarted, 0 not active)"), "{st}");
    assert_ne!(main_pid(&sb, "etcd.service"), pid, "etcd.service restarted");
    assert!(!record.exists(), "nothing owed any more");
    let log = daemon_messages(&sb);
    assert!(
        log.iter()
            .any(|l| l.starts_with("restarts owed by an earlier pass: running a pass now")),
        "{log:#?}"
    );
}

/// The daemon and etcd.service started in one transaction (as
/// multi-user.target does), etcd-server and etcd-client due. The daemon renews them before
/// READY=1 (etcd has not started: its start job waits on the daemon's), etcd starts after
/// READY=1 on the renewed certificates (its stand-in logs what it reads), and the pass after
/// READY=1 restarts nothing: nothing started on an old certificate.
#[test]
fn at_boot_due_certificates_are_renewed_before_ready_and_etcd_starts_on_them() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let quick = "restart_timeout_secs = 10\nrestart_settle_secs = 1";
    t.write_config(
        &format!("schedule = \"0 0 0 1 1 *\"\n{quick}"),
        &[t.etcd_watch()],
    );
    // What etcd reads when it starts: its serving and client certificates, each with more
    // than the 15-day window left ("renewed") or not ("DUE").
    let log = t.tmp.path().join("etcd-starts.log");
    let check = t.tmp.path().join("etcd-reads.sh");
    fs::write(
        &check,
        format!(
            "for c in {0}/etcd-server.crt {0}/etcd-client.crt; do\n  \
             openssl x509 -noout -checkend 1296000 -in \"$c\" >/dev/null || {{ echo DUE >> {1}; exit 0; }}\n\
             done\necho renewed >> {1}\n",
            t.etcd.display(),
            log.display()
        ),
    )
    .unwrap();
    sb.install_unit(
        "etcd.service",
        &format!(
            "[Unit]\nDescription=etcd stand-in that logs what it reads\n\n[Service]\nExecStartPre=/bin/sh {}\nExecStart=/bin/sleep infinity\n",
            check.display()
        ),
    )
    .unwrap();
    install_daemon(&sb, &t.cfg, t.tmp.path());
    sb.install_unit(
        "boot.target",
        "[Unit]\nDescription=the units started at boot\nWants=etcd.service certrenewd.service\n",
    )
    .unwrap();
    sb.systemctl(["start", "boot.target"])
        .expect("starting etcd.service and the daemon");
    let st = wait_status(&sb, "last pass: ok (", PASS_TIMEOUT);
    assert!(
        st.contains("0 due")
            && st.contains("last pass: ok (")
            && st.contains(", 0 renewed, 0 failed, 0 units restarted, 0 not active)"),
        "the pass after READY=1 found everything renewed and restarted nothing: {st}\n{:#?}",
        daemon_messages(&sb)
    );
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "renewed\n",
        "etcd.service started once, on the renewed certificates"
    );
    let ready = number(&sb, DAEMON, "ActiveEnterTimestampMonotonic");
    let etcd_began = number(&sb, "etcd.service", "InactiveExitTimestampMonotonic");
    assert!(
        ready > 0 && etcd_began >= ready,
        "etcd began at {etcd_began}, READY=1 at {ready}"
    );
    let said = daemon_messages(&sb);
    let renewed = said
        .iter()
        .position(|l| l.starts_with("renewed before READY=1: 2 of 2"));
    let started = said.iter().position(|l| l.starts_with("started: "));
    assert!(
        renewed.is_some() && renewed < started,
        "renewed, then READY=1: {said:#?}"
    );
    assert!(!t.state.join("restarts.json").exists(), "nothing owed");
}
