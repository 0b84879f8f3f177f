//! One unit's state as systemd reports it (ActiveState, SubState, MainPID, InvocationID,
//! Result), and the wait for a restarted unit to be active on a new run.

use std::time::Duration;

use anyhow::Context;
use tokio::time::{Instant, sleep};

use super::dbus::{ServiceProxy, UnitProxy};
use super::{RestartMode, UnitRestart};

/// How often the unit's state is read while waiting for it to become active.
const POLL: Duration = Duration::from_millis(100);

/// Proxies on one unit's object.
pub(super) struct UnitHandle {
    pub(super) name: String,
    pub(super) unit: UnitProxy<'static>,
    pub(super) service: Option<ServiceProxy<'static>>,
}

/// What a unit looks like at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Snapshot {
    pub(super) active: String,
    pub(super) sub: String,
    pub(super) main_pid: u32,
    pub(super) result: String,
    pub(super) service_type: String,
    pub(super) invocation: Vec<u8>,
}

impl Snapshot {
    /// `active (running)`, or `failed (failed), result: exit-code`.
    pub(super) fn describe(&self) -> String {
        if self.result.is_empty() || self.result == "success" {
            format!("{} ({})", self.active, self.sub)
        } else {
            format!("{} ({}), result: {}", self.active, self.sub, self.result)
        }
    }

    /// Whether systemd would restart (not skip) this unit on try-restart.
    pub(super) fn is_running(&self) -> bool {
        matches!(
            self.active.as_str(),
            "active" | "reloading" | "activating" | "refreshing"
        )
    }

    /// Whether this is a new run of the unit compared with `before`.
    pub(super) fn is_new_run_since(&self, before: &Snapshot) -> bool {
        if before.main_pid != 0 && self.main_pid != 0 {
            return self.main_pid != before.main_pid;
        }
        if !before.invocation.is_empty() && !self.invocation.is_empty() {
            return self.invocation != before.invocation;
        }
        before.main_pid == 0 || self.main_pid != 0
    }

    pub(super) fn fill(&self, out: &mut UnitRestart) {
        out.active_state = self.active.clone();
        out.sub_state = self.sub.clone();
        out.main_pid_after = self.main_pid;
    }
}

impl UnitHandle {
    pub(super) async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let name = &self.name;
        let active = self
            .unit
            .active_state()
            .await
            .with_context(|| format!("reading ActiveState of {name}"))?;
        let sub = self
            .unit
            .sub_state()
            .await
            .with_context(|| format!("reading SubState of {name}"))?;
        let invocation = self.unit.invocation_id().await.unwrap_or_default();
        let (main_pid, result, service_type) = match &self.service {
            Some(s) => (
                s.main_pid()
                    .await
                    .with_context(|| format!("reading MainPID of {name}"))?,
                s.result()
                    .await
                    .with_context(|| format!("reading Result of {name}"))?,
                s.service_type().await.unwrap_or_default(),
            ),
            None => (0, String::new(), String::new()),
        };
        Ok(Snapshot {
            active,
            sub,
            main_pid,
            result,
            service_type,
            invocation,
        })
    }

    /// After a successful job: waits until the unit is active in a new run and stays so for `settle`.
    pub(super) async fn await_active(
        &self,
        before: &Snapshot,
        mode: RestartMode,
        timeout: Duration,
        deadline: Instant,
        settle: Duration,
        out: &mut UnitRestart,
    ) -> anyhow::Result<()> {
        loop {
            let now = self.snapshot().await?;
            now.fill(out);
            match now.active.as_str() {
                "active" if now.is_new_run_since(before) => {
                    let settled = if settle.is_zero() {
                        now.clone()
                    } else {
                        sleep(settle.min(deadline.saturating_duration_since(Instant::now()))).await;
                        self.snapshot().await?
                    };
                    settled.fill(out);
                    if settled.active == "active" && settled.main_pid == now.main_pid {
                        out.ok = true;
                        out.detail = format!(
                            "restarted; {}, MainPID {} -> {}",
                            settled.describe(),
                            before.main_pid,
                            settled.main_pid
                        );
                        return Ok(());
                    }
                    if settled.active == "active" {
                        // A new main process already: look again from the top.
                        continue;
                    }
                    if let Some(detail) = settled.ended(mode) {
                        out.ok = settled.ended_well();
                        out.detail = detail;
                        return Ok(());
                    }
                }
                _ => {
                    if let Some(detail) = now.ended(mode) {
                        out.ok = now.ended_well();
                        out.detail = detail;
                        return Ok(());
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let pid_note = if now.active == "active" {
                    format!(", MainPID still {}", now.main_pid)
                } else {
                    String::new()
                };
                out.detail = format!(
                    "timed out after {timeout:?} waiting for active; unit is {}{pid_note}",
                    now.describe()
                );
                return Ok(());
            }
            sleep(POLL.min(left)).await;
        }
    }
}

impl Snapshot {
    /// When the unit has stopped for good after the restart: the sentence saying so.
    pub(super) fn ended(&self, mode: RestartMode) -> Option<String> {
        match self.active.as_str() {
            "failed" => Some(format!(
                "unit is {} after the {mode} (result: {})",
                self.active, self.result
            )),
            "inactive" if self.ended_well() => Some(format!(
                "restarted; {} ran to completion",
                self.service_type
            )),
            "inactive" => Some(format!(
                "unit is inactive ({}) after the {mode} (result: {})",
                self.sub, self.result
            )),
            _ => None,
        }
    }

    /// A oneshot service that ran and exited successfully ends inactive, and that is fine.
    pub(super) fn ended_well(&self) -> bool {
        self.active == "inactive" && self.service_type == "oneshot" && self.result == "success"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(active: &str, pid: u32, inv: &[u8]) -> Snapshot {
        Snapshot {
            active: active.into(),
            sub: "running".into(),
            main_pid: pid,
            result: "success".into(),
            service_type: "simple".into(),
            invocation: inv.to_vec(),
        }
    }

    #[test]
    fn new_run_is_judged_by_main_pid_then_invocation() {
        assert!(snap("active", 2, b"b").is_new_run_since(&snap("active", 1, b"a")));
        assert!(!snap("active", 1, b"b").is_new_run_since(&snap("active", 1, b"a")));
        assert!(snap("active", 0, b"b").is_new_run_since(&snap("active", 0, b"a")));
        assert!(!snap("active", 0, b"a").is_new_run_since(&snap("active", 0, b"a")));
        assert!(snap("active", 5, b"").is_new_run_since(&snap("inactive", 0, b"")));
    }

    #[test]
    fn describe_mentions_result_only_when_not_success() {
        assert_eq!(snap("active", 1, b"").describe(), "active (running)");
        let mut s = snap("failed", 0, b"");
        s.sub = "failed".into();
        s.result = "exit-code".into();
        assert_eq!(s.describe(), "failed (failed), result: exit-code");
        assert_eq!(
            s.ended(RestartMode::Restart).as_deref(),
            Some("unit is failed after the restart (result: exit-code)")
        );
    }

    #[test]
    fn oneshot_that_succeeded_ended_well() {
        let mut s = snap("inactive", 0, b"");
        s.service_type = "oneshot".into();
        assert!(s.ended_well());
        s.result = "exit-code".into();
        assert!(!s.ended_well());
    }
}
