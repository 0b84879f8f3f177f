//! Installing the rewritten copies: backups, the pending record, temp files and renames,
//! as renewals are installed.

use std::path::PathBuf;

use anyhow::Context;
use time::OffsetDateTime;

use super::{Edit, Replaced};
use crate::fsutil;
use crate::renew::{RenewOptions, backup, txn};

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
    let mut staged = Vec::new();
    for e in edits {
        match backup::backup_file(&set, &e.target) {
            Ok(cert_backup) => {
                let change = txn::Change {
                    cert: e.target.clone(),
                    key: None,
                    cert_backup,
                    key_backup: None,
                    link: None,
                };
                staged.push((e, change));
            }
            Err(err) => failed.push((e.path, format!("cannot back up, not written: {err:#}"))),
        }
    }
    // The record names every change before a byte is written; a renewal of this pass may
    // have left its own there for the restart stage.
    let mut pending = txn::load(&opts.state_dir)?.unwrap_or(txn::Pending {
        phase: txn::Phase::Writing,
        changes: Vec::new(),
        units: Vec::new(),
        pods: Vec::new(),
    });
    let before = pending.changes.clone();
    pending.phase = txn::Phase::Writing;
    pending
        .changes
        .extend(staged.iter().map(|(_, c)| c.clone()));
    if let Err(e) = txn::save(&opts.state_dir, &pending) {
        let unused: Vec<PathBuf> = staged.iter().map(|(_, c)| c.cert_backup.clone()).collect();
        backup::discard(&set, &unused);
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
                unused.push(change.cert_backup);
                failed.push((e.path, format!("not replaced: {err:#}")));
            }
        }
    }
    pending.phase = txn::Phase::Installed;
    pending.changes = before.into_iter().chain(done).collect();
    let saved = match pending.changes.is_empty() {
        true => txn::clear(&opts.state_dir),
        false => txn::save(&opts.state_dir, &pending),
    };
    backup::discard(&set, &unused);
    saved.context("updating the pending record")
}
