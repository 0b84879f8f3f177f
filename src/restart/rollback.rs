//! The roll-back policy: when a service does not come back on its new certificate (or its
//! endpoint keeps serving the old one), the changes of its watches get their previous
//! certificate and key back, and the service is started again. The old certificate is still
//! valid for days; a dead service is worse.

use std::path::PathBuf;

use anyhow::Context;

use super::{RestartMode, UnitControl, UnitRestart, restart_units, static_pods, targets};
use crate::config::Settings;
use crate::renew::RenewOutcome;
use crate::renew::txn::{self, Change};

/// What a roll-back did.
#[derive(Debug, Default)]
pub struct RolledBack {
    /// One line per certificate restored (or not) and per service started again.
    pub lines: Vec<String>,
    /// The certificates put back to their previous version.
    pub restored: Vec<PathBuf>,
    /// Units still not running after the roll-back.
    pub units_down: Vec<String>,
    /// Static pods still not back after the roll-back.
    pub pods_down: Vec<String>,
}

/// The changes whose watch restarts one of the failed units or static pods.
pub fn to_restore(
    settings: &Settings,
    changes: &[Change],
    renewals: &[RenewOutcome],
    failed_units: &[String],
    failed_pods: &[String],
) -> Vec<Change> {
    let watch_of = |c: &Change| {
        settings.watch_for(&c.cert).or_else(|| {
            // A symlinked certificate was written at its target: the link's watch owns it.
            renewals
                .iter()
                .find(|r| std::fs::canonicalize(&r.path).is_ok_and(|p| p == c.cert))
                .and_then(|r| settings.watches.get(r.watch))
        })
    };
    changes
        .iter()
        .filter(|c| {
            watch_of(c).is_some_and(|w| {
                w.units.iter().any(|u| failed_units.contains(u))
                    || w.static_pods.iter().any(|p| failed_pods.contains(p))
            })
        })
        .cloned()
        .collect()
}

/// Restores `changes` and starts the failed units and static pods again.
pub async fn roll_back<C: UnitControl>(
    settings: &Settings,
    ctrl: Option<&C>,
    changes: Vec<Change>,
    failed_units: &[String],
    failed_pods: &[String],
) -> anyhow::Result<RolledBack> {
    let mut out = restore(changes).await?;
    let again: Vec<UnitRestart> = match ctrl {
        // The unit we broke must run again: start it even though it failed.
        Some(ctrl) if !failed_units.is_empty() => {
            restart_units(
                ctrl,
                failed_units,
                RestartMode::Restart,
                settings.restart_timeout,
            )
            .await
        }
        _ => Vec::new(),
    };
    for r in &again {
        let how = if r.ok {
            "active again"
        } else {
            r.detail.as_str()
        };
        out.lines.push(format!("{} after rollback: {how}", r.unit));
    }
    let again_pods = static_pods::restart(
        &settings.state_dir,
        &targets::manifests(settings, failed_pods),
        settings.static_pod_wait,
    )
    .await;
    for r in &again_pods {
        out.lines
            .push(format!("static pod {} after rollback: {}", r.pod, r.detail));
    }
    // What is on disk is the old pair again: nothing to carry over unless a service is
    // still down.
    out.units_down = failed_units
        .iter()
        .filter(|u| again.iter().any(|r| r.unit == **u && !r.ok))
        .cloned()
        .collect();
    out.pods_down = failed_pods
        .iter()
        .filter(|p| again_pods.iter().any(|r| r.pod == **p && !r.ok))
        .cloned()
        .collect();
    Ok(out)
}

/// Puts the previous certificate and key of each change back, one line per certificate.
async fn restore(changes: Vec<Change>) -> anyhow::Result<RolledBack> {
    let restored = tokio::task::spawn_blocking(move || txn::roll_back(&changes))
        .await
        .context("the rollback worker thread failed")?;
    let mut out = RolledBack::default();
    for (path, r) in restored {
        match r {
            Ok(()) => {
                tracing::warn!(path = %path.display(), "rolled back to the previous certificate");
                let line = format!("{} rolled back to the previous certificate", path.display());
                out.lines.push(line);
                out.restored.push(path);
            }
            Err(e) => {
                tracing::error!(path = %path.display(), "rollback failed: {e:#}");
                let line = format!("{} could not be rolled back: {e:#}", path.display());
                out.lines.push(line);
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
        };
        let changes = [change("etcd/peer.crt"), change("pki/apiserver.crt")];
        let units = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            to_restore(&settings, &changes, &[], &units(&["etcd.service"]), &[]),
            [change("etcd/peer.crt")]
        );
        assert_eq!(
            to_restore(&settings, &changes, &[], &[], &units(&["kube-apiserver"])),
            [change("pki/apiserver.crt")]
        );
        assert!(to_restore(&settings, &changes, &[], &units(&["other.service"]), &[]).is_empty());
    }
}
