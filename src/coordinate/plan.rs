//! How a pass on this node will restart, as far as the node's own files tell, without
//! contacting etcd: what `check` shows. The pass decides again from the cluster's answers
//! (`gate`), and logs that decision.

use std::path::Path;

use serde::Serialize;

use super::{identity, node};
use crate::config::{Coordination, Enabled};

/// `check`'s view of coordination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outlook {
    /// `[coordination] enabled`: `auto`, `on` or `off`.
    pub enabled: &'static str,
    /// `coordinated`, `not coordinated`, `held` (restarts will be held: fix what `why`
    /// says) or `decided at each pass` (from whether a member answers).
    pub restarts: &'static str,
    /// Why, with the files it was read from.
    pub why: String,
}

/// The outlook for a node whose files are under `root` (`/` on a node).
pub fn outlook(conf: &Coordination, root: &Path) -> Outlook {
    let enabled = match conf.enabled {
        Enabled::Auto => "auto",
        Enabled::On => "on",
        Enabled::Off => "off",
    };
    let at = |restarts, why| Outlook {
        enabled,
        restarts,
        why,
    };
    if conf.enabled == Enabled::Off {
        return at("not coordinated", "[coordination] enabled = false".into());
    }
    let node = node::read(root);
    if conf.enabled == Enabled::Auto
        && let Some(n) = node.as_ref().filter(|n| n.members() == 1)
    {
        let why = format!(
            "etcd's --initial-cluster in {} names a single member",
            n.describe_sources()
        );
        return at("not coordinated", why);
    }
    let identity = identity::find(conf, root);
    match (&node, identity) {
        (Some(n), None) => at(
            "held",
            format!(
                "this node runs an etcd member ({}) but has no etcd client certificate (looked for {}); set [coordination] cert, key and ca",
                n.describe_sources(),
                identity::looked_for()
            ),
        ),
        (None, None) if conf.enabled == Enabled::On => at(
            "held",
            format!(
                "no etcd client certificate (looked for {}); set [coordination] cert, key and ca",
                identity::looked_for()
            ),
        ),
        (Some(n), Some(files)) => at(
            "coordinated",
            format!(
                "etcd member {} of {} ({}), as etcd user {}: one controller restarts at a time",
                n.name.as_deref().unwrap_or("?"),
                n.members(),
                n.describe_sources(),
                files.user()
            ),
        ),
        (None, _) => at(
            "decided at each pass",
            format!(
                "no etcd settings on this node; coordinated when a member answers at {}, not when every one refuses connections, held otherwise",
                conf.endpoints.join(", ")
            ),
        ),
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

    const THREE: &str = "ETCD_NAME=node2\nETCD_INITIAL_CLUSTER=node1=https://10.0.0.1:2380,node2=https://10.0.0.2:2380,node3=https://10.0.0.3:2380\n";

    #[test]
    fn the_outlook_says_what_the_pass_will_do_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let auto = Coordination::default();
        // Nothing on the node: decided by whether a member answers.
        let o = outlook(&auto, root);
        assert_eq!(o.restarts, "decided at each pass");
        assert!(o.why.contains("https://127.0.0.1:2379"), "{}", o.why);
        // etcd's settings name three members, no identity: held, and what to set.
        put(root, "/etc/default/etcd", THREE);
        let o = outlook(&auto, root);
        assert_eq!(o.restarts, "held");
        assert!(o.why.contains("/etc/default/etcd"), "{}", o.why);
        assert!(
            o.why.contains("set [coordination] cert, key and ca"),
            "{}",
            o.why
        );
        // With StarlingX's client identity: coordinated, as member node2 of 3.
        for f in [
            "/etc/etcd/etcd-client.crt",
            "/etc/etcd/etcd-client.key",
            "/etc/etcd/ca.crt",
        ] {
            put(root, f, "x");
        }
        let o = outlook(&auto, root);
        assert_eq!(o.restarts, "coordinated");
        assert!(
            o.why
                .starts_with("etcd member node2 of 3 (/etc/default/etcd)"),
            "{}",
            o.why
        );
        // Off, and a single-member cluster under auto: not coordinated, and why.
        let off = Coordination {
            enabled: Enabled::Off,
            ..Coordination::default()
        };
        assert_eq!(outlook(&off, root).restarts, "not coordinated");
        put(
            root,
            "/etc/default/etcd",
            "ETCD_INITIAL_CLUSTER=solo=https://10.0.0.1:2380\n",
        );
        let o = outlook(&auto, root);
        assert_eq!(o.restarts, "not coordinated");
        assert!(o.why.contains("single member"), "{}", o.why);
        // `on` without an identity anywhere: held.
        let empty = tempfile::tempdir().unwrap();
        let on = Coordination {
            enabled: Enabled::On,
            ..Coordination::default()
        };
        assert_eq!(outlook(&on, empty.path()).restarts, "held");
    }
}
