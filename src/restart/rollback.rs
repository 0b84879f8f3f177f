//! The roll-back policy: when a service does not come back on its new certificate (or its
//! endpoint keeps serving the old one), the changes of its watches get their previous
//! certificate and key back, and the service is started again. The old certificate is still
//! valid for days; a dead service is worse.

use std::path::PathBuf;

use anyhow::Context;

use super::sequence::{self, Gate, Hold, Restarter, Undone, Ungated};
use super::step::{Step, Target};
use super::{RestartMode, UnitControl, UnitRestart, static_pods, targets};
use crate::components::NodeReading;
use crate::config::Settings;
use crate::format::cert::CertFacts;
use crate::format::kubeconfig::{Kubeconfig, decode_data};
use crate::renew::RenewOutcome;
use crate::renew::pending::{self, Change};

/// What a roll-back did.
#[derive(Debug, Default)]
pub struct RolledBack {
    /// Per certificate restored (or not) and per service started again, what was done.
    pub undone: Vec<Undone>,
    /// The certificates put back to their previous version.
    pub restored: Vec<PathBuf>,
    /// The certificates that could not be put back, and why (the new pair stays).
    pub not_restored: Vec<(PathBuf, String)>,
    /// The failed units, started again on the previous certificates.
    pub units_again: Vec<UnitRestart>,
    /// The failed static pods, restarted again on the previous certificates.
    pub pods_again: Vec<static_pods::PodRestart>,
    /// Units still not running after the roll-back.
    pub units_down: Vec<String>,
    /// Static pods still not back after the roll-back.
    pub pods_down: Vec<String>,
    /// What the gate held back from being started again, with its reason.
    pub held: Vec<(Step, Hold)>,
}

/// The changes whose watch restarts one of the failed units, or one of the failed static
/// pods that reads the changed file (a pod whose files the node's reading does not all know
/// is taken to read every file of its watch): a component that did not come back takes back
/// its own files, never those of the others. Each with the components it is taken back
/// for. A CA re-issued with its own key stays: it verifies every certificate the old one
/// did, so putting it back helps nothing.
pub fn to_restore(
    settings: &Settings,
    node: &NodeReading,
    changes: &[Change],
    renewals: &[RenewOutcome],
    failed_units: &[String],
    failed_pods: &[String],
) -> Vec<(Change, Vec<Target>)> {
    let watch_of = |c: &Change| {
        settings.watch_for(&c.cert).or_else(|| {
            // A symlinked certificate was written at its target: the link's watch owns it.
            renewals
                .iter()
                .find(|r| std::fs::canonicalize(&r.path).is_ok_and(|p| p == c.cert))
                .and_then(|r| settings.watches.get(r.watch))
        })
    };
    let mut out = Vec::new();
    for c in changes {
        if c.reissued_ca.is_some() && c.key.is_none() {
            continue;
        }
        let Some(w) = watch_of(c) else { continue };
        let files: Vec<&std::path::Path> = std::iter::once(c.cert.as_path())
            .chain(c.key.as_deref())
            .collect();
        let reads =
            |pod: &&String| targets::restarted_for(node, &settings.manifests_dir, pod, &files);
        let units = (w.units.iter())
            .filter(|u| failed_units.contains(u))
            .filter(|u| targets::unit_restarted_for(node, u, &files))
            .map(|u| Target::Unit(u.clone()));
        let pods = (w.static_pods.iter())
            .filter(|p| failed_pods.contains(p))
            .filter(reads)
            .map(|p| Target::Pod(p.clone()));
        let causes: Vec<Target> = units.chain(pods).collect();
        if !causes.is_empty() {
            out.push((c.clone(), causes));
        }
    }
    out
}

/// Restores `changes` and starts the failed units and static pods again, in the restart
/// order. Those in `not_back` (their restart did not bring them back: they are down) are
/// started without asking the gate: starting what is down takes nothing down, and a member
/// that is down must never wait for the lock or the quorum gate. The others (running, but
/// on the wrong certificate) are restarted through the gate, as the restarts were.
/// The services are restarted as the restart stage's `stage` restarts them (its systemd
/// connection, waits and serving checks), in `restart` mode.
pub(crate) async fn roll_back<C: UnitControl>(
    stage: &Restarter<'_, C>,
    gate: &mut impl Gate,
    changes: Vec<Change>,
    failed_units: &[String],
    failed_pods: &[String],
    not_back: &[Target],
) -> anyhow::Result<RolledBack> {
    // The previous certificate has expired: putting it back cannot help the service, and
    // would leave an expired certificate where a valid one was. The new pair stays.
    let now = time::OffsetDateTime::now_utc();
    let (mut stale, mut fresh) = (Vec::new(), Vec::new());
    for c in changes {
        match expired_on(&c.cert_backup, now) {
            Some(on) => stale.push((c, on)),
            None => fresh.push(c),
        }
    }
    let mut out = restore(fresh).await?;
    for (c, on) in stale {
        let why = sequence::previous_expired(on);
        tracing::warn!(path = %c.cert.display(), "{why}");
        out.undone.push(Undone::PreviousExpired(c.cert.clone(), on));
        out.not_restored.push((c.cert, why));
    }
    // The unit we broke must run again: start it even though it failed. Without a systemd
    // connection there is nothing to start it with.
    let units = match stage.ctrl {
        Ok(_) => failed_units,
        Err(_) => &[],
    };
    let how = Restarter {
        ctrl: stage.ctrl.clone(),
        mode: RestartMode::Restart,
        timeout: stage.timeout,
        state_dir: stage.state_dir,
        manifests_dir: stage.manifests_dir,
        pod_wait: stage.pod_wait,
        serving: stage.serving.clone(),
        said: stage.said,
        at_step: None,
    };
    let node = &stage.serving.node;
    let steps = sequence::steps_knowing(units, failed_pods, node, stage.manifests_dir, how.said);
    let (down, running): (Vec<Step>, Vec<Step>) =
        (steps.into_iter()).partition(|s| not_back.contains(&s.target));
    let mut ran = sequence::run(&how, down, &mut Ungated).await;
    let gated = sequence::run(&how, running, gate).await;
    ran.units.extend(gated.units);
    ran.pods.extend(gated.pods);
    ran.held.extend(gated.held);
    let units = ran.units.iter().cloned().map(Undone::Unit);
    let pods = ran.pods.iter().cloned().map(Undone::Pod);
    let held =
        (ran.held.iter()).map(|(step, hold)| Undone::Held(step.target.clone(), hold.clone()));
    out.undone.extend(units.chain(pods).chain(held));
    // What is on disk is the old pair again: nothing to carry over unless a service is
    // still down, or was held back.
    out.units_down = failed_units
        .iter()
        .filter(|u| ran.units.iter().any(|r| r.unit == **u && !r.ok))
        .chain(
            failed_units
                .iter()
                .filter(|u| ran.held_units().any(|h| h == *u)),
        )
        .cloned()
        .collect();
    out.pods_down = failed_pods
        .iter()
        .filter(|p| ran.pods.iter().any(|r| r.pod == **p && !r.ok))
        .chain(
            failed_pods
                .iter()
                .filter(|p| ran.held_pods().any(|h| h == *p)),
        )
        .cloned()
        .collect();
    out.held = ran.held;
    (out.units_again, out.pods_again) = (ran.units, ran.pods);
    Ok(out)
}

/// Puts the previous certificate and key of each change back, one line per certificate.
/// When the first certificate in the PEM file `path` expired, if it has by `now`.
fn expired_on(path: &std::path::Path, now: time::OffsetDateTime) -> Option<time::OffsetDateTime> {
    let data = crate::fsutil::read(path).ok()?;
    let not_after = match CertFacts::first_in_pem(&data) {
        Ok(cert) => cert.not_after,
        Err(_) => embedded_not_after(&data)?,
    };
    (not_after < now).then_some(not_after)
}

/// The earliest end of the client certificates a kubeconfig (a kubeconfig's backup) embeds:
/// putting back such a file puts back every one of them.
fn embedded_not_after(data: &[u8]) -> Option<time::OffsetDateTime> {
    let conf = Kubeconfig::parse(data).ok()?;
    (conf.users.iter())
        .filter_map(|u| u.cert_data.as_ref())
        .filter_map(|d| decode_data(&d.text).ok())
        .filter_map(|pem| CertFacts::first_in_pem(&pem).ok())
        .map(|c| c.not_after)
        .min()
}

async fn restore(changes: Vec<Change>) -> anyhow::Result<RolledBack> {
    let restored = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        pending::roll_back(&changes)
    })
    .await
    .context("the rollback worker thread failed")?;
    let mut out = RolledBack::default();
    for (path, r) in restored {
        match r {
            Ok(()) => {
                tracing::warn!(path = %path.display(), "rolled back to the previous certificate");
                out.undone.push(Undone::Restored(path.clone()));
                out.restored.push(path);
            }
            Err(e) => {
                tracing::error!(path = %path.display(), "rollback failed: {e:#}");
                let why = format!("{e:#}");
                out.undone
                    .push(Undone::NotRestored(path.clone(), why.clone()));
                out.not_restored.push((path, why));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_changes_of_watches_with_a_failed_service_are_restored() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let toml = format!(
            "[[watch]]\npath = \"{d}/etcd\"\nunits = [\"etcd.service\"]\nstatic_pods = []\n\
             [[watch]]\npath = \"{d}/pki\"\nunits = [\"kubelet.service\"]\nstatic_pods = [\"kube-apiserver\"]\n"
        );
        let settings = Settings::from_toml(&toml, None).unwrap();
        let change = |p: &str| Change {
            cert: dir.path().join(p),
            key: None,
            cert_backup: dir.path().join("backup").join(p),
            key_backup: None,
            ..Change::default()
        };
        let changes = [change("etcd/peer.crt"), change("pki/apiserver.crt")];
        let units = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let node = NodeReading::default();
        let restore = |failed_units: &[&str], failed_pods: &[&str]| {
            let (u, p) = (units(failed_units), units(failed_pods));
            let r = to_restore(&settings, &node, &changes, &[], &u, &p);
            r.into_iter().map(|(c, _)| c).collect::<Vec<_>>()
        };
        assert_eq!(restore(&["etcd.service"], &[]), [change("etcd/peer.crt")]);
        assert_eq!(
            restore(&[], &["kube-apiserver"]),
            [change("pki/apiserver.crt")]
        );
        assert!(restore(&["other.service"], &[]).is_empty());
    }

    #[test]
    fn a_kubeconfig_backup_whose_embedded_certificate_expired_counts_as_expired() {
        use base64::Engine;
        let dir = tempfile::tempdir().unwrap();
        let conf = |ends: (i32, u8, u8)| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(ends.0, ends.1, ends.2);
            let pem = params.self_signed(&key).unwrap().pem();
            let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    \
                 client-certificate-data: {b64}\n    client-key-data: AA==\n"
            )
        };
        let now = time::macros::datetime!(2026-11-29 00:00 UTC);
        let expired = dir.path().join("expired.conf");
        std::fs::write(&expired, conf((2026, 11, 1))).unwrap();
        let valid = dir.path().join("valid.conf");
        std::fs::write(&valid, conf((2027, 11, 1))).unwrap();
        assert_eq!(
            expired_on(&expired, now),
            Some(time::macros::datetime!(2026-11-01 00:00 UTC))
        );
        assert_eq!(expired_on(&valid, now), None);
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, "neither PEM nor a kubeconfig").unwrap();
        assert_eq!(expired_on(&garbage, now), None);
    }

    /// On kubeadm's manifests a static pod that did not come back takes back the files it
    /// reads and no others: kube-apiserver's failure leaves etcd's renewed pair alone.
    #[test]
    fn a_failed_pod_of_kubeadm_takes_back_only_the_files_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let manifests = crate::test_pki::kubeadm_manifests(root);
        let toml = format!(
            "manifests_dir = \"{m}\"\n[[watch]]\npath = \"{r}/etc/kubernetes/pki\"\nunits = []\n\
             kubeconfigs = [\"{r}/etc/kubernetes/controller-manager.conf\"]\n\
             static_pods = [\"etcd\", \"kube-apiserver\", \"kube-controller-manager\", \"kube-scheduler\"]\n",
            m = manifests.display(),
            r = root.display()
        );
        let settings = Settings::from_toml(&toml, None).unwrap();
        let node = NodeReading::read(&manifests);
        let change = |p: &str| Change {
            cert: root.join("etc/kubernetes").join(p),
            key: None,
            cert_backup: root.join("backup").join(p),
            key_backup: None,
            ..Change::default()
        };
        // kubeadm's CA, which kube-apiserver reads, re-issued with its own key.
        let ca = Change {
            reissued_ca: Some(Box::new(pending::ReissuedCa {
                ca: root.join("etc/kubernetes/pki/ca.crt"),
                old_serial: "01".into(),
                old_not_after: time::OffsetDateTime::UNIX_EPOCH,
                new_serial: "02".into(),
                renewed_at: time::OffsetDateTime::UNIX_EPOCH,
            })),
            ..change("pki/ca.crt")
        };
        let changes = [
            change("pki/etcd/server.crt"),
            change("pki/etcd/peer.crt"),
            change("pki/front-proxy-client.crt"),
            change("pki/apiserver-etcd-client.crt"),
            change("controller-manager.conf"),
            ca.clone(),
        ];
        let pods = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let restored = |failed: &[&str]| -> Vec<PathBuf> {
            to_restore(&settings, &node, &changes, &[], &[], &pods(failed))
                .into_iter()
                .map(|(c, _)| c.cert)
                .collect()
        };
        let files = |p: &[&str]| -> Vec<PathBuf> {
            p.iter()
                .map(|p| root.join("etc/kubernetes").join(p))
                .collect()
        };
        assert_eq!(
            restored(&["kube-apiserver"]),
            files(&[
                "pki/front-proxy-client.crt",
                "pki/apiserver-etcd-client.crt"
            ])
        );
        // Each named by the components it goes back for, and only those.
        let both = to_restore(
            &settings,
            &node,
            &changes,
            &[],
            &[],
            &pods(&["etcd", "kube-apiserver"]),
        );
        let causes: Vec<(String, Vec<Target>)> = (both.iter())
            .map(|(c, why)| {
                let file = c.cert.strip_prefix(root).unwrap().display().to_string();
                (file, why.clone())
            })
            .collect();
        let pod = |p: &str| vec![Target::Pod(p.into())];
        assert_eq!(
            causes,
            [
                (
                    "etc/kubernetes/pki/etcd/server.crt".to_string(),
                    pod("etcd")
                ),
                ("etc/kubernetes/pki/etcd/peer.crt".to_string(), pod("etcd")),
                (
                    "etc/kubernetes/pki/front-proxy-client.crt".to_string(),
                    pod("kube-apiserver")
                ),
                (
                    "etc/kubernetes/pki/apiserver-etcd-client.crt".to_string(),
                    pod("kube-apiserver")
                ),
            ]
        );
        // The same CA re-issued with a new key is no longer the one every leaf names: it goes
        // back with what reads it.
        let rekeyed = Change {
            key: Some(root.join("etc/kubernetes/pki/ca.key")),
            ..ca
        };
        let back = to_restore(
            &settings,
            &node,
            &[rekeyed],
            &[],
            &[],
            &pods(&["kube-apiserver"]),
        );
        assert_eq!(back.len(), 1, "{back:?}");
        assert_eq!(
            restored(&["etcd"]),
            files(&["pki/etcd/server.crt", "pki/etcd/peer.crt"])
        );
        assert_eq!(
            restored(&["kube-controller-manager"]),
            files(&["controller-manager.conf"])
        );
        assert_eq!(restored(&["kube-scheduler"]), Vec::<PathBuf>::new());
        // A pod whose manifest the reading does not know takes back all of its watch's but
        // the CA re-issued with its own key.
        let unknown = to_restore(
            &settings,
            &NodeReading::default(),
            &changes,
            &[],
            &[],
            &pods(&["kube-scheduler"]),
        );
        assert_eq!(unknown.len(), changes.len() - 1);
        assert!(unknown.iter().all(|(c, _)| c.reissued_ca.is_none()));
    }
}
