//! The pass's closing stages: the alarms it calls for (all, or only those of what
//! `renew PATH...` examined), applied to the store and the sinks, and the metrics file.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use time::OffsetDateTime;

use super::{Local, PassOptions, report};
use crate::alarms::old_cas::OldCas;
use crate::alarms::{self, ActiveAlarm, AlarmSink, AlarmSpec};
use crate::config::Settings;
use crate::restart::RestartOutcomes;

/// The alarms the pass calls for, with those of the re-issued CAs as the pass left them (or
/// why that record cannot be read).
pub(super) fn desired_alarms(
    settings: &Settings,
    opts: &PassOptions,
    local: &Local,
    restarts: &RestartOutcomes,
    stored: &mut Stored,
) -> anyhow::Result<Vec<AlarmSpec>> {
    let host = alarms::hostname().unwrap_or_else(|_| "localhost".into());
    let (inv, plan) = (&local.inventory, &local.plan);
    Ok(match &local.inhibited {
        // Deferred: nothing new is raised or cleared, except that an expired certificate
        // is alarmed all the same.
        // Refused by the clock: the alarms found stay (a clock ahead would call every
        // certificate expired), and 250.003 says why nothing was renewed.
        Some(i) if i.clock => {
            let mut out = alarms::derive::kept(stored.get()?);
            let file = super::clock::path(&settings.state_dir);
            alarms::derive::add_failures(&host, &mut out, vec![(i.reason.clone(), file)]);
            out
        }
        Some(_) => alarms::derive::deferred(&host, inv, plan, stored.get()?),
        None => {
            let only = opts.only.as_deref();
            let mut out =
                alarms::derive::desired(&host, inv, plan, only, &local.renewals, restarts);
            let copies = local.copies.failed.iter().map(|(path, why)| {
                let what = format!("{}: a copy of a renewed CA: {why}", path.display());
                (what, path.clone())
            });
            let mut failures: Vec<(String, PathBuf)> = copies.collect();
            // The old certificates of re-issued CAs that copies elsewhere may still hold.
            match &local.records.old_cas {
                Ok(old) => {
                    let warning = time::Duration::days(settings.ca_warning_days.into());
                    for a in old.alarms(&host, plan.now, warning) {
                        alarms::derive::add_alarm(&mut out, a);
                    }
                    let window = time::Duration::days(settings.renew_before_days.into());
                    let held = |ca: &std::path::Path| held_readers(settings, local, restarts, ca);
                    for a in old.in_memory(&host, plan.now, window, held) {
                        alarms::derive::add_alarm(&mut out, a);
                    }
                }
                Err(e) => {
                    failures.push((format!("{e:#}"), settings.state_dir.join("old-cas.json")))
                }
            }
            alarms::derive::add_failures(&host, &mut out, failures);
            if !restarts.restored.is_empty() {
                // What the roll-back put back is read again: the alarms follow the files.
                // The back-off as the pass began (none): a renewal it holds is not due
                // for another alarm than the one it already has.
                let policy = super::scan::policy(settings, opts, Default::default());
                let (inv, plan) = super::scan::scan_and_plan(settings, &policy, &local.node);
                let restored = &restarts.restored;
                let refused: Vec<PathBuf> = (restarts.refused_certs.iter())
                    .chain(&restarts.pairs_refused)
                    .map(|(p, _)| p.clone())
                    .collect();
                for a in alarms::derive::rolled_back(&host, &inv, &plan, restored, &refused) {
                    alarms::derive::add_alarm(&mut out, a);
                }
            }
            out
        }
    })
}

/// The components that read the CA file `ca` (those a renewal of it restarts) whose
/// restarts this pass held, each with why: they still run on what they read before.
fn held_readers(
    settings: &Settings,
    local: &Local,
    restarts: &RestartOutcomes,
    ca: &std::path::Path,
) -> Vec<(String, String)> {
    let Some(c) = local.inventory.certs.iter().find(|c| c.path == ca) else {
        return Vec::new();
    };
    let owed =
        crate::restart::targets::of_certs(settings, &local.node, &[(c.watch, c.path.clone())]);
    let readers = crate::restart::owed::targets(&owed);
    (restarts.held.iter())
        .filter(|(t, _)| readers.contains(t))
        .map(|(t, why)| (t.to_string(), why.to_string()))
        .collect()
}

/// The alarms to apply: all of them after a full pass; after `renew PATH...`, only those
/// of what it examined change (the pass's own verdict stays its `desired`).
pub(super) fn scope(
    opts: &PassOptions,
    desired: &[AlarmSpec],
    stored: &mut Stored,
) -> anyhow::Result<Vec<AlarmSpec>> {
    let Some(only) = &opts.only else {
        return Ok(desired.to_vec());
    };
    let host = alarms::hostname().unwrap_or_else(|_| "localhost".into());
    let active = alarms::derive::kept(stored.get()?);
    Ok(alarms::derive::scoped(
        &host,
        only,
        &active,
        desired.to_vec(),
    ))
}

/// The active alarms (`alarms.json`), read at most once by a pass, when first needed: a
/// pass deferred keeps them, `renew PATH...` leaves those of what it did not examine, and
/// the alarms are reconciled with them. A corrupt file is set aside (and the pass goes on
/// from none), as the reconciliation always did.
pub(super) struct Stored {
    store: alarms::AlarmStore,
    read: Option<Vec<ActiveAlarm>>,
}

impl Stored {
    pub(super) fn new(settings: &Settings) -> Stored {
        Stored {
            store: alarms::AlarmStore::new(&settings.state_dir),
            read: None,
        }
    }

    /// The alarms active, read the first time.
    fn get(&mut self) -> anyhow::Result<&[ActiveAlarm]> {
        let read = match self.read.take() {
            Some(read) => read,
            None => self.store.load_or_set_aside(OffsetDateTime::now_utc())?,
        };
        Ok(self.read.insert(read))
    }

    /// The store and the alarms active in it, read now if they were not yet.
    fn into_read(self) -> anyhow::Result<(alarms::AlarmStore, Vec<ActiveAlarm>)> {
        let read = match self.read {
            Some(read) => read,
            None => self.store.load_or_set_aside(OffsetDateTime::now_utc())?,
        };
        Ok((self.store, read))
    }
}

/// Applies `desired` to the store and the sinks. Never an error: the pass's report is
/// printed whatever happens to its alarms, and what went wrong with them is returned in
/// [`alarms::Applied::unsaved`] for the pass to fail on.
pub(super) async fn apply_alarms(
    stored: Stored,
    desired: &[AlarmSpec],
    sinks: Arc<Vec<Box<dyn AlarmSink>>>,
) -> alarms::Applied {
    let desired = desired.to_vec();
    let applied = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        let sink_refs: Vec<&dyn AlarmSink> = sinks.iter().map(|s| s.as_ref()).collect();
        let now = OffsetDateTime::now_utc();
        let (store, active) = stored.into_read()?;
        anyhow::Ok(alarms::apply_to(&store, active, &desired, &sink_refs, now))
    })
    .await
    .context("the alarm worker thread failed");
    match applied.and_then(|a| a.context("updating alarms")) {
        Ok(applied) => applied,
        Err(e) => {
            tracing::error!("{e:#}: no alarm was raised or cleared by this pass");
            alarms::Applied {
                events: Vec::new(),
                unsaved: Some(format!("{e:#}")),
                active: Vec::new(),
            }
        }
    }
}

/// What a 250.003 of a pass that could not run begins with: the next such failure replaces
/// it rather than piling up beside it.
const COULD_NOT_RUN: &str = "the pass could not run: ";

/// A pass that ended before its scan (its lock, its records, a worker thread) raises its
/// 250.003 all the same, beside the alarms already active, which stay as they are: nothing
/// was scanned to settle them. The next pass that runs settles it with the rest. Taken
/// under the state lock, within a second: when another certrenewd holds it, that one's pass
/// is the one running, and this failure is left to the journal.
pub async fn raise_could_not_run(
    settings: &Settings,
    why: String,
    sinks: Arc<Vec<Box<dyn AlarmSink>>>,
) {
    let state_dir = settings.state_dir.clone();
    let raised = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        let _lock = super::StateLock::acquire(&state_dir, std::time::Duration::from_secs(1))?;
        let host = alarms::hostname().unwrap_or_else(|_| "localhost".into());
        let store = alarms::AlarmStore::new(&state_dir);
        let active = store.load_or_set_aside(OffsetDateTime::now_utc())?;
        let mut out = alarms::derive::kept(&active);
        // An earlier failure of the kind goes: this one says how things stand now.
        out.retain_mut(|a| {
            let had = a.reasons.len();
            a.reasons.retain(|r| !r.starts_with(COULD_NOT_RUN));
            had == 0 || !a.reasons.is_empty()
        });
        let failure = (format!("{COULD_NOT_RUN}{why}"), state_dir.clone());
        alarms::derive::add_failures(&host, &mut out, vec![failure]);
        let refs: Vec<&dyn AlarmSink> = sinks.iter().map(|s| s.as_ref()).collect();
        alarms::apply_to(&store, active, &out, &refs, OffsetDateTime::now_utc());
        anyhow::Ok(())
    })
    .await
    .context("the alarm worker thread failed");
    if let Err(e) = raised.and_then(|r| r) {
        tracing::error!("250.003 for the pass that could not run is not raised: {e:#}");
    }
}

/// A pass whose alarms could not be saved failed: its 250.003 names why (emitted by the
/// next pass that can save, shown in this pass's report now).
pub(super) fn unsaved_alarms(settings: &Settings, desired: &mut Vec<AlarmSpec>, why: String) {
    let host = alarms::hostname().unwrap_or_else(|_| "localhost".into());
    let store = alarms::AlarmStore::new(&settings.state_dir);
    let what = format!("the alarms could not be saved: {why}");
    alarms::derive::add_failures(&host, desired, vec![(what, store.path().to_owned())]);
}

/// What the pass holds at its end for the metrics: the alarms it called for, those active
/// as the store now keeps them, and the re-issued CAs as it left them.
pub(super) struct Held<'a> {
    pub desired: &'a [AlarmSpec],
    pub active: &'a [alarms::ActiveAlarm],
    pub old_cas: &'a OldCas,
}

/// Counts the renewals that stayed in service and records a success (kept in `state_dir`,
/// metrics file or not), and writes the metrics file when one is set, from what the pass
/// holds (`held`): no state file is read again.
pub(super) fn write_metrics(
    settings: &Settings,
    local: &Local,
    restarts: &RestartOutcomes,
    held: Held<'_>,
    lock_wait: Option<std::time::Duration>,
) {
    let desired = held.desired;
    let restored = &restarts.restored;
    let stayed = local.renewals.iter().filter(|r| r.stayed(restored)).count();
    let finished_at = OffsetDateTime::now_utc().unix_timestamp();
    let success = local.inhibited.is_some() || !report::failed(desired);
    let succeeded_at = success.then_some(finished_at);
    let kept = match crate::metrics::Kept::update(&settings.state_dir, stayed as u64, succeeded_at)
    {
        Ok(kept) => kept,
        Err(e) => {
            tracing::warn!("counting renewals: {e:#}");
            return;
        }
    };
    let Some(path) = &settings.metrics_file else {
        return;
    };
    let node = alarms::hostname().unwrap_or_else(|_| "localhost".into());
    let snapshot = crate::metrics::Snapshot {
        inventory: &local.inventory,
        plan: &local.plan,
        finished_at,
        success,
        renewals: &local.renewals,
        restored,
        alarms: held.active,
        lock_wait,
        reloads: [
            restarts.reloaded.len(),
            restarts.refused.len(),
            restarts.fell_back.len(),
        ],
        pairs: [
            count(&restarts.pairs_accepted),
            count(&restarts.pairs_refused),
            count(&restarts.pairs_unproven),
            count(&restarts.pairs_not_presented),
        ],
        old_cas: held.old_cas,
        node: &node,
        kept,
    };
    let written = crate::metrics::write(path, &snapshot);
    if let Err(e) = &written {
        tracing::error!(
            path = %path.display(),
            "{e:#}: Prometheus gets nothing from this node until it is written (`certrenewd check` says so meanwhile)"
        );
    }
    crate::metrics::record_written(&settings.state_dir, written.as_ref().map(|_| ()));
}

/// How many certificates `list` names (a pair accepted at two addresses counts once).
fn count(list: &[(PathBuf, String)]) -> usize {
    let mut certs: Vec<&PathBuf> = list.iter().map(|(p, _)| p).collect();
    certs.sort();
    certs.dedup();
    certs.len()
}
