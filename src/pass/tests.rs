//! The whole pass (lock, scan, plan, renew, restart through the gate, alarms, records) in
//! each of its modes, against `FakeUnits` and a gate that records what it was asked: what
//! a mode promises to write, restart and owe is held here without systemd or etcd (the
//! integration tests hold the same against the real ones).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use time::{Duration as Span, OffsetDateTime};

use super::*;
use crate::alarms::AlarmKind;
use crate::plan::{PutOff, Verdict};
use crate::renew::CaAgreement;
use crate::restart::Hold;
use crate::restart::fake::FakeUnits;
use crate::restart::recording_gate::RecordingGate as Recorder;

/// A node whose one watch holds a CA with its key and a leaf issued 355 days ago for a
/// year (due in ten days), restarting `kube-apiserver.service`.
struct Node {
    _dir: tempfile::TempDir,
    settings: Settings,
    leaf: PathBuf,
}

fn node() -> Node {
    node_with_ca(3000)
}

/// [`node`], its CA ending in `ca_days_left` days.
fn node_with_ca(ca_days_left: i64) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = d.join("pki");
    fs::create_dir_all(&pki).unwrap();
    let now = OffsetDateTime::now_utc();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    (ca.not_before, ca.not_after) = (now - Span::days(400), now + Span::days(ca_days_left));
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    fs::write(pki.join("ca.crt"), ca_cert.pem()).unwrap();
    fs::write(pki.join("ca.key"), ca_key.serialize_pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["apiserver.test".to_string()]).unwrap();
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    (leaf.not_before, leaf.not_after) = (now - Span::days(355), now + Span::days(10));
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    fs::write(pki.join("apiserver.crt"), cert.pem()).unwrap();
    fs::write(pki.join("apiserver.key"), key.serialize_pem()).unwrap();
    let toml = format!(
        "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n\
         [[watch]]\npath = \"{d}/pki\"\nunits = [\"kube-apiserver.service\"]\n\
         static_pods = []\n",
        d = d.display()
    );
    let settings = Settings::from_toml(&toml, None).unwrap();
    Node {
        leaf: pki.join("apiserver.crt"),
        _dir: dir,
        settings,
    }
}

/// A CA agreement between this node and itself: each re-issue is its own, agreed at once.
/// It notes each CA it was asked to agree on and each adoption, by path and old serial.
#[derive(Debug, Default)]
struct Agreeing {
    agreed: Mutex<Vec<PathBuf>>,
    adopted: Mutex<Vec<String>>,
}

impl CaAgreement for Agreeing {
    fn agree(
        &self,
        ca: &crate::inventory::Cert,
        mine: Vec<u8>,
        _fresh: &[crate::renew::Fresh],
    ) -> anyhow::Result<Vec<u8>> {
        self.agreed.lock().unwrap().push(ca.path.clone());
        Ok(mine)
    }

    fn adopted<'a>(
        &'a self,
        old: &'a crate::format::cert::CertFacts,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<String>> + Send + 'a>>
    {
        Box::pin(async move {
            self.adopted.lock().unwrap().push(old.serial.clone());
            Ok("recorded".into())
        })
    }
}

/// Runs one pass in `mode` through `gate`, with `units` for systemd.
async fn pass(n: &Node, mode: Mode, units: &FakeUnits, gate: &mut Recorder) -> PassReport {
    pass_agreeing(n, mode, units, gate, &Arc::default()).await
}

/// [`pass`], its CAs agreed on through `agreement`.
async fn pass_agreeing(
    n: &Node,
    mode: Mode,
    units: &FakeUnits,
    gate: &mut Recorder,
    agreement: &Arc<Agreeing>,
) -> PassReport {
    let opts = PassOptions {
        mode,
        ..PassOptions::default()
    };
    let units = units.clone();
    let agreement = agreement.clone();
    let cas: crate::renew::CaAgreements = Arc::new(move |_: &crate::components::NodeReading| {
        agreement.clone() as Arc<dyn CaAgreement>
    });
    run(
        &n.settings,
        &opts,
        async move || Ok(units),
        Seams {
            gate: gate.clone(),
            cas,
        },
        Arc::new(Vec::new()),
    )
    .await
    .unwrap()
}

fn owed_units(state: &Path) -> Vec<String> {
    owed::load(state).unwrap().units
}

fn kinds(r: &PassReport) -> Vec<AlarmKind> {
    r.desired_alarms.iter().map(|a| a.kind).collect()
}

#[tokio::test]
async fn a_due_leaf_is_renewed_and_its_unit_restarted_through_the_gate() {
    let n = node();
    let before = fs::read(&n.leaf).unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder::default();
    let r = pass(&n, Mode::Run, &units, &mut gate).await;
    assert_eq!(r.renewals.len(), 1, "{:?}", r.renewals);
    assert!(r.renewals[0].renewed(), "{:?}", r.renewals[0].result);
    assert_ne!(fs::read(&n.leaf).unwrap(), before);
    let called: Vec<String> = units.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(called, ["kube-apiserver.service"]);
    assert_eq!(
        gate.log(),
        [
            "before kube-apiserver.service",
            "after kube-apiserver.service ok=true",
            "finish"
        ]
    );
    assert!(r.desired_alarms.is_empty(), "{:?}", r.desired_alarms);
    assert!(r.success());
    assert!(owed_units(&n.settings.state_dir).is_empty());
}

#[tokio::test]
async fn a_restart_the_gate_holds_stays_owed_and_raises_services_not_updated() {
    let n = node();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder {
        refuse_every: Some(Hold::Refused("held by node-b".into())),
        ..Recorder::default()
    };
    let r = pass(&n, Mode::Run, &units, &mut gate).await;
    assert!(r.renewals[0].renewed());
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    let held: Vec<String> = r.restarts.held.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(held, ["kube-apiserver.service"]);
    assert_eq!(r.restarts.held[0].1, Hold::Refused("held by node-b".into()));
    assert_eq!(kinds(&r), [AlarmKind::ServicesNotUpdated]);
    assert!(!r.success());
    assert_eq!(
        owed_units(&n.settings.state_dir),
        ["kube-apiserver.service"]
    );
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_asks_neither_gate_nor_systemd() {
    let n = node();
    let before = fs::read(&n.leaf).unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder::default();
    let r = pass(&n, Mode::DryRun, &units, &mut gate).await;
    assert_eq!(fs::read(&n.leaf).unwrap(), before);
    assert!(
        !n.settings.state_dir.exists(),
        "a dry run made the state directory"
    );
    assert!(units.calls().is_empty());
    assert!(gate.log().is_empty());
    assert!(r.alarm_events.is_empty());
    let due = r.plan.items.iter().filter(|i| i.wanted()).count();
    assert_eq!(due, 1, "{:?}", r.plan.items);
    let not: Vec<String> = r
        .restarts
        .not_restarted
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(not, ["kube-apiserver.service"]);
}

/// A leaf whose last renewal was rolled back is held by the back-off: the plan says so
/// (put off, not renewed), a dry run and a pass renew nothing and restart nothing for it,
/// and each says why.
#[tokio::test]
async fn a_renewal_the_back_off_holds_is_put_off_in_the_plan_and_restarts_nothing() {
    let n = node();
    let before = fs::read(&n.leaf).unwrap();
    let mut ledger = crate::plan::backoff::Ledger::default();
    let now = OffsetDateTime::now_utc();
    ledger.rolled_back(&n.leaf, now, std::time::Duration::from_secs(3600));
    fs::create_dir_all(&n.settings.state_dir).unwrap();
    crate::plan::backoff::save(&n.settings.state_dir, &ledger).unwrap();
    for mode in [Mode::DryRun, Mode::Run] {
        let units = FakeUnits::new().ok("kube-apiserver.service");
        let mut gate = Recorder::default();
        let r = pass(&n, mode, &units, &mut gate).await;
        let verdicts: Vec<Verdict> = r.plan.items.iter().map(|i| i.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::PutOff(PutOff::BackOff), Verdict::Left],
            "{mode:?}"
        );
        let held: Vec<&str> = (r.renewals.iter())
            .filter_map(|o| match &o.result {
                renew::RenewResult::HeldBack { reason } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            matches!(&held[..], [why] if why.contains("next attempt")),
            "{mode:?}: {:?}",
            r.renewals
        );
        assert!(
            r.restarts.not_restarted.is_empty(),
            "{mode:?}: {:?}",
            r.restarts
        );
        assert!(units.calls().is_empty(), "{mode:?}: {:?}", units.calls());
        assert_eq!(fs::read(&n.leaf).unwrap(), before, "{mode:?}");
    }
}

/// A CA in its last year is re-issued through the agreement the pass is handed, and its
/// adoption recorded once it stayed installed; a dry run asks the agreement nothing. No
/// etcd is dialled: the seam is the test's.
#[tokio::test]
async fn a_ca_is_reissued_through_the_agreement_handed_in_and_its_adoption_recorded() {
    let n = node_with_ca(100);
    let ca = n.leaf.with_file_name("ca.crt");
    let old = crate::format::cert::CertFacts::first_in_pem(&fs::read(&ca).unwrap()).unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let agreement = Arc::new(Agreeing::default());

    let r = pass_agreeing(
        &n,
        Mode::DryRun,
        &units,
        &mut Recorder::default(),
        &agreement,
    )
    .await;
    let wanted: Vec<bool> = r.plan.items.iter().map(|i| i.wanted() && i.is_ca).collect();
    assert!(wanted.contains(&true), "the CA is due: {:?}", r.plan.items);
    assert!(agreement.agreed.lock().unwrap().is_empty());
    assert!(agreement.adopted.lock().unwrap().is_empty());

    let r = pass_agreeing(&n, Mode::Run, &units, &mut Recorder::default(), &agreement).await;
    let ca_renewal = r
        .renewals
        .iter()
        .find(|o| o.path == ca)
        .expect("the CA's outcome");
    assert!(ca_renewal.renewed(), "{:?}", ca_renewal.result);
    let new = crate::format::cert::CertFacts::first_in_pem(&fs::read(&ca).unwrap()).unwrap();
    assert_ne!(new.serial, old.serial);
    assert_eq!(
        new.ski(),
        old.ski(),
        "re-issued with its key and identifier"
    );
    assert_eq!(*agreement.agreed.lock().unwrap(), [ca]);
    assert_eq!(*agreement.adopted.lock().unwrap(), [old.serial]);
    assert!(r.success(), "{:?}", r.desired_alarms);
}

#[tokio::test]
async fn no_restart_renews_and_forgives_this_passs_restarts_only() {
    let n = node();
    // An earlier pass owes kubelet a restart: --no-restart keeps that debt.
    let earlier = Owed {
        units: vec!["kubelet.service".into()],
        ..Owed::default()
    };
    fs::create_dir_all(&n.settings.state_dir).unwrap();
    owed::save(&n.settings.state_dir, &earlier).unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder::default();
    let r = pass(&n, Mode::NoRestart, &units, &mut gate).await;
    assert!(r.renewals[0].renewed());
    assert!(units.calls().is_empty());
    assert!(gate.log().is_empty());
    assert_eq!(owed_units(&n.settings.state_dir), ["kubelet.service"]);
}

fn by_hand_units(state: &Path) -> Vec<String> {
    let record = restart::by_hand::load(state).unwrap();
    record.units.into_iter().map(|b| b.name).collect()
}

/// `--no-restart` owes its own restarts by hand: no pass makes them, and the first pass
/// after the unit started again forgets them. A corrupt record is set aside, not in the way.
#[tokio::test]
async fn no_restart_owes_its_own_restarts_by_hand_until_the_unit_starts_again() {
    let n = node();
    let state = &n.settings.state_dir;
    fs::create_dir_all(state).unwrap();
    fs::write(state.join("restarts-by-hand.json"), "{ not json").unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder::default();
    let r = pass(&n, Mode::NoRestart, &units, &mut gate).await;
    assert!(r.renewals[0].renewed());
    assert_eq!(by_hand_units(state), ["kube-apiserver.service"]);
    assert!(owed_units(state).is_empty(), "owed by a pass too");
    let aside = fs::read_dir(state).unwrap().flatten();
    let aside = aside.map(|e| e.file_name().to_string_lossy().into_owned());
    assert!(
        aside
            .into_iter()
            .any(|f| f.starts_with("restarts-by-hand.json.corrupt-"))
    );
    // A pass with nothing due restarts nothing, and the debt stays.
    let _ = pass(&n, Mode::Run, &units, &mut gate).await;
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    assert_eq!(by_hand_units(state), ["kube-apiserver.service"]);
    // Restarted by the operator: the next pass forgets it.
    let timeout = std::time::Duration::from_secs(1);
    let mode = restart::RestartMode::Restart;
    assert!(
        units
            .restart("kube-apiserver.service", mode, timeout)
            .await
            .ok
    );
    let _ = pass(&n, Mode::Run, &units, &mut gate).await;
    assert!(by_hand_units(state).is_empty());
    assert!(!state.join("restarts-by-hand.json").exists());
}

#[tokio::test]
async fn deferred_renews_and_owes_its_restarts_to_the_next_pass() {
    let n = node();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let mut gate = Recorder::default();
    let r = pass(&n, Mode::Deferred, &units, &mut gate).await;
    assert!(r.renewals[0].renewed());
    assert!(units.calls().is_empty());
    assert!(gate.log().is_empty());
    assert_eq!(
        owed_units(&n.settings.state_dir),
        ["kube-apiserver.service"]
    );
    // The next pass, in Run mode, restarts what was owed though nothing is due now.
    let r = pass(&n, Mode::Run, &units, &mut gate).await;
    assert!(r.renewals.is_empty(), "{:?}", r.renewals);
    let called: Vec<String> = units.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(called, ["kube-apiserver.service"]);
    assert!(owed_units(&n.settings.state_dir).is_empty());
}

/// A dry run says what the pass would do: a static pod the gate would start without the lock
/// is said held when the container runtime cannot say none of it runs, as the pass holds it;
/// a unit is not the runtime's to say.
#[tokio::test]
async fn a_dry_run_holds_a_static_pods_own_start_the_runtime_cannot_clear() {
    use crate::restart::step::Target;
    let d = tempfile::tempdir().unwrap();
    let toml = format!(
        "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n[[watch]]\npath = \"{d}/pki\"\n",
        d = d.path().display()
    );
    let settings = Settings::from_toml(&toml, None).unwrap();
    let sock = d.path().join("containerd.sock");
    let endpoint = format!("--container-runtime-endpoint=unix://{}", sock.display());
    let node = crate::restart::cri::tests::kubelet(&["/usr/bin/kubelet", &endpoint]);
    let why = super::own_start_held(&settings, &node, &Target::Pod("etcd".into()))
        .await
        .expect("held");
    assert!(
        why.starts_with(&format!(
            "the container runtime at {} did not answer",
            sock.display()
        )) && why.ends_with("is started without the restart lock"),
        "{why}"
    );
    let unit = Target::Unit("etcd.service".into());
    assert_eq!(super::own_start_held(&settings, &node, &unit).await, None);
}

/// `renew PATH` reads the active alarms once, as a whole pass does: a corrupt record is set
/// aside and the pass goes on to its alarms, the renewal and its restart done.
#[tokio::test]
async fn a_pass_limited_to_one_file_sets_a_corrupt_alarm_record_aside_and_goes_on() {
    let n = node();
    let state = &n.settings.state_dir;
    fs::create_dir_all(state).unwrap();
    fs::write(
        state.join("alarms.json"),
        b"{\"version\": 1, \"alarms\": [{\"ki",
    )
    .unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let opts = PassOptions {
        only: Some(vec![n.leaf.clone()]),
        ..PassOptions::default()
    };
    let cas: crate::renew::CaAgreements = Arc::new(|_: &crate::components::NodeReading| {
        Arc::new(Agreeing::default()) as Arc<dyn CaAgreement>
    });
    let seams = Seams {
        gate: Recorder::default(),
        cas,
    };
    let r = run(
        &n.settings,
        &opts,
        async || Ok(units),
        seams,
        Arc::default(),
    )
    .await
    .expect("the pass goes on");
    assert!(r.renewals[0].renewed(), "{:?}", r.renewals);
    assert!(r.success(), "{:?}", r.desired_alarms);
    let aside: Vec<String> = (fs::read_dir(state).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("alarms.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
}

/// A corrupt record of the restarts owed by hand is kept aside as the pass begins, and that
/// pass reports it (an error of its scan), as it reports the other records kept aside.
#[tokio::test]
async fn a_corrupt_by_hand_record_is_reported_by_the_pass_that_keeps_it_aside() {
    let n = node();
    let state = &n.settings.state_dir;
    fs::create_dir_all(state).unwrap();
    fs::write(state.join(restart::by_hand::RECORD), b"{\"restarts\": [").unwrap();
    let units = FakeUnits::new().ok("kube-apiserver.service");
    let r = pass(&n, Mode::Run, &units, &mut Recorder::default()).await;
    let errors: Vec<String> = (r.inventory.errors.iter())
        .map(|e| e.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("restarts-by-hand.json.corrupt-")),
        "{errors:?}"
    );
    assert!(!r.success(), "an error until the operator removes it");
}
