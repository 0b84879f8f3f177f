//! Prometheus textfile-collector output: written atomically after every pass so
//! node_exporter ships it, with no new port on the node.
//!
//! The file is in the classic Prometheus text format (0.0.4), the one node_exporter's
//! textfile collector and `promtool check metrics` parse: a counter is declared under its
//! sample's name (`certrenewd_renewals_total`), where OpenMetrics text declares
//! `certrenewd_renewals` and the classic parsers then read an empty counter and an untyped
//! sample. A label whose value would be empty is left out (Prometheus stores an empty label
//! as no label), and every series carries `node`, the host's name.
//!
//! Beside certrenewd's own series, the per-certificate series of x509-certificate-exporter
//! (`x509_cert_not_after`, `x509_cert_not_before`, `x509_cert_expired`, and its v3
//! `x509_read_errors`) with its names, labels and meanings, so that its dashboards and alert
//! rules work unchanged (`docs/operator.md` says which and where they differ).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use time::OffsetDateTime;

use crate::alarms::ActiveAlarm;
use crate::coordinate::view::Counts;
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

/// A series' labels, in order: name and value.
type Labels = Vec<(&'static str, String)>;

/// The text of the file, one family at a time.
struct Text {
    out: String,
    node: String,
}

/// A family's type line.
#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

impl Text {
    /// One family: its HELP and TYPE lines, then its series sorted by labels (one per label
    /// set, the last given), each with `node` added and empty labels left out. A family with
    /// no series is not written: the classic parsers keep it as an empty family.
    fn family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        series: impl IntoIterator<Item = (Labels, f64)>,
    ) {
        let series: BTreeMap<Labels, f64> = series.into_iter().collect();
        if series.is_empty() {
            return;
        }
        let kind = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, value) in series {
            self.out.push_str(name);
            let node = ("node", self.node.clone());
            let labels: Vec<&(&str, String)> = (labels.iter().chain([&node]))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            for (n, (k, v)) in labels.iter().enumerate() {
                let v = (v.replace('\\', "\\\\"))
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let sep = if n == 0 { '{' } else { ',' };
                let _ = write!(self.out, "{sep}{k}=\"{v}\"");
            }
            if !labels.is_empty() {
                self.out.push('}');
            }
            let _ = writeln!(self.out, " {value}");
        }
    }

    /// A family of one series without labels of its own.
    fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help, [(Labels::new(), value)]);
    }
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

/// What the state directory keeps for the metrics from one pass to the next, whether or
/// not a metrics file is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// Renewals that stayed in service, in `state_dir/renewals_total`.
    pub renewals: u64,
    /// When the last pass that succeeded ended (Unix seconds; 0: none has), in
    /// `state_dir/last_success`.
    pub last_success: i64,
}

impl Kept {
    /// Adds `renewed` (this pass's renewals that stayed in service) to the total, records
    /// `succeeded_at` (the end of this pass, when it succeeded) as the last success, and
    /// returns both.
    pub fn update(
        state_dir: &Path,
        renewed: u64,
        succeeded_at: Option<i64>,
    ) -> anyhow::Result<Kept> {
        let counter = state_dir.join("renewals_total");
        let renewals = read_number(&counter).unwrap_or(0) + renewed;
        if renewed > 0 {
            write_number(&counter, renewals)?;
        }
        let success = state_dir.join("last_success");
        let last_success = match succeeded_at {
            Some(t) => {
                write_number(&success, t)?;
                t
            }
            None => read_number(&success).unwrap_or(0),
        };
        Ok(Kept {
            renewals,
            last_success,
        })
    }
}

/// The number in a state file (`None`: missing or not a number).
fn read_number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    crate::fsutil::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn write_number(path: &Path, n: impl std::fmt::Display) -> anyhow::Result<()> {
    fsutil::replace(path, format!("{n}\n").as_bytes(), &FileMeta::own(0o600))
}

/// Writes the metrics file.
pub fn write(path: &Path, s: &Snapshot<'_>) -> anyhow::Result<()> {
    let meta = FileMeta::own(0o644);
    fsutil::replace(path, render(s).as_bytes(), &meta)
        .with_context(|| format!("writing metrics to {}", path.display()))
}

/// Where a pass that could not write the metrics file records why, for `check`; removed
/// by the next pass that writes it.
const NOT_WRITTEN: &str = "metrics-not-written";

/// Records whether the pass wrote the metrics file: why not, or nothing once it did. The
/// record is `check`'s only way to know: a failure here is said in the journal.
pub fn record_written(state_dir: &Path, written: Result<(), &anyhow::Error>) {
    let file = state_dir.join(NOT_WRITTEN);
    let done = match written {
        Ok(()) => match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(anyhow::Error::from(e)),
            _ => Ok(()),
        },
        Err(e) => {
            let at = crate::timefmt::rfc3339(OffsetDateTime::now_utc());
            let text = format!("{at}\n{}\n", crate::causes::Causes(e));
            fsutil::replace(&file, text.as_bytes(), &FileMeta::own(0o644))
        }
    };
    if let Err(e) = done {
        tracing::warn!(
            "recording whether the metrics file was written, in {}: {e:#}",
            file.display()
        );
    }
}

/// Why the metrics file `metrics_file` is not being written, as `check` says it: its
/// directory is missing, or the last pass could not write it (when, and why, as it
/// recorded in `state_dir`); `None` when nothing says so.
pub fn not_written(metrics_file: &Path, state_dir: &Path) -> Option<String> {
    let dir = metrics_file.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir
        && std::fs::metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Some(format!("its directory {} does not exist", dir.display()));
    }
    let text = std::fs::read_to_string(state_dir.join(NOT_WRITTEN)).ok()?;
    let (at, why) = text
        .trim_end()
        .split_once('\n')
        .unwrap_or(("", text.trim_end()));
    Some(format!("the pass at {at} could not write it: {why}"))
}

/// The file of the cluster's gauges beside the metrics file `metrics_file`:
/// `<stem>-cluster.<extension>` (`certrenewd.prom` → `certrenewd-cluster.prom`), which the
/// textfile collector reads as it reads every `*.prom` there. A file of its own because
/// the task that watches the cluster writes it between passes, never racing a pass.
pub fn cluster_path(metrics_file: &Path) -> std::path::PathBuf {
    let stem = metrics_file
        .file_stem()
        .map_or_else(|| "certrenewd".into(), |s| s.to_string_lossy().into_owned());
    let name = match metrics_file.extension() {
        Some(ext) => format!("{stem}-cluster.{}", ext.to_string_lossy()),
        None => format!("{stem}-cluster"),
    };
    metrics_file.with_file_name(name)
}

/// The cluster's gauges as this node last saw them: how many controllers are in each state
/// (`counts`, the last the cluster could be read; none yet: no series), whether the last
/// look at `at` (Unix seconds) could read it.
pub fn render_cluster(node: &str, counts: Option<&Counts>, read: bool, at: i64) -> String {
    let mut t = Text {
        out: String::new(),
        node: node.to_owned(),
    };
    if let Some(c) = counts {
        let states = [
            ("reporting", c.reporting),
            ("stale", c.stale),
            ("missing", c.missing),
            ("drifted", c.drifted),
        ];
        t.family(
            "certrenewd_cluster_controllers",
            Kind::Gauge,
            "Controllers (etcd members) by what their certrenewd records in etcd say, as this \
             node sees them: reporting, stale (no pass for two scheduled intervals), missing \
             (no record: certrenewd stopped or cannot publish); drifted counts those of them \
             holding a CA, CA key or sa.pub the others hold otherwise.",
            states.map(|(s, n)| (vec![("state", s.to_owned())], n as f64)),
        );
    }
    t.single(
        "certrenewd_cluster_read_success",
        Kind::Gauge,
        "Whether this node's last look at the other controllers' records in etcd could read them (1) or not (0).",
        f64::from(u8::from(read)),
    );
    t.single(
        "certrenewd_cluster_read_timestamp_seconds",
        Kind::Gauge,
        "When this node last looked at the other controllers' records (Unix time).",
        at as f64,
    );
    t.out
}

/// Writes the cluster's gauges to `path`.
pub fn write_cluster(path: &Path, text: &str) -> anyhow::Result<()> {
    fsutil::replace(path, text.as_bytes(), &FileMeta::own(0o644))
        .with_context(|| format!("writing the cluster's metrics to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_file_sits_beside_the_metrics_file_with_a_gauge_per_state() {
        assert_eq!(
            cluster_path(Path::new(
                "/var/lib/prometheus/node-exporter/certrenewd.prom"
            )),
            Path::new("/var/lib/prometheus/node-exporter/certrenewd-cluster.prom")
        );
        assert_eq!(
            cluster_path(Path::new("/m/certs")),
            Path::new("/m/certs-cluster")
        );
        let counts = Counts {
            controllers: 3,
            reporting: 2,
            stale: 0,
            missing: 1,
            drifted: 1,
        };
        let text = render_cluster("cp1", Some(&counts), false, 1_795_817_468);
        for line in [
            "certrenewd_cluster_controllers{state=\"missing\",node=\"cp1\"} 1",
            "certrenewd_cluster_controllers{state=\"reporting\",node=\"cp1\"} 2",
            "certrenewd_cluster_controllers{state=\"stale\",node=\"cp1\"} 0",
            "certrenewd_cluster_controllers{state=\"drifted\",node=\"cp1\"} 1",
            "certrenewd_cluster_read_success{node=\"cp1\"} 0",
            "certrenewd_cluster_read_timestamp_seconds{node=\"cp1\"} 1795817468",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        // Before the cluster was ever read: no gauge of controllers, only the failed look.
        let text = render_cluster("cp1", None, false, 1);
        assert!(!text.contains("certrenewd_cluster_controllers"), "{text}");
    }

    #[test]
    fn labels_are_escaped_empty_ones_left_out_and_the_node_added() {
        let mut t = Text {
            out: String::new(),
            node: "cp-0".into(),
        };
        let labels = vec![("path", "/a \"b\"\\c\nd".to_owned()), ("ca", String::new())];
        t.family("m", Kind::Gauge, "A \\ help\nline.", [(labels, 1.5)]);
        t.family("none", Kind::Gauge, "Nothing.", []);
        t.single("c_total", Kind::Counter, "Count.", 3.0);
        assert_eq!(
            t.out,
            "# HELP m A \\\\ help\\nline.\n# TYPE m gauge\n\
             m{path=\"/a \\\"b\\\"\\\\c\\nd\",node=\"cp-0\"} 1.5\n\
             # HELP c_total Count.\n# TYPE c_total counter\nc_total{node=\"cp-0\"} 3\n"
        );
    }
}
