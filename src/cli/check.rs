//! `certrenewd check`: every certificate under the watched paths, its expiry and status.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::Settings;
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};

/// One row of `check --output json`, exactly as INTERFACE.md promises.
#[derive(Debug, Serialize)]
pub struct CertReport {
    /// Certificate file.
    pub path: String,
    /// Paired key file, if any.
    pub key_path: Option<String>,
    /// Subject, readable.
    pub subject: String,
    /// Issuer, readable.
    pub issuer: String,
    /// Serial, lowercase hex.
    pub serial: String,
    /// RFC 3339 UTC.
    pub not_before: String,
    /// RFC 3339 UTC.
    pub not_after: String,
    /// Days until expiry, one decimal.
    pub days_left: f64,
    /// Whether it is a CA.
    pub is_ca: bool,
    /// The CA certificate that signed it.
    pub ca_path: Option<String>,
    /// ok, due, expired, unrenewable.
    pub status: Status,
    /// Why unrenewable.
    pub reason: Option<String>,
    /// Units restarted when it is renewed.
    pub units: Vec<String>,
    /// Static pods restarted when it is renewed (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub static_pods: Vec<String>,
    /// Other watched paths naming the same file (symlinks to it); left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Set when the certificate belongs to a kubeconfig file (`path`); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigReport>,
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

/// The whole `check --output json` document.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// Every certificate.
    pub certificates: Vec<CertReport>,
    /// Files passed over.
    pub skipped: Vec<SkippedReport>,
    /// What could not be read: watched paths, certificate and key files, kubeconfigs.
    pub errors: Vec<SkippedReport>,
}

/// Builds the report from a scan and its plan.
pub fn report(settings: &Settings, inv: &Inventory, plan: &Plan) -> CheckReport {
    let show = |p: &std::path::Path| p.display().to_string();
    let certificates = plan
        .items
        .iter()
        .map(|item| {
            let c = &inv.certs[item.cert];
            CertReport {
                path: show(&c.path),
                key_path: match c.key {
                    crate::inventory::KeyLink::Missing => None,
                    crate::inventory::KeyLink::Matched(k)
                    | crate::inventory::KeyLink::Mismatch(k)
                    | crate::inventory::KeyLink::Encrypted(k)
                    | crate::inventory::KeyLink::SameFile(k) => Some(show(&inv.keys[k].path)),
                },
                subject: c.facts.subject.clone(),
                issuer: c.facts.issuer.clone(),
                serial: c.facts.serial.clone(),
                not_before: crate::timefmt::rfc3339(c.facts.not_before),
                not_after: crate::timefmt::rfc3339(c.facts.not_after),
                days_left: (item.days_left * 10.0).round() / 10.0,
                is_ca: c.facts.is_ca,
                ca_path: inv.issuer_of(c).map(|ca| show(&ca.path)),
                status: item.status,
                reason: item.reason.clone(),
                units: settings
                    .watches
                    .get(c.watch)
                    .map(|w| w.units.clone())
                    .unwrap_or_default(),
                static_pods: settings
                    .watches
                    .get(c.watch)
                    .map(|w| w.static_pods.clone())
                    .unwrap_or_default(),
                aliases: c.aliases.iter().map(|a| show(a)).collect(),
                kubeconfig: c.kubeconfig.as_ref().map(|k| KubeconfigReport {
                    user: k.user.clone(),
                    embedded: k.external.is_none(),
                    client_certificate: k.external.as_deref().map(show),
                }),
            }
        })
        .collect();
    let skipped = |list: &[crate::inventory::Skipped]| {
        list.iter()
            .map(|s| SkippedReport {
                path: show(&s.path),
                reason: s.reason.clone(),
            })
            .collect()
    };
    CheckReport {
        certificates,
        skipped: skipped(&inv.skipped),
        errors: skipped(&inv.errors),
    }
}

fn residual(days: f64) -> String {
    if days < 0.0 {
        return "expired".into();
    }
    let d = days.floor() as i64;
    if d >= 365 {
        format!("{}y {}d", d / 365, d % 365)
    } else if d >= 1 {
        format!("{d}d")
    } else {
        format!("{}h", (days * 24.0).floor() as i64)
    }
}

/// The table, in the spirit of `kubeadm certs check-expiration`.
pub fn render_table(r: &CheckReport) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "CERTIFICATE".into(),
        "EXPIRES".into(),
        "RESIDUAL TIME".into(),
        "CA".into(),
        "STATUS".into(),
    ]];
    for c in &r.certificates {
        let expires = c.not_after.replacen('T', " ", 1).replace('Z', " UTC");
        let status = match &c.reason {
            Some(reason) => format!("{}: {reason}", c.status.as_str()),
            None => c.status.as_str().into(),
        };
        let ca = if c.is_ca {
            "(CA)".into()
        } else {
            c.ca_path.clone().unwrap_or_else(|| "-".into())
        };
        let name = match &c.kubeconfig {
            None if !c.aliases.is_empty() => format!("{} (also {})", c.path, c.aliases.join(", ")),
            None => c.path.clone(),
            Some(k) => match &k.client_certificate {
                None => format!("{} (user {})", c.path, k.user),
                Some(f) => format!("{} (user {} -> {f})", c.path, k.user),
            },
        };
        rows.push([name, expires, residual(c.days_left), ca, status]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (i, w) in widths.iter().enumerate() {
            let _ = write!(out, "{:<w$}  ", row[i]);
        }
        out.push_str(&row[4]);
        out.push('\n');
    }
    if r.certificates.is_empty() {
        out.push_str("(no certificates found under the watched paths)\n");
    }
    for s in &r.skipped {
        let _ = writeln!(out, "skipped {}: {}", s.path, s.reason);
    }
    for e in &r.errors {
        let _ = writeln!(out, "error {}: {}", e.path, e.reason);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_time_reads_like_kubeadm() {
        assert_eq!(residual(400.2), "1y 35d");
        assert_eq!(residual(9.9), "9d");
        assert_eq!(residual(0.5), "12h");
        assert_eq!(residual(-1.0), "expired");
    }
}
