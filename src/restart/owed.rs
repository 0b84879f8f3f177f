//! The restarts a pass owes: services whose new certificates are installed but which were
//! not yet confirmed running on them, with the changes a roll-back would restore. Written
//! (`<state_dir>/restarts.json`) before the first restart and cleared when every service
//! came back; the next pass does what is left, after a failure or a crash.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::step::Target;
use crate::fsutil::StateFile;
use crate::renew::pending::Change;

/// Units and static pods owed a restart, and the changes they are owed for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owed {
    /// systemd units, in restart order.
    pub units: Vec<String>,
    /// Static pods (manifest names), in restart order.
    pub pods: Vec<String>,
    /// The installed changes, with their backups (what a roll-back restores).
    pub changes: Vec<Change>,
    /// The watches' `post_renew_command`s owed a run, in configuration order (absent from a
    /// record written before they existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<OwedCommand>,
    /// Renewed client pairs not yet shown accepted by the server on this node that checks
    /// them (it did not answer, or refused a pair that could not be put back): presented
    /// again by the next pass. Absent from a record written before they were presented.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PathBuf>,
}

/// A watch's `post_renew_command` owed a run, and the certificates renewed under the watch
/// that it is owed for (what its environment names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedCommand {
    /// The watch's `path`: which watch's command (looked up in the configuration when it
    /// runs, so a command changed or removed since is run as it is now, or not at all).
    pub watch: PathBuf,
    /// The certificate files renewed under it, each once.
    pub certificates: Vec<PathBuf>,
}

impl Owed {
    /// No restart, no command and no client pair's proof owed.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
            && self.pods.is_empty()
            && self.commands.is_empty()
            && self.pairs.is_empty()
    }

    /// Adds what `other` owes after what this owes, each unit, pod and change once, and each
    /// watch's command once with the certificates of both.
    pub fn merge(&mut self, other: Owed) {
        push_new(&mut self.units, other.units);
        push_new(&mut self.pods, other.pods);
        push_new(&mut self.changes, other.changes);
        push_new(&mut self.pairs, other.pairs);
        for c in other.commands {
            match self.commands.iter_mut().find(|o| o.watch == c.watch) {
                Some(o) => push_new(&mut o.certificates, c.certificates),
                None => self.commands.push(c),
            }
        }
    }
}

/// The units, then the static pods, owed a restart.
pub fn targets(o: &Owed) -> Vec<Target> {
    let pods = o.pods.iter().cloned().map(Target::Pod);
    (o.units.iter().cloned().map(Target::Unit))
        .chain(pods)
        .collect()
}

fn push_new<T: PartialEq>(into: &mut Vec<T>, from: Vec<T>) {
    for x in from {
        if !into.contains(&x) {
            into.push(x);
        }
    }
}

fn record(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "restarts.json")
}

/// What an earlier pass left owed; nothing when there is no record.
pub fn load(state_dir: &Path) -> anyhow::Result<Owed> {
    let corrupt =
        "; restart the units and static pods that use renewed certificates by hand, then remove it";
    Ok(record(state_dir).read(corrupt)?.unwrap_or_default())
}

/// Records what is owed durably; an empty debt removes the record.
pub fn save(state_dir: &Path, owed: &Owed) -> anyhow::Result<()> {
    record(state_dir).write_or_remove(owed, owed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owed(units: &[&str], pods: &[&str]) -> Owed {
        Owed {
            units: units.iter().map(|s| s.to_string()).collect(),
            pods: pods.iter().map(|s| s.to_string()).collect(),
            changes: Vec::new(),
            commands: Vec::new(),
            pairs: Vec::new(),
        }
    }

    fn command(watch: &str, certs: &[&str]) -> OwedCommand {
        OwedCommand {
            watch: watch.into(),
            certificates: certs.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn a_watch_command_is_owed_once_for_the_certificates_of_both() {
        let mut a = Owed {
            commands: vec![command("/etc/haproxy", &["/etc/haproxy/a.pem"])],
            ..Owed::default()
        };
        assert!(!a.is_empty(), "a command alone is a debt");
        let pair = Owed {
            pairs: vec!["/etc/etcd/client.crt".into()],
            ..Owed::default()
        };
        assert!(!pair.is_empty(), "a client pair's proof alone is a debt");
        a.merge(Owed {
            commands: vec![
                command("/etc/x", &["/etc/x/c.crt"]),
                command(
                    "/etc/haproxy",
                    &["/etc/haproxy/b.pem", "/etc/haproxy/a.pem"],
                ),
            ],
            ..Owed::default()
        });
        assert_eq!(
            a.commands,
            [
                command(
                    "/etc/haproxy",
                    &["/etc/haproxy/a.pem", "/etc/haproxy/b.pem"]
                ),
                command("/etc/x", &["/etc/x/c.crt"]),
            ]
        );
    }

    #[test]
    fn a_record_from_before_commands_loads_with_none() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("restarts.json"),
            r#"{"units":["etcd.service"],"pods":[],"changes":[]}"#,
        )?;
        let owed = load(dir.path())?;
        assert_eq!(owed.units, ["etcd.service"]);
        assert!(owed.commands.is_empty() && owed.pairs.is_empty());
        Ok(())
    }

    #[test]
    fn merge_keeps_order_and_drops_repeats() {
        let mut a = owed(&["etcd.service", "kubelet.service"], &["etcd"]);
        a.merge(owed(
            &["kubelet.service", "x.service"],
            &["etcd", "kube-apiserver"],
        ));
        assert_eq!(
            a,
            owed(
                &["etcd.service", "kubelet.service", "x.service"],
                &["etcd", "kube-apiserver"]
            )
        );
    }

    #[test]
    fn saved_then_loaded_and_an_empty_debt_removes_the_record() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let state = dir.path().join("state");
        assert_eq!(load(&state)?, Owed::default());
        let debt = owed(&["etcd.service"], &["kube-apiserver"]);
        save(&state, &debt)?;
        assert_eq!(load(&state)?, debt);
        save(&state, &Owed::default())?;
        assert!(!record(&state).path().exists());
        save(&state, &Owed::default())?; // nothing there: still fine
        std::fs::write(record(&state).path(), "{")?;
        let err = format!("{:#}", load(&state).unwrap_err());
        assert!(err.contains("restarts.json is corrupt"), "{err}");
        Ok(())
    }
}
