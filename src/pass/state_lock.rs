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
    /// The watched directories, locked as well (see [`StateLock::with_tree`]).
    _tree: Vec<File>,
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
        let path = state_dir.join(crate::fsutil::STATE_LOCK);
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
        // Said once, in the log and on `renew`'s live line, for as long as it lasts.
        let mut live = None;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    if stop.requested() {
                        bail!(
                            "stopping ({}) while waiting for another certrenewd holding {}: this pass did nothing",
                            stop.by(),
                            path.display()
                        );
                    }
                    // The holder marks each step of its restart stage (`mark_progress`):
                    // patience counts from the latest mark, so a long stage that moves is
                    // waited for, a holder that stands still is not.
                    let since_mark = (file.metadata().and_then(|m| m.modified()).ok())
                        .and_then(|m| std::time::SystemTime::now().duration_since(m).ok())
                        .unwrap_or(Duration::ZERO);
                    if start.elapsed() >= timeout && since_mark >= timeout {
                        let mut holder = String::new();
                        let _ = file.read_to_string(&mut holder);
                        bail!(
                            "another certrenewd (pid {}) holds {}; gave up after {}s without a step from it (lock_timeout_secs)",
                            holder.trim(),
                            path.display(),
                            timeout.as_secs()
                        );
                    }
                    if live.is_none() {
                        tracing::info!("waiting for another certrenewd holding {}", path.display());
                        live = Some(crate::live::waiting(format!(
                            "another certrenewd holding {}",
                            path.display()
                        )));
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
        Ok(StateLock {
            _file: file,
            path,
            _tree: Vec::new(),
        })
    }

    /// Also locks the directories of `watched` (a file's parent), waiting up to `timeout`
    /// for another holder. Another holder has another state directory (this one's lock is
    /// held): two configurations over one tree, whose temp files and renewals would
    /// overwrite each other's. That fails here, naming the directory and the holder.
    ///
    /// Each directory is locked once, by its identity (device and inode), not its path: a
    /// watch that is a symlink to another, or a kubeconfig named through one, is the same
    /// directory, and a second lock of it, even by this process, would wait for the first.
    pub fn with_tree(mut self, watched: &[PathBuf], timeout: Duration) -> anyhow::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let mut dirs: Vec<((u64, u64), PathBuf)> = watched
            .iter()
            .filter_map(|p| match p.is_dir() {
                true => Some(p.clone()),
                false => p.parent().filter(|d| d.is_dir()).map(Path::to_path_buf),
            })
            .filter_map(|d| {
                let m = std::fs::metadata(&d).ok()?;
                Some(((m.dev(), m.ino()), d))
            })
            .collect();
        // In one order, the directories' identities, so that two processes never wait for
        // each other; each directory once, under the first of its paths.
        dirs.sort();
        dirs.dedup_by_key(|(id, _)| *id);
        let start = Instant::now();
        for (_, dir) in dirs {
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(&dir)
                .with_context(|| format!("opening watched directory {}", dir.display()))?;
            loop {
                match file.try_lock() {
                    Ok(()) => break,
                    Err(TryLockError::WouldBlock) if start.elapsed() < timeout => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(TryLockError::WouldBlock) => bail!(
                        "{} is held by another certrenewd ({}) with another state directory than {}: two configurations watch one tree, and their renewals would overwrite each other's; give each tree one configuration (gave up after {}s, lock_timeout_secs)",
                        dir.display(),
                        holder(&file).map_or("its PID unknown".into(), |pid| format!("pid {pid}")),
                        self.path.parent().unwrap_or(Path::new("")).display(),
                        timeout.as_secs()
                    ),
                    Err(TryLockError::Error(e)) => {
                        return Err(e).with_context(|| format!("locking {}", dir.display()));
                    }
                }
            }
            self._tree.push(file);
        }
        Ok(self)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The PID holding a flock on `file`, as `/proc/locks` says (`N: FLOCK ADVISORY WRITE PID
/// MAJ:MIN:INODE 0 EOF`). The file is read in several calls (the first a small probe), and
/// the kernel resumes each at a line number: a lock listed before ours and released between
/// two calls shifts ours out of the text read, so a miss is read again.
fn holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let ino = meta.ino().to_string();
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    (0..3).find_map(|_| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        in_locks(&locks, major, minor, &ino)
    })
}

/// The PID of the flock on inode `ino` of device `major`:`minor` in `/proc/locks`' text.
fn in_locks(locks: &str, major: u32, minor: u32, ino: &str) -> Option<u32> {
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (kind, pid, id) = (f.get(1)?, f.get(4)?, f.get(5)?);
        let mut id = id.split(':');
        let maj = u32::from_str_radix(id.next()?, 16).ok()?;
        let min = u32::from_str_radix(id.next()?, 16).ok()?;
        let same = *kind == "FLOCK" && maj == major && min == minor && id.next()? == ino;
        same.then(|| pid.parse().ok()).flatten()
    })
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

    /// A watch that is a symlink to another watched directory is one directory: locked once,
    /// not refused as held by this very process.
    #[test]
    fn a_directory_watched_through_a_symlink_too_is_locked_once() {
        let (state, tree) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let pki = tree.path().join("pki");
        std::fs::create_dir(&pki).unwrap();
        let link = tree.path().join("pki-link");
        std::os::unix::fs::symlink(&pki, &link).unwrap();
        let watched = [pki.clone(), link.clone(), link.join("admin.conf")];
        let held = StateLock::acquire(state.path(), Duration::ZERO)
            .and_then(|l| l.with_tree(&watched, Duration::ZERO))
            .unwrap();
        assert_eq!(held._tree.len(), 1);
    }

    #[test]
    fn a_tree_held_under_another_state_directory_is_refused_naming_it() {
        let (a, b, tree) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let watched = [tree.path().to_path_buf(), tree.path().join("admin.conf")];
        let first = StateLock::acquire(a.path(), Duration::ZERO)
            .and_then(|l| l.with_tree(&watched, Duration::ZERO))
            .unwrap();
        let err = StateLock::acquire(b.path(), Duration::ZERO)
            .and_then(|l| l.with_tree(&watched, Duration::from_millis(300)))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&tree.path().display().to_string()), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        StateLock::acquire(b.path(), Duration::ZERO)
            .and_then(|l| l.with_tree(&watched, Duration::ZERO))
            .unwrap();
    }
}
