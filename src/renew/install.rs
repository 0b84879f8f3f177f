//! Installing prepared renewals: back up, record intent, write temp files, rename (key
//! first), fsync, mark installed. A pair whose step fails is reported and left as it was.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::prepare::Prepared;
use super::{RenewOptions, RenewOutcome, RenewResult, backup, failed, txn};
use crate::fsutil;
use crate::inventory::Inventory;

/// A prepared renewal with its backups taken: what the pending record names.
struct Staged {
    prepared: Prepared,
    change: txn::Change,
}

/// Backs up, records intent, writes temps, renames (key first), fsyncs, marks installed.
pub(super) fn install(
    inv: &Inventory,
    ready: Vec<Prepared>,
    opts: &RenewOptions,
    now: OffsetDateTime,
) -> Vec<RenewOutcome> {
    let fail = |p: &Prepared, why: &str| -> Vec<RenewOutcome> {
        p.renewed()
            .map(|(i, _, _)| failed(inv, i, why.to_string()))
            .collect()
    };
    let mut outcomes = Vec::new();
    // 1. Backups, then the pending record naming every change.
    let staged = match backup::backup_set(&opts.backup_dir, now) {
        Ok(set) => back_up(inv, &set, ready, |p, e| {
            outcomes.extend(fail(p, &format!("cannot back up, nothing written: {e:#}")))
        }),
        Err(e) => {
            let why = format!("cannot create a backup, nothing written: {e:#}");
            return ready.iter().flat_map(|p| fail(p, &why)).collect();
        }
    };
    if staged.is_empty() {
        return outcomes;
    }
    let mut pending = txn::Pending {
        phase: txn::Phase::Writing,
        changes: staged.iter().map(|s| s.change.clone()).collect(),
        units: Vec::new(),
        pods: Vec::new(),
    };
    if let Err(e) = txn::save(&opts.state_dir, &pending) {
        let why = format!("cannot record the pending change, nothing written: {e:#}");
        outcomes.extend(staged.iter().flat_map(|s| fail(&s.prepared, &why)));
        return outcomes;
    }
    crate::failpoint!("after-pending-record");
    // 2. Temp files for each pair; a pair whose temps cannot be written is dropped whole.
    let mut written = Vec::new();
    for s in staged {
        match write_temps(&s.prepared) {
            Ok(()) => written.push(s),
            Err(e) => outcomes.extend(fail(&s.prepared, &format!("nothing written: {e:#}"))),
        }
    }
    crate::failpoint!("after-temps");
    // 3. Renames: key first, then certificate (recovery relies on this order).
    for s in written {
        match rename_pair(&s.prepared) {
            Ok(()) => outcomes.extend(renewed(inv, &s)),
            Err(e) => outcomes.extend(fail(&s.prepared, &format!("{e:#}"))),
        }
    }
    crate::failpoint!("after-renames");
    mark_installed(&opts.state_dir, &mut pending, &outcomes);
    outcomes
}

/// Copies each pair's files into the backup set; a pair that cannot be backed up is handed
/// to `failed` and goes no further.
fn back_up(
    inv: &Inventory,
    set: &Path,
    ready: Vec<Prepared>,
    mut failed: impl FnMut(&Prepared, anyhow::Error),
) -> Vec<Staged> {
    let mut staged = Vec::new();
    for p in ready {
        let change = (|| -> anyhow::Result<txn::Change> {
            let cert_backup = backup::backup_file(set, &p.cert_target)?;
            let (key, key_backup) = match &p.key {
                Some((k, _, _)) => (Some(k.clone()), Some(backup::backup_file(set, k)?)),
                None => {
                    let cert = &inv.certs[p.cert];
                    // A kubeconfig holds its own key: it was backed up with the file.
                    if let Some(k) = inv.matched_key(cert).filter(|k| k.path != cert.path) {
                        backup::backup_file(set, &k.path)?;
                    }
                    (None, None)
                }
            };
            Ok(txn::Change {
                cert: p.cert_target.clone(),
                key,
                cert_backup,
                key_backup,
            })
        })();
        match change {
            Ok(change) => staged.push(Staged {
                prepared: p,
                change,
            }),
            Err(e) => failed(&p, e),
        }
    }
    staged
}

/// Writes the new key (when rotating) and certificate to their temp files; on an error
/// neither temp file stays.
fn write_temps(p: &Prepared) -> anyhow::Result<()> {
    let r = (|| -> anyhow::Result<()> {
        if let Some((k, bytes, meta)) = &p.key {
            fsutil::write_temp(k, bytes, meta)?;
        }
        fsutil::write_temp(&p.cert_target, &p.cert_bytes, &p.cert_meta)?;
        Ok(())
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(fsutil::temp_path(&p.cert_target));
        if let Some((k, _, _)) = &p.key {
            let _ = std::fs::remove_file(fsutil::temp_path(k));
        }
    }
    r
}

/// Renames the temp files over the originals, key first, and fsyncs their directories.
fn rename_pair(p: &Prepared) -> anyhow::Result<()> {
    if let Some((k, _, _)) = &p.key {
        fsutil::rename(&fsutil::temp_path(k), k)?;
        crate::failpoint!("between-key-and-cert");
    }
    fsutil::rename(&fsutil::temp_path(&p.cert_target), &p.cert_target)?;
    let key_dir = p.key.as_ref().and_then(|(k, _, _)| k.parent());
    for d in [p.cert_target.parent(), key_dir].into_iter().flatten() {
        fsutil::sync_dir(d)?;
    }
    Ok(())
}

/// The outcomes of an installed pair: every certificate its file renews.
fn renewed<'a>(inv: &'a Inventory, s: &'a Staged) -> impl Iterator<Item = RenewOutcome> + 'a {
    let p = &s.prepared;
    p.renewed().map(move |(i, serial, not_after)| {
        let c = &inv.certs[i];
        tracing::info!(path = %p.cert_target.display(), serial = %serial, "renewed {}", c.label());
        RenewOutcome {
            cert: i,
            path: c.path.clone(),
            watch: c.watch,
            result: RenewResult::Renewed {
                serial: serial.to_string(),
                not_after,
                rotated: p.rotated,
                change: s.change.clone(),
            },
        }
    })
}

/// Marks the record installed with the changes that were (the pass hands it on to the
/// restart stage), or removes it when nothing was.
fn mark_installed(state_dir: &Path, pending: &mut txn::Pending, outcomes: &[RenewOutcome]) {
    pending.phase = txn::Phase::Installed;
    let renewed: HashSet<&PathBuf> = outcomes
        .iter()
        .filter_map(|o| match &o.result {
            RenewResult::Renewed { change, .. } => Some(&change.cert),
            RenewResult::Failed { .. } => None,
        })
        .collect();
    pending.changes.retain(|c| renewed.contains(&c.cert));
    let saved = if pending.changes.is_empty() {
        txn::clear(state_dir)
    } else {
        txn::save(state_dir, pending)
    };
    if let Err(e) = saved {
        tracing::error!(
            "updating the pending record in {}: {e:#}",
            state_dir.display()
        );
    }
}
