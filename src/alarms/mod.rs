//! Alarms: the last stage of a pass. The pipeline derives the alarms that should be active
//! now ([`AlarmSpec`]); [`apply`] compares them with the persisted active set, raises and
//! clears each alarm exactly once in journald (and the optional hook), and saves the state.
//!
//! Everything here is synchronous: the daemon calls it through `spawn_blocking`.

pub mod derive;
mod hook;
mod journald;
mod kind;
pub mod old_cas;
pub mod on_behalf;
mod reconcile;
mod render;
mod store;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

pub use hook::{AlarmHook, DEFAULT_HOOK_TIMEOUT, HookError};
pub use journald::{DEFAULT_JOURNAL_SOCKET, JournalSink, encode_entry, entry_fields};
pub use kind::{AlarmKind, AlarmState, Severity, message_ids};
pub use reconcile::reconcile;
pub use render::{raised, render_json, sorted};
pub use store::{AlarmStore, Room, keep_room};

/// An alarm that should be active now, as derived by the pipeline in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmSpec {
    /// What is wrong.
    pub kind: AlarmKind,
    /// Where: `host=<hostname>` or `host=<hostname>.certificate=<path>`.
    pub entity: String,
    /// Why: one entry per certificate or unit involved, each naming it. The text shown
    /// ([`AlarmSpec::reason`]) is made from them last; merging compares entries, never text.
    pub reasons: Vec<String>,
    /// The certificate files it concerns, as paths (not read back out of `reason`): a
    /// partial pass (`renew PATH...`) owns the alarms whose subjects it examined.
    pub subjects: Vec<PathBuf>,
}

/// An alarm that is raised and not yet cleared; identified by (kind, entity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveAlarm {
    /// What is wrong.
    pub kind: AlarmKind,
    /// Where (see [`AlarmSpec::entity`]).
    pub entity: String,
    /// The latest reason, as shown (journald, the hook, `certrenewd alarms`).
    pub reason: String,
    /// The entries `reason` was made from; absent in alarms saved before they existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// See [`AlarmSpec::subjects`]; absent in alarms saved before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<PathBuf>,
    /// When it was raised (UTC, whole seconds), serialised as RFC 3339.
    #[serde(with = "time::serde::rfc3339")]
    pub raised_at: OffsetDateTime,
}

impl AlarmSpec {
    /// The reason as shown: its entries in order, joined by "; ".
    pub fn reason(&self) -> String {
        self.reasons.join("; ")
    }

    /// Adds entries and subjects of the same alarm found again, each once, in order.
    pub fn merge(&mut self, reasons: Vec<String>, subjects: Vec<PathBuf>) {
        add_once(&mut self.reasons, reasons);
        add_once(&mut self.subjects, subjects);
    }
}

/// Adds `more` to `list`, each once, in order.
fn add_once<T: PartialEq>(list: &mut Vec<T>, more: impl IntoIterator<Item = T>) {
    for item in more {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

impl From<ActiveAlarm> for AlarmSpec {
    fn from(a: ActiveAlarm) -> AlarmSpec {
        let reasons = match a.reasons.is_empty() {
            true => vec![a.reason],
            false => a.reasons,
        };
        AlarmSpec {
            kind: a.kind,
            entity: a.entity,
            reasons,
            subjects: a.subjects,
        }
    }
}

/// What happened to one alarm in one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Newly raised: one journald entry with ALARM_STATE=set.
    Set,
    /// Condition gone: one journald entry with ALARM_STATE=clear, carrying the last reason.
    Clear,
    /// Still active with a new reason: logged at info level, not a journald alarm entry.
    Update {
        /// The reason before this pass.
        previous_reason: String,
    },
}

/// One change of the active alarm set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmEvent {
    /// Raise, clear or reason update.
    pub transition: Transition,
    /// What the alarm reports.
    pub kind: AlarmKind,
    /// Where.
    pub entity: String,
    /// The current reason (for a clear: the last one).
    pub reason: String,
}

impl AlarmEvent {
    /// `Set` or `Clear` for a journald/hook entry; `None` for a reason update.
    pub fn state(&self) -> Option<AlarmState> {
        match self.transition {
            Transition::Set => Some(AlarmState::Set),
            Transition::Clear => Some(AlarmState::Clear),
            Transition::Update { .. } => None,
        }
    }
}

/// Where raises and clears go (journald, the hook, a test's recorder); never fails a pass.
pub trait AlarmSink: Send + Sync {
    /// Deliver one Set or Clear event; a sink handles (logs) its own failures.
    fn emit(&self, event: &AlarmEvent);

    /// Waits for what the sink does in the background (the hook) to be done.
    fn flush(&self) {}
}

/// The entity of a host-wide alarm: `host=<hostname>`.
pub fn host_entity(host: &str) -> String {
    format!("host={host}")
}

/// The entity of a per-certificate alarm: `host=<hostname>.certificate=<path>`.
pub fn cert_entity(host: &str, path: &Path) -> String {
    format!("host={host}.certificate={}", path.display())
}

/// This machine's hostname (`uname(2)`'s nodename, which the unit's `ProcSubset=pid` does not hide).
pub fn hostname() -> anyhow::Result<String> {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let name = name.trim();
    anyhow::ensure!(!name.is_empty(), "uname(2) gives an empty hostname");
    Ok(name.to_owned())
}

/// What one alarm pass did: every event emitted, and why the store could not be saved
/// after them, if it could not.
#[derive(Debug, Default)]
pub struct Applied {
    pub events: Vec<AlarmEvent>,
    /// The store's save failed (a full or failing disk): the events were emitted all the
    /// same, and the next pass, finding the old store, emits them again.
    pub unsaved: Option<String>,
    /// The alarms active as the store now keeps them: those reconciled, or those it had
    /// when saving them failed.
    pub active: Vec<ActiveAlarm>,
}

/// One alarm pass: load, reconcile with `desired`, emit raises and clears to every sink, save; returns all events.
//
// Events are emitted before the state is saved: a crash in between repeats a raise or clear
// on the next pass rather than losing it, and so does a save that fails, which is said in
// the journal and returned, never a reason to hide what was emitted. Reason updates are
// only logged (info).
pub fn apply(
    store: &AlarmStore,
    desired: &[AlarmSpec],
    sinks: &[&dyn AlarmSink],
    now: OffsetDateTime,
) -> anyhow::Result<Applied> {
    let active = store.load_or_set_aside(now)?;
    Ok(apply_to(store, active, desired, sinks, now))
}

/// [`apply`] to the alarms `active` that the caller read from `store` (with
/// [`AlarmStore::load_or_set_aside`]) and has not let go of since.
pub fn apply_to(
    store: &AlarmStore,
    active: Vec<ActiveAlarm>,
    desired: &[AlarmSpec],
    sinks: &[&dyn AlarmSink],
    now: OffsetDateTime,
) -> Applied {
    let (next, events) = reconcile(&active, desired, now);
    for event in &events {
        match &event.transition {
            Transition::Update { previous_reason } => tracing::info!(
                alarm_id = event.kind.id(),
                alarm_entity = %event.entity,
                previous_reason = %previous_reason,
                reason = %event.reason,
                "alarm {} {}: reason changed",
                event.kind.id(),
                event.kind.text(),
            ),
            Transition::Set | Transition::Clear => {
                tracing::debug!(
                    alarm_id = event.kind.id(),
                    alarm_entity = %event.entity,
                    state = ?event.state(),
                    "emitting alarm"
                );
                for sink in sinks {
                    sink.emit(event);
                }
            }
        }
    }
    let saved = match next != active {
        true => store.save(&next).err().map(|e| {
            let why = format!("{e:#}");
            tracing::error!(
                path = %store.path().display(),
                "the alarms raised and cleared above were emitted, but saving them failed: {why}; \
                 `certrenewd alarms` shows the alarms as they were before, and the next pass \
                 emits these again"
            );
            why
        }),
        false => None,
    };
    let active = match saved {
        None => next,
        Some(_) => active,
    };
    Applied {
        events,
        unsaved: saved,
        active,
    }
}

/// Two active alarms as the unit tests of the `alarms` table and JSON show them: a 250.003
/// of the host and a 500.210 of a CA.
#[cfg(test)]
pub(crate) fn test_alarms() -> Vec<ActiveAlarm> {
    use time::macros::datetime;
    vec![
        ActiveAlarm {
            kind: AlarmKind::RenewalFailed,
            entity: "host=controller-0".into(),
            reason: "/etc/etcd/etcd-server.crt: CA key not on this host".into(),
            reasons: Vec::new(),
            subjects: Vec::new(),
            raised_at: datetime!(2026-11-21 00:10:03 UTC),
        },
        ActiveAlarm {
            kind: AlarmKind::Expired,
            entity: "host=controller-0.certificate=/etc/kubernetes/pki/ca.crt".into(),
            reason: "expired 2026-11-20T00:00:00Z\nCAs are never reissued".into(),
            reasons: Vec::new(),
            subjects: Vec::new(),
            raised_at: datetime!(2026-11-21 00:10:03 UTC),
        },
    ]
}
