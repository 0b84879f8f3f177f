//! Prometheus textfile-collector output: written atomically after every pass so
//! node_exporter ships it, with no new port on the node.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use anyhow::Context;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::alarms::ActiveAlarm;
use crate::fsutil::{self, FileMeta};
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};

/// What one pass contributes to the metrics file.
pub struct Snapshot<'a> {
    /// The scan.
    pub inventory: &'a Inventory,
    /// The plan.
    pub plan: &'a Plan,
    /// When the pass ended (Unix seconds).
    pub finished_at: i64,
    /// Whether the pass succeeded.
    pub success: bool,
    /// This pass's renewals (those that stayed are reported with their new notAfter).
    pub renewals: &'a [crate::renew::RenewOutcome],
    /// The real paths a roll-back put back: their certificates are the old ones again.
    pub restored: &'a [std::path::PathBuf],
    /// Alarms active after the pass.
    pub alarms: &'a [ActiveAlarm],
    /// How long the pass waited for the cluster-wide restart lock (`None`: not taken).
    pub lock_wait: Option<std::time::Duration>,
    /// CAs re-issued here whose old certificates copies elsewhere may still hold.
    pub old_cas: &'a crate::alarms::old_cas::OldCas,
}

/// A certificate's labels on the expiry family: where it is and what it is, with the common
/// names as x509-certificate-exporter gives them (`subject_CN`, `issuer_CN`), in the label
/// case of Prometheus' naming guide.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertLabels {
    path: String,
    subject: String,
    ca: String,
    /// `true` for a CA certificate, `false` for a leaf.
    is_ca: String,
    subject_cn: String,
    issuer_cn: String,
}

/// A certificate's labels on the renewability family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
    subject: String,
}

/// An active alarm's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlarmLabels {
    id: String,
    entity: String,
}

/// The text in the exposition format of `prometheus-client` (OpenMetrics text, which
/// node_exporter's textfile collector reads). `renewals_total` is the running total.
pub fn render(snapshot: &Snapshot<'_>, renewals_total: u64) -> String {
    let mut registry = Registry::with_prefix("certrenewd");
    let (not_after, renewable) = certificates(snapshot);
    registry.register(
        "certificate_not_after_seconds",
        "When the certificate expires (Unix time)",
        not_after,
    );
    registry.register(
        "certificate_renewable",
        "1 if this host can renew the certificate when due, 0 if not",
        renewable,
    );
    let finished = Gauge::<i64>::default();
    finished.set(snapshot.finished_at);
    registry.register(
        "last_pass_timestamp_seconds",
        "When the last renewal pass ended (Unix time)",
        finished,
    );
    let success = Gauge::<i64>::default();
    success.set(i64::from(snapshot.success));
    registry.register(
        "last_pass_success",
        "1 if the last pass renewed everything due and every unit came back",
        success,
    );
    let renewals = Counter::<u64>::default();
    renewals.inc_by(renewals_total);
    registry.register(
        "renewals",
        "Certificates renewed and kept in service since the state directory was created",
        renewals,
    );
    let unreadable = Gauge::<i64>::default();
    unreadable.set(snapshot.inventory.errors.len() as i64);
    registry.register(
        "read_errors",
        "Watched files and directories the last pass could not read (each also in alarm 250.003)",
        unreadable,
    );
    let alarms = Family::<AlarmLabels, Gauge>::default();
    for a in snapshot.alarms {
        let labels = AlarmLabels {
            id: a.kind.id().to_owned(),
            entity: a.entity.clone(),
        };
        alarms.get_or_create(&labels).set(1);
    }
    registry.register("alarm_active", "1 for each active alarm", alarms);
    let old_cas = Family::<PathLabels, Gauge>::default();
    for o in snapshot.old_cas.cas.iter().filter(|o| !o.acknowledged) {
        let labels = PathLabels {
            path: o.ca.display().to_string(),
            subject: String::new(),
        };
        let end = o.old_not_after.unix_timestamp();
        let g = old_cas.get_or_create(&labels);
        if g.get() == 0 || end < g.get() {
            g.set(end);
        }
    }
    registry.register(
        "ca_old_certificate_not_after_seconds",
        "A CA re-issued here whose old certificate copies outside this node may still hold, until `certrenewd alarms --acknowledge`: when that certificate expires (Unix time)",
        old_cas,
    );
    registry.register(
        "certificate_names_missing",
        "Addresses a serving certificate is used on (its server's flags) that its names do not cover; each also in alarm 500.220",
        names_missing(snapshot),
    );
    let wait = Gauge::<f64, AtomicU64>::default();
    wait.set(snapshot.lock_wait.unwrap_or_default().as_secs_f64());
    registry.register(
        "restart_lock_wait_seconds",
        "How long the last pass waited for the cluster-wide restart lock (0: not taken)",
        wait,
    );
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// The per-certificate families: expiry (after this pass's renewals) and renewability.
fn certificates(snapshot: &Snapshot<'_>) -> (Family<CertLabels, Gauge>, Family<PathLabels, Gauge>) {
    let not_after = Family::<CertLabels, Gauge>::default();
    let renewable = Family::<PathLabels, Gauge>::default();
    for item in &snapshot.plan.items {
        let c = &snapshot.inventory.certs[item.cert];
        let renewed = snapshot.renewals.iter().find_map(|r| match &r.result {
            crate::renew::RenewResult::Renewed { not_after, .. }
                if r.cert == item.cert && r.stayed(snapshot.restored) =>
            {
                Some(*not_after)
            }
            _ => None,
        });
        let path = c.path.display().to_string();
        let cn = |raw| crate::format::cert::common_name(raw).unwrap_or_default();
        let labels = CertLabels {
            path: path.clone(),
            subject: c.facts.subject.clone(),
            ca: snapshot.inventory.ca_path_of(c),
            is_ca: c.facts.is_ca.to_string(),
            subject_cn: cn(c.facts.raw_subject()),
            issuer_cn: cn(c.facts.raw_issuer()),
        };
        let when = renewed.unwrap_or(c.facts.not_after).unix_timestamp();
        not_after.get_or_create(&labels).set(when);
        let can = item.renewable && item.status != Status::Unrenewable;
        let labels = PathLabels {
            path,
            subject: c.facts.subject.clone(),
        };
        renewable.get_or_create(&labels).set(i64::from(can));
    }
    (not_after, renewable)
}

/// The names each serving certificate misses after this pass (a renewal that stayed and
/// added them leaves none); only certificates served on an address are listed.
fn names_missing(snapshot: &Snapshot<'_>) -> Family<PathLabels, Gauge> {
    let family = Family::<PathLabels, Gauge>::default();
    for item in &snapshot.plan.items {
        let c = &snapshot.inventory.certs[item.cert];
        if !snapshot.plan.served.contains_key(&item.cert) {
            continue;
        }
        let added = !item.add_names.is_empty()
            && (snapshot.renewals.iter())
                .any(|r| r.cert == item.cert && r.stayed(snapshot.restored));
        let missing = match added {
            true => 0,
            false => item.names_missing.len() as i64,
        };
        let labels = PathLabels {
            path: c.path.display().to_string(),
            subject: c.facts.subject.clone(),
        };
        family.get_or_create(&labels).set(missing);
    }
    family
}

/// Adds `renewed` (this pass's renewals that stayed in service) to the total kept in
/// `state_dir/renewals_total`, whether or not a metrics file is written, and returns it.
pub fn count_renewals(state_dir: &Path, renewed: u64) -> anyhow::Result<u64> {
    let counter = state_dir.join("renewals_total");
    let before: u64 = crate::fsutil::read_to_string(&counter)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let total = before + renewed;
    if renewed > 0 {
        fsutil::replace(
            &counter,
            format!("{total}\n").as_bytes(),
            &FileMeta::own(0o600),
        )?;
    }
    Ok(total)
}

/// Writes the metrics file, with `total` renewals so far ([`count_renewals`]).
pub fn write(path: &Path, s: &Snapshot<'_>, total: u64) -> anyhow::Result<()> {
    let meta = FileMeta::own(0o644);
    fsutil::replace(path, render(s, total).as_bytes(), &meta)
        .with_context(|| format!("writing metrics to {}", path.display()))
}
