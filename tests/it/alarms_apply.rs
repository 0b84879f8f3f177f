//! `apply`: load, reconcile, emit, save, across simulated restarts.

use std::sync::Mutex;

use certrenewd::alarms::{
    AlarmEvent, AlarmKind, AlarmSink, AlarmSpec, AlarmStore, Transition, apply, cert_entity,
    host_entity, hostname, render_json,
};
use time::macros::datetime;

#[derive(Default)]
struct Recorder(Mutex<Vec<AlarmEvent>>);

impl AlarmSink for Recorder {
    fn emit(&self, event: &AlarmEvent) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event.clone());
        }
    }
}

impl Recorder {
    fn take(&self) -> Vec<(Transition, AlarmKind, String)> {
        let mut v = self.0.lock().expect("recorder lock");
        v.drain(..)
            .map(|e| (e.transition, e.kind, e.reason))
            .collect()
    }
}

#[test]
fn raise_once_survive_restart_clear_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let host = host_entity("controller-0");
    let cert = cert_entity("controller-0", std::path::Path::new("/etc/etcd/ca.crt"));
    let rec = Recorder::default();
    let desired = |reason: &str| {
        vec![
            AlarmSpec {
                kind: AlarmKind::RenewalFailed,
                entity: host.clone(),
                reasons: vec![reason.to_owned()],
                subjects: Vec::new(),
            },
            AlarmSpec {
                kind: AlarmKind::ExpiringSoon,
                entity: cert.clone(),
                reasons: vec!["/etc/etcd/ca.crt: 120 days left; CAs are never reissued".to_owned()],
                subjects: Vec::new(),
            },
        ]
    };

    // Each pass uses a fresh store, as after a daemon restart.
    let events = apply(
        &AlarmStore::new(dir.path()),
        &desired("no CA key"),
        &[&rec],
        datetime!(2026-11-21 00:10:03 UTC),
    )?
    .events;
    assert_eq!(events.len(), 2);
    assert_eq!(
        rec.take(),
        [
            (
                Transition::Set,
                AlarmKind::RenewalFailed,
                "no CA key".into()
            ),
            (
                Transition::Set,
                AlarmKind::ExpiringSoon,
                "/etc/etcd/ca.crt: 120 days left; CAs are never reissued".into()
            ),
        ]
    );

    let events = apply(
        &AlarmStore::new(dir.path()),
        &desired("no CA key"),
        &[&rec],
        datetime!(2026-11-22 00:00 UTC),
    )?
    .events;
    assert!(events.is_empty(), "re-raised after restart: {events:?}");
    assert!(rec.take().is_empty());

    // A new reason is an update: returned, but no sink sees it.
    let events = apply(
        &AlarmStore::new(dir.path()),
        &desired("key mismatch"),
        &[&rec],
        datetime!(2026-11-23 00:00 UTC),
    )?
    .events;
    assert_eq!(events.len(), 1);
    assert!(matches!(events[0].transition, Transition::Update { .. }));
    assert!(rec.take().is_empty());

    let active = AlarmStore::new(dir.path()).load()?;
    let json: serde_json::Value = serde_json::from_str(&render_json(&active))?;
    assert_eq!(json["alarms"][0]["reason"], "key mismatch");
    assert_eq!(json["alarms"][0]["raised_at"], "2026-11-21T00:10:03Z");

    let events = apply(
        &AlarmStore::new(dir.path()),
        &[],
        &[&rec],
        datetime!(2026-11-24 00:00 UTC),
    )?
    .events;
    assert_eq!(events.len(), 2);
    let cleared = rec.take();
    assert_eq!(cleared.len(), 2);
    assert_eq!(
        cleared[0],
        (
            Transition::Clear,
            AlarmKind::RenewalFailed,
            "key mismatch".into()
        )
    );
    assert_eq!(cleared[1].0, Transition::Clear);

    let events = apply(
        &AlarmStore::new(dir.path()),
        &[],
        &[&rec],
        datetime!(2026-11-25 00:00 UTC),
    )?
    .events;
    assert!(events.is_empty());
    assert!(AlarmStore::new(dir.path()).load()?.is_empty());
    Ok(())
}

#[test]
fn corrupt_state_is_kept_aside_and_rebuilt_from_the_pass() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = AlarmStore::new(dir.path());
    std::fs::write(store.path(), "not json")?;
    // `load` (what `certrenewd alarms` reads) refuses it, naming the file.
    let err = format!("{:#}", store.load().unwrap_err());
    assert!(err.contains(&store.path().display().to_string()), "{err}");
    // A pass keeps it aside and raises what it derives, as on a first run.
    let rec = Recorder::default();
    let desired = [AlarmSpec {
        kind: AlarmKind::RenewalFailed,
        entity: host_entity("c0"),
        reasons: vec!["r".into()],
        subjects: Vec::new(),
    }];
    let events = apply(&store, &desired, &[&rec], datetime!(2026-01-01 00:00 UTC))?.events;
    assert_eq!(events.len(), 1);
    assert_eq!(rec.take().len(), 1);
    assert_eq!(store.load()?.len(), 1);
    let aside = dir.path().join("alarms.json.corrupt-20260101T000000Z");
    assert_eq!(std::fs::read_to_string(aside)?, "not json");
    Ok(())
}

#[test]
fn hostname_and_entities() -> anyhow::Result<()> {
    let host = hostname()?;
    assert!(!host.is_empty() && !host.contains('\n'));
    assert_eq!(host_entity("controller-0"), "host=controller-0");
    assert_eq!(
        cert_entity(
            "controller-0",
            std::path::Path::new("/etc/etcd/etcd-server.crt")
        ),
        "host=controller-0.certificate=/etc/etcd/etcd-server.crt"
    );
    Ok(())
}
