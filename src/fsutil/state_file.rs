//! The daemon's state directory: its JSON records, written whole and durably, and the
//! state lock's file that says one writer at a time.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::bounded_read::read;
use super::careful_write::{FileMeta, private_dir, remove_all_temps_of, replace, sync_dir};

/// The state lock's file in a state directory: one writer at a time (`pass::state_lock`).
pub const STATE_LOCK: &str = "lock";

/// Marks the holder of the state lock in `state_dir` as moving on: the lock file's
/// modification time becomes now. A pass waiting for the lock counts `lock_timeout_secs`
/// from the latest mark, so a long restart stage that moves is waited for, and a holder
/// stuck without a mark for that long is not. Best effort: a mark that fails only shortens
/// the waiter's patience.
pub fn mark_progress(state_dir: &Path) {
    let lock = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(state_dir.join(STATE_LOCK));
    if let Ok(f) = lock {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// Whether `e` (from [`StateFile::read`]) says the file is there but does not parse.
pub fn is_corrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<serde_json::Error>())
}

/// One of the daemon's JSON records in `state_dir` (`restarts.json`, `backoff.json`, ...):
/// read (none when missing; a corrupt one an error naming it), written whole and durably
/// (private directory, temp file, fsync, rename, directory fsync; mode 0600 unless
/// [`StateFile::readable`]), and removed durably once it has nothing left to say.
#[derive(Debug, Clone)]
pub struct StateFile {
    dir: PathBuf,
    path: PathBuf,
    mode: u32,
}

impl StateFile {
    /// `state_dir/name`.
    pub fn new(state_dir: &Path, name: &str) -> StateFile {
        StateFile {
            dir: state_dir.to_path_buf(),
            path: state_dir.join(name),
            mode: 0o600,
        }
    }

    /// Written mode 0644: what operators read with the CLI (alarms, the inhibit).
    pub fn readable(self) -> StateFile {
        StateFile {
            mode: 0o644,
            ..self
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its contents; `None` when there is no file. A file that does not parse is an error
    /// saying `corrupt` (what to do about it) after its path.
    pub fn read<T: serde::de::DeserializeOwned>(&self, corrupt: &str) -> anyhow::Result<Option<T>> {
        match read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is corrupt{corrupt}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", self.path.display())),
        }
    }

    /// Writes `value` whole and durably.
    pub fn write<T: serde::Serialize>(&self, value: &T) -> anyhow::Result<()> {
        private_dir(&self.dir)?;
        // A temp file a killed process left beside the record (ours are per process).
        remove_all_temps_of(&self.path)?;
        let mut bytes = serde_json::to_vec_pretty(value)?;
        bytes.push(b'\n');
        replace(&self.path, &bytes, &FileMeta::own(self.mode))
    }

    /// Removes the file durably; no file is fine.
    pub fn remove(&self) -> anyhow::Result<()> {
        match fs::remove_file(&self.path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", self.path.display())),
        }
    }

    /// [`StateFile::write`], or [`StateFile::remove`] when `empty`: a record with nothing
    /// in it is no record.
    pub fn write_or_remove<T: serde::Serialize>(
        &self,
        value: &T,
        empty: bool,
    ) -> anyhow::Result<()> {
        match empty {
            true => self.remove(),
            false => self.write(value),
        }
    }
}
