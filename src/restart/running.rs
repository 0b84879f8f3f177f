//! Which units run now, as the systemd manager says: what the daemon asks before READY=1,
//! when the units ordered after it have not started yet (issue 26).

use anyhow::Context;
use zbus::proxy::CacheProperties;

use super::dbus::{ManagerProxy, UnitProxy};
use crate::config::Bus;

/// The unit that runs the static pods.
pub const KUBELET: &str = "kubelet.service";

/// Those of `units` that run now (`ActiveState` active, activating, reloading or
/// deactivating). A unit systemd has not loaded does not run; one whose start job waits
/// (ordered after this daemon at boot) is inactive.
pub async fn running(bus: Bus, units: &[String]) -> anyhow::Result<Vec<String>> {
    let conn = super::systemd::connect_bus(bus).await?;
    let manager = ManagerProxy::new(&conn)
        .await
        .context("creating the org.freedesktop.systemd1 manager proxy")?;
    let mut out = Vec::new();
    for unit in units {
        let path = match manager.get_unit(unit).await {
            Ok(path) => path,
            Err(zbus::Error::MethodError(name, _, _)) if name.ends_with(".NoSuchUnit") => continue,
            Err(e) => return Err(e).with_context(|| format!("asking systemd for {unit}")),
        };
        let state = UnitProxy::builder(&conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await?
            .active_state()
            .await
            .with_context(|| format!("reading the ActiveState of {unit}"))?;
        if !matches!(state.as_str(), "inactive" | "failed") {
            out.push(unit.clone());
        }
    }
    Ok(out)
}
