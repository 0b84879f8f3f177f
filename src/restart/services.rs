//! The restart stage of a pass: every unit and static pod owed a restart, one after the
//! other; the served certificates checked; a roll-back where a service did not come back;
//! what is still owed recorded for the next pass.

use std::path::PathBuf;

use super::endpoints::{self, EndpointCheck};
use super::owed::{self, Owed};
use super::static_pods::{self, PodRestart};
use super::{RestartMode, UnitControl, UnitRestart, expect, restart_units, rollback, targets};
use crate::config::{RestartPolicy, Settings};
use crate::inventory::Inventory;
use crate::renew::RenewOutcome;

/// What the restart stage did.
#[derive(Debug, Default)]
pub struct RestartOutcomes {
    /// One per unit restarted.
    pub units: Vec<UnitRestart>,
    /// One per static pod restarted.
    pub pods: Vec<PodRestart>,
    /// One per `verify_endpoints` entry checked after the restarts.
    pub endpoints: Vec<EndpointCheck>,
    /// Units and static pods owed a restart that this pass did not restart (`--no-restart`,
    /// dry run).
    pub not_restarted: Vec<String>,
    /// What `rollback_on_failure` restored, and how the services did afterwards.
    pub rolled_back: Vec<String>,
    /// The certificates `rollback_on_failure` put back to their previous version.
    pub restored: Vec<PathBuf>,
}

impl RestartOutcomes {
    /// Outcomes of a pass that restarts nothing: the owed services are listed as not restarted.
    pub fn skipped(owed: &Owed) -> RestartOutcomes {
        let pods = owed.pods.iter().map(|p| format!("static pod {p}"));
        RestartOutcomes {
            not_restarted: owed.units.iter().cloned().chain(pods).collect(),
            ..RestartOutcomes::default()
        }
    }

    /// Every unit, static pod and endpoint that did not come back, in a sentence each.
    pub fn failures(&self) -> Vec<String> {
        let units = self.units.iter().filter(|r| !r.ok);
        let pods = self.pods.iter().filter(|p| !p.ok);
        let endpoints = self.endpoints.iter().filter(|e| !e.ok);
        units
            .map(|r| format!("{}: {}", r.unit, r.detail))
            .chain(pods.map(|p| format!("static pod {}: {}", p.pod, p.detail)))
            .chain(endpoints.map(|e| e.detail.clone()))
            .collect()
    }
}

/// Restarts what `owed` names and settles the debt: cleared when every service came back,
/// else recorded for the next pass. `connect` is called only when a unit is to be restarted.
pub async fn restart<C, F>(
    settings: &Settings,
    inv: &Inventory,
    renewals: &[RenewOutcome],
    owed: Owed,
    connect: F,
) -> anyhow::Result<RestartOutcomes>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
{
    let mut out = RestartOutcomes::default();
    if owed.is_empty() {
        return Ok(out);
    }
    let ctrl = match owed.units.is_empty() {
        true => None,
        false => Some(connect().await),
    };
    out.units = match &ctrl {
        None => Vec::new(),
        Some(Ok(ctrl)) => {
            let mode = match settings.restart_mode {
                RestartPolicy::TryRestart => RestartMode::TryRestart,
                RestartPolicy::Restart => RestartMode::Restart,
            };
            restart_units(ctrl, &owed.units, mode, settings.restart_timeout).await
        }
        Some(Err(e)) => owed
            .units
            .iter()
            .map(|u| UnitRestart::failed(u, format!("cannot reach systemd over D-Bus: {e:#}")))
            .collect(),
    };
    // Static pods after the units: kubelet (a unit) must be running to see the manifests.
    let manifests = targets::manifests(settings, &owed.pods);
    out.pods =
        static_pods::restart(&settings.state_dir, &manifests, settings.static_pod_wait).await;
    let restarted: Vec<String> = out.units.iter().map(|r| r.unit.clone()).collect();
    let expectations = expect::expectations(settings, inv, renewals, &restarted);
    out.endpoints = endpoints::check_all(&expectations, settings.restart_timeout).await;
    let (mut units_down, mut pods_down) = down(settings, &out, &expectations);
    let to_restore = match settings.rollback_on_failure {
        true => rollback::to_restore(settings, &owed.changes, renewals, &units_down, &pods_down),
        false => Vec::new(),
    };
    if !to_restore.is_empty() {
        let ctrl = ctrl.as_ref().and_then(|c| c.as_ref().ok());
        let r = rollback::roll_back(settings, ctrl, to_restore, &units_down, &pods_down).await?;
        (out.rolled_back, out.restored) = (r.lines, r.restored);
        (units_down, pods_down) = (r.units_down, r.pods_down);
    }
    let still_owed = Owed {
        units: units_down,
        pods: pods_down,
        changes: owed.changes,
    };
    owed::save(&settings.state_dir, &still_owed)?;
    Ok(out)
}

/// The units and static pods that did not come back, or whose watch's endpoint serves an old
/// certificate: the next pass restarts them again.
fn down(
    settings: &Settings,
    out: &RestartOutcomes,
    expectations: &[endpoints::Expectation],
) -> (Vec<String>, Vec<String>) {
    let mut units: Vec<String> = out
        .units
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.unit.clone())
        .collect();
    let mut pods: Vec<String> = out
        .pods
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.pod.clone())
        .collect();
    for (e, check) in expectations.iter().zip(&out.endpoints) {
        if check.ok {
            continue;
        }
        let watch = &settings.watches[e.watch];
        for u in &watch.units {
            if !units.contains(u) {
                units.push(u.clone());
            }
        }
        for (p, _) in static_pods::of_watch(&settings.manifests_dir, watch) {
            if !pods.contains(&p) {
                pods.push(p);
            }
        }
    }
    (units, pods)
}
