//! The daemon's long life (issue 14): what a reload changes, and what a start repairs
//! before READY=1. `certrenewd run` is the shipped unit in the sandbox's real `systemd
//! --user` (see `common::e2e::daemon_unit`), over a StarlingX tree made by
//! `tests/fixtures/mkpki.sh`.
//!
//! Each test starts its own sandbox.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::e2e::{
    DAEMON, SLEEPER, WatchSpec, config_text, daemon_messages, install_daemon, main_pid, mkpki,
    wait_for, wait_status,
};
use common::sandbox::Sandbox;

const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// The config of these tests: the tree's /etc/etcd watched with `etcd.service`.
fn write_config(cfg: &Path, state: &Path, etcd: &Path, extra: &str) {
    let watch = WatchSpec {
        path: etcd.to_path_buf(),
        units: &["etcd.service"],
    };
    fs::write(cfg, config_text(state, extra, &[watch])).expect("writing the config");
}

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
    let Some(sb) = Sandbox::start_or_skip("a_reload_runs_the_new_alarm_command") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    mkpki("starlingx", &tmp.path().join("pki"));
    let etcd = tmp.path().join("pki/etc/etcd");
    let (state, cfg) = (tmp.path().join("state"), tmp.path().join("c.toml"));
    let (first, second) = (tmp.path().join("hook-1.log"), tmp.path().join("hook-2.log"));
    // Without its CA key, etcd's due and expired certificates cannot be renewed: the pass
    // at start raises 250.003, 500.200 (etcd-server) and 500.210 (etcd-client).
    let ca_key: PathBuf = etcd.join("ca.key");
    let aside = tmp.path().join("ca.key.aside");
    fs::rename(&ca_key, &aside).unwrap();
    let quick = "restart_timeout_secs = 10\nrestart_settle_secs = 1";
    let yearly = format!("schedule = \"0 0 0 1 1 *\"\n{quick}\n{}", hook_to(&first));
    write_config(&cfg, &state, &etcd, &yearly);
    sb.install_unit("etcd.service", SLEEPER).unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    install_daemon(&sb, &cfg, tmp.path());
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
        "schedule = \"*/2 * * * * *\"\n{quick}\n{}",
        hook_to(&second)
    );
    write_config(&cfg, &state, &etcd, &often);
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
