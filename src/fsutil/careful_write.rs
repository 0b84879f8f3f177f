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

/// This process's mark in the names of its temp files: its PID and a random number, so that
/// no other process picks the same names (a PID alone repeats across PID namespaces: two
/// containers' daemons may both be PID 1). Recovery finds the temp files of a crashed pass
/// by the mark its pending record keeps, and removes those alone.
pub fn temp_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        // std seeds each `RandomState` from the system's random source.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32;
        format!("{}-{random:08x}", std::process::id())
    })
}

/// The temp file name this process uses beside `target`: hidden, recognisable, one per
/// target and process (`.<name>.<temp_tag>.certrenewd-tmp`).
pub fn temp_path(target: &Path) -> PathBuf {
    temp_path_tagged(target, Some(temp_tag()))
}

/// The temp file name beside `target` of the process marked `tag`; `None` is the one name
/// every process used before temp names were marked (`.<name>.certrenewd-tmp`), which a
/// pending record written then implies.
pub fn temp_path_tagged(target: &Path, tag: Option<&str>) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match tag {
        Some(tag) => target.with_file_name(format!(".{name}.{tag}.certrenewd-tmp")),
        None => target.with_file_name(format!(".{name}.certrenewd-tmp")),
    }
}

/// Removes every temp file beside `target`, whichever process's (the state directory's
/// records: only the holder of its lock writes there, so any other temp is a dead
/// process's).
pub fn remove_all_temps_of(target: &Path) -> anyhow::Result<()> {
    for (path, _) in temps_beside(target) {
        remove_if_exists(&path)?;
        tracing::warn!(path = %path.display(), "removed a stale temp file");
    }
    Ok(())
}

/// Removes the temp files beside `target` whose process is proven gone: no process holds
/// the temp's lock ([`replace`] holds it from the temp's creation to its rename), and it is
/// marked with a PID not running here, or with no mark (the one name every process used
/// before temp names were marked). A PID not running here may be a live writer in another
/// PID namespace sharing the file (a container, the metrics directory): its lock keeps its
/// temp. Best effort: what cannot be removed is left for the next write.
fn remove_dead_temps_of(target: &Path) {
    for (path, tag) in temps_beside(target) {
        // Exactly `<pid>-<8 hex digits>.` (see `temp_tag`): another file's temp, whose name
        // starts like this one's, never parses as one.
        let pid = tag
            .strip_suffix('.')
            .and_then(|t| t.split_once('-'))
            .filter(|(pid, r)| {
                pid.bytes().all(|b| b.is_ascii_digit())
                    && r.len() == 8
                    && r.bytes().all(|b| b.is_ascii_hexdigit())
            })
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        let gone = match pid {
            Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
            None => tag.is_empty(),
        };
        // Held while it is removed: a writer cannot take it up in between.
        let unlocked = gone.then(|| unheld(&path)).flatten();
        if unlocked.is_some() && fs::remove_file(&path).is_ok() {
            tracing::warn!(path = %path.display(), "removed a temp file its process left");
        }
    }
}

/// `path` opened with its lock taken, when no process holds it; none otherwise, or when
/// it cannot be opened (then nothing proves its writer gone).
fn unheld(path: &Path) -> Option<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    f.try_lock().ok().map(|()| f)
}

/// The temp files beside `target` (`.<name>.<mark>certrenewd-tmp`), each with its mark
/// (`<pid>-<random>.`, or empty for the unmarked name); none when the directory cannot be
/// read.
fn temps_beside(target: &Path) -> Vec<(PathBuf, String)> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Vec::new();
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let mark = n.strip_prefix(&prefix)?.strip_suffix("certrenewd-tmp")?;
            is_temp_name(&n).then(|| (e.path(), mark.to_string()))
        })
        .collect()
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
    write_temp_held(target, bytes, meta, step).map(|(tmp, _)| tmp)
}

/// [`write_temp_step`], the temp's lock held by the file returned for as long as it is
/// open: [`remove_dead_temps_of`] leaves a temp whose lock is held.
fn write_temp_held(
    target: &Path,
    bytes: &[u8],
    meta: &FileMeta,
    step: &str,
) -> anyhow::Result<(PathBuf, File)> {
    let tmp = temp_path(target);
    // A temp file of this process's left by an earlier failure is stale: remove it first.
    // (Another process's is never touched: its pending record names it.)
    // (Only when there is one: on a read-only directory unlink fails even for nothing.)
    if fs::symlink_metadata(&tmp).is_ok() {
        match fs::remove_file(&tmp) {
            Ok(()) => tracing::warn!(path = %tmp.display(), "removed a stale temp file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing stale {}", tmp.display())),
        }
    }
    crate::progress::step();
    crate::failpoint!("before-temp-write");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let result = (|| {
        // A lock no other process asks for but a cleaner beside the same target.
        f.lock()?;
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
    Ok((tmp, f))
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

/// Replaces `target` with `bytes` atomically (temp, fsync, rename, directory fsync). Temp
/// files of `target` that a process no longer running left (killed between its write and
/// its rename: a static pod's manifest, the metrics file) are removed first.
pub fn replace(target: &Path, bytes: &[u8], meta: &FileMeta) -> anyhow::Result<()> {
    remove_dead_temps_of(target);
    // Its lock held until the rename: a process beside it cannot take it for dead.
    let (tmp, _held) = write_temp_held(target, bytes, meta, "temp")?;
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

/// Whether `e` came from a full disk (ENOSPC, or EDQUOT: a quota).
pub fn is_no_space(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
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
    fn a_replace_removes_the_temps_dead_processes_left_and_no_others() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("kube-apiserver.yaml");
        // PIDs above Linux's pid_max (2^22) never run.
        let names = [
            ".kube-apiserver.yaml.4194305-0badf00d.certrenewd-tmp",
            ".kube-apiserver.yaml.certrenewd-tmp",
            &format!(".kube-apiserver.yaml.1-{:08x}.certrenewd-tmp", 7),
            ".kube-apiserver.yaml.bak.4194305-0badf00d.certrenewd-tmp",
            ".kube-apiserver.yaml.5-x.4194305-0badf00d.certrenewd-tmp",
        ];
        for n in names {
            fs::write(dir.path().join(n), "left").unwrap();
        }
        replace(&target, b"new", &FileMeta::own(0o600)).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        let left = |n: &str| dir.path().join(n).exists();
        assert!(!left(names[0]), "a dead process's temp stays");
        assert!(!left(names[1]), "an unmarked temp stays");
        assert!(left(names[2]), "PID 1's temp was removed");
        assert!(
            left(names[3]) && left(names[4]),
            "another file's temp was removed"
        );
    }

    /// A writer in another PID namespace (a container sharing the metrics directory) has a
    /// PID not running here: its temp stays while it holds the temp's lock, as every
    /// `replace` does from creation to rename, and goes once the lock is free.
    #[test]
    fn a_temp_whose_lock_is_held_stays_whatever_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("certrenewd.prom");
        let other = dir
            .path()
            .join(".certrenewd.prom.4194305-0badf00d.certrenewd-tmp");
        fs::write(&other, "half written").unwrap();
        let writer = File::open(&other).unwrap();
        writer.lock().unwrap();
        replace(&target, b"ours", &FileMeta::own(0o600)).unwrap();
        assert!(other.exists(), "a live writer's temp was removed");
        drop(writer);
        replace(&target, b"ours again", &FileMeta::own(0o600)).unwrap();
        assert!(!other.exists(), "a dead writer's temp stays");
    }

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
        // The stale link is removed, not followed: the temp file is a file of its own.
        let meta = FileMeta {
            mode: 0o644,
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let tmp = write_temp(&target, b"x", &meta).unwrap();
        assert_eq!(tmp, temp_path(&target));
        assert!(!elsewhere.exists());
        assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_file());
        assert_eq!(fs::read(&tmp).unwrap(), b"x");
    }
}
