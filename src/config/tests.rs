use super::*;

#[test]
fn empty_file_gives_the_documented_defaults() {
    let s = Settings::from_toml("", None).unwrap();
    assert_eq!(s.schedule, "0 0 0 * * *");
    assert!(s.run_on_start);
    assert_eq!(s.renew_before_days, 15);
    assert_eq!(s.state_dir, Path::new("/var/lib/certrenewd"));
    assert_eq!(s.backup_dir, Path::new("/var/lib/certrenewd/backup"));
    assert_eq!(s.bus, Bus::System);
    assert_eq!(s.watches.len(), 2);
    assert_eq!(s.watches[0].path, Path::new("/etc/etcd"));
    assert_eq!(s.watches[0].units, ["etcd.service"]);
    assert_eq!(s.watches[1].path, Path::new("/etc/kubernetes/pki"));
    assert_eq!(
        s.watches[1].units,
        [
            "kube-apiserver.service",
            "kube-controller-manager.service",
            "kube-scheduler.service"
        ]
    );
    // Either may be absent on a node (etcd-only, kubeadm): both are optional.
    assert!(s.watches.iter().all(|w| w.optional));
}

#[test]
fn a_watch_is_required_unless_it_says_optional() {
    let text = r#"
[[watch]]
path = "/pki/a"

[[watch]]
path = "/pki/b"
optional = true
"#;
    let s = Settings::from_toml(text, None).unwrap();
    assert!(!s.watches[0].optional && s.watches[1].optional);
    let e = Settings::from_toml("[[watch]]\npath = \"/p\"\noptional = \"yes\"\n", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("watch[1].optional") && e.contains("true or false"),
        "{e}"
    );
}

#[test]
fn every_interface_key_is_read() {
    let text = r#"
schedule = "0 30 2 * * *"
run_on_start = false
renew_before_days = 20
state_dir = "/srv/state"
bus = "user"

[[watch]]
path = "/pki/a"
units = ["a.service", "b.service"]
"#;
    let s = Settings::from_toml(text, None).unwrap();
    assert_eq!(s.schedule, "0 30 2 * * *");
    assert!(!s.run_on_start);
    assert_eq!(s.renew_before_days, 20);
    assert_eq!(s.backup_dir, Path::new("/srv/state/backup"));
    assert_eq!(s.bus, Bus::User);
    assert_eq!(
        s.watches,
        vec![Watch::new("/pki/a", &["a.service", "b.service"])]
    );
}

#[test]
fn every_mistake_is_reported_with_its_line_and_key() {
    let text = "renew_before_dayz = 3\nschedule = \"0 0 * * *\"\nbus = \"session\"\n\n[[watch]]\npath = \"relative\"\nunits = [\"etcd\"]\ncolour = 1\n";
    let err = Settings::from_toml(text, Some(Path::new("/x/c.toml"))).unwrap_err();
    let msg = err.to_string();
    let lines: Vec<_> = err
        .problems
        .iter()
        .map(|p| (p.line, p.key.as_str()))
        .collect();
    assert!(lines.contains(&(Some(1), "renew_before_dayz")), "{msg}");
    assert!(lines.contains(&(Some(2), "schedule")), "{msg}");
    assert!(lines.contains(&(Some(3), "bus")), "{msg}");
    assert!(lines.contains(&(Some(6), "watch[1].path")), "{msg}");
    assert!(lines.contains(&(Some(7), "watch[1].units")), "{msg}");
    assert!(lines.contains(&(Some(8), "watch[1].colour")), "{msg}");
    assert!(msg.contains("did you mean `renew_before_days`"), "{msg}");
    assert!(msg.contains("/x/c.toml:2:12: schedule"), "{msg}");
    assert!(msg.contains("\"etcd.service\""), "{msg}");
}

#[test]
fn wrong_types_and_ranges_are_named() {
    let err = Settings::from_toml(
        "renew_before_days = \"15\"\nrotate_keys = 1\nvalidity_days = 0\n",
        None,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.problems.len(), 3, "{msg}");
    assert!(msg.contains("expected a whole number, got string"), "{msg}");
    assert!(msg.contains("expected true or false"), "{msg}");
    assert!(msg.contains("0 is too small: the minimum is 1"), "{msg}");
}

#[test]
fn syntax_errors_have_a_line() {
    let err = Settings::from_toml("a = 1\nb = [\n", None).unwrap_err();
    assert!(err.problems[0].line.is_some());
    assert!(err.to_string().contains("not valid TOML"));
}

#[test]
fn explicit_missing_file_is_an_error_but_missing_default_is_not() {
    let err = Settings::load(Some(Path::new("/nonexistent/certrenewd.toml"))).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/certrenewd.toml"));
}

#[test]
fn the_most_specific_watch_owns_a_path() {
    let text = "[[watch]]\npath = \"/a\"\nunits = [\"x.service\"]\n[[watch]]\npath = \"/a/b\"\nunits = [\"y.service\"]\n";
    let s = Settings::from_toml(text, None).unwrap();
    assert_eq!(
        s.watch_for(Path::new("/a/b/c.crt")).unwrap().units,
        ["y.service"]
    );
    assert_eq!(
        s.watch_for(Path::new("/a/c.crt")).unwrap().units,
        ["x.service"]
    );
    assert!(s.watch_for(Path::new("/z/c.crt")).is_none());
}

#[test]
fn shipped_config_file_is_valid() {
    let text = include_str!("../../config/certrenewd.toml");
    Settings::from_toml(text, None).unwrap();
    let example = include_str!("../../config/certrenewd.example.toml");
    Settings::from_toml(example, None).unwrap();
}

#[test]
fn verify_endpoints_must_be_host_and_port() {
    let text = "[[watch]]\npath = \"/a\"\nverify_endpoints = [\"127.0.0.1:2379\", \"[::1]:2379\", \"localhost:23\"]\n";
    let s = Settings::from_toml(text, None).unwrap();
    assert_eq!(s.watches[0].verify_endpoints.len(), 3);
    let bad = "[[watch]]\npath = \"/a\"\nverify_endpoints = [\"127.0.0.1\", \"h:99999\"]\n";
    let err = Settings::from_toml(bad, None).unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
}

#[test]
fn the_kubeadm_watch_gets_kubeconfigs_and_static_pods_by_default() {
    let s = Settings::from_toml("", None).unwrap();
    let k = &s.watches[1];
    assert!(k.kubeconfigs_default && k.static_pods_default);
    assert_eq!(k.kubeconfigs[0], Path::new("/etc/kubernetes/admin.conf"));
    assert_eq!(k.kubeconfigs.len(), 4);
    assert_eq!(
        k.static_pods,
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler"
        ]
    );
    assert!(s.watches[0].kubeconfigs.is_empty() && s.watches[0].static_pods.is_empty());
    assert_eq!(s.manifests_dir, Path::new("/etc/kubernetes/manifests"));
    assert_eq!(s.static_pod_wait, std::time::Duration::from_secs(20));
    // The same directory named in a config file gets the same defaults.
    let s = Settings::from_toml(
        "[[watch]]\npath = \"/etc/kubernetes/pki\"\nunits = [\"kubelet.service\"]\n",
        None,
    )
    .unwrap();
    assert_eq!(s.watches[0].kubeconfigs.len(), 4);
    assert_eq!(
        s.watch_for(Path::new("/etc/kubernetes/admin.conf"))
            .unwrap()
            .path,
        Path::new("/etc/kubernetes/pki")
    );
}

#[test]
fn kubeconfigs_and_static_pods_are_read_and_checked() {
    let text = r#"
manifests_dir = "/srv/manifests"
static_pod_wait_secs = 3

[[watch]]
path = "/etc/kubernetes/pki"
kubeconfigs = []
static_pods = ["kube-apiserver", "etcd.yaml"]

[[watch]]
path = "/srv/pki"
kubeconfigs = ["/srv/admin.conf"]
"#;
    let s = Settings::from_toml(text, None).unwrap();
    assert!(s.watches[0].kubeconfigs.is_empty() && !s.watches[0].kubeconfigs_default);
    assert_eq!(s.watches[0].static_pods, ["kube-apiserver", "etcd.yaml"]);
    assert!(!s.watches[0].static_pods_default);
    assert_eq!(s.watches[1].kubeconfigs, [Path::new("/srv/admin.conf")]);
    assert!(s.watches[1].static_pods.is_empty());
    assert_eq!(s.manifests_dir, Path::new("/srv/manifests"));
    assert_eq!(s.static_pod_wait, std::time::Duration::from_secs(3));
    assert_eq!(
        s.watch_for(Path::new("/srv/admin.conf")).unwrap().path,
        Path::new("/srv/pki")
    );
    assert_eq!(
        Watch::manifest_path(&s.manifests_dir, "etcd.yaml"),
        Path::new("/srv/manifests/etcd.yaml")
    );
    assert_eq!(
        Watch::manifest_path(&s.manifests_dir, "kube-apiserver"),
        Path::new("/srv/manifests/kube-apiserver.yaml")
    );

    let bad = r#"
manifests_dir = "manifests"
static_pod_wait_secs = 0
[[watch]]
path = "/a"
kubeconfigs = ["admin.conf", "/a/x.conf"]
static_pods = ["../etc/passwd", ".hidden"]
[[watch]]
path = "/b"
kubeconfigs = ["/a/x.conf"]
"#;
    let err = Settings::from_toml(bad, None).unwrap_err();
    let keys: Vec<&str> = err.problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "manifests_dir",
            "static_pod_wait_secs",
            "watch[1].kubeconfigs",
            "watch[1].static_pods",
            "watch[1].static_pods",
            "watch[2].kubeconfigs"
        ],
        "{err}"
    );
}

#[test]
fn an_explicit_kubeconfig_leaves_the_default_list() {
    let text = "[[watch]]\npath = \"/etc/kubernetes/pki\"\n[[watch]]\npath = \"/x\"\nkubeconfigs = [\"/etc/kubernetes/admin.conf\"]\n";
    let s = Settings::from_toml(text, None).unwrap();
    assert_eq!(s.watches[0].kubeconfigs.len(), 3);
    assert_eq!(
        s.watch_for(Path::new("/etc/kubernetes/admin.conf"))
            .unwrap()
            .path,
        Path::new("/x")
    );
}

#[test]
fn coordination_is_auto_by_default_and_every_key_is_checked() {
    let s = Settings::from_toml("", None).unwrap();
    assert_eq!(s.coordination, Coordination::default());
    assert_eq!(s.coordination.enabled, Enabled::Auto);
    assert_eq!(s.coordination.endpoints, ["https://127.0.0.1:2379"]);
    let text = r#"
[coordination]
enabled = true
endpoints = ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
member_name = "controller-1"
cert = "/etc/etcd/kubernetes.pem"
key = "/etc/etcd/kubernetes-key.pem"
lease_ttl_secs = 10
"#;
    let c = Settings::from_toml(text, None).unwrap().coordination;
    assert_eq!(c.enabled, Enabled::On);
    assert_eq!(c.endpoints.len(), 2);
    assert_eq!(c.member_name.as_deref(), Some("controller-1"));
    assert_eq!(c.lease_ttl, Duration::from_secs(10));
    let off = Settings::from_toml("[coordination]\nenabled = false\n", None).unwrap();
    assert_eq!(off.coordination.enabled, Enabled::Off);

    let bad = r#"
[coordination]
enabled = "yes"
endpoints = ["10.0.0.1:2379"]
cert = "/etc/etcd/kubernetes.pem"
lock_prefix = "certrenewd/"
lease_ttl_secs = 1
lock_tiemout_secs = 5
"#;
    let e = Settings::from_toml(bad, None).unwrap_err().to_string();
    for want in [
        ":3:11: coordination.enabled: expected true, false or \"auto\"",
        ":4:13: coordination.endpoints: \"10.0.0.1:2379\" is not an etcd client URL: use https://HOST:PORT",
        ":2:1: coordination.cert: `cert` and `key` go together",
        ":6:15: coordination.lock_prefix: \"certrenewd/\": an etcd key prefix starting with /",
        ":7:18: coordination.lease_ttl_secs: 1 is too small: the minimum is 5",
        ":8:1: coordination.lock_tiemout_secs: unknown key (did you mean `lock_timeout_secs`?)",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
}
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

#[test]
fn randomized_delay_defaults_to_half_an_hour_and_is_bounded_by_a_day() {
    use std::time::Duration;
    assert_eq!(
        Settings::defaults().randomized_delay,
        Duration::from_secs(1800)
    );
    let s = Settings::from_toml("randomized_delay_secs = 1800\n", None).unwrap();
    assert_eq!(s.randomized_delay, Duration::from_secs(1800));
    let s = Settings::from_toml("randomized_delay_secs = 0\n", None).unwrap();
    assert_eq!(s.randomized_delay, Duration::ZERO);
    let err = Settings::from_toml("randomized_delay_secs = 86401\n", None).unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems[0].key, "randomized_delay_secs", "{text}");
    assert!(text.contains("86401") && text.contains("86400"), "{text}");
    let err = Settings::from_toml("randomized_delay_secs = \"1h\"\n", None).unwrap_err();
    assert_eq!(err.problems[0].key, "randomized_delay_secs", "{err}");
}
