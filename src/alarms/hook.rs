//! The optional `alarm_command`: run on every raise and clear, with the alarm in its environment.
//!
//! As a sink ([`AlarmSink::emit`]) the hook runs off the pass's critical path: events are
//! queued to one background thread that runs them in order, one at a time, each for at most
//! its timeout, so a hung hook neither delays a pass nor holds the state lock.
//! [`AlarmSink::flush`] waits for the queue (the CLI before it exits, the daemon when it
//! stops).

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};
use std::time::Duration;

use super::{AlarmEvent, AlarmSink, AlarmState};
use crate::child::Ended;

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
    /// The background runner of emitted events, started by the first one.
    queue: Arc<OnceLock<Queue>>,
}

/// Events waiting for the background thread, and how many are not done yet.
#[derive(Debug)]
struct Queue {
    send: mpsc::Sender<AlarmEvent>,
    /// Events sent and not yet run to the end; `flush` waits for 0.
    undone: Arc<(Mutex<usize>, Condvar)>,
}

impl AlarmHook {
    /// A hook running `argv` (program first) for at most `timeout`; an empty argv is an error.
    pub fn new(argv: Vec<String>, timeout: Duration) -> anyhow::Result<Self> {
        anyhow::ensure!(
            argv.first().is_some_and(|p| !p.is_empty()),
            "alarm_command: the program (first element) is missing"
        );
        Ok(Self {
            argv,
            timeout,
            queue: Arc::default(),
        })
    }

    /// The background thread's queue, started on first use.
    fn queue(&self) -> &Queue {
        self.queue.get_or_init(|| {
            let (send, receive) = mpsc::channel::<AlarmEvent>();
            let undone = Arc::new((Mutex::new(0usize), Condvar::new()));
            let hook = AlarmHook {
                queue: Arc::default(),
                ..self.clone()
            };
            let counter = undone.clone();
            let spawned = std::thread::Builder::new()
                .name("alarm-hook".into())
                .spawn(move || {
                    for event in receive {
                        hook.log_failure(&event, hook.run(&event));
                        let (n, done) = &*counter;
                        let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
                        *n = n.saturating_sub(1);
                        done.notify_all();
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("starting the alarm hook's thread: {e}");
            }
            Queue { send, undone }
        })
    }

    fn log_failure(&self, event: &AlarmEvent, result: Result<(), HookError>) {
        if let Err(err) = result {
            tracing::warn!(
                alarm_id = event.kind.id(),
                alarm_entity = %event.entity,
                "{err}"
            );
        }
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
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&self.argv[1..])
            .envs(Self::env(event, state))
            .stdin(Stdio::null())
            // Keep our stdout for command output (e.g. JSON); the hook's output goes to our stderr.
            .stdout(Stdio::from(io::stderr()));
        match crate::child::run_bounded(cmd, self.timeout).await {
            Err(source) => Err(HookError::Spawn { program, source }),
            Ok((Ended::Exited(status), _)) if status.success() => Ok(()),
            Ok((Ended::Exited(status), _)) => Err(HookError::Failed { program, status }),
            Ok((Ended::TimedOut { pid }, _)) => Err(HookError::TimedOut {
                program,
                pid,
                timeout: self.timeout,
            }),
        }
    }
}

impl AlarmSink for AlarmHook {
    /// Queues the event for the background thread and returns at once.
    fn emit(&self, event: &AlarmEvent) {
        if event.state().is_none() {
            return;
        }
        let q = self.queue();
        let (n, _) = &*q.undone;
        *n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        if q.send.send(event.clone()).is_err() {
            // No thread to run it (it could not start): run it here rather than lose it.
            *n.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            self.log_failure(event, self.run(event));
        }
    }

    /// Waits until every queued event has run (each within the hook's timeout).
    fn flush(&self) {
        let Some(q) = self.queue.get() else {
            return;
        };
        let (n, done) = &*q.undone;
        let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            n = done.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
}
