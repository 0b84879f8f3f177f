//! `certrenewd check`: every certificate under the watched paths, its expiry and status.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;
use time::OffsetDateTime;

pub mod cluster;
mod notes;
mod state;
mod table;

use super::names::{self, Place};

mod components;
pub use state::{
    ByHandEntry, ByHandReport, DaemonReport, InhibitReport, InterruptedReport, OwedReport, by_hand,
};
use state::{daemon, inhibited, interrupted, local_time, owed, splay_note};
pub use table::render_table;

use crate::components::NodeReading;
use crate::config::{Settings, Watch};
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};

/// One row of `check --output json`, exactly as docs/interface.md promises; its text borrowed
/// from the scan where it can be (10,000 rows are 4 MiB less).
#[derive(Debug, Serialize)]
pub struct CertReport<'a> {
    /// Certificate file.
    pub path: Cow<'a, str>,
    /// Paired key file, if any.
    pub key_path: Option<Cow<'a, str>>,
    /// Subject, readable.
    pub subject: &'a str,
    /// Issuer, readable.
    pub issuer: &'a str,
    /// Serial, lowercase hex.
    pub serial: &'a str,
    /// RFC 3339 UTC.
    #[serde(serialize_with = "rfc3339")]
    pub not_before: OffsetDateTime,
    /// RFC 3339 UTC.
    #[serde(serialize_with = "rfc3339")]
    pub not_after: OffsetDateTime,
    /// Days until expiry, one decimal.
    pub days_left: f64,
    /// Whether it is a CA.
    pub is_ca: bool,
    /// The CA certificate that signed it.
    pub ca_path: Option<Cow<'a, str>>,
    /// ok, due, expired, unrenewable.
    pub status: Status,
    /// Why unrenewable.
    pub reason: Option<&'a str>,
    /// Whether this node renews it when it falls due (a CA: re-issued with its own key).
    pub renewable: bool,
    /// A CA this node renews, not due yet: when it will be renewed (RFC 3339 UTC); left
    /// out otherwise.
    #[serde(
        serialize_with = "rfc3339_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub renews_on: Option<OffsetDateTime>,
    /// The lifetime its renewal gets, and which rule chose it (`validity_days`, kubeadm's
    /// year and what shows kubeadm signed it, or the old certificate's); left out when it
    /// cannot be renewed here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<String>,
    /// A copy of a CA (in a bundle, a chain file, or the same CA under another name): the
    /// CA file it is replaced with when that one is renewed; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_of: Option<Cow<'a, str>>,
    /// Units restarted when it is renewed: those of its watch that read it, or whose files
    /// are not all known (systemd did not say what they run, or they run what certrenewd
    /// does not follow).
    pub units: Vec<&'a str>,
    /// Static pods restarted when it is renewed: those of its watch that read it, or whose
    /// files are not all known (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub static_pods: Vec<&'a str>,
    /// Static pods of `manifests_dir` found to read it (their flags, kubeconfigs and file
    /// mounts say so) that its watch does not restart: certrenewd never restarts them, and
    /// says so (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_read_by: Vec<String>,
    /// Other watched paths naming the same file (symlinks to it; for kubelet's
    /// `<prefix>-current.pem`, listed by that symlink, the dated file it points at); left out
    /// when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<Cow<'a, str>>,
    /// Set when the certificate belongs to a kubeconfig file (`path`); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<Box<KubeconfigReport>>,
    /// Set while the back-off holds its renewal (attempts rolled back, next attempt); left
    /// out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// Names it is served on that it does not cover (`name`, `flag`, `file`: where the name
    /// was found); left out when none.
    #[serde(skip_serializing_if = "<[crate::served::Use]>::is_empty")]
    pub names_missing: &'a [crate::served::Use],
    /// Whether its renewal adds the names it misses (`add_missing_names`, its watch's or
    /// the global one); the table's note says what adds them.
    #[serde(skip)]
    pub adds_names: bool,
    /// A CA re-issued here whose old certificate copies outside this node may still hold,
    /// until `alarms --acknowledge` says they were replaced: when that certificate ends
    /// (RFC 3339 UTC); left out otherwise.
    #[serde(
        serialize_with = "rfc3339_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub old_trusted_until: Option<OffsetDateTime>,
    /// What to do about it, for the table.
    #[serde(skip)]
    pub old_ca_advice: Option<String>,
    /// Where the tables list it.
    #[serde(skip)]
    pub place: Place<'a>,
    /// A CA's short name (its CA column in the tables).
    #[serde(skip)]
    pub short_name: Option<Arc<str>>,
    /// The short name of the CA that signed it.
    #[serde(skip)]
    pub ca_name: Option<Arc<str>>,
    /// Whether its key is on this node: yes, no, encrypted, wrong key.
    #[serde(skip)]
    pub key_on_node: &'static str,
}

/// Where in a kubeconfig a certificate is.
#[derive(Debug, Serialize)]
pub struct KubeconfigReport {
    /// The user whose client certificate it is.
    pub user: String,
    /// Embedded as `client-certificate-data` (renewable in place).
    pub embedded: bool,
    /// The file named by `client-certificate` (reported, never rewritten).
    pub client_certificate: Option<String>,
}

/// A passed-over file.
#[derive(Debug, Serialize)]
pub struct SkippedReport {
    /// The file.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// The whole `check --output json` document, as docs/interface.md promises it (the first
/// draft's `certificates` and `skipped`, and the additions listed in CHANGELOG.md).
#[derive(Debug, Serialize)]
pub struct CheckReport<'a> {
    /// Every certificate.
    pub certificates: Vec<CertReport<'a>>,
    /// Files passed over.
    pub skipped: Vec<SkippedReport>,
    /// What could not be read: watched paths, certificate and key files, kubeconfigs.
    pub errors: Vec<SkippedReport>,
    /// How many certificates of each status, and what could not be read.
    pub summary: Summary,
    /// The daemon's next scheduled time (RFC 3339 UTC; the pass runs then, or up to
    /// `randomized_delay_secs` later); `null` when never.
    pub next_pass: Option<String>,
    /// How this node's passes restart, as far as its files tell (`[coordination]`).
    pub coordination: crate::coordinate::Outlook,
    /// Whether the daemon runs, and what it last said of its passes.
    pub daemon: DaemonReport,
    /// Set while passes are deferred by a maintenance inhibit; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inhibited: Option<InhibitReport>,
    /// Set when a crash interrupted an install; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_renewal: Option<InterruptedReport>,
    /// Private key files every user of the node may read (`path`, `mode` in octal); left
    /// out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys_readable_by_others: Vec<OpenKey>,
    /// The node's reading: each static pod of `manifests_dir` and each watched unit systemd
    /// told the settings of, what it runs and reads, and what a renewal calls for; left out
    /// when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<components::ComponentReport>,
    /// Set when an earlier pass owes restarts; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarts_owed: Option<OwedReport>,
    /// Set while restarts `renew --no-restart` left to be made by hand are not made yet;
    /// left out otherwise. Looked at by [`by_hand`], which asks systemd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarts_by_hand: Option<ByHandReport>,
    /// Set when this user may not read what the check needs (the state directory, key
    /// files): what they hold is not known, and `check` exits 1; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_denied: Option<PermissionDenied>,
    /// Set when `metrics_file` is not being written (its directory is missing, or the last
    /// pass could not write it); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_not_written: Option<MetricsNotWritten>,
    /// The next pass for people: local time (`00:00`, or a date when more than a day away).
    #[serde(skip)]
    pub next_pass_local: Option<String>,
    /// The time the plan was made for: the residual times count from it.
    #[serde(skip)]
    pub now: OffsetDateTime,
}

/// Counts of `check`'s statuses.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Certificates listed (leaves and CAs), but the copies of a CA.
    pub certificates: usize,
    /// Copies of a CA listed (in a bundle, a chain file, a kubeconfig), replaced when
    /// their CA is renewed; not counted in the statuses.
    pub copies: usize,
    /// Of them, `ok`.
    pub ok: usize,
    /// `due`.
    pub due: usize,
    /// `expired`.
    pub expired: usize,
    /// `unrenewable`.
    pub unrenewable: usize,
    /// Certificates served on a name they do not have (alarm 500.220), whatever their
    /// status: `check --fail-due` fails for them too.
    pub names_missing: usize,
    /// Entries of `errors`.
    pub errors: usize,
    /// Of those, watched directories themselves (missing or unreadable), said apart from
    /// files in the table.
    #[serde(skip)]
    pub watched_dirs: usize,
    /// Entries of `skipped`.
    pub skipped: usize,
}

/// Builds the report from a scan and its plan, with what the state directory and the
/// schedule say about the passes to come.
/// `node` is the node's reading, the units' settings as systemd told them with it;
/// `by_hand` what [`by_hand`] saw of the restarts owed by hand.
pub fn report<'a>(
    settings: &'a Settings,
    inv: &'a Inventory,
    plan: &'a Plan,
    node: &NodeReading,
    by_hand: Option<ByHandReport>,
) -> CheckReport<'a> {
    let certificates = certificates(settings, inv, plan, node);
    let components = components::report(settings, (inv, plan), node, &certificates);
    let skipped = |list: &[crate::inventory::Skipped]| {
        list.iter()
            .map(|s| SkippedReport {
                path: s.path.display().to_string(),
                reason: s.reason.clone(),
            })
            .collect::<Vec<_>>()
    };
    let (skipped, errors) = (skipped(&inv.skipped), skipped(&inv.errors));
    let mut summary = summarize(&certificates, errors.len(), skipped.len());
    summary.watched_dirs = watched_dir_errors(settings, inv);
    let now = chrono::Local::now();
    let next = crate::config::parse_cron(&settings.schedule)
        .ok()
        .and_then(|cron| crate::daemon::schedule::next_after(cron, &now));
    let state = &settings.state_dir;
    let denied = permission_denied(state, inv);
    // The state directory unreadable: nothing is known of what it holds, and nothing is
    // said of it but that (an inhibit, an interrupted renewal, restarts owed).
    let state_known = denied.as_ref().is_none_or(|d| d.state_dir.is_none());
    CheckReport {
        certificates,
        skipped,
        errors,
        summary,
        next_pass: next.map(|t| t.to_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        next_pass_local: next.map(|t| local_time(&t, &now) + &splay_note(settings)),
        coordination: crate::coordinate::outlook(
            &settings.coordination,
            Path::new("/"),
            state,
            node,
        ),
        daemon: daemon(state),
        inhibited: inhibited(settings).filter(|_| state_known),
        interrupted_renewal: interrupted(state).filter(|_| state_known),
        keys_readable_by_others: inv
            .keys_readable_by_others()
            .into_iter()
            .map(|(p, mode)| OpenKey {
                path: p.display().to_string(),
                mode: format!("{mode:04o}"),
            })
            .collect(),
        components,
        restarts_owed: owed(state).filter(|_| state_known),
        restarts_by_hand: by_hand.filter(|_| state_known),
        permission_denied: denied,
        metrics_not_written: (settings.metrics_file.as_deref()).and_then(|file| {
            Some(MetricsNotWritten {
                file: file.display().to_string(),
                why: crate::metrics::not_written(file, state)?,
            })
        }),
        now: plan.now,
    }
}

/// What this user may not read.
#[derive(Debug, Serialize)]
pub struct PermissionDenied {
    /// The state directory, when it cannot be read.
    pub state_dir: Option<String>,
    /// How many watched files and directories could not be read for want of permission.
    pub files: usize,
}

/// What the state directory `state` and the scan `inv` were refused for want of permission.
fn permission_denied(state: &Path, inv: &Inventory) -> Option<PermissionDenied> {
    let state_dir = match std::fs::read_dir(state) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Some(state.display().to_string())
        }
        _ => None,
    };
    let files = (inv.errors.iter())
        .filter(|e| e.reason.to_lowercase().contains("permission denied"))
        .count();
    (state_dir.is_some() || files > 0).then_some(PermissionDenied { state_dir, files })
}

/// The metrics file that is not being written, and why.
#[derive(Debug, Serialize)]
pub struct MetricsNotWritten {
    pub file: String,
    pub why: String,
}

/// A private key file every user of the node may read.
#[derive(Debug, Serialize)]
pub struct OpenKey {
    pub path: String,
    /// Its mode, octal (`0644`).
    pub mode: String,
}

/// One row per plan item, with where the tables list it.
fn certificates<'a>(
    settings: &'a Settings,
    inv: &'a Inventory,
    plan: &'a Plan,
    node: &NodeReading,
) -> Vec<CertReport<'a>> {
    let show = |p: &'a std::path::Path| p.to_string_lossy();
    let watch_of = |c: &crate::inventory::Cert| settings.watches.get(c.watch);
    let cas: Vec<usize> = (0..inv.certs.len())
        .filter(|&i| inv.certs[i].facts.is_ca)
        .collect();
    let ca_files: Vec<names::CaFile<'_>> = cas
        .iter()
        .map(|&i| {
            let c = &inv.certs[i];
            names::CaFile {
                path: &c.path,
                watch: watch_of(c).map(|w| w.path.as_path()),
                index: c.index,
                certs_in_file: c.certs_in_file,
            }
        })
        .collect();
    let ca_name: std::collections::HashMap<usize, Arc<str>> = cas
        .iter()
        .copied()
        .zip(names::ca_names(&ca_files).into_iter().map(Arc::from))
        .collect();
    // An unreadable ledger holds nothing here; the next pass reports it.
    let ledger = crate::plan::backoff::load(&settings.state_dir).unwrap_or_default();
    let old_cas = crate::alarms::old_cas::OldCas::load(&settings.state_dir).unwrap_or_default();
    let now = time::OffsetDateTime::now_utc();
    // The restarts a renewal calls for, by the rule the pass follows.
    let restarted_units = |w: &'a Watch, file: &Path| -> Vec<&'a str> {
        (w.units.iter())
            .filter(|u| crate::restart::targets::unit_restarted_for(node, u, &[file]))
            .map(String::as_str)
            .collect()
    };
    let restarted = |w: &'a Watch, file: &Path| -> Vec<&'a str> {
        (w.static_pods.iter())
            .filter(|p| {
                crate::restart::targets::restarted_for(node, &settings.manifests_dir, p, &[file])
            })
            .map(String::as_str)
            .collect()
    };
    plan.items
        .par_iter()
        .map(|item| {
            let c = &inv.certs[item.cert];
            let watch = watch_of(c);
            CertReport {
                path: show(&c.path),
                key_path: key_of(inv, c).map(|k| show(&k.path)),
                subject: &c.facts.subject,
                issuer: &c.facts.issuer,
                serial: &c.facts.serial,
                not_before: c.facts.not_before,
                not_after: c.facts.not_after,
                days_left: (item.days_left * 10.0).round() / 10.0,
                is_ca: c.facts.is_ca,
                ca_path: inv.issuer_of(c).map(|ca| show(&ca.path)),
                status: item.status,
                reason: item.reason.as_deref(),
                renewable: item.renewable && item.status != Status::Unrenewable,
                renews_on: item.renews_on,
                lifetime: item
                    .lifetime
                    .filter(|_| item.renewable)
                    .map(|l| l.to_string()),
                copy_of: item.copy_of.map(|p| show(&inv.certs[p].path)),
                units: watch.map_or(Vec::new(), |w| restarted_units(w, &c.path)),
                static_pods: watch.map_or(Vec::new(), |w| restarted(w, &c.path)),
                also_read_by: crate::restart::targets::unrestarted_readers(node, watch, &c.path),
                aliases: c.aliases.iter().map(|a| show(a)).collect(),
                kubeconfig: c.kubeconfig.as_ref().map(|k| {
                    Box::new(KubeconfigReport {
                        user: k.user.clone(),
                        embedded: k.external.is_none(),
                        client_certificate: k.external.as_deref().map(|p| p.display().to_string()),
                    })
                }),
                backoff: ledger.holds(&c.path, now).map(|e| e.held_reason()),
                names_missing: &item.names_missing,
                adds_names: (watch.and_then(|w| w.add_missing_names))
                    .unwrap_or(settings.add_missing_names),
                old_trusted_until: old_cas.outstanding(&c.path).map(|o| o.old_not_after),
                old_ca_advice: old_cas.outstanding(&c.path).map(|o| o.advice()),
                place: names::place(&c.path, watch.map(|w| w.path.as_path())),
                short_name: ca_name.get(&item.cert).cloned(),
                ca_name: match c.issuer {
                    crate::inventory::IssuerLink::Found(i) => ca_name.get(&i).cloned(),
                    _ => None,
                },
                key_on_node: match inv.unreadable_key(c) {
                    Some(_) if c.key == crate::inventory::KeyLink::Missing => "unreadable",
                    _ => key_on_node(&c.key),
                },
            }
        })
        .collect()
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        _ => format!("{n} {thing}s"),
    }
}

/// `text` wrapped to `page`, each line starting with `indent`, as one string.
fn lines(text: &str, indent: &str, page: usize) -> String {
    crate::cli::text_table::wrapped(text, indent, page)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
}

/// A time as RFC 3339 UTC (`2026-12-03T17:13:00Z`) in JSON.
fn rfc3339<S: serde::Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::timefmt::rfc3339(*t))
}

fn rfc3339_opt<S: serde::Serializer>(t: &Option<OffsetDateTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => rfc3339(t, s),
        None => s.serialize_none(),
    }
}

fn key_of<'a>(
    inv: &'a Inventory,
    c: &crate::inventory::Cert,
) -> Option<&'a crate::inventory::KeyFile> {
    use crate::inventory::KeyLink;
    match c.key {
        KeyLink::Missing => None,
        KeyLink::Matched(k)
        | KeyLink::Mismatch(k)
        | KeyLink::Encrypted(k)
        | KeyLink::SameFile(k) => inv.keys.get(k),
    }
}

/// The KEY ON NODE column: whether the certificate's key is here and usable.
fn key_on_node(link: &crate::inventory::KeyLink) -> &'static str {
    use crate::inventory::KeyLink;
    match link {
        KeyLink::Matched(_) | KeyLink::SameFile(_) => "yes",
        KeyLink::Missing => "no",
        KeyLink::Encrypted(_) => "encrypted",
        KeyLink::Mismatch(_) => "wrong key",
    }
}

fn summarize(certs: &[CertReport], errors: usize, skipped: usize) -> Summary {
    // A copy of a CA (in a bundle, a chain file, a kubeconfig) is replaced when its CA is
    // renewed: counted once, as the CA, not as a CA of its own nor due on its own.
    let own: Vec<&CertReport> = certs.iter().filter(|c| c.copy_of.is_none()).collect();
    let count = |s: Status| own.iter().filter(|c| c.status == s).count();
    Summary {
        certificates: own.len(),
        copies: certs.len() - own.len(),
        ok: count(Status::Ok),
        due: count(Status::Due),
        expired: count(Status::Expired),
        unrenewable: count(Status::Unrenewable),
        names_missing: own.iter().filter(|c| !c.names_missing.is_empty()).count(),
        errors,
        watched_dirs: 0,
        skipped,
    }
}

/// How many of the scan's errors are watched directories themselves (a missing or
/// unreadable `[[watch]] path`), not files in them.
pub fn watched_dir_errors(settings: &Settings, inv: &Inventory) -> usize {
    inv.errors
        .iter()
        .filter(|e| settings.watches.iter().any(|w| w.path == e.path))
        .count()
}

impl CertReport<'_> {
    /// A CA this node renews, not due yet: when; a copy of a CA: what it is replaced with.
    pub fn renewal_note(&self) -> Option<String> {
        let on = self.renews_on.map(crate::timefmt::utc_minute);
        match (&self.copy_of, on) {
            (Some(p), Some(on)) => Some(format!(
                "a copy of {p}: replaced with it when it is renewed on {on}"
            )),
            // (One that cannot be renewed here says so in its reason, or nothing while ok.)
            (Some(p), None) if self.reason.is_none() && self.renewable => Some(format!(
                "a copy of {p}: replaced with it when it is renewed"
            )),
            (None, Some(on)) => Some(format!(
                "will be renewed on {on}, with its own key: what it signed keeps verifying"
            )),
            _ => None,
        }
    }
}
