//! The restarts a pass owes: services whose new certificates are installed but which were
//! not yet confirmed running on them, with the changes a roll-back would restore. Written
//! (`<state_dir>/restarts.json`) before the first restart and cleared when every service
//! came back; the next pass does what is left, after a failure or a crash.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::StateFile;
use crate::renew::txn::Change;

/// Units and static pods owed a restart, and the changes they are owed for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owed {
    /// systemd units, in restart order.
    pub units: Vec<String>,
    /// Static pods (manifest names), in restart order.
    pub pods: Vec<String>,
    /// The installed changes, with their backups (what a roll-back restores).
    pub changes: Vec<Change>,
}

impl Owed {
    /// No restart owed.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty() && self.pods.is_empty()
    }

    /// Adds what `other` owes after what this owes, each unit, pod and change once.
    pub fn merge(&mut self, other: Owed) {
        push_new(&mut self.units, other.units);
        push_new(&mut self.pods, other.pods);
        push_new(&mut self.changes, other.changes);
    }
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
        }
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
