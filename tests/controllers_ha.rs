//! Issue 15, "How it is shown": three Debian controllers booted with systemd as PID 1 on one
//! network (tests/common/controllers.rs), each running Debian's etcd.service as one member of
//! a 3-member cluster with mutual TLS for clients and peers, every member's server, peer and
//! client certificate due together (tests/common/ha.rs), certrenewd's `.deb` on each with the
//! same configuration, all three daemons started in the same second. A probe
//! (tests/common/etcd_probe.rs) checks every member's health and writes through the cluster
//! every 200 ms the whole time.
//!
//! - `uncoordinated_passes_lose_quorum`: today's behaviour (no coordination): every node
//!   restarts its member at once and the probe sees the cluster lose quorum. This proves the
//!   probe catches what the coordinated run must avoid.
//! - `coordinated_rolling_renewal_keeps_quorum`: `[coordination]` on, the client identity
//!   auto-detected (StarlingX's /etc/etcd/etcd-client.crt): every certificate renewed and
//!   served, at every sample at least 2 of 3 members healthy or the write committed, no write outage longer than one
//!   leader election, no alarm.
//! - Failure paths, each on a cluster of its own: a member down before the pass; the lock
//!   holder SIGKILLed while holding; every certificate already expired (the cluster is down
//!   until the files are renewed); an etcd identity without permission on the lock prefix
//!   (etcd auth with CN users, as CKE).
//! - `a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum` (issue 25): the
//!   cluster's CA within its window is re-issued once, through etcd, with identical bytes on
//!   every node and in every node's copies (the peer trust bundle, admin.conf), the quorum
//!   kept.
//! - `bench_rolling_renewal` (ignored; benches/ha-rolling.sh): wall time of the rolling
//!   renewal against one node's pass, and the longest write outage.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::controllers::{Host, host_or_skip};
use common::etcd_probe::Report;
use common::ha::{
    DAEMON, ETCD, Ha, LEASE_TTL_SECS, MEMBERS, PASS_TIMEOUT, all_alarms, assert_check_coordinated,
    assert_lock_free, assert_quorum_kept, assert_turns_were_taken_and_said, coordination_on,
    one_250_003, run_passes, say, wait_holder,
};

/// An etcd leader election with Debian's defaults (heartbeat 100 ms, election timeout
/// 1000 ms): a follower waits one randomized election timeout (1-2 s) before it campaigns.
/// A write outage longer than this is more than one election.
const ELECTION: Duration = Duration::from_millis(2000);

/// Today's behaviour, stated explicitly.
const COORDINATION_OFF: &str = "enabled = false\n";

fn report(what: &str, r: &Report, wall: Duration) {
    say(&format!(
        "ha {what}: passes done {:.1} s after the first start\n{}",
        wall.as_secs_f64(),
        r.summary()
    ));
}

/// One rolling renewal under `config`: a healthy cluster with every certificate due, the
/// probe running, the three daemons started in the same second. Checks that every member was
/// restarted and every certificate renewed and served; returns the cluster (for more checks),
/// each node's STATUS= and the probe's report.
fn renew_all_under_probe(host: &Host, config: &str, what: &str) -> (Ha, Vec<String>, Report) {
    renew_under_probe(host, &["--backdate"], config, what)
}

/// [`renew_all_under_probe`] on a PKI made by mkpki with `mkpki_args`.
fn renew_under_probe(
    host: &Host,
    mkpki_args: &[&str],
    config: &str,
    what: &str,
) -> (Ha, Vec<String>, Report) {
    let ha = Ha::boot(host, mkpki_args);
    ha.wait_cluster_healthy();
    ha.write_config(config);
    let due = ha.due();
    let etcd_before = ha.invocations(ETCD);
    let probe = ha.probe();
    let (statuses, wall) = run_passes(&ha);
    // Let the probe see the cluster come back before it stops.
    std::thread::sleep(Duration::from_secs(3));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    report(what, &r, wall);
    ha.keep_journals(what);
    for (n, status) in statuses.iter().enumerate() {
        say(&format!("node{}: {status}", n + 1));
    }
    let etcd_after = ha.invocations(ETCD);
    for n in 0..MEMBERS {
        let node = n + 1;
        assert_ne!(
            etcd_before[n], etcd_after[n],
            "node{node}: etcd was not restarted"
        );
    }
    ha.assert_renewed_and_served(&due);
    (ha, statuses, r)
}

#[test]
fn uncoordinated_passes_lose_quorum() {
    let Some(host) = host_or_skip("uncoordinated_passes_lose_quorum") else {
        return;
    };
    let started = Instant::now();
    let (_ha, _, r) = renew_all_under_probe(host, COORDINATION_OFF, "uncoordinated");
    let (min, _) = r.min_healthy().expect("samples");
    let outage = r.longest_write_outage();
    assert!(
        min < 2 || outage.length > ELECTION,
        "uncoordinated restarts kept quorum (min healthy {min}, longest write outage {} ms): \
         the probe does not catch the failure\n{}",
        outage.length.as_millis(),
        r.summary()
    );
    say(&format!(
        "uncoordinated_passes_lose_quorum: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn coordinated_rolling_renewal_keeps_quorum() {
    let Some(host) = host_or_skip("coordinated_rolling_renewal_keeps_quorum") else {
        return;
    };
    let started = Instant::now();
    let (ha, statuses, r) = renew_all_under_probe(host, &coordination_on(120, ""), "coordinated");
    assert_rolled_and_kept_quorum(&ha, &statuses, &r);
    say(&format!(
        "coordinated_rolling_renewal_keeps_quorum: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// Issue 24: the shipped `[coordination]` defaults (`auto`, endpoint `https://127.0.0.1:2379`)
/// and nothing else. Each node learns its member name, the members and its client URL from
/// its own `/etc/default/etcd`, says so in `check`, and the rolling renewal keeps the quorum
/// as with an explicit configuration.
#[test]
fn auto_with_the_shipped_defaults_learns_the_members_and_keeps_quorum() {
    let Some(host) =
        host_or_skip("auto_with_the_shipped_defaults_learns_the_members_and_keeps_quorum")
    else {
        return;
    };
    let started = Instant::now();
    let config = format!(
        "lease_ttl_secs = {LEASE_TTL_SECS}
gate_timeout_secs = 120
"
    );
    let (ha, statuses, r) = renew_all_under_probe(host, &config, "auto");
    assert_rolled_and_kept_quorum(&ha, &statuses, &r);
    assert_check_coordinated(&ha, "/etc/default/etcd");
    say(&format!(
        "auto_with_the_shipped_defaults_learns_the_members_and_keeps_quorum: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// Issue 24: under `auto`, a client certificate the members reject (from a CA they do not
/// trust) no longer counts as "the cluster is down": every node holds its restarts and
/// raises 250.003 saying the members accept connections; no member is restarted.
#[test]
fn auto_with_a_client_the_members_reject_holds_and_alarms() {
    let Some(host) = host_or_skip("auto_with_a_client_the_members_reject_holds_and_alarms") else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    for n in 1..=MEMBERS {
        let d = |f: &str| ha.etc_etcd(n).join(f).display().to_string();
        common::openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &d("stranger.key"),
            "-subj",
            "/CN=stranger",
            "-days",
            "365",
            "-addext",
            "extendedKeyUsage=clientAuth",
            "-out",
            &d("stranger.crt"),
        ]);
    }
    let identity = "cert = \"/etc/etcd/stranger.crt\"\nkey = \"/etc/etcd/stranger.key\"\n\
                    ca = \"/etc/etcd/ca.crt\"\n";
    ha.write_config(&format!(
        "lease_ttl_secs = {LEASE_TTL_SECS}\ngate_timeout_secs = 10\n{identity}"
    ));
    every_restart_held(
        &ha,
        &[
            "accept connections",
            "restarts are held",
            "in the TLS handshake: received fatal alert",
        ],
    );
    say(&format!(
        "auto_with_a_client_the_members_reject_holds_and_alarms: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// Runs the three passes; no etcd member may be restarted, and each node's one 250.003 says
/// each of `says` (case aside).
fn every_restart_held(ha: &Ha, says: &[&str]) {
    let etcd_before = ha.invocations(ETCD);
    let (statuses, _) = run_passes(ha);
    assert_eq!(
        ha.invocations(ETCD),
        etcd_before,
        "a member was restarted without the lock"
    );
    for (i, status) in statuses.iter().enumerate() {
        let n = i + 1;
        say(&format!("node{n}: {status}"));
        let reason = one_250_003(ha, n);
        say(&format!("node{n}: 250.003: {reason}"));
        for s in says {
            assert!(
                reason.to_lowercase().contains(&s.to_lowercase()),
                "node{n}: the alarm does not say {s:?}: {reason}"
            );
        }
    }
}

/// Every node's pass ok, the turns taken and said, the quorum (2 of 3 healthy, or the write committed) at every
/// sample, no write outage longer than an election, no alarm, nothing left locked.
fn assert_rolled_and_kept_quorum(ha: &Ha, statuses: &[String], r: &Report) {
    for (n, status) in statuses.iter().enumerate() {
        assert!(status.contains("last pass: ok"), "node{}: {status}", n + 1);
    }
    assert_turns_were_taken_and_said(ha);
    assert_quorum_kept(r);
    let outage = r.longest_write_outage();
    assert!(
        outage.length <= ELECTION,
        "a write outage of {} ms (from {}) is longer than a leader election ({} ms)\n{}",
        outage.length.as_millis(),
        r.wall(outage.from),
        ELECTION.as_millis(),
        r.summary()
    );
    let alarms = all_alarms(ha);
    assert!(alarms.is_empty(), "alarms: {alarms:#?}");
    assert_lock_free(ha);
}

/// Issue 25 on three booted controllers: the cluster's CA, its key on every controller (as
/// StarlingX keeps it), has 250 days left (openssl under faketime: inside the one-year CA
/// window) and every leaf is due. The three daemons, started in the same second, re-issue
/// the CA once for the cluster through etcd: identical `ca.crt` on every node, not the old
/// one; every node's copies of it (`/etc/etcd/ca-bundle.pem`, the bundle etcd checks its
/// peers with, and `/etc/kubernetes/admin.conf`'s certificate-authority-data) replaced with
/// it, every other byte as made; every leaf renewed and served; the probe, which trusts only
/// the old CA certificate, kept its quorum throughout; no alarm.
#[test]
fn a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum() {
    let Some(host) =
        host_or_skip("a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum")
    else {
        return;
    };
    let started = Instant::now();
    let mkpki = ["--backdate", "--ca-left", "250"];
    let (ha, statuses, r) = renew_under_probe(host, &mkpki, &coordination_on(120, ""), "ca");
    assert_rolled_and_kept_quorum(&ha, &statuses, &r);
    // Nothing left due: the bundle's copy of the CA followed it.
    for s in &statuses {
        assert!(
            s.contains("watched, 0 due") && s.contains("1 copy of a renewed CA replaced with it"),
            "{s}"
        );
    }
    // The probe's copy of the CA is the old certificate, as made.
    let old = std::fs::read(ha.pki.join("probe/ca.crt")).unwrap();
    let first = std::fs::read(ha.etc_etcd(1).join("ca.crt")).unwrap();
    assert_ne!(first, old, "node1: the CA was not re-issued");
    for n in 2..=MEMBERS {
        assert_eq!(
            std::fs::read(ha.etc_etcd(n).join("ca.crt")).unwrap(),
            first,
            "node{n} holds another re-issue of the CA"
        );
    }
    // Every node's copies carry the renewed CA, every other byte as made: the peer trust
    // bundle etcd runs on (another CA before it) and admin.conf's certificate-authority-data.
    for n in 1..=MEMBERS {
        for (name, now) in [
            ("ca-bundle.pem", ha.etc_etcd(n).join("ca-bundle.pem")),
            (
                "admin.conf",
                ha.pki.join(format!("node{n}/etc/kubernetes/admin.conf")),
            ),
        ] {
            let made = fs::read(ha.pki.join(format!("probe/node{n}/{name}"))).unwrap();
            let want = common::pki::with_ca_copies_replaced(&made, &[(&old, &first)]);
            assert_eq!(
                Some(fs::read(&now).unwrap()),
                want,
                "node{n}: {}",
                now.display()
            );
        }
    }
    let said: Vec<String> = (1..=MEMBERS)
        .map(|n| {
            ha.node(n)
                .journal(&["-u", DAEMON, "--grep", "etcd key", "-o", "cat"])
        })
        .collect();
    let published = said
        .iter()
        .filter(|j| j.contains("published for the cluster"))
        .count();
    let taken = said
        .iter()
        .filter(|j| j.contains("where another controller published it"))
        .count();
    say(&format!("ha ca: {}", said.join("\n")));
    assert_eq!((published, taken), (1, 2), "{said:#?}");
    say(&format!(
        "a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn a_member_down_before_the_pass_holds_every_restart() {
    let Some(host) = host_or_skip("a_member_down_before_the_pass_holds_every_restart") else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config(&coordination_on(10, ""));
    let due = ha.due();
    // node3's member is down (its machine is in maintenance); its daemon does not run.
    ha.node(3).systemctl(&["stop", ETCD]).unwrap();
    let etcd_before = ha.invocations(ETCD);
    ha.start_daemons(&[1, 2]);
    let deadline = Instant::now() + PASS_TIMEOUT;
    for n in [1, 2] {
        let status = ha.wait_pass(n, "", deadline);
        say(&format!("node{n}: {status}"));
    }
    let etcd_after = ha.invocations(ETCD);
    assert_eq!(
        etcd_before[..2],
        etcd_after[..2],
        "a member was restarted while node3 was down"
    );
    // The files are renewed all the same, and stay installed.
    for d in due.iter().filter(|d| d.node != 3) {
        assert_ne!(
            common::x509(&d.host, &["-enddate"]),
            d.not_after,
            "{} was not renewed",
            d.host.display()
        );
    }
    for n in [1, 2] {
        let reason = one_250_003(&ha, n);
        say(&format!("node{n}: 250.003: {reason}"));
        assert!(
            reason.contains("node3"),
            "node{n}: the alarm does not name node3: {reason}"
        );
    }
    assert_lock_free(&ha);
    say(&format!(
        "a_member_down_before_the_pass_holds_every_restart: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn a_lock_holder_killed_while_holding_loses_the_lock_after_its_lease() {
    let Some(host) = host_or_skip("a_lock_holder_killed_while_holding") else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config(&coordination_on(120, ""));
    let due = ha.due();
    run_passes_killing_the_first_holder(&ha);
    // Every member back and healthy, every certificate renewed and served, nothing locked.
    ha.wait_cluster_healthy();
    ha.assert_renewed_and_served(&due);
    assert_lock_free(&ha);
    say(&format!(
        "a_lock_holder_killed_while_holding_loses_the_lock_after_its_lease: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

fn run_passes_killing_the_first_holder(ha: &Ha) {
    let all: Vec<usize> = (1..=MEMBERS).collect();
    ha.start_daemons(&all);
    let deadline = Instant::now() + PASS_TIMEOUT;
    let holder = wait_holder(ha, &all, deadline);
    let killed_run = ha
        .node(holder)
        .unit_property(DAEMON, "InvocationID")
        .unwrap();
    ha.node(holder)
        .kill_main(DAEMON, "KILL")
        .unwrap_or_else(|e| panic!("{e:#}"));
    let killed = Instant::now();
    say(&format!(
        "ha: SIGKILLed certrenewd on node{holder}, the lock holder"
    ));
    let others: Vec<usize> = all.iter().copied().filter(|&n| n != holder).collect();
    let next = wait_holder(ha, &others, deadline);
    let waited = killed.elapsed();
    say(&format!(
        "ha: node{next} took the lock {} ms after the kill (lease TTL {LEASE_TTL_SECS} s)",
        waited.as_millis()
    ));
    let ttl = Duration::from_secs(LEASE_TTL_SECS);
    assert!(
        waited + Duration::from_secs(1) >= ttl && waited <= ttl + Duration::from_secs(15),
        "node{next} took the lock {waited:?} after the holder died (TTL {ttl:?})"
    );
    for &n in &others {
        let status = ha.wait_pass(n, "", deadline);
        say(&format!("node{n}: {status}"));
        assert!(status.contains("last pass: ok"), "node{n}: {status}");
    }
    // systemd restarts the killed daemon (Restart=on-failure, RestartSec=30s); its next pass
    // does the restarts it still owes, under the lock.
    let status = ha.wait_pass(holder, &killed_run, Instant::now() + PASS_TIMEOUT);
    say(&format!("node{holder} after its restart: {status}"));
    // The restart the killed pass owed is done by that one pass, once: not zero times, and
    // not left for a later pass.
    assert!(
        status.contains("last pass: ok (")
            && status.contains(", 0 renewed, 0 failed, 1 units restarted, 0 not active)"),
        "node{holder}: the owed restart was not redone exactly once: {status}"
    );
}

#[test]
fn expired_everywhere_renews_and_the_cluster_comes_back() {
    let Some(host) = host_or_skip("expired_everywhere_renews_and_the_cluster_comes_back") else {
        return;
    };
    let started = Instant::now();
    // The cluster was off while its certificates expired: no member can reach another.
    let ha = Ha::boot(host, &["--expired"]);
    ha.assert_cluster_down(Duration::from_secs(5));
    ha.write_config(&coordination_on(60, ""));
    let due = ha.due();
    let (statuses, wall) = run_passes(&ha);
    say(&format!(
        "ha expired: passes done {:.1} s after the first start",
        wall.as_secs_f64()
    ));
    for (i, status) in statuses.iter().enumerate() {
        let n = i + 1;
        say(&format!("node{n}: {status}"));
        assert!(
            status.contains("last pass: ok"),
            "node{n}: {status}\nits alarms: {:#?}\nits decisions:\n{}",
            ha.alarms(n),
            gate_lines(&ha, n)
        );
    }
    ha.wait_cluster_healthy();
    ha.assert_renewed_and_served(&due);
    // Which branch of the rule each node took: Debian's etcd 3.4 reads its certificate files
    // at every handshake, so the members find each other as soon as the files are renewed;
    // a node that asked before that found nobody answering and restarted without the lock.
    for n in 1..=MEMBERS {
        let journal = ha.node(n).journal(&["-u", DAEMON, "-o", "cat"]);
        let branch = journal
            .lines()
            .find(|l| {
                l.contains("no etcd member answers") || l.contains("holding the restart lock")
            })
            .unwrap_or("(neither: see the journal)");
        say(&format!("node{n}: {branch}"));
    }
    let alarms = all_alarms(&ha);
    assert!(alarms.is_empty(), "alarms: {alarms:#?}");
    say(&format!(
        "expired_everywhere_renews_and_the_cluster_comes_back: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// What node n's daemon logged about the restart lock and the members (the lines that say
/// which way a pass went), for a failure message.
fn gate_lines(ha: &Ha, n: usize) -> String {
    let journal = ha.node(n).journal(&["-u", DAEMON, "-o", "short-precise"]);
    let lines: Vec<&str> = journal
        .lines()
        .filter(|l| {
            ["lock", "member", "coordinat", "held", "restart"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    lines.join("\n")
}

/// etcd auth on, as CKE runs it: users named by their certificate's CN; `root` (the probe and
/// the nodes' etcd-client.crt) is the admin; `certrenewd` may only touch /other/.
fn enable_auth_with_a_limited_user(ha: &Ha) {
    for args in [
        &["user", "add", "root", "--no-password"][..],
        &["user", "grant-role", "root", "root"],
        &["user", "add", "certrenewd", "--no-password"],
        &["role", "add", "elsewhere"],
        &[
            "role",
            "grant-permission",
            "elsewhere",
            "readwrite",
            "/other/",
            "--prefix=true",
        ],
        &["user", "grant-role", "certrenewd", "elsewhere"],
        &["auth", "enable"],
    ] {
        ha.etcdctl(1, args).unwrap_or_else(|e| panic!("{e:#}"));
    }
}

/// A client certificate CN=certrenewd for node n, not due, signed with openssl by the CA on
/// the node, beside the others in /etc/etcd.
fn certrenewd_identity(ha: &Ha, n: usize) {
    let dir = ha.etc_etcd(n);
    let d = |f: &str| dir.join(f).display().to_string();
    let ext = dir.join("certrenewd.ext");
    std::fs::write(&ext, "extendedKeyUsage = clientAuth\n").unwrap();
    common::openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &d("certrenewd.key"),
        "-subj",
        "/CN=certrenewd",
        "-out",
        &d("certrenewd.csr"),
    ]);
    common::openssl(&[
        "x509",
        "-req",
        "-in",
        &d("certrenewd.csr"),
        "-CA",
        &d("ca.crt"),
        "-CAkey",
        &d("ca.key"),
        "-days",
        "365",
        "-extfile",
        &d("certrenewd.ext"),
        "-out",
        &d("certrenewd.crt"),
    ]);
    for f in ["certrenewd.csr", "certrenewd.ext"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
}

#[test]
fn an_identity_without_permission_on_the_lock_prefix_alarms() {
    let Some(host) = host_or_skip("an_identity_without_permission_on_the_lock_prefix_alarms")
    else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    enable_auth_with_a_limited_user(&ha);
    for n in 1..=MEMBERS {
        certrenewd_identity(&ha, n);
    }
    let identity = "cert = \"/etc/etcd/certrenewd.crt\"\nkey = \"/etc/etcd/certrenewd.key\"\n\
                    ca = \"/etc/etcd/ca.crt\"\n";
    ha.write_config(&coordination_on(10, identity));
    every_restart_held(&ha, &["permission denied"]);
    say(&format!(
        "an_identity_without_permission_on_the_lock_prefix_alarms: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// benches/ha-rolling.sh: the rolling renewal of three nodes against one node's pass (`renew
/// --force` of node1's three certificates afterwards, under the same lock and gate), and the
/// longest write outage of each. Prints `BENCH key=value` lines.
#[test]
#[ignore = "a benchmark: benches/ha-rolling.sh"]
fn bench_rolling_renewal() {
    let Some(host) = host_or_skip("bench_rolling_renewal") else {
        return;
    };
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config(&coordination_on(120, ""));
    let probe = ha.probe();
    let (statuses, rolling) = run_passes(&ha);
    std::thread::sleep(Duration::from_secs(2));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    say(&r.summary());
    for (n, s) in statuses.iter().enumerate() {
        assert!(s.contains("last pass: ok"), "node{}: {s}", n + 1);
    }
    let rolling_outage = r.longest_write_outage().length;

    let probe = ha.probe();
    let t = Instant::now();
    ha.node(1)
        .run([
            "certrenewd",
            "renew",
            "--force",
            "/etc/etcd/etcd-server.crt",
            "/etc/etcd/etcd-peer.crt",
            "/etc/etcd/etcd-client.crt",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let single = t.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let r1 = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    say(&r1.summary());
    println!("BENCH rolling_3_nodes_ms={}", rolling.as_millis());
    println!(
        "BENCH rolling_write_outage_ms={}",
        rolling_outage.as_millis()
    );
    println!(
        "BENCH rolling_min_healthy={}",
        r.min_healthy().map_or(0, |m| m.0)
    );
    println!("BENCH one_node_pass_ms={}", single.as_millis());
    println!(
        "BENCH one_node_write_outage_ms={}",
        r1.longest_write_outage().length.as_millis()
    );
    println!("BENCH probe_samples={}", r.samples.len() + r1.samples.len());
}
