//! The back-off of renewals that were rolled back. A service that does not come back on its
//! renewed certificate gets the old pair back; the certificate is then due again, and
//! without a back-off every retry would renew it, restart the service, and roll back again.
//!
//! After the Nth consecutive attempt of a certificate that was rolled back, the next one
//! waits `retry_interval × 2^(N-1)`, at most a day; and a certificate is never attempted
//! more than [`MAX_ATTEMPTS_PER_DAY`] times in 24 hours, so the services of its watch are
//! restarted at most twice that often (a restart, and a start after the roll-back). The
//! ledger is `state_dir/backoff.json`: a restart of the daemon does not reset it. A renewal
//! that stays installed, or a certificate no longer due, clears its entry; `renew --force`
//! attempts at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::fsutil::{self, StateFile};
use crate::timefmt::rfc3339;

/// At most this many attempts of one certificate in any 24 hours.
pub const MAX_ATTEMPTS_PER_DAY: usize = 4;
/// The longest wait between two attempts.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// One certificate's attempts that were rolled back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Consecutive attempts rolled back.
    pub attempts: u32,
    /// When the attempts of the last 24 hours were made.
    #[serde(with = "stamps")]
    pub recent: Vec<OffsetDateTime>,
    /// No attempt before this.
    #[serde(with = "time::serde::rfc3339")]
    pub next: OffsetDateTime,
}

/// `state_dir/backoff.json`: an entry per certificate path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// By the certificate's path (as the inventory lists it).
    pub certs: BTreeMap<PathBuf, Entry>,
}

mod stamps {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;

    pub fn serialize<S: Serializer>(v: &[OffsetDateTime], s: S) -> Result<S::Ok, S::Error> {
        let text: Result<Vec<String>, _> = v.iter().map(|t| t.format(&Rfc3339)).collect();
        text.map_err(serde::ser::Error::custom)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OffsetDateTime>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|t| OffsetDateTime::parse(t, &Rfc3339).map_err(serde::de::Error::custom))
            .collect()
    }
}

impl Entry {
    /// Why the certificate is not attempted now, for its report and alarms.
    pub fn held_reason(&self) -> String {
        format!(
            "renewal held back: {} attempt{} rolled back (a service did not come back on the \
             new certificate, or what checks it refused it); next attempt not before {} \
             (back-off, at most {} attempts a day; `certrenewd renew PATH` tries it now)",
            self.attempts,
            if self.attempts == 1 { " was" } else { "s were" },
            rfc3339(self.next),
            MAX_ATTEMPTS_PER_DAY
        )
    }
}

/// A certificate whose renewal a pass rolled back, as the ledger then recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// The certificate's path (as the inventory lists it).
    pub path: PathBuf,
    /// Its attempts rolled back in a row, this one with them.
    pub attempts: u32,
    /// No attempt before this.
    pub next: OffsetDateTime,
}

impl std::fmt::Display for RolledBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "attempt {} rolled back; next attempt not before {} (back-off, at most {} attempts \
             a day)",
            self.attempts,
            rfc3339(self.next),
            MAX_ATTEMPTS_PER_DAY
        )
    }
}

impl Ledger {
    /// The entry holding `cert` back at `now`, if any. An entry with an attempt later than
    /// `now` was recorded on a clock that ran ahead and has been set right since (the clock
    /// check stops passes until then): it would hold the certificate for as long as the
    /// clock was ahead, so it holds nothing.
    pub fn holds(&self, cert: &Path, now: OffsetDateTime) -> Option<&Entry> {
        (self.certs.get(cert)).filter(|e| now < e.next && !e.recent.iter().any(|t| *t > now))
    }

    /// Records an attempt of `cert` made at `now` (when its pass started) that was rolled
    /// back; returns its entry.
    pub fn rolled_back(&mut self, cert: &Path, now: OffsetDateTime, retry: Duration) -> &Entry {
        let e = self.certs.entry(cert.to_path_buf()).or_insert(Entry {
            attempts: 0,
            recent: Vec::new(),
            next: now,
        });
        let day = time::Duration::days(1);
        e.attempts = e.attempts.saturating_add(1);
        e.recent.retain(|t| *t <= now && now - *t < day);
        e.recent.push(now);
        let doubling = 2u32.saturating_pow(e.attempts.saturating_sub(1).min(31));
        let wait = retry.saturating_mul(doubling).min(MAX_WAIT);
        e.next = now + wait;
        if e.recent.len() >= MAX_ATTEMPTS_PER_DAY {
            // The oldest of the day's attempts must leave the window first.
            let oldest = e.recent[e.recent.len() - MAX_ATTEMPTS_PER_DAY];
            e.next = e.next.max(oldest + day);
        }
        // To the second: a pass scheduled at that time is not held back by the fraction of
        // a second the attempt took to start.
        e.next = e.next.replace_nanosecond(0).unwrap_or(e.next);
        e
    }

    /// Forgets `cert`: its renewal stayed installed, or it is no longer due.
    pub fn clear(&mut self, cert: &Path) {
        self.certs.remove(cert);
    }
}

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "backoff.json")
}

/// The ledger; none when there is no file. A corrupt file is logged and counts as empty
/// (renewals must not stop on it).
pub fn load(state_dir: &Path) -> anyhow::Result<Ledger> {
    let f = file(state_dir);
    match f.read("; the back-off starts over") {
        Ok(ledger) => Ok(ledger.unwrap_or_default()),
        Err(e) if fsutil::is_corrupt(&e) => {
            tracing::error!(path = %f.path().display(), "{e:#}");
            Ok(Ledger::default())
        }
        Err(e) => Err(e),
    }
}

/// Saves the ledger durably; an empty one removes the file.
pub fn save(state_dir: &Path, ledger: &Ledger) -> anyhow::Result<()> {
    file(state_dir).write_or_remove(ledger, ledger.certs.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn waits_double_and_a_day_holds_at_most_four_attempts() {
        let hour = Duration::from_secs(3600);
        let t0 = datetime!(2026-11-20 00:00 UTC);
        let cert = Path::new("/etc/etcd/server.crt");
        let mut ledger = Ledger::default();
        // A pass every 10 minutes for two days: attempt whenever not held.
        let mut attempts = Vec::new();
        for k in 0..(2 * 24 * 6) {
            let now = t0 + time::Duration::minutes(10 * k);
            if ledger.holds(cert, now).is_none() {
                attempts.push((now - t0).whole_hours());
                ledger.rolled_back(cert, now, hour);
            }
        }
        // 1 h, 2 h, 4 h apart; after the fourth of the day, the next waits for the first to
        // be a day old; then 16 h, and 32 h.
        assert_eq!(attempts, [0, 1, 3, 7, 24, 40]);
        for w in 0..attempts.len() {
            let day: Vec<_> = attempts
                .iter()
                .filter(|&&h| h >= attempts[w] && h < attempts[w] + 24)
                .collect();
            assert!(day.len() <= MAX_ATTEMPTS_PER_DAY, "{attempts:?}");
        }
        let e = ledger
            .holds(cert, t0 + time::Duration::hours(48))
            .expect("held");
        assert_eq!(e.attempts, 6);
        assert!(
            e.held_reason().contains("6 attempts were rolled back"),
            "{}",
            e.held_reason()
        );
        ledger.clear(cert);
        assert!(ledger.holds(cert, t0).is_none());
    }

    #[test]
    fn an_attempt_recorded_on_a_clock_ahead_holds_nothing_once_it_is_set_right() {
        let hour = Duration::from_secs(3600);
        let now = datetime!(2026-11-20 00:00 UTC);
        let cert = Path::new("/etc/etcd/server.crt");
        let mut ledger = Ledger::default();
        ledger.rolled_back(cert, now + time::Duration::days(2), hour);
        assert!(ledger.holds(cert, now).is_none());
        // Attempted again on the right clock: held as any first attempt, the stamp from
        // ahead forgotten.
        ledger.rolled_back(cert, now, hour);
        let e = ledger.holds(cert, now).expect("held");
        assert_eq!(e.recent, [now]);
        assert_eq!(e.next, now + time::Duration::hours(2));
        assert!(ledger.holds(cert, now + time::Duration::hours(2)).is_none());
    }

    #[test]
    fn the_ledger_survives_a_restart_and_an_empty_one_is_no_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let cert = Path::new("/etc/etcd/server.crt");
        let mut ledger = Ledger::default();
        let now = datetime!(2026-11-20 00:00:00 UTC);
        ledger.rolled_back(cert, now, Duration::from_secs(60));
        save(dir.path(), &ledger)?;
        assert_eq!(load(dir.path())?, ledger);
        save(dir.path(), &Ledger::default())?;
        assert!(!file(dir.path()).path().exists());
        std::fs::write(file(dir.path()).path(), "{")?;
        assert_eq!(load(dir.path())?, Ledger::default());
        Ok(())
    }
}
