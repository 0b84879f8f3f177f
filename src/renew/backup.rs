//! Backups: every replaced certificate and key is first copied to
//! `backup_dir/<UTC timestamp>/<absolute path>`; old sets are pruned, never the newest copy
//! of a file.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::fsutil::{self, FileMeta};

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

/// The backup set under `backup_dir` that holds `backup` (a file [`backup_file`] made).
pub fn set_of(backup_dir: &Path, backup: &Path) -> Option<PathBuf> {
    let first = backup.strip_prefix(backup_dir).ok()?.components().next()?;
    Some(backup_dir.join(first))
}

/// Copies `file` into the backup set under its absolute path, mode and owner kept, fsynced.
pub fn backup_file(set: &Path, file: &Path) -> anyhow::Result<PathBuf> {
    let rel = file.strip_prefix("/").unwrap_or(file);
    let dest = set.join(rel);
    let parent = dest.parent().unwrap_or(set);
    fsutil::private_dir(parent)?;
    let bytes = crate::fsutil::read(file)
        .with_context(|| format!("reading {} for backup", file.display()))?;
    let mut meta = FileMeta::of(file)?;
    // A private key (or a kubeconfig holding one) is backed up for its owner alone, however
    // open the file was: a roll-back gives the file its mode back from the file in place.
    if holds_private_key(&bytes) {
        meta.mode = 0o600;
    }
    let tmp = fsutil::write_temp(&dest, &bytes, &meta)
        .with_context(|| format!("backing up {}", file.display()))?;
    fsutil::rename(&tmp, &dest)?;
    fsutil::sync_dir(parent)?;
    Ok(dest)
}

/// Whether `bytes` hold a private key: a PEM key of any kind, a DER one (PKCS#8, PKCS#1,
/// SEC1, encrypted PKCS#8: no marker says so), or a kubeconfig's `client-key-data`.
fn holds_private_key(bytes: &[u8]) -> bool {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    has(b"PRIVATE KEY-----")
        || has(b"client-key-data")
        || crate::format::key::from_der(bytes).is_some()
}

/// Like [`backup_file`], unless the set already holds a backup of `file`: that one is kept,
/// for it holds the bytes from before the pass (`true` then). A set holds each file once,
/// as it was before its pass changed it.
pub fn backup_file_once(set: &Path, file: &Path) -> anyhow::Result<(PathBuf, bool)> {
    let dest = set.join(file.strip_prefix("/").unwrap_or(file));
    match fs::symlink_metadata(&dest) {
        Ok(m) if m.is_file() => Ok((dest, true)),
        _ => Ok((backup_file(set, file)?, false)),
    }
}

/// Removes `files` (backups of files that were not replaced after all) from the backup
/// set `set`, then the directories left empty, the set itself included: a failed pass
/// leaves no backup set to use up `backup_keep`. A failure is logged, never fatal.
pub fn discard(set: &Path, files: &[PathBuf]) {
    for f in files {
        if let Err(e) = fs::remove_file(f) {
            tracing::warn!(path = %f.display(), "removing an unused backup: {e}");
        }
    }
    remove_empty_dirs(set);
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

    /// A key is backed up for its owner alone, however open the file was and whatever its
    /// encoding: a DER key has no PEM marker to tell it by.
    #[test]
    fn a_private_key_in_pem_or_der_is_backed_up_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let set = dir.path().join("set");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        for (name, bytes, mode) in [
            ("k.der", key.serialize_der(), 0o600),
            ("k.pem", key.serialize_pem().into_bytes(), 0o600),
            ("c.der", cert.der().to_vec(), 0o644),
        ] {
            let file = dir.path().join(name);
            std::fs::write(&file, bytes).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let copy = backup_file(&set, &file).unwrap();
            let got = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
            assert_eq!(got, mode, "{name}: {got:o}");
        }
    }

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
}
