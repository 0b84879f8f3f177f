//! Three kubespray-shaped controllers renew their etcd certificates with the shipped
//! configuration, one at a time. kubespray runs etcd from its own
//! `/etc/systemd/system/etcd.service` (a bare `ExecStart`, every setting in
//! `/etc/etcd.env`) and keeps every host's pairs in `/etc/ssl/etcd/ssl`, a directory no
//! shipped watch names: the pair and CA the environment file names are watched where they
//! live, the client identity is found among them (the member pair allows clientAuth), and
//! the installs take the lock in turn.
//!
//! Booted Debian controllers (tests/controllers/common/controllers.rs) on one network, node n on
//! 127.0.0.n, each with kubespray's etcd PKI (`mkpki.sh ha-kubespray --backdate`: every
//! member pair issued 355 days ago for 365 days), kubespray's unit and environment file
//! (tests/fixtures/kubespray, each node's names and addresses; the client URLs without
//! `https://127.0.0.1:2379`, since the controllers share one loopback), `/etc/kubernetes/ssl`
//! with kubeadm's `/etc/kubernetes/pki` naming it (empty here), certrenewd's `.deb` with
//! its shipped configuration untouched: a member pair is read again on every handshake, so
//! each is installed at its member's turn and shown in use, and no member restarts. A probe samples every member and writes
//! through the cluster every 200 ms while the three daemons run their first pass.

use crate::common;

use std::time::Duration;

use common::controllers::host_or_skip;
use common::ha::{
    DAEMON, Due, ETCD, Ha, KUBESPRAY, MEMBERS, assert_kept_up_in_turn, assert_pairs_accepted,
    run_passes, say,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kubespray");
const SSL: &str = "/etc/ssl/etcd/ssl";

/// kubespray's `/etc/etcd.env` for node n: the fixture with this cluster's names and
/// addresses.
fn etcd_env(n: usize) -> String {
    let text = std::fs::read_to_string(format!("{FIXTURES}/etcd.env")).unwrap();
    let ip = format!("127.0.0.{n}");
    let cluster: Vec<String> = (1..=MEMBERS)
        .map(|m| format!("etcd{m}=https://127.0.0.{m}:2380"))
        .collect();
    text.lines()
        .map(|l| match l.split_once('=') {
            Some(("ETCD_ADVERTISE_CLIENT_URLS", _)) => {
                format!("ETCD_ADVERTISE_CLIENT_URLS=https://{ip}:2379")
            }
            Some(("ETCD_INITIAL_ADVERTISE_PEER_URLS", _)) => {
                format!("ETCD_INITIAL_ADVERTISE_PEER_URLS=https://{ip}:2380")
            }
            Some(("ETCD_INITIAL_CLUSTER_STATE", _)) => "ETCD_INITIAL_CLUSTER_STATE=new".into(),
            Some(("ETCD_LISTEN_CLIENT_URLS", _)) => {
                format!("ETCD_LISTEN_CLIENT_URLS=https://{ip}:2379")
            }
            Some(("ETCD_LISTEN_PEER_URLS", _)) => {
                format!("ETCD_LISTEN_PEER_URLS=https://{ip}:2380")
            }
            Some(("ETCD_NAME", _)) => format!("ETCD_NAME=etcd{n}"),
            Some(("ETCD_INITIAL_CLUSTER", _)) => {
                format!("ETCD_INITIAL_CLUSTER={}", cluster.join(","))
            }
            _ => l.replace("member-node1", &format!("member-node{n}")),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn kubespray_controllers_renew_with_the_shipped_configuration_one_at_a_time() {
    const NAME: &str = "kubespray_controllers_renew_with_the_shipped_configuration_one_at_a_time";
    let Some(host) = host_or_skip() else {
        return;
    };
    let ha = Ha::boot_layout(host, &KUBESPRAY, &["--backdate"]);
    let unit = std::fs::read(format!("{FIXTURES}/etcd.service")).unwrap();
    for n in 1..=MEMBERS {
        let node = ha.node(n);
        let (uid, gid) = node.ids("etcd").unwrap();
        for key in ["ca-key.pem", "member-node{n}-key.pem"] {
            let path = ha.on_host(n, &format!("{SSL}/{key}"));
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        }
        node.write_file("/etc/etcd.env", etcd_env(n).as_bytes(), 0o644)
            .unwrap();
        node.write_file("/etc/systemd/system/etcd.service", &unit, 0o644)
            .unwrap();
        node.run(["ln", "-sf", "/usr/bin/etcd", "/usr/local/bin/etcd"])
            .unwrap_or_else(|e| panic!("{e:#}"));
        // A kubespray controller's Kubernetes certificate directory and kubeadm's name for
        // it (`kube_cert_dir`, `kube_cert_compat_dir`): the shipped watch of
        // /etc/kubernetes/pki finds it (its kubeadm certificates are not this test's).
        node.sh("mkdir -p /etc/kubernetes/ssl && ln -sfn ssl /etc/kubernetes/pki")
            .unwrap_or_else(|e| panic!("{e:#}"));
        node.run([
            "install",
            "-d",
            "-o",
            "etcd",
            "-g",
            "etcd",
            "-m",
            "700",
            "/var/lib/etcd",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
        node.systemctl(&["daemon-reload"]).unwrap();
        node.systemctl(&["restart", "--no-block", ETCD]).unwrap();
    }
    ha.wait_cluster_healthy();
    let due: Vec<Due> = ha.due();
    let others: Vec<Vec<u8>> = (1..=MEMBERS)
        .map(|n| {
            std::fs::read(ha.on_host(n, &format!("{SSL}/member-node{}.pem", n % MEMBERS + 1)))
                .unwrap()
        })
        .collect();
    let probe = ha.probe();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let (statuses, wall) = run_passes(&ha);
    std::thread::sleep(Duration::from_secs(3));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    let min = r.min_healthy().map_or(0, |m| m.0);
    let outage = r.longest_write_outage();
    say(&format!(
        "{NAME}: passes done {:.1} s after the first start; min healthy {min} of {MEMBERS}; longest write outage {} ms\n{}",
        wall.as_secs_f64(),
        outage.length.as_millis(),
        r.summary()
    ));
    ha.keep_journals(NAME);
    for (i, status) in statuses.iter().enumerate() {
        say(&format!("node{}: {status}", i + 1));
        assert!(
            status.contains("last pass: ok") && status.contains(", 1 reloaded (not restarted)"),
            "node{}: {status}",
            i + 1
        );
    }
    // Only each node's own member pair was renewed: another host's copy stays as it was.
    for (i, was) in others.iter().enumerate() {
        let n = i + 1;
        let other = format!("{SSL}/member-node{}.pem", n % MEMBERS + 1);
        let now = std::fs::read(ha.on_host(n, &other)).unwrap();
        assert_eq!(
            &now, was,
            "node{n}: {other} is another host's, not this node's to renew"
        );
    }
    // The member pair is etcd's serving and peer certificate, which it reads again on every
    // handshake: installed at each member's turn and shown in use, no member restarted.
    let restarts: Vec<_> = (1..=MEMBERS)
        .flat_map(|n| ha.unit_restarts(n, ETCD))
        .filter(|d| d.from >= since)
        .collect();
    assert!(restarts.is_empty(), "etcd restarted: {restarts:?}");
    assert_kept_up_in_turn(&ha, &r);
    assert_pairs_accepted(&ha, &[], &format!("{SSL}/member-node{{n}}.pem"));
    ha.assert_renewed_and_served(&due);
    for n in 1..=MEMBERS {
        let said =
            ha.node(n)
                .journal(&["-u", DAEMON, "--grep", "renewed|restart lock", "-o", "cat"]);
        say(&format!("node{n}: {}", said.trim()));
    }
}
