//! The one lock shared by the daemon and the `renew` command: never two writers.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Held while a pass runs; released on drop.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes `<state_dir>/lock`, waiting up to `timeout` for another holder.
    pub fn acquire(state_dir: &Path, timeout: Duration) -> anyhow::Result<StateLock> {
        Self::acquire_unless(state_dir, timeout, &crate::coordinate::Stop::default())
    }

    /// [`StateLock::acquire`], giving up at once when `stop` is requested (SIGTERM).
    pub fn acquire_unless(
        state_dir: &Path,
        timeout: Duration,
        stop: &crate::coordinate::Stop,
    ) -> anyhow::Result<StateLock> {
        crate::fsutil::private_dir(state_dir)?;
        let path = state_dir.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .with_context(|| format!("opening lock {}", path.display()))?;
        let start = Instant::now();
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    if stop.requested() {
                        bail!(
                            "stopping (SIGTERM) while waiting for another certrenewd holding {}: this pass did nothing",
                            path.display()
                        );
                    }
                    if start.elapsed() >= timeout {
                        let mut holder = String::new();
                        let _ = file.read_to_string(&mut holder);
                        bail!(
                            "another certrenewd (pid {}) holds {}; gave up after {}s (lock_timeout_secs)",
                            holder.trim(),
                            path.display(),
                            timeout.as_secs()
                        );
                    }
                    if !told {
                        tracing::info!("waiting for another certrenewd holding {}", path.display());
                        told = true;
                    }
                    // Waiting for the holder, within `timeout`, is progress (see `progress`).
                    crate::progress::step();
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
        file.set_len(0)?;
        file.rewind()?;
        let _ = write!(file, "{}", std::process::id());
        Ok(StateLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_then_gives_up_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::acquire(dir.path(), Duration::ZERO).unwrap();
        let err = StateLock::acquire(dir.path(), Duration::from_millis(300)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        drop(first);
        StateLock::acquire(dir.path(), Duration::ZERO).unwrap();
    }
}
