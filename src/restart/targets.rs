//! What to restart: the units and static pods of the watches whose certificates a pass
//! renewed (or a crashed pass installed), in configuration order, each once.
//!
//! A static pod is restarted for the files it reads: one that the node's reading
//! ([`NodeReading`]) knows whole, running a program certrenewd follows, is restarted only
//! when a renewed file is among them (renewing `front-proxy-client.crt` restarts
//! kube-apiserver, not etcd). A pod whose files are not all known is restarted for every
//! renewal in its watch, as the watch names it: a restart too many is safer than one missing.
//! A unit likewise, from what systemd says it runs.

use std::path::{Path, PathBuf};

use super::owed::{Owed, OwedCommand};
use super::static_pods;
use crate::components::NodeReading;
use crate::config::{Settings, Watch};
use crate::renew::pending::Change;
use crate::renew::{RenewOutcome, RenewResult};

/// The restarts the renewals of this pass call for, with their changes.
pub fn of_renewals(settings: &Settings, node: &NodeReading, renewals: &[RenewOutcome]) -> Owed {
    let renewed: Vec<(usize, PathBuf)> = renewals
        .iter()
        .filter(|r| r.renewed())
        .map(|r| (r.watch, r.path.clone()))
        .collect();
    let mut owed = of_certs(settings, node, &renewed);
    let changes = renewals.iter().filter_map(|r| match &r.result {
        RenewResult::Renewed { change, .. } => Some(change.clone()),
        RenewResult::Failed { .. } | RenewResult::HeldBack { .. } => None,
    });
    owed.merge(Owed {
        changes: changes.collect(),
        ..Owed::default()
    });
    owed
}

/// The restarts and `post_renew_command`s renewing these certificates (watch index, file)
/// calls for, in configuration order: the same for a pass that renewed them and a dry run
/// that would.
pub fn of_certs(settings: &Settings, node: &NodeReading, certs: &[(usize, PathBuf)]) -> Owed {
    let mut owed = Owed::default();
    for (i, w) in settings.watches.iter().enumerate() {
        let files: Vec<&Path> = (certs.iter())
            .filter(|(cw, _)| *cw == i)
            .map(|(_, f)| f.as_path())
            .collect();
        if !files.is_empty() {
            owed.merge(of_watch(settings, w, Some((node, &files)), Vec::new()));
        }
    }
    for (w, cert) in certs {
        owed.merge(command_of(&settings.watches[*w], cert.clone()));
    }
    owed
}

/// The watch's `post_renew_command`, owed for `cert`; nothing when it has none.
fn command_of(w: &Watch, cert: PathBuf) -> Owed {
    let commands = match w.post_renew_command {
        Some(_) => vec![OwedCommand {
            watch: w.path.clone(),
            certificates: vec![cert],
        }],
        None => Vec::new(),
    };
    Owed {
        commands,
        ..Owed::default()
    }
}

/// The restarts renewals under these watches (indices into `settings.watches`) call for,
/// in configuration order; what a dry run says it would restart.
pub fn of_watches(settings: &Settings, watches: &[usize]) -> Owed {
    let mut owed = Owed::default();
    for (i, w) in settings.watches.iter().enumerate() {
        if watches.contains(&i) {
            owed.merge(of_watch(settings, w, None, Vec::new()));
            if w.post_renew_command.is_some() {
                owed.commands.push(OwedCommand {
                    watch: w.path.clone(),
                    certificates: Vec::new(),
                });
            }
        }
    }
    owed
}

/// The restarts installed changes call for, found by the watch that owns each file now
/// (after a crash, the scan that renewed them is gone).
pub fn of_changes(settings: &Settings, node: &NodeReading, changes: &[Change]) -> Owed {
    let mut owed = Owed::default();
    for c in changes {
        match settings.watch_for(&c.cert) {
            Some(w) => owed.merge(of_file(settings, node, w, &c.cert, vec![c.clone()])),
            None => tracing::warn!(
                path = %c.cert.display(),
                "an interrupted renewal installed a file no watch owns any more: restart what uses it by hand"
            ),
        }
    }
    owed
}

/// The restarts a dry run says rewriting these files (copies of a CA) would call for, by
/// the watch that owns each.
pub fn of_files(
    settings: &Settings,
    node: &NodeReading,
    files: impl Iterator<Item = PathBuf>,
) -> Owed {
    let mut owed = Owed::default();
    for f in files {
        if let Some(w) = settings.watch_for(&f) {
            owed.merge(of_file(settings, node, w, &f, Vec::new()));
        }
    }
    owed
}

/// What rewriting `file` under `w` calls for: its watch's restarts and command.
fn of_file(
    settings: &Settings,
    node: &NodeReading,
    w: &Watch,
    file: &Path,
    changes: Vec<Change>,
) -> Owed {
    let mut owed = of_watch(settings, w, Some((node, &[file])), changes);
    owed.merge(command_of(w, file.to_path_buf()));
    owed
}

/// The units of `w`, and its static pods that renewing `files` restarts (all of them when no
/// files are given: a watch's renewals not known one by one).
fn of_watch(
    settings: &Settings,
    w: &Watch,
    files: Option<(&NodeReading, &[&Path])>,
    changes: Vec<Change>,
) -> Owed {
    let pods = static_pods::of_watch(&settings.manifests_dir, w)
        .into_iter()
        .filter(|(pod, _)| {
            files.is_none_or(|(node, files)| {
                restarted_for(node, &settings.manifests_dir, pod, files)
            })
        })
        .map(|(p, _)| p)
        .collect();
    let units = (w.units.iter())
        .filter(|unit| files.is_none_or(|(node, files)| unit_restarted_for(node, unit, files)))
        .cloned()
        .collect();
    Owed {
        units,
        pods,
        changes,
        ..Owed::default()
    }
}

/// The static pods and units found to read `file` that its renewal does not restart: its
/// watch (`None`: it is in none) names none of them. certrenewd never restarts them; they
/// are reported, so that the operator restarts them by hand.
pub fn unrestarted_readers(node: &NodeReading, watch: Option<&Watch>, file: &Path) -> Vec<String> {
    (node.readers_of(file).into_iter())
        .filter(|c| watch.is_none_or(|w| !w.static_pods.contains(c) && !w.units.contains(c)))
        .collect()
}

/// Whether renewing `files` restarts `unit`: when it reads one of them, or when the node's
/// reading does not know all it reads (systemd did not tell, or it runs what certrenewd
/// does not follow): a watch naming it restarts it then, as documented.
pub fn unit_restarted_for(node: &NodeReading, unit: &str, files: &[&Path]) -> bool {
    match node.unit(unit) {
        Some(read) if read.known() => files.iter().any(|f| read.reads(f)),
        _ => true,
    }
}

/// Whether renewing `files` restarts static pod `pod` (its manifest in `manifests_dir`): when
/// it reads one of them, or when the node's reading does not know all it reads.
pub fn restarted_for(node: &NodeReading, manifests_dir: &Path, pod: &str, files: &[&Path]) -> bool {
    match node.pod(&Watch::manifest_path(manifests_dir, pod)) {
        Some(read) if read.known() => files.iter().any(|f| read.reads(f)),
        _ => true,
    }
}

/// Each static pod with its manifest path.
pub fn manifests(settings: &Settings, pods: &[String]) -> Vec<(String, PathBuf)> {
    pods.iter()
        .map(|p| (p.clone(), Watch::manifest_path(&settings.manifests_dir, p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use time::OffsetDateTime;

    fn settings(dir: &std::path::Path) -> Settings {
        let toml = format!(
            r#"
manifests_dir = "{d}/manifests"
[[watch]]
path = "{d}/etcd"
units = ["etcd.service"]
static_pods = []
[[watch]]
path = "{d}/pki"
units = ["kubelet.service", "etcd.service"]
static_pods = ["kube-apiserver", "etcd"]
"#,
            d = dir.display()
        );
        let file = dir.join("c.toml");
        std::fs::write(&file, toml).unwrap();
        Settings::load(Some(&file)).unwrap()
    }

    fn change(path: PathBuf) -> Change {
        Change {
            cert_backup: path.with_extension("bak"),
            cert: path,
            key: None,
            key_backup: None,
            ..Change::default()
        }
    }

    fn renewed(watch: usize, path: PathBuf) -> RenewOutcome {
        RenewOutcome {
            cert: 0,
            watch,
            result: RenewResult::Renewed {
                serial: "01".into(),
                not_before: OffsetDateTime::UNIX_EPOCH,
                not_after: OffsetDateTime::UNIX_EPOCH,
                rotated: false,
                change: change(path.clone()),
            },
            path,
        }
    }

    #[test]
    fn units_and_pods_of_renewed_watches_in_config_order_each_once() {
        let dir = tempfile::tempdir().unwrap();
        let settings = settings(dir.path());
        let failed = RenewOutcome {
            cert: 1,
            watch: 0,
            path: dir.path().join("etcd/x.crt"),
            result: RenewResult::Failed {
                reason: "no".into(),
            },
        };
        let pki = dir.path().join("pki/a.crt");
        let node = NodeReading::default();
        let owed = of_renewals(&settings, &node, &[renewed(1, pki.clone()), failed]);
        assert_eq!(owed.units, ["kubelet.service", "etcd.service"]);
        assert_eq!(owed.pods, ["kube-apiserver", "etcd"]);
        assert_eq!(owed.changes, [change(pki)]);
        let both = of_renewals(
            &settings,
            &node,
            &[
                renewed(1, dir.path().join("pki/a.crt")),
                renewed(0, dir.path().join("etcd/b.crt")),
            ],
        );
        assert_eq!(both.units, ["etcd.service", "kubelet.service"]);
        assert!(of_renewals(&settings, &node, &[]).is_empty());
    }

    #[test]
    fn installed_changes_owe_the_restarts_of_the_watch_that_owns_them() {
        let dir = tempfile::tempdir().unwrap();
        let settings = settings(dir.path());
        let owed = of_changes(
            &settings,
            &NodeReading::default(),
            &[
                change(dir.path().join("etcd/peer.crt")),
                change("/elsewhere/x.crt".into()),
            ],
        );
        assert_eq!(owed.units, ["etcd.service"]);
        assert!(owed.pods.is_empty());
        assert_eq!(owed.changes.len(), 1);
        let m = manifests(&settings, &["etcd".into()]);
        assert_eq!(
            m,
            [("etcd".to_string(), dir.path().join("manifests/etcd.yaml"))]
        );
    }
}
