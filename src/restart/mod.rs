//! Restarting the units that use renewed certificates: de-duplicate, restart over D-Bus, wait
//! for the job, check that the unit came back active.
//!
//! [`UnitControl`] is the seam: [`Systemd`] talks to a real systemd manager; the pipeline's
//! unit tests use an in-memory stand-in, `fake::FakeUnits`, which `tests/it/restart_contract.rs`
//! holds to the same outcomes as [`Systemd`] on a real systemd.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::components::UnitSettings;

pub mod by_hand;
pub mod commands;
pub mod cri;
mod dbus;
pub mod endpoints;
mod expect;
// Public only for the contract test, which needs both sides; not part of the API. The
// daemon never names it, so the linker drops it from the binary.
#[doc(hidden)]
pub mod fake;
pub mod owed;
mod pairs;
#[cfg(test)]
pub(crate) mod recording_gate;
pub mod reload_proof;
mod rollback;
pub mod running;
pub mod sequence;
pub(crate) mod serving;
mod stage;
pub mod step;
pub(crate) use stage::split_targets;
pub mod static_pods;
mod systemd;
pub mod targets;
mod unit_state;

pub use sequence::{Gate, Hold, Ungated};
pub use stage::{RestartOutcomes, restart, restart_with};
pub use systemd::Systemd;

/// How a unit is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartMode {
    /// `try-restart`: restart the unit only if it is running; an inactive unit stays inactive.
    TryRestart,
    /// `restart`: restart the unit, starting it when it is not running.
    Restart,
    /// `start`, and only of a unit that failed (its start limit hit, say): one running is
    /// left running, and one inactive stays so (an administrator or a cluster manager may
    /// keep it down). For this node's etcd member, started without the restart lock.
    StartFailed,
}

impl RestartMode {
    /// What was done, once done: `restarted`, or `started`.
    pub fn done(self) -> &'static str {
        match self {
            RestartMode::StartFailed => "started",
            _ => "restarted",
        }
    }
}

impl fmt::Display for RestartMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RestartMode::TryRestart => "try-restart",
            RestartMode::Restart => "restart",
            RestartMode::StartFailed => "start",
        })
    }
}

/// The outcome of restarting one unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitRestart {
    /// The unit name, e.g. `etcd.service`.
    pub unit: String,
    /// The unit was restarted and is active again (or was inactive and left so by try-restart).
    pub ok: bool,
    /// The result of systemd's job (`done`, `failed`, `canceled`, `timeout`, `dependency`, `skipped`), if one was seen.
    pub job_result: Option<String>,
    /// `ActiveState` when we stopped looking (`active`, `failed`, ...).
    pub active_state: String,
    /// `SubState` when we stopped looking (`running`, `dead`, ...).
    pub sub_state: String,
    /// `MainPID` before the restart (0: none).
    pub main_pid_before: u32,
    /// `MainPID` after the restart (0: none).
    pub main_pid_after: u32,
    /// A sentence for people and alarms: what happened, with systemd's result when not ok.
    pub detail: String,
    /// No job was queued (systemd could not be reached over D-Bus, the fence refused it, or
    /// a start was asked of a unit that had not failed): nothing was restarted, so nothing
    /// is to be rolled back; the restart is owed.
    pub not_restarted: bool,
}

impl UnitRestart {
    /// A failed outcome for `unit` with nothing known about its state.
    pub(crate) fn failed(unit: &str, detail: impl Into<String>) -> UnitRestart {
        UnitRestart {
            unit: unit.to_string(),
            ok: false,
            job_result: None,
            active_state: String::new(),
            sub_state: String::new(),
            main_pid_before: 0,
            main_pid_after: 0,
            detail: detail.into(),
            not_restarted: false,
        }
    }
}

/// Asked right before a restart job is queued: `Err(why)` when this node may no longer
/// restart (the cluster-wide lock is not known to be its own any more). Always `Ok` without
/// coordination.
#[derive(Clone, Default)]
pub struct Fence(Option<Arc<dyn Fn() -> Result<(), Hold> + Send + Sync>>);

impl Fence {
    /// A fence that asks `check`.
    pub fn new(check: impl Fn() -> Result<(), Hold> + Send + Sync + 'static) -> Fence {
        Fence(Some(Arc::new(check)))
    }

    /// Whether a restart may still be queued, and why not.
    pub fn check(&self) -> Result<(), Hold> {
        self.0.as_ref().map_or(Ok(()), |f| f())
    }
}

/// Why a unit was not stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopFailed {
    /// Nothing was done: the fence or systemd refused, or the unit is not loaded.
    #[error("{0}")]
    NotStopped(String),
    /// The stop was made and did not end as asked: the unit may be down or on its way.
    #[error("{0}")]
    Unfinished(String),
}

/// Something that can restart systemd units and tell how it went.
pub trait UnitControl {
    /// Restarts `unit` and waits up to `timeout` for its job to finish and the unit to be
    /// active; a unit that came back must then stay active for the whole settle period,
    /// which is waited out even past `timeout`.
    ///
    /// Never fails as such: every problem is reported in the returned [`UnitRestart`].
    fn restart(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
    ) -> impl Future<Output = UnitRestart> + Send;

    /// [`UnitControl::restart`], asking `fence` as late as possible before the job is
    /// queued; refused, nothing is restarted ([`fenced`] says why).
    fn restart_fenced(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        fence: Fence,
    ) -> impl Future<Output = UnitRestart> + Send;

    /// Stops `unit`, asking `fence` right before the job is queued, and waits up to
    /// `timeout` for the job: `Ok` once it has no process left, else why not (refused by
    /// the fence or by systemd: it runs as it did).
    fn stop_fenced(
        &self,
        unit: &str,
        timeout: Duration,
        fence: Fence,
    ) -> impl Future<Output = Result<(), StopFailed>> + Send;

    /// The settings systemd runs each of `units` with, for the node's reading: a unit that
    /// is not loaded, or whose settings cannot be had, is left out (its files are then not
    /// known, and a watch naming it restarts it for each of its renewals).
    fn unit_settings(&self, units: &[String]) -> impl Future<Output = Vec<UnitSettings>> + Send;

    /// `unit`'s `ActiveState` and since when it is active (`ActiveEnterTimestamp`, in
    /// microseconds since the epoch); `None` when systemd has no such unit loaded.
    fn active_since(
        &self,
        unit: &str,
    ) -> impl Future<Output = anyhow::Result<Option<(String, u64)>>> + Send;
}

/// Why `unit` was not restarted: the fence said `why`.
pub(crate) fn fenced(unit: &str, why: &Hold) -> String {
    format!("not restarted: {why}; {unit} is owed to the next pass")
}

/// The units in their first-seen order, each once.
pub(crate) fn dedup(units: &[String]) -> Vec<&str> {
    let mut seen = HashSet::new();
    units
        .iter()
        .map(String::as_str)
        .filter(|u| seen.insert(*u))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn dedup_keeps_first_occurrence_order() {
        let units = names(&[
            "b.service",
            "a.service",
            "b.service",
            "c.service",
            "a.service",
        ]);
        assert_eq!(dedup(&units), ["b.service", "a.service", "c.service"]);
        assert!(dedup(&[]).is_empty());
    }

    #[test]
    fn restart_mode_names_match_systemctl() {
        assert_eq!(RestartMode::TryRestart.to_string(), "try-restart");
        assert_eq!(RestartMode::Restart.to_string(), "restart");
    }
}
