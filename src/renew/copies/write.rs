//! Installing the rewritten copies: backups, the pending record, temp files and renames,
//! as renewals are installed.

use std::path::PathBuf;

use anyhow::Context;
use time::OffsetDateTime;

use super::{Edit, Replaced};
use crate::fsutil;
use crate::renew::{RenewOptions, backup, pending};

/// Backs up (into `set`, else a new backup set), records, writes temps and renames each
/// file; what was replaced goes to `replaced`, what was not to `failed`. An error: nothing
/// was written.
pub(super) fn install(
    edits: Vec<Edit>,
    opts: &RenewOptions,
    now: OffsetDateTime,
    set: Option<PathBuf>,
    replaced: &mut Vec<Replaced>,
    failed: &mut Vec<(PathBuf, String)>,
) -> anyhow::Result<()> {
    let set = match set.filter(|s| s.is_dir()) {
        Some(set) => set,
        None => backup::backup_set(&opts.backup_dir, now).context("creating a backup set")?,
    };
    // The record names every change before a byte is written; a renewal of this pass may
    // have left its own there for the restart stage.
    let mut pending =
        (opts.pending.get()).unwrap_or_else(|| pending::Pending::new(pending::Phase::Writing));
    let mut staged = Vec::new();
    // Backups this stage made (a file's backup made earlier in the pass is never removed).
    let mut fresh = Vec::new();
    for e in edits {
        let earlier = pending.changes.iter().rev().find(|c| c.cert == e.target);
        // A renewal left half-done waits for its certificate in the temp file this would
        // write: the pass that completes it replaces the copy after.
        if earlier.is_some_and(|c| c.link.is_none() && c.cert_temp().exists()) {
            let why = "not replaced: its renewal is half-done (the new certificate waits in \
                       its temp file); a later pass completes it, then replaces the copy";
            failed.push((e.path, why.to_string()));
            continue;
        }
        match backup::backup_file_once(&set, &e.target) {
            Ok((cert_backup, had)) => {
                if !had {
                    fresh.push(cert_backup.clone());
                }
                // Changed earlier in the pass: a roll-back puts back what the earlier
                // change backed up, the files from before the pass.
                let change = match earlier.filter(|c| had && c.link.is_none()) {
                    Some(c) => pending::Change {
                        cert: e.target.clone(),
                        key: c.key.clone(),
                        cert_backup: c.cert_backup.clone(),
                        key_backup: c.key_backup.clone(),
                        chained: true,
                        ..pending::Change::default()
                    }
                    .ours(),
                    None => pending::Change {
                        cert: e.target.clone(),
                        cert_backup,
                        ..pending::Change::default()
                    }
                    .ours(),
                };
                staged.push((e, change));
            }
            Err(err) => failed.push((e.path, format!("cannot back up, not written: {err:#}"))),
        }
    }
    let before = pending.changes.clone();
    pending.phase = pending::Phase::Writing;
    pending
        .changes
        .extend(staged.iter().map(|(_, c)| c.clone()));
    if let Err(e) = opts.pending.save(pending.clone()) {
        backup::discard(&set, &fresh);
        return Err(e.context("recording the pending change, nothing written"));
    }
    let mut unused = Vec::new();
    let mut done = Vec::new();
    for (e, change) in staged {
        let written =
            fsutil::write_temp_step(&e.target, &e.bytes, &e.meta, "copy-temp").and_then(|tmp| {
                crate::failpoint!("after-copy-temp");
                crate::failpoint::io("rename-copy")
                    .with_context(|| {
                        format!("renaming {} to {}", tmp.display(), e.target.display())
                    })
                    .and_then(|()| fsutil::rename(&tmp, &e.target))
                    .inspect_err(|_| {
                        let _ = std::fs::remove_file(&tmp);
                    })
            });
        match written {
            Ok(()) => {
                if let Some(dir) = e.target.parent()
                    && let Err(err) = fsutil::sync_dir(dir)
                {
                    tracing::warn!(path = %e.target.display(), "the copy is replaced, but a power loss could still undo it: {err:#}");
                }
                done.push(change.clone());
                replaced.push(Replaced {
                    path: e.path,
                    cas: e.cas,
                    change: Some(change),
                });
            }
            Err(err) => {
                if fresh.contains(&change.cert_backup) {
                    unused.push(change.cert_backup);
                }
                failed.push((e.path, format!("not replaced: {err:#}")));
            }
        }
    }
    pending.phase = pending::Phase::Installed;
    pending.changes = before.into_iter().chain(done).collect();
    let saved = match pending.changes.is_empty() {
        true => opts.pending.clear(),
        false => opts.pending.save(pending),
    };
    backup::discard(&set, &unused);
    saved.context("updating the pending record")
}
