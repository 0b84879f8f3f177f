//! An in-memory [`UnitControl`] for tests of the pipeline: each unit is scripted to restart
//! fine, fail, hang past the timeout or be inactive; unknown units are "not loaded".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{RestartMode, UnitControl, UnitRestart};

/// How a scripted unit behaves when restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeBehaviour {
    /// Restarts and comes back active with a new MainPID.
    Ok,
    /// The restart job fails and the unit ends `failed` with this systemd result (e.g. `exit-code`).
    Fail(String),
    /// Never becomes active: the restart waits for the whole timeout, then reports it.
    Hang,
    /// Not running: try-restart leaves it alone, restart starts it.
    Inactive,
}

#[derive(Debug, Default)]
struct State {
    units: HashMap<String, FakeBehaviour>,
    pids: HashMap<String, u32>,
    next_pid: u32,
    calls: Vec<(String, RestartMode)>,
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

    /// Scripts `unit` to behave as `behaviour` from now on.
    pub fn set(&self, unit: &str, behaviour: FakeBehaviour) {
        self.lock().units.insert(unit.to_string(), behaviour);
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

    /// Every restart asked for so far, in order.
    pub fn calls(&self) -> Vec<(String, RestartMode)> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl UnitControl for FakeUnits {
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
            out.ok = mode == RestartMode::TryRestart;
            return out;
        };
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
                st.next_pid += 1;
                let pid = 1000 + st.next_pid;
                st.pids.insert(unit.to_string(), pid);
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
                out.detail = format!("job failed; unit is failed (result: {result})");
            }
            FakeBehaviour::Hang => {
                out.job_result = None;
                out.active_state = "activating".into();
                out.sub_state = "start".into();
                out.main_pid_after = before;
                out.detail = format!(
                    "timed out after {timeout:?} waiting for the restart job; unit is activating (start)"
                );
            }
        }
        out
    }
}
