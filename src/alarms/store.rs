//! The active alarms, persisted in `<state_dir>/alarms.json` across restarts.

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::ActiveAlarm;
use crate::fsutil::{self, StateFile};

const FILE_NAME: &str = "alarms.json";
/// The alarms raised on the other controllers' behalf between passes: a file of their own,
/// written only by the task that watches the cluster, so that it never races a pass over
/// `alarms.json` and a pass's reconcile never clears them.
const PEERS_FILE_NAME: &str = "peer-alarms.json";
const FORMAT_VERSION: u32 = 1;

/// The on-disk shape of the state file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    version: u32,
    alarms: Vec<ActiveAlarm>,
}

/// A state file written by another version of certrenewd.
#[derive(Debug, thiserror::Error)]
#[error("alarm state {path}: unsupported version {1} (expected {FORMAT_VERSION})", path = .0.display())]
struct Unsupported(std::path::PathBuf, u32);

/// The persisted set of active alarms (`<state_dir>/alarms.json`, a [`StateFile`] that
/// operators may read: mode 0644).
#[derive(Debug, Clone)]
pub struct AlarmStore {
    file: StateFile,
}

impl AlarmStore {
    /// A store in `state_dir`; nothing is read or created yet.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            file: StateFile::new(state_dir, FILE_NAME).readable(),
        }
    }

    /// The store of the alarms raised on the other controllers' behalf
    /// (`<state_dir>/peer-alarms.json`).
    pub fn peers(state_dir: &Path) -> Self {
        Self {
            file: StateFile::new(state_dir, PEERS_FILE_NAME).readable(),
        }
    }

    /// Every active alarm of the node: the passes' and those raised on the other
    /// controllers' behalf, in that order.
    pub fn all(state_dir: &Path) -> anyhow::Result<Vec<ActiveAlarm>> {
        let mut all = AlarmStore::new(state_dir).load()?;
        all.extend(AlarmStore::peers(state_dir).load()?);
        Ok(all)
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The active alarms; a missing file means none, an unreadable or corrupt one is an error naming it.
    pub fn load(&self) -> anyhow::Result<Vec<ActiveAlarm>> {
        let Some(saved) = self.file.read::<Saved>("")? else {
            return Ok(Vec::new());
        };
        if saved.version != FORMAT_VERSION {
            let path = self.path().to_owned();
            return Err(Unsupported(path, saved.version).into());
        }
        Ok(saved.alarms)
    }

    /// The active alarms for a pass to reconcile with. A corrupt file (not JSON of this
    /// shape, or another version) must not cost the pass its report: it is renamed aside
    /// to `alarms.json.corrupt-<UTC time>`, logged naming both files, and the set starts
    /// empty, so the pass rebuilds it. An unreadable file is still an error.
    pub fn load_or_set_aside(&self, now: OffsetDateTime) -> anyhow::Result<Vec<ActiveAlarm>> {
        let err = match self.load() {
            Ok(alarms) => return Ok(alarms),
            Err(e) if fsutil::is_corrupt(&e) || e.downcast_ref::<Unsupported>().is_some() => e,
            Err(e) => return Err(e),
        };
        let path = self.path();
        let aside = fsutil::set_aside(path, now)
            .with_context(|| format!("{err:#}; and keeping it aside failed"))?;
        tracing::error!(
            path = %path.display(),
            kept_as = %aside.display(),
            "{err:#}: kept as {}; the alarm state is rebuilt from this pass in {} (alarms \
             still active are raised again)",
            aside.display(),
            path.display()
        );
        Ok(Vec::new())
    }

    /// Replaces the state atomically with the careful writer every state file uses. A
    /// full disk is when alarms matter most: then the room kept for them ([`keep_room`]) is
    /// given up and the write tried again.
    pub fn save(&self, alarms: &[ActiveAlarm]) -> anyhow::Result<()> {
        let saved = Saved {
            version: FORMAT_VERSION,
            alarms: alarms.to_vec(),
        };
        let dir = self.path().parent().unwrap_or(Path::new("."));
        match self.file.write(&saved) {
            Err(e) if fsutil::is_no_space(&e) && give_room(dir) => {
                self.file.write(&saved).with_context(|| {
                    format!("{e:#}; and again after giving up the room kept for alarms")
                })?;
                tracing::warn!(
                    path = %self.path().display(),
                    "the disk is full: the alarms were saved in the room kept for them ({}), which is made again once there is space",
                    dir.join(ROOM).display()
                );
            }
            r => r?,
        }
        let held = std::fs::metadata(self.path()).map_or(0, |m| m.len());
        keep_room(dir, Room::Holding(held));
        Ok(())
    }
}

/// The file that keeps room for the alarm store on a disk that fills up.
const ROOM: &str = "alarms.room";
/// The room's least size, and what the store's own needs are counted from.
const ROOM_BYTES: u64 = 32 * 1024;
/// What one certificate's alarms take in the store, with room to spare: its 500.2x0 entry
/// (entity, reason, subjects) and its share of a host alarm's reasons.
const PER_CERTIFICATE: u64 = 1536;

/// How big the room kept for the alarms is to be.
#[derive(Debug, Clone, Copy)]
pub enum Room {
    /// As big as it is, or the least size when there is none.
    AsItIs,
    /// For a node watching this many certificates: the alarms of all of them.
    Watching(usize),
    /// For a store of this many bytes.
    Holding(u64),
}

impl Room {
    /// The bytes kept: twice what the store may need, so that once the room has been given
    /// up on a full disk, the next passes still find space for their new store beside the
    /// old one until there is space again.
    fn bytes(self) -> u64 {
        let need = match self {
            Room::AsItIs => 0,
            Room::Watching(n) => ROOM_BYTES + PER_CERTIFICATE * n as u64,
            Room::Holding(b) => b,
        };
        (2 * need).max(ROOM_BYTES)
    }
}

/// Makes `<state_dir>/alarms.room`, or makes it bigger, to the size `room` asks for
/// (written, not sparse, so that its blocks are really held; never made smaller). A bigger
/// one is written beside it and renamed over it, so the room already kept stays kept when
/// there is no space for more; where there is none, it waits for a later pass.
pub fn keep_room(state_dir: &Path, room: Room) {
    use std::io::Write as _;
    let path = state_dir.join(ROOM);
    let has = std::fs::metadata(&path).ok().map(|m| m.len());
    let want = match (has, room) {
        (Some(_), Room::AsItIs) => return,
        (Some(has), _) if has >= room.bytes() => return,
        (_, room) => room.bytes(),
    };
    let next = state_dir.join(format!("{ROOM}.new"));
    let _ = std::fs::remove_file(&next);
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&next)
        .and_then(|mut f| {
            let zeros = vec![0u8; 64 * 1024];
            let mut left = want;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&next, &path));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&next);
        tracing::debug!(path = %path.display(), "no room of {want} bytes kept for the alarms yet: {e}");
    }
}

/// Removes the room kept for the alarms; whether there was one.
fn give_room(state_dir: &Path) -> bool {
    std::fs::remove_file(state_dir.join(ROOM)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::AlarmKind;
    use std::fs;
    use std::os::unix::fs::PermissionsExt as _;
    use time::macros::datetime;

    #[test]
    fn save_is_0644_and_leaves_no_temp_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = AlarmStore::new(&dir.path().join("state"));
        let alarm = ActiveAlarm {
            kind: AlarmKind::ExpiringSoon,
            entity: "host=c0.certificate=/etc/etcd/peer.crt".into(),
            reason: "12 days left".into(),
            reasons: Vec::new(),
            subjects: Vec::new(),
            raised_at: datetime!(2026-11-21 00:10:03 UTC),
        };
        store.save(std::slice::from_ref(&alarm))?;
        store.save(std::slice::from_ref(&alarm))?;
        let mode = fs::metadata(store.path())?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let mut names: Vec<_> = fs::read_dir(dir.path().join("state"))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        // Beside the alarms, the room kept for them on a disk that fills up.
        assert_eq!(names, ["alarms.json", "alarms.room"]);
        assert_eq!(
            fs::metadata(dir.path().join("state/alarms.room"))?.len(),
            32 * 1024
        );
        // A node watching many certificates keeps room for all their alarms, and a
        // smaller ask never shrinks it.
        keep_room(&dir.path().join("state"), Room::Watching(100));
        let room = fs::metadata(dir.path().join("state/alarms.room"))?.len();
        assert_eq!(room, 2 * (32 * 1024 + 100 * 1536));
        keep_room(&dir.path().join("state"), Room::Watching(1));
        keep_room(&dir.path().join("state"), Room::AsItIs);
        assert_eq!(
            fs::metadata(dir.path().join("state/alarms.room"))?.len(),
            room
        );
        let text = fs::read_to_string(store.path())?;
        assert!(text.contains("\"kind\": \"expiring_soon\""), "{text}");
        assert!(
            text.contains("\"raised_at\": \"2026-11-21T00:10:03Z\""),
            "{text}"
        );
        assert_eq!(store.load()?, [alarm]);
        Ok(())
    }

    #[test]
    fn a_corrupt_file_is_kept_aside_and_the_set_starts_empty() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = AlarmStore::new(dir.path());
        let now = datetime!(2026-11-21 00:10:03 UTC);
        assert!(
            store.load_or_set_aside(now)?.is_empty(),
            "no file: no alarms"
        );
        fs::write(store.path(), b"{\"version\":1,\"alarms\":[{\"kind\"")?;
        assert!(store.load().is_err(), "load stays strict");
        assert!(store.load_or_set_aside(now)?.is_empty());
        let aside = dir.path().join("alarms.json.corrupt-20261121T001003Z");
        assert_eq!(fs::read(&aside)?, b"{\"version\":1,\"alarms\":[{\"kind\"");
        assert!(!store.path().exists());
        // A second one in the same second gets its own name.
        fs::write(store.path(), br#"{"version":7,"alarms":[]}"#)?;
        assert!(store.load_or_set_aside(now)?.is_empty());
        assert!(
            dir.path()
                .join("alarms.json.corrupt-20261121T001003Z-1")
                .exists()
        );
        Ok(())
    }

    #[test]
    fn wrong_version_is_an_error() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = AlarmStore::new(dir.path());
        fs::write(store.path(), br#"{"version":7,"alarms":[]}"#)?;
        let err = store.load().map(|_| ()).map_err(|e| format!("{e:#}"));
        assert!(
            matches!(&err, Err(e) if e.contains("unsupported version 7")),
            "{err:?}"
        );
        Ok(())
    }
}
