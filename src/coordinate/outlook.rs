//! How a pass on this node will restart, as the cluster says now: what `check` shows. The
//! same decision a pass makes at its first restart (`gate`), asked within a bound, with
//! nothing written and no lock taken.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::EtcdGate;
use crate::components::NodeReading;
use crate::config::{Coordination, Enabled};

/// `check` asks the cluster for at most this long.
const ASK_FOR: Duration = Duration::from_secs(10);

/// `check`'s view of coordination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outlook {
    /// `[coordination] enabled`: `auto`, `on` or `off`.
    pub enabled: &'static str,
    /// `coordinated`, `not coordinated`, `held` (restarts will be held: fix what `why`
    /// says) or `decided at each pass` (the cluster did not answer in time).
    pub restarts: &'static str,
    /// Why: what the cluster said, with where it was asked.
    pub why: String,
}

/// The outlook for a node whose files are under `root` (`/` on a node), its state directory
/// `state_dir` (the members last listed are read there), what it runs as `node` reads it.
pub fn outlook(conf: &Coordination, root: &Path, state_dir: &Path, node: &NodeReading) -> Outlook {
    let enabled = match conf.enabled {
        Enabled::Auto => "auto",
        Enabled::On => "on",
        Enabled::Off => "off",
    };
    // Not root: the cluster cannot be asked, which says nothing of how a pass restarts.
    if conf.enabled != Enabled::Off
        && let Some(files) = super::identity::find(conf, root, &node.etcd_clients())
        && let Err(e) = crate::fsutil::read(&files.key)
        && e.kind() == std::io::ErrorKind::PermissionDenied
    {
        return Outlook {
            enabled,
            restarts: "decided at each pass",
            why: format!(
                "this user cannot read the etcd client key {} to ask the cluster; run check as root to see what the cluster says",
                files.key.display()
            ),
        };
    }
    let gate = EtcdGate::under(conf, root)
        .reading_in(state_dir)
        .knowing(node);
    let asked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the etcd client: {e}"))
        .and_then(|rt| {
            rt.block_on(async { tokio::time::timeout(ASK_FOR, gate.outlook()).await })
                .map_err(|_| format!("etcd gave no answer within {}s", ASK_FOR.as_secs()))
        });
    let (restarts, why) = match asked {
        Ok(decided) => (decided.restarts, decided.why),
        Err(why) => ("decided at each pass", why),
    };
    Outlook {
        enabled,
        restarts,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, path: &str, text: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A free loopback port: nothing listens there once the listener is dropped.
    fn refusing_url() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("https://127.0.0.1:{}", l.local_addr().unwrap().port())
    }

    /// What `check` says with no cluster to ask; what it says of a live one is shown
    /// against a real etcd cluster (tests/it/coordinate_etcd.rs).
    #[test]
    fn the_outlook_says_what_the_pass_will_do_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (a, b, c) = (refusing_url(), refusing_url(), refusing_url());
        let auto = Coordination {
            endpoints: vec![a.clone()],
            ..Coordination::default()
        };
        // Nothing on the node and nothing listening: no member here.
        let o = outlook(&auto, root, state.path(), &NodeReading::default());
        assert_eq!(o.restarts, "not coordinated", "{}", o.why);
        assert!(o.why.contains("runs no etcd member"), "{}", o.why);
        // etcd's settings name three members, no identity: held, and what to set.
        let three =
            format!("ETCD_NAME=node2\nETCD_INITIAL_CLUSTER=node1={a},node2={b},node3={c}\n");
        put(root, "/etc/default/etcd", &three);
        let o = outlook(&auto, root, state.path(), &NodeReading::default());
        assert_eq!(o.restarts, "held");
        assert!(o.why.contains("/etc/default/etcd"), "{}", o.why);
        assert!(
            o.why.contains("set [coordination] cert, key and ca"),
            "{}",
            o.why
        );
        // Settings naming this node alone decide nothing by themselves (kubeadm writes that
        // on its first controller and after every upgrade): still held without an identity.
        put(
            root,
            "/etc/default/etcd",
            &format!("ETCD_NAME=solo\nETCD_INITIAL_CLUSTER=solo={a}\n"),
        );
        let o = outlook(&auto, root, state.path(), &NodeReading::default());
        assert_eq!(o.restarts, "held", "{}", o.why);
        // Off: not coordinated, and why.
        let off = Coordination {
            enabled: Enabled::Off,
            ..auto.clone()
        };
        assert_eq!(
            outlook(&off, root, state.path(), &NodeReading::default()).restarts,
            "not coordinated"
        );
        // `on` without an identity anywhere: held.
        let empty = tempfile::tempdir().unwrap();
        let on = Coordination {
            enabled: Enabled::On,
            ..auto.clone()
        };
        assert_eq!(
            outlook(&on, empty.path(), state.path(), &NodeReading::default()).restarts,
            "held"
        );
    }
}
