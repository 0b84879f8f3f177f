//! Signatures this node has checked already: `state_dir/checked-signatures`, the SHA-256 of
//! each (certificate, CA certificate) pair whose signature verified, so that `check` on a
//! node whose daemon has passed checks only what changed since (on 10,000 certificates the
//! signature checks were half of `check`'s CPU time).
//!
//! Whether a certificate's signature verifies with a CA is a function of the two
//! certificates' bytes alone (names, key identifiers, algorithm, key, signature), and the
//! digest covers both whole, so a hit answers exactly as the check would. A missing,
//! unreadable or damaged file costs only the checks: nothing in it can make a pair verify
//! that would not. Renewal passes write it (whole, replaced atomically, only when it
//! changed: the pairs of that scan); `check` and `renew --dry-run` change nothing and only
//! read it.

use std::path::{Path, PathBuf};

use aws_lc_rs::digest::{Context, SHA256};

use crate::format::cert::CertFacts;

/// The file's name in `state_dir`.
pub const FILE_NAME: &str = "checked-signatures";

/// The file's first bytes; then 32-byte digests, sorted.
const MAGIC: &[u8; 32] = b"certrenewd checked signatures 1\n";

/// A digest naming one (certificate, CA certificate) pair.
pub type Pair = [u8; 32];

/// What a scan does with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Read it, change nothing (`check`, dry runs).
    Read,
    /// Read it, and write the pairs of this scan when they differ (renewal passes).
    Update,
}

/// The pairs known to verify, and where they are kept.
#[derive(Debug, Default)]
pub struct Checked {
    known: Vec<Pair>,
    /// The file, when this scan may update it.
    update: Option<PathBuf>,
}

impl Checked {
    /// No record: every signature is checked.
    pub fn none() -> Checked {
        Checked::default()
    }

    /// The record in `state_dir`; empty when there is none or it cannot be read.
    pub fn open(state_dir: &Path, record: Record) -> Checked {
        let path = state_dir.join(FILE_NAME);
        let known = match crate::fsutil::read(&path) {
            Ok(bytes) => parse(&bytes).unwrap_or_else(|| {
                tracing::debug!("{} is not a record of checked signatures", path.display());
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Checked {
            known,
            update: (record == Record::Update).then_some(path),
        }
    }

    /// The digest of a CA certificate, the second half of its pairs.
    pub fn ca_digest(ca: &CertFacts) -> Pair {
        digest(&[b"ca\0", &ca.der])
    }

    /// The pair of `cert` and the CA whose [`Checked::ca_digest`] is `ca`.
    pub fn pair(cert: &CertFacts, ca: &Pair) -> Pair {
        digest(&[b"cert\0", ca, &cert.der])
    }

    /// Whether the pair verified when last checked.
    pub fn known(&self, pair: &Pair) -> bool {
        self.known.binary_search(pair).is_ok()
    }

    /// Keeps `pairs`, those that verified in this scan, when this scan updates the record
    /// and they differ from it. The record is a cache: a failure to write it is logged, and
    /// the next scan checks again.
    pub fn keep(&self, mut pairs: Vec<Pair>) {
        let Some(path) = &self.update else { return };
        pairs.sort_unstable();
        pairs.dedup();
        if pairs == self.known {
            return;
        }
        let mut bytes = Vec::with_capacity(MAGIC.len() + pairs.len() * 32);
        bytes.extend_from_slice(MAGIC);
        pairs.iter().for_each(|p| bytes.extend_from_slice(p));
        match path.parent() {
            Some(dir) if dir.is_dir() => {}
            _ => return, // no state_dir yet: the pass that needs one makes it
        }
        if let Err(e) = write(path, &bytes) {
            tracing::warn!(
                "{} not kept (signatures will be checked again): {e:#}",
                path.display()
            );
        }
    }
}

/// Replaces the record: a temp file of this process's own (a pass and `check`, or the
/// daemon's scans, may write at once), renamed over it. Not fsynced: a record lost or torn
/// by a crash is shorter or unreadable, and costs only the checks.
fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = path.with_file_name(format!(".{FILE_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp); // left by a crash of a process with this PID
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(result?)
}

fn digest(parts: &[&[u8]]) -> Pair {
    let mut ctx = Context::new(&SHA256);
    parts.iter().for_each(|p| ctx.update(p));
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The sorted digests of a record, `None` when it is not one.
fn parse(bytes: &[u8]) -> Option<Vec<Pair>> {
    let body = bytes.strip_prefix(MAGIC.as_slice())?;
    if body.len() % 32 != 0 {
        return None;
    }
    let pairs: Vec<Pair> = body
        .chunks_exact(32)
        .map(|c| c.try_into().expect("32 bytes"))
        .collect();
    pairs.is_sorted().then_some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_record_is_read_back_and_only_an_update_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        Checked::open(dir.path(), Record::Read).keep(vec![b, a]);
        assert!(
            !dir.path().join(FILE_NAME).exists(),
            "a read-only scan wrote"
        );
        Checked::open(dir.path(), Record::Update).keep(vec![b, a, b]);
        let again = Checked::open(dir.path(), Record::Read);
        assert!(again.known(&a) && again.known(&b) && !again.known(&[3; 32]));
        // The pairs of the last scan only: what is gone is forgotten.
        Checked::open(dir.path(), Record::Update).keep(vec![b]);
        let again = Checked::open(dir.path(), Record::Read);
        assert!(!again.known(&a) && again.known(&b));
    }

    #[test]
    fn a_damaged_record_knows_nothing_and_no_state_dir_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        for bad in [&b"not a record"[..], &[MAGIC.as_slice(), &[7; 31]].concat()] {
            std::fs::write(&file, bad).unwrap();
            assert!(!Checked::open(dir.path(), Record::Read).known(&[7; 32]));
        }
        let unsorted = [MAGIC.as_slice(), &[2; 32], &[1; 32]].concat();
        std::fs::write(&file, unsorted).unwrap();
        assert!(!Checked::open(dir.path(), Record::Read).known(&[1; 32]));
        let missing = dir.path().join("not-made");
        Checked::open(&missing, Record::Update).keep(vec![[1; 32]]);
        assert!(!missing.exists());
    }
}
