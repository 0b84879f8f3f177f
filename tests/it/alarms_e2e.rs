//! Alarms end to end: real passes (`certrenewd renew` run inside the sandbox, and
//! the daemon as a real unit) write their raises and clears to the sandbox's own journald;
//! the tests read them back with `journalctl -D` and compare every field, the counts over
//! several passes, and `certrenewd alarms --output json`.
//!
//! PKI trees come from `tests/fixtures/mkpki.sh` (openssl and cfssl). Each test starts its
//! own sandbox; they skip (with a message) only when this machine cannot host one (not root,
//! no mount namespaces).

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use certrenewd::alarms::message_ids;
use common::e2e::{
    CATALOG, DAEMON, SLEEPER, Starlingx, WatchSpec, alarm_entries, alarms_json, certrenewd_in,
    config_text, daemon_messages, field, flag_unit, hostname, install_daemon, main_pid, mkpki,
    openssl_verifies, prop, show, valid_for_days, wait_for, wait_status,
};
use common::sandbox::Sandbox;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The alarm kinds of docs/interface.md, written out here as the oracle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    RenewalFailed,
    ServicesNotUpdated,
    ExpiringSoon,
    Expired,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::RenewalFailed,
        Kind::ServicesNotUpdated,
        Kind::ExpiringSoon,
        Kind::Expired,
    ];

    fn id(self) -> &'static str {
        match self {
            Kind::RenewalFailed | Kind::ServicesNotUpdated => "250.003",
            Kind::ExpiringSoon => "500.200",
            Kind::Expired => "500.210",
        }
    }

    fn severity(self) -> &'static str {
        match self {
            Kind::Expired => "critical",
            _ => "major",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Kind::RenewalFailed => "Kubernetes certificates renewal failed",
            Kind::ServicesNotUpdated => {
                "Kubernetes certificates have been renewed but not all services have been updated"
            }
            Kind::ExpiringSoon => "Certificate expiring soon",
            Kind::Expired => "Certificate expired",
        }
    }

    /// PRIORITY: 2 critical, 3 major, 5 for a clear.
    fn priority(self, state: &str) -> &'static str {
        match (state, self.severity()) {
            ("clear", _) => "5",
            (_, "critical") => "2",
            _ => "3",
        }
    }

    fn message_id(self, state: &str) -> &'static str {
        use message_ids::*;
        match (self, state == "set") {
            (Kind::RenewalFailed, true) => RENEWAL_FAILED_SET,
            (Kind::RenewalFailed, false) => RENEWAL_FAILED_CLEAR,
            (Kind::ServicesNotUpdated, true) => SERVICES_NOT_UPDATED_SET,
            (Kind::ServicesNotUpdated, false) => SERVICES_NOT_UPDATED_CLEAR,
            (Kind::ExpiringSoon, true) => EXPIRING_SOON_SET,
            (Kind::ExpiringSoon, false) => EXPIRING_SOON_CLEAR,
            (Kind::Expired, true) => EXPIRED_SET,
            (Kind::Expired, false) => EXPIRED_CLEAR,
        }
    }

    /// The kind a journal entry is of, by its MESSAGE_ID.
    fn of(entry: &Value) -> Kind {
        let id = field(entry, "MESSAGE_ID");
        Kind::ALL
            .into_iter()
            .find(|k| k.message_id("set") == id || k.message_id("clear") == id)
            .unwrap_or_else(|| panic!("unknown MESSAGE_ID in {entry:#}"))
    }
}

/// One alarm entry, checked field by field against the interface; returns (kind, state, entity, reason).
fn check_entry(e: &Value) -> (Kind, String, String, String) {
    let kind = Kind::of(e);
    let state = field(e, "ALARM_STATE");
    assert!(state == "set" || state == "clear", "ALARM_STATE: {e:#}");
    let entity = field(e, "ALARM_ENTITY");
    let reason = field(e, "ALARM_REASON");
    assert_eq!(field(e, "ALARM_ID"), kind.id(), "{e:#}");
    assert_eq!(field(e, "ALARM_SEVERITY"), kind.severity(), "{e:#}");
    assert_eq!(field(e, "MESSAGE_ID"), kind.message_id(&state), "{e:#}");
    assert_eq!(field(e, "PRIORITY"), kind.priority(&state), "{e:#}");
    assert_eq!(field(e, "SYSLOG_IDENTIFIER"), "certrenewd", "{e:#}");
    let host = format!("host={}", hostname());
    match kind {
        Kind::RenewalFailed | Kind::ServicesNotUpdated => assert_eq!(entity, host, "{e:#}"),
        Kind::ExpiringSoon | Kind::Expired => assert!(
            entity.starts_with(&format!("{host}.certificate=/")),
            "{e:#}"
        ),
    }
    assert!(!reason.is_empty(), "ALARM_REASON: {e:#}");
    let message = field(e, "MESSAGE");
    assert!(
        message.contains(kind.text()) && message.contains(&reason),
        "MESSAGE has the text and the reason: {e:#}"
    );
    (kind, state, entity, reason)
}

/// Every alarm entry of the sandbox journal, each checked; (kind, state, entity, reason) in order.
fn entries(sb: &Sandbox) -> Vec<(Kind, String, String, String)> {
    alarm_entries(sb).iter().map(check_entry).collect()
}

/// The active alarms the journal describes: replay the raises and clears in order.
fn active_from_journal(sb: &Sandbox) -> BTreeMap<(Kind, String), (String, i64)> {
    let mut active = BTreeMap::new();
    for e in alarm_entries(sb) {
        let (kind, state, entity, reason) = check_entry(&e);
        let at: i64 = field(&e, "__REALTIME_TIMESTAMP").parse().unwrap();
        if state == "set" {
            let before = active.insert((kind, entity.clone()), (reason, at / 1_000_000));
            assert!(before.is_none(), "{kind:?} {entity} raised twice");
        } else {
            assert!(
                active.remove(&(kind, entity.clone())).is_some(),
                "{kind:?} {entity} cleared but not active"
            );
        }
    }
    active
}

/// `certrenewd alarms --output json` lists exactly the alarms the journal left active: same
/// ids, severities, entities, texts and reasons, raised when the journal says.
fn assert_alarms_match_journal(sb: &Sandbox, cfg: &Path) {
    let journal = active_from_journal(sb);
    let doc = alarms_json(cfg);
    let listed = doc["alarms"]
        .as_array()
        .unwrap_or_else(|| panic!("no alarms array: {doc:#}"));
    assert_eq!(
        listed.len(),
        journal.len(),
        "alarms --output json {doc:#} vs journal {journal:#?}"
    );
    for a in listed {
        let s = |k: &str| a[k].as_str().unwrap_or_else(|| panic!("{k} in {a:#}"));
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.id() == s("id") && k.text() == s("text"))
            .unwrap_or_else(|| panic!("unknown id/text: {a:#}"));
        assert_eq!(s("severity"), kind.severity(), "{a:#}");
        let (reason, at) = journal
            .get(&(kind, s("entity").to_string()))
            .unwrap_or_else(|| panic!("listed but not active in the journal: {a:#}"));
        assert_eq!(s("reason"), reason, "{a:#}");
        let raised = OffsetDateTime::parse(s("raised_at"), &Rfc3339)
            .unwrap_or_else(|e| panic!("raised_at {a:#}: {e}"))
            .unix_timestamp();
        assert!(
            (raised - at).abs() <= 2,
            "raised_at {raised} vs the journal entry at {at}: {a:#}"
        );
    }
}

fn count(es: &[(Kind, String, String, String)], kind: Kind, state: &str, entity: &str) -> usize {
    es.iter()
        .filter(|(k, s, e, _)| *k == kind && s == state && e == entity)
        .count()
}

fn cert_entity(path: &Path) -> String {
    format!("host={}.certificate={}", hostname(), path.display())
}

fn host_entity() -> String {
    format!("host={}", hostname())
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// `certrenewd renew` in the sandbox; asserts its exit status.
fn renew(sb: &Sandbox, cfg: &Path, want: i32) {
    let o = certrenewd_in(sb, cfg, &["renew"]);
    assert_eq!(
        o.status.code(),
        Some(want),
        "certrenewd renew: {}",
        show(&o)
    );
}

/// The hard-way tree's due leaves: their CA key is not on this host.
fn hardway_due(root: &Path) -> Vec<PathBuf> {
    [
        "etc/etcd/kubernetes.pem",
        "var/lib/kubelet/worker-0.pem",
        "var/lib/kubernetes/kubernetes.pem",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect()
}

/// The `hardway` tree in a temp dir, and a config (`c.toml`, with `extra` top-level lines)
/// watching its etcd, kube-apiserver and kubelet directories: (temp dir, tree, config).
fn hardway(extra: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("hardway");
    mkpki("hardway", &root);
    let cfg = tmp.path().join("c.toml");
    let text = config_text(
        &tmp.path().join("state"),
        extra,
        &[
            WatchSpec {
                path: root.join("etc/etcd"),
                units: &["etcd.service"],
            },
            WatchSpec {
                path: root.join("var/lib/kubernetes"),
                units: &["kube-apiserver.service"],
            },
            WatchSpec {
                path: root.join("var/lib/kubelet"),
                units: &["kubelet.service"],
            },
        ],
    );
    write(&cfg, &text);
    (tmp, root, cfg)
}

#[test]
fn message_ids_are_in_the_shipped_catalog() {
    let catalog = fs::read_to_string(CATALOG).unwrap();
    for k in Kind::ALL {
        for state in ["set", "clear"] {
            let header = format!("-- {}\n", k.message_id(state));
            assert!(catalog.contains(&header), "{k:?} {state}: {header}");
        }
    }
}

#[test]
fn hardway_without_ca_key_raises_renewal_failed_and_expiring_once() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let (_tmp, root, cfg) = hardway("");

    renew(&sb, &cfg, 1);
    let es = entries(&sb);
    let due = hardway_due(&root);
    assert_eq!(es.len(), 1 + due.len(), "{es:#?}");
    assert_eq!(
        count(&es, Kind::RenewalFailed, "set", &host_entity()),
        1,
        "{es:#?}"
    );
    let reason = &es.iter().find(|e| e.0 == Kind::RenewalFailed).unwrap().3;
    for p in &due {
        assert!(
            reason.contains(&format!("{}: CA key not on this host", p.display())),
            "250.003 names {}: {reason}",
            p.display()
        );
        assert_eq!(
            count(&es, Kind::ExpiringSoon, "set", &cert_entity(p)),
            1,
            "{es:#?}"
        );
    }
    for (k, _, entity, r) in es.iter().filter(|e| e.0 == Kind::ExpiringSoon) {
        let path = entity.split_once(".certificate=").unwrap().1;
        assert!(
            r.starts_with(&format!("{path} expires on ")) && r.contains("CA key not on this host"),
            "{k:?}: {r}"
        );
    }
    assert_alarms_match_journal(&sb, &cfg);

    // Nothing changed: a second pass raises nothing again and clears nothing.
    renew(&sb, &cfg, 1);
    assert_eq!(entries(&sb), es);
    assert_alarms_match_journal(&sb, &cfg);
}

#[test]
fn ca_key_removed_then_restored_raises_then_clears_each_alarm_once() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    t.write_config(
        "restart_timeout_secs = 10",
        &[t.etcd_watch(), t.k8s_watch()],
    );
    for u in ["etcd.service", "kubelet.service"] {
        sb.install_unit(u, SLEEPER).unwrap();
        sb.systemctl(["start", u]).unwrap();
    }
    let (server, client, apiserver_etcd) = (
        t.etcd.join("etcd-server.crt"),
        t.etcd.join("etcd-client.crt"),
        t.k8s.join("apiserver-etcd-client.crt"),
    );
    let signed_by_etcd_ca = [&client, &server, &apiserver_etcd];
    let ca_key = t.etcd.join("ca.key");
    let away = t.tmp.path().join("ca.key.away");
    fs::rename(&ca_key, &away).unwrap();

    // Pass 1: the etcd CA key is gone: renewal failed, expiring soon x2, expired x1.
    renew(&sb, &t.cfg, 1);
    let es = entries(&sb);
    assert_eq!(es.len(), 4, "{es:#?}");
    assert_eq!(count(&es, Kind::RenewalFailed, "set", &host_entity()), 1);
    assert_eq!(
        count(&es, Kind::ExpiringSoon, "set", &cert_entity(&server)),
        1
    );
    assert_eq!(
        count(
            &es,
            Kind::ExpiringSoon,
            "set",
            &cert_entity(&apiserver_etcd)
        ),
        1
    );
    assert_eq!(count(&es, Kind::Expired, "set", &cert_entity(&client)), 1);
    let failed_reason = &es.iter().find(|e| e.0 == Kind::RenewalFailed).unwrap().3;
    for c in signed_by_etcd_ca {
        assert!(
            failed_reason.contains(&c.display().to_string()),
            "names {}: {failed_reason}",
            c.display()
        );
    }
    let expired_reason = &es.iter().find(|e| e.0 == Kind::Expired).unwrap().3;
    assert!(
        expired_reason.starts_with(&format!("{} expired on ", client.display())),
        "{expired_reason}"
    );
    assert_alarms_match_journal(&sb, &t.cfg);
    let pids = (
        main_pid(&sb, "etcd.service"),
        main_pid(&sb, "kubelet.service"),
    );

    // Pass 2: the key is back: everything renewed, units restarted, each alarm cleared once
    // (carrying its last reason).
    fs::rename(&away, &ca_key).unwrap();
    renew(&sb, &t.cfg, 0);
    let es2 = entries(&sb);
    assert_eq!(es2.len(), 8, "{es2:#?}");
    assert_eq!(es2[..4], es[..]);
    for (kind, _, entity, reason) in &es {
        let clears: Vec<_> = es2[4..]
            .iter()
            .filter(|(k, s, e, _)| k == kind && s == "clear" && e == entity)
            .collect();
        assert_eq!(clears.len(), 1, "{kind:?} {entity}: {es2:#?}");
        assert_eq!(&clears[0].3, reason, "a clear carries the last reason");
    }
    for c in signed_by_etcd_ca {
        assert!(
            openssl_verifies(&t.etcd.join("ca.crt"), c),
            "{}",
            c.display()
        );
        assert!(valid_for_days(c, 300), "{}", c.display());
    }
    assert_ne!(main_pid(&sb, "etcd.service"), pids.0);
    assert_ne!(main_pid(&sb, "kubelet.service"), pids.1);
    assert_alarms_match_journal(&sb, &t.cfg);
    assert_eq!(alarms_json(&t.cfg)["alarms"], serde_json::json!([]));

    // Pass 3: nothing to do, nothing in the journal: no alarm raised or cleared twice.
    renew(&sb, &t.cfg, 0);
    assert_eq!(entries(&sb), es2);
}

#[test]
fn unit_failing_to_restart_raises_services_not_updated_until_it_runs_again() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t = Starlingx::new();
    let server = t.etcd.join("etcd-server.crt");
    t.write_config("restart_timeout_secs = 5", &[t.etcd_watch(), t.k8s_watch()]);
    let flag = t.tmp.path().join("etcd-broken");
    sb.install_unit("etcd.service", &flag_unit(&flag)).unwrap();
    sb.install_unit("kubelet.service", SLEEPER).unwrap();
    sb.systemctl(["start", "etcd.service", "kubelet.service"])
        .unwrap();
    write(&flag, "");

    // Pass 1: renewed, kubelet restarted, etcd.service does not come back: its renewals
    // are rolled back, and each certificate put back is in its window again (500.200).
    renew(&sb, &t.cfg, 1);
    let es = entries(&sb);
    let (services, soon): (Vec<_>, Vec<_>) = es
        .iter()
        .partition(|(k, ..)| *k == Kind::ServicesNotUpdated);
    assert_eq!(services.len(), 1, "one services alarm: {es:#?}");
    assert!(
        soon.iter().all(|(k, s, _, r)| *k == Kind::ExpiringSoon
            && s == "set"
            && r.contains("its renewal was rolled back")),
        "{es:#?}"
    );
    assert_eq!(
        count(&es, Kind::ExpiringSoon, "set", &cert_entity(&server)),
        1,
        "{es:#?}"
    );
    let (kind, state, entity, reason) = services[0];
    assert_eq!(
        (*kind, state.as_str(), entity.as_str()),
        (Kind::ServicesNotUpdated, "set", host_entity().as_str())
    );
    assert!(
        reason.contains("etcd.service") && !reason.contains("kubelet.service"),
        "names the unit that did not come back, only it: {reason}"
    );
    assert!(reason.contains(&server.display().to_string()), "{reason}");
    let msg = field(&alarm_entries(&sb)[0], "MESSAGE");
    assert!(
        msg.contains(
            "Kubernetes certificates have been renewed but not all services have been updated"
        ) && msg.contains("etcd.service"),
        "{msg}"
    );
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "failed");
    assert_alarms_match_journal(&sb, &t.cfg);

    // Pass 2, still broken: the restart is retried and fails again; raised once only.
    renew(&sb, &t.cfg, 1);
    assert_eq!(entries(&sb), es, "not raised again, not cleared");
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "failed");
    assert_eq!(
        alarms_json(&t.cfg)["alarms"].as_array().unwrap().len(),
        es.len()
    );

    // Fixed: the renewal was rolled back, so a plain pass holds it back (back-off) until
    // the operator names the certificates; that pass renews them and restarts
    // etcd.service, and the next full pass clears the alarm, once.
    fs::remove_file(&flag).unwrap();
    let out = certrenewd_in(&sb, &t.cfg, &["renew"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("HELD BACK"),
        "{}",
        show(&out)
    );
    let mut named = vec!["renew".to_owned()];
    named.extend(
        fs::read_dir(&t.etcd)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "crt") && !p.ends_with("ca.crt"))
            .map(|p| p.display().to_string()),
    );
    let named: Vec<&str> = named.iter().map(String::as_str).collect();
    let out = certrenewd_in(&sb, &t.cfg, &named);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    renew(&sb, &t.cfg, 0);
    assert_eq!(prop(&sb, "etcd.service", "ActiveState"), "active");
    assert_ne!(main_pid(&sb, "etcd.service"), 0);
    assert!(valid_for_days(&server, 300), "the renewed pair is in place");
    let es2 = entries(&sb);
    assert_eq!(es2.len(), 2 * es.len(), "each alarm cleared once: {es2:#?}");
    for (kind, _, entity, _) in &es {
        assert_eq!(count(&es2, *kind, "clear", entity), 1, "{es2:#?}");
    }
    assert_alarms_match_journal(&sb, &t.cfg);
    assert_eq!(alarms_json(&t.cfg)["alarms"], serde_json::json!([]));

    renew(&sb, &t.cfg, 0);
    assert_eq!(entries(&sb), es2, "nothing new on a quiet pass");
}

#[test]
fn daemon_restart_keeps_an_active_alarm_without_raising_it_again() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let (tmp, root, cfg) = hardway("schedule = \"0 0 0 1 1 *\"");
    install_daemon(&sb, &cfg, tmp.path());
    let passes = |n: usize| {
        wait_for(
            &format!("{n} failed passes"),
            Duration::from_secs(60),
            || {
                let m = daemon_messages(&sb);
                let done = m.iter().filter(|l| l.starts_with("pass failed")).count();
                if done >= n { Ok(()) } else { Err(m) }
            },
        )
    };

    sb.systemctl(["start", DAEMON]).unwrap();
    passes(1);
    let es = entries(&sb);
    let due = hardway_due(&root);
    assert_eq!(es.len(), 1 + due.len(), "{es:#?}");
    assert_eq!(count(&es, Kind::RenewalFailed, "set", &host_entity()), 1);
    for p in &due {
        assert_eq!(count(&es, Kind::ExpiringSoon, "set", &cert_entity(p)), 1);
    }
    let before = alarms_json(&cfg);
    assert_alarms_match_journal(&sb, &cfg);
    let st = wait_status(&sb, "last pass: FAILED", Duration::from_secs(10));
    assert!(st.contains("4 alarms active"), "{st}");

    sb.systemctl(["stop", DAEMON]).unwrap();
    assert_eq!(prop(&sb, DAEMON, "Result"), "success");
    sb.systemctl(["start", DAEMON]).unwrap();
    passes(2);
    let st = wait_status(&sb, "last pass: FAILED", Duration::from_secs(10));
    assert!(st.contains("4 alarms active"), "{st}");
    assert_eq!(
        entries(&sb),
        es,
        "no second raise, no clear across the restart"
    );
    let after = alarms_json(&cfg);
    assert_eq!(after, before, "same alarms, same raised_at");
    assert_alarms_match_journal(&sb, &cfg);
    let pid = main_pid(&sb, DAEMON);
    assert_ne!(pid, 0);
    sb.systemctl(["stop", DAEMON]).unwrap();
}
