//! An in-memory [`UnitControl`] for tests of the pipeline: each unit is scripted to restart
//! fine, fail, hang past the timeout or be inactive; unknown units are "not loaded".
//!
//! It promises only what systemd does: `tests/it/restart_contract.rs` runs the same scenarios on
//! it and on [`Systemd`](super::Systemd) against a real systemd, and compares the outcomes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Fence, RestartMode, StopFailed, UnitControl, UnitRestart};

/// How a scripted unit behaves when restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeBehaviour {
    /// Restarts and comes back active with a new MainPID.
    Ok,
    /// The restart job fails and the unit ends `failed`, with no main process, with this
    /// systemd result (e.g. `exit-code`).
    Fail(String),
    /// Its start never finishes (an `ExecStartPre=` that does not return): the restart waits
    /// for the whole timeout, then reports the old process gone and the unit `activating
    /// (start-pre)`.
    Hang,
    /// Not running: try-restart leaves it alone, restart starts it.
    Inactive,
}

#[derive(Debug, Default)]
struct State {
    units: HashMap<String, FakeBehaviour>,
    /// The MainPID of each unit that has a main process.
    pids: HashMap<String, u32>,
    /// When each unit last became active, microseconds since the epoch.
    started: HashMap<String, u64>,
    next_pid: u32,
    calls: Vec<(String, RestartMode)>,
    stops: Vec<String>,
    /// What [`UnitControl::unit_settings`] tells.
    settings: Vec<crate::components::UnitSettings>,
}

impl State {
    /// A MainPID no process of this fake had before.
    fn new_pid(&mut self) -> u32 {
        self.next_pid += 1;
        1000 + self.next_pid
    }
}

/// Scriptable fake systemd: `FakeUnits::new().ok("etcd.service").fail("kubelet.service", "exit-code")`.
///
/// Clones share their state, so a test can keep one to inspect [`FakeUnits::calls`].
#[derive(Debug, Clone, Default)]
pub struct FakeUnits {
    state: Arc<Mutex<State>>,
}

impl FakeUnits {
    /// A fake with no units: every restart reports "unit not loaded".
    pub fn new() -> FakeUnits {
        FakeUnits::default()
    }

    /// Scripts `unit` to behave as `behaviour` from now on. A unit scripted for the first
    /// time is running (it has a MainPID) unless it is scripted `Inactive`; scripting a known
    /// unit again changes how its next restarts go, not its state now.
    pub fn set(&self, unit: &str, behaviour: FakeBehaviour) {
        let mut st = self.lock();
        let new = !st.units.contains_key(unit);
        if behaviour == FakeBehaviour::Inactive {
            st.pids.remove(unit);
        } else if new {
            let pid = st.new_pid();
            st.pids.insert(unit.to_string(), pid);
            st.started.insert(unit.to_string(), now_usec());
        }
        st.units.insert(unit.to_string(), behaviour);
    }

    /// Tells `settings` as what its unit runs with.
    pub fn with_settings(self, settings: crate::components::UnitSettings) -> FakeUnits {
        self.lock().settings.push(settings);
        self
    }

    /// Scripts `unit` to restart fine.
    pub fn ok(self, unit: &str) -> FakeUnits {
        self.set(unit, FakeBehaviour::Ok);
        self
    }

    /// Scripts `unit` to fail with systemd's `result` (e.g. `exit-code`).
    pub fn fail(self, unit: &str, result: &str) -> FakeUnits {
        self.set(unit, FakeBehaviour::Fail(result.to_string()));
        self
    }

    /// Scripts `unit` to never come back within the timeout.
    pub fn hang(self, unit: &str) -> FakeUnits {
        self.set(unit, FakeBehaviour::Hang);
        self
    }

    /// Scripts `unit` to be inactive (until a `Restart` starts it).
    pub fn inactive(self, unit: &str) -> FakeUnits {
        self.set(unit, FakeBehaviour::Inactive);
        self
    }

    /// Every unit stopped so far, in order.
    pub fn stops(&self) -> Vec<String> {
        self.lock().stops.clone()
    }

    /// Every restart asked for so far, in order.
    pub fn calls(&self) -> Vec<(String, RestartMode)> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Now, in microseconds since the epoch, as systemd's timestamps count.
fn now_usec() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_micros() as u64)
}

impl UnitControl for FakeUnits {
    async fn stop_fenced(&self, unit: &str, _: Duration, fence: Fence) -> Result<(), StopFailed> {
        let mut st = self.lock();
        if !st.units.contains_key(unit) {
            return Err(StopFailed::NotStopped(
                "unit not loaded (load state: not-found)".into(),
            ));
        }
        fence
            .check()
            .map_err(|why| StopFailed::NotStopped(super::fenced(unit, &why)))?;
        st.stops.push(unit.to_string());
        st.pids.remove(unit);
        Ok(())
    }

    async fn active_since(&self, unit: &str) -> anyhow::Result<Option<(String, u64)>> {
        let st = self.lock();
        let Some(behaviour) = st.units.get(unit) else {
            return Ok(None);
        };
        Ok(Some(match (st.pids.contains_key(unit), behaviour) {
            (true, _) => ("active".into(), st.started.get(unit).copied().unwrap_or(0)),
            (false, FakeBehaviour::Fail(_)) => ("failed".into(), 0),
            (false, FakeBehaviour::Hang) => ("activating".into(), 0),
            (false, _) => ("inactive".into(), 0),
        }))
    }

    async fn unit_settings(&self, units: &[String]) -> Vec<crate::components::UnitSettings> {
        let known = &self.lock().settings;
        (known.iter())
            .filter(|s| units.contains(&s.unit))
            .cloned()
            .collect()
    }

    async fn restart_fenced(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        fence: super::Fence,
    ) -> UnitRestart {
        match fence.check() {
            Ok(()) => self.restart(unit, mode, timeout).await,
            Err(why) => UnitRestart {
                not_restarted: true,
                ..UnitRestart::failed(unit, super::fenced(unit, &why))
            },
        }
    }

    async fn restart(&self, unit: &str, mode: RestartMode, timeout: Duration) -> UnitRestart {
        let behaviour = {
            let mut st = self.lock();
            st.calls.push((unit.to_string(), mode));
            st.units.get(unit).cloned()
        };
        let Some(behaviour) = behaviour else {
            let mut out = UnitRestart::failed(unit, "unit not loaded (load state: not-found)");
            out.active_state = "inactive".into();
            out.sub_state = "dead".into();
            // As systemd.rs: try-restart passes over a unit that is not on the node.
            if mode == RestartMode::TryRestart {
                out.ok = true;
                out.detail.push_str("; passed over (try-restart)");
            }
            return out;
        };
        let failed =
            matches!(behaviour, FakeBehaviour::Fail(_)) && !self.lock().pids.contains_key(unit);
        if mode == RestartMode::StartFailed && !failed {
            // As systemd.rs: only a unit that failed is started.
            let mut out = UnitRestart::failed(unit, format!("{unit} is not failed"));
            out.not_restarted = true;
            return out;
        }
        if behaviour == FakeBehaviour::Hang {
            tokio::time::sleep(timeout).await;
        }
        let mut st = self.lock();
        let before = st.pids.get(unit).copied().unwrap_or(0);
        let mut out = UnitRestart {
            unit: unit.to_string(),
            ok: false,
            job_result: Some("done".into()),
            active_state: "active".into(),
            sub_state: "running".into(),
            main_pid_before: before,
            main_pid_after: 0,
            detail: String::new(),
            not_restarted: false,
        };
        match behaviour {
            FakeBehaviour::Inactive if mode == RestartMode::TryRestart => {
                out.ok = true;
                out.active_state = "inactive".into();
                out.sub_state = "dead".into();
                out.detail = "inactive, not started (try-restart)".into();
                return out;
            }
            FakeBehaviour::Ok | FakeBehaviour::Inactive => {
                let pid = st.new_pid();
                st.pids.insert(unit.to_string(), pid);
                st.started.insert(unit.to_string(), now_usec());
                st.units.insert(unit.to_string(), FakeBehaviour::Ok);
                out.ok = true;
                out.main_pid_after = pid;
                out.detail = format!("restarted; active (running), MainPID {before} -> {pid}");
            }
            FakeBehaviour::Fail(result) => {
                st.pids.remove(unit);
                out.job_result = Some("failed".into());
                out.active_state = "failed".into();
                out.sub_state = "failed".into();
                out.detail = format!("job failed; unit is failed (failed), result: {result}");
            }
            FakeBehaviour::Hang => {
                // The restart stopped the old process before the start that hangs.
                st.pids.remove(unit);
                out.job_result = None;
                out.active_state = "activating".into();
                out.sub_state = "start-pre".into();
                out.detail = format!(
                    "timed out after {timeout:?} waiting for the {mode} job; unit is activating (start-pre)"
                );
            }
        }
        out
    }
}
