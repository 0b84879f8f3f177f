use time::macros::datetime;

use super::*;
use crate::served::Served;
use std::path::Path;

fn policy(validity_days: Option<u32>) -> Policy {
    Policy {
        renew_before_days: 15,
        ca_warning_days: 180,
        force: false,
        only: None,
        validity_days,
        watch_validity_days: Vec::new(),
        ca_renew_before_days: None,
        watch_ca_renew_before_days: Vec::new(),
        ..Policy::default()
    }
}

fn item<'a>(inv: &Inventory, p: &'a Plan, file: &str) -> &'a PlanItem {
    let i = inv
        .certs
        .iter()
        .position(|c| c.path.file_name() == Some(file.as_ref()) && c.index == 0)
        .unwrap_or_else(|| panic!("{file} not in the inventory"));
    &p.items[i]
}

#[test]
fn the_plan_carries_the_lifetime_a_renewal_gives_each_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    // A month before the leaves end (2030-01-01): not due yet.
    let now = datetime!(2029-12-01 0:00 UTC);
    let own = plan(&inv, Served::new(), &policy(None), now);
    // The leaves were issued for a year (2029-01-01 to 2030-01-01): that is kept.
    assert_eq!(
        item(&inv, &own, "a.crt")
            .lifetime
            .map(|l| (l.span, l.source)),
        Some((Duration::days(365), LifetimeSource::Kept))
    );
    assert_eq!(
        item(&inv, &own, "ca.crt").lifetime.map(|l| l.source),
        Some(LifetimeSource::Kept),
        "a CA keeps its own, re-issued with the same key"
    );
    let set = plan(&inv, Served::new(), &policy(Some(90)), now);
    assert_eq!(
        item(&inv, &set, "a.crt").lifetime.map(|l| l.span),
        Some(Duration::days(90))
    );
    assert!(!item(&inv, &own, "a.crt").renews(), "not due");
}

#[test]
fn lifetime_is_the_setting_else_kubeadms_year_for_what_kubeadm_signed_else_the_old_span() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let facts = |file: &str| {
        inv.certs
            .iter()
            .find(|c| c.path.file_name() == Some(file.as_ref()))
            .unwrap()
            .facts
            .clone()
    };
    let mut ca = facts("ca.crt");
    ca.not_before = datetime!(2025-03-04 05:06:07 UTC);
    let mut leaf = facts("a.crt");
    let mut at = |nb: OffsetDateTime, span: Duration| {
        leaf.not_before = nb;
        leaf.not_after = nb + span;
        leaf.clone()
    };
    let kept = |days: i64| Lifetime {
        span: Duration::days(days),
        source: LifetimeSource::Kept,
    };
    let kubeadm = Lifetime {
        span: Duration::days(365),
        source: LifetimeSource::Kubeadm(KubeadmSign::Span),
    };
    let cases = [
        // Issued after its CA, for two years: kept.
        (
            at(datetime!(2026-01-01 0:00 UTC), Duration::days(730)),
            kept(730),
        ),
        // kubeadm: its CA's notBefore, a year from a signing 400 days, 3 h 17 min later.
        (
            at(ca.not_before, Duration::days(765) + Duration::minutes(197)),
            kubeadm,
        ),
        // A bootstrap script that made CA and leaf in one second: the 1825 days it chose.
        (at(ca.not_before, Duration::days(1825)), kept(1825)),
        // cfssl in the same minute: notBefore set back 5 minutes, the span 5 minutes longer.
        (
            at(ca.not_before, Duration::days(1825) + Duration::minutes(5)),
            Lifetime {
                span: Duration::days(1825) + Duration::minutes(5),
                source: LifetimeSource::Kept,
            },
        ),
        // Issued before a same-key re-issue of its CA: notBefore before the CA's, 90 days.
        (
            at(datetime!(2025-01-01 0:00 UTC), Duration::days(90)),
            kept(90),
        ),
        // kubeadm's leaf after the re-issue: the old CA's notBefore, before the new one's.
        (
            at(
                datetime!(2022-03-04 05:06:07 UTC),
                Duration::days(1400) + Duration::seconds(7_777),
            ),
            kubeadm,
        ),
    ];
    for (i, (leaf, want)) in cases.iter().enumerate() {
        assert_eq!(
            lifetime(leaf, Path::new("a.crt"), &ca, None),
            *want,
            "case {i}"
        );
    }
    // A setting wins, whatever the certificate; the watch's before the global one.
    let leaf = &cases[1].0;
    let set = lifetime(
        leaf,
        Path::new("a.crt"),
        &ca,
        Some((30, LifetimeSource::WatchSetting)),
    );
    assert_eq!(set.span, Duration::days(30));
    assert_eq!(set.to_string(), "30 days, validity_days of its [[watch]]");
    assert_eq!(
        kubeadm.to_string(),
        "365 days, kubeadm's: the old certificate was signed with its CA's notBefore, for a span nobody chose"
    );
}

#[test]
fn a_watchs_validity_days_comes_before_the_global_one() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let now = datetime!(2029-12-01 0:00 UTC);
    let watch = inv
        .certs
        .iter()
        .find(|c| c.path.ends_with("a.crt"))
        .unwrap()
        .watch;
    let mut p = policy(Some(90));
    p.watch_validity_days = vec![None; watch + 1];
    p.watch_validity_days[watch] = Some(200);
    let lifetime = item(&inv, &plan(&inv, Served::new(), &p, now), "a.crt")
        .lifetime
        .unwrap();
    assert_eq!(lifetime.span, Duration::days(200));
    assert_eq!(lifetime.source, LifetimeSource::WatchSetting);
    p.watch_validity_days[watch] = None;
    let lifetime = item(&inv, &plan(&inv, Served::new(), &p, now), "a.crt")
        .lifetime
        .unwrap();
    assert_eq!(lifetime.span, Duration::days(90));
    assert_eq!(lifetime.source, LifetimeSource::Setting);
}

#[test]
fn only_a_files_first_certificate_is_renewable_in_place() {
    let dir = tempfile::tempdir().unwrap();
    crate::test_pki::tree(dir.path());
    let bundle: Vec<u8> = ["a.crt", "b.crt"]
        .iter()
        .flat_map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
    std::fs::write(dir.path().join("bundle.pem"), bundle).unwrap();
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    let p = plan(
        &inv,
        Served::new(),
        &policy(None),
        datetime!(2029-12-25 0:00 UTC),
    );
    let second = inv
        .certs
        .iter()
        .position(|c| c.path == dir.path().join("bundle.pem") && c.index == 1)
        .expect("the bundle's second certificate");
    let it = &p.items[second];
    assert_eq!(it.status, Status::Unrenewable, "{it:?}");
    let why = it.reason.as_deref().unwrap_or("");
    assert!(why.contains("certificate 2 of 2 in a bundle file"), "{why}");
    // The first certificate of the same file is not refused for being in a bundle.
    let first = inv
        .certs
        .iter()
        .position(|c| c.path == dir.path().join("bundle.pem") && c.index == 0)
        .expect("the bundle's first certificate");
    let why = p.items[first].reason.as_deref().unwrap_or("");
    assert!(!why.contains("bundle"), "{why}");
}

#[test]
fn every_problem_of_a_certificate_is_said_not_only_the_first() {
    let dir = tempfile::tempdir().unwrap();
    crate::test_pki::tree(dir.path());
    // b.crt has no key, and now neither has its CA: two things to fix, both said.
    std::fs::remove_file(dir.path().join("ca.key")).unwrap();
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    let p = plan(
        &inv,
        Served::new(),
        &policy(None),
        datetime!(2029-12-25 0:00 UTC),
    );
    let b = item(&inv, &p, "b.crt");
    assert_eq!(b.status, Status::Unrenewable);
    assert_eq!(
        b.reason.as_deref(),
        Some(
            format!(
                "key missing: no matching key file (x.key, x-key.pem) beside the certificate; also: CA key not on this host: {} has no key beside it (renew on the host that holds the CA key, or copy the key here)",
                dir.path().join("ca.crt").display()
            )
            .as_str()
        )
    );
    // a.crt has its key: only the CA's is said.
    let a = item(&inv, &p, "a.crt");
    let why = a.reason.as_deref().unwrap_or("");
    assert!(
        why.starts_with("CA key not on this host") && !why.contains("also"),
        "{why}"
    );
}

#[test]
fn a_ca_with_its_key_is_due_in_its_own_window_and_only_reported_with_renewal_off() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    // The CA ends 2035-01-01: 214 days left, inside a year, outside the 180-day warning.
    let now = datetime!(2034-06-01 0:00 UTC);
    let on = Policy {
        ca_renew_before_days: Some(365),
        ..policy(None)
    };
    let ca = item(&inv, &plan(&inv, Served::new(), &on, now), "ca.crt").clone();
    assert_eq!(
        (ca.status, ca.renews(), ca.renewable),
        (Status::Due, true, true)
    );
    assert_eq!(ca.renews_on, None, "due: no date to wait for");
    // A year and a half earlier it is ok, and says when it will be renewed.
    let early = item(
        &inv,
        &plan(&inv, Served::new(), &on, datetime!(2033-01-01 0:00 UTC)),
        "ca.crt",
    )
    .clone();
    assert_eq!((early.status, early.renews()), (Status::Ok, false));
    assert_eq!(early.renews_on, Some(datetime!(2034-01-01 0:00 UTC)));
    // A watch may open the window later.
    let later = Policy {
        watch_ca_renew_before_days: vec![Some(100)],
        ..on.clone()
    };
    let ca = item(&inv, &plan(&inv, Served::new(), &later, now), "ca.crt").clone();
    assert_eq!((ca.status, ca.renews()), (Status::Ok, false));
    // Off: reported only, and not renewable.
    let off = item(
        &inv,
        &plan(&inv, Served::new(), &policy(None), now),
        "ca.crt",
    )
    .clone();
    assert_eq!(
        (off.status, off.renews(), off.renewable),
        (Status::Ok, false, false)
    );
    // Its key gone: in the window it cannot be renewed, and says why.
    std::fs::remove_file(dir.path().join("ca.key")).unwrap();
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    let ca = item(&inv, &plan(&inv, Served::new(), &on, now), "ca.crt").clone();
    assert_eq!(ca.status, Status::Unrenewable);
    let why = ca.reason.unwrap_or_default();
    assert!(
        why.starts_with("CA expires within 214 days") && why.contains("CA key not on this host"),
        "{why}"
    );
}

#[test]
fn a_ca_whose_life_is_not_longer_than_the_window_is_never_due_by_it() {
    // A one-year self-signed CA with its key (openssl req -x509 -days 365): inside a
    // one-year window from its first day, it would be due every day and fail every pass.
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2030, 1, 1);
    params.not_after = rcgen::date_time_ymd(2031, 1, 1);
    let ca = params.self_signed(&key).unwrap();
    std::fs::write(dir.path().join("stranger.crt"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("stranger.key"), key.serialize_pem()).unwrap();
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    let on = Policy {
        ca_renew_before_days: Some(365),
        ..policy(None)
    };
    let early = plan(&inv, Served::new(), &on, datetime!(2030-02-01 0:00 UTC));
    let it = item(&inv, &early, "stranger.crt");
    assert_eq!(
        (it.status, it.wanted(), it.renewable),
        (Status::Ok, false, false)
    );
    // Within ca_warning_days it is reported, with why it is not renewed.
    let late = plan(&inv, Served::new(), &on, datetime!(2030-12-01 0:00 UTC));
    let it = item(&inv, &late, "stranger.crt");
    assert_eq!(it.status, Status::Unrenewable);
    let why = it.reason.as_deref().unwrap_or_default();
    assert!(
        why.contains("not longer than the 365-day CA renewal window"),
        "{why}"
    );
}

#[test]
fn missing_names_are_planned_for_addition_only_when_renewed_and_the_watch_or_default_says_so() {
    use crate::served::{Name, Use};
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let a = (inv.certs.iter())
        .position(|c| c.path.ends_with("a.crt"))
        .unwrap();
    let served = |name: &str| Use {
        name: Name::parse(name).unwrap(),
        flag: "--advertise-client-urls".into(),
        file: "/etc/kubernetes/manifests/etcd.yaml".into(),
    };
    // a.crt names a.test: the address is missing, the name it has is not.
    let uses = Served::from([(a, vec![served("10.0.0.9"), served("A.TEST")])]);
    let due = datetime!(2029-12-25 0:00 UTC);
    let off = plan(&inv, uses.clone(), &policy(None), due);
    let it = item(&inv, &off, "a.crt");
    let missing: Vec<String> = it.names_missing.iter().map(|u| u.name.san()).collect();
    assert_eq!(missing, ["IP:10.0.0.9"]);
    assert!(
        it.renews() && it.add_names.is_empty(),
        "off by default: {it:?}"
    );
    let on = Policy {
        add_missing_names: true,
        ..policy(None)
    };
    let it = item(&inv, &plan(&inv, uses.clone(), &on, due), "a.crt").clone();
    assert_eq!(it.add_names, [Name::parse("10.0.0.9").unwrap()]);
    // The watch's own setting wins over the global one.
    let watch_off = Policy {
        watch_add_missing_names: vec![Some(false)],
        ..on.clone()
    };
    assert!(
        item(&inv, &plan(&inv, uses.clone(), &watch_off, due), "a.crt")
            .add_names
            .is_empty()
    );
    // Not due: reported, nothing to add until it is renewed.
    let early = plan(&inv, uses.clone(), &on, datetime!(2029-06-01 0:00 UTC));
    let it = item(&inv, &early, "a.crt");
    assert!(!it.renews() && it.add_names.is_empty() && it.names_missing.len() == 1);
}

/// An inventory built in memory, nothing read from disk: a CA with its key, `a.crt` with
/// its key and `b.crt` without, both issued for 2029 (ending 2030-01-01) by the CA.
fn in_memory() -> Inventory {
    use crate::format::cert::CertFacts;
    use crate::format::key::{self, Encoding};
    use crate::inventory::{Cert, IssuerLink, KeyFile, KeyLink};
    let dir = Path::new("/nowhere");
    let key_file = |name: &str, k: &rcgen::KeyPair| KeyFile {
        path: dir.join(name),
        info: key::from_pem("PRIVATE KEY", &[], &k.serialize_der()).unwrap(),
    };
    let cert = |name: &str, der: &[u8], key, issuer| Cert {
        path: dir.join(name),
        real_path: None,
        aliases: Vec::new(),
        index: 0,
        certs_in_file: 1,
        encoding: Encoding::Pem,
        watch: 0,
        facts: CertFacts::parse(der.to_vec()).unwrap(),
        key,
        issuer,
        kubeconfig: None,
    };
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.not_after = rcgen::date_time_ymd(2035, 1, 1);
    let ca_der = ca.self_signed(&ca_key).unwrap().der().to_vec();
    let mut keys = vec![key_file("ca.key", &ca_key)];
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut certs = vec![cert(
        "ca.crt",
        &ca_der,
        KeyLink::Matched(0),
        IssuerLink::SelfSigned,
    )];
    for (name, with_key) in [("a", true), ("b", false)] {
        let k = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![format!("{name}.test")]).unwrap();
        p.not_before = rcgen::date_time_ymd(2029, 1, 1);
        p.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let der = p.signed_by(&k, &issuer).unwrap().der().to_vec();
        let link = match with_key {
            true => {
                keys.push(key_file(&format!("{name}.key"), &k));
                KeyLink::Matched(keys.len() - 1)
            }
            false => KeyLink::Missing,
        };
        certs.push(cert(
            &format!("{name}.crt"),
            &der,
            link,
            IssuerLink::Found(0),
        ));
    }
    Inventory {
        certs,
        keys,
        roots: vec![dir.to_path_buf()],
        ..Inventory::default()
    }
}

#[test]
fn a_leaf_is_ok_due_or_expired_by_the_window_and_renewed_as_forced_or_named() {
    // a.crt (its key here) and b.crt (no key) end 2030-01-01; the window is 15 days.
    let inv = in_memory();
    let dir = Path::new("/nowhere");
    let at = |policy: &Policy, now| plan(&inv, Served::new(), policy, now);
    let state = |p: &Plan, file| {
        let i = item(&inv, p, file);
        (i.status, i.renews())
    };
    let before = datetime!(2029-12-01 0:00 UTC);
    let inside = datetime!(2029-12-20 0:00 UTC);
    let after = datetime!(2030-01-02 0:00 UTC);
    let p = at(&policy(None), before);
    assert_eq!(state(&p, "a.crt"), (Status::Ok, false));
    assert_eq!(
        state(&p, "b.crt"),
        (Status::Unrenewable, false),
        "no key here"
    );
    let p = at(&policy(None), inside);
    assert_eq!(state(&p, "a.crt"), (Status::Due, true));
    assert_eq!(state(&p, "b.crt"), (Status::Unrenewable, false));
    let p = at(&policy(None), after);
    assert_eq!(state(&p, "a.crt"), (Status::Expired, true));
    // Forced: renewed though not due, and only what is named.
    let a = dir.join("a.crt");
    let forced = Policy {
        force: true,
        only: Some(vec![a.clone()]),
        ..policy(None)
    };
    let p = at(&forced, before);
    assert_eq!(state(&p, "a.crt"), (Status::Ok, true));
    assert!(
        !item(&inv, &p, "ca.crt").renews(),
        "a CA is never forced along"
    );
    // Named without force: a due leaf outside the list waits for a whole pass.
    let elsewhere = Policy {
        only: Some(vec![dir.join("b.crt")]),
        ..policy(None)
    };
    let p = at(&elsewhere, inside);
    assert_eq!(state(&p, "a.crt"), (Status::Due, false));
    let named = Policy {
        only: Some(vec![a]),
        ..policy(None)
    };
    assert_eq!(state(&at(&named, inside), "a.crt"), (Status::Due, true));
}

#[test]
fn a_renewal_put_off_to_its_step_is_renewed_there_alone() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    // Inside the leaves' window (they end 2030-01-01), far from the CA's end.
    let now = datetime!(2029-12-25 0:00 UTC);
    let mut p = plan(&inv, Served::new(), &policy(None), now);
    let idx = |file: &str| item(&inv, &p, file).cert;
    let (a, b, ca) = (idx("a.crt"), idx("b.crt"), idx("ca.crt"));
    let verdicts = |p: &Plan| [a, b, ca].map(|i| p.items[i].verdict);
    // b.crt's key is not on the node.
    assert_eq!(
        verdicts(&p),
        [Verdict::Renews, Verdict::Blocked, Verdict::Left]
    );
    // Renewed in the renew stage, a.crt is not renewed at a step.
    let not_here = p.at_step(&[]);
    assert_eq!(
        verdicts(&not_here),
        [
            Verdict::PutOff(PutOff::RenewStage),
            Verdict::Blocked,
            Verdict::Left
        ]
    );
    assert!(not_here.renewals().next().is_none());
    // Put off to its step (only a renewal is): wanted, not renewed in the renew stage.
    for i in [a, b, ca] {
        p.items[i].put_off(PutOff::AtStep);
    }
    assert_eq!(
        verdicts(&p),
        [
            Verdict::PutOff(PutOff::AtStep),
            Verdict::Blocked,
            Verdict::Left
        ]
    );
    assert!(p.items[a].wanted() && !p.items[a].renews());
    assert!(p.renewals().next().is_none());
    // At its step, it alone is renewed.
    let at = p.at_step(&[a, b]);
    let renewed: Vec<usize> = at.renewals().map(|i| i.cert).collect();
    assert_eq!(renewed, [a]);
    assert_eq!(
        verdicts(&at),
        [Verdict::Renews, Verdict::Blocked, Verdict::Left]
    );
}

#[test]
fn the_back_off_puts_off_a_renewal_it_holds_unless_it_is_named_or_forced() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let now = datetime!(2029-12-25 0:00 UTC);
    let unheld = plan(&inv, Served::new(), &policy(None), now);
    let a = item(&inv, &unheld, "a.crt").cert;
    let a_path = inv.certs[a].path.clone();
    // Rolled back an hour ago, retried no sooner than two hours after.
    let mut ledger = backoff::Ledger::default();
    let two_hours = std::time::Duration::from_secs(7200);
    ledger.rolled_back(&a_path, now - Duration::hours(1), two_hours);
    let held = |policy: Policy, at: OffsetDateTime| plan(&inv, Served::new(), &policy, at);
    let with = |change: &dyn Fn(&mut Policy)| {
        let mut p = policy(None);
        p.back_off = ledger.clone();
        change(&mut p);
        p
    };
    let p = held(with(&|_| {}), now);
    assert_eq!(p.items[a].verdict, Verdict::PutOff(PutOff::BackOff));
    assert!(p.items[a].wanted() && p.renewals().next().is_none());
    // Its next attempt reached, it is renewed.
    let later = held(with(&|_| {}), now + Duration::hours(1));
    assert_eq!(later.items[a].verdict, Verdict::Renews);
    // Named on the command line, or forced, it is tried now.
    let named = held(with(&|p| p.only = Some(vec![a_path.clone()])), now);
    assert_eq!(named.items[a].verdict, Verdict::Renews);
    let forced = held(with(&|p| p.force = true), now);
    assert_eq!(forced.items[a].verdict, Verdict::Renews);
}
