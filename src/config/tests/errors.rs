//! Configuration mistakes: each reported where it is, with what is wrong and what is allowed.

use super::*;

/// The whole message for `text` read as `/etc/certrenewd/certrenewd.toml`.
fn error_of(text: &str) -> String {
    let file = Path::new("/etc/certrenewd/certrenewd.toml");
    Settings::from_toml(text, Some(file))
        .unwrap_err()
        .to_string()
}

#[test]
fn problems_come_in_file_order_with_line_and_column() {
    let text = "\
schedule = \"0 0 0 * *\"
bus = \"session\"
validity_days = 10
backup_keep = 0
[[watch]]
path = \"relative\"
units = [\"a.service\", \"etcd\"]
";
    assert_eq!(
        error_of(text),
        "\
invalid configuration: 6 problems in /etc/certrenewd/certrenewd.toml
  /etc/certrenewd/certrenewd.toml:1:12: schedule: \"0 0 0 * *\": cron needs 6 fields (seconds minutes hours day-of-month month day-of-week), got 5; e.g. \"0 0 0 * * *\" for daily at midnight
  /etc/certrenewd/certrenewd.toml:2:7: bus: \"session\" is not a bus: use \"system\" or \"user\"
  /etc/certrenewd/certrenewd.toml:3:17: validity_days: 10 days is not longer than renew_before_days (15): every renewed certificate would be due at once
  /etc/certrenewd/certrenewd.toml:4:15: backup_keep: 0 is too small: the minimum is 1
  /etc/certrenewd/certrenewd.toml:6:8: watch[1].path: \"relative\" must be an absolute path
  /etc/certrenewd/certrenewd.toml:7:23: watch[1].units: \"etcd\" needs its unit type, e.g. \"etcd.service\""
    );
}

#[test]
fn a_watchs_validity_days_is_read_and_held_to_the_window_too() {
    let text = "\
[[watch]]
path = \"/etc/etcd\"
validity_days = 90

[[watch]]
path = \"/etc/kubernetes/pki\"
validity_days = 7
";
    assert_eq!(
        error_of(text),
        "invalid configuration /etc/certrenewd/certrenewd.toml:7:17: watch[2].validity_days: 7 days is not longer than renew_before_days (15): every renewed certificate would be due at once"
    );
    let ok = text.replace("= 7", "= 400");
    let settings = Settings::from_toml(&ok, None).unwrap();
    let days: Vec<_> = settings.watches.iter().map(|w| w.validity_days).collect();
    assert_eq!(days, [Some(90), Some(400)]);
}

#[test]
fn a_number_too_large_for_any_integer_names_the_limit() {
    assert_eq!(
        error_of("renew_before_days = 99999999999999999999\n"),
        "invalid configuration /etc/certrenewd/certrenewd.toml:1:21: renew_before_days: 99999999999999999999 is too large: the limit is 3650"
    );
    assert_eq!(
        error_of("renew_before_days = 4000\n"),
        "invalid configuration /etc/certrenewd/certrenewd.toml:1:21: renew_before_days: 4000 is too large: the limit is 3650"
    );
    assert_eq!(
        error_of("lock_timeout_secs = -99999999999999999999\n"),
        "invalid configuration /etc/certrenewd/certrenewd.toml:1:21: lock_timeout_secs: -99999999999999999999 is too small: the minimum is 0"
    );
}

#[test]
fn a_schedule_error_names_each_wrong_field_and_its_range() {
    let cases = [
        (
            "0 61 25 * * *",
            "minute 61 is out of range 0-59; hour 25 is out of range 0-23",
        ),
        ("60 0 0 * * *", "second 60 is out of range 0-59"),
        ("0 0 0 32 * *", "day-of-month 32 is out of range 1-31"),
        ("0 0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 0 * 1-13 *", "month 13 is out of range 1-12"),
        ("0 0 0 * * 8", "day-of-week 8 is out of range 0-7"),
        ("0 */5,70 * * * *", "minute 70 is out of range 0-59"),
        (
            "0 0 0 * * FUN",
            "day-of-week \"FUN\" is not valid: use 0-7 or SUN-SAT (0 and 7: Sunday; 5L: the last Friday; 1#2: the second Monday), *, a range a-b, a list a,b or a step */n",
        ),
    ];
    for (expr, why) in cases {
        assert_eq!(
            error_of(&format!("schedule = \"{expr}\"\n")),
            format!(
                "invalid configuration /etc/certrenewd/certrenewd.toml:1:12: schedule: \"{expr}\": {why}"
            )
        );
    }
}

#[test]
fn a_schedule_that_never_fires_is_refused() {
    assert_eq!(
        error_of("schedule = \"0 0 0 31 2 *\"\n"),
        "invalid configuration /etc/certrenewd/certrenewd.toml:1:12: schedule: \"0 0 0 31 2 *\": never fires: no date matches day-of-month 31 and month 2 (cron finds no such time in any year ahead)"
    );
    assert_eq!(
        error_of("schedule = \"0 0 0 30 FEB MON\"\n"),
        "invalid configuration /etc/certrenewd/certrenewd.toml:1:12: schedule: \"0 0 0 30 FEB MON\": never fires: no date matches day-of-month 30, month FEB and day-of-week MON (cron finds no such time in any year ahead)"
    );
    // Rare is not never: the 29th of February, and a Friday the 13th.
    for expr in ["0 0 0 29 2 *", "0 0 0 13 * FRI"] {
        let s = Settings::from_toml(&format!("schedule = \"{expr}\"\n"), None).unwrap();
        assert_eq!(s.schedule, expr);
    }
}

#[test]
fn a_path_watched_twice_is_reported_where_it_is_named_again() {
    let text = "\
[[watch]]
path = \"/pki/a\"
kubeconfigs = [\"/pki/admin.conf\"]

[[watch]]
path = \"/pki/b\"

[[watch]]
units = [\"x.service\"]
path = \"/pki/a\"
kubeconfigs = [\"/pki/other.conf\", \"/pki/admin.conf\"]
";
    assert_eq!(
        error_of(text),
        "\
invalid configuration: 2 problems in /etc/certrenewd/certrenewd.toml
  /etc/certrenewd/certrenewd.toml:10:8: watch[3].path: /pki/a is watched twice: already by watch[1] at line 2
  /etc/certrenewd/certrenewd.toml:11:35: watch[3].kubeconfigs: /pki/admin.conf is listed twice: already at line 3"
    );
}
