//! [`UnitControl`] against a real systemd manager over D-Bus.
//!
//! A restart loads the unit, records its state and MainPID, opens the `JobRemoved` stream,
//! queues the (try-)restart job, waits for that job's `JobRemoved` and its result, then polls
//! until the unit is active again with a new main process, or failed, or the timeout is up.

use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use tokio::time::{Instant, sleep, timeout_at};
use zbus::OwnedObjectPath;
use zbus::proxy::CacheProperties;

use super::dbus::{JobRemovedStream, ManagerProxy, ServiceProxy, UnitProxy};
use super::{RestartMode, UnitControl, UnitRestart};
use crate::config::Bus;

/// How often the unit's state is read while waiting for it to become active.
const POLL: Duration = Duration::from_millis(100);

/// How long a unit must stay active (same MainPID) before its restart counts as good.
const DEFAULT_SETTLE: Duration = Duration::from_millis(500);

/// The real systemd manager, reached over one D-Bus connection kept for the daemon's life.
#[derive(Debug, Clone)]
pub struct Systemd {
    conn: zbus::Connection,
    manager: ManagerProxy<'static>,
    settle: Duration,
}

impl Systemd {
    /// Connects to the manager on `bus` (honouring `DBUS_SYSTEM_BUS_ADDRESS` / `DBUS_SESSION_BUS_ADDRESS`) and subscribes to its job signals.
    pub async fn connect(bus: Bus) -> anyhow::Result<Systemd> {
        let (conn, var, name) = match bus {
            Bus::System => (
                zbus::Connection::system().await,
                "DBUS_SYSTEM_BUS_ADDRESS",
                "system",
            ),
            Bus::User => (
                zbus::Connection::session().await,
                "DBUS_SESSION_BUS_ADDRESS",
                "session",
            ),
        };
        let address = std::env::var(var).unwrap_or_else(|_| "its default address".into());
        let conn =
            conn.with_context(|| format!("connecting to the D-Bus {name} bus at {address}"))?;
        Systemd::with_connection(conn).await
    }

    /// Connects to the manager on the bus at `address` (e.g. `unix:path=/run/user/0/bus`).
    pub async fn connect_address(address: &str) -> anyhow::Result<Systemd> {
        let conn = zbus::connection::Builder::address(address)
            .build()
            .await
            .with_context(|| format!("connecting to the D-Bus bus at {address}"))?;
        Systemd::with_connection(conn).await
    }

    async fn with_connection(conn: zbus::Connection) -> anyhow::Result<Systemd> {
        let manager = ManagerProxy::new(&conn)
            .await
            .context("creating the org.freedesktop.systemd1 manager proxy")?;
        manager
            .subscribe()
            .await
            .context("subscribing to systemd's job signals (Subscribe)")?;
        Ok(Systemd {
            conn,
            manager,
            settle: DEFAULT_SETTLE,
        })
    }

    /// Sets how long a restarted unit must stay active with the same MainPID to count as good.
    pub fn with_settle(mut self, settle: Duration) -> Systemd {
        self.settle = settle;
        self
    }

    /// Proxies for the unit at `path`; the Service interface only for `.service` units.
    async fn unit_handle(&self, unit: &str, path: OwnedObjectPath) -> anyhow::Result<UnitHandle> {
        let service = if unit.ends_with(".service") {
            Some(
                ServiceProxy::builder(&self.conn)
                    .path(path.clone())
                    .cache_properties(CacheProperties::No)
                    .build()
                    .await
                    .with_context(|| format!("creating the Service proxy for {unit}"))?,
            )
        } else {
            None
        };
        let proxy = UnitProxy::builder(&self.conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .with_context(|| format!("creating the Unit proxy for {unit}"))?;
        Ok(UnitHandle {
            name: unit.to_string(),
            unit: proxy,
            service,
        })
    }

    /// The whole restart; problems systemd reports go into `out`, D-Bus failures are errors.
    async fn run(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        out: &mut UnitRestart,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let path = self
            .manager
            .load_unit(unit)
            .await
            .with_context(|| format!("loading unit {unit}"))?;
        let handle = self.unit_handle(unit, path).await?;

        let load_state = handle
            .unit
            .load_state()
            .await
            .with_context(|| format!("reading LoadState of {unit}"))?;
        if load_state != "loaded" {
            let why = match handle.unit.load_error().await {
                Ok((_, msg)) if !msg.is_empty() => format!(": {msg}"),
                _ => String::new(),
            };
            let before = handle.snapshot().await?;
            before.fill(out);
            out.detail = format!("unit not loaded (load state: {load_state}{why})");
            return Ok(());
        }

        let before = handle.snapshot().await?;
        before.fill(out);
        out.main_pid_before = before.main_pid;
        // try-restart leaves a failed unit down (systemd makes the job a no-op), which would
        // count a unit that failed on an earlier restart of ours as fine and clear its alarm.
        // A failed unit was not stopped on purpose: restart (start) it instead.
        let mode = if mode == RestartMode::TryRestart && before.active == "failed" {
            RestartMode::Restart
        } else {
            mode
        };
        if before.active == "failed" {
            // A unit that failed repeatedly (on our earlier restart, or crash-looping on an
            // expired certificate) may have hit its start limit; systemd would refuse the start
            // with `start-limit-hit` until someone ran `systemctl reset-failed`.
            if let Err(e) = self.manager.reset_failed_unit(unit).await {
                tracing::warn!(
                    unit,
                    "reset-failed before the restart: {}",
                    dbus_message(&e)
                );
            }
        }

        // The stream (and its match rule) exists before the job does, so its JobRemoved
        // cannot be missed however fast systemd is.
        let mut jobs = self
            .manager
            .receive_job_removed_with_args(&[(2, unit)])
            .await
            .with_context(|| format!("listening for JobRemoved of {unit}"))?;
        let queued = match mode {
            RestartMode::Restart => self.manager.restart_unit(unit, "replace").await,
            RestartMode::TryRestart => self.manager.try_restart_unit(unit, "replace").await,
        };
        let job = match queued {
            Ok(job) => job,
            Err(e) => {
                out.detail = format!("systemd refused the {mode}: {}", dbus_message(&e));
                return Ok(());
            }
        };

        let job_result = match timeout_at(deadline, wait_for_job(&mut jobs, &job, unit)).await {
            Ok(result) => result?,
            Err(_) => {
                let now = handle.snapshot().await?;
                now.fill(out);
                out.detail = format!(
                    "timed out after {timeout:?} waiting for the {mode} job; unit is {}",
                    now.describe()
                );
                return Ok(());
            }
        };
        out.job_result = Some(job_result.clone());

        let now = handle.snapshot().await?;
        now.fill(out);
        if mode == RestartMode::TryRestart && !before.is_running() {
            // systemd turned the try-restart into a no-op: the unit was not running.
            out.ok = true;
            out.detail = format!("{}, not started (try-restart)", before.active);
            return Ok(());
        }
        if job_result != "done" {
            out.detail = format!("job {job_result}; unit is {}", now.describe());
            return Ok(());
        }
        handle
            .await_active(&before, mode, timeout, deadline, self.settle, out)
            .await
    }
}

impl UnitControl for Systemd {
    async fn restart(&self, unit: &str, mode: RestartMode, timeout: Duration) -> UnitRestart {
        let mut out = UnitRestart::failed(unit, String::new());
        if let Err(e) = self.run(unit, mode, timeout, &mut out).await {
            out.ok = false;
            out.detail = format!("{e:#}");
        }
        out
    }
}

/// Waits for the `JobRemoved` of `job` and returns its result.
async fn wait_for_job(
    jobs: &mut JobRemovedStream,
    job: &OwnedObjectPath,
    unit: &str,
) -> anyhow::Result<String> {
    while let Some(signal) = jobs.next().await {
        let args = signal
            .args()
            .with_context(|| format!("decoding JobRemoved for {unit}"))?;
        if args.job().as_str() == job.as_str() {
            return Ok(args.result().to_string());
        }
    }
    bail!("the D-Bus connection closed while waiting for the job of {unit}")
}

/// The message of a D-Bus error reply without zbus's decoration.
fn dbus_message(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(msg), _) => format!("{msg} ({name})"),
        other => other.to_string(),
    }
}

/// Proxies on one unit's object.
struct UnitHandle {
    name: String,
    unit: UnitProxy<'static>,
    service: Option<ServiceProxy<'static>>,
}

/// What a unit looks like at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    active: String,
    sub: String,
    main_pid: u32,
    result: String,
    service_type: String,
    invocation: Vec<u8>,
}

impl Snapshot {
    /// `active (running)`, or `failed (failed), result: exit-code`.
    fn describe(&self) -> String {
        if self.result.is_empty() || self.result == "success" {
            format!("{} ({})", self.active, self.sub)
        } else {
            format!("{} ({}), result: {}", self.active, self.sub, self.result)
        }
    }

    /// Whether systemd would restart (not skip) this unit on try-restart.
    fn is_running(&self) -> bool {
        matches!(
            self.active.as_str(),
            "active" | "reloading" | "activating" | "refreshing"
        )
    }

    /// Whether this is a new run of the unit compared with `before`.
    fn is_new_run_since(&self, before: &Snapshot) -> bool {
        if before.main_pid != 0 && self.main_pid != 0 {
            return self.main_pid != before.main_pid;
        }
        if !before.invocation.is_empty() && !self.invocation.is_empty() {
            return self.invocation != before.invocation;
        }
        before.main_pid == 0 || self.main_pid != 0
    }

    fn fill(&self, out: &mut UnitRestart) {
        out.active_state = self.active.clone();
        out.sub_state = self.sub.clone();
        out.main_pid_after = self.main_pid;
    }
}

impl UnitHandle {
    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
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
    async fn await_active(
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
    fn ended(&self, mode: RestartMode) -> Option<String> {
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
    fn ended_well(&self) -> bool {
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
