//! The wall clock, checked before a pass renews anything: every certificate is dated by it,
//! and a clock that jumped dates them wrongly for years (ahead: not valid until then, and
//! every client refuses them; behind: an expired certificate looks valid, and a renewal
//! ends early). It is compared with the latest time a pass on this node saw
//! (`state_dir/clock.json`), not with the certificates, which a bad clock may have dated.
//!
//! - Earlier than that by more than [`STEP_BACK`]: the pass is refused, with 250.003.
//! - Past the end of every root CA whose key is on the node (certrenewd re-issues those
//!   long before their end): the pass is refused unless `renew --force` confirms the clock. A
//!   controller back from a long outage still holds CAs that are valid, and renews at boot
//!   as always; a CA kept off the node may truly have ended, and is alarmed as such.
//!
//! A refused pass renews and restarts nothing, like a deferred one, and keeps the alarms it
//! found; the record moves only with a pass that was not refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::fsutil::StateFile;
use crate::inventory::Inventory;
use crate::timefmt::rfc3339;

/// How far behind the latest time seen the clock may read (time synchronisation stepping
/// it back, a retry within the hour) before a pass is refused.
pub const STEP_BACK: Duration = Duration::hours(1);

/// `state_dir/clock.json`: the latest wall-clock time a pass saw here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    #[serde(with = "time::serde::rfc3339")]
    pub latest: OffsetDateTime,
}

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "clock.json")
}

/// Where the record is.
pub fn path(state_dir: &Path) -> PathBuf {
    file(state_dir).path().to_path_buf()
}

/// The record; none before the first pass, or when it cannot be read (logged: the check
/// starts over rather than refusing every pass for good).
pub fn load(state_dir: &Path) -> Option<Seen> {
    match file(state_dir).read::<Seen>("; the clock check starts over") {
        Ok(seen) => seen,
        Err(e) => {
            tracing::error!("{e:#}");
            None
        }
    }
}

/// Records that a pass saw `now`, unless the record as the pass read it (`seen`) is later.
pub fn record(state_dir: &Path, seen: Option<Seen>, now: OffsetDateTime) -> anyhow::Result<()> {
    let latest = match seen {
        Some(s) if s.latest >= now => return Ok(()),
        _ => now.replace_nanosecond(0).unwrap_or(now),
    };
    file(state_dir).write(&Seen { latest })
}

/// Why the clock reading `now` is not trusted for a pass over `inv`, if it is not, given the
/// record in `state_dir` as the pass read it (`seen`); `confirmed`: the operator's
/// `renew --force` vouches for a clock ahead.
pub fn refused(
    state_dir: &Path,
    seen: Option<Seen>,
    inv: &Inventory,
    now: OffsetDateTime,
    confirmed: bool,
) -> Option<String> {
    let record = path(state_dir);
    if let Some(seen) = seen
        && now < seen.latest - STEP_BACK
    {
        return Some(format!(
            "the clock reads {}, earlier than {} when a pass last ran on this node: \
             certificates issued now would be dated wrongly and expired ones would look \
             valid, so nothing is renewed. Set the clock right (timedatectl); if it is right \
             and the earlier pass ran on a clock ahead, remove {}",
            rfc3339(now),
            rfc3339(seen.latest),
            record.display()
        ));
    }
    // A root with its key here: the one kind of CA a pass can always re-issue.
    let keyed = |c: &&crate::inventory::Cert| {
        use crate::inventory::{IssuerLink, KeyLink};
        matches!(c.key, KeyLink::Matched(_) | KeyLink::SameFile(_))
            && matches!(c.issuer, IssuerLink::SelfSigned)
    };
    let last_ca_end = (inv.certs.iter())
        .filter(|c| c.facts.is_ca)
        .filter(keyed)
        .map(|c| c.facts.not_after)
        .max()?;
    if now > last_ca_end && !confirmed {
        return Some(format!(
            "the clock reads {}, after the end of every root CA whose key is on this node (the last ends {}): \
             a clock that jumped ahead would re-issue every CA dated then, so nothing is \
             renewed. Set the clock right (timedatectl); if it is right, `certrenewd renew \
             --force --all` renews with it",
            rfc3339(now),
            rfc3339(last_ca_end)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_clock_earlier_than_the_last_pass_is_refused_and_a_step_back_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let inv = Inventory::default();
        let t = datetime!(2026-11-29 00:00 UTC);
        let seen = load(dir.path());
        assert_eq!(
            refused(dir.path(), seen, &inv, t, false),
            None,
            "no record yet"
        );
        record(dir.path(), seen, t).unwrap();
        // An earlier time never moves the record back.
        let seen = load(dir.path());
        record(dir.path(), seen, t - Duration::days(3)).unwrap();
        let seen = load(dir.path());
        assert_eq!(seen.unwrap().latest, t);
        let behind = refused(dir.path(), seen, &inv, t - Duration::minutes(59), false);
        assert_eq!(behind, None, "a step back within the hour");
        let why = refused(dir.path(), seen, &inv, t - Duration::days(2), false).unwrap();
        assert!(
            why.contains("earlier than 2026-11-29T00:00:00Z") && why.contains("clock.json"),
            "{why}"
        );
    }
}
