//! The old certificates of re-issued CAs. A CA re-issued with the same
//! key replaces every copy on this node (`renew::copies`); the copies it cannot reach
//! (workers' kubeconfigs, clients' trust bundles, kubeadm's `cluster-info`) keep the old
//! certificate, which works until it ends and not after. Each re-issue is recorded in
//! `state_dir/old-cas.json` until the operator says those copies are done (`certrenewd
//! alarms --acknowledge CA-PATH`): `check` shows it, a metric carries its end, and from
//! `ca_warning_days` before that end it is alarmed (500.200, then 500.210 once it ended).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use super::{AlarmKind, AlarmSpec, cert_entity};
use crate::fsutil::StateFile;
use crate::timefmt::utc_minute;

/// An acknowledged record is kept this long after the old certificate ended, then dropped.
const KEEP_AFTER_END: Duration = Duration::days(30);

/// One re-issue of a CA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldCa {
    /// The CA file re-issued.
    pub ca: PathBuf,
    /// The old certificate's serial, hex.
    pub old_serial: String,
    /// When the old certificate ends: copies still holding it fail after that.
    #[serde(with = "time::serde::rfc3339")]
    pub old_not_after: OffsetDateTime,
    /// The new certificate's serial, hex.
    pub new_serial: String,
    /// When it was re-issued.
    #[serde(with = "time::serde::rfc3339")]
    pub renewed_at: OffsetDateTime,
    /// The operator said the copies outside this node hold the new certificate.
    #[serde(default)]
    pub acknowledged: bool,
}

impl OldCa {
    /// What the operator is told: until when the old certificate works, what to copy and
    /// how to say it is done.
    pub fn advice(&self) -> String {
        let ca = self.ca.display();
        format!(
            "re-issued on {} (serial {} -> {}): copies of the old certificate outside this node (workers' kubeconfigs, clients' trust bundles, kubeadm's cluster-info) are trusted until {}; copy {ca} there, then run `certrenewd alarms --acknowledge {ca}`",
            utc_minute(self.renewed_at),
            self.old_serial,
            self.new_serial,
            utc_minute(self.old_not_after)
        )
    }
}

/// The record in `state_dir/old-cas.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldCas {
    /// Every re-issue not yet acknowledged, or acknowledged and not long ended.
    pub cas: Vec<OldCa>,
}

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "old-cas.json").readable()
}

impl OldCas {
    /// The record; none is empty.
    pub fn load(state_dir: &Path) -> anyhow::Result<OldCas> {
        let hint = "; it lists the CAs re-issued whose old certificates may still be held elsewhere: fix or remove it";
        Ok(file(state_dir).read(hint)?.unwrap_or_default())
    }

    /// The re-issue of `ca` not yet acknowledged whose old certificate ends first.
    pub fn outstanding(&self, ca: &Path) -> Option<&OldCa> {
        self.cas
            .iter()
            .filter(|o| !o.acknowledged && o.ca == ca)
            .min_by_key(|o| o.old_not_after)
    }

    /// The 500.200 (500.210 once it ended) of each CA whose old certificate, not
    /// acknowledged, is within `warning` of its end.
    pub fn alarms(&self, host: &str, now: OffsetDateTime, warning: Duration) -> Vec<AlarmSpec> {
        let mut out: Vec<AlarmSpec> = Vec::new();
        for o in self.cas.iter().filter(|o| !o.acknowledged) {
            if o.old_not_after - now > warning {
                continue;
            }
            let (kind, when) = match now > o.old_not_after {
                true => (AlarmKind::Expired, "has ended"),
                false => (AlarmKind::ExpiringSoon, "ends soon"),
            };
            let reason = format!(
                "CA {}: its old certificate {when}: {}",
                o.ca.display(),
                o.advice()
            );
            out.push(AlarmSpec {
                kind,
                entity: cert_entity(host, &o.ca),
                subjects: vec![o.ca.clone()],
                reasons: vec![reason],
            });
        }
        out
    }
}

impl OldCas {
    /// The 500.260 of each re-issued CA whose old certificate ends within `within` (or has
    /// ended) while components that read the CA file still run on it: `held(ca)` names
    /// those whose restarts this pass held, each with why.
    pub fn in_memory(
        &self,
        host: &str,
        now: OffsetDateTime,
        within: Duration,
        held: impl Fn(&Path) -> Vec<(String, String)>,
    ) -> Vec<AlarmSpec> {
        let mut out: Vec<AlarmSpec> = Vec::new();
        for o in self.cas.iter().filter(|o| o.old_not_after - now <= within) {
            let readers = held(&o.ca);
            if readers.is_empty() || out.iter().any(|a| a.subjects.contains(&o.ca)) {
                continue;
            }
            let names: Vec<&str> = readers.iter().map(|(n, _)| n.as_str()).collect();
            let whys: Vec<String> = readers
                .iter()
                .map(|(n, why)| format!("{n}: {why}"))
                .collect();
            let reason = format!(
                "CA {} was re-issued on {} (serial {} -> {}); {} still {} the old certificate in memory, which ends at {}: {} held ({})",
                o.ca.display(),
                utc_minute(o.renewed_at),
                o.old_serial,
                o.new_serial,
                names.join(", "),
                if names.len() == 1 { "holds" } else { "hold" },
                utc_minute(o.old_not_after),
                if names.len() == 1 {
                    "its restart is"
                } else {
                    "their restarts are"
                },
                whys.join("; ")
            );
            out.push(AlarmSpec {
                kind: AlarmKind::OldCaInUse,
                entity: cert_entity(host, &o.ca),
                subjects: vec![o.ca.clone()],
                reasons: vec![reason],
            });
        }
        out
    }
}

impl OldCas {
    /// Adds the re-issues `renewed`, each once however often it is recorded (recovery after
    /// a crash records the pass's again), and drops those acknowledged a while after their
    /// old certificate ended.
    pub fn record(&mut self, renewed: Vec<OldCa>, now: OffsetDateTime) {
        for o in renewed {
            if !self
                .cas
                .iter()
                .any(|r| r.ca == o.ca && r.new_serial == o.new_serial)
            {
                self.cas.push(o);
            }
        }
        self.cas
            .retain(|o| !(o.acknowledged && now - o.old_not_after > KEEP_AFTER_END));
    }

    /// Drops the re-issues (CA file, new serial) that a roll-back undid: the old certificate
    /// is the CA's again, and no copy elsewhere is stale. Whether any was dropped.
    pub fn forget(&mut self, undone: &[(PathBuf, String)]) -> bool {
        let n = self.cas.len();
        self.cas.retain(|o| {
            !undone
                .iter()
                .any(|(ca, serial)| o.ca == *ca && o.new_serial == *serial)
        });
        self.cas.len() != n
    }

    /// Writes the record durably; an empty one removes the file.
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        file(state_dir).write_or_remove(self, self.cas.is_empty())
    }
}

/// Marks every re-issue of `ca` acknowledged; how many were outstanding.
pub fn acknowledge(state_dir: &Path, ca: &Path) -> anyhow::Result<usize> {
    let mut all = OldCas::load(state_dir)?;
    let mut n = 0;
    for o in all.cas.iter_mut().filter(|o| o.ca == ca && !o.acknowledged) {
        o.acknowledged = true;
        n += 1;
    }
    if n > 0 {
        file(state_dir).write(&all)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old(ca: &str, end_in_days: i64, now: OffsetDateTime) -> OldCa {
        OldCa {
            ca: ca.into(),
            old_serial: "01".into(),
            old_not_after: now + Duration::days(end_in_days),
            new_serial: "02".into(),
            renewed_at: now,
            acknowledged: false,
        }
    }

    #[test]
    fn recorded_once_and_forgotten_when_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let mut all = OldCas::default();
        // The pass records it, then recovery after a crash records it again.
        all.record(vec![old("/pki/ca.crt", 250, now)], now);
        all.record(vec![old("/pki/ca.crt", 250, now)], now);
        all.record(vec![old("/pki/other.crt", 250, now)], now);
        all.save(dir.path()).unwrap();
        assert_eq!(OldCas::load(dir.path()).unwrap().cas.len(), 2);
        // A roll-back put the old certificate back: no copy elsewhere is stale.
        assert!(all.forget(&[("/pki/ca.crt".into(), "02".into())]));
        assert_eq!(all.cas, vec![old("/pki/other.crt", 250, now)]);
        assert!(
            !all.forget(&[("/pki/other.crt".into(), "03".into())]),
            "another re-issue"
        );
        assert!(all.forget(&[("/pki/other.crt".into(), "02".into())]));
        all.save(dir.path()).unwrap();
        assert!(!dir.path().join("old-cas.json").exists());
    }

    #[test]
    fn alarmed_from_the_warning_period_until_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let warning = Duration::days(180);
        let mut recorded = OldCas::default();
        recorded.record(vec![old("/pki/ca.crt", 250, now)], now);
        recorded.save(dir.path()).unwrap();
        let all = OldCas::load(dir.path()).unwrap();
        assert!(all.outstanding(Path::new("/pki/ca.crt")).is_some());
        assert!(all.alarms("h", now, warning).is_empty(), "not yet");
        let later = now + Duration::days(100);
        let alarms = all.alarms("h", later, warning);
        assert_eq!(alarms.len(), 1);
        assert_eq!(alarms[0].kind, AlarmKind::ExpiringSoon);
        assert!(
            alarms[0].reasons[0].contains("certrenewd alarms --acknowledge /pki/ca.crt"),
            "{:?}",
            alarms[0].reasons
        );
        let ended = all.alarms("h", now + Duration::days(251), warning);
        assert_eq!(ended[0].kind, AlarmKind::Expired);
        assert_eq!(
            acknowledge(dir.path(), Path::new("/pki/ca.crt")).unwrap(),
            1
        );
        assert_eq!(
            acknowledge(dir.path(), Path::new("/pki/ca.crt")).unwrap(),
            0
        );
        let all = OldCas::load(dir.path()).unwrap();
        assert!(all.alarms("h", later, warning).is_empty());
        assert!(all.outstanding(Path::new("/pki/ca.crt")).is_none());
        // Dropped a while after its end, once acknowledged.
        let mut all = all;
        all.record(Vec::new(), now + Duration::days(300));
        assert!(all.cas.is_empty());
    }
}
