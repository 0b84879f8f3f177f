//! [`UnitControl`] against a real systemd manager over D-Bus.
//!
//! A restart loads the unit, records its state and MainPID, opens the `JobRemoved` stream,
//! queues the (try-)restart job, waits for that job's `JobRemoved` and its result, then polls
//! until the unit is active again with a new main process, or failed, or the timeout is up.

use crate::causes::Causes;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use tokio::time::{Instant, timeout_at};
use zbus::OwnedObjectPath;
use zbus::proxy::CacheProperties;

use super::dbus::{JobRemovedStream, ManagerProxy, ServiceProxy, UnitProxy};
use super::unit_state::{Snapshot, UnitHandle};
use super::{Fence, RestartMode, StopFailed, UnitControl, UnitRestart, fenced};
use crate::components::UnitSettings;
use once_more::Progress;

mod once_more;
use crate::config::Bus;

/// How long a unit must stay active in its new run before its restart counts as good
/// (`restart_settle_secs`).
const DEFAULT_SETTLE: Duration = Duration::from_secs(5);

/// The real systemd manager, reached over one D-Bus connection kept for the daemon's life
/// and made again when it fails (the bus daemon restarted).
#[derive(Debug, Clone)]
pub struct Systemd {
    /// The connection in use; clones share it, so a reconnection serves them all.
    link: Arc<Mutex<Link>>,
    /// Where to connect again.
    target: Target,
    settle: Duration,
}

/// Which bus a [`Systemd`] connects to.
#[derive(Debug, Clone)]
enum Target {
    Bus(Bus),
    Address(String),
}

impl Target {
    /// `the system bus at unix:path=…`, for a message.
    fn describe(&self) -> String {
        match self {
            Target::Bus(bus) => {
                let (var, name) = bus_names(*bus);
                let at = std::env::var(var).unwrap_or_else(|_| "its default address".into());
                format!("the {name} bus at {at}")
            }
            Target::Address(a) => format!("the bus at {a}"),
        }
    }
}

/// One connection to the bus and the manager proxy on it.
#[derive(Debug, Clone)]
struct Link {
    conn: zbus::Connection,
    manager: ManagerProxy<'static>,
}

impl Systemd {
    /// Connects to the manager on `bus` (honouring `DBUS_SYSTEM_BUS_ADDRESS` / `DBUS_SESSION_BUS_ADDRESS`) and subscribes to its job signals.
    pub async fn connect(bus: Bus) -> anyhow::Result<Systemd> {
        Systemd::with_target(Target::Bus(bus)).await
    }

    /// Connects to the manager on the bus at `address` (e.g. `unix:path=/run/user/0/bus`).
    pub async fn connect_address(address: &str) -> anyhow::Result<Systemd> {
        Systemd::with_target(Target::Address(address.to_string())).await
    }

    async fn with_target(target: Target) -> anyhow::Result<Systemd> {
        let link = Link::open(&target).await?;
        Ok(Systemd {
            link: Arc::new(Mutex::new(link)),
            target,
            settle: DEFAULT_SETTLE,
        })
    }

    /// Sets how long a restarted unit must stay active in its new run to count as good.
    pub fn with_settle(mut self, settle: Duration) -> Systemd {
        self.settle = settle;
        self
    }

    /// The connection in use.
    fn link(&self) -> Link {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes a new connection in place of the one in use, for every clone.
    async fn reconnect(&self) -> anyhow::Result<Link> {
        let link = Link::open(&self.target).await?;
        *self.link.lock().unwrap_or_else(|e| e.into_inner()) = link.clone();
        Ok(link)
    }
}

/// How long connecting to systemd over D-Bus (the connection, its authentication and the
/// subscription to job signals) may take: a bus that accepts the connection and never
/// answers must not hold a pass that holds the restart lock.
const CONNECT_FOR: Duration = Duration::from_secs(10);

impl Link {
    async fn open(target: &Target) -> anyhow::Result<Link> {
        match tokio::time::timeout(CONNECT_FOR, Link::open_now(target)).await {
            Ok(link) => link,
            Err(_) => anyhow::bail!(
                "connecting to systemd over D-Bus ({}): no answer within {}s",
                target.describe(),
                CONNECT_FOR.as_secs()
            ),
        }
    }

    async fn open_now(target: &Target) -> anyhow::Result<Link> {
        let conn = match target {
            Target::Bus(bus) => connect_bus(*bus).await?,
            Target::Address(address) => zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .with_context(|| format!("connecting to the D-Bus bus at {address}"))?,
        };
        let manager = ManagerProxy::new(&conn)
            .await
            .context("creating the org.freedesktop.systemd1 manager proxy")?;
        manager
            .subscribe()
            .await
            .context("subscribing to systemd's job signals (Subscribe)")?;
        Ok(Link { conn, manager })
    }

    /// Loads `unit` and makes its proxies.
    async fn load(&self, unit: &str) -> anyhow::Result<UnitHandle> {
        let path = self
            .manager
            .load_unit(unit)
            .await
            .with_context(|| format!("loading unit {unit}"))?;
        self.unit_handle(unit, path).await
    }

    /// `unit`'s `ActiveState` and `ActiveEnterTimestamp`; none when it is not loaded.
    async fn active_since(&self, unit: &str) -> anyhow::Result<Option<(String, u64)>> {
        let handle = self.load(unit).await?;
        if handle.unit.load_state().await? != "loaded" {
            return Ok(None);
        }
        let active = (handle.unit.active_state().await)
            .with_context(|| format!("reading the ActiveState of {unit}"))?;
        let since = (handle.unit.active_enter_timestamp().await)
            .with_context(|| format!("reading the ActiveEnterTimestamp of {unit}"))?;
        Ok(Some((active, since)))
    }

    /// What systemd runs `unit` with; none for a unit it has not loaded (`not-found`).
    async fn settings(&self, unit: &str) -> anyhow::Result<Option<UnitSettings>> {
        let handle = self.load(unit).await?;
        if handle.unit.load_state().await? != "loaded" {
            return Ok(None);
        }
        let Some(service) = &handle.service else {
            return Ok(None);
        };
        let exec = service.exec_start().await.context("reading ExecStart")?;
        let files = service
            .environment_files()
            .await
            .context("reading EnvironmentFiles")?;
        Ok(Some(UnitSettings {
            unit: unit.to_string(),
            exec_start: exec.into_iter().map(|e| (e.0, e.1)).collect(),
            environment: service.environment().await.context("reading Environment")?,
            environment_files: (files.into_iter())
                .map(|(f, optional)| (f.into(), optional))
                .collect(),
        }))
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
        settle: Duration,
        out: &mut UnitRestart,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        // A connection error, as after the bus daemon restarted (error-path tests).
        crate::failpoint::io("dbus-call")
            .map_err(|e| zbus::Error::InputOutput(Arc::new(e)))
            .with_context(|| format!("loading unit {unit}"))?;
        let handle = self.load(unit).await?;
        match load_state(&handle, out).await?.as_str() {
            "loaded" => {}
            // A unit that is not on this node cannot be running on the old certificate:
            // try-restart passes it over; restart was asked to start it and cannot.
            "not-found" if mode == RestartMode::TryRestart => {
                out.ok = true;
                out.detail = format!("{}; passed over (try-restart)", out.detail);
                tracing::info!("{unit}: not loaded on this node, passed over (try-restart)");
                return Ok(());
            }
            _ => return Ok(()),
        }
        let before = handle.snapshot().await?;
        before.fill(out);
        out.main_pid_before = before.main_pid;
        if mode == RestartMode::StartFailed && before.active != "failed" {
            out.not_restarted = true;
            out.detail = format!(
                "{unit} is {}, not failed: only a unit that failed is started without the restart lock (one kept down by an administrator or a cluster manager stays down)",
                before.describe()
            );
            return Ok(());
        }
        let mode = self.revive_if_failed(unit, mode, &before).await;
        progress.before = Some(before.clone());
        if let Err(why) = progress.fence.check() {
            out.detail = fenced(unit, &why);
            out.not_restarted = true;
            return Ok(());
        }
        let job = self.run_job(&handle, mode, timeout, deadline, out, &mut progress.queued);
        let Some(job_result) = job.await? else {
            return Ok(());
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
            .await_active(&before, mode, timeout, deadline, settle, out)
            .await
    }

    /// The mode to use for a unit in the state `before`. try-restart leaves a failed unit
    /// down (systemd makes the job a no-op), which would count a unit that failed on an
    /// earlier restart of ours as fine and clear its alarm: a failed unit was not stopped on
    /// purpose, so it is started, after `reset-failed` (it may have hit its start limit
    /// crash-looping on an expired certificate, and systemd would refuse the start). A start
    /// stays a start.
    async fn revive_if_failed(
        &self,
        unit: &str,
        mode: RestartMode,
        before: &Snapshot,
    ) -> RestartMode {
        if before.active != "failed" {
            return mode;
        }
        if let Err(e) = self.manager.reset_failed_unit(unit).await {
            tracing::warn!(
                unit,
                "reset-failed before the restart: {}",
                dbus_message(&e)
            );
        }
        match mode {
            RestartMode::StartFailed => mode,
            _ => RestartMode::Restart,
        }
    }

    /// Queues the (try-)restart job and waits for its `JobRemoved`; its result, or `None`
    /// when systemd refused the job or it did not finish in time (said in `out`).
    async fn run_job(
        &self,
        handle: &UnitHandle,
        mode: RestartMode,
        timeout: Duration,
        deadline: Instant,
        out: &mut UnitRestart,
        queued_job: &mut bool,
    ) -> anyhow::Result<Option<String>> {
        let unit = handle.name.as_str();
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
            RestartMode::StartFailed => self.manager.start_unit(unit, "replace").await,
        };
        let job = match queued {
            Ok(job) => {
                *queued_job = true;
                // The connection lost once the job is queued (error-path tests).
                crate::failpoint::io("dbus-after-job")
                    .map_err(|e| zbus::Error::InputOutput(Arc::new(e)))
                    .with_context(|| format!("waiting for the {mode} job of {unit}"))?;
                job
            }
            Err(e) => {
                out.detail = format!("systemd refused the {mode}: {}", dbus_message(&e));
                return Ok(None);
            }
        };
        match timeout_at(deadline, wait_for_job(&mut jobs, &job, unit)).await {
            Ok(result) => result.map(Some),
            Err(_) => {
                let now = handle.snapshot().await?;
                now.fill(out);
                out.detail = format!(
                    "timed out after {timeout:?} waiting for the {mode} job; unit is {}",
                    now.describe()
                );
                Ok(None)
            }
        }
    }
}

/// The unit's `LoadState`; when it is not `loaded`, `out` says so and why.
async fn load_state(handle: &UnitHandle, out: &mut UnitRestart) -> anyhow::Result<String> {
    let unit = handle.name.as_str();
    let load_state = handle
        .unit
        .load_state()
        .await
        .with_context(|| format!("reading LoadState of {unit}"))?;
    if load_state == "loaded" {
        return Ok(load_state);
    }
    let why = match handle.unit.load_error().await {
        Ok((_, msg)) if !msg.is_empty() => format!(": {msg}"),
        _ => String::new(),
    };
    handle.snapshot().await?.fill(out);
    out.detail = format!("unit not loaded (load state: {load_state}{why})");
    Ok(load_state)
}

impl UnitControl for Systemd {
    async fn restart(&self, unit: &str, mode: RestartMode, timeout: Duration) -> UnitRestart {
        self.restart_once_more(unit, mode, timeout, Fence::default())
            .await
    }

    /// The fence is asked right before the job is queued, after the D-Bus round trips that
    /// load the unit and read its state.
    async fn restart_fenced(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        fence: Fence,
    ) -> UnitRestart {
        self.restart_once_more(unit, mode, timeout, fence).await
    }

    async fn active_since(&self, unit: &str) -> anyhow::Result<Option<(String, u64)>> {
        self.link().active_since(unit).await
    }

    async fn stop_fenced(
        &self,
        unit: &str,
        timeout: Duration,
        fence: Fence,
    ) -> Result<(), StopFailed> {
        let unfinished = |e: anyhow::Error| StopFailed::Unfinished(format!("{}", Causes(&e)));
        let link = self.link();
        let handle = (link.load(unit).await)
            .map_err(|e| StopFailed::NotStopped(format!("{}", Causes(&e))))?;
        let state = handle.unit.load_state().await.unwrap_or_default();
        if state != "loaded" {
            return Err(StopFailed::NotStopped(format!(
                "unit not loaded (load state: {state})"
            )));
        }
        // The stream exists before the job does, so its JobRemoved cannot be missed.
        let mut jobs = (link
            .manager
            .receive_job_removed_with_args(&[(2, unit)])
            .await)
            .with_context(|| format!("listening for JobRemoved of {unit}"))
            .map_err(|e| StopFailed::NotStopped(format!("{}", Causes(&e))))?;
        fence
            .check()
            .map_err(|why| StopFailed::NotStopped(fenced(unit, &why)))?;
        let job = (link.manager.stop_unit(unit, "replace").await).map_err(|e| {
            StopFailed::NotStopped(format!("systemd refused the stop: {}", dbus_message(&e)))
        })?;
        let result = match tokio::time::timeout(timeout, wait_for_job(&mut jobs, &job, unit)).await
        {
            Ok(result) => result.map_err(unfinished)?,
            Err(_) => {
                return Err(StopFailed::Unfinished(format!(
                    "the stop job did not finish within {timeout:?}"
                )));
            }
        };
        let now = handle.snapshot().await.map_err(unfinished)?;
        match result == "done" && !now.is_running() && now.main_pid == 0 {
            true => Ok(()),
            false => Err(StopFailed::Unfinished(format!(
                "stop job {result}; unit is {}",
                now.describe()
            ))),
        }
    }

    async fn unit_settings(&self, units: &[String]) -> Vec<UnitSettings> {
        let mut out = Vec::new();
        for unit in units.iter().filter(|u| u.ends_with(".service")) {
            match self.link().settings(unit).await {
                Ok(Some(s)) => out.push(s),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    unit,
                    "cannot read the settings of {unit} from systemd, so every renewal of its watch restarts it: {}",
                    Causes(&e)
                ),
            }
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
    Err(ConnectionClosed(unit.to_string()).into())
}

/// Connects to the system or session bus, naming the address in the error.
pub(super) async fn connect_bus(bus: Bus) -> anyhow::Result<zbus::Connection> {
    let (var, name) = bus_names(bus);
    let connect = async {
        match bus {
            Bus::System => zbus::Connection::system().await,
            Bus::User => zbus::Connection::session().await,
        }
    };
    let address = std::env::var(var).unwrap_or_else(|_| "its default address".into());
    match tokio::time::timeout(CONNECT_FOR, connect).await {
        Ok(conn) => {
            conn.with_context(|| format!("connecting to the D-Bus {name} bus at {address}"))
        }
        Err(_) => anyhow::bail!(
            "connecting to the D-Bus {name} bus at {address}: no answer within {}s",
            CONNECT_FOR.as_secs()
        ),
    }
}

/// The variable naming `bus`'s address, and the bus in words.
fn bus_names(bus: Bus) -> (&'static str, &'static str) {
    match bus {
        Bus::System => ("DBUS_SYSTEM_BUS_ADDRESS", "system"),
        Bus::User => ("DBUS_SESSION_BUS_ADDRESS", "session"),
    }
}

/// Whether `e` says the connection itself is gone (the bus daemon restarted or closed it),
/// rather than systemd answering with an error.
fn is_connection_error(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        if cause.downcast_ref::<ConnectionClosed>().is_some() {
            return true;
        }
        match cause.downcast_ref::<zbus::Error>() {
            Some(zbus::Error::InputOutput(_)) => true,
            Some(zbus::Error::MethodError(name, _, _)) => matches!(
                name.as_str(),
                "org.freedesktop.DBus.Error.Disconnected" | "org.freedesktop.DBus.Error.NoReply"
            ),
            _ => false,
        }
    })
}

/// The connection closed while a reply or signal was awaited.
#[derive(Debug, thiserror::Error)]
#[error("the D-Bus connection closed while waiting for the job of {0}")]
struct ConnectionClosed(String);

/// The message of a D-Bus error reply without zbus's decoration.
fn dbus_message(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(msg), _) => format!("{msg} ({name})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bus that takes the connection and never answers (a D-Bus daemon stopped with
    /// SIGSTOP, say) costs a bounded wait, not a pass that holds the restart lock forever.
    #[tokio::test]
    async fn a_bus_that_never_answers_is_given_up_on_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bus");
        // Bound and listening: the kernel completes each connection, nothing answers it.
        let _silent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let t0 = std::time::Instant::now();
        let address = format!("unix:path={}", socket.display());
        let Err(e) = Systemd::connect_address(&address).await else {
            panic!("connected to a bus that never answers");
        };
        let took = t0.elapsed();
        assert!(took < CONNECT_FOR + Duration::from_secs(5), "{took:?}");
        let said = format!("{e:#}");
        assert!(
            said.contains(&format!("the bus at {address}"))
                && said.contains("no answer within 10s"),
            "{said}"
        );
    }
}
