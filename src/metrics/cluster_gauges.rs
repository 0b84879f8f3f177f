//! The cluster's gauges: how many controllers report, are stale, missing or drifted, as the
//! daemon's watch of the other controllers last saw them, in a file of their own beside the
//! metrics file.

use std::path::Path;

use anyhow::Context;

use super::{Kind, Text};
use crate::coordinate::view::Counts;
use crate::fsutil::{self, FileMeta};

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
}
