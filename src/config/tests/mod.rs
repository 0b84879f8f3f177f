use super::*;

mod errors;

#[test]
fn empty_file_gives_the_documented_defaults() {
    let s = Settings::from_toml("", None).unwrap();
    assert_eq!(s.schedule, "0 0 0 * * *");
    assert!(s.run_on_start);
    assert_eq!(s.renew_before_days, 15);
    assert_eq!(s.state_dir, Path::new("/var/lib/certrenewd"));
    assert_eq!(s.backup_dir, Path::new("/var/lib/certrenewd/backup"));
    assert_eq!(s.bus, Bus::System);
    assert_eq!(s.watches.len(), 3);
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
    assert_eq!(s.watches[2].path, Path::new("/var/lib/kubelet/pki"));
    assert_eq!(s.watches[2].units, ["kubelet.service"]);
    // Any may be absent on a node (etcd-only, kubeadm, no kubelet): all are optional.
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
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/certrenewd.toml"
    ));
    Settings::from_toml(text, None).unwrap();
    let example = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/certrenewd.example.toml"
    ));
    Settings::from_toml(example, None).unwrap();
}

#[test]
fn post_renew_command_is_an_argv_with_an_absolute_program() {
    let text = "[[watch]]\npath = \"/a\"\npost_renew_command = [\"/usr/sbin/reload\", \"-q\"]\n[[watch]]\npath = \"/b\"\n";
    let s = Settings::from_toml(text, None).unwrap();
    let argv = s.watches[0].post_renew_command.as_deref();
    assert_eq!(
        argv,
        Some(&["/usr/sbin/reload".to_string(), "-q".to_string()][..])
    );
    assert_eq!(s.watches[1].post_renew_command, None);
    for bad in ["[\"reload\"]", "[]", "\"/usr/sbin/reload -q\""] {
        let text = format!("[[watch]]\npath = \"/a\"\npost_renew_command = {bad}\n");
        let err = Settings::from_toml(&text, None).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{bad}: {err}");
        assert!(
            err.to_string().contains("watch[1].post_renew_command"),
            "{bad}: {err}"
        );
    }
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
fn on_renew_reloads_unless_a_watch_says_restart() {
    use crate::config::OnRenew;
    let s = Settings::from_toml("[[watch]]\npath = \"/a\"\n", None).unwrap();
    assert_eq!(s.watches[0].on_renew, OnRenew::Reload);
    let off = "[[watch]]\npath = \"/a\"\non_renew = \"restart\"\n";
    assert_eq!(
        Settings::from_toml(off, None).unwrap().watches[0].on_renew,
        OnRenew::Restart
    );
    let bad = "[[watch]]\npath = \"/a\"\non_renew = \"reboot\"\n";
    let err = Settings::from_toml(bad, None).unwrap_err().to_string();
    assert!(
        err.contains("watch[1].on_renew") && err.contains("\"reboot\""),
        "{err}"
    );
}

#[test]
fn wait_serving_is_on_unless_a_watch_says_false() {
    let s = Settings::from_toml("[[watch]]\npath = \"/a\"\n", None).unwrap();
    assert!(s.watches[0].wait_serving);
    assert!(
        Settings::from_toml("", None)
            .unwrap()
            .watches
            .iter()
            .all(|w| w.wait_serving)
    );
    let off = "[[watch]]\npath = \"/a\"\nwait_serving = false\n";
    assert!(!Settings::from_toml(off, None).unwrap().watches[0].wait_serving);
    let bad = "[[watch]]\npath = \"/a\"\nwait_serving = \"no\"\n";
    let err = Settings::from_toml(bad, None).unwrap_err();
    assert!(err.to_string().contains("watch[1].wait_serving"), "{err}");
}

#[test]
fn a_watch_says_what_its_units_and_static_pods_run_where_it_cannot_be_read() {
    let text = "[[watch]]\npath = \"/a\"\nunits = [\"kv-store.service\"]\n\
                static_pods = [\"api\"]\n\
                components = { \"kv-store.service\" = \"etcd\", \"api\" = \"kube-apiserver\" }\n";
    let w = &Settings::from_toml(text, None).unwrap().watches[0];
    assert_eq!(
        w.components,
        [
            ("api".to_string(), Program::ApiServer),
            ("kv-store.service".to_string(), Program::Etcd)
        ]
    );
    let bad = "[[watch]]\npath = \"/a\"\nunits = [\"kv-store.service\"]\n\
               components = { \"kv-store.service\" = \"etc\", \"other.service\" = \"etcd\" }\n";
    let e = Settings::from_toml(bad, None).unwrap_err().to_string();
    for want in [
        "watch[1].components: \"kv-store.service\": expected \"etcd\" or \"kube-apiserver\"",
        "watch[1].components: \"other.service\" is neither a unit nor a static pod of this watch",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
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
    // Etcd's manifest is read where the restarts move it: the one manifest directory.
    assert_eq!(
        s.coordination,
        Coordination {
            manifests: Some("/etc/kubernetes/manifests".into()),
            ..Coordination::default()
        }
    );
    assert_eq!(s.coordination.enabled, Enabled::Auto);
    assert_eq!(s.coordination.endpoints, ["https://127.0.0.1:2379"]);
    let elsewhere = "manifests_dir = \"/srv/manifests\"\n[coordination]\nenabled = true\n";
    let c = Settings::from_toml(elsewhere, None).unwrap().coordination;
    assert_eq!(c.manifests.as_deref(), Some(Path::new("/srv/manifests")));
    let text = r#"
[coordination]
enabled = true
endpoints = ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
member_name = "controller-1"
external_members = ["etcd-ext-1", "etcd-ext-2"]
cert = "/etc/etcd/kubernetes.pem"
key = "/etc/etcd/kubernetes-key.pem"
lease_ttl_secs = 10
two_member_restarts = true
apiservers = ["https://10.0.0.2:6443", "https://[fd00::2]:6443"]
"#;
    let c = Settings::from_toml(text, None).unwrap().coordination;
    assert_eq!(
        c.apiservers,
        ["https://10.0.0.2:6443", "https://[fd00::2]:6443"]
    );
    assert!(Settings::defaults().coordination.apiservers.is_empty());
    assert!(c.two_member_restarts);
    assert!(!Settings::defaults().coordination.two_member_restarts);
    assert_eq!(c.enabled, Enabled::On);
    assert_eq!(c.endpoints.len(), 2);
    assert_eq!(c.member_name.as_deref(), Some("controller-1"));
    assert_eq!(c.external_members, ["etcd-ext-1", "etcd-ext-2"]);
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
two_member_restarts = "yes"
apiservers = ["10.0.0.2:6443", "https://controller-1"]
"#;
    let e = Settings::from_toml(bad, None).unwrap_err().to_string();
    for want in [
        ":3:11: coordination.enabled: expected true, false or \"auto\"",
        ":4:13: coordination.endpoints: \"10.0.0.1:2379\" is not an etcd client URL: use https://HOST:PORT",
        ":2:1: coordination.cert: `cert` and `key` go together",
        ":6:15: coordination.lock_prefix: \"certrenewd/\": an etcd key prefix starting with /",
        ":7:18: coordination.lease_ttl_secs: 1 is too small: the minimum is 5",
        ":8:1: coordination.lock_tiemout_secs: unknown key (did you mean `lock_timeout_secs`?)",
        ":9:23: coordination.two_member_restarts: expected true or false",
        ":10:14: coordination.apiservers: \"10.0.0.2:6443\" is not an API server URL: use https://HOST:PORT",
        ":10:14: coordination.apiservers: \"https://controller-1\" is not an API server URL",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
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
