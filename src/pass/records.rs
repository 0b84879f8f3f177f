//! The pass's own records in `state_dir`: those it reads once as it begins ([`State`]), and
//! those it sets aside when corrupt (`pending.json`, `restarts.json`,
//! `restarts-by-hand.json`, `static-pods.json`). One that cannot be parsed used to stop every pass before its alarms,
//! so that certificates coming due later raised nothing. It is set aside instead (renamed
//! `<name>.corrupt-<UTC time>`, kept for the operator, as a corrupt `alarms.json` is), the pass goes on without it, and
//! every pass reports each file set aside as an error (250.003, `check`'s errors) until the
//! operator has done what its reason says and removed it.

use std::path::Path;

use anyhow::Context;

use super::{Mode, clock};
use crate::alarms::old_cas::OldCas;
use crate::config::Settings;
use crate::fsutil;
use crate::inventory::Skipped;
use crate::plan::backoff::{self, Ledger};
use crate::renew::pending::{self, Pending};
use crate::restart::owed::{self, Owed};
use crate::restart::{by_hand, static_pods};

/// The records a pass reads once as it begins, under the state lock (a dry run, without
/// it), and updates in place, writing each update at once: nothing reads them back within
/// the pass, and the alarms and metrics are made from them.
pub(super) struct State {
    /// The re-issued CAs whose old certificates copies elsewhere may still hold
    /// (`old-cas.json`): recovery and the renewals record those they re-issue, the roll-back
    /// forgets those it undid; why, when it cannot be read.
    pub old_cas: anyhow::Result<OldCas>,
    /// The restarts owed by hand (`restarts-by-hand.json`), read by a pass that can add to
    /// them or settle them (one that writes and can ask systemd); why, when it cannot be read.
    pub by_hand: Option<anyhow::Result<by_hand::Record>>,
    /// The back-off (`backoff.json`): the planner puts off what it holds; the pass's end
    /// records in it what was rolled back.
    pub ledger: Ledger,
    /// The latest time a pass on this node saw (`clock.json`), for the clock check; the
    /// pass's end records its own time when later.
    pub clock: Option<clock::Seen>,
}

impl State {
    /// Read after recovery, which needs the record of re-issued CAs before it (`old_cas`).
    /// A back-off that cannot be read fails the pass.
    pub(super) fn read(
        settings: &Settings,
        mode: Mode,
        old_cas: anyhow::Result<OldCas>,
    ) -> anyhow::Result<State> {
        let state = &settings.state_dir;
        let by_hand = (mode.writes() && mode != Mode::Deferred)
            .then(|| or_set_aside(state, by_hand::RECORD, by_hand::load(state)));
        Ok(State {
            old_cas,
            by_hand,
            ledger: backoff::load(state)?,
            clock: clock::load(state),
        })
    }
}

/// What earlier passes left for this one to finish, read once as recovery begins, under the
/// state lock: recovery is made from it, and reads none of these records itself. A record
/// that cannot be parsed is set aside ([`or_set_aside`]); one that cannot be read fails
/// the pass.
pub(super) struct Left {
    /// The record of an install a crash (or a hand-over that could not be written) left
    /// unfinished (`pending.json`).
    pub pending: Option<Pending>,
    /// The static pod manifests a restart a crash interrupted held out of their directory
    /// (`static-pods.json`).
    pub held_pods: Vec<static_pods::Held>,
    /// The restarts earlier passes owe (`restarts.json`).
    pub owed: Owed,
}

impl Left {
    pub(super) fn read(state: &Path) -> anyhow::Result<Left> {
        let pending = pending::load(state).context(RECOVERING);
        let held = static_pods::load(state).context("putting static pod manifests back");
        Ok(Left {
            pending: or_set_aside(state, "pending.json", pending)?,
            held_pods: or_set_aside(state, "static-pods.json", held)?,
            owed: or_set_aside(state, "restarts.json", owed::load(state))?,
        })
    }
}

/// What an error finishing an interrupted install is about.
pub(super) const RECOVERING: &str = "finishing the install an earlier pass left unfinished (it crashed, or could not write its state)";

/// Each record, and what the operator does when it was corrupt.
const RECORDS: &[(&str, &str)] = &[
    (
        "pending.json",
        "the record of an install a crash interrupted could not be read and was set aside: compare the certificates and keys it was replacing with their backups in backup_dir (and remove any *.certrenewd-tmp file left beside them), then remove this file",
    ),
    (
        "restarts.json",
        "the record of the restarts earlier passes owe could not be read and was set aside: restart by hand the units and static pods that use certificates renewed since the last good pass, then remove this file",
    ),
    (
        "restarts-by-hand.json",
        "the record of the restarts `renew --no-restart` left to be made by hand could not be read and was set aside: restart by hand the units and static pods that use certificates renewed with --no-restart, then remove this file",
    ),
    (
        "static-pods.json",
        "the record of static pod manifests moved out for a restart could not be read and was set aside: put back into manifests_dir any manifest still held in state_dir/static-pods, then remove this file",
    ),
];

/// `loaded`, the outcome of reading the record `name` in `state_dir`. When it failed
/// because the record cannot be parsed, the record is set aside and `T::default()` is
/// returned (a warning says so); any other error (the file cannot be read) stays an error.
pub fn or_set_aside<T: Default>(
    state_dir: &Path,
    name: &str,
    loaded: anyhow::Result<T>,
) -> anyhow::Result<T> {
    let e = match loaded {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if !fsutil::is_corrupt(&e) {
        return Err(e);
    }
    let path = state_dir.join(name);
    let aside = fsutil::set_aside(&path, time::OffsetDateTime::now_utc())
        .with_context(|| format!("{e:#}; and keeping it aside failed"))?;
    tracing::error!(
        path = %aside.display(),
        "{e:#}; set aside as {} and the pass goes on without it",
        aside.display()
    );
    Ok(T::default())
}

/// The records set aside in `state_dir`, each with what to do: errors of every pass.
pub fn set_aside(state_dir: &Path) -> Vec<Skipped> {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut out: Vec<Skipped> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (record, _) = name.split_once(".corrupt-")?;
            let (_, why) = RECORDS.iter().find(|(r, _)| *r == record)?;
            Some(Skipped {
                path: e.path(),
                reason: why.to_string(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_record_is_set_aside_and_reported_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        std::fs::write(state.join("restarts.json"), b"{ not json").unwrap();
        let loaded: anyhow::Result<Vec<String>> =
            serde_json::from_slice(b"{ not json").context("restarts.json is corrupt");
        let v = or_set_aside(state, "restarts.json", loaded).unwrap();
        assert!(v.is_empty());
        assert!(!state.join("restarts.json").exists());
        let reported = set_aside(state);
        assert_eq!(reported.len(), 1);
        let name = reported[0].path.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with("restarts.json.corrupt-"), "{name}");
        assert!(reported[0].reason.contains("restart by hand"));
        std::fs::remove_file(&reported[0].path).unwrap();
        assert!(set_aside(state).is_empty());
        // An I/O error is not corruption: it stays an error, and nothing is moved.
        let io: anyhow::Result<Vec<String>> = Err(std::io::Error::other("EIO").into());
        assert!(or_set_aside(state, "pending.json", io).is_err());
    }
}
