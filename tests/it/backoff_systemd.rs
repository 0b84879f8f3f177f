//! The back-off after a roll-back on a real systemd user manager: a unit that never comes
//! back on the renewed certificate (it starts only on the certificate it had) is rolled
//! back at every attempt; over a simulated day of passes every 20 minutes (each a real
//! `certrenewd renew` under libfaketime, the clock moved forward, the back-off ledger in
//! `state_dir` carried from one process to the next as across daemon restarts), the unit is
//! started a bounded number of times, and 250.003 says how many attempts and when the next.
//!
//! The certificate is due as in life: issued 355 days ago for 365 days (faketime, openssl).

use crate::common;

use std::fs;
use std::process::Command;

use certrenewd::plan::backoff::MAX_ATTEMPTS_PER_DAY;
use common::sandbox::Sandbox;
use time::OffsetDateTime;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

fn fmt(t: OffsetDateTime, f: &[time::format_description::FormatItem<'_>]) -> String {
    t.format(f).expect("format")
}

#[test]
fn a_unit_that_never_comes_back_is_restarted_a_bounded_number_of_times_a_day() {
    // Under CI a machine that cannot host the sandbox fails here.
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    let ext =
        "subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n";
    common::due_ec_leaf(d, "etcd", "etcd-ca", "etcd-server", ext);
    fs::copy(d.join("etcd/server.crt"), d.join("accepted.crt")).expect("copy");
    let cert = d.join("etcd/server.crt");
    let old_cert = fs::read(&cert).expect("cert");
    let starts = d.join("starts");
    sb.install_unit(
        "picky.service",
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'echo start >> {}; cmp -s {} {} && exec sleep infinity; echo refusing the new certificate; exit 3'\n",
            starts.display(),
            cert.display(),
            d.join("accepted.crt").display()
        ),
    )
    .expect("unit");
    sb.systemctl(["start", "picky.service"]).expect("start");
    let config = d.join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{}\"\nrestart_timeout_secs = 5\n\n[[watch]]\npath = \"{}\"\nunits = [\"picky.service\"]\nstatic_pods = []\nkubeconfigs = []\n",
            d.join("state").display(),
            d.join("etcd").display()
        ),
    )
    .expect("config");

    // A pass every 20 minutes over one day (72 passes), each at its faked wall clock.
    let t0 = OffsetDateTime::now_utc().replace_second(0).expect("t0");
    let stamp = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let mut attempts = Vec::new();
    for k in 0..72i64 {
        let at = t0 + time::Duration::minutes(20 * k);
        let out = sb.exec(
            "env",
            [
                "TZ=UTC",
                "FAKETIME_DONT_FAKE_MONOTONIC=1",
                &format!("LD_PRELOAD={}", common::libfaketime()),
                &format!("FAKETIME=@{}", fmt(at, stamp)),
                BIN,
                "--config",
                config.to_str().expect("utf-8"),
                "renew",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("server.crt"),
            "pass {k}: no report\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "pass {k}: the certificate is still due\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if stdout.contains("NOT ACTIVE    picky.service") {
            attempts.push(k * 20);
        } else {
            assert!(
                stdout.contains("renewal held back"),
                "pass {k}: neither an attempt nor held back:\n{stdout}"
            );
        }
    }
    eprintln!("attempts at minutes {attempts:?}");
    let restarts = fs::read_to_string(&starts).expect("starts").lines().count() - 1;
    eprintln!("picky.service started {restarts} times after the first start");
    // Each attempt restarts the unit (it fails) and starts it again after the roll-back.
    assert_eq!(attempts, [0, 60, 180, 420], "the back-off: 1 h, 2 h, 4 h");
    assert_eq!(restarts, 2 * attempts.len());
    assert!(
        restarts <= 2 * MAX_ATTEMPTS_PER_DAY,
        "{restarts} restarts in a day"
    );
    assert_eq!(
        fs::read(&cert).expect("cert"),
        old_cert,
        "the old pair is in place"
    );
    assert_eq!(
        sb.unit_property("picky.service", "ActiveState")
            .expect("state"),
        "active"
    );

    // 250.003 says how many attempts and when the next: a day after the first.
    let alarms = Command::new(BIN)
        .args([
            "--config",
            config.to_str().expect("utf-8"),
            "alarms",
            "--output",
            "json",
        ])
        .output()
        .expect("alarms");
    let json: serde_json::Value = serde_json::from_slice(&alarms.stdout).expect("json");
    let minute = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
    let next = fmt(t0 + time::Duration::days(1), minute);
    let reason = json["alarms"]
        .as_array()
        .expect("alarms")
        .iter()
        .find(|a| a["id"] == "250.003")
        .and_then(|a| a["reason"].as_str())
        .unwrap_or_else(|| panic!("no 250.003: {json}"))
        .to_owned();
    eprintln!("250.003: {reason}");
    assert!(
        reason.contains("4 attempts were rolled back")
            && reason.contains(&format!("next attempt not before {next}"))
            && reason.contains(&format!("at most {MAX_ATTEMPTS_PER_DAY} attempts a day")),
        "{reason}"
    );
    assert!(
        d.join("state/backoff.json").exists(),
        "the ledger is in state_dir"
    );
}
