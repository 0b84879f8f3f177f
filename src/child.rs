//! A child process run for at most a while: in its own process group, so that past the
//! timeout the whole group is killed (a shell script's children too), then reaped. Shared
//! by the `alarm_command` hook and the watches' `post_renew_command`.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// How a bounded run ended.
#[derive(Debug)]
pub enum Ended {
    /// It exited (or was ended by a signal) within the time.
    Exited(ExitStatus),
    /// It ran past the time: its group was killed and it was reaped.
    TimedOut {
        /// Its PID.
        pid: u32,
    },
}

/// Spawns `cmd` in a process group of its own and waits for it at most `timeout`. Its
/// stderr, when piped by the caller, is read to the end meanwhile and returned.
pub async fn run_bounded(
    mut cmd: tokio::process::Command,
    timeout: Duration,
) -> io::Result<(Ended, Vec<u8>)> {
    let mut child = cmd.process_group(0).kill_on_drop(true).spawn()?;
    let pid = child.id().unwrap_or_default();
    let mut stderr = child.stderr.take();
    let mut said = Vec::new();
    let waited = tokio::time::timeout(timeout, async {
        if let Some(s) = stderr.as_mut() {
            // Read to the end, so a chatty child never blocks on a full pipe.
            let _ = s.read_to_end(&mut said).await;
        }
        child.wait().await
    })
    .await;
    match waited {
        Ok(status) => Ok((Ended::Exited(status?), said)),
        Err(_) => {
            // The group is the child's own, and the child is not reaped yet, so its PID
            // (the group's ID) is still ours.
            if let Some(group) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = child.wait().await;
            Ok((Ended::TimedOut { pid }, said))
        }
    }
}
