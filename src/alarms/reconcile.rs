//! The pure comparison of the active alarms with the desired ones.

use time::{OffsetDateTime, UtcOffset};

use super::{ActiveAlarm, AlarmEvent, AlarmSpec, Transition};

/// Pure: compares the active alarms with those desired now; returns the new active set and the events.
//
// An alarm is identified by (kind, entity). It is raised once (raised_at = `now`, UTC, whole
// seconds), kept with its original raised_at while desired, and cleared once, carrying its
// last reason, when no longer desired. Events: first the clears (in active order), then
// raises and reason updates (in desired order). A duplicate (kind, entity) in `desired` is
// ignored after its first occurrence.
pub fn reconcile(
    active: &[ActiveAlarm],
    desired: &[AlarmSpec],
    now: OffsetDateTime,
) -> (Vec<ActiveAlarm>, Vec<AlarmEvent>) {
    let raised_at = now
        .to_offset(UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(now);
    let same = |a: &ActiveAlarm, d: &AlarmSpec| a.kind == d.kind && a.entity == d.entity;

    // Keep the first occurrence of each identity.
    let mut wanted: Vec<&AlarmSpec> = Vec::with_capacity(desired.len());
    for d in desired {
        if !wanted
            .iter()
            .any(|w| w.kind == d.kind && w.entity == d.entity)
        {
            wanted.push(d);
        }
    }

    let mut next = Vec::with_capacity(wanted.len());
    let mut events = Vec::new();

    for a in active {
        if !wanted.iter().any(|d| same(a, d)) {
            events.push(AlarmEvent {
                transition: Transition::Clear,
                kind: a.kind,
                entity: a.entity.clone(),
                reason: a.reason.clone(),
            });
        }
    }

    // Existing alarms keep their place; new ones follow in desired order.
    for a in active {
        if let Some(d) = wanted.iter().find(|d| same(a, d)) {
            next.push(ActiveAlarm {
                reason: d.reason(),
                reasons: d.reasons.clone(),
                subjects: d.subjects.clone(),
                ..a.clone()
            });
        }
    }
    for d in &wanted {
        match active.iter().find(|a| same(a, d)) {
            Some(a) if a.reason != d.reason() => events.push(AlarmEvent {
                transition: Transition::Update {
                    previous_reason: a.reason.clone(),
                },
                kind: d.kind,
                entity: d.entity.clone(),
                reason: d.reason(),
            }),
            Some(_) => {}
            None => {
                next.push(ActiveAlarm {
                    kind: d.kind,
                    entity: d.entity.clone(),
                    reason: d.reason(),
                    reasons: d.reasons.clone(),
                    subjects: d.subjects.clone(),
                    raised_at,
                });
                events.push(AlarmEvent {
                    transition: Transition::Set,
                    kind: d.kind,
                    entity: d.entity.clone(),
                    reason: d.reason(),
                });
            }
        }
    }
    (next, events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::{AlarmKind, AlarmStore, cert_entity, host_entity};
    use std::path::Path;
    use time::macros::datetime;

    fn spec(kind: AlarmKind, entity: &str, reason: &str) -> AlarmSpec {
        AlarmSpec {
            reasons: vec![reason.to_owned()],
            kind,
            entity: entity.to_owned(),
            subjects: Vec::new(),
        }
    }

    fn transitions(events: &[AlarmEvent]) -> Vec<(Transition, AlarmKind, &str, &str)> {
        events
            .iter()
            .map(|e| {
                (
                    e.transition.clone(),
                    e.kind,
                    e.entity.as_str(),
                    e.reason.as_str(),
                )
            })
            .collect()
    }

    #[test]
    fn raises_once_over_three_passes() {
        let host = host_entity("controller-0");
        let desired = [spec(
            AlarmKind::RenewalFailed,
            &host,
            "CA key not on this host",
        )];
        let t0 = datetime!(2026-11-21 00:10:03.5 UTC);

        let (active, events) = reconcile(&[], &desired, t0);
        assert_eq!(
            transitions(&events),
            [(
                Transition::Set,
                AlarmKind::RenewalFailed,
                host.as_str(),
                "CA key not on this host"
            )]
        );
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].raised_at, datetime!(2026-11-21 00:10:03 UTC));

        let (active2, events) = reconcile(&active, &desired, datetime!(2026-11-22 00:00 UTC));
        assert!(events.is_empty(), "{events:?}");
        let (active3, events) = reconcile(&active2, &desired, datetime!(2026-11-23 00:00 UTC));
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(active3, active, "raised_at stays that of the first raise");
    }

    #[test]
    fn clears_once_with_last_reason() {
        let host = host_entity("c0");
        let desired = [spec(
            AlarmKind::ServicesNotUpdated,
            &host,
            "etcd.service failed",
        )];
        let t = datetime!(2026-01-01 00:00 UTC);
        let (active, _) = reconcile(&[], &desired, t);

        let (active, events) = reconcile(&active, &[], t);
        assert_eq!(
            transitions(&events),
            [(
                Transition::Clear,
                AlarmKind::ServicesNotUpdated,
                host.as_str(),
                "etcd.service failed"
            )]
        );
        assert!(active.is_empty());
        let (active, events) = reconcile(&active, &[], t);
        assert!(events.is_empty());
        assert!(active.is_empty());
    }

    #[test]
    fn reason_change_updates_without_reraise() {
        let host = host_entity("c0");
        let t0 = datetime!(2026-01-01 00:00 UTC);
        let (active, _) = reconcile(&[], &[spec(AlarmKind::RenewalFailed, &host, "a")], t0);
        let (active, events) = reconcile(
            &active,
            &[spec(AlarmKind::RenewalFailed, &host, "b")],
            datetime!(2026-01-02 00:00 UTC),
        );
        assert_eq!(
            transitions(&events),
            [(
                Transition::Update {
                    previous_reason: "a".into()
                },
                AlarmKind::RenewalFailed,
                host.as_str(),
                "b"
            )]
        );
        assert_eq!(events[0].state(), None);
        assert_eq!(active[0].reason, "b");
        assert_eq!(active[0].raised_at, t0);
        // The clear carries the latest reason.
        let (_, events) = reconcile(&active, &[], t0);
        assert_eq!(events[0].reason, "b");
    }

    #[test]
    fn entities_and_kinds_are_independent() {
        let a = cert_entity("c0", Path::new("/etc/etcd/a.crt"));
        let b = cert_entity("c0", Path::new("/etc/etcd/b.crt"));
        let host = host_entity("c0");
        let t = datetime!(2026-01-01 00:00 UTC);
        let (active, events) = reconcile(
            &[],
            &[
                spec(AlarmKind::ExpiringSoon, &a, "a: 10 days left"),
                spec(AlarmKind::ExpiringSoon, &b, "b: 12 days left"),
                spec(AlarmKind::RenewalFailed, &host, "x"),
            ],
            t,
        );
        assert_eq!(events.len(), 3);
        assert_eq!(active.len(), 3);

        // a becomes expired (500.200 cleared, 500.210 raised), b stays, the host alarm goes.
        let (active, events) = reconcile(
            &active,
            &[
                spec(AlarmKind::Expired, &a, "a: expired"),
                spec(AlarmKind::ExpiringSoon, &b, "b: 12 days left"),
                spec(AlarmKind::ServicesNotUpdated, &host, "y"),
            ],
            t,
        );
        assert_eq!(
            transitions(&events),
            [
                (
                    Transition::Clear,
                    AlarmKind::ExpiringSoon,
                    a.as_str(),
                    "a: 10 days left"
                ),
                (
                    Transition::Clear,
                    AlarmKind::RenewalFailed,
                    host.as_str(),
                    "x"
                ),
                (
                    Transition::Set,
                    AlarmKind::Expired,
                    a.as_str(),
                    "a: expired"
                ),
                (
                    Transition::Set,
                    AlarmKind::ServicesNotUpdated,
                    host.as_str(),
                    "y"
                ),
            ]
        );
        let ids: Vec<_> = active.iter().map(|x| (x.kind, x.entity.as_str())).collect();
        assert_eq!(
            ids,
            [
                (AlarmKind::ExpiringSoon, b.as_str()),
                (AlarmKind::Expired, a.as_str()),
                (AlarmKind::ServicesNotUpdated, host.as_str()),
            ]
        );
    }

    #[test]
    fn duplicate_desired_raise_once() {
        let host = host_entity("c0");
        let t = datetime!(2026-01-01 00:00 UTC);
        let (active, events) = reconcile(
            &[],
            &[
                spec(AlarmKind::RenewalFailed, &host, "first"),
                spec(AlarmKind::RenewalFailed, &host, "second"),
            ],
            t,
        );
        assert_eq!(events.len(), 1);
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].reason, "first");
    }

    #[test]
    fn state_round_trip_does_not_reraise() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = AlarmStore::new(dir.path());
        assert!(store.load()?.is_empty(), "missing file = no alarms");

        let desired = [
            spec(
                AlarmKind::RenewalFailed,
                &host_entity("c0"),
                "why\non two lines",
            ),
            spec(
                AlarmKind::Expired,
                &cert_entity("c0", Path::new("/etc/kubernetes/pki/ca.crt")),
                "expired",
            ),
        ];
        // The files an alarm concerns are kept with it, a path with a space included.
        let mut desired = desired;
        desired[0].subjects = vec!["/etc/kubernetes/pki/front proxy/client.crt".into()];
        let (active, _) = reconcile(&[], &desired, datetime!(2026-11-21 00:10:03 UTC));
        store.save(&active)?;
        let loaded = store.load()?;
        assert_eq!(loaded, active);
        assert_eq!(loaded[0].subjects, desired[0].subjects);

        let (again, events) = reconcile(&loaded, &desired, datetime!(2026-11-22 00:00 UTC));
        assert!(events.is_empty(), "re-raised after reload: {events:?}");
        assert_eq!(again, active);
        Ok(())
    }

    #[test]
    fn corrupt_state_file_error_names_the_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = AlarmStore::new(dir.path());
        std::fs::write(store.path(), b"{\"version\":1,\"alarms\":[{\"kind\":")?;
        let err = match store.load() {
            Ok(v) => panic!("corrupt file loaded as {v:?}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(
            err.contains(&store.path().display().to_string()),
            "error does not name the file: {err}"
        );

        std::fs::write(store.path(), br#"{"version":1,"alarms":[{"kind":"nope","entity":"e","reason":"r","raised_at":"2026-01-01T00:00:00Z"}]}"#)?;
        let err = store.load().map(|_| ()).map_err(|e| format!("{e:#}"));
        assert!(
            matches!(&err, Err(e) if e.contains("alarms.json")),
            "{err:?}"
        );
        Ok(())
    }
}
