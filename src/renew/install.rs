//! Installing prepared renewals: back up, record intent, write temp files, rename (key
//! first), fsync, mark installed. A pair whose step fails is reported as it is on disk:
//! an error before its first rename leaves it as it was (and its backup is discarded); an
//! error after it completes the pair or puts the old key back; only when both fail is the
//! pair left half-done, named by the pending record, which the next pass completes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use time::OffsetDateTime;

use super::prepare::Prepared;
use super::{RenewOptions, RenewOutcome, RenewResult, backup, failed, pending};
use crate::fsutil;
use crate::inventory::Inventory;

/// A prepared renewal with its backups taken: what the pending record names.
struct Staged {
    prepared: Prepared,
    change: pending::Change,
    /// Every file copied into the backup set for it (discarded when nothing is replaced).
    backups: Vec<PathBuf>,
}

/// How a pair's install ended.
enum Installed {
    /// The new pair is in place.
    Yes,
    /// The old pair is in place (nothing replaced, or the old key put back); no temp left.
    No(anyhow::Error),
    /// The new key beside the old certificate: the certificate's temp file stays, and the
    /// pending record keeps the change until a later pass completes it.
    HalfDone(anyhow::Error),
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
            .map(|(i, ..)| failed(inv, i, why.to_string()))
            .collect()
    };
    let mut outcomes = Vec::new();
    // 1. Backups, then the pending record naming every change.
    let set = match backup::backup_set(&opts.backup_dir, now) {
        Ok(set) => set,
        Err(e) => {
            let why = format!("cannot create a backup, nothing written: {e:#}");
            return ready.iter().flat_map(|p| fail(p, &why)).collect();
        }
    };
    let staged = back_up(inv, &set, ready, now, |p, e| {
        outcomes.extend(fail(p, &format!("cannot back up, nothing written: {e:#}")))
    });
    if staged.is_empty() {
        backup::discard(&set, &[]);
        return outcomes;
    }
    // What the record already holds stays in it: an earlier install whose restarts are not
    // recorded elsewhere yet (recovery's, before the hand-over), a pair left half-done. The
    // marks of the recovery that finished it go: it left no temp file behind.
    let before = opts.pending.get();
    let earlier = before
        .as_ref()
        .map(|p| p.changes.clone())
        .unwrap_or_default();
    let mut pending = pending::Pending {
        changes: (earlier.iter().cloned())
            .chain(staged.iter().map(|s| s.change.clone()))
            .collect(),
        // Restarts owed by a record of certrenewd 0.1, not handed over yet either.
        units: before.as_ref().map(|p| p.units.clone()).unwrap_or_default(),
        pods: before.map(|p| p.pods).unwrap_or_default(),
        ..pending::Pending::new(pending::Phase::Writing)
    };
    if let Err(e) = opts.pending.save(pending.clone()) {
        let why = format!("cannot record the pending change, nothing written: {e:#}");
        outcomes.extend(staged.iter().flat_map(|s| fail(&s.prepared, &why)));
        let unused: Vec<PathBuf> = staged.into_iter().flat_map(|s| s.backups).collect();
        backup::discard(&set, &unused);
        return outcomes;
    }
    crate::failpoint!("after-pending-record");
    // 2. Temp files for each pair; a pair whose temps cannot be written is dropped whole.
    let mut written = Vec::new();
    let mut unused = Vec::new();
    for s in staged {
        match write_temps(&s.prepared) {
            Ok(()) => written.push(s),
            Err(e) => {
                let why = unwritable(&e, &s.prepared.cert_target);
                outcomes.extend(fail(&s.prepared, &format!("nothing written: {why}")));
                unused.extend(s.backups);
            }
        }
    }
    crate::failpoint!("after-temps");
    // 3. Renames: key first, then certificate (recovery relies on this order).
    let mut half_done = Vec::new();
    for s in written {
        match rename_pair(&s.prepared, &s.change) {
            Installed::Yes => outcomes.extend(renewed(inv, &s)),
            Installed::No(e) => {
                outcomes.extend(fail(&s.prepared, &format!("nothing replaced: {e:#}")));
                unused.extend(s.backups);
            }
            Installed::HalfDone(e) => {
                outcomes.extend(fail(&s.prepared, &format!("{e:#}")));
                half_done.push(s.change);
            }
        }
    }
    crate::failpoint!("after-renames");
    mark_installed(&opts.pending, &mut pending, &earlier, &outcomes, &half_done);
    // Backups only of what was replaced (or may still be, for a half-done pair).
    backup::discard(&set, &unused);
    outcomes
}

/// Copies each pair's files into the backup set; a pair that cannot be backed up is handed
/// to `failed` (its partial copies removed) and goes no further.
fn back_up(
    inv: &Inventory,
    set: &Path,
    ready: Vec<Prepared>,
    now: OffsetDateTime,
    mut failed: impl FnMut(&Prepared, anyhow::Error),
) -> Vec<Staged> {
    let mut staged = Vec::new();
    for p in ready {
        let mut backups = Vec::new();
        let mut copy = |file: &Path| -> anyhow::Result<PathBuf> {
            let dest = backup::backup_file(set, file)?;
            backups.push(dest.clone());
            Ok(dest)
        };
        let change = (|| -> anyhow::Result<pending::Change> {
            let cert_backup = copy(&p.cert_target)?;
            let (key, key_backup) = match &p.key {
                Some((k, _, _)) => (Some(k.clone()), Some(copy(k)?)),
                None => {
                    let cert = &inv.certs[p.cert];
                    // A kubeconfig holds its own key: it was backed up with the file.
                    if let Some(k) = inv.matched_key(cert).filter(|k| k.path != cert.path) {
                        copy(&k.path)?;
                    }
                    (None, None)
                }
            };
            Ok(pending::Change {
                cert: p.cert_target.clone(),
                key,
                cert_backup,
                key_backup,
                link: p.link.clone().map(Box::new),
                chained: false,
                reissued_ca: reissued_ca(inv, &p, now),
                temp_tag: None,
            }
            .ours())
        })();
        match change {
            Ok(change) => staged.push(Staged {
                prepared: p,
                change,
                backups,
            }),
            Err(e) => {
                backup::discard(set, &backups);
                failed(&p, e)
            }
        }
    }
    staged
}

/// The CA `p` re-issues, if it renews one: what the record of its old certificate says.
fn reissued_ca(
    inv: &Inventory,
    p: &Prepared,
    now: OffsetDateTime,
) -> Option<Box<pending::ReissuedCa>> {
    p.renewed().find_map(|(i, serial, _, _)| {
        let c = &inv.certs[i];
        c.facts.is_ca.then(|| {
            Box::new(pending::ReissuedCa {
                ca: c.path.clone(),
                old_serial: c.facts.serial.clone(),
                old_not_after: c.facts.not_after,
                new_serial: serial.to_string(),
                renewed_at: now,
            })
        })
    })
}

/// Writes the new key (when rotating) and certificate to their temp files; on an error
/// neither temp file stays.
fn write_temps(p: &Prepared) -> anyhow::Result<()> {
    let r = (|| -> anyhow::Result<()> {
        if let Some(swap) = &p.link {
            // kubelet's way: the new pair in a file of its own, then a symlink to it.
            return super::kubelet_link::write(&p.cert_target, swap, &p.cert_bytes, &p.cert_meta);
        }
        if let Some((k, bytes, meta)) = &p.key {
            fsutil::write_temp_step(k, bytes, meta, "key-temp")?;
        }
        fsutil::write_temp_step(&p.cert_target, &p.cert_bytes, &p.cert_meta, "cert-temp")?;
        Ok(())
    })();
    if r.is_err() {
        remove_temps(p);
    }
    r
}

/// Why `file` could not be written; when its file system is read-only to this process, how
/// to let certrenewd write there: under systemd that is the service's own sandbox (the
/// shipped unit writes only the directories it names in ReadWritePaths=).
fn unwritable(e: &anyhow::Error, file: &Path) -> String {
    let read_only = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::EROFS))
    });
    let dir = file.parent().unwrap_or(file).display();
    match read_only {
        true => format!(
            "{e:#}; {dir} is read-only to certrenewd: run as the certrenewd service, add it to the unit's writable paths (`systemctl edit certrenewd`, then ReadWritePaths=-{dir} under [Service])"
        ),
        false => format!("{e:#}"),
    }
}

fn remove_temps(p: &Prepared) {
    if let Some(swap) = &p.link {
        let _ = super::kubelet_link::undo_write(&p.cert_target, swap, &[Some(fsutil::temp_tag())]);
        return;
    }
    let _ = std::fs::remove_file(fsutil::temp_path(&p.cert_target));
    if let Some((k, _, _)) = &p.key {
        let _ = std::fs::remove_file(fsutil::temp_path(k));
    }
}

/// `fsutil::rename` behind the failpoint `point`.
fn rename(point: &str, from: &Path, to: &Path) -> anyhow::Result<()> {
    crate::failpoint::io(point)
        .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
    fsutil::rename(from, to)
}

/// Renames the temp files over the originals, key first, and fsyncs their directories.
/// Once both are renamed the pair is installed, whatever the directory fsync says.
fn rename_pair(p: &Prepared, change: &pending::Change) -> Installed {
    if let Some((k, _, _)) = &p.key {
        if let Err(e) = rename("rename-key", &fsutil::temp_path(k), k) {
            remove_temps(p);
            return Installed::No(e);
        }
        crate::failpoint!("between-key-and-cert");
    }
    let cert_tmp = fsutil::temp_path(&p.cert_target);
    if let Err(e) = rename("rename-cert", &cert_tmp, &p.cert_target) {
        if p.key.is_none() {
            remove_temps(p);
            return Installed::No(e);
        }
        if let Some(undone) = complete_or_undo(p, change, e) {
            return undone;
        }
    }
    let key_dir = p.key.as_ref().and_then(|(k, _, _)| k.parent());
    let dirs = [
        ("fsync-cert-dir", p.cert_target.parent()),
        ("fsync-key-dir", key_dir),
    ];
    for (point, d) in dirs.into_iter().filter_map(|(n, d)| Some((n, d?))) {
        let synced = crate::failpoint::io(point)
            .with_context(|| format!("syncing directory {}", d.display()))
            .and_then(|()| fsutil::sync_dir(d));
        if let Err(e) = synced {
            tracing::warn!(
                path = %p.cert_target.display(),
                "the new certificate is installed, but a power loss could still undo it: {e:#}"
            );
        }
    }
    Installed::Yes
}

/// The new key is in place and the certificate's rename failed (`e`): try the rename once
/// more, else put the previous key back from its backup. `None` when the second rename
/// succeeded (the pair is complete).
fn complete_or_undo(p: &Prepared, change: &pending::Change, e: anyhow::Error) -> Option<Installed> {
    let cert_tmp = fsutil::temp_path(&p.cert_target);
    if rename("rename-cert", &cert_tmp, &p.cert_target).is_ok() {
        tracing::warn!(path = %p.cert_target.display(), "{e:#}; the second try succeeded");
        return None;
    }
    let (Some(key), Some(key_backup)) = (&change.key, &change.key_backup) else {
        return Some(Installed::HalfDone(e));
    };
    let restored = crate::failpoint::io("restore-key")
        .with_context(|| format!("putting the previous {} back", key.display()))
        .and_then(|()| pending::restore(key_backup, key));
    Some(match restored {
        Ok(()) => {
            let _ = std::fs::remove_file(&cert_tmp);
            Installed::No(e.context(format!("the previous key {} was put back", key.display())))
        }
        Err(undo) => Installed::HalfDone(e.context(format!(
            "the new key {} is in place beside the old certificate, and putting the previous \
             key back failed too ({undo:#}); the pending record keeps the change and the \
             next pass installs the new certificate from {}",
            key.display(),
            cert_tmp.display()
        ))),
    })
}

/// The outcomes of an installed pair: every certificate its file renews.
fn renewed<'a>(inv: &'a Inventory, s: &'a Staged) -> impl Iterator<Item = RenewOutcome> + 'a {
    let p = &s.prepared;
    p.renewed().map(move |(i, serial, not_before, not_after)| {
        let c = &inv.certs[i];
        tracing::info!(path = %p.cert_target.display(), serial = %serial, "renewed {}", c.label());
        if c.facts.is_ca {
            // What this node cannot reach keeps the old certificate: say until when it works.
            tracing::warn!(
                path = %c.path.display(),
                serial = %serial,
                "CA {} re-issued with the same key, subject and key identifier (serial {} -> {serial}): \
                 copies of the old certificate elsewhere (workers' kubeconfigs, clients' trust \
                 bundles, kubeadm's cluster-info) keep working until {}; copy {} there before then",
                c.path.display(),
                c.facts.serial,
                crate::timefmt::utc_minute(c.facts.not_after),
                c.path.display()
            );
        }
        RenewOutcome {
            cert: i,
            path: c.path.clone(),
            watch: c.watch,
            result: RenewResult::Renewed {
                serial: serial.to_string(),
                not_before,
                not_after,
                rotated: p.rotated,
                change: s.change.clone(),
            },
        }
    })
}

/// Marks the record installed with the changes that were (the pass hands it on to the
/// restart stage), those left half-done (recovery completes them) and those it held before
/// (`earlier`), or removes it when there are none.
fn mark_installed(
    record: &pending::Record,
    pending: &mut pending::Pending,
    earlier: &[pending::Change],
    outcomes: &[RenewOutcome],
    half_done: &[pending::Change],
) {
    pending.phase = pending::Phase::Installed;
    let renewed: HashSet<&PathBuf> = outcomes
        .iter()
        .filter_map(|o| match &o.result {
            RenewResult::Renewed { change, .. } => Some(&change.cert),
            _ => None,
        })
        .collect();
    pending
        .changes
        .retain(|c| earlier.contains(c) || renewed.contains(&c.cert) || half_done.contains(c));
    let saved = match pending.changes.is_empty() {
        true => record.clear(),
        false => record.save(pending.clone()),
    };
    if let Err(e) = saved {
        tracing::error!(
            "updating the pending record in {}: {e:#}",
            record.state_dir().display()
        );
    }
}
