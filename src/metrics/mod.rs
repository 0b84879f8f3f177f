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
//!
//! In three jobs: the pass's series ([`pass_series`]), what the state directory keeps for
//! them from one pass to the next ([`kept`]), and the cluster's gauges the daemon's watch
//! of the other controllers writes between passes ([`cluster_gauges`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

pub mod cluster_gauges;
pub mod kept;
pub mod pass_series;

pub use cluster_gauges::{cluster_path, render_cluster, write_cluster};
pub use kept::{Kept, not_written, record_written};
pub use pass_series::{Snapshot, render, write};

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

#[cfg(test)]
mod tests {
    use super::*;

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
