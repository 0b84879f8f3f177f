//! The pending record: intent written before any certificate or key is replaced, so that a
//! crash at any instant is finished or rolled back on the next start; and backups.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FileMeta};

/// One certificate (and, when rotating, its key) being replaced.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Change {
    /// The certificate file replaced.
    pub cert: PathBuf,
    /// The key file replaced together with it (key rotation), if any.
    pub key: Option<PathBuf>,
    /// Where the previous certificate was copied.
    pub cert_backup: PathBuf,
    /// Where the previous key was copied.
    pub key_backup: Option<PathBuf>,
}

/// Where a pass is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Temp files are being written and renamed.
    Writing,
    /// Every new file is in place; units still have to be restarted.
    Installed,
}

/// The record in `<state_dir>/pending.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pending {
    /// Where the pass is.
    pub phase: Phase,
    /// Every replacement of the pass.
    pub changes: Vec<Change>,
    /// Units to restart once the files are in place.
    pub units: Vec<String>,
    /// Static pods to restart once the files are in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
}

/// What recovery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Units that still need a restart (files were installed, restarts not confirmed).
    pub units: Vec<String>,
    /// Static pods that still need a restart.
    pub pods: Vec<String>,
    /// Certificates whose half-done replacement was undone (old pair kept).
    pub rolled_back: Vec<PathBuf>,
    /// Certificates whose replacement was completed (new pair).
    pub rolled_forward: Vec<PathBuf>,
}

fn record_path(state_dir: &Path) -> PathBuf {
    state_dir.join("pending.json")
}

/// Saves the record durably.
pub fn save(state_dir: &Path, pending: &Pending) -> anyhow::Result<()> {
    fsutil::private_dir(state_dir)?;
    let bytes = serde_json::to_vec_pretty(pending)?;
    fsutil::replace(&record_path(state_dir), &bytes, &FileMeta::own(0o600))
}

/// Reads the record, if any.
pub fn load(state_dir: &Path) -> anyhow::Result<Option<Pending>> {
    let path = record_path(state_dir);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| {
            format!(
                "{} is corrupt; inspect it and the files it names, then remove it",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Removes the record once its units were restarted.
pub fn clear(state_dir: &Path) -> anyhow::Result<()> {
    match fs::remove_file(record_path(state_dir)) {
        Ok(()) => fsutil::sync_dir(state_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", record_path(state_dir).display())),
    }
}

/// Finishes or rolls back what a crashed pass left, from its record. Order of renames in a
/// pass is key first, then certificate, so: both temps present -> nothing replaced (roll
/// back); key temp gone but certificate temp present -> key replaced (roll forward).
pub fn recover(state_dir: &Path) -> anyhow::Result<Recovered> {
    let Some(pending) = load(state_dir)? else {
        return Ok(Recovered::default());
    };
    let mut out = Recovered::default();
    for c in &pending.changes {
        let cert_tmp = fsutil::temp_path(&c.cert);
        let key_tmp = c.key.as_deref().map(fsutil::temp_path);
        let cert_tmp_there = cert_tmp.exists();
        let key_tmp_there = key_tmp.as_ref().is_some_and(|k| k.exists());
        match (cert_tmp_there, c.key.is_some(), key_tmp_there) {
            (true, true, false) => {
                // The new key is in place: the new certificate must follow it.
                fsutil::rename(&cert_tmp, &c.cert)?;
                out.rolled_forward.push(c.cert.clone());
            }
            (true, _, _) | (false, true, true) => {
                remove_if_exists(&cert_tmp)?;
                if let Some(k) = &key_tmp {
                    remove_if_exists(k)?;
                }
                out.rolled_back.push(c.cert.clone());
            }
            (false, _, _) if still_old(c) => {
                // The crash came before the first temp file: nothing was replaced.
                out.rolled_back.push(c.cert.clone());
            }
            (false, _, _) => {}
        }
        for dir in [c.cert.parent(), c.key.as_deref().and_then(Path::parent)]
            .into_iter()
            .flatten()
        {
            fsutil::sync_dir(dir)?;
        }
    }
    let any_installed =
        pending.phase == Phase::Installed || pending.changes.len() > out.rolled_back.len();
    if any_installed {
        out.units = pending.units.clone();
        out.pods = pending.pods.clone();
        save(
            state_dir,
            &Pending {
                phase: Phase::Installed,
                ..pending
            },
        )?;
    } else {
        clear(state_dir)?;
    }
    Ok(out)
}

/// Whether the files of `c` are still byte for byte their backups (so never replaced).
fn still_old(c: &Change) -> bool {
    let same = |file: &Path, backup: &Path| match (fs::read(file), fs::read(backup)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    same(&c.cert, &c.cert_backup)
        && match (&c.key, &c.key_backup) {
            (Some(k), Some(b)) => same(k, b),
            _ => true,
        }
}

fn remove_if_exists(p: &Path) -> anyhow::Result<()> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", p.display())),
    }
}

/// Puts the backed-up certificate (and key, when it was rotated) back in place of each
/// change, atomically, key first. Returns each certificate with how it went.
pub fn roll_back(state_dir: &Path, changes: &[Change]) -> Vec<(PathBuf, anyhow::Result<()>)> {
    let _ = state_dir;
    changes
        .iter()
        .map(|c| {
            let r = (|| -> anyhow::Result<()> {
                if let (Some(key), Some(backup)) = (&c.key, &c.key_backup) {
                    restore(backup, key)?;
                }
                restore(&c.cert_backup, &c.cert)
            })();
            (c.cert.clone(), r)
        })
        .collect()
}

fn restore(backup: &Path, target: &Path) -> anyhow::Result<()> {
    let bytes = fs::read(backup).with_context(|| format!("reading backup {}", backup.display()))?;
    let meta = FileMeta::of(backup)?;
    fsutil::replace(target, &bytes, &meta)
}

/// The backup set directory of a pass, `backup_dir/<UTC timestamp>[-N]`, created.
pub fn backup_set(backup_dir: &Path, now: time::OffsetDateTime) -> anyhow::Result<PathBuf> {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let stamp = now.to_offset(time::UtcOffset::UTC).format(&f)?;
    fsutil::private_dir(backup_dir)?;
    for n in 0..1000 {
        let dir = if n == 0 {
            backup_dir.join(&stamp)
        } else {
            backup_dir.join(format!("{stamp}-{n}"))
        };
        // Private like every directory below it: it holds copies of private keys.
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("creating backup directory {}", dir.display()));
            }
        }
    }
    anyhow::bail!(
        "too many backup sets named {stamp} in {}",
        backup_dir.display()
    )
}

/// Copies `file` into the backup set under its absolute path, mode and owner kept, fsynced.
pub fn backup_file(set: &Path, file: &Path) -> anyhow::Result<PathBuf> {
    let rel = file.strip_prefix("/").unwrap_or(file);
    let dest = set.join(rel);
    let parent = dest.parent().unwrap_or(set);
    fsutil::private_dir(parent)?;
    let bytes = fs::read(file).with_context(|| format!("reading {} for backup", file.display()))?;
    let meta = FileMeta::of(file)?;
    let tmp = fsutil::write_temp(&dest, &bytes, &meta)
        .with_context(|| format!("backing up {}", file.display()))?;
    fsutil::rename(&tmp, &dest)?;
    fsutil::sync_dir(parent)?;
    Ok(dest)
}

/// Prunes backup sets beyond `keep` or older than `max_age_days`, never removing the newest
/// backup of any file; removes temp files a crash left in any set.
pub fn prune(
    backup_dir: &Path,
    keep: u32,
    max_age_days: u32,
    now: time::OffsetDateTime,
) -> anyhow::Result<usize> {
    let Ok(entries) = fs::read_dir(backup_dir) else {
        return Ok(0);
    };
    let mut sets: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    sets.sort(); // timestamps sort chronologically
    let cutoff = now - time::Duration::days(max_age_days.into());
    let too_old = |set: &Path| {
        let name = set
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stamp = name.split('-').next().unwrap_or("");
        time::PrimitiveDateTime::parse(
            stamp.trim_end_matches('Z'),
            &time::macros::format_description!("[year][month][day]T[hour][minute][second]"),
        )
        .map(|t| t.assume_utc() < cutoff)
        .unwrap_or(false)
    };
    let excess = sets.len().saturating_sub(keep as usize);
    // Newest backup of each file: walk sets newest first and remember what was seen.
    let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut removed = 0;
    for (i, set) in sets.iter().enumerate().rev() {
        let files = files_under(set);
        let prune_set = i < excess || too_old(set);
        for f in files {
            // A temp file is a backup a crashed pass did not finish: never a backup itself.
            if f.file_name()
                .is_some_and(|n| fsutil::is_temp_name(&n.to_string_lossy()))
            {
                fs::remove_file(&f).with_context(|| format!("removing {}", f.display()))?;
                continue;
            }
            let rel = f.strip_prefix(set).unwrap_or(&f).to_path_buf();
            let newest = seen.insert(rel);
            if prune_set && !newest {
                fs::remove_file(&f).with_context(|| format!("pruning {}", f.display()))?;
                removed += 1;
            }
        }
        if prune_set {
            remove_empty_dirs(set);
        }
    }
    Ok(removed)
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

fn remove_empty_dirs(dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    let mut empty = true;
    for e in entries.filter_map(Result::ok) {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            empty &= remove_empty_dirs(&e.path());
        } else {
            empty = false;
        }
    }
    empty && fs::remove_dir(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_backup_of_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        for (set, file) in [
            ("20260101T000000Z", "etc/etcd/a.crt"),
            ("20260201T000000Z", "etc/etcd/b.crt"),
            ("20260301T000000Z", "etc/etcd/b.crt"),
            ("20260401T000000Z", "etc/etcd/b.crt"),
        ] {
            let p = b.join(set).join(file);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, set).unwrap();
        }
        let now = time::macros::datetime!(2026-04-02 00:00 UTC);
        prune(b, 1, 365, now).unwrap();
        assert!(
            b.join("20260101T000000Z/etc/etcd/a.crt").exists(),
            "only backup of a.crt"
        );
        assert!(!b.join("20260201T000000Z").exists());
        assert!(!b.join("20260301T000000Z").exists());
        assert!(b.join("20260401T000000Z/etc/etcd/b.crt").exists());
    }

    #[test]
    fn recovery_rolls_back_or_forward_by_what_was_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let d = dir.path();
        let meta = FileMeta::of(d)
            .map(|m| FileMeta { mode: 0o600, ..m })
            .unwrap();
        // a: nothing renamed yet -> roll back. b: key renamed, cert not -> roll forward.
        for n in ["a", "b"] {
            fs::write(d.join(format!("{n}.crt")), "old-cert").unwrap();
            fs::write(d.join(format!("{n}.key")), "old-key").unwrap();
            fsutil::write_temp(&d.join(format!("{n}.crt")), b"new-cert", &meta).unwrap();
            fsutil::write_temp(&d.join(format!("{n}.key")), b"new-key", &meta).unwrap();
        }
        fsutil::rename(&fsutil::temp_path(&d.join("b.key")), &d.join("b.key")).unwrap();
        let change = |n: &str| Change {
            cert: d.join(format!("{n}.crt")),
            key: Some(d.join(format!("{n}.key"))),
            cert_backup: d.join("unused"),
            key_backup: None,
        };
        save(
            &state,
            &Pending {
                phase: Phase::Writing,
                changes: vec![change("a"), change("b")],
                units: vec!["x.service".into()],
                pods: vec!["etcd".into()],
            },
        )
        .unwrap();
        let r = recover(&state).unwrap();
        assert_eq!(r.rolled_back, vec![d.join("a.crt")]);
        assert_eq!(r.rolled_forward, vec![d.join("b.crt")]);
        assert_eq!(r.units, vec!["x.service".to_string()]);
        assert_eq!(r.pods, vec!["etcd".to_string()]);
        assert_eq!(fs::read_to_string(d.join("a.crt")).unwrap(), "old-cert");
        assert_eq!(fs::read_to_string(d.join("a.key")).unwrap(), "old-key");
        assert_eq!(fs::read_to_string(d.join("b.crt")).unwrap(), "new-cert");
        assert_eq!(fs::read_to_string(d.join("b.key")).unwrap(), "new-key");
        for n in ["a.crt", "a.key", "b.crt", "b.key"] {
            assert!(!fsutil::temp_path(&d.join(n)).exists());
        }
    }

    #[test]
    fn a_crash_before_the_first_temp_owes_no_restart() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let d = dir.path();
        fs::write(d.join("a.crt"), "old-cert").unwrap();
        fs::write(d.join("a.key"), "old-key").unwrap();
        fs::write(d.join("a.crt.bak"), "old-cert").unwrap();
        fs::write(d.join("a.key.bak"), "old-key").unwrap();
        let pending = Pending {
            phase: Phase::Writing,
            changes: vec![Change {
                cert: d.join("a.crt"),
                key: Some(d.join("a.key")),
                cert_backup: d.join("a.crt.bak"),
                key_backup: Some(d.join("a.key.bak")),
            }],
            units: vec!["x.service".into()],
            pods: vec!["etcd".into()],
        };
        save(&state, &pending).unwrap();
        let r = recover(&state).unwrap();
        assert_eq!(r.rolled_back, vec![d.join("a.crt")]);
        assert!(r.units.is_empty() && r.pods.is_empty(), "{r:?}");
        assert!(load(&state).unwrap().is_none(), "the record is gone");

        // Renamed in place (differs from its backup): the restart is owed.
        fs::write(d.join("a.crt"), "new-cert").unwrap();
        save(&state, &pending).unwrap();
        let r = recover(&state).unwrap();
        assert!(r.rolled_back.is_empty(), "{r:?}");
        assert_eq!(r.units, vec!["x.service".to_string()]);
        assert_eq!(r.pods, vec!["etcd".to_string()]);
    }
}
