//! The D-Bus connection to systemd is made again when it fails: a running
//! daemon whose bus daemon restarts between two passes, and a `failpoints` build whose
//! D-Bus call returns an error, once and then every time.
//!
//! Each test starts its own sandbox (a real `systemd --user`, its D-Bus and journald).

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::e2e::{
    DAEMON, SLEEPER, Starlingx, alarms_json, daemon_messages, install_daemon, main_pid, show,
    wait_for, wait_status,
};
use common::sandbox::Sandbox;

const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// Restarts `dbus.service` (the bus daemon of the sandbox's user manager) and waits until
/// systemd is on the new bus.
fn restart_bus_daemon(sb: &Sandbox) {
    let before = main_pid(sb, "dbus.service");
    assert_ne!(before, 0, "dbus.service is running");
    sb.systemctl(["restart", "dbus.service"])
        .expect("restarting dbus.service");
    wait_for("systemd on the new bus", PASS_TIMEOUT, || {
        let pid = main_pid(sb, "dbus.service");
        let on_bus = sb.exec_ok("busctl", ["--user", "status", "org.freedesktop.systemd1"]);
        match (pid != before && pid != 0, on_bus) {
            (true, Ok(_)) => Ok(()),
            (moved, on_bus) => Err(format!("dbus.service moved: {moved}, {on_bus:?}")),
        }
    });
}

/// The StarlingX tree's /etc/etcd (3 certificates, etcd-server due, etcd-client expired),
/// watched with `etcd.service`, a stand-in started here.
struct Setup {
    sb: Sandbox,
    t: Starlingx,
}

impl Setup {
    fn new(sb: Sandbox) -> Setup {
        let t = Starlingx::new();
        sb.install_unit("etcd.service", SLEEPER).unwrap();
        sb.systemctl(["start", "etcd.service"]).unwrap();
        Setup { sb, t }
    }

    /// Writes the config with `extra` top-level lines.
    fn write_config(&self, extra: &str) {
        self.t.write_config(extra, &[self.t.etcd_watch()]);
    }

    fn etcd_pid(&self) -> u32 {
        main_pid(&self.sb, "etcd.service")
    }
}

/// A daemon restarts etcd.service in its pass at start; the bus daemon restarts; a
/// certificate is due again and a cron pass comes: the daemon finds its connection gone,
/// connects again, restarts etcd.service and the pass succeeds, in the same process.
#[test]
fn the_daemon_connects_again_after_the_bus_daemon_restarted() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let s = Setup::new(sb);
    let server = s.t.etcd.join("etcd-server.crt");
    let due_server = fs::read(&server).expect("reading etcd-server.crt");
    let quick = "restart_timeout_secs = 10\nrestart_settle_secs = 1";
    s.write_config(&format!("schedule = \"0 0 0 1 1 *\"\n{quick}"));
    install_daemon(&s.sb, &s.t.cfg, s.t.tmp.path());
    let etcd_pid = s.etcd_pid();
    s.sb.systemctl(["start", DAEMON])
        .expect("starting the daemon");
    wait_status(
        &s.sb,
        "last pass: ok (3 certificates, 2 due, 2 renewed, 0 failed, 1 unit restarted, 0 not active)",
        PASS_TIMEOUT,
    );
    let daemon_pid = main_pid(&s.sb, DAEMON);
    let etcd_pid2 = s.etcd_pid();
    assert_ne!(etcd_pid2, etcd_pid, "the first pass restarted etcd.service");

    restart_bus_daemon(&s.sb);
    // etcd-server is due again (its old certificate, which its unchanged key still
    // matches), and a reload makes the passes come every 2 s.
    fs::write(&server, &due_server).expect("putting the due etcd-server.crt back");
    s.write_config(&format!(
        "schedule = \"*/2 * * * * *\"\nrandomized_delay_secs = 0\n{quick}"
    ));
    s.sb.systemctl(["reload", DAEMON])
        .expect("reloading the daemon");
    let st = wait_status(
        &s.sb,
        "last pass: ok (3 certificates, 1 due, 1 renewed, 0 failed, 1 unit restarted, 0 not active)",
        PASS_TIMEOUT,
    );
    assert!(st.starts_with("3 certificates watched, 0 due"), "{st}");
    assert_ne!(s.etcd_pid(), etcd_pid2, "etcd.service restarted again");
    assert_eq!(main_pid(&s.sb, DAEMON), daemon_pid, "the same daemon");
    let log = daemon_messages(&s.sb);
    let again: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("connecting again and trying once more"))
        .collect();
    assert_eq!(again.len(), 1, "one reconnection: {log:#?}");
    assert!(
        again[0].starts_with("the D-Bus connection to systemd failed (loading unit etcd.service: "),
        "{}",
        again[0]
    );
}

/// `certrenewd renew` of the failpoints build with `CERTRENEWD_FAILPOINT=spec`.
fn renew_with_failing_dbus(s: &Setup, spec: &str) -> Output {
    let bin = common::failpoints::binary();
    s.sb.exec(
        "env",
        [
            format!("CERTRENEWD_FAILPOINT={spec}").as_str(),
            &bin.display().to_string(),
            "--config",
            &s.t.cfg.display().to_string(),
            "renew",
        ],
    )
}

fn hits(o: &Output) -> usize {
    String::from_utf8_lossy(&o.stderr)
        .matches("failpoint dbus-call hit: injecting an error")
        .count()
}

fn owed_units(state: &Path) -> Vec<String> {
    let Ok(bytes) = fs::read(state.join("restarts.json")) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("restarts.json is JSON");
    v["units"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(str::to_string))
        .collect()
}

/// A D-Bus call that keeps failing: the restart is tried once more on a new connection,
/// then reported (exit 1, NOT ACTIVE with the error, 250.003, the restart still owed). At
/// the next pass the call fails once: the new connection restarts the unit, the alarm clears.
#[test]
fn a_failing_dbus_call_is_tried_once_more_then_reported() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let s = Setup::new(sb);
    // Without roll-back, so that exactly one restart is attempted per pass.
    s.write_config(
        "restart_timeout_secs = 10\nrestart_settle_secs = 1\nrollback_on_failure = false",
    );
    let etcd_pid = s.etcd_pid();

    let o = renew_with_failing_dbus(&s, "dbus-call:error");
    let out = show(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(hits(&o), 2, "the call and one retry: {out}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("NOT ACTIVE    etcd.service: "))
        .unwrap_or_else(|| panic!("no NOT ACTIVE line: {out}"));
    assert!(
        line.starts_with(
            "NOT ACTIVE    etcd.service: loading unit etcd.service: I/O error: injected error (failpoint dbus-call)"
        ) && line.contains(
            "(on a new connection, after: loading unit etcd.service: I/O error: injected error (failpoint dbus-call)"
        ),
        "{line}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("connecting again and trying once more"),
        "{out}"
    );
    assert_eq!(s.etcd_pid(), etcd_pid, "etcd.service was not restarted");
    assert_eq!(
        owed_units(&s.t.state),
        ["etcd.service"],
        "the restart is owed"
    );
    let alarms = alarms_json(&s.t.cfg)["alarms"].clone();
    let not_updated = alarms
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["id"] == "250.003")
        .unwrap_or_else(|| panic!("250.003 not active: {alarms}"));
    let reason = not_updated["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("etcd.service") && reason.contains("failpoint dbus-call"),
        "{not_updated}"
    );

    // The next pass: the first call fails, the one on the new connection works.
    let o = renew_with_failing_dbus(&s, "dbus-call:error@1");
    let out = show(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(hits(&o), 1, "{out}");
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.starts_with("restarted     etcd.service: restarted; active (running)")),
        "{out}"
    );
    assert_ne!(s.etcd_pid(), etcd_pid, "etcd.service restarted");
    assert!(owed_units(&s.t.state).is_empty(), "nothing owed");
    let alarms = alarms_json(&s.t.cfg)["alarms"].clone();
    assert!(
        !alarms
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["id"] == "250.003"),
        "250.003 cleared: {alarms}"
    );
}

/// A stand-in etcd.service that notes each of its starts in `starts`.
fn counting_unit(starts: &Path) -> String {
    format!(
        "[Unit]\nDescription=certrenewd test stand-in counting its starts\n\n[Service]\nExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/sleep infinity\n",
        starts.display()
    )
}

fn starts(file: &Path) -> usize {
    fs::read_to_string(file).unwrap_or_default().lines().count()
}

/// The connection breaks after the restart job was queued: the job runs on, so the new
/// connection only watches the unit come back; it is restarted once, never twice without
/// the waits and checks that follow a restart (etcd's member would go down again).
#[test]
fn a_connection_lost_after_the_restart_job_was_queued_restarts_the_unit_once() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let s = Setup::new(sb);
    let counted = s.sb.dir().join("etcd-starts");
    s.sb.install_unit("etcd.service", &counting_unit(&counted))
        .unwrap();
    s.sb.systemctl(["restart", "etcd.service"]).unwrap();
    s.write_config(
        "restart_timeout_secs = 10\nrestart_settle_secs = 1\nrollback_on_failure = false",
    );
    let (etcd_pid, before) = (s.etcd_pid(), starts(&counted));
    assert_eq!(before, 1, "the stand-in counts its starts");
    let o = renew_with_failing_dbus(&s, "dbus-after-job:error@1");
    let out = show(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("failpoint dbus-after-job hit"),
        "the failpoint was not reached: {out}"
    );
    assert!(
        stderr.contains("connecting again and watching the restart already queued"),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_ne!(s.etcd_pid(), etcd_pid, "etcd.service restarted");
    let started = starts(&counted) - before;
    println!("etcd.service started {started} time(s) by the pass");
    assert_eq!(started, 1, "etcd.service restarted more than once: {out}");
    assert!(owed_units(&s.t.state).is_empty(), "nothing owed");
}

/// A restart job leaves its unit inactive (dead) between its stop and its start; here the
/// start waits two seconds for a unit ordered before it. A restart watched after the
/// connection broke waits for that job to end instead of taking the pause for the end.
#[test]
fn a_restart_watched_after_the_connection_broke_waits_out_the_pause_between_stop_and_start() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let s = Setup::new(sb);
    let counted = s.sb.dir().join("etcd-starts");
    s.sb.install_unit(
        "certrenewd-slow-dependency.service",
        "[Service]\nType=oneshot\nExecStart=/bin/sleep 2\n",
    )
    .unwrap();
    let unit = counting_unit(&counted).replace(
        "[Service]",
        "Wants=certrenewd-slow-dependency.service\nAfter=certrenewd-slow-dependency.service\n\n[Service]",
    );
    s.sb.install_unit("etcd.service", &unit).unwrap();
    s.sb.systemctl(["restart", "etcd.service"]).unwrap();
    s.write_config(
        "restart_timeout_secs = 10\nrestart_settle_secs = 1\nrollback_on_failure = false",
    );
    let (etcd_pid, before) = (s.etcd_pid(), starts(&counted));
    let o = renew_with_failing_dbus(&s, "dbus-after-job:error@1");
    let out = show(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("connecting again and watching the restart already queued"),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_ne!(s.etcd_pid(), etcd_pid, "etcd.service restarted");
    assert_eq!(starts(&counted) - before, 1, "restarted once: {out}");
}

/// No D-Bus to reach (the bus address leads nowhere): no restart was tried, so the renewed
/// certificate stays (no roll-back, no back-off), the restart is owed, and 250.003 says the
/// bus could not be reached. With the bus back, the next pass restarts the unit and clears it.
#[test]
fn with_no_bus_to_reach_nothing_is_rolled_back_and_the_restart_is_owed() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let s = Setup::new(sb);
    s.write_config("restart_timeout_secs = 10\nrestart_settle_secs = 1");
    let server = s.t.etcd.join("etcd-server.crt");
    let due = fs::read(&server).expect("etcd-server.crt");
    let etcd_pid = s.etcd_pid();
    let cfg = s.t.cfg.display().to_string();
    let o = s.sb.exec(
        "env",
        [
            "DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/certrenewd-test/bus",
            env!("CARGO_BIN_EXE_certrenewd"),
            "--config",
            &cfg,
            "renew",
        ],
    );
    let out = show(&o);
    println!("{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_ne!(
        fs::read(&server).unwrap(),
        due,
        "the renewed certificate stays: {out}"
    );
    assert_eq!(s.etcd_pid(), etcd_pid, "nothing was restarted");
    assert_eq!(owed_units(&s.t.state), ["etcd.service"], "{out}");
    assert!(
        !s.t.state.join("backoff.json").exists(),
        "no back-off: {out}"
    );
    let alarms = alarms_json(&s.t.cfg)["alarms"].clone();
    let reason = alarms
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["id"] == "250.003")
        .and_then(|a| a["reason"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("250.003 not active: {alarms}"));
    assert!(
        reason.contains("cannot reach systemd over D-Bus"),
        "{reason}"
    );
    assert!(reason.contains("nothing was restarted"), "{reason}");

    // The bus is back: the restart owed is done, the alarm cleared.
    let o = common::e2e::certrenewd_in(&s.sb, &s.t.cfg, &["renew"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_ne!(s.etcd_pid(), etcd_pid, "etcd.service restarted");
    assert!(owed_units(&s.t.state).is_empty(), "nothing owed");
    let alarms = alarms_json(&s.t.cfg)["alarms"].clone();
    assert!(
        !alarms
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["id"] == "250.003"),
        "250.003 cleared: {alarms}"
    );
}
