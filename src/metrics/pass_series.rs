//! The pass's series: certrenewd's own and x509-certificate-exporter's, from what one pass
//! saw and did, and the file they are written to.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use time::OffsetDateTime;

use super::kept::Kept;
use super::{Kind, Labels, Text};
use crate::alarms::ActiveAlarm;
use crate::format::cert::{self as x509, CertFacts};
use crate::fsutil::{self, FileMeta};
use crate::inventory::{Cert, Inventory};
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
    /// The components whose renewed files the pass installed at their step (`on_renew =
    /// "reload"`): shown in use, refused, and restarted instead.
    pub reloads: [usize; 3],
    /// The renewed client pairs presented to the server on this node that checks them:
    /// accepted, refused, and not shown accepted (its proof owed).
    pub pairs: [usize; 4],
    /// CAs re-issued here whose old certificates copies elsewhere may still hold.
    pub old_cas: &'a crate::alarms::old_cas::OldCas,
    /// The host's name: the `node` label of every series.
    pub node: &'a str,
    /// What the state directory keeps across passes ([`Kept::update`]).
    pub kept: Kept,
}

/// The file's text.
pub fn render(snapshot: &Snapshot<'_>) -> String {
    let mut t = Text {
        out: String::new(),
        node: snapshot.node.to_owned(),
    };
    let certs = in_service(snapshot);
    certificates(&mut t, snapshot, &certs);
    t.single(
        "certrenewd_last_pass_timestamp_seconds",
        Kind::Gauge,
        "When the last renewal pass ended (Unix time).",
        snapshot.finished_at as f64,
    );
    t.single(
        "certrenewd_last_pass_success",
        Kind::Gauge,
        "1 if the last pass renewed everything due and every unit came back.",
        f64::from(u8::from(snapshot.success)),
    );
    t.single(
        "certrenewd_last_success_timestamp_seconds",
        Kind::Gauge,
        "When the last pass that succeeded ended (Unix time; 0: none has since the state directory was created).",
        snapshot.kept.last_success as f64,
    );
    t.single(
        "certrenewd_renewals_total",
        Kind::Counter,
        "Certificates renewed and kept in service since the state directory was created.",
        snapshot.kept.renewals as f64,
    );
    t.single(
        "certrenewd_read_errors",
        Kind::Gauge,
        "Watched files and directories the last pass could not read (each also in alarm 250.003).",
        snapshot.inventory.errors.len() as f64,
    );
    let alarms = (snapshot.alarms.iter()).map(|a| {
        let labels = vec![("id", a.kind.id().to_owned()), ("entity", a.entity.clone())];
        (labels, 1.0)
    });
    t.family(
        "certrenewd_alarm_active",
        Kind::Gauge,
        "1 for each active alarm.",
        alarms,
    );
    let mut old_cas: BTreeMap<Labels, i64> = BTreeMap::new();
    for o in snapshot.old_cas.cas.iter().filter(|o| !o.acknowledged) {
        let labels = vec![("path", o.ca.display().to_string())];
        let end = o.old_not_after.unix_timestamp();
        let soonest = old_cas.entry(labels).or_insert(end);
        *soonest = (*soonest).min(end);
    }
    t.family(
        "certrenewd_ca_old_certificate_not_after_seconds",
        Kind::Gauge,
        "A CA re-issued here whose old certificate copies outside this node may still hold, until `certrenewd alarms --acknowledge`: when that certificate expires (Unix time).",
        old_cas.into_iter().map(|(l, v)| (l, v as f64)),
    );
    t.family(
        "certrenewd_certificate_names_missing",
        Kind::Gauge,
        "Addresses a serving certificate is used on (its server's flags) that its names do not cover; each also in alarm 500.220.",
        names_missing(snapshot, &certs),
    );
    t.single(
        "certrenewd_restart_lock_wait_seconds",
        Kind::Gauge,
        "How long the last pass waited for the cluster-wide restart lock (0: not taken).",
        snapshot.lock_wait.unwrap_or_default().as_secs_f64(),
    );
    fn by_outcome<const N: usize>(
        outcomes: [&'static str; N],
        counts: [usize; N],
    ) -> impl Iterator<Item = (Vec<(&'static str, String)>, f64)> {
        (outcomes.into_iter().zip(counts))
            .map(|(o, n)| (vec![("outcome", o.to_string())], n as f64))
    }
    t.family(
        "certrenewd_last_pass_reloads",
        Kind::Gauge,
        "Components whose renewed files the last pass installed at their turn (on_renew = \"reload\"), by outcome: proven (served and verified, not restarted: a restart avoided), refused (put back) or restarted (not shown in use).",
        by_outcome(["proven", "refused", "restarted"], snapshot.reloads),
    );
    t.family(
        "certrenewd_last_pass_client_pairs",
        Kind::Gauge,
        "Renewed client pairs the last pass presented to the server on this node that checks them, by outcome: accepted, refused (put back), unproven (the server did not answer: owed to the next pass, in 250.003) or not_presented (its server not running here, or nothing here checking a pair an earlier pass left owed: not owed).",
        by_outcome(["accepted", "refused", "unproven", "not_presented"], snapshot.pairs),
    );
    x509_exporter(&mut t, snapshot, &certs);
    t.out
}

/// A certificate as it is in service at the end of the pass: the one scanned, or the one a
/// renewal that stayed put in its place (same subject and issuer; new serial and validity).
struct InService<'a> {
    cert: &'a Cert,
    item: &'a crate::plan::PlanItem,
    serial: &'a str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    /// Renewed by this pass, and in place at its end.
    stayed: bool,
    /// A renewed file's certificate as it is now, read back: its names may differ from the
    /// scanned one's (kubelet's self-signed `kubelet.crt` names a new throwaway issuer).
    renewed: Option<CertFacts>,
}

impl InService<'_> {
    /// The certificate's facts as in service.
    fn facts(&self) -> &CertFacts {
        self.renewed.as_ref().unwrap_or(&self.cert.facts)
    }
}

fn in_service<'a>(snapshot: &'a Snapshot<'_>) -> Vec<InService<'a>> {
    let items = snapshot.plan.items.iter();
    items
        .map(|item| {
            let cert = &snapshot.inventory.certs[item.cert];
            let renewed = snapshot.renewals.iter().find_map(|r| match &r.result {
                crate::renew::RenewResult::Renewed {
                    serial,
                    not_before,
                    not_after,
                    ..
                } if r.cert == item.cert && r.stayed(snapshot.restored) => {
                    Some((serial.as_str(), *not_before, *not_after))
                }
                _ => None,
            });
            let f: &CertFacts = &cert.facts;
            // A file's leaf read back (a kubeconfig's user is issued by the same CA, under
            // the same name, and its serial and dates come with the renewal).
            let read_back = (renewed.is_some() && cert.kubeconfig.is_none() && cert.index == 0)
                .then(|| fsutil::read(&cert.path).ok())
                .flatten()
                .and_then(|pem| CertFacts::first_in_pem(&pem).ok());
            let stayed = renewed.is_some();
            let (serial, not_before, not_after) =
                renewed.unwrap_or((f.serial.as_str(), f.not_before, f.not_after));
            InService {
                cert,
                item,
                serial,
                not_before,
                not_after,
                stayed,
                renewed: read_back,
            }
        })
        .collect()
}

/// certrenewd's per-certificate families: expiry (after this pass's renewals) and
/// renewability.
fn certificates(t: &mut Text, snapshot: &Snapshot<'_>, certs: &[InService<'_>]) {
    let cn = |raw| x509::common_name(raw).unwrap_or_default();
    let not_after = certs.iter().map(|s| {
        let (c, f) = (s.cert, s.facts());
        let labels = vec![
            ("path", c.path.display().to_string()),
            ("subject", f.subject.clone()),
            ("ca", snapshot.inventory.ca_path_of(c)),
            ("is_ca", f.is_ca.to_string()),
            ("subject_cn", cn(f.raw_subject())),
            ("issuer_cn", cn(f.raw_issuer())),
        ];
        (labels, s.not_after.unix_timestamp() as f64)
    });
    t.family(
        "certrenewd_certificate_not_after_seconds",
        Kind::Gauge,
        "When the certificate expires (Unix time).",
        not_after,
    );
    let renewable = certs.iter().map(|s| {
        let can = s.item.renewable && s.item.status != Status::Unrenewable;
        (path_labels(s.cert, s.facts()), f64::from(u8::from(can)))
    });
    t.family(
        "certrenewd_certificate_renewable",
        Kind::Gauge,
        "1 if this host can renew the certificate when due, 0 if not.",
        renewable,
    );
}

fn path_labels(c: &Cert, f: &CertFacts) -> Labels {
    vec![
        ("path", c.path.display().to_string()),
        ("subject", f.subject.clone()),
    ]
}

/// x509-certificate-exporter's families, as its file and kubeconfig sources give them: one
/// series per certificate with its labels (`filename`, `filepath`, `embedded_kind` and
/// `embedded_key` for a kubeconfig's user, `serial_number` in decimal, `issuer_*` and
/// `subject_*`), and the count of read errors of its v3.
fn x509_exporter(t: &mut Text, snapshot: &Snapshot<'_>, certs: &[InService<'_>]) {
    let labelled: Vec<(Labels, &InService<'_>)> =
        certs.iter().map(|s| (x509_labels(s), s)).collect();
    let series = |value: &dyn Fn(&InService<'_>) -> f64| {
        (labelled.iter())
            .map(|(l, s)| (l.clone(), value(s)))
            .collect::<Vec<_>>()
    };
    t.family(
        "x509_cert_not_after",
        Kind::Gauge,
        "Indicates the certificate's not after timestamp",
        series(&|s| s.not_after.unix_timestamp() as f64),
    );
    t.family(
        "x509_cert_not_before",
        Kind::Gauge,
        "Indicates the certificate's not before timestamp",
        series(&|s| s.not_before.unix_timestamp() as f64),
    );
    // Expired as of the end of the pass (the exporter says it as of the scrape).
    let now = snapshot.finished_at;
    t.family(
        "x509_cert_expired",
        Kind::Gauge,
        "Indicates if the certificate is expired",
        series(&|s| f64::from(u8::from(now > s.not_after.unix_timestamp()))),
    );
    t.single(
        "x509_read_errors",
        Kind::Gauge,
        "Indicates the number of read failure(s)",
        snapshot.inventory.errors.len() as f64,
    );
}

/// A certificate's labels in x509-certificate-exporter's family.
fn x509_labels(s: &InService<'_>) -> Labels {
    let c = s.cert;
    let file = c.path.file_name().map(|f| f.to_string_lossy().into_owned());
    let (kind, key) = match &c.kubeconfig {
        Some(k) => ("user".to_owned(), k.user.clone()),
        None => Default::default(),
    };
    let mut labels = vec![
        ("filename", file.unwrap_or_default()),
        ("filepath", c.path.display().to_string()),
        ("embedded_kind", kind),
        ("embedded_key", key),
        ("serial_number", x509::decimal_serial(s.serial)),
    ];
    for (names, raw) in [
        (ISSUER, s.facts().raw_issuer()),
        (SUBJECT, s.facts().raw_subject()),
    ] {
        let f = x509::name_fields(raw);
        let values = [
            f.country,
            f.province,
            f.locality,
            f.organization,
            f.unit,
            f.common_name,
        ];
        labels.extend(names.iter().copied().zip(values));
    }
    labels
}

/// The exporter's label names for a name's attributes, in its order (C, ST, L, O, OU, CN).
const ISSUER: [&str; 6] = [
    "issuer_C",
    "issuer_ST",
    "issuer_L",
    "issuer_O",
    "issuer_OU",
    "issuer_CN",
];
const SUBJECT: [&str; 6] = [
    "subject_C",
    "subject_ST",
    "subject_L",
    "subject_O",
    "subject_OU",
    "subject_CN",
];

/// The names each serving certificate misses after this pass (a renewal that stayed and
/// added them leaves none); only certificates served on an address are listed.
fn names_missing(snapshot: &Snapshot<'_>, certs: &[InService<'_>]) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for s in certs {
        let item = s.item;
        if !snapshot.plan.served.contains_key(&item.cert) {
            continue;
        }
        let added = !item.add_names.is_empty() && s.stayed;
        let missing = match added {
            true => 0,
            false => item.names_missing.len(),
        };
        out.push((path_labels(s.cert, s.facts()), missing as f64));
    }
    out
}

/// Writes the metrics file.
pub fn write(path: &Path, s: &Snapshot<'_>) -> anyhow::Result<()> {
    let meta = FileMeta::own(0o644);
    fsutil::replace(path, render(s).as_bytes(), &meta)
        .with_context(|| format!("writing metrics to {}", path.display()))
}
