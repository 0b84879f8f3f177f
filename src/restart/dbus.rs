//! Typed proxies for the few parts of systemd's D-Bus API that restarts need
//! (see `org.freedesktop.systemd1(5)`).

use zbus::OwnedObjectPath;

/// `org.freedesktop.systemd1.Manager` on `/org/freedesktop/systemd1`.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub(crate) trait Manager {
    /// Asks for job and unit signals even for jobs other clients start.
    fn subscribe(&self) -> zbus::Result<()>;

    /// Loads the unit (if needed) and returns its object path; missing units get `LoadState=not-found`.
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    /// The object path of a loaded unit; `NoSuchUnit` otherwise.
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queues a restart job (starting an inactive unit); returns the job's path.
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queues a start job (a no-op for a unit that is running); returns the job's path.
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queues a stop job; returns the job's path.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queues a try-restart job (a no-op for a unit that is not running); returns the job's path.
    fn try_restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Forgets a unit's failed state and its start-rate counter (`systemctl reset-failed`).
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    /// Emitted when a job finishes: `result` is done, canceled, timeout, failed, dependency or skipped.
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: zbus::ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// `org.freedesktop.systemd1.Unit` on a unit's object path.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
pub(crate) trait Unit {
    /// `loaded`, `not-found`, `bad-setting`, `error`, `masked`.
    #[zbus(property)]
    fn load_state(&self) -> zbus::Result<String>;

    /// Why loading failed: (D-Bus error name, message).
    #[zbus(property)]
    fn load_error(&self) -> zbus::Result<(String, String)>;

    /// `active`, `reloading`, `inactive`, `failed`, `activating`, `deactivating`.
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;

    /// The unit-type specific state, e.g. `running`, `dead`, `auto-restart`.
    #[zbus(property)]
    fn sub_state(&self) -> zbus::Result<String>;

    /// A fresh 128-bit id for each run of the unit.
    #[zbus(property, name = "InvocationID")]
    fn invocation_id(&self) -> zbus::Result<Vec<u8>>;

    /// The job queued for the unit: (id, path); id 0 when none.
    #[zbus(property)]
    fn job(&self) -> zbus::Result<(u32, OwnedObjectPath)>;

    /// When it last became active, in microseconds since the epoch (0: never).
    #[zbus(property)]
    fn active_enter_timestamp(&self) -> zbus::Result<u64>;
}

/// `org.freedesktop.systemd1.Service` on a service unit's object path.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
pub(crate) trait Service {
    /// The main process, 0 when none.
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;

    /// How the last run ended: `success`, `exit-code`, `signal`, `timeout`, `start-limit-hit`, ...
    #[zbus(property)]
    fn result(&self) -> zbus::Result<String>;

    /// `simple`, `exec`, `forking`, `oneshot`, `dbus`, `notify`, `idle`.
    #[zbus(property, name = "Type")]
    fn service_type(&self) -> zbus::Result<String>;

    /// Each `ExecStart=` line: (path, argv, ignore failure, start and exit times realtime
    /// and monotonic, PID, exit code and status of its last run).
    #[zbus(property)]
    fn exec_start(&self) -> zbus::Result<Vec<ExecCommand>>;

    /// `Environment=` assignments, `NAME=value`.
    #[zbus(property)]
    fn environment(&self) -> zbus::Result<Vec<String>>;

    /// `EnvironmentFile=` paths, with whether a missing one is ignored (`-`).
    #[zbus(property)]
    fn environment_files(&self) -> zbus::Result<Vec<(String, bool)>>;
}

/// One `ExecStart=` line as systemd's `a(sasbttttuii)` gives it.
pub(crate) type ExecCommand = (String, Vec<String>, bool, u64, u64, u64, u64, u32, i32, i32);
