//! What the daemon tells `certrenewd check` about itself, through `state_dir/daemon.json`:
//! its PID and its status line (the words of STATUS=), written when it is ready, after every
//! pass and when it stops. `check` then says whether the daemon runs, its last pass and its
//! next one, rather than what the schedule alone would promise.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::StateFile;

/// The record in `state_dir/daemon.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Published {
    /// The daemon's PID.
    pub pid: u32,
    /// When it was written (RFC 3339 UTC).
    pub updated: String,
    /// Its status line, as in STATUS=.
    pub status: String,
    /// Written by a daemon that stopped cleanly.
    pub stopped: bool,
}

/// The daemon as `check` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Its process is alive: its status line, as of `updated`.
    Running {
        pid: u32,
        status: String,
        updated: String,
    },
    /// It stopped, or died: what it last said, and when.
    NotRunning { status: String, updated: String },
    /// No daemon has run with this state directory.
    Never,
    /// The record cannot be read.
    Unreadable(String),
}

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "daemon.json").readable()
}

/// Writes the record; a failure is logged, never fatal (it only informs `check`).
pub fn publish(state_dir: &Path, status: &str, stopped: bool) {
    let record = Published {
        pid: std::process::id(),
        updated: crate::timefmt::rfc3339(time::OffsetDateTime::now_utc()),
        status: status.to_owned(),
        stopped,
    };
    if let Err(e) = file(state_dir).write(&record) {
        tracing::warn!("writing what check shows of the daemon: {e:#}");
    }
}

/// What the record says, checked against the process table: running only if it did not
/// stop and its PID is a live `certrenewd` process.
pub fn read(state_dir: &Path) -> Seen {
    let record: Published = match file(state_dir).read(": remove it; the daemon writes it again") {
        Ok(Some(r)) => r,
        Ok(None) => return Seen::Never,
        Err(e) => return Seen::Unreadable(format!("{e:#}")),
    };
    match !record.stopped && is_certrenewd(record.pid) {
        true => Seen::Running {
            pid: record.pid,
            status: record.status,
            updated: record.updated,
        },
        false => Seen::NotRunning {
            status: record.status,
            updated: record.updated,
        },
    }
}

/// Whether `pid` is a live process named `certrenewd` (not another that took the PID).
fn is_certrenewd(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "certrenewd")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_taken_for_the_daemon_and_a_stopped_one_is_not_running() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), Seen::Never);
        publish(dir.path(), "3 certificates watched", false);
        // The test binary is not named certrenewd: a PID that is not the daemon's.
        assert!(
            matches!(read(dir.path()), Seen::NotRunning { ref status, .. } if status == "3 certificates watched")
        );
        publish(dir.path(), "stopping", true);
        assert!(matches!(read(dir.path()), Seen::NotRunning { .. }));
        std::fs::write(dir.path().join("daemon.json"), "{").unwrap();
        assert!(matches!(read(dir.path()), Seen::Unreadable(ref e) if e.contains("daemon.json")));
    }
}
