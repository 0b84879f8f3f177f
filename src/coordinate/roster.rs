//! The cluster's members as etcd last listed them, kept in `state_dir/etcd-members.json`.
//! The member list is the only word on which nodes form the cluster: a node's own etcd
//! settings say whom it knew at bootstrap (kubeadm's first controller names itself alone,
//! and every node does after `kubeadm upgrade`). Kept, the list lets a node whose own member
//! is down still reach the others, and tells a cluster of one from a cluster this node
//! cannot ask right now.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::members::Member;
use crate::fsutil::StateFile;

/// What the cluster last said of its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roster {
    /// The voting members.
    pub members: Vec<Member>,
    /// The client URL that answered.
    pub from: String,
    /// When, in seconds since the Unix epoch.
    pub listed_at: i64,
}

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "etcd-members.json")
}

/// The members last listed; none when never listed, or unreadable (said once in the log:
/// a damaged record costs only what it would have told).
pub fn read(state_dir: &Path) -> Option<Roster> {
    match file(state_dir).read(": it is written anew when etcd next lists its members") {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("{e:#}");
            None
        }
    }
}

/// Records the members `from` listed, when they differ from the record (a failure is
/// logged: the record only helps a later pass decide).
pub fn write(state_dir: &Path, members: &[Member], from: &str) {
    if read(state_dir).is_some_and(|r| r.members == members && r.from == from) {
        return;
    }
    let roster = Roster {
        members: members.to_vec(),
        from: from.to_string(),
        listed_at: time::OffsetDateTime::now_utc().unix_timestamp(),
    };
    if let Err(e) = file(state_dir).write(&roster) {
        tracing::warn!("cannot record etcd's member list: {e:#}");
    }
}

impl Roster {
    /// The client URLs of the members, this node's (`me`) last.
    pub fn client_urls(&self, me: &str) -> Vec<String> {
        let (mine, others): (Vec<&Member>, Vec<&Member>) =
            self.members.iter().partition(|m| m.name == me);
        others
            .iter()
            .chain(&mine)
            .flat_map(|m| m.client_urls.iter().cloned())
            .collect()
    }

    /// The peer URLs of every member.
    pub fn peer_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .flat_map(|m| m.peer_urls.iter().cloned())
            .collect()
    }

    /// When it was listed, for a message.
    pub fn when(&self) -> String {
        time::OffsetDateTime::from_unix_timestamp(self.listed_at)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| self.listed_at.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, name: &str) -> Member {
        Member {
            id,
            name: name.into(),
            client_urls: vec![format!("https://{name}:2379")],
            peer_urls: vec![format!("https://{name}:2380")],
        }
    }

    #[test]
    fn the_member_list_is_kept_and_read_back_this_nodes_urls_last() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        let three = [member(1, "a"), member(2, "b"), member(3, "c")];
        write(dir.path(), &three, "https://a:2379");
        let r = read(dir.path()).expect("recorded");
        assert_eq!(r.members, three);
        assert_eq!(
            r.client_urls("a"),
            ["https://b:2379", "https://c:2379", "https://a:2379"]
        );
        assert_eq!(r.peer_urls().len(), 3);
        // A damaged record is no record.
        std::fs::write(dir.path().join("etcd-members.json"), "{").unwrap();
        assert_eq!(read(dir.path()), None);
    }
}
