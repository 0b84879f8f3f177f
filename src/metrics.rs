//! Prometheus textfile-collector output: written atomically after every pass so
//! node_exporter ships it, with no new port on the node.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

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
    /// This pass's renewals (renewed certificates are reported with their new notAfter).
    pub renewals: &'a [crate::renew::RenewOutcome],
    /// Alarms active after the pass.
    pub alarms: &'a [ActiveAlarm],
    /// How long the pass waited for the cluster-wide restart lock (`None`: not taken).
    pub lock_wait: Option<std::time::Duration>,
}

/// Escapes a label value per the exposition format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The HELP and TYPE lines that open a metric family.
fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The text in Prometheus exposition format. `renewals_total` is the running total.
pub fn render(snapshot: &Snapshot<'_>, renewals_total: u64) -> String {
    let mut out = certificates(snapshot);
    let pass = [
        (
            "certrenewd_last_pass_timestamp_seconds",
            "When the last renewal pass ended (Unix time).",
            "gauge",
            snapshot.finished_at,
        ),
        (
            "certrenewd_last_pass_success",
            "1 if the last pass renewed everything due and every unit came back.",
            "gauge",
            i64::from(snapshot.success),
        ),
        (
            "certrenewd_renewals_total",
            "Certificates renewed since the state directory was created.",
            "counter",
            i64::try_from(renewals_total).unwrap_or(i64::MAX),
        ),
    ];
    for (name, help, kind, value) in pass {
        family(&mut out, name, help, kind);
        let _ = writeln!(out, "{name} {value}");
    }
    family(
        &mut out,
        "certrenewd_alarm_active",
        "1 for each active alarm.",
        "gauge",
    );
    for a in snapshot.alarms {
        let _ = writeln!(
            out,
            "certrenewd_alarm_active{{id=\"{}\",entity=\"{}\"}} 1",
            a.kind.id(),
            label(&a.entity)
        );
    }
    family(
        &mut out,
        "certrenewd_restart_lock_wait_seconds",
        "How long the last pass waited for the cluster-wide restart lock (0: not taken).",
        "gauge",
    );
    let wait = snapshot.lock_wait.unwrap_or_default().as_secs_f64();
    let _ = writeln!(out, "certrenewd_restart_lock_wait_seconds {wait:.3}");
    out
}

/// The per-certificate families: expiry (after this pass's renewals) and renewability.
fn certificates(snapshot: &Snapshot<'_>) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "certrenewd_certificate_not_after_seconds",
        "When the certificate expires (Unix time).",
        "gauge",
    );
    for item in &snapshot.plan.items {
        let c = &snapshot.inventory.certs[item.cert];
        let renewed = snapshot.renewals.iter().find_map(|r| match &r.result {
            crate::renew::RenewResult::Renewed { not_after, .. } if r.cert == item.cert => {
                Some(*not_after)
            }
            _ => None,
        });
        let _ = writeln!(
            out,
            "certrenewd_certificate_not_after_seconds{{path=\"{}\",subject=\"{}\",ca=\"{}\"}} {}",
            label(&c.path.display().to_string()),
            label(&c.facts.subject),
            label(&snapshot.inventory.ca_path_of(c)),
            renewed.unwrap_or(c.facts.not_after).unix_timestamp()
        );
    }
    family(
        &mut out,
        "certrenewd_certificate_renewable",
        "1 if this host can renew the certificate when due, 0 if not.",
        "gauge",
    );
    for item in &snapshot.plan.items {
        let c = &snapshot.inventory.certs[item.cert];
        let renewable = !c.facts.is_ca && item.status != Status::Unrenewable;
        let _ = writeln!(
            out,
            "certrenewd_certificate_renewable{{path=\"{}\",subject=\"{}\"}} {}",
            label(&c.path.display().to_string()),
            label(&c.facts.subject),
            u8::from(renewable)
        );
    }
    out
}

/// Adds this pass's renewals to the total kept in `state_dir` and writes the metrics file.
pub fn write(path: &Path, state_dir: &Path, s: &Snapshot<'_>) -> anyhow::Result<()> {
    let counter = state_dir.join("renewals_total");
    let before: u64 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let renewed = s.renewals.iter().filter(|r| r.renewed()).count() as u64;
    let total = before + renewed;
    if renewed > 0 {
        fsutil::replace(
            &counter,
            format!("{total}\n").as_bytes(),
            &FileMeta::own(0o600),
        )?;
    }
    let meta = FileMeta::own(0o644);
    fsutil::replace(path, render(s, total).as_bytes(), &meta)
        .with_context(|| format!("writing metrics to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
