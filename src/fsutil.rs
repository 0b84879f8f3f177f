//! Careful file writing: exclusive private temp files, owner and mode carried over, fsync,
//! rename, directory fsync. Nothing here ever truncates a file in place.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Owner, group and mode of a file, to give its replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileMeta {
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl FileMeta {
    /// The metadata of an existing file.
    pub fn of(path: &Path) -> anyhow::Result<FileMeta> {
        let m = fs::metadata(path)
            .with_context(|| format!("reading metadata of {}", path.display()))?;
        Ok(FileMeta {
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        })
    }
}

impl FileMeta {
    /// A new file of ours: `mode`, owned by this process's user and group.
    pub fn own(mode: u32) -> FileMeta {
        let (uid, gid) = fs::metadata("/proc/self").map_or((0, 0), |m| (m.uid(), m.gid()));
        FileMeta { mode, uid, gid }
    }
}

/// The temp file name used beside `target` (hidden, recognisable, one per target).
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.certrenewd-tmp"))
}

/// Whether a file name is one of our temp files.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".certrenewd-tmp")
}

/// Writes `bytes` to the temp file beside `target`: created exclusively, never through a
/// symlink, mode 0600 while written, then given `meta`, then fsynced. Returns its path.
pub fn write_temp(target: &Path, bytes: &[u8], meta: &FileMeta) -> anyhow::Result<PathBuf> {
    write_temp_step(target, bytes, meta, "temp")
}

/// [`write_temp`], with its write and fsync named `write-<step>` and `fsync-<step>` for
/// error injection (`crate::failpoint`).
pub fn write_temp_step(
    target: &Path,
    bytes: &[u8],
    meta: &FileMeta,
    step: &str,
) -> anyhow::Result<PathBuf> {
    let tmp = temp_path(target);
    // A temp file of ours left by a crash is stale (we hold the lock): remove it first.
    // (Only when there is one: on a read-only directory unlink fails even for nothing.)
    if fs::symlink_metadata(&tmp).is_ok() {
        match fs::remove_file(&tmp) {
            Ok(()) => tracing::warn!(path = %tmp.display(), "removed a stale temp file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing stale {}", tmp.display())),
        }
    }
    crate::failpoint!("before-temp-write");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let result = (|| {
        crate::failpoint::io(&format!("write-{step}"))?;
        f.write_all(bytes)?;
        std::os::unix::fs::fchown(&f, Some(meta.uid), Some(meta.gid))?;
        f.set_permissions(fs::Permissions::from_mode(meta.mode))?;
        crate::failpoint::io(&format!("fsync-{step}"))?;
        f.sync_all()
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    Ok(tmp)
}

/// Renames `from` over `to` (same directory).
pub fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::rename(from, to).with_context(|| format!("renaming {} to {}", from.display(), to.display()))
}

/// Removes `path`; no file there is fine.
pub fn remove_if_exists(path: &Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// fsyncs a directory so renames and creations in it survive power loss.
/// Renames a state file that cannot be parsed to `<name>.corrupt-<UTC time>` beside it
/// (`-N` appended when that name is taken), durably; the name it now has.
pub fn set_aside(path: &Path, now: time::OffsetDateTime) -> anyhow::Result<PathBuf> {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let stamp = now
        .to_offset(time::UtcOffset::UTC)
        .format(&f)
        .unwrap_or_else(|_| now.unix_timestamp().to_string());
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let base = format!("{name}.corrupt-{stamp}");
    let aside = (0..)
        .map(|n| match n {
            0 => dir.join(&base),
            n => dir.join(format!("{base}-{n}")),
        })
        .find(|p| fs::symlink_metadata(p).is_err())
        .unwrap_or_else(|| dir.join(&base));
    rename(path, &aside)?;
    sync_dir(dir)?;
    Ok(aside)
}

pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

/// Replaces `target` with `bytes` atomically (temp, fsync, rename, directory fsync).
pub fn replace(target: &Path, bytes: &[u8], meta: &FileMeta) -> anyhow::Result<()> {
    let tmp = write_temp(target, bytes, meta)?;
    if let Err(e) = rename(&tmp, target) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(target.parent().unwrap_or(Path::new("/")))
}

/// Creates a directory (and parents) with mode 0700 if missing.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating directory {}", dir.display()))
}

/// Whether `e` (from [`StateFile::read`]) says the file is there but does not parse.
pub fn is_corrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<serde_json::Error>())
}

/// Whether `e` came from a full disk (ENOSPC, or EDQUOT: a quota).
pub fn is_no_space(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
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
        match fs::read(&self.path) {
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

/// Aborts the process at a named point when built with `failpoints` and
/// `CERTRENEWD_FAILPOINT` names it (crash-safety tests; see `crate::failpoint`).
#[macro_export]
macro_rules! failpoint {
    ($name:expr) => {
        $crate::failpoint::abort_point($name)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.key");
        fs::write(&target, b"old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
        let meta = FileMeta::of(&target).unwrap();
        replace(&target, b"new", &meta).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert_eq!(FileMeta::of(&target).unwrap().mode, 0o640);
        assert!(!temp_path(&target).exists());
    }

    #[test]
    fn temp_files_are_never_created_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.crt");
        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, temp_path(&target)).unwrap();
        // The stale link is removed, not followed.
        let meta = FileMeta {
            mode: 0o644,
            uid: 0,
            gid: 0,
        };
        let _ = write_temp(&target, b"x", &meta);
        assert!(!elsewhere.exists());
    }
}
