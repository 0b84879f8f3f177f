//! Two controllers that owe only their kube-apiserver a restart must never have both API
//! servers down at once: the restart lock goes to the next node only once this node's API
//! server serves the renewed certificate again, not when systemd calls it `active`.
//!
//! The 3-controller cluster of tests/controllers/common/ha.rs (Debian's etcd.service on each, the
//! `.deb`, coordination on), its etcd certificates not due (`--leaf-days 300`). Nodes 1 and
//! 2 also run kube-apiserver the hard way: `kube-apiserver.service` with the real one's
//! flags, its binary a stand-in ([`STANDIN`]) that takes [`STARTUP_SECS`] to become ready
//! (longer than `restart_settle_secs`, so that "active" comes long before "serving"), then
//! serves the certificate its flags name with `openssl s_server -www` on the advertised
//! address. Each node's /etc/kubernetes/pki has its own CA and an apiserver.crt due in 5
//! days (`renew_before_days` is 15), nothing else due. A probe
//! (tests/controllers/common/tls_probe.rs) asks both API servers for /readyz every 200 ms the whole
//! time.
//!
//! - `api_servers_restart_in_turn_each_serving_before_the_next`: at no sample are both
//!   down; each ends serving its renewed certificate; each node held the lock in turn.
//! - `without_wait_serving_both_api_servers_go_down_together`: today's behaviour
//!   (`wait_serving = false`, and API servers that advertise no address, so that no record
//!   names them and neither waits for the other's `/readyz`): the lock moves on while the
//!   first API server still starts, and the probe sees both down. This proves the probe
//!   catches what the first must avoid.
//! - `starlingx_duplex_one_etcd_member_never_both_api_servers_down`: StarlingX duplex, one
//!   etcd member (members 2 and 3 removed, their etcd stopped) and the two API servers,
//!   `enabled = "auto"` with both named in `[coordination] apiservers`: they take turns
//!   through the lock all the same (a cluster of one member was not coordinated at all).

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::controllers::{Host, host_or_skip};
use common::ha::{DAEMON, Ha, PASS_TIMEOUT, coordination_on, say};
use common::tls_probe::{Sample, TlsProbe, longest_down};
use serde_json::Value;

/// How long the stand-in takes from its start to serving: longer than the shipped
/// `restart_settle_secs` (5 s) and a lock handover together.
const STARTUP_SECS: u64 = 12;
/// The nodes running an API server.
const NODES: [usize; 2] = [1, 2];

/// kube-apiserver for this test: takes the real one's flags, sleeps `STARTUP_SECS` (from its
/// unit's environment), then serves the pair its flags name on `--advertise-address`:
/// `--secure-port` (openssl's `-www` answers every GET, /readyz too, with 200).
const STANDIN: &str = r#"#!/bin/sh
for a; do
    case $a in
    --advertise-address=*) addr=${a#*=} ;;
    --secure-port=*) port=${a#*=} ;;
    --tls-cert-file=*) cert=${a#*=} ;;
    --tls-private-key-file=*) key=${a#*=} ;;
    esac
done
addr=${STANDIN_ADDR:-$addr}
echo "starting: ready in ${STARTUP_SECS}s on $addr:$port"
sleep "$STARTUP_SECS"
echo "serving $(openssl x509 -noout -serial -in "$cert")"
exec openssl s_server -quiet -www -accept "$addr:$port" -cert "$cert" -key "$key"
"#;

/// The hard way's unit, with the flags certrenewd learns where it serves from; not
/// `advertised`, it binds every address and advertises none (the stand-in is told its
/// address by the environment).
fn unit(n: usize, advertised: bool) -> String {
    let (env, addr) = match advertised {
        true => (String::new(), format!("--advertise-address=127.0.0.{n}")),
        false => (
            format!("Environment=STANDIN_ADDR=127.0.0.{n}\n"),
            "--bind-address=0.0.0.0".to_string(),
        ),
    };
    format!(
        "[Unit]\nDescription=Kubernetes API server (a stand-in slow to become ready)\n\n\
         [Service]\nEnvironment=STARTUP_SECS={STARTUP_SECS}\n{env}\
         ExecStart=/usr/local/bin/kube-apiserver \\\n  {addr} \\\n  \
         --secure-port=6443 \\\n  --tls-cert-file=/etc/kubernetes/pki/apiserver.crt \\\n  \
         --tls-private-key-file=/etc/kubernetes/pki/apiserver.key\n"
    )
}

/// How a test's controllers are set up.
struct Case {
    /// Keys added to the /etc/kubernetes/pki watch.
    watch_keys: &'static str,
    /// Whether the API servers advertise their address ([`unit`]).
    advertised: bool,
    /// StarlingX duplex: etcd members 2 and 3 removed, coordination `auto` with both API
    /// servers named.
    duplex: bool,
    /// The name its journals are kept under.
    what: &'static str,
}

/// The `[coordination]` keys of StarlingX duplex: etcd's one member, both API servers named
/// (each node leaves its own out).
fn duplex_coordination() -> String {
    format!(
        "enabled = \"auto\"\nendpoints = [\"{}\"]\nlease_ttl_secs = 5\n\
         gate_timeout_secs = 60\nlock_timeout_secs = 600\n\
         apiservers = [\"https://{}\", \"https://{}\"]\n",
        common::ha::endpoint(1),
        server(1),
        server(2)
    )
}

/// etcd members 2 and 3 removed (their etcd stopped), member 1 alone and writable.
fn leave_one_member(ha: &Ha) {
    let one = [common::ha::endpoint(1)];
    for n in [3, 2] {
        let list = ha
            .etcdctl_at(1, &one, &["member", "list", "-w", "json"])
            .unwrap();
        let list: Value = serde_json::from_str(&list).unwrap();
        let id = (list["members"].as_array().unwrap().iter())
            .find(|m| m["name"] == format!("node{n}"))
            .and_then(|m| m["ID"].as_u64())
            .unwrap_or_else(|| panic!("{list}"));
        // etcd refuses a removal (an "unhealthy cluster") until its peers have been
        // connected for a few seconds; a removed leader may step down before it answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let removed = ha.etcdctl_at(1, &one, &["member", "remove", &format!("{id:x}")]);
            let said = format!("{removed:?}");
            if removed.is_ok() || said.contains("member not found") {
                say(&format!("node{n}'s member removed"));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node{n}'s member not removed: {said}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        ha.node(n).systemctl(&["stop", "etcd.service"]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while ha
        .etcdctl_at(1, &one, &["put", "/certrenewd-test/x", "y"])
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "member 1 alone never took a write"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let list = ha.etcdctl_at(1, &one, &["member", "list"]).unwrap();
    say(&format!("duplex: etcd's members: {}", list.trim()));
}

/// Node n's /etc/kubernetes/pki: a CA with its key, and apiserver.crt for 127.0.0.n due.
fn pki(n: usize) -> String {
    format!(
        "set -e; mkdir -p /etc/kubernetes/pki; cd /etc/kubernetes/pki\n\
         k='-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes'\n\
         openssl req -x509 $k -keyout ca.key -out ca.crt -days 3650 -subj /CN=kubernetes-node{n} 2>/dev/null\n\
         openssl req -new $k -keyout apiserver.key -out /run/apiserver.csr -subj /CN=kube-apiserver 2>/dev/null\n\
         printf 'subjectAltName=IP:127.0.0.{n},DNS:kubernetes\\nextendedKeyUsage=serverAuth\\n' >/run/ext\n\
         openssl x509 -req -in /run/apiserver.csr -CA ca.crt -CAkey ca.key -CAserial /run/ca.srl \
         -CAcreateserial -days 5 -extfile /run/ext -out apiserver.crt 2>/dev/null\n\
         chmod 600 ca.key apiserver.key"
    )
}

fn server(n: usize) -> String {
    format!("127.0.0.{n}:6443")
}

/// The cluster with an API server on nodes 1 and 2, the shipped configuration written with
/// coordination on (as `case` says) and its keys added to the /etc/kubernetes/pki watch,
/// and the probe's first sample with both up.
fn set_up(host: &Host, case: &Case) -> (Ha, TlsProbe, Sample) {
    let ha = Ha::boot(host, &["--leaf-days", "300"]);
    for n in NODES {
        let node = ha.node(n);
        node.write_file("/usr/local/bin/kube-apiserver", STANDIN.as_bytes(), 0o755)
            .unwrap();
        node.sh(&pki(n)).unwrap_or_else(|e| panic!("{e:#}"));
        let path = "/etc/systemd/system/kube-apiserver.service";
        node.write_file(path, unit(n, case.advertised).as_bytes(), 0o644)
            .unwrap();
        node.systemctl(&["daemon-reload"]).unwrap();
        node.systemctl(&["start", "--no-block", "kube-apiserver.service"])
            .unwrap();
    }
    ha.wait_cluster_healthy();
    let coordination = match case.duplex {
        true => {
            leave_one_member(&ha);
            duplex_coordination()
        }
        false => coordination_on(60, ""),
    };
    // The renewed apiserver.crt lives a year: its 5 days would be due again at once.
    let watch = "path = \"/etc/kubernetes/pki\"\n";
    let keys = format!("{watch}validity_days = 365\n{}", case.watch_keys);
    ha.write_config_edited(&coordination, &[(watch, &keys)]);
    let netns = Path::new("/run/netns").join(ha.cluster.network());
    let servers: Vec<String> = NODES.iter().map(|&n| server(n)).collect();
    let probe = TlsProbe::start(&netns, &servers, "/readyz").unwrap_or_else(|e| panic!("{e:#}"));
    let first = wait_sample(&probe, Duration::from_secs(60), |s| {
        s.up_count() == NODES.len()
    });
    (ha, probe, first)
}

/// The first sample `good` holds for, within `limit`.
fn wait_sample(probe: &TlsProbe, limit: Duration, good: impl Fn(&Sample) -> bool) -> Sample {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = probe.samples().into_iter().find(|s| good(s)) {
            return s;
        }
        let last = probe.samples().pop();
        assert!(Instant::now() < deadline, "no such sample; last: {last:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs both daemons' passes under the probe; returns the samples from the first with both
/// API servers up, the serials they served then, and the wall time of the passes.
fn renew_under_probe(host: &Host, case: &Case) -> (Ha, Vec<Sample>) {
    let (started, what) = (Instant::now(), case.what);
    let (ha, probe, first) = set_up(host, case);
    let before: Vec<String> = first.servers.iter().map(|s| s.clone().unwrap()).collect();
    let passes = Instant::now();
    ha.start_daemons(&NODES);
    let deadline = Instant::now() + PASS_TIMEOUT;
    for n in NODES {
        say(&format!("node{n}: {}", ha.wait_pass(n, "", deadline)));
    }
    let passes = passes.elapsed();
    // Until both serve a new certificate, and a second more.
    let renewed = |s: &Sample| {
        (s.servers.iter().zip(&before)).all(|(now, b)| now.as_ref().is_ok_and(|n| n != b))
    };
    wait_sample(&probe, Duration::from_secs(60), renewed);
    std::thread::sleep(Duration::from_secs(1));
    let samples: Vec<Sample> = (probe.stop().unwrap_or_else(|e| panic!("{e:#}")))
        .into_iter()
        .filter(|s| s.start >= first.start)
        .collect();
    ha.keep_journals(what);
    let both_down = samples.iter().filter(|s| s.up_count() == 0).count();
    say(&format!(
        "{what}: {} samples, {both_down} with both API servers down; longest down: {}; passes {:.1} s, test {:.1} s",
        samples.len(),
        NODES
            .iter()
            .enumerate()
            .map(|(i, n)| format!("node{n} {:.1} s", longest_down(&samples, i).as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        passes.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    for n in NODES {
        let said = ha
            .node(n)
            .journal(&["-u", DAEMON, "--grep", "kube-apiserver.service"]);
        say(&format!("node{n}: {}", said.trim()));
    }
    (ha, samples)
}

/// The serial of node n's apiserver.crt now, as the probe writes serials.
fn serial_on_disk(ha: &Ha, n: usize) -> String {
    let out = ha
        .node(n)
        .run([
            "openssl",
            "x509",
            "-noout",
            "-serial",
            "-in",
            "/etc/kubernetes/pki/apiserver.crt",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let hex = out
        .trim()
        .trim_start_matches("serial=")
        .to_ascii_lowercase();
    hex.trim_start_matches('0').to_string()
}

/// When node n's daemon held the restart lock: (took, released), µs of the realtime clock.
fn held(ha: &Ha, n: usize) -> (u64, u64) {
    let entries = ha.node(n).journal_json(&["-u", DAEMON]);
    let at = |text: &str| {
        let e = entries
            .iter()
            .find(|e: &&Value| e["MESSAGE"].as_str().is_some_and(|m| m.contains(text)));
        let t = e.and_then(|e| e["__REALTIME_TIMESTAMP"].as_str()?.parse().ok());
        t.unwrap_or_else(|| panic!("node{n} never said {text:?}"))
    };
    (
        at("holding the restart lock"),
        at("released the restart lock"),
    )
}

#[test]
fn api_servers_restart_in_turn_each_serving_before_the_next() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let case = Case {
        watch_keys: "",
        advertised: true,
        duplex: false,
        what: "apiserver-ready",
    };
    let (ha, samples) = renew_under_probe(host, &case);
    assert_in_turn(&ha, &samples);
}

/// No sample with both API servers down, each serving its renewed certificate at the end,
/// and the lock held by one node at a time.
fn assert_in_turn(ha: &Ha, samples: &[Sample]) {
    if let Some(s) = samples.iter().find(|s| s.up_count() == 0) {
        panic!(
            "both API servers down at {:.1} s: {:?}",
            s.start.as_secs_f64(),
            s.servers
        );
    }
    let last = samples.last().unwrap();
    for (i, n) in NODES.into_iter().enumerate() {
        let served = last.servers[i].clone().unwrap();
        assert_eq!(
            served.trim_start_matches('0'),
            serial_on_disk(ha, n),
            "node{n}"
        );
    }
    let (a, b) = (held(ha, 1), held(ha, 2));
    let (first, second) = if a.0 < b.0 { (a, b) } else { (b, a) };
    assert!(
        first.1 <= second.0,
        "the lock was held by both: {first:?} and {second:?}"
    );
}

#[test]
fn without_wait_serving_both_api_servers_go_down_together() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let case = Case {
        watch_keys: "wait_serving = false\n",
        advertised: false,
        duplex: false,
        what: "apiserver-not-waited",
    };
    let (_ha, samples) = renew_under_probe(host, &case);
    assert!(
        samples.iter().any(|s| s.up_count() == 0),
        "both API servers were never down together: the probe does not catch the failure"
    );
}

#[test]
fn starlingx_duplex_one_etcd_member_never_both_api_servers_down() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let case = Case {
        watch_keys: "",
        advertised: true,
        duplex: true,
        what: "apiserver-duplex",
    };
    let (ha, samples) = renew_under_probe(host, &case);
    assert_in_turn(&ha, &samples);
    // Each asked the other's /readyz before its own restart.
    for n in NODES {
        let said = ha
            .node(n)
            .journal(&["-u", DAEMON, "--grep", "may restart: the API server at"]);
        say(&format!("node{n}: {}", said.trim()));
        assert!(
            said.contains("([coordination] apiservers)") || said.contains("(the record of node"),
            "node{n}: {said}"
        );
    }
}
