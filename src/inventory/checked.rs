//! Signatures this node has checked already: `state_dir/checked-signatures`, the SHA-256 of
//! each (certificate, CA certificate) pair whose signature verified, so that `check` on a
//! node whose daemon has passed checks only what changed since (on 10,000 certificates the
//! signature checks were half of `check`'s CPU time).
//!
//! Whether a certificate's signature verifies with a CA is a function of the two
//! certificates' bytes alone (names, key identifiers, algorithm, key, signature), and the
//! digest covers both whole, so a hit answers exactly as the check would. A missing,
//! unreadable or damaged file costs only the checks: nothing in it can make a pair verify
//! that would not. A pass that writes writes it too, after its renewals and under its
//! state lock (whole, replaced atomically, only when it changed: the pairs of that pass's
//! scan); scans only read it, so `check`, dry runs and the daemon's surveys change nothing.

use std::path::Path;

use aws_lc_rs::digest::{Context, SHA256};

use crate::format::cert::CertFacts;

/// The file's name in `state_dir`.
pub const FILE_NAME: &str = "checked-signatures";

/// The file's first bytes; then 32-byte digests, sorted.
const MAGIC: &[u8; 32] = b"certrenewd checked signatures 1\n";

/// A digest naming one (certificate, CA certificate) pair.
pub type Pair = [u8; 32];

/// The pairs known to verify.
#[derive(Debug, Default)]
pub struct Checked {
    known: Vec<Pair>,
}

impl Checked {
    /// No record: every signature is checked.
    pub fn none() -> Checked {
        Checked::default()
    }

    /// The record in `state_dir`; empty when there is none or it cannot be read.
    pub fn open(state_dir: &Path) -> Checked {
        let path = state_dir.join(FILE_NAME);
        let known = match crate::fsutil::read(&path) {
            Ok(bytes) => parse(&bytes).unwrap_or_else(|| {
                tracing::debug!("{} is not a record of checked signatures", path.display());
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Checked { known }
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
}

/// Keeps `pairs`, those that verified in a pass's scan, as the record in `state_dir` when
/// they differ from it. The caller holds the state lock. The record is a cache: a failure
/// to write it is logged, and the next scan checks again.
pub fn keep(state_dir: &Path, pairs: &[Pair]) {
    if !state_dir.is_dir() {
        return; // no state_dir yet: the pass that needs one makes it
    }
    let mut pairs = pairs.to_vec();
    pairs.sort_unstable();
    pairs.dedup();
    if pairs == Checked::open(state_dir).known {
        return;
    }
    let mut bytes = Vec::with_capacity(MAGIC.len() + pairs.len() * 32);
    bytes.extend_from_slice(MAGIC);
    pairs.iter().for_each(|p| bytes.extend_from_slice(p));
    let path = state_dir.join(FILE_NAME);
    if let Err(e) = write(&path, &bytes) {
        tracing::warn!(
            "{} not kept (signatures will be checked again): {e:#}",
            path.display()
        );
    }
}

/// Replaces the record: a temp file, renamed over it (only the holder of the state lock
/// writes, so every temp beside it is a dead process's and goes first, whatever its PID).
/// Not fsynced: a record lost or torn by a crash is shorter or unreadable, and costs only
/// the checks.
fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    crate::fsutil::remove_all_temps_of(path)?;
    remove_old_temps(path);
    let tmp = crate::fsutil::temp_path(path);
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

/// Removes the temps of versions that named them `.checked-signatures.<pid>`, a name no
/// recovery knew: one a kill left stayed for good.
fn remove_old_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let old = n
            .strip_prefix(&prefix)
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if old && std::fs::remove_file(e.path()).is_ok() {
            tracing::warn!(path = %e.path().display(), "removed a temp file its process left");
        }
    }
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
    fn a_kept_record_is_read_back_with_the_last_pairs_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        keep(dir.path(), &[b, a, b]);
        let again = Checked::open(dir.path());
        assert!(again.known(&a) && again.known(&b) && !again.known(&[3; 32]));
        // The pairs of the last scan only: what is gone is forgotten.
        keep(dir.path(), &[b]);
        let again = Checked::open(dir.path());
        assert!(!again.known(&a) && again.known(&b));
    }

    #[test]
    fn a_damaged_record_knows_nothing_and_no_state_dir_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        for bad in [&b"not a record"[..], &[MAGIC.as_slice(), &[7; 31]].concat()] {
            std::fs::write(&file, bad).unwrap();
            assert!(!Checked::open(dir.path()).known(&[7; 32]));
        }
        let unsorted = [MAGIC.as_slice(), &[2; 32], &[1; 32]].concat();
        std::fs::write(&file, unsorted).unwrap();
        assert!(!Checked::open(dir.path()).known(&[1; 32]));
        let missing = dir.path().join("not-made");
        keep(&missing, &[[1; 32]]);
        assert!(!missing.exists());
    }

    /// A kill between the temp's creation and its rename leaves it; the next write removes
    /// it, under this version's temp name or the `.checked-signatures.<pid>` of earlier ones,
    /// whatever its PID, and leaves nothing beside the record.
    #[test]
    fn temps_a_killed_writer_left_are_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(FILE_NAME);
        let leaked = [
            dir.path().join(format!(".{FILE_NAME}.4194301")),
            dir.path()
                .join(format!(".{FILE_NAME}.4194302-0badf00d.certrenewd-tmp")),
        ];
        for t in &leaked {
            std::fs::write(t, b"half").unwrap();
        }
        let other = dir.path().join(format!(".{FILE_NAME}.notes"));
        std::fs::write(&other, b"not ours").unwrap();
        keep(dir.path(), &[[5u8; 32]]);
        assert!(Checked::open(dir.path()).known(&[5; 32]));
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [format!(".{FILE_NAME}.notes"), FILE_NAME.to_string()]);
        assert!(record.is_file());
    }
}
