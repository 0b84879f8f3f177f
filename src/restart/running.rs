//! Which units run now, as the systemd manager says: what the daemon asks before READY=1,
//! when the units ordered after it have not started yet (at boot).

use anyhow::Context;
use zbus::proxy::CacheProperties;

use super::dbus::{ManagerProxy, UnitProxy};
use crate::config::Bus;

/// The unit that runs the static pods.
pub const KUBELET: &str = "kubelet.service";

/// Whether a unit runs, as systemd says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Active, activating, reloading or deactivating.
    Yes,
    /// Loaded and inactive: one whose start job waits (ordered after this daemon, at boot)
    /// is inactive.
    No,
    /// Loaded and failed (a crash loop that hit its start limit, say): no start job waits
    /// for this daemon, so nothing starts it on renewed certificates but a restart.
    Failed,
    /// Not loaded: no such unit, or none has referred to it (what runs static pods on a
    /// node without kubelet.service, RKE2's server for one, cannot be told).
    NotLoaded,
}

/// Whether each of `units` runs now.
pub async fn running(bus: Bus, units: &[String]) -> anyhow::Result<Vec<(String, Runs)>> {
    let conn = super::systemd::connect_bus(bus).await?;
    let manager = ManagerProxy::new(&conn)
        .await
        .context("creating the org.freedesktop.systemd1 manager proxy")?;
    let mut out = Vec::new();
    for unit in units {
        let path = match manager.get_unit(unit).await {
            Ok(path) => path,
            Err(zbus::Error::MethodError(name, _, _)) if name.ends_with(".NoSuchUnit") => {
                out.push((unit.clone(), Runs::NotLoaded));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("asking systemd for {unit}")),
        };
        let proxy = UnitProxy::builder(&conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await?;
        let load = proxy.load_state().await?;
        let state = (proxy.active_state().await)
            .with_context(|| format!("reading the ActiveState of {unit}"))?;
        out.push((unit.clone(), runs(&load, &state)));
    }
    Ok(out)
}

/// Whether a unit in systemd's `LoadState` `load` and `ActiveState` `active` runs.
fn runs(load: &str, active: &str) -> Runs {
    match active {
        "inactive" | "failed" if load != "loaded" => Runs::NotLoaded,
        "inactive" => Runs::No,
        "failed" => Runs::Failed,
        _ => Runs::Yes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_unit_is_told_from_one_that_waits_to_start() {
        assert_eq!(runs("loaded", "inactive"), Runs::No);
        assert_eq!(runs("loaded", "failed"), Runs::Failed);
        assert_eq!(runs("not-found", "inactive"), Runs::NotLoaded);
        assert_eq!(runs("not-found", "failed"), Runs::NotLoaded);
        for active in ["active", "activating", "reloading", "deactivating"] {
            assert_eq!(runs("loaded", active), Runs::Yes, "{active}");
        }
    }
}
