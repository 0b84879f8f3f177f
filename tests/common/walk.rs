//! Walking a tree: its files, its temp files, and snapshots of everything in it to compare
//! before and after a run. One walk under all of them: `lstat`, so a symlink is listed and
//! never followed.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What [`walk`] does with a directory it cannot read (or an entry it cannot `lstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    /// Panics: a snapshot must see everything.
    Panic,
    /// Passes over it: a missing backup dir has no files.
    Skip,
}

/// Every entry under `root` (not `root` itself) with its `lstat`, sorted by path.
fn walk(root: &Path, unreadable: Unreadable) -> Vec<(PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if unreadable == Unreadable::Skip => continue,
            Err(e) => panic!("read_dir {}: {e}", dir.display()),
        };
        for e in entries.flatten() {
            let p = e.path();
            let m = match fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(_) if unreadable == Unreadable::Skip => continue,
                Err(e) => panic!("lstat {}: {e}", p.display()),
            };
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push((p, m));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every file (anything but a directory) under `dir`, sorted; none when `dir` is missing.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    walk(dir, Unreadable::Skip)
        .into_iter()
        .filter(|(_, m)| !m.is_dir())
        .map(|(p, _)| p)
        .collect()
}

/// Every `*.certrenewd-tmp` under `dir`, sorted.
pub fn temps_under(dir: &Path) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| certrenewd::fsutil::is_temp_name(&n.to_string_lossy()))
        })
        .collect()
}

/// Every temp file beside `target` (`.<name>.<mark>.certrenewd-tmp`, or the fixed
/// `.<name>.certrenewd-tmp`), whichever process wrote it, sorted.
pub fn temps_beside(target: &Path) -> Vec<PathBuf> {
    let prefix = format!(
        ".{}.",
        target.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut found: Vec<PathBuf> = std::fs::read_dir(target.parent().unwrap_or(Path::new("/")))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&prefix) && certrenewd::fsutil::is_temp_name(&n)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

// ------------------------------------------------------------------ snapshots

/// One node of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A file (anything but a directory or symlink): contents, permission bits and owner.
    File {
        bytes: Vec<u8>,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A directory and its permission bits.
    Dir { mode: u32 },
    /// A symlink and its target.
    Link(PathBuf),
}

/// Every node under a root, by path.
pub type Snapshot = BTreeMap<PathBuf, Node>;

/// Every node under `root`, by absolute path.
pub fn snapshot(root: &Path) -> Snapshot {
    walk(root, Unreadable::Panic)
        .into_iter()
        .map(|(p, m)| {
            let mode = m.permissions().mode() & 0o7777;
            let node = if m.file_type().is_symlink() {
                Node::Link(fs::read_link(&p).expect("readlink"))
            } else if m.is_dir() {
                Node::Dir { mode }
            } else {
                Node::File {
                    bytes: fs::read(&p).expect("read"),
                    mode,
                    uid: m.uid(),
                    gid: m.gid(),
                }
            };
            (p, node)
        })
        .collect()
}

/// [`snapshot`] by path relative to `root`: two copies of one tree compare equal.
pub fn snapshot_relative(root: &Path) -> Snapshot {
    snapshot(root)
        .into_iter()
        .map(|(p, n)| (p.strip_prefix(root).expect("under root").to_path_buf(), n))
        .collect()
}

/// Paths whose node differs between two snapshots (added, removed or changed), sorted.
pub fn changed(before: &Snapshot, after: &Snapshot) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = before
        .iter()
        .filter(|(p, n)| after.get(*p) != Some(*n))
        .map(|(p, _)| p.clone())
        .collect();
    out.extend(after.keys().filter(|p| !before.contains_key(*p)).cloned());
    out.sort();
    out
}

/// The bytes of a file in a snapshot.
pub fn bytes_in<'a>(snap: &'a Snapshot, p: &Path) -> &'a [u8] {
    match snap.get(p) {
        Some(Node::File { bytes, .. }) => bytes,
        other => panic!("{} is not a file in the snapshot: {other:?}", p.display()),
    }
}

/// The mode of a file in a snapshot.
pub fn mode_in(snap: &Snapshot, p: &Path) -> u32 {
    match snap.get(p) {
        Some(Node::File { mode, .. }) => *mode,
        other => panic!("{} is not a file in the snapshot: {other:?}", p.display()),
    }
}
