//! kubelet's way: a pair kubelet reads through `<prefix>-current.pem` is renewed
//! into a new dated file beside it (certificate then key, as kubelet writes them), and the
//! symlink is swapped to it atomically; the pair it pointed at stays, as kubelet leaves the
//! pairs it rotates away from. A crash leaves the symlink at the old pair or the new one.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FileMeta};

/// A symlink swap: what the symlink pointed at, and what it points at once installed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Swap {
    /// The symlink's target before, as `readlink` gives it.
    pub from: PathBuf,
    /// The new pair's file, as the symlink names it.
    pub to: PathBuf,
}

impl Swap {
    /// The swap renewing the pair behind kubelet's symlink `link`: a new file named for the
    /// local time `now` (kubelet's names), named by the symlink the way it names the old
    /// one (kubelet writes absolute paths).
    pub fn plan(link: &Path, now: chrono::DateTime<chrono::Local>) -> anyhow::Result<Swap> {
        let from = fs::read_link(link)
            .with_context(|| format!("reading the symlink {}", link.display()))?;
        let name = from
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let prefix = crate::inventory::kubelet::dated_prefix(name)
            .with_context(|| format!("{} does not name a dated pair", link.display()))?;
        // Renewed again within the second (`renew --force`): the next free second's name.
        for ahead in 0..5 {
            let at = now + chrono::TimeDelta::seconds(ahead);
            let to =
                from.with_file_name(format!("{prefix}-{}.pem", at.format("%Y-%m-%d-%H-%M-%S")));
            if fs::symlink_metadata(resolve(link, &to)).is_err() {
                return Ok(Swap { from, to });
            }
        }
        bail!("{}: no free name for a new pair", link.display())
    }

    /// The new pair's file.
    pub fn new_file(&self, link: &Path) -> PathBuf {
        resolve(link, &self.to)
    }
}

/// A symlink's target as a path: relative targets are relative to its directory.
fn resolve(link: &Path, target: &Path) -> PathBuf {
    match target.is_absolute() {
        true => target.to_path_buf(),
        false => link.parent().unwrap_or(Path::new("/")).join(target),
    }
}

/// Writes the new pair's file in full (temp, fsync, rename, directory fsync), then the
/// temp symlink pointing at it, which the install renames over `link`.
pub(super) fn write(link: &Path, swap: &Swap, bytes: &[u8], meta: &FileMeta) -> anyhow::Result<()> {
    let file = swap.new_file(link);
    let tmp = fsutil::write_temp_step(&file, bytes, meta, "cert-temp")?;
    fsutil::rename(&tmp, &file)?;
    fsutil::sync_dir(file.parent().unwrap_or(Path::new("/")))?;
    crate::failpoint!("after-new-pair");
    temp_symlink(link, &swap.to).map(drop)
}

/// `link`'s temp file, made a symlink to `target` (a stale one of ours removed first).
fn temp_symlink(link: &Path, target: &Path) -> anyhow::Result<PathBuf> {
    let tmp = fsutil::temp_path(link);
    fsutil::remove_if_exists(&tmp)?;
    symlink(target, &tmp).with_context(|| format!("creating the symlink {}", tmp.display()))?;
    Ok(tmp)
}

/// Removes what [`write`] made while `link` does not point at it: the temp files named with
/// each of `tags` (`fsutil::temp_path_tagged`), and the new pair's file.
pub(super) fn undo_write(link: &Path, swap: &Swap, tags: &[Option<&str>]) -> anyhow::Result<()> {
    let file = swap.new_file(link);
    for &tag in tags {
        fsutil::remove_if_exists(&fsutil::temp_path_tagged(link, tag))?;
        fsutil::remove_if_exists(&fsutil::temp_path_tagged(&file, tag))?;
    }
    if !swapped(link, swap) {
        fsutil::remove_if_exists(&file)?;
    }
    Ok(())
}

/// Whether `link` points at the new pair.
fn swapped(link: &Path, swap: &Swap) -> bool {
    fs::read_link(link).is_ok_and(|t| t == swap.to)
}

/// After a crash: `true` when the swap had not happened (what it wrote is removed: the
/// old pair stays in use), `false` when the symlink points at the new pair. `tags`: the
/// marks of the temp files the crashed pass (and recoveries) may have left.
pub(super) fn recover(link: &Path, swap: &Swap, tags: &[Option<&str>]) -> anyhow::Result<bool> {
    let done = swapped(link, swap);
    undo_write(link, swap, tags)?;
    Ok(!done)
}

/// A roll-back: the symlink points at the previous pair again, atomically. The new pair's
/// file stays, as a pair kubelet rotated away from.
pub(super) fn restore(link: &Path, swap: &Swap) -> anyhow::Result<()> {
    let tmp = temp_symlink(link, &swap.from)?;
    fsutil::rename(&tmp, link)?;
    fsutil::sync_dir(link.parent().unwrap_or(Path::new("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, PathBuf, Swap) {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("kubelet-client-2025-01-01-00-00-00.pem");
        fs::write(&old, "old pair").unwrap();
        let link = dir.path().join("kubelet-client-current.pem");
        symlink(&old, &link).unwrap();
        let now = chrono::Local::now();
        let swap = Swap::plan(&link, now).unwrap();
        (dir, link, swap)
    }

    #[test]
    fn a_swap_is_kubelets_and_recovery_keeps_the_old_pair_or_the_new() {
        let (dir, link, swap) = store();
        let name = swap.to.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            swap.to.is_absolute() && swap.to.parent() == Some(dir.path()),
            "{swap:?}"
        );
        assert_eq!(
            crate::inventory::kubelet::dated_prefix(&name),
            Some("kubelet-client")
        );
        let meta = FileMeta::of(dir.path())
            .map(|m| FileMeta { mode: 0o600, ..m })
            .unwrap();
        // Written, not swapped: recovery removes the new pair, the old one stays in use.
        write(&link, &swap, b"new pair", &meta).unwrap();
        assert_eq!(fs::read(&link).unwrap(), b"old pair");
        assert!(recover(&link, &swap, &[Some(fsutil::temp_tag())]).unwrap());
        assert!(!swap.to.exists() && !fsutil::temp_path(&link).exists());
        // Swapped: recovery keeps it; a roll-back points at the old pair again.
        write(&link, &swap, b"new pair", &meta).unwrap();
        fsutil::rename(&fsutil::temp_path(&link), &link).unwrap();
        assert!(!recover(&link, &swap, &[Some(fsutil::temp_tag())]).unwrap());
        assert_eq!(fs::read(&link).unwrap(), b"new pair");
        restore(&link, &swap).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), swap.from);
        assert_eq!(
            fs::read(&swap.to).unwrap(),
            b"new pair",
            "kept, as kubelet keeps them"
        );
    }
}
