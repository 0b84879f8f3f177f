//! The optional `alarm_command`: run on every raise and clear, with the alarm in its environment.

use std::io;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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
    pub fn run(&self, event: &AlarmEvent) -> Result<(), HookError> {
        let Some(state) = event.state() else {
            return Ok(());
        };
        let program = self.argv[0].clone();
        let mut cmd = Command::new(&program);
        cmd.args(&self.argv[1..])
            .envs(Self::env(event, state))
            .stdin(Stdio::null())
            // Keep our stdout for command output (e.g. JSON); the hook's output goes to our stderr.
            .stdout(Stdio::from(io::stderr()));
        let mut child = cmd.spawn().map_err(|source| HookError::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = child.id();
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(HookError::Failed { program, status }),
                Ok(None) if start.elapsed() >= self.timeout => {
                    // Kill by PID (the child is not reaped yet, so the PID is still ours), then reap.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HookError::TimedOut {
                        program,
                        pid,
                        timeout: self.timeout,
                    });
                }
                Ok(None) => {
                    let left = self.timeout.saturating_sub(start.elapsed());
                    std::thread::sleep(pause.min(left).max(Duration::from_millis(1)));
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HookError::Wait { program, source });
                }
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
