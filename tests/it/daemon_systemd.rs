//! `certrenewd run` as a real Type=notify unit under a real systemd user manager.
//!
//! The unit is the shipped `systemd/certrenewd.service`, adapted only where the sandbox or the
//! temp tree requires it (see `common::e2e::daemon_unit`): ExecStart=, WatchdogSec=2s,
//! ReadWritePaths= naming the temp tree, PrivateTmp= dropped. The daemon watches a StarlingX
//! tree made by `tests/fixtures/mkpki.sh` (openssl) and restarts stand-in units
//! (`/bin/sleep infinity`) over the sandbox's D-Bus; alarms go to the sandbox's journald.
//!
//! Each test starts its own sandbox; they skip (with a message) only when this machine cannot
//! host one (not root, no mount namespaces).

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use certrenewd::alarms::message_ids;
use common::e2e::{
    DAEMON, SLEEPER, Starlingx, WATCHDOG, alarm_entries, certrenewd_in, config_text,
    daemon_messages, field, flag_unit, hostname, install_daemon, main_pid, openssl_verifies, prop,
    serial, status_text, valid_for_days, wait_for, wait_status,
};
use common::sandbox::Sandbox;

const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// Several properties of one unit, read in one `systemctl show` (one consistent snapshot).
fn props(sb: &Sandbox, unit: &str, names: &[&str]) -> BTreeMap<String, String> {
    let mut args = vec!["show".to_string(), unit.to_string()];
    for n in names {
        args.push("-p".into());
        args.push((*n).into());
    }
    let out = sb.systemctl(&args).expect("systemctl show");
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Waits until the daemon has logged `needle` at least `n` times; returns all its messages.
fn wait_logged(sb: &Sandbox, needle: &str, n: usize) -> Vec<String> {
    wait_for(
        &format!("{n}x {needle:?} in the daemon's journal"),
        PASS_TIMEOUT,
        || {
            let m = daemon_messages(sb);
            if m.iter().filter(|l| l.contains(needle)).count() >= n {
                Ok(m)
            } else {
                Err(m)
            }
        },
    )
}

/// Waits until the daemon has finished `n` passes (well or not); returns all its messages.
fn wait_passes(sb: &Sandbox, n: usize) -> Vec<String> {
    wait_for(&format!("{n} finished passes"), PASS_TIMEOUT, || {
        let m = daemon_messages(sb);
        let done = m
            .iter()
            .filter(|l| l.starts_with("pass failed") || l.starts_with("pass succeeded"))
            .count();
        if done >= n { Ok(m) } else { Err(m) }
    })
}

#[test]
fn daemon_unit_start_renew_watchdog_reload_stop() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let (ca, server, client) = (
        t.etcd.join("ca.crt"),
        t.etcd.join("etcd-server.crt"),
        t.etcd.join("etcd-client.crt"),
    );
    let apiserver_etcd = t.k8s.join("apiserver-etcd-client.crt");
    // A yearly schedule: the only pass before the reloads is the one at start.
    t.write_config(
        "schedule = \"0 0 0 1 1 *\"\nrestart_timeout_secs = 10",
        &[t.etcd_watch()],
    );
    assert!(!valid_for_days(&server, 30), "fixture: etcd-server is due");
    assert!(!valid_for_days(&client, 0), "fixture: etcd-client expired");
    let serials = (serial(&server), serial(&client), serial(&apiserver_etcd));

    for u in ["etcd.service", "kubelet.service"] {
        sb.install_unit(u, SLEEPER).unwrap();
        sb.systemctl(["start", u]).unwrap();
    }
    let etcd_pid = main_pid(&sb, "etcd.service");
    let kubelet_pid = main_pid(&sb, "kubelet.service");
    install_daemon(&sb, &t.cfg, t.tmp.path());

    // `systemctl start` of a Type=notify unit returns once READY=1 arrived.
    let started = Instant::now();
    sb.systemctl(["start", DAEMON]).expect("systemctl start");
    let p = props(
        &sb,
        DAEMON,
        &["ActiveState", "SubState", "StatusText", "MainPID"],
    );
    assert_eq!(p["ActiveState"], "active", "right after start: {p:?}");
    assert_eq!(p["SubState"], "running", "{p:?}");
    // READY=1 comes with the STATUS= of the first scan (or the pass after it has begun).
    assert!(
        p["StatusText"].contains("3 certificates watched, 2 due")
            || p["StatusText"].starts_with("running a pass"),
        "StatusText right after start: {p:?}"
    );
    let daemon_pid: u32 = p["MainPID"].parse().unwrap();
    assert_ne!(daemon_pid, 0);

    // The pass at start renews etcd-server and etcd-client, then restarts etcd.service.
    // (Not "last pass: " alone: the status before the pass begins says "none yet".)
    let st = wait_status(&sb, "last pass: ok", PASS_TIMEOUT);
    assert!(
        st.starts_with("3 certificates watched, 0 due, 0 alarms active; last pass: ok (3 certificates, 2 due, 2 renewed, 0 failed, 1 unit restarted, 0 not active); next pass "),
        "{st}"
    );
    assert!(st.contains("-01-01 00:00:00"), "yearly schedule: {st}");
    // check reads the daemon's state: running, its PID, its last words.
    let (table, doc) = check_of(&sb, &t.cfg);
    assert_eq!(doc["daemon"]["state"], "running", "{doc:#}");
    assert_eq!(doc["daemon"]["pid"], daemon_pid, "{doc:#}");
    assert_eq!(
        doc["daemon"]["status"].as_str(),
        Some(st.as_str()),
        "{doc:#}"
    );
    assert!(
        table.contains(&format!(
            "The daemon runs (pid {daemon_pid}): 3 certificates"
        )) && table.contains("— next pass "),
        "{table}"
    );
    let log = daemon_messages(&sb);
    let ready = log.iter().position(|l| l.starts_with("started: "));
    let first_pass = log.iter().position(|l| l.starts_with("pass starting"));
    assert!(
        ready.is_some_and(|r| log[r].starts_with(
            "started: 3 certificates watched, 2 due, 0 alarms active; last pass: none yet"
        ) && first_pass.is_some_and(|p| r < p)),
        "READY=1 after the first scan, before the first pass: {log:#?}"
    );
    for c in [&server, &client] {
        assert!(openssl_verifies(&ca, c), "{} verifies", c.display());
        assert!(valid_for_days(c, 300), "{} renewed for a year", c.display());
    }
    assert_ne!(serial(&server), serials.0);
    assert_ne!(serial(&client), serials.1);
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "active");
    let etcd_pid2 = main_pid(&sb, "etcd.service");
    assert_ne!(etcd_pid2, etcd_pid, "etcd.service was restarted");
    assert_eq!(
        main_pid(&sb, "kubelet.service"),
        kubelet_pid,
        "not watched yet"
    );
    assert!(alarm_entries(&sb).is_empty(), "no alarm after a good pass");

    // Watchdog: WATCHDOG=1 keeps coming; the unit outlives 3 periods untouched.
    assert_eq!(prop(&sb, DAEMON, "WatchdogUSec"), "2s");
    let ping1 = prop(&sb, DAEMON, "WatchdogTimestampMonotonic");
    // At least 3 periods since the start, and a whole period after ping1 (on a loaded
    // machine the pass alone can outlast 3 periods: then no newer ping could be seen).
    let three = 3 * WATCHDOG + Duration::from_millis(500);
    let period = WATCHDOG + Duration::from_millis(500);
    std::thread::sleep(three.saturating_sub(started.elapsed()).max(period));
    let p = props(
        &sb,
        DAEMON,
        &[
            "ActiveState",
            "MainPID",
            "NRestarts",
            "WatchdogTimestampMonotonic",
        ],
    );
    assert_eq!(
        p["ActiveState"], "active",
        "after 3 watchdog periods: {p:?}"
    );
    assert_eq!(p["MainPID"], daemon_pid.to_string(), "{p:?}");
    assert_eq!(p["NRestarts"], "0", "{p:?}");
    assert!(
        p["WatchdogTimestampMonotonic"].parse::<u64>().unwrap() > ping1.parse::<u64>().unwrap(),
        "a newer WATCHDOG=1 arrived: {ping1} then {p:?}"
    );

    // Reload 1: a new watch and a cron every 2 s: a cron pass picks up the new watch.
    t.write_config(
        "schedule = \"*/2 * * * * *\"\nrandomized_delay_secs = 0\nrestart_timeout_secs = 10",
        &[t.etcd_watch(), t.k8s_watch()],
    );
    sb.systemctl(["reload", DAEMON]).expect("systemctl reload");
    let st = wait_status(&sb, "6 certificates watched, 0 due", PASS_TIMEOUT);
    assert!(st.contains("last pass: ok"), "{st}");
    wait_logged(&sb, "configuration reloaded", 1);
    wait_logged(&sb, "pass starting (Cron)", 1);
    assert!(openssl_verifies(&ca, &apiserver_etcd));
    assert!(valid_for_days(&apiserver_etcd, 300));
    assert_ne!(serial(&apiserver_etcd), serials.2);
    wait_for("kubelet.service restarted", PASS_TIMEOUT, || {
        let pid = main_pid(&sb, "kubelet.service");
        if pid != kubelet_pid && pid != 0 {
            Ok(())
        } else {
            Err(pid)
        }
    });
    assert_eq!(
        main_pid(&sb, DAEMON),
        daemon_pid,
        "a reload is not a restart"
    );

    // Reload 2: a changed schedule shows as the next pass time, and a dropped watch as the
    // count of certificates watched, at once (the reload scans; no pass runs until June).
    // With a splay, the delay drawn for that time is shown and logged.
    t.write_config(
        "schedule = \"0 0 0 1 6 *\"\nrestart_timeout_secs = 10\nrandomized_delay_secs = 3600",
        &[t.etcd_watch()],
    );
    sb.systemctl(["reload", DAEMON]).expect("systemctl reload");
    let st = wait_status(&sb, "-06-01 00:00:00", PASS_TIMEOUT);
    assert!(st.starts_with("3 certificates watched, 0 due"), "{st}");
    let splay = |text: &str| -> Option<u64> {
        let (_, rest) = text.split_once("-06-01 00:00:00 ")?;
        let rest = rest.split_once(" (+")?.1;
        rest.split_once(" s splay)")?.0.parse().ok()
    };
    let drawn = splay(&st).unwrap_or_else(|| panic!("no splay in STATUS=: {st}"));
    assert!(drawn <= 3600, "{st}");
    wait_logged(&sb, "configuration reloaded", 2);
    // The start already drew a splay for its next pass (the default's); this is June's.
    let log = wait_logged(&sb, "-06-01 00:00:00", 1);
    let next = log.iter().find(|l| l.contains("-06-01 00:00:00")).unwrap();
    assert!(next.starts_with("next pass at "), "{next}");
    assert_eq!(
        splay(next),
        Some(drawn),
        "log and STATUS= agree: {next} / {st}"
    );
    assert_eq!(main_pid(&sb, DAEMON), daemon_pid);

    // Reload 3: an invalid file is refused; the daemon keeps running on the old config.
    t.write_config_text(&format!(
        "{}renew_before = 3\n",
        config_text(&t.state, "schedule = \"0 0 0 1 1 *\"", &[t.etcd_watch()])
    ));
    sb.systemctl(["reload", DAEMON])
        .expect("systemctl reload (invalid config)");
    let log = wait_logged(&sb, "reload refused", 1);
    let refused = log.iter().find(|l| l.contains("reload refused")).unwrap();
    assert!(
        refused.contains(&t.cfg.display().to_string()) && refused.contains("renew_before"),
        "the error names the file and the key: {refused}"
    );
    // The READY=1 after the refused reload is back: still active, same process, same schedule.
    let p = wait_for("active after the refused reload", PASS_TIMEOUT, || {
        let p = props(&sb, DAEMON, &["ActiveState", "MainPID", "StatusText"]);
        if p["ActiveState"] == "active" {
            Ok(p)
        } else {
            Err(p)
        }
    });
    assert_eq!(p["MainPID"], daemon_pid.to_string(), "{p:?}");
    assert!(p["StatusText"].contains("-06-01 00:00:00"), "{p:?}");
    assert!(
        p["StatusText"].starts_with("3 certificates watched"),
        "{p:?}"
    );

    // Stop: SIGTERM, STOPPING=1, exit 0.
    sb.systemctl(["stop", DAEMON]).expect("systemctl stop");
    let p = props(
        &sb,
        DAEMON,
        &["ActiveState", "Result", "ExecMainCode", "ExecMainStatus"],
    );
    assert_eq!(p["ActiveState"], "inactive", "{p:?}");
    assert_eq!(p["Result"], "success", "{p:?}");
    assert_eq!(p["ExecMainStatus"], "0", "{p:?}");
    wait_logged(&sb, "stopped", 1);
    // Stopped, check says so and promises no pass (it said "next pass 00:00" regardless).
    // (The configuration left by the refused reload is invalid: the valid one again.)
    t.write_config("schedule = \"0 0 0 1 6 *\"", &[t.etcd_watch()]);
    let (table, doc) = check_of(&sb, &t.cfg);
    assert_eq!(doc["daemon"]["state"], "not_running", "{doc:#}");
    assert!(
        table.contains("The daemon is not running: no pass will run")
            && table.contains("— no pass while the daemon is not running"),
        "{table}"
    );
}

/// `certrenewd check` (the table, joined into one line per paragraph) and its JSON, run
/// inside the sandbox as an operator would.
fn check_of(sb: &Sandbox, config: &Path) -> (String, serde_json::Value) {
    let table = certrenewd_in(sb, config, &["check"]);
    let json = certrenewd_in(sb, config, &["check", "--output", "json"]);
    let doc = serde_json::from_slice(&json.stdout).expect("check's JSON");
    let text = String::from_utf8_lossy(&table.stdout).replace("\n", " ");
    (text.split_whitespace().collect::<Vec<_>>().join(" "), doc)
}

#[test]
fn daemon_pass_fails_when_a_unit_does_not_come_back() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let server = t.etcd.join("etcd-server.crt");
    let server_serial = serial(&server);
    let metrics = t.tmp.path().join("certrenewd.prom");
    t.write_config(
        &format!(
            "schedule = \"0 0 0 1 1 *\"\nrestart_timeout_secs = 5\nretry_interval_secs = 3\n\
             metrics_file = \"{}\"",
            metrics.display()
        ),
        &[t.etcd_watch()],
    );
    let server_not_after = not_after_epoch(&server);

    // etcd.service runs now, and fails to start once the flag exists (made before the renewal).
    let flag = t.tmp.path().join("etcd-broken");
    sb.install_unit("etcd.service", &flag_unit(&flag)).unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "active");
    write(&flag, "");
    install_daemon(&sb, &t.cfg, t.tmp.path());
    sb.systemctl(["start", DAEMON]).expect("systemctl start");
    let daemon_pid = main_pid(&sb, DAEMON);

    let st = wait_status(&sb, "last pass: FAILED", PASS_TIMEOUT);
    // Final states: one renewal stayed, one was rolled back (it said "2 renewed").
    assert!(
        st.contains("last pass: FAILED (3 certificates, 2 due, 1 renewed, 0 failed, 0 units restarted, 1 not active, 1 rolled back)"),
        "{st}"
    );
    // The metrics say the same: one renewal counted, and the rolled-back certificate's
    // notAfter is the old one's, in place again (it was the new one's).
    let text = fs::read_to_string(&metrics).expect("the metrics file");
    assert!(
        (text.lines())
            .any(|l| l.starts_with("certrenewd_renewals_total{node=") && l.ends_with("} 1")),
        "{text}"
    );
    let server_line = format!(
        "certrenewd_certificate_not_after_seconds{{path=\"{}\"",
        server.display()
    );
    let value = text
        .lines()
        .find(|l| l.starts_with(&server_line))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {server_line} in {text}"));
    assert_eq!(value, server_not_after.to_string(), "{text}");
    // 250.003, and the 500.200 of the certificate put back in its window.
    assert!(st.contains("2 alarms active"), "{st}");
    assert!(st.ends_with(", retry in 3s"), "{st}");
    // etcd-server.crt's renewal was rolled back: it is still due. etcd-client.crt had
    // expired: its new pair stays (a roll-back never puts an expired certificate back).
    assert!(st.starts_with("3 certificates watched, 1 due,"), "{st}");
    // rollback_on_failure (default on): the previous pair is back, the unit started again
    // (and failed again: the flag is still there).
    assert_eq!(serial(&server), server_serial, "rolled back");
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "failed");

    // 250.003 for the unit, and 500.200 for the certificate put back in its window.
    let entries = alarm_entries(&sb);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let e = (entries.iter())
        .find(|e| field(e, "ALARM_ID") == "250.003")
        .unwrap_or_else(|| panic!("no 250.003: {entries:#?}"));
    assert!(
        entries.iter().any(|x| field(x, "ALARM_ID") == "500.200"
            && field(x, "ALARM_STATE") == "set"
            && field(x, "ALARM_ENTITY").ends_with(&*server.to_string_lossy())),
        "{entries:#?}"
    );
    assert_eq!(field(e, "ALARM_STATE"), "set");
    assert_eq!(
        field(e, "MESSAGE_ID"),
        message_ids::SERVICES_NOT_UPDATED_SET
    );
    assert_eq!(field(e, "PRIORITY"), "3");
    assert_eq!(field(e, "SYSLOG_IDENTIFIER"), "certrenewd");
    assert_eq!(field(e, "ALARM_SEVERITY"), "major");
    assert_eq!(
        field(e, "ALARM_ENTITY"),
        format!("host={}", hostname()),
        "the daemon names this host (as `certrenewd renew` does)"
    );
    assert!(
        field(e, "MESSAGE").contains(
            "Kubernetes certificates have been renewed but not all services have been updated"
        ),
        "{e:#}"
    );
    let reason = field(e, "ALARM_REASON");
    assert!(
        reason.contains("etcd.service")
            && reason.contains(&server.display().to_string())
            && reason.contains("rolled back"),
        "the reason names the unit, the certificate and the rollback: {reason}"
    );

    // The retry pass (3 s later) restarts etcd.service again; still broken: still failed,
    // the alarm stays active and is not raised again.
    let log = wait_passes(&sb, 2);
    assert!(
        log.iter().any(|l| l.starts_with("pass starting (Retry)")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.starts_with("pass succeeded")),
        "a retry with the unit still broken must not succeed: {log:#?}"
    );
    assert_eq!(alarm_entries(&sb).len(), 2, "raised once, not cleared");
    assert!(status_text(&sb).contains("last pass: FAILED"));

    // Fixed: the next retry brings etcd.service back and clears the alarm, once.
    fs::remove_file(&flag).unwrap();
    let st = wait_status(&sb, "last pass: ok", PASS_TIMEOUT);
    assert!(st.contains("0 alarms active"), "{st}");
    assert!(st.starts_with("3 certificates watched, 0 due,"), "{st}");
    assert!(!st.contains("retry in"), "{st}");
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "active");
    assert_ne!(main_pid(&sb, "etcd.service"), 0);
    assert!(openssl_verifies(&t.etcd.join("ca.crt"), &server));
    assert!(valid_for_days(&server, 300), "renewed for good this time");
    let after = alarm_entries(&sb);
    assert_eq!(after.len(), 4, "each cleared once: {after:#?}");
    let c = (after[2..].iter())
        .find(|c| field(c, "ALARM_ID") == "250.003")
        .unwrap_or_else(|| panic!("250.003 not cleared: {after:#?}"));
    assert_eq!(field(c, "ALARM_STATE"), "clear");
    assert_eq!(
        field(c, "MESSAGE_ID"),
        message_ids::SERVICES_NOT_UPDATED_CLEAR
    );
    assert_eq!(field(c, "PRIORITY"), "5");
    assert_eq!(field(c, "ALARM_ENTITY"), field(e, "ALARM_ENTITY"));
    assert_eq!(main_pid(&sb, DAEMON), daemon_pid, "one daemon throughout");

    sb.systemctl(["stop", DAEMON]).expect("systemctl stop");
    let p = props(&sb, DAEMON, &["ActiveState", "Result"]);
    assert_eq!(p["ActiveState"], "inactive", "{p:?}");
    assert_eq!(p["Result"], "success", "{p:?}");
}

/// A certificate's notAfter in Unix seconds, as openssl reads it.
fn not_after_epoch(cert: &Path) -> i64 {
    let end = common::x509(cert, &["-noout", "-enddate"]);
    let out = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            end.trim().trim_start_matches("notAfter="),
            "+%s",
        ])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("epoch")
}
