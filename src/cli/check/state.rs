//! What `check` says of the daemon's state beside the certificates: when the next pass is,
//! an inhibit in force, an install a crash interrupted, restarts an earlier pass owes.

use chrono::{DateTime, Timelike};
use serde::Serialize;

use crate::config::Settings;

/// The maintenance inhibit in force.
#[derive(Debug, Serialize)]
pub struct InhibitReport {
    /// `certrenewd inhibit` or the flag file that exists.
    pub source: String,
    /// Why.
    pub reason: String,
    /// RFC 3339 UTC.
    pub since: String,
    /// RFC 3339 UTC, when it lifts by itself.
    pub until: Option<String>,
}

/// An install a crash interrupted: its record in `state_dir/pending.json`.
#[derive(Debug, Serialize)]
pub struct InterruptedReport {
    /// The record.
    pub record: String,
    /// The certificate files (kubeconfigs) being replaced.
    pub certificates: Vec<String>,
    /// Set when the record cannot be read; the next pass stops on it too.
    pub error: Option<String>,
}

/// Restarts an earlier pass owes (`state_dir/restarts.json`), done by the next pass.
#[derive(Debug, Serialize)]
pub struct OwedReport {
    /// The record.
    pub record: String,
    /// systemd units.
    pub units: Vec<String>,
    /// Static pods.
    pub static_pods: Vec<String>,
    /// The watches whose `post_renew_command` is owed a run (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Renewed client pairs owed a presentation to the server that checks them (left out
    /// when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_pairs: Vec<String>,
    /// Set when the record cannot be read.
    pub error: Option<String>,
}

/// Restarts owed by hand (`state_dir/restarts-by-hand.json`): `renew --no-restart` installed
/// certificates that these still run without, as seen now.
#[derive(Debug, Serialize)]
pub struct ByHandReport {
    /// The record.
    pub record: String,
    /// systemd units.
    pub units: Vec<ByHandEntry>,
    /// Static pods.
    pub static_pods: Vec<ByHandEntry>,
    /// Set when the record cannot be read.
    pub error: Option<String>,
}

/// One unit or static pod owed a restart by hand.
#[derive(Debug, Serialize)]
pub struct ByHandEntry {
    /// The unit, or the static pod's manifest name.
    pub name: String,
    /// When the certificates were installed (RFC 3339 UTC).
    pub installed: String,
    /// Why it is still owed (`running since …, before the install`).
    pub why: String,
}

/// What `renew --no-restart` left to restart by hand and is not restarted yet, looked at
/// now (units as systemd tells, static pods by their processes).
pub async fn by_hand(
    settings: &Settings,
    node: &crate::components::NodeReading,
) -> Option<ByHandReport> {
    use crate::restart::by_hand::{self, Seen};
    let record = by_hand::path(&settings.state_dir).display().to_string();
    let list = match by_hand::load(&settings.state_dir) {
        Ok(r) if r.is_empty() => return None,
        Ok(r) => r,
        Err(e) => {
            return Some(ByHandReport {
                record,
                units: Vec::new(),
                static_pods: Vec::new(),
                error: Some(format!("{e:#}")),
            });
        }
    };
    // The pair etcd is asked with, as the restart gate finds it.
    use crate::restart::Gate;
    let gate = crate::coordinate::EtcdGate::new(&settings.coordination).knowing(node);
    let client = gate.probe_client();
    let systemd = crate::restart::Systemd::connect(settings.bus).await;
    let (units, pods) = by_hand::look(&list, settings, node, client, &systemd).await;
    let owed = |looked: Vec<(by_hand::ByHand, Seen)>| -> Vec<ByHandEntry> {
        (looked.into_iter())
            .filter_map(|(b, seen)| match seen {
                Seen::Owed(why) => Some(ByHandEntry {
                    name: b.name,
                    installed: crate::timefmt::rfc3339(b.installed),
                    why,
                }),
                Seen::Done(_) => None,
            })
            .collect()
    };
    let (units, static_pods) = (owed(units), owed(pods));
    (!units.is_empty() || !static_pods.is_empty()).then_some(ByHandReport {
        record,
        units,
        static_pods,
        error: None,
    })
}

/// A scheduled time as people read it: `00:00` within a day, else with its date.
pub(super) fn local_time<Tz: chrono::TimeZone>(t: &DateTime<Tz>, now: &DateTime<Tz>) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let clock = match t.second() {
        0 => "%H:%M",
        _ => "%H:%M:%S",
    };
    match t.clone() - now.clone() < chrono::TimeDelta::days(1) {
        true => t.format(clock).to_string(),
        false => t.format(&format!("%a %Y-%m-%d {clock}")).to_string(),
    }
}

/// ` (+ up to N s splay)` when scheduled passes wait a random delay after their time.
pub(super) fn splay_note(settings: &Settings) -> String {
    match settings.randomized_delay.as_secs() {
        0 => String::new(),
        n => format!(" (+ up to {n} s splay)"),
    }
}

pub(super) fn inhibited(settings: &Settings) -> Option<InhibitReport> {
    let now = time::OffsetDateTime::now_utc();
    match crate::pass::inhibit::active(&settings.state_dir, &settings.inhibit_paths, now) {
        Ok(a) => a.map(|a| InhibitReport {
            source: a.source,
            reason: a.reason,
            since: crate::timefmt::rfc3339(a.since),
            until: a.until.map(crate::timefmt::rfc3339),
        }),
        Err(e) => Some(InhibitReport {
            source: settings
                .state_dir
                .join("inhibit.json")
                .display()
                .to_string(),
            reason: format!("cannot be read: {e:#}"),
            since: String::new(),
            until: None,
        }),
    }
}

/// The pending record of an install a crash interrupted, if there is one.
pub(super) fn interrupted(state_dir: &std::path::Path) -> Option<InterruptedReport> {
    let record = state_dir.join("pending.json").display().to_string();
    match crate::renew::pending::load(state_dir) {
        Ok(None) => None,
        Ok(Some(p)) => Some(InterruptedReport {
            record,
            certificates: p
                .changes
                .iter()
                .map(|c| c.cert.display().to_string())
                .collect(),
            error: None,
        }),
        Err(e) => Some(InterruptedReport {
            record,
            certificates: Vec::new(),
            error: Some(format!("{e:#}")),
        }),
    }
}

/// The restarts an earlier pass owes, if any.
pub(super) fn owed(state_dir: &std::path::Path) -> Option<OwedReport> {
    let record = state_dir.join("restarts.json").display().to_string();
    match crate::restart::owed::load(state_dir) {
        Ok(o) if o.is_empty() => None,
        Ok(o) => Some(OwedReport {
            record,
            units: o.units,
            static_pods: o.pods,
            commands: (o.commands.iter())
                .map(|c| c.watch.display().to_string())
                .collect(),
            client_pairs: (o.pairs.iter()).map(|p| p.display().to_string()).collect(),
            error: None,
        }),
        Err(e) => Some(OwedReport {
            record,
            units: Vec::new(),
            static_pods: Vec::new(),
            commands: Vec::new(),
            client_pairs: Vec::new(),
            error: Some(format!("{e:#}")),
        }),
    }
}

/// The daemon as its record (`state_dir/daemon.json`) and the process table tell.
#[derive(Debug, Serialize)]
pub struct DaemonReport {
    /// `running`, `not_running` (stopped or died), `never` (no record in this state
    /// directory) or `unreadable`.
    pub state: &'static str,
    /// Its PID, while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its last status line (the words of STATUS=): last pass, next pass, retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// When it last wrote it (RFC 3339 UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated: Option<String>,
    /// Why the record cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub(super) fn daemon(state_dir: &std::path::Path) -> DaemonReport {
    use crate::daemon::seen::Seen;
    let none = DaemonReport {
        state: "never",
        pid: None,
        status: None,
        updated: None,
        error: None,
    };
    match crate::daemon::seen::read(state_dir) {
        Seen::Running {
            pid,
            status,
            updated,
        } => DaemonReport {
            state: "running",
            pid: Some(pid),
            status: Some(status),
            updated: Some(updated),
            ..none
        },
        Seen::NotRunning { status, updated } => DaemonReport {
            state: "not_running",
            status: Some(status),
            updated: Some(updated),
            ..none
        },
        Seen::Never => none,
        Seen::Unreadable(e) => DaemonReport {
            state: "unreadable",
            error: Some(e),
            ..none
        },
    }
}
