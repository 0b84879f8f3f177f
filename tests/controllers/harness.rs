//! The booted-controller harness itself (tests/controllers/common/controllers.rs): several
//! controllers on one network namespace form one etcd cluster, as HA tests need, and everything the
//! harness started is gone once they are dropped.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::controllers::{Cluster, Spec, host_or_skip};

const ETCD: &str = "etcd.service";

/// Member n of a plain-HTTP etcd cluster of `size` members: node n on 127.0.0.n.
fn member(n: usize, size: usize) -> Vec<(String, String)> {
    let ip = format!("127.0.0.{n}");
    let cluster: Vec<String> = (1..=size)
        .map(|m| format!("node{m}=http://127.0.0.{m}:2380"))
        .collect();
    [
        ("ETCD_NAME", format!("node{n}")),
        ("ETCD_DATA_DIR", "/var/lib/etcd/default".into()),
        ("ETCD_LISTEN_CLIENT_URLS", format!("http://{ip}:2379")),
        ("ETCD_ADVERTISE_CLIENT_URLS", format!("http://{ip}:2379")),
        ("ETCD_LISTEN_PEER_URLS", format!("http://{ip}:2380")),
        (
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            format!("http://{ip}:2380"),
        ),
        ("ETCD_INITIAL_CLUSTER", cluster.join(",")),
        ("ETCD_INITIAL_CLUSTER_STATE", "new".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn two_controllers_on_one_network_form_one_etcd_cluster_and_leave_nothing_behind() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let specs = vec![Spec::new("node1"), Spec::new("node2")];
    let cluster = Cluster::boot(host, specs).unwrap_or_else(|e| panic!("{e:#}"));
    let netns = Path::new("/run/netns").join(cluster.network());
    assert!(netns.exists(), "{} is not there", netns.display());
    let pids: Vec<u32> = cluster.nodes.iter().map(|n| n.leader()).collect();

    for (i, node) in cluster.nodes.iter().enumerate() {
        let vars = member(i + 1, cluster.nodes.len());
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        node.etcd_defaults(&vars).unwrap();
        // A member is ready only once the cluster has a quorum: start both, then wait.
        node.systemctl(&["restart", "--no-block", ETCD]).unwrap();
    }
    for node in &cluster.nodes {
        node.wait_active(ETCD, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    // node2 reaches node1 at 127.0.0.1: one loopback for both.
    let members = cluster.nodes[1]
        .run([
            "etcdctl",
            "--endpoints=http://127.0.0.1:2379",
            "member",
            "list",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(members.lines().count(), 2, "members: {members}");
    assert!(
        members.contains("node1") && members.contains("node2"),
        "members: {members}"
    );

    drop(cluster);
    assert!(!netns.exists(), "{} is left behind", netns.display());
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "PID {pid} is left running"
        );
    }
}
