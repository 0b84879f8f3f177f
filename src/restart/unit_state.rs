//! One unit's state as systemd reports it (ActiveState, SubState, MainPID, InvocationID,
//! Result), and the verdict on a restart: active in a new run (a new InvocationID), and still
//! in that run, active, after a settle period.

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

    /// Whether this is a new run of the unit compared with `before`: a new InvocationID
    /// (systemd makes one for every start); MainPID only where systemd gives no InvocationID.
    pub(super) fn is_new_run_since(&self, before: &Snapshot) -> bool {
        if !before.invocation.is_empty() && !self.invocation.is_empty() {
            return self.invocation != before.invocation;
        }
        if before.main_pid != 0 && self.main_pid != 0 {
            return self.main_pid != before.main_pid;
        }
        before.main_pid == 0 || self.main_pid != 0
    }

    /// Whether this is still the run `started`: active, same InvocationID, same MainPID.
    pub(super) fn is_same_active_run(&self, started: &Snapshot) -> bool {
        self.active == "active"
            && self.invocation == started.invocation
            && self.main_pid == started.main_pid
    }

    pub(super) fn fill(&self, out: &mut UnitRestart) {
        out.active_state = self.active.clone();
        out.sub_state = self.sub.clone();
        out.main_pid_after = self.main_pid;
    }
}

impl UnitHandle {
    pub(super) async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        // Each property is a call of its own: a unit that changes state between them would be
        // read half before and half after (active, with the MainPID of a process that has
        // already ended). Read again until ActiveState is the same after as before.
        let mut snap = self.read_once().await?;
        for _ in 0..3 {
            let active = (self.unit.active_state().await)
                .with_context(|| format!("reading ActiveState of {}", self.name))?;
            if active == snap.active {
                break;
            }
            snap = self.read_once().await?;
        }
        Ok(snap)
    }

    /// Each property read once, one after the other.
    async fn read_once(&self) -> anyhow::Result<Snapshot> {
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

    /// Whether a job is queued for the unit. A restart job leaves its unit inactive (dead)
    /// for a moment between its stop and its start; a restart watched while its job may
    /// still run (after the D-Bus connection broke) must not take that moment for the end.
    /// Each property is a call of its own: only a state read after the job was seen gone
    /// says how the job ended.
    async fn job_queued(&self) -> anyhow::Result<bool> {
        let (id, _) = self
            .unit
            .job()
            .await
            .with_context(|| format!("reading Job of {}", self.name))?;
        Ok(id != 0)
    }

    /// After a successful job: waits until the deadline for the unit to be active in a new
    /// run, then requires it to stay in that run, active, for the whole `settle` period,
    /// even past the deadline: a service that dies a second after it started has not come
    /// back.
    pub(super) async fn await_active(
        &self,
        before: &Snapshot,
        mode: RestartMode,
        timeout: Duration,
        deadline: Instant,
        settle: Duration,
        out: &mut UnitRestart,
    ) -> anyhow::Result<()> {
        let Some(started) = self
            .await_new_run(before, mode, timeout, deadline, out)
            .await?
        else {
            return Ok(());
        };
        self.settle(before, &started, mode, settle, out).await
    }

    /// Polls until the unit is active in a new run (returned), or has ended or the deadline
    /// passed (said in `out`, `None`).
    async fn await_new_run(
        &self,
        before: &Snapshot,
        mode: RestartMode,
        timeout: Duration,
        deadline: Instant,
        out: &mut UnitRestart,
    ) -> anyhow::Result<Option<Snapshot>> {
        loop {
            let now = self.snapshot().await?;
            now.fill(out);
            if now.active == "active" && now.is_new_run_since(before) {
                return Ok(Some(now));
            }
            if now.ended(mode).is_some() && !self.job_queued().await? {
                // Read again now that no job is queued: the state read before may be of
                // the pause between a restart job's stop and its start, which has ended
                // since (the job gone, the unit started).
                let after = self.snapshot().await?;
                after.fill(out);
                if let Some(detail) = after.ended(mode) {
                    out.ok = after.ended_well();
                    out.detail = detail;
                    return Ok(None);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let pid_note = match now.active.as_str() {
                    "active" => format!(", MainPID still {}", now.main_pid),
                    _ => String::new(),
                };
                out.detail = format!(
                    "timed out after {timeout:?} waiting for active; unit is {}{pid_note}",
                    now.describe()
                );
                return Ok(None);
            }
            sleep(POLL.min(left)).await;
        }
    }

    /// Watches the run `started` for `settle`: ok only if it stays active in it throughout.
    async fn settle(
        &self,
        before: &Snapshot,
        started: &Snapshot,
        mode: RestartMode,
        settle: Duration,
        out: &mut UnitRestart,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + settle;
        loop {
            sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
            let now = self.snapshot().await?;
            now.fill(out);
            if !now.is_same_active_run(started) {
                out.ok = false;
                out.detail = did_not_stay(started, &now, mode, settle);
                return Ok(());
            }
            if Instant::now() >= until {
                out.ok = true;
                out.detail = format!(
                    "{}; {} for {settle:?}, MainPID {} -> {}",
                    mode.done(),
                    now.describe(),
                    before.main_pid,
                    now.main_pid
                );
                return Ok(());
            }
        }
    }
}

/// The sentence for a unit that came back but left the run `started` within the settle period.
fn did_not_stay(started: &Snapshot, now: &Snapshot, mode: RestartMode, settle: Duration) -> String {
    let pid = started.main_pid;
    match now.ended(mode) {
        Some(ended) => format!(
            "{ended}; it had come back (MainPID {pid}) but did not stay active for {settle:?}"
        ),
        None if now.active == "active" => format!(
            "unit came back (MainPID {pid}) but was started again within {settle:?} (MainPID {}): it is crash-looping",
            now.main_pid
        ),
        None => format!(
            "unit came back (MainPID {pid}) but did not stay active for {settle:?}: unit is {}",
            now.describe()
        ),
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
                "{}; {} ran to completion",
                mode.done(),
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
    fn new_run_is_judged_by_invocation_then_main_pid() {
        // A new InvocationID is a new run, whatever MainPID says (a recycled PID, or a
        // forking service whose PID changed within one run).
        assert!(snap("active", 1, b"b").is_new_run_since(&snap("active", 1, b"a")));
        assert!(!snap("active", 2, b"a").is_new_run_since(&snap("active", 1, b"a")));
        assert!(snap("active", 0, b"b").is_new_run_since(&snap("active", 0, b"a")));
        assert!(!snap("active", 0, b"a").is_new_run_since(&snap("active", 0, b"a")));
        // Without InvocationID: MainPID.
        assert!(snap("active", 2, b"").is_new_run_since(&snap("active", 1, b"")));
        assert!(!snap("active", 1, b"").is_new_run_since(&snap("active", 1, b"")));
        assert!(snap("active", 5, b"").is_new_run_since(&snap("inactive", 0, b"")));
    }

    #[test]
    fn the_same_run_is_active_with_the_same_invocation_and_main_pid() {
        let started = snap("active", 7, b"x");
        assert!(snap("active", 7, b"x").is_same_active_run(&started));
        assert!(!snap("failed", 0, b"x").is_same_active_run(&started));
        assert!(!snap("active", 8, b"y").is_same_active_run(&started));
        assert!(!snap("activating", 0, b"x").is_same_active_run(&started));
    }

    #[test]
    fn leaving_the_run_within_the_settle_period_is_said() {
        let started = snap("active", 7, b"x");
        let mut failed = snap("failed", 0, b"x");
        (failed.sub, failed.result) = ("failed".into(), "exit-code".into());
        let settle = Duration::from_secs(5);
        assert_eq!(
            did_not_stay(&started, &failed, RestartMode::Restart, settle),
            "unit is failed after the restart (result: exit-code); it had come back (MainPID 7) but did not stay active for 5s"
        );
        assert_eq!(
            did_not_stay(
                &started,
                &snap("active", 9, b"y"),
                RestartMode::TryRestart,
                settle
            ),
            "unit came back (MainPID 7) but was started again within 5s (MainPID 9): it is crash-looping"
        );
        let mut again = snap("activating", 0, b"x");
        again.sub = "auto-restart".into();
        assert_eq!(
            did_not_stay(&started, &again, RestartMode::Restart, settle),
            "unit came back (MainPID 7) but did not stay active for 5s: unit is activating (auto-restart)"
        );
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
