//! The optional `alarm_command`: run on every raise and clear, with the alarm in its environment.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use super::{AlarmEvent, AlarmSink, AlarmState};

/// The default time a hook may run before it is killed.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a hook run did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The program could not be started.
    #[error("starting alarm command {program}: {source}")]
    Spawn {
        /// argv[0].
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Waiting for the child failed (it was killed and reaped).
    #[error("waiting for alarm command {program}: {source}")]
    Wait {
        /// argv[0].
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The program exited unsuccessfully.
    #[error("alarm command {program} failed: {status}")]
    Failed {
        /// argv[0].
        program: String,
        /// Its exit status.
        status: ExitStatus,
    },
    /// The program ran past the timeout and was killed.
    #[error("alarm command {program} (pid {pid}) still running after {timeout:?}: killed")]
    TimedOut {
        /// argv[0].
        program: String,
        /// The killed child's PID.
        pid: u32,
        /// The limit it exceeded.
        timeout: Duration,
    },
}

/// An `alarm_command` (argv, no shell) with its timeout.
#[derive(Debug, Clone)]
pub struct AlarmHook {
    argv: Vec<String>,
    timeout: Duration,
}

impl AlarmHook {
    /// A hook running `argv` (program first) for at most `timeout`; an empty argv is an error.
    pub fn new(argv: Vec<String>, timeout: Duration) -> anyhow::Result<Self> {
        anyhow::ensure!(
            argv.first().is_some_and(|p| !p.is_empty()),
            "alarm_command: the program (first element) is missing"
        );
        Ok(Self { argv, timeout })
    }

    /// The environment a hook sees for a raise or clear.
    pub fn env(event: &AlarmEvent, state: AlarmState) -> Vec<(&'static str, String)> {
        // An environment value cannot hold NUL.
        let clean = |s: &str| s.replace('\0', "\\0");
        vec![
            ("ALARM_ID", event.kind.id().to_owned()),
            ("ALARM_STATE", state.as_str().to_owned()),
            ("ALARM_SEVERITY", event.kind.severity().as_str().to_owned()),
            ("ALARM_ENTITY", clean(&event.entity)),
            ("ALARM_REASON", clean(&event.reason)),
            ("ALARM_TEXT", event.kind.text().to_owned()),
        ]
    }

    /// Runs the hook for a raise or clear and waits (up to the timeout); a reason update runs nothing.
    ///
    /// The hook runs in its own process group; past the timeout the whole group is killed
    /// (a shell script's children too) and the hook is reaped. Callable from a blocking
    /// thread of the daemon's runtime or from plain synchronous code.
    pub fn run(&self, event: &AlarmEvent) -> Result<(), HookError> {
        let Some(state) = event.state() else {
            return Ok(());
        };
        let run = self.run_async(event, state);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(run),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| HookError::Wait {
                    program: self.argv[0].clone(),
                    source,
                })?
                .block_on(run),
        }
    }

    async fn run_async(&self, event: &AlarmEvent, state: AlarmState) -> Result<(), HookError> {
        let program = self.argv[0].clone();
        let mut child = tokio::process::Command::new(&program)
            .args(&self.argv[1..])
            .envs(Self::env(event, state))
            .stdin(Stdio::null())
            // Keep our stdout for command output (e.g. JSON); the hook's output goes to our stderr.
            .stdout(Stdio::from(io::stderr()))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| HookError::Spawn {
                program: program.clone(),
                source,
            })?;
        let pid = child.id().unwrap_or_default();
        match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(HookError::Failed { program, status }),
            Ok(Err(source)) => Err(HookError::Wait { program, source }),
            Err(_) => {
                // The group is the hook's own (process_group(0)), and the hook is not reaped
                // yet, so its PID (the group's ID) is still ours.
                if let Some(group) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ =
                        rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                }
                let _ = child.wait().await;
                Err(HookError::TimedOut {
                    program,
                    pid,
                    timeout: self.timeout,
                })
            }
        }
    }
}

impl AlarmSink for AlarmHook {
    fn emit(&self, event: &AlarmEvent) {
        if let Err(err) = self.run(event) {
            tracing::warn!(
                alarm_id = event.kind.id(),
                alarm_entity = %event.entity,
                "{err}"
            );
        }
    }
}
