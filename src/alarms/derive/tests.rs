use super::*;
use crate::plan::{Policy, plan};
use crate::renew::pending::Change;
use crate::restart::UnitRestart;
use crate::restart::sequence::Undone;
use time::OffsetDateTime;
use time::macros::datetime;

/// Certificate `i`'s renewal, held by the back-off after 2 roll-backs.
fn held_back(inv: &Inventory, i: usize) -> RenewOutcome {
    RenewOutcome {
        cert: i,
        path: inv.certs[i].path.clone(),
        watch: 0,
        result: RenewResult::HeldBack {
            reason: "renewal held back: 2 attempts were rolled back".into(),
        },
    }
}

fn make_plan(inv: &Inventory) -> Plan {
    let policy = Policy {
        renew_before_days: 15,
        ca_warning_days: 180,
        ..Policy::default()
    };
    plan(
        inv,
        Default::default(),
        &policy,
        datetime!(2029-12-25 00:00 UTC),
    )
}

#[test]
fn a_partial_pass_reconciles_only_what_it_examined() {
    // Each alarm's subject is the one file its reason names.
    let spec = |kind, entity: &str, reason: &str| AlarmSpec {
        kind,
        entity: entity.into(),
        reasons: vec![reason.into()],
        subjects: vec![PathBuf::from(reason.split(':').next().unwrap_or(reason))],
    };
    let a = PathBuf::from("/pki/a.crt");
    let active = vec![
        spec(
            AlarmKind::ExpiringSoon,
            "host=h.certificate=/pki/a.crt",
            "/pki/a.crt: due",
        ),
        spec(
            AlarmKind::ExpiringSoon,
            "host=h.certificate=/pki/b.crt",
            "/pki/b.crt: due",
        ),
        spec(AlarmKind::RenewalFailed, "host=h", "/pki/b.crt: no CA key"),
    ];
    // `renew /pki/a.crt` renewed a: its alarm goes, b's stay, the host alarm stays.
    let out = scoped("h", std::slice::from_ref(&a), &active, Vec::new());
    assert_eq!(out, active[1..].to_vec());
    // A failure of the partial pass is added to the host alarm, not put in its place.
    let failed = vec![spec(
        AlarmKind::RenewalFailed,
        "host=h",
        "/pki/a.crt: bad key",
    )];
    let out = scoped("h", std::slice::from_ref(&a), &active, failed);
    assert_eq!(
        out[1].reasons,
        ["/pki/b.crt: no CA key", "/pki/a.crt: bad key"]
    );
    // Found again by another partial pass, an entry is not repeated.
    let twice = scoped("h", std::slice::from_ref(&a), &out, failed_again());
    assert_eq!(
        twice[1].reason(),
        "/pki/b.crt: no CA key; /pki/a.crt: bad key"
    );
    assert_eq!(out.len(), 2);
    // A host alarm naming only what the partial pass examined is its to clear.
    let only_b = [PathBuf::from("/pki/b.crt")];
    let out = scoped("h", &only_b, &active, Vec::new());
    assert_eq!(out, active[..1].to_vec());
    let units = vec![spec(
        AlarmKind::ServicesNotUpdated,
        "host=h",
        "/pki/a.crt: etcd.service failed, rolled back",
    )];
    assert!(scoped("h", &[a], &units, Vec::new()).is_empty());
}

fn failed_again() -> Vec<AlarmSpec> {
    vec![AlarmSpec {
        kind: AlarmKind::RenewalFailed,
        entity: "host=h".into(),
        reasons: vec!["/pki/a.crt: bad key".into()],
        subjects: vec![PathBuf::from("/pki/a.crt")],
    }]
}

fn index(inv: &Inventory, name: &str) -> usize {
    inv.certs
        .iter()
        .position(|c| c.path.ends_with(name))
        .unwrap()
}

fn renewed(inv: &Inventory, name: &str) -> RenewOutcome {
    let i = index(inv, name);
    RenewOutcome {
        cert: i,
        path: inv.certs[i].path.clone(),
        watch: 0,
        result: RenewResult::Renewed {
            serial: "01".into(),
            not_before: OffsetDateTime::UNIX_EPOCH,
            not_after: OffsetDateTime::UNIX_EPOCH,
            rotated: false,
            change: Change {
                cert: inv.certs[i].path.clone(),
                key: None,
                cert_backup: "/backup".into(),
                key_backup: None,
                ..Change::default()
            },
        },
    }
}

fn kinds(alarms: &[AlarmSpec]) -> Vec<(AlarmKind, String)> {
    alarms
        .iter()
        .map(|a| (a.kind, a.entity.rsplit('/').next().unwrap().to_string()))
        .collect()
}

#[test]
fn an_unrenewable_due_certificate_fails_the_pass_and_a_renewed_one_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let plan = make_plan(&inv);
    let none = RestartOutcomes::default();
    let alarms = desired("c0", &inv, &plan, None, &[renewed(&inv, "a.crt")], &none);
    assert_eq!(
        kinds(&alarms),
        [
            (AlarmKind::RenewalFailed, "host=c0".into()),
            (AlarmKind::ExpiringSoon, "b.crt".into())
        ]
    );
    assert!(alarms[0].reason().contains("b.crt") && alarms[0].reason().contains("key missing"));
    assert!(
        alarms[1]
            .reason()
            .contains("expires on 2030-01-01T00:00:00Z: key missing")
    );
    // Not renewed at all: a is alarmed as well, with the default reason.
    let alarms = desired("c0", &inv, &plan, None, &[], &none);
    let a = alarms.iter().find(|x| x.entity.ends_with("a.crt")).unwrap();
    assert!(a.reason().ends_with(": not renewed"), "{}", a.reason());
}

#[test]
fn a_limited_pass_leaves_unselected_due_certificates_to_the_next_full_pass() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let plan = make_plan(&inv);
    let only = [dir.path().join("b.crt")];
    let alarms = desired(
        "c0",
        &inv,
        &plan,
        Some(&only),
        &[],
        &RestartOutcomes::default(),
    );
    assert!(
        !alarms.iter().any(|a| a.entity.ends_with("a.crt")),
        "{alarms:?}"
    );
}

#[test]
fn a_service_that_did_not_come_back_names_the_renewals_and_the_roll_back() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let plan = make_plan(&inv);
    let restarts = RestartOutcomes {
        units: vec![UnitRestart::failed("etcd.service", "job failed")],
        rolled_back: vec![Undone::Restored("a.crt".into())],
        ..RestartOutcomes::default()
    };
    let alarms = desired(
        "c0",
        &inv,
        &plan,
        None,
        &[renewed(&inv, "a.crt")],
        &restarts,
    );
    let services = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::ServicesNotUpdated)
        .unwrap();
    assert_eq!(services.entity, "host=c0");
    assert_eq!(
        services.reason(),
        "etcd.service: job failed (1 certificate renewed); a.crt rolled back to the previous certificate"
    );
}

#[test]
fn a_held_back_renewal_keeps_services_not_updated_and_its_own_500_200() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let plan = make_plan(&inv);
    let i = index(&inv, "a.crt");
    let held = held_back(&inv, i);
    let none = RestartOutcomes::default();
    let alarms = desired("c0", &inv, &plan, None, &[held], &none);
    // As in the pass that rolled it back: 250.003 "not all services have been updated"
    // names it, and its 500.200 says it is in its window and why it waits; it is not a
    // failed renewal.
    let own: Vec<&AlarmSpec> = (alarms.iter())
        .filter(|a| a.entity.ends_with("a.crt"))
        .collect();
    assert!(
        matches!(own[..], [a] if a.kind == AlarmKind::ExpiringSoon
            && a.reason().contains("renewal held back: 2 attempts")),
        "{alarms:?}"
    );
    let services = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::ServicesNotUpdated)
        .unwrap();
    assert!(
        services
            .reason()
            .contains("a.crt: renewal held back: 2 attempts"),
        "{}",
        services.reason()
    );
    let failed = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::RenewalFailed)
        .unwrap();
    assert!(!failed.reason().contains("a.crt"), "{}", failed.reason());
}

#[test]
fn a_held_back_renewal_of_an_expired_certificate_raises_500_210() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let i = index(&inv, "a.crt");
    let not_after = inv.certs[i].facts.not_after;
    let policy = Policy {
        renew_before_days: 15,
        ..Policy::default()
    };
    let plan = plan(
        &inv,
        Default::default(),
        &policy,
        not_after + time::Duration::days(1),
    );
    assert!(plan.items.iter().any(|p| p.cert == i && p.expired));
    let held = held_back(&inv, i);
    let alarms = desired(
        "c0",
        &inv,
        &plan,
        None,
        &[held],
        &RestartOutcomes::default(),
    );
    let expired = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::Expired && a.entity.ends_with("a.crt"))
        .unwrap_or_else(|| panic!("no 500.210 for a.crt: {alarms:?}"));
    assert!(
        expired.reason().contains("renewal held back: 2 attempts"),
        "{}",
        expired.reason()
    );
}

#[test]
fn a_partial_pass_owns_the_alarms_of_the_files_it_examined_whatever_their_names() {
    // A path with a space, as an operator may have: the subjects are paths, not words.
    let odd = PathBuf::from("/etc/kubernetes/pki/front proxy/client.crt");
    let other = PathBuf::from("/etc/etcd/peer.crt");
    let alarm = |reason: &str, subjects: Vec<PathBuf>| AlarmSpec {
        kind: AlarmKind::RenewalFailed,
        entity: "host=h".into(),
        reasons: reason.split("; ").map(str::to_owned).collect(),
        subjects,
    };
    let active = vec![alarm(
        &format!("{}: no CA key", odd.display()),
        vec![odd.clone()],
    )];
    // `renew "<odd>"` examined it and no longer fails: the host alarm about it goes.
    let out = scoped("h", std::slice::from_ref(&odd), &active, Vec::new());
    assert_eq!(out, Vec::new(), "the alarm about the examined file stays");
    // An alarm that also concerns a file the partial pass did not examine stays.
    let both = vec![alarm(
        &format!(
            "{}: no CA key; {}: no CA key",
            odd.display(),
            other.display()
        ),
        vec![odd.clone(), other.clone()],
    )];
    let out = scoped("h", std::slice::from_ref(&odd), &both, Vec::new());
    assert_eq!(out, both);
    // Its own failure merges into the host alarm, subjects and all.
    let failed = vec![alarm(
        &format!("{}: bad key", odd.display()),
        vec![odd.clone()],
    )];
    let out = scoped("h", std::slice::from_ref(&other), &active, failed);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].subjects, [odd]);
}
