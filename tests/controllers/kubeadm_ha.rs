//! Three kubeadm-shaped controllers, their etcd a static pod run from the manifest kubeadm
//! writes, must renew and restart one at a time, whatever that manifest's
//! `--initial-cluster` says. kubeadm writes it naming the node alone on the `init` node, the
//! members of the moment on each joined node, and the node alone on every node after
//! `kubeadm upgrade`; etcd ignores it once its data directory exists, so it says nothing of
//! the cluster a node is in. Taking it for the cluster's size makes a controller think it is
//! alone and restart its member without the lock, beside another controller restarting its own.
//!
//! Booted Debian controllers (tests/controllers/common/controllers.rs) on one network, node n on
//! 127.0.0.n, each with kubeadm's etcd PKI (`mkpki.sh ha-kubeadm --backdate`: every etcd leaf
//! issued 355 days ago for 365 days), certrenewd's `.deb` with its shipped configuration, and
//! the kubelet stand-in (tests/controllers/common/kubelet.rs) running the etcd static pod. The
//! cluster is formed the way kubeadm forms it (init, then `member add` and join for each other
//! node), so the data directories, not the manifests, hold the membership. The three daemons start
//! in the same second; a probe (tests/controllers/common/etcd_probe.rs) samples every member and
//! writes through the cluster every 200 ms.
//!
//! - `kubeadm_init_and_join_manifests_roll_one_at_a_time`: the manifests as after init and
//!   join (node1 alone; node1,node2; node1..node3).
//! - `kubeadm_upgraded_manifests_every_node_alone_roll_one_at_a_time`: every manifest as
//!   after `kubeadm upgrade` (each node alone), and the cluster's etcd CA, its key on every
//!   node, inside its renewal window: re-issued once for the cluster.
//!
//! Both: before the pass, `certrenewd check` on each node must not say "not coordinated";
//! every node holds the restart lock for its turn, each member restarts once and never two
//! together, the quorum is kept at every sample, every due certificate is renewed and served,
//! no alarm.
//!
//! - `kubeadm_members_reload_their_certificates_and_no_pod_restarts`: the init and join
//!   manifests with the shipped `on_renew = "reload"` (the others say `"restart"`): no pod restarts, every member healthy and every
//!   write committed at every sample (and `bench_yearly_renewal_restart_vs_reload`, the
//!   benchmark of both ways: benches/ha-reload.sh).

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::controllers::{Host, host_or_skip};
use common::etcd_probe::Report;
use common::ha::{
    DAEMON, Down, Due, Ha, KUBEADM, MEMBERS, assert_kept_up_in_turn, assert_pairs_accepted,
    assert_rolled_once_each, endpoint, run_passes, say,
};
use common::kubelet;
use common::pki::Failures;
use serde_json::Value;

/// Where kubelet finds etcd's static pod.
const MANIFEST: &str = "/etc/kubernetes/manifests/etcd.yaml";
/// Where kubeadm keeps etcd's certificates on a node.
const PKI: &str = "/etc/kubernetes/pki/etcd";
/// A member joining, or coming back, to the cluster's health.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);

/// Which kubeadm command last wrote the node's etcd manifest.
#[derive(Clone, Copy, Debug)]
enum WrittenBy {
    /// `kubeadm init` on node1: the node alone.
    Init,
    /// `kubeadm join --control-plane` on node n: the members etcd listed when it joined (the
    /// nodes before it), itself included, and `--initial-cluster-state=existing`.
    Join,
    /// `kubeadm upgrade apply` / `upgrade node`: the manifest made anew, the node alone.
    Upgrade,
}

/// The etcd static pod manifest kubeadm writes on node n: its flags sorted by name as
/// kubeadm sorts them, the pod as kubeadm's template makes it. Two flags differ from
/// kubeadm's, for one reason: the controllers here share one network namespace, where
/// 127.0.0.1 is node1's address. kubeadm listens for clients on the loopback first
/// (`https://127.0.0.1:2379,https://IP:2379`) and for metrics on `http://127.0.0.1:2381`
/// on every node; no other node could listen there (and node1 would listen twice). Each node
/// listens on its own address only; every other flag is kubeadm's.
fn manifest(n: usize, by: WrittenBy) -> String {
    let ip = format!("127.0.0.{n}");
    let members: Vec<usize> = match by {
        WrittenBy::Init | WrittenBy::Upgrade => vec![n],
        WrittenBy::Join => (1..=n).collect(),
    };
    let cluster: Vec<String> = members
        .iter()
        .map(|m| format!("node{m}=https://127.0.0.{m}:2380"))
        .collect();
    let mut flags = vec![
        format!("advertise-client-urls=https://{ip}:2379"),
        format!("cert-file={PKI}/server.crt"),
        "client-cert-auth=true".into(),
        "data-dir=/var/lib/etcd".into(),
        format!("initial-advertise-peer-urls=https://{ip}:2380"),
        format!("initial-cluster={}", cluster.join(",")),
    ];
    if let WrittenBy::Join = by {
        flags.push("initial-cluster-state=existing".into());
    }
    flags.extend([
        format!("key-file={PKI}/server.key"),
        format!("listen-client-urls=https://{ip}:2379"),
        format!("listen-metrics-urls=http://{ip}:2381"),
        format!("listen-peer-urls=https://{ip}:2380"),
        format!("name=node{n}"),
        format!("peer-cert-file={PKI}/peer.crt"),
        "peer-client-cert-auth=true".into(),
        format!("peer-key-file={PKI}/peer.key"),
        format!("peer-trusted-ca-file={PKI}/ca.crt"),
        "snapshot-count=10000".into(),
        format!("trusted-ca-file={PKI}/ca.crt"),
    ]);
    let flags: String = flags.iter().map(|f| format!("    - --{f}\n")).collect();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://{ip}:2379
  creationTimestamp: null
  labels:
    component: etcd
    tier: control-plane
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
{flags}    image: registry.k8s.io/etcd:3.5.15-0
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: {ip}
        path: /livez
        port: 2381
        scheme: HTTP
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: etcd
    resources:
      requests:
        cpu: 100m
        memory: 100Mi
    volumeMounts:
    - mountPath: /var/lib/etcd
      name: etcd-data
    - mountPath: {PKI}
      name: etcd-certs
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: {PKI}
      type: DirectoryOrCreate
    name: etcd-certs
  - hostPath:
      path: /var/lib/etcd
      type: DirectoryOrCreate
    name: etcd-data
status: {{}}
"
    )
}

/// Writes node n's manifest as `by` writes it (kubelet starts the pod from it).
fn write_manifest(ha: &Ha, n: usize, by: WrittenBy) {
    ha.node(n)
        .write_file(MANIFEST, manifest(n, by).as_bytes(), 0o600)
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// The client URLs of members 1..=n.
fn first_members(n: usize) -> Vec<String> {
    (1..=n).map(endpoint).collect()
}

/// Waits until members 1..=n answer healthy (asked from node1).
fn wait_first_healthy(ha: &Ha, n: usize) {
    let deadline = Instant::now() + HEALTHY_TIMEOUT;
    loop {
        let out = ha.etcdctl_at(1, &first_members(n), &["endpoint", "health"]);
        if out.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "members 1..{n} are not healthy: {out:?}\n{}",
            ha.node(n).journal(&["-u", kubelet::UNIT, "-n", "20"])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Boots the controllers and forms the cluster as kubeadm does: `init` on node1 (its etcd
/// alone), then for node2 and node3 `etcdctl member add` through the members so far and the
/// node's `join` manifest. Every manifest is then as kubeadm left it after init and join.
fn boot_as_kubeadm(host: &Host, mkpki_args: &[&str]) -> Ha {
    let ha = Ha::boot_layout(host, &KUBEADM, mkpki_args);
    let started = Instant::now();
    for node in &ha.cluster.nodes {
        kubelet::start(node).unwrap_or_else(|e| panic!("{e:#}"));
    }
    write_manifest(&ha, 1, WrittenBy::Init);
    wait_first_healthy(&ha, 1);
    for n in 2..=MEMBERS {
        let peer = format!("--peer-urls=https://127.0.0.{n}:2380");
        let name = format!("node{n}");
        // etcd refuses a member while one added less than 5 s ago is not yet connected that
        // long ("unhealthy cluster"); kubeadm retries, and so does this.
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        let add = ["member", "add", &name, &peer];
        while let Err(e) = ha.etcdctl_at(1, &first_members(n - 1), &add) {
            assert!(Instant::now() < deadline, "{e:#}");
            std::thread::sleep(Duration::from_millis(500));
        }
        write_manifest(&ha, n, WrittenBy::Join);
        wait_first_healthy(&ha, n);
    }
    ha.wait_cluster_healthy();
    say(&format!(
        "kubeadm: init on node1, node2 and node3 joined ({:.1} s)",
        started.elapsed().as_secs_f64()
    ));
    ha
}

/// `kubeadm upgrade` on each node in turn: the manifest made anew (the node alone) and the
/// pod restarted from it, the cluster healthy again before the next node.
fn upgrade_each_node(ha: &Ha) {
    let started = Instant::now();
    let pid = format!("{}/etcd.pid", kubelet::RUN_DIR);
    for n in 1..=MEMBERS {
        let node = ha.node(n);
        node.run(["rm", MANIFEST])
            .unwrap_or_else(|e| panic!("{e:#}"));
        // The stand-in removes the pod's PID file once etcd has stopped.
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        while node.read_file(&pid).is_ok() {
            assert!(Instant::now() < deadline, "node{n}: etcd did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
        write_manifest(ha, n, WrittenBy::Upgrade);
        ha.wait_members_answer();
    }
    say(&format!(
        "kubeadm: every node upgraded, its manifest naming itself alone ({:.1} s)",
        started.elapsed().as_secs_f64()
    ));
}

/// What `certrenewd check` says of coordination on each node (its exit status says whether
/// certificates are due, not whether it ran): (restarts, why).
fn check_coordination(ha: &Ha) -> Vec<(String, String)> {
    (1..=MEMBERS)
        .map(|n| {
            let out = ha.node(n).exec(["certrenewd", "check", "--output", "json"]);
            let text = String::from_utf8_lossy(&out.stdout);
            let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
                panic!(
                    "node{n}: check's JSON: {e}: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let co = &doc["coordination"];
            let restarts = co["restarts"].as_str().unwrap_or("?").to_string();
            let why = co["why"].as_str().unwrap_or("?").to_string();
            say(&format!(
                "node{n}: check: coordination enabled = {}: restarts {restarts}: {why}",
                co["enabled"]
            ));
            (restarts, why)
        })
        .collect()
}

/// What node n's daemon logged about coordinating: the decision and the lock.
fn decisions(ha: &Ha, n: usize) -> String {
    let journal = ha.node(n).journal(&["-u", DAEMON, "-o", "cat"]);
    let lines: Vec<&str> = journal
        .lines()
        .filter(|l| {
            ["coordinat", "restart lock", "member"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    lines.join("\n")
}

/// Microseconds of the host's realtime clock (the controllers' journals share it).
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The rolling renewal on a cluster formed as kubeadm forms it (then, with `upgraded`,
/// every node upgraded): `check` on each node, the probe started, the three daemons in the
/// same second; then everything the promise says, the lock first (it tells why when a node
/// went alone). `test` names the journals kept.
fn roll(host: &Host, mkpki_args: &[&str], upgraded: bool, test: &str) -> Ha {
    let ha = boot_as_kubeadm(host, mkpki_args);
    if upgraded {
        upgrade_each_node(&ha);
    }
    ha.wait_cluster_healthy();
    for n in 1..=MEMBERS {
        let text = String::from_utf8(ha.node(n).read_file(MANIFEST).unwrap()).unwrap();
        let cluster = text
            .lines()
            .find(|l| l.contains("--initial-cluster="))
            .unwrap_or("");
        say(&format!("node{n}: {MANIFEST}: {}", cluster.trim()));
    }
    ha.write_config("");
    let checks = check_coordination(&ha);
    let Passes {
        ha,
        statuses,
        r,
        restarts,
        due,
        ..
    } = under_probe(ha, test);
    for (i, status) in statuses.iter().enumerate() {
        say(&format!("node{}: {status}", i + 1));
    }
    let mut f = Failures(Vec::new());
    for n in 1..=MEMBERS {
        let said = decisions(&ha, n);
        say(&format!("node{n}: coordination:\n{said}"));
        f.check(said.contains("holding the restart lock"), || {
            format!("node{n} never held the restart lock; it said:\n{said}")
        });
    }
    for (i, (restarts, why)) in checks.iter().enumerate() {
        f.check(restarts != "not coordinated", || {
            format!("node{}: check says restarts {restarts}: {why}", i + 1)
        });
    }
    f.finish(test);
    for (i, status) in statuses.iter().enumerate() {
        assert!(status.contains("last pass: ok"), "node{}: {status}", i + 1);
    }
    assert_rolled_once_each(&ha, "etcd's static pod", restarts, &r, &due);
    ha
}

/// The probe's minimum of healthy members and longest write outage, with its summary.
fn report(test: &str, r: &Report, wall: Duration) {
    let min = r.min_healthy().map_or(0, |m| m.0);
    let outage = r.longest_write_outage();
    say(&format!(
        "{test}: passes done {:.1} s after the first start; min healthy {min} of {MEMBERS}; \
         longest write outage {} ms (from {})\n{}",
        wall.as_secs_f64(),
        outage.length.as_millis(),
        r.wall(outage.from),
        r.summary()
    ));
}

#[test]
fn kubeadm_init_and_join_manifests_roll_one_at_a_time() {
    const NAME: &str = "kubeadm_init_and_join_manifests_roll_one_at_a_time";
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    roll(host, &["--backdate"], false, NAME);
    say(&format!("{NAME}: {:.1} s", started.elapsed().as_secs_f64()));
}

#[test]
fn kubeadm_upgraded_manifests_every_node_alone_roll_one_at_a_time() {
    const NAME: &str = "kubeadm_upgraded_manifests_every_node_alone_roll_one_at_a_time";
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let ha = roll(host, &["--backdate", "--ca-left", "250"], true, NAME);
    // The CA re-issued once for the cluster: the same new bytes on every node.
    let ca = format!("{PKI}/ca.crt");
    let old = std::fs::read(ha.pki.join("probe/ca.crt")).unwrap();
    let first = std::fs::read(ha.on_host(1, &ca)).unwrap();
    assert_ne!(first, old, "node1: the etcd CA was not re-issued");
    for n in 2..=MEMBERS {
        assert_eq!(
            std::fs::read(ha.on_host(n, &ca)).unwrap(),
            first,
            "node{n} holds another re-issue of the etcd CA"
        );
    }
    for n in 1..=MEMBERS {
        let said = ha
            .node(n)
            .journal(&["-u", DAEMON, "--grep", "etcd key", "-o", "cat"]);
        say(&format!("node{n}: the CA: {}", said.trim()));
    }
    say(&format!("{NAME}: {:.1} s", started.elapsed().as_secs_f64()));
}

/// What the passes of three kubeadm controllers did.
struct Passes {
    ha: Ha,
    /// Each node's status line after its pass.
    statuses: Vec<String>,
    /// The probe's samples.
    r: Report,
    /// From the first daemon's start to the last pass's end.
    wall: Duration,
    /// Each stop and start of a member's pod in the passes.
    restarts: Vec<Down>,
    /// The due certificates, as they were before.
    due: Vec<Due>,
    /// Each member's pod process before the passes, and after.
    pids: (Vec<String>, Vec<String>),
}

/// The yearly renewal of three kubeadm-shaped controllers as after init and join, every
/// etcd leaf due (issued 355 days ago for 365 days): [`under_probe`] with the shipped
/// configuration saying `on_renew = "restart"`, and with `reload` as shipped.
fn yearly(host: &Host, reload: bool, name: &str) -> Passes {
    let ha = boot_as_kubeadm(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    match reload {
        true => ha.write_config_as_shipped("", &[]),
        false => ha.write_config(""),
    }
    under_probe(ha, name)
}

/// The three daemons started in the same second, the probe sampling all along; `name`
/// names the journals kept.
fn under_probe(ha: Ha, name: &str) -> Passes {
    let pid_file = format!("{}/etcd.pid", kubelet::RUN_DIR);
    let pids = |ha: &Ha| -> Vec<String> {
        (1..=MEMBERS)
            .map(|n| {
                let pid = ha.node(n).read_file(&pid_file).unwrap_or_default();
                String::from_utf8_lossy(&pid).into()
            })
            .collect()
    };
    let before = pids(&ha);
    let due: Vec<Due> = ha.due();
    let probe = ha.probe();
    let since = now_us();
    let (statuses, wall) = run_passes(&ha);
    // Let the probe see the last member come back before it stops.
    std::thread::sleep(Duration::from_secs(3));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    report(name, &r, wall);
    ha.keep_journals(name);
    let restarts = (1..=MEMBERS)
        .flat_map(|n| {
            ha.said_restarts(
                n,
                kubelet::UNIT,
                "static pod etcd stopped",
                "static pod etcd started",
            )
        })
        .filter(|d| d.from >= since)
        .collect();
    let after = pids(&ha);
    Passes {
        ha,
        statuses,
        r,
        wall,
        restarts,
        due,
        pids: (before, after),
    }
}

/// Three kubeadm-shaped controllers as after init and join, every etcd leaf due, the shipped
/// configuration (`on_renew = "reload"` by default) for /etc/kubernetes/pki: each controller renews
/// its member's serving and peer certificates under the restart lock, in turn, and shows them
/// served where the manifest says, verified as the member's clients verify them; no static
/// pod is restarted (its process kept), and the probe sees all 3 members healthy and every
/// write committed at every sample.
#[test]
fn kubeadm_members_reload_their_certificates_and_no_pod_restarts() {
    const NAME: &str = "kubeadm_members_reload_their_certificates_and_no_pod_restarts";
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let Passes {
        ha,
        statuses,
        r,
        restarts,
        due,
        pids,
        ..
    } = yearly(host, true, NAME);
    for (i, status) in statuses.iter().enumerate() {
        say(&format!("node{}: {status}", i + 1));
        assert!(status.contains("last pass: ok"), "node{}: {status}", i + 1);
    }
    for n in 1..=MEMBERS {
        let said = ha
            .node(n)
            .journal(&["-u", DAEMON, "--grep", "reloaded", "-o", "cat"]);
        say(&format!("node{n}: {}", said.trim()));
        assert!(
            said.contains("static pod etcd reloaded: read again, no restart"),
            "node{n}: {said}"
        );
    }
    assert_eq!(pids.1, pids.0, "a member's pod was restarted");
    assert!(restarts.is_empty(), "{restarts:?}");
    assert_kept_up_in_turn(&ha, &r);
    let pki = "/etc/kubernetes/pki";
    assert_pairs_accepted(
        &ha,
        &[
            &format!("{pki}/etcd/healthcheck-client.crt"),
            &format!("{pki}/apiserver-etcd-client.crt"),
        ],
        &format!("{pki}/etcd/peer.crt"),
    );
    ha.assert_renewed_and_served(&due);
    say(&format!("{NAME}: {:.1} s", started.elapsed().as_secs_f64()));
}

/// benches/ha-reload.sh: the yearly renewal of a 3-controller kubeadm cluster with the
/// shipped configuration saying `on_renew = "restart"` (every member's pod restarted in
/// turn) and as shipped (none): members restarted, the fewest healthy, the longest write outage and the
/// passes' wall time of each, and their ratios. Prints `BENCH key=value` lines.
#[test]
#[ignore = "a benchmark: benches/ha-reload.sh"]
fn bench_yearly_renewal_restart_vs_reload() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let mut figures = Vec::new();
    for (way, reload) in [("restart", false), ("reload", true)] {
        let y = yearly(host, reload, &format!("bench_yearly_{way}"));
        for (i, status) in y.statuses.iter().enumerate() {
            assert!(status.contains("last pass: ok"), "node{}: {status}", i + 1);
        }
        y.ha.assert_renewed_and_served(&y.due);
        let kept = (y.pids.0.iter().zip(&y.pids.1))
            .filter(|(a, b)| a == b)
            .count();
        let min = y.r.min_healthy().map_or(0, |m| m.0);
        let outage = y.r.longest_write_outage().length;
        let failed = y.r.seen().filter(|s| !s.wrote).count();
        println!("BENCH {way}_members_restarted={}", y.restarts.len());
        println!("BENCH {way}_pods_kept={kept}");
        println!("BENCH {way}_min_healthy={min}");
        println!("BENCH {way}_writes_failed={failed}");
        println!("BENCH {way}_longest_write_outage_ms={}", outage.as_millis());
        println!("BENCH {way}_passes_ms={}", y.wall.as_millis());
        figures.push((y.restarts.len(), outage, y.wall));
    }
    let (restart, reload) = (figures[0], figures[1]);
    println!(
        "BENCH ratio_write_outage={:.1}",
        restart.1.as_secs_f64() / reload.1.as_secs_f64().max(0.001)
    );
    println!(
        "BENCH ratio_passes={:.1}",
        restart.2.as_secs_f64() / reload.2.as_secs_f64().max(0.001)
    );
}
