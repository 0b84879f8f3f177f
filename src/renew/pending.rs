//! The pending record: intent written before any certificate or key is replaced, so that a
//! crash at any instant is finished or rolled back on the next start. Only the renewer
//! writes it; once the files are installed the pass hands what it owes to the restart
//! stage's own record (`restart::owed`) and clears this one.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::fsutil::{self, FileMeta, StateFile};

/// One certificate (and, when rotating, its key) being replaced.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Change {
    /// The certificate file replaced.
    pub cert: PathBuf,
    /// The key file replaced together with it (key rotation), if any.
    pub key: Option<PathBuf>,
    /// Where the previous certificate was copied.
    pub cert_backup: PathBuf,
    /// Where the previous key was copied.
    pub key_backup: Option<PathBuf>,
    /// Renewed kubelet's way: `cert` is kubelet's `-current.pem` symlink, swapped
    /// from the old pair's file to a new one (`cert_backup` holds the old pair).
    /// (Boxed: every renewal's result carries its change.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Box<super::kubelet_link::Swap>>,
    /// A second change to a file the same pass already changed (a renewed certificate, then
    /// the re-issued CA's copy in it): an earlier change of the record names the same
    /// `cert`, and `cert_backup`, `key` and `key_backup` are that change's, so that a
    /// roll-back puts back the files as they were before the pass, never the ones between.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chained: bool,
    /// The CA this change re-issues: recorded here before the CA file is renamed, so that
    /// the record of its old certificate (`old-cas.json`) is written even when a crash
    /// comes between the rename and that record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reissued_ca: Option<Box<ReissuedCa>>,
    /// The mark (`fsutil::temp_tag`) in the names of the temp files the pass writes for this
    /// change: recovery reads the change's state from those files and no others (another
    /// process's temp beside the same file is not this change's). Absent in a record of a
    /// version whose temp names were fixed (`.<name>.certrenewd-tmp`), which it implies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_tag: Option<String>,
}

impl Change {
    /// A change this process installs: its temp files are named with this process's mark.
    pub fn ours(self) -> Change {
        Change {
            temp_tag: Some(fsutil::temp_tag().to_string()),
            ..self
        }
    }

    /// The temp file of the certificate (or symlink) the pass writes for this change.
    pub fn cert_temp(&self) -> PathBuf {
        fsutil::temp_path_tagged(&self.cert, self.temp_tag.as_deref())
    }

    /// The temp file of the key the pass writes for this change, when it rotates one.
    pub fn key_temp(&self) -> Option<PathBuf> {
        let tag = self.temp_tag.as_deref();
        self.key
            .as_deref()
            .map(|k| fsutil::temp_path_tagged(k, tag))
    }
}

/// A CA re-issued with its own key: what copies of the old certificate elsewhere need to
/// be told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReissuedCa {
    /// The CA file, as listed.
    pub ca: PathBuf,
    /// The old certificate's serial, hex.
    pub old_serial: String,
    /// When the old certificate ends.
    #[serde(with = "time::serde::rfc3339")]
    pub old_not_after: time::OffsetDateTime,
    /// The new certificate's serial, hex.
    pub new_serial: String,
    /// When it was re-issued.
    #[serde(with = "time::serde::rfc3339")]
    pub renewed_at: time::OffsetDateTime,
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
    /// Units owed a restart, as recorded by certrenewd 0.1 (read so that a crash across an
    /// upgrade still restarts them; no longer written: the owed units follow from the
    /// configuration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// Static pods owed a restart, likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// The marks of the processes that recovered this record (putting a previous file back
    /// writes a temp file too): a crash during a recovery leaves a temp file the next one
    /// must remove, named with one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovered_by: Vec<String>,
}

impl Pending {
    /// A new record of this process's pass.
    pub fn new(phase: Phase) -> Pending {
        Pending {
            phase,
            changes: Vec::new(),
            units: Vec::new(),
            pods: Vec::new(),
            recovered_by: Vec::new(),
        }
    }

    /// Every temp file a crash may have left beside `file` (a certificate, key or symlink of
    /// the change `c`): the change's own, a recovery's, and the fixed name of a version
    /// before marked names (so that a crash across an upgrade leaves nothing behind).
    fn temps_of(&self, c: &Change, file: &Path) -> Vec<PathBuf> {
        self.temp_tags(c)
            .into_iter()
            .map(|t| fsutil::temp_path_tagged(file, t))
            .collect()
    }

    /// The marks of [`Pending::temps_of`] (`None`: the fixed name).
    fn temp_tags<'a>(&'a self, c: &'a Change) -> Vec<Option<&'a str>> {
        let mut tags: Vec<Option<&str>> = vec![c.temp_tag.as_deref(), None];
        tags.extend(self.recovered_by.iter().map(|t| Some(t.as_str())));
        tags.dedup();
        tags
    }

    /// Removes every temp file [`Pending::temps_of`] names beside the files of `c`.
    fn remove_temps(&self, c: &Change) -> anyhow::Result<()> {
        for file in [Some(c.cert.as_path()), c.key.as_deref()]
            .into_iter()
            .flatten()
        {
            for tmp in self.temps_of(c, file) {
                fsutil::remove_if_exists(&tmp)?;
            }
        }
        Ok(())
    }
}

/// What recovery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Changes whose new files are in place but whose services were not yet confirmed
    /// restarted: the restarts are owed.
    pub installed: Vec<Change>,
    /// Units owed a restart by a record of certrenewd 0.1.
    pub units: Vec<String>,
    /// Static pods owed a restart by a record of certrenewd 0.1.
    pub pods: Vec<String>,
    /// Certificates whose half-done replacement was undone (old pair kept).
    pub rolled_back: Vec<PathBuf>,
    /// Certificates whose replacement was completed (new pair).
    pub rolled_forward: Vec<PathBuf>,
    /// Files renewed earlier in the interrupted pass whose second change (the re-issued
    /// CA's copy) was not renamed: its temp file was removed, and the file keeps what the
    /// first change installed.
    pub chained_undone: Vec<PathBuf>,
    /// The record as recovery left it (`None`: removed, nothing was installed): the
    /// installed changes, owed by the restart stage once the pass hands them over.
    pub left: Option<Pending>,
}

fn record(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "pending.json")
}

/// Saves the record durably.
pub fn save(state_dir: &Path, pending: &Pending) -> anyhow::Result<()> {
    record(state_dir).write(pending)
}

/// Whether a record is there: an install was interrupted (or its hand-over was).
pub fn exists(state_dir: &Path) -> bool {
    record(state_dir).path().exists()
}

/// Reads the record, if any.
pub fn load(state_dir: &Path) -> anyhow::Result<Option<Pending>> {
    record(state_dir).read("; inspect it and the files it names, then remove it")
}

/// Removes the record once its units were restarted.
pub fn clear(state_dir: &Path) -> anyhow::Result<()> {
    record(state_dir).remove()
}

/// The pending record as a pass holds it: read once, by recovery, then updated in place by
/// each of its writers (the renewer, the copies, the hand-over) as it writes the file, so
/// that none reads back what another wrote, and none writes a record that drops what another
/// put there (an install left to the restart stage by an earlier pass, a pair left
/// half-done). Clones share the one value: the renewals made at their step, from the
/// restart stage, write the same record. The caller holds the state lock.
#[derive(Debug, Clone)]
pub struct Record {
    state_dir: PathBuf,
    held: std::sync::Arc<std::sync::Mutex<Option<Pending>>>,
}

impl Record {
    /// The record of `state_dir`, as it is known to be: `left`, what recovery left of it
    /// (`None`: no record).
    pub fn new(state_dir: &Path, left: Option<Pending>) -> Record {
        Record {
            state_dir: state_dir.to_path_buf(),
            held: std::sync::Arc::new(std::sync::Mutex::new(left)),
        }
    }

    /// The record as it was last written (`None`: there is none).
    pub fn get(&self) -> Option<Pending> {
        self.lock().clone()
    }

    /// Writes `pending` durably, and keeps it once written: a write that fails leaves the
    /// value as the file still is.
    pub fn save(&self, pending: Pending) -> anyhow::Result<()> {
        save(&self.state_dir, &pending)?;
        *self.lock() = Some(pending);
        Ok(())
    }

    /// Removes the record, and forgets it once removed.
    pub fn clear(&self) -> anyhow::Result<()> {
        clear(&self.state_dir)?;
        *self.lock() = None;
        Ok(())
    }

    /// The state directory the record is in.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Once the installed changes are owed by the restart stage: drops from the record
    /// every change that is settled, keeping only those still half-done (a certificate temp
    /// file waiting beside its new key), and removes the record when none is left.
    pub fn release_settled(&self) -> anyhow::Result<()> {
        let Some(mut pending) = self.get() else {
            return Ok(());
        };
        pending
            .changes
            .retain(|c| !c.chained && c.key.is_some() && c.cert_temp().exists());
        match pending.changes.is_empty() {
            true => self.clear(),
            false => self.save(pending),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        // A writer that panicked left the value as the file was at its last write.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Finishes or rolls back what a crashed pass left, from its record (as it was read). Order
/// of renames in a pass is key first, then certificate, so: both temps present -> nothing
/// replaced (roll back); key temp gone but certificate temp present -> key replaced (roll
/// forward).
pub fn recover(state_dir: &Path, record: Option<Pending>) -> anyhow::Result<Recovered> {
    let Some(mut pending) = record else {
        return Ok(Recovered::default());
    };
    let mut out = Recovered::default();
    // Putting a file back writes a temp file named with this process's mark: recorded
    // first, so that a crash now leaves nothing the next recovery does not know of.
    let tag = fsutil::temp_tag().to_string();
    if !pending.recovered_by.contains(&tag) {
        pending.recovered_by.push(tag);
        save(state_dir, &pending)?;
    }
    for (i, c) in pending.changes.iter().enumerate() {
        // A later change to the same file chains on this one, which was therefore renamed
        // into place before it was recorded: its temp file, if any, is the later one's.
        if pending.changes[i + 1..]
            .iter()
            .any(|later| later.chained && later.cert == c.cert)
        {
            continue;
        }
        if c.chained {
            if c.cert_temp().exists() {
                out.chained_undone.push(c.cert.clone());
            }
            for tmp in pending.temps_of(c, &c.cert) {
                fsutil::remove_if_exists(&tmp)?;
            }
            if let Some(dir) = c.cert.parent() {
                fsutil::sync_dir(dir)?;
            }
            continue;
        }
        if let Some(swap) = &c.link {
            if super::kubelet_link::recover(&c.cert, swap, &pending.temp_tags(c))? {
                out.rolled_back.push(c.cert.clone());
            }
            continue;
        }
        // The change's state is read from its own temp files alone.
        let cert_tmp = c.cert_temp();
        let key_tmp = c.key_temp();
        let cert_tmp_there = cert_tmp.exists();
        let key_tmp_there = key_tmp.as_ref().is_some_and(|k| k.exists());
        match (cert_tmp_there, c.key.is_some(), key_tmp_there) {
            (true, true, false) => match complete(c, &cert_tmp)? {
                // The new key is in place: the new certificate must follow it, or the
                // old key come back.
                true => out.rolled_forward.push(c.cert.clone()),
                false => out.rolled_back.push(c.cert.clone()),
            },
            (true, _, _) | (false, true, true) => {
                pending.remove_temps(c)?;
                out.rolled_back.push(c.cert.clone());
            }
            (false, _, _) if still_old(c) => {
                // The crash came before the first temp file: nothing was replaced.
                out.rolled_back.push(c.cert.clone());
            }
            (false, _, _) => {}
        }
        // Whatever else a crash left beside its files (a recovery's, an older version's).
        pending.remove_temps(c)?;
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
        out.installed = pending
            .changes
            .iter()
            .filter(|c| !out.rolled_back.contains(&c.cert))
            .cloned()
            .collect();
        out.units = pending.units.clone();
        out.pods = pending.pods.clone();
        let left = Pending {
            phase: Phase::Installed,
            ..pending
        };
        save(state_dir, &left)?;
        out.left = Some(left);
    } else {
        clear(state_dir)?;
    }
    Ok(out)
}

/// Completes a change whose key was renamed and whose certificate waits in `cert_tmp`
/// (`true`), or, when that rename fails, puts the previous key back from its backup
/// (`false`). An error when neither can be done: the record stays for the next try.
fn complete(c: &Change, cert_tmp: &Path) -> anyhow::Result<bool> {
    let renamed = crate::failpoint::io("recover-rename-cert")
        .with_context(|| format!("renaming {} to {}", cert_tmp.display(), c.cert.display()))
        .and_then(|()| fsutil::rename(cert_tmp, &c.cert));
    let Err(e) = renamed else {
        return Ok(true);
    };
    let (Some(key), Some(key_backup)) = (&c.key, &c.key_backup) else {
        return Err(e);
    };
    restore(key_backup, key).with_context(|| {
        format!(
            "{e:#}; and putting the previous key back failed: {} does not match {} until \
             one of them can be written",
            key.display(),
            c.cert.display()
        )
    })?;
    fsutil::remove_if_exists(cert_tmp)?;
    tracing::warn!(path = %c.cert.display(), "{e:#}; the previous key was put back instead");
    Ok(false)
}

/// Whether the files of `c` are still byte for byte their backups (so never replaced).
fn still_old(c: &Change) -> bool {
    let same =
        |file: &Path, backup: &Path| match (crate::fsutil::read(file), crate::fsutil::read(backup))
        {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
    same(&c.cert, &c.cert_backup)
        && match (&c.key, &c.key_backup) {
            (Some(k), Some(b)) => same(k, b),
            _ => true,
        }
}

/// Puts the backed-up certificate (and key, when it was rotated) back in place of each
/// change, atomically, key first: each file once, as it was before the pass (a change
/// chained on another restores the same backups). Returns each certificate with how it
/// went.
pub fn roll_back(changes: &[Change]) -> Vec<(PathBuf, anyhow::Result<()>)> {
    let mut seen = std::collections::HashSet::new();
    changes
        .iter()
        .filter(|c| seen.insert(c.cert.clone()))
        .map(|c| {
            let r = (|| -> anyhow::Result<()> {
                if let Some(swap) = &c.link {
                    return super::kubelet_link::restore(&c.cert, swap);
                }
                if let (Some(key), Some(backup)) = (&c.key, &c.key_backup) {
                    restore(backup, key)?;
                }
                restore(&c.cert_backup, &c.cert)
            })();
            (c.cert.clone(), r)
        })
        .collect()
}

/// Puts `backup` back at `target` atomically, with the backup's owner and mode.
pub(crate) fn restore(backup: &Path, target: &Path) -> anyhow::Result<()> {
    let bytes = crate::fsutil::read(backup)
        .with_context(|| format!("reading backup {}", backup.display()))?;
    // The file in place carries the owner and mode it had before the pass (a key's backup
    // is its owner's alone); the backup's only when the file is gone.
    let meta = FileMeta::of(target).or_else(|_| FileMeta::of(backup))?;
    fsutil::replace(target, &bytes, &meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
        let change = |n: &str| {
            Change {
                cert: d.join(format!("{n}.crt")),
                key: Some(d.join(format!("{n}.key"))),
                cert_backup: d.join("unused"),
                key_backup: None,
                ..Change::default()
            }
            .ours()
        };
        save(
            &state,
            &Pending {
                phase: Phase::Writing,
                changes: vec![change("a"), change("b")],
                units: vec!["x.service".into()],
                pods: vec!["etcd".into()],
                recovered_by: Vec::new(),
            },
        )
        .unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        assert_eq!(r.rolled_back, vec![d.join("a.crt")]);
        assert_eq!(r.rolled_forward, vec![d.join("b.crt")]);
        assert_eq!(r.installed, vec![change("b")]);
        // A record of certrenewd 0.1 names the owed units and pods itself.
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
    fn a_second_change_to_a_file_is_undone_alone_and_rolled_back_to_the_bytes_before_the_pass() {
        let dir = tempfile::tempdir().unwrap();
        let (state, d) = (dir.path().join("state"), dir.path());
        let meta = FileMeta::of(d)
            .map(|m| FileMeta { mode: 0o600, ..m })
            .unwrap();
        // Renewed (new certificate and key in place), then its copy of a CA written to a
        // temp file, not renamed: the crash.
        fs::write(d.join("chain.pem"), "new-leaf old-ca").unwrap();
        fs::write(d.join("chain.key"), "new-key").unwrap();
        fs::write(d.join("chain.pem.bak"), "old-leaf old-ca").unwrap();
        fs::write(d.join("chain.key.bak"), "old-key").unwrap();
        fsutil::write_temp(&d.join("chain.pem"), b"new-leaf new-ca", &meta).unwrap();
        let renewal = Change {
            cert: d.join("chain.pem"),
            key: Some(d.join("chain.key")),
            cert_backup: d.join("chain.pem.bak"),
            key_backup: Some(d.join("chain.key.bak")),
            ..Change::default()
        }
        .ours();
        let copy = Change {
            chained: true,
            ..renewal.clone()
        };
        let changes = vec![renewal.clone(), copy.clone()];
        save(
            &state,
            &Pending {
                phase: Phase::Writing,
                changes: changes.clone(),
                ..Pending::new(Phase::Writing)
            },
        )
        .unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        // The renewal stays; only the copy's temp file goes, and nothing says "rolled back".
        assert!(
            r.rolled_back.is_empty() && r.rolled_forward.is_empty(),
            "{r:?}"
        );
        assert_eq!(r.chained_undone, vec![d.join("chain.pem")]);
        assert_eq!(r.installed, changes);
        let read = |n: &str| fs::read_to_string(d.join(n)).unwrap();
        assert_eq!(read("chain.pem"), "new-leaf old-ca");
        assert_eq!(read("chain.key"), "new-key");
        assert!(!fsutil::temp_path(&d.join("chain.pem")).exists());
        // A roll-back puts back the pair from before the pass, once.
        let restored = roll_back(&changes);
        assert_eq!(restored.len(), 1, "each file once");
        assert!(restored[0].1.is_ok());
        assert_eq!(read("chain.pem"), "old-leaf old-ca");
        assert_eq!(read("chain.key"), "old-key");
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
                ..Change::default()
            }],
            units: vec!["x.service".into()],
            pods: vec!["etcd".into()],
            recovered_by: Vec::new(),
        };
        save(&state, &pending).unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        assert_eq!(r.rolled_back, vec![d.join("a.crt")]);
        assert!(r.installed.is_empty(), "{r:?}");
        assert!(r.units.is_empty() && r.pods.is_empty(), "{r:?}");
        assert!(load(&state).unwrap().is_none(), "the record is gone");

        // Renamed in place (differs from its backup): the restart is owed.
        fs::write(d.join("a.crt"), "new-cert").unwrap();
        save(&state, &pending).unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        assert!(r.rolled_back.is_empty(), "{r:?}");
        assert_eq!(r.installed, pending.changes);
        assert_eq!(r.units, vec!["x.service".to_string()]);
        assert_eq!(r.pods, vec!["etcd".to_string()]);
    }

    #[test]
    fn recovery_removes_the_temps_the_record_names_and_not_another_processs() {
        let dir = tempfile::tempdir().unwrap();
        let (state, d) = (dir.path().join("state"), dir.path());
        for (n, body) in [
            ("a.crt", "old-cert"),
            ("a.key", "old-key"),
            ("a.crt.bak", "old-cert"),
            ("a.key.bak", "old-key"),
        ] {
            fs::write(d.join(n), body).unwrap();
        }
        let change = Change {
            cert: d.join("a.crt"),
            key: Some(d.join("a.key")),
            cert_backup: d.join("a.crt.bak"),
            key_backup: Some(d.join("a.key.bak")),
            temp_tag: Some("4242-0badcafe".into()),
            ..Change::default()
        };
        // The crashed pass's temps (nothing renamed yet), the fixed name a version before
        // marked names left, a recovery's, and another process's over the same tree.
        let tagged = |f: &str, t: Option<&str>| fsutil::temp_path_tagged(&d.join(f), t);
        let named = [
            tagged("a.crt", Some("4242-0badcafe")),
            tagged("a.key", Some("4242-0badcafe")),
            tagged("a.key", None),
            tagged("a.crt", Some("77-00000001")),
        ];
        let foreign = [
            tagged("a.crt", Some("4343-12345678")),
            tagged("a.key", Some("4343-12345678")),
        ];
        for t in named.iter().chain(&foreign) {
            fs::write(t, "new").unwrap();
        }
        save(
            &state,
            &Pending {
                changes: vec![change],
                recovered_by: vec!["77-00000001".into()],
                ..Pending::new(Phase::Writing)
            },
        )
        .unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        assert_eq!(r.rolled_back, vec![d.join("a.crt")], "{r:?}");
        let left = |ts: &[PathBuf]| {
            ts.iter()
                .filter(|t| t.exists())
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(left(&named), Vec::<PathBuf>::new(), "the record's temps");
        assert_eq!(left(&foreign), foreign.to_vec(), "another process's temps");
        assert_eq!(fs::read_to_string(d.join("a.crt")).unwrap(), "old-cert");
        assert_eq!(fs::read_to_string(d.join("a.key")).unwrap(), "old-key");
        assert!(load(&state).unwrap().is_none(), "the record is gone");
    }

    #[test]
    fn a_record_of_fixed_temp_names_is_recovered_by_them() {
        // Written by a version whose temp names were fixed: no marks in it.
        let dir = tempfile::tempdir().unwrap();
        let (state, d) = (dir.path().join("state"), dir.path());
        fs::create_dir_all(&state).unwrap();
        fs::write(d.join("b.crt"), "old-cert").unwrap();
        fs::write(d.join("b.key"), "new-key").unwrap();
        fs::write(fsutil::temp_path_tagged(&d.join("b.crt"), None), "new-cert").unwrap();
        let record = serde_json::json!({
            "phase": "writing",
            "changes": [{
                "cert": d.join("b.crt"),
                "key": d.join("b.key"),
                "cert_backup": d.join("b.crt.bak"),
                "key_backup": d.join("b.key.bak"),
            }],
        });
        fs::write(state.join("pending.json"), record.to_string()).unwrap();
        let r = recover(&state, load(&state).unwrap()).unwrap();
        assert_eq!(r.rolled_forward, vec![d.join("b.crt")], "{r:?}");
        assert_eq!(fs::read_to_string(d.join("b.crt")).unwrap(), "new-cert");
        assert!(!fsutil::temp_path_tagged(&d.join("b.crt"), None).exists());
    }
}
