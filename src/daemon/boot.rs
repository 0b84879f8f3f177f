//! The renewal before READY=1: at boot, the units ordered after the daemon start on renewed
//! certificates, instead of starting on expired ones and being restarted right after.

use std::path::PathBuf;
use std::sync::Arc;

use super::memory;
use crate::config::Settings;
use crate::pass::{self, PassOptions};
use crate::restart::running::{KUBELET, Runs, running};
use crate::restart::{Systemd, owed, targets};

/// With `run_on_start`, before READY=1, at boot: renews the leaves that are due or have
/// expired, so that the units the shipped unit is ordered `Before=` (kubelet and the static
/// pods it runs, etcd, the Kubernetes units) start on them. A controller back from a long
/// outage comes up without a hand, and without a restart of what just started.
///
/// Only when none of the services those certificates belong to runs yet (systemd says so):
/// a restart job for a unit ordered after this one would wait for this start, so when one
/// runs (the daemon restarted on a running node), or systemd cannot be asked, the pass after
/// READY=1 renews and restarts as always. So too when one has failed (a member crash-looping
/// on expired certificates until its start limit): no start job of it waits for this unit,
/// so only that pass's restart brings it back, under the restart lock. CAs wait for that
/// pass too: their re-issue is agreed through etcd, which starts after this unit.
pub(super) async fn renew_before_ready(
    settings: &Settings,
    sinks: &Arc<Vec<Box<dyn crate::alarms::AlarmSink>>>,
) {
    let owned = settings.clone();
    let due = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        // No systemd is asked here: the units' settings come with a pass.
        let node = crate::components::NodeReading::read(&owned.manifests_dir);
        let owned = pass::watching_named(&owned, &node);
        let policy = pass::policy(&owned, &PassOptions::default(), Default::default());
        let (inv, plan) = pass::scan_and_plan(&owned, &policy, &node);
        let leaves: Vec<_> = plan.renewals().filter(|i| !i.is_ca).collect();
        let watches: Vec<usize> = leaves.iter().map(|i| inv.certs[i.cert].watch).collect();
        let mut paths: Vec<PathBuf> = (leaves.iter())
            .map(|i| inv.certs[i.cert].path.clone())
            .collect();
        paths.dedup();
        (paths, services(&targets::of_watches(&owned, &watches)))
    })
    .await;
    let (due, services) = match due {
        Ok((due, services)) if !due.is_empty() => (due, services),
        Ok(_) => return,
        Err(e) => return tracing::error!("the scan's worker thread failed: {e}"),
    };
    match running(settings.bus, &services).await {
        Ok(r) if !r.iter().any(|(_, runs)| restarted(*runs)) => {}
        Ok(r) => {
            let up: Vec<String> = (r.iter())
                .filter(|(_, runs)| restarted(*runs))
                .map(|(u, runs)| match runs {
                    Runs::Failed => format!("{u} (failed)"),
                    _ => format!("{u} (running already)"),
                })
                .collect();
            return tracing::info!(
                "{} due or expired certificates: renewed by the pass after READY=1, not before it, for {}, which take them in by a reload or a restart",
                due.len(),
                up.join(", ")
            );
        }
        Err(e) => {
            return tracing::warn!(
                "{} due or expired certificates: renewed by the pass after READY=1 (cannot ask systemd which services run: {e:#})",
                due.len()
            );
        }
    }
    tracing::info!(
        "renewing {} due or expired certificates before READY=1: {} start after this unit, on the renewed certificates",
        due.len(),
        if services.is_empty() {
            "their services".to_string()
        } else {
            services.join(", ")
        }
    );
    let opts = PassOptions {
        only: Some(due),
        mode: pass::Mode::Deferred,
        ..PassOptions::default()
    };
    let no_bus = async || -> anyhow::Result<Systemd> { anyhow::bail!("no restart before READY=1") };
    let seams = pass::Seams::etcd(settings, &opts.stop);
    match pass::run(settings, &opts, no_bus, seams, sinks.clone()).await {
        Ok(r) => {
            let renewed = r.renewals.iter().filter(|o| o.renewed()).count();
            tracing::info!("renewed before READY=1: {renewed} of {}", r.renewals.len());
        }
        Err(e) => tracing::error!("the renewal before READY=1 failed: {e:#}"),
    }
    forgive_what_has_not_started(settings).await;
    memory::release_freed();
}

/// Whether a unit in this state is left to the pass after READY=1 to restart: it runs, or it
/// failed (nothing starts it after this unit).
fn restarted(runs: Runs) -> bool {
    matches!(runs, Runs::Yes | Runs::Failed)
}

/// The units to ask about: the targets' units, and kubelet for their static pods.
fn services(owed: &owed::Owed) -> Vec<String> {
    let mut units = owed.units.clone();
    if !owed.pods.is_empty() && !units.iter().any(|u| u == KUBELET) {
        units.push(KUBELET.to_string());
    }
    units
}

/// Drops from the restarts owed the units that still do not run and have not failed (they
/// start on the renewed certificates) and the static pods while kubelet.service does not
/// run; what started meanwhile (a unit not ordered after this one) and what failed stay
/// owed to the pass after READY=1.
async fn forgive_what_has_not_started(settings: &Settings) {
    let state = &settings.state_dir;
    let _lock = match pass::state_lock::StateLock::acquire(state, settings.lock_timeout) {
        Ok(lock) => lock,
        Err(e) => return tracing::warn!("{e:#}: the restarts stay owed"),
    };
    let Ok(mut debt) = owed::load(state) else {
        return; // the pass after READY=1 reports a record it cannot read
    };
    let running = match running(settings.bus, &services(&debt)).await {
        Ok(r) => r,
        Err(e) => {
            return tracing::warn!(
                "cannot ask systemd which services run ({e:#}): the restarts stay owed"
            );
        }
    };
    let runs = |unit: &str| running.iter().find(|(u, _)| u == unit).map(|(_, r)| *r);
    debt.units.retain(|u| runs(u).is_some_and(restarted));
    // Static pods only when kubelet.service is there and has not started: without it,
    // what runs them cannot be told, and they stay owed.
    if runs(KUBELET) == Some(Runs::No) {
        debt.pods.clear();
    }
    if let Err(e) = owed::save(state, &debt) {
        tracing::warn!("{e:#}");
    }
}
