//! Three Debian controllers booted with systemd as PID 1 on one
//! network (tests/controllers/common/controllers.rs), each running Debian's etcd.service as one
//! member of a 3-member cluster with mutual TLS for clients and peers, every member's server, peer
//! and client certificate due together (tests/controllers/common/ha.rs), certrenewd's `.deb` on
//! each with the same configuration, all three daemons started in the same second. A probe
//! (tests/controllers/common/etcd_probe.rs) checks every member's health and writes through the
//! cluster every 200 ms the whole time.
//!
//! - `uncoordinated_passes_lose_quorum`: today's behaviour (no coordination): every node
//!   restarts its member at once and the probe sees the cluster lose quorum. This proves the
//!   probe catches what the coordinated run must avoid.
//! - `coordinated_rolling_renewal_keeps_quorum`: `[coordination]` on, the client identity
//!   auto-detected (StarlingX's /etc/etcd/etcd-client.crt): every certificate renewed and
//!   served, at every sample at least 2 of 3 members healthy or the write committed, no write
//!   outage longer than one leader election, no alarm.
//! - `reloaded_under_the_lock_no_member_restarts_and_all_three_stay_healthy`: the same with
//!   the shipped `on_renew = "reload"` (the others say `"restart"`): every certificate renewed in turn
//!   under the lock and served, no member restarted, all 3 healthy at every sample.
//! - Failure paths, each on a cluster of its own: a member down before the pass; the lock
//!   holder SIGKILLed while holding; every certificate already expired (the cluster is down
//!   until the files are renewed); an etcd identity without permission on the lock prefix
//!   (etcd auth with CN users, as CKE).
//! - `a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum`: the
//!   cluster's CA within its window is re-issued once, through etcd, with identical bytes on
//!   every node and in every node's copies (the peer trust bundle, admin.conf), the quorum
//!   kept.
//! - `a_local_member_down_on_expired_certificates_is_started_at_once`: one controller's
//!   member crash-looped on expired certificates until its start limit; its daemon (which ran
//!   before, its member list on record) starts it at once under the lock, the other two
//!   keeping the quorum.
//! - `a_majority_failed_at_its_start_limit_is_started_without_the_lock`: two controllers'
//!   members failed at their start limit, the third up alone without a leader; both
//!   daemons start their own member without the lock, and the cluster is whole within
//!   seconds.
//! - `a_member_added_during_the_lock_wait_holds_the_etcd_restart`: while node1's daemon waits
//!   for the lock (held by `etcdctl lock` on node2), a fourth member is added and never
//!   started; once node1 has the lock, its etcd restart is held (2 of 4 would stay healthy,
//!   3 are a quorum), with 250.003 naming the added member.
//! - `a_renewal_from_a_clock_ahead_is_refused_on_the_first_controller_and_goes_no_further`:
//!   node1's certrenewd runs two days ahead (libfaketime by a drop-in); the other members
//!   refuse what it issues, it puts it back, and nodes 2 and 3 install nothing at their
//!   turns, naming node1's clock; the clock set right, all three renew, no member restarted.
//! - `bench_rolling_renewal` (ignored; benches/ha-rolling.sh): wall time of the rolling
//!   renewal against one node's pass, and the longest write outage.
//! - `bench_recovery_everything_expired` (ignored; benches/ha-recovery.sh): the time from
//!   the daemons' start until a cluster whose every certificate expired is healthy and
//!   renewed, and the passes and waits it took.

use crate::common;

use std::fs;
use std::time::{Duration, Instant};

use common::controllers::{Host, host_or_skip};
use common::etcd_probe::{Probe, Report, Sample};
use common::ha::{
    DAEMON, Due, ETCD, Ha, LEASE_TTL_SECS, MEMBERS, PASS_TIMEOUT, STATE_DIR, all_alarms,
    assert_check_coordinated, assert_kept_up_in_turn, assert_lock_free, assert_pairs_accepted,
    assert_quorum_kept, assert_turns_were_taken_and_said, coordination_on, one_250_003, run_passes,
    say, wait_holder,
};
use common::x509;

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
    renew_under_probe(host, &["--backdate"], config, what, |_| {})
}

/// [`renew_all_under_probe`] on a PKI made by mkpki with `mkpki_args`.
fn renew_under_probe(
    host: &Host,
    mkpki_args: &[&str],
    config: &str,
    what: &str,
    prepare: fn(&Ha),
) -> (Ha, Vec<String>, Report) {
    let shipped = Shipped { config, edits: &[] };
    renew_with(host, mkpki_args, shipped, what, prepare, Etcd::Restarted)
}

/// The shipped configuration with `config` in its `[coordination]` table and `edits`.
struct Shipped<'a> {
    config: &'a str,
    edits: &'a [(&'a str, &'a str)],
}

/// What becomes of every node's etcd.service in a pass.
enum Etcd {
    /// Restarted (`on_renew = "restart"` written in every watch).
    Restarted,
    /// Kept running (the shipped configuration).
    Kept,
    /// Stopped and started again (the shipped configuration with `rotate_keys`).
    Cycled,
}

/// [`renew_under_probe`] with the shipped configuration edited, every member's etcd
/// restarted (`on_renew = "restart"`) or kept (the shipped default) as `etcd` says.
fn renew_with(
    host: &Host,
    mkpki_args: &[&str],
    shipped: Shipped<'_>,
    what: &str,
    prepare: fn(&Ha),
    etcd: Etcd,
) -> (Ha, Vec<String>, Report) {
    let ha = Ha::boot(host, mkpki_args);
    ha.wait_cluster_healthy();
    prepare(&ha);
    match etcd {
        Etcd::Restarted => ha.write_config_edited(shipped.config, shipped.edits),
        Etcd::Kept | Etcd::Cycled => ha.write_config_as_shipped(shipped.config, shipped.edits),
    }
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
        match etcd {
            Etcd::Restarted | Etcd::Cycled => assert_ne!(
                etcd_before[n], etcd_after[n],
                "node{node}: etcd was not restarted"
            ),
            Etcd::Kept => assert_eq!(
                etcd_before[n], etcd_after[n],
                "node{node}: etcd was restarted"
            ),
        }
    }
    ha.assert_renewed_and_served(&due);
    (ha, statuses, r)
}

/// Each member's etcd takes 5 s to start (a drop-in's `ExecStartPre=sleep 5`), as a member
/// with a large database does: three restarts begun within 10 s of one another then always
/// overlap two by two, so the negative control does not hang on the chance that three quick
/// restarts, each under a second, happened to miss one another.
fn slow_etcd_starts(ha: &Ha) {
    for n in 1..=MEMBERS {
        let node = ha.node(n);
        let dropin = "/etc/systemd/system/etcd.service.d/slow-start.conf";
        node.run(["mkdir", "-p", "/etc/systemd/system/etcd.service.d"])
            .unwrap_or_else(|e| panic!("node{n}: {e:#}"));
        node.write_file(dropin, b"[Service]\nExecStartPre=/bin/sleep 5\n", 0o644)
            .unwrap_or_else(|e| panic!("node{n}: {e:#}"));
        node.systemctl(&["daemon-reload"])
            .unwrap_or_else(|e| panic!("node{n}: {e:#}"));
    }
}

#[test]
fn uncoordinated_passes_lose_quorum() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let (_ha, _, r) = renew_under_probe(
        host,
        &["--backdate"],
        COORDINATION_OFF,
        "uncoordinated",
        slow_etcd_starts,
    );
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
    let Some(host) = host_or_skip() else {
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

/// The shipped configuration (`on_renew = "reload"` by default), every member's
/// certificates due: each controller renews its member's serving and peer certificates
/// under the restart lock, in turn, and shows them served on the member's client and peer
/// URLs, verified as its clients verify them; no member restarts (its systemd invocation
/// kept), and the probe sees all 3 members healthy and every write committed at every
/// sample.
#[test]
fn reloaded_under_the_lock_no_member_restarts_and_all_three_stay_healthy() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let shipped = Shipped {
        config: &coordination_on(120, ""),
        edits: &[],
    };
    let (ha, statuses, r) = renew_with(
        host,
        &["--backdate"],
        shipped,
        "reloaded",
        |_| {},
        Etcd::Kept,
    );
    for (n, status) in statuses.iter().enumerate() {
        assert!(
            status.contains("last pass: ok") && status.contains(", 1 reloaded (not restarted)"),
            "node{}: {status}",
            n + 1
        );
    }
    assert_kept_up_in_turn(&ha, &r);
    assert_pairs_accepted(
        &ha,
        &["/etc/etcd/etcd-client.crt"],
        "/etc/etcd/etcd-peer.crt",
    );
    say(&format!(
        "reloaded_under_the_lock_no_member_restarts_and_all_three_stay_healthy: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// With `rotate_keys = true` (StarlingX's example sets it), the shipped configuration
/// otherwise: a member reads its pair on every handshake, and a new key and its
/// certificate are two renames, so each member is stopped at its turn under the lock, its
/// new pairs installed with nothing reading them, and started again; one at a time, the
/// quorum kept, every renewed pair served, no alarm.
#[test]
fn rotated_keys_are_installed_with_each_member_stopped_in_turn() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let shipped = Shipped {
        config: &coordination_on(120, ""),
        edits: &[("rotate_keys = false", "rotate_keys = true")],
    };
    let (ha, statuses, r) = renew_with(
        host,
        &["--backdate"],
        shipped,
        "rotate-keys",
        |_| {},
        Etcd::Cycled,
    );
    assert_rolled_and_kept_quorum(&ha, &statuses, &r);
    for n in 1..=MEMBERS {
        let said = ha.node(n).journal(&["-u", DAEMON, "-o", "cat"]);
        assert!(
            said.contains("etcd.service stopped to install its new key pairs"),
            "node{n}: {said}"
        );
    }
    say(&format!(
        "rotated_keys_are_installed_with_each_member_stopped_in_turn: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// The shipped `[coordination]` defaults (`auto`, endpoint `https://127.0.0.1:2379`)
/// and nothing else. Each node learns its member name, the members and its client URL from
/// its own `/etc/default/etcd` (Debian's etcd.service reads it, and systemd says so), says
/// so in `check`, and the rolling renewal keeps the quorum as with an explicit
/// configuration.
#[test]
fn auto_with_the_shipped_defaults_learns_the_members_and_keeps_quorum() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let (ha, statuses, r) = renew_all_under_probe(host, &shipped_defaults(120), "auto");
    assert_rolled_and_kept_quorum(&ha, &statuses, &r);
    // Debian's etcd.service takes its settings from /etc/default/etcd: check names the
    // unit as systemd runs it, with that file.
    assert_check_coordinated(
        &ha,
        "etcd.service (as systemd runs it, with /etc/default/etcd)",
    );
    say(&format!(
        "auto_with_the_shipped_defaults_learns_the_members_and_keeps_quorum: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// The shipped `[coordination]` defaults (`auto`, endpoint `https://127.0.0.1:2379`) with the
/// tests' lease TTL and `gate_timeout_secs`: each node finds its cluster from its own
/// `/etc/default/etcd` and the member list etcd gave its last pass.
fn shipped_defaults(gate_timeout_secs: u64) -> String {
    format!("lease_ttl_secs = {LEASE_TTL_SECS}\ngate_timeout_secs = {gate_timeout_secs}\n")
}

/// Under `auto`, a client certificate the members reject (from a CA they do not
/// trust) no longer counts as "the cluster is down": every node holds its restarts and
/// raises 250.003 saying the members accept connections; no member is restarted.
#[test]
fn auto_with_a_client_the_members_reject_holds_and_alarms() {
    let Some(host) = host_or_skip() else {
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

/// Every node's pass ok, the turns taken and said, the quorum (2 of 3 healthy, or the write
/// committed) at every sample, no write outage longer than an election, no alarm, nothing left
/// locked.
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

/// A CA re-issued on three booted controllers: the cluster's CA, its key on every controller (as
/// StarlingX keeps it), has 250 days left (openssl under faketime: inside the one-year CA
/// window) and every leaf is due. The three daemons, started in the same second, re-issue
/// the CA once for the cluster through etcd: identical `ca.crt` on every node, not the old
/// one; every node's copies of it (`/etc/etcd/ca-bundle.pem`, the bundle etcd checks its
/// peers with, and `/etc/kubernetes/admin.conf`'s certificate-authority-data) replaced with
/// it, every other byte as made; every leaf renewed and served; the probe, which trusts only
/// the old CA certificate, kept its quorum throughout; no alarm.
#[test]
fn a_ca_near_its_end_is_renewed_once_for_the_cluster_keeping_quorum() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let mkpki = ["--backdate", "--ca-left", "250"];
    let (ha, statuses, r) =
        renew_under_probe(host, &mkpki, &coordination_on(120, ""), "ca", |_| {});
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

/// node1's clock runs two days ahead (libfaketime preloaded into its certrenewd by a
/// drop-in), so what it issues is not yet valid for anyone else, as on a controller whose
/// clock drifted: its renewal at its turn is refused by the other members and put back, and
/// goes no further (nodes 2 and 3 install nothing at their turns while node1's refusal
/// stands), with no member restarted and the quorum kept. Its clock put right, node1's next
/// pass renews and lifts the hold, and the others' renew.
#[test]
fn a_renewal_from_a_clock_ahead_is_refused_on_the_first_controller_and_goes_no_further() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let what = "clock-ahead";
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config_as_shipped(&coordination_on(120, ""), &[]);
    let node1 = ha.node(1);
    let lib = "/usr/local/lib/faketime/libfaketime.so.1";
    let dropin = "/etc/systemd/system/certrenewd.service.d/clock-ahead.conf";
    node1
        .run([
            "mkdir",
            "-p",
            "/usr/local/lib/faketime",
            "/etc/systemd/system/certrenewd.service.d",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let bytes = fs::read(common::libfaketime()).unwrap();
    node1.write_file(lib, &bytes, 0o644).unwrap();
    let text = format!("[Service]\nEnvironment=LD_PRELOAD={lib} FAKETIME=+2d\n");
    node1.write_file(dropin, text.as_bytes(), 0o644).unwrap();
    node1.systemctl(&["daemon-reload"]).unwrap();
    let due = ha.due();
    let etcd_before = ha.invocations(ETCD);
    let probe = ha.probe();
    let deadline = Instant::now() + PASS_TIMEOUT;
    ha.start_daemons(&[1]);
    let first = ha.wait_pass(1, "", deadline);
    ha.start_daemons(&[2, 3]);
    let others: Vec<String> = [2, 3]
        .iter()
        .map(|&n| ha.wait_pass(n, "", deadline))
        .collect();
    say(&format!(
        "node1: {first}\nnode2: {}\nnode3: {}",
        others[0], others[1]
    ));
    let kept = |n: usize, name: &str| {
        let d = due.iter().find(|d| d.node == n && d.name == name).unwrap();
        x509(&d.host, &["-enddate"]) == d.not_after
    };
    assert!(first.contains("last pass: FAILED"), "node1: {first}");
    let refused = one_250_003(&ha, 1);
    assert!(
        refused.contains("refused") && refused.contains("put back"),
        "node1: {refused}"
    );
    for name in ["etcd-server", "etcd-peer", "etcd-client"] {
        assert!(kept(1, name), "node1's {name} was not put back: {refused}");
    }
    for n in 2..=MEMBERS {
        let held = one_250_003(&ha, n);
        assert!(
            held.contains("a renewal at its turn was refused on node1")
                && held.contains("node1's clock read 2.0 days ahead of this one"),
            "node{n}: {held}"
        );
        for name in ["etcd-server", "etcd-peer"] {
            assert!(kept(n, name), "node{n}'s {name} was installed: {held}");
        }
    }
    assert_eq!(ha.invocations(ETCD), etcd_before, "no member restarted");

    // The clock put right: node1's clock check refuses a pass until the operator says the
    // earlier one ran ahead, as it tells them; then its pass renews and lifts its refusal,
    // and the others follow.
    node1.run(["rm", dropin]).unwrap();
    node1.systemctl(&["daemon-reload"]).unwrap();
    let runs = ha.invocations(DAEMON);
    let deadline = Instant::now() + PASS_TIMEOUT;
    node1.systemctl(&["restart", DAEMON]).unwrap();
    let checked = ha.wait_pass(1, &runs[0], deadline);
    let clock = format!("{STATE_DIR}/clock.json");
    assert!(
        checked.contains("refused by the clock check") && checked.contains(&clock),
        "node1: {checked}"
    );
    node1.run(["rm", &clock]).unwrap();
    let run = node1.unit_property(DAEMON, "InvocationID").unwrap();
    node1.systemctl(&["restart", DAEMON]).unwrap();
    let again = ha.wait_pass(1, &run, deadline);
    for n in 2..=MEMBERS {
        ha.node(n).systemctl(&["restart", DAEMON]).unwrap();
    }
    let after: Vec<String> = (2..=MEMBERS)
        .map(|n| ha.wait_pass(n, &runs[n - 1], deadline))
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    report(what, &r, started.elapsed());
    ha.keep_journals(what);
    say(&format!(
        "node1: {again}\nnode2: {}\nnode3: {}",
        after[0], after[1]
    ));
    for status in std::iter::once(&again).chain(&after) {
        assert!(status.contains("last pass: ok"), "{status}");
    }
    ha.assert_renewed_and_served(&due);
    assert_eq!(ha.invocations(ETCD), etcd_before, "no member restarted");
    assert_quorum_kept(&r);
    let alarms = all_alarms(&ha);
    assert!(alarms.is_empty(), "alarms: {alarms:#?}");
    say(&format!(
        "a_renewal_from_a_clock_ahead_is_refused_on_the_first_controller_and_goes_no_further: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn a_member_down_before_the_pass_holds_every_etcd_restart() {
    let Some(host) = host_or_skip() else {
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
        "a_member_down_before_the_pass_holds_every_etcd_restart: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn a_lock_holder_killed_while_holding_loses_the_lock_after_its_lease() {
    let Some(host) = host_or_skip() else {
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
            && status.contains(", 0 renewed, 0 failed, 1 unit restarted, 0 not active)"),
        "node{holder}: the owed restart was not redone exactly once: {status}"
    );
}

/// Three controllers whose every certificate expired while they were off: booted, each
/// member stuck (no member can reach another), `[coordination]` on with `gate_timeout_secs`
/// 60. Returns the cluster and its certificates as made.
fn boot_expired(host: &Host) -> (Ha, Vec<Due>) {
    let ha = Ha::boot(host, &["--expired"]);
    ha.assert_cluster_down(Duration::from_secs(5));
    ha.write_config(&coordination_on(60, ""));
    let due = ha.due();
    (ha, due)
}

/// How a cluster came back from a full outage ([`recover`]), timed from the first of the
/// three daemons' starts.
struct Recovery {
    /// Each node's status after its first pass.
    statuses: Vec<String>,
    /// Until the probe saw every member healthy.
    healthy: Duration,
    /// Until every certificate's file was replaced by its renewal.
    renewed: Duration,
    /// Until the last of the three first passes ended.
    passes: Duration,
    /// The last wait each daemon's status told of before its first pass ended (what held
    /// the pass up once the cluster was back), if any.
    waited: Vec<String>,
    report: Report,
}

/// Starts the three daemons in the same second on a cluster that is down and waits until
/// every member is healthy (the probe, polled) and every file of `due` replaced (its bytes
/// compared: cheap enough to poll beside the cluster), then for each node's first pass.
fn recover(ha: &Ha, due: &[Due]) -> Recovery {
    let made: Vec<Vec<u8>> = due.iter().map(|d| fs::read(&d.host).unwrap()).collect();
    let probe = ha.probe_any();
    let nodes: Vec<usize> = (1..=MEMBERS).collect();
    let first = ha.start_daemons(&nodes)[0];
    let deadline = first + PASS_TIMEOUT;
    let (mut healthy, mut renewed) = (None, None);
    while healthy.is_none() || renewed.is_none() {
        let all_healthy = |s: &Sample| !s.blind && s.healthy_count() == MEMBERS;
        if healthy.is_none() && probe.samples().iter().any(all_healthy) {
            healthy = Some(first.elapsed());
        }
        let replaced = |(d, m): (&Due, &Vec<u8>)| fs::read(&d.host).is_ok_and(|now| now != *m);
        if renewed.is_none() && due.iter().zip(&made).all(replaced) {
            renewed = Some(first.elapsed());
        }
        if Instant::now() >= deadline {
            ha.keep_journals("recover");
            let lines: Vec<String> = nodes.iter().map(|&n| gate_lines(ha, n)).collect();
            panic!(
                "not recovered after {PASS_TIMEOUT:?} (every member healthy: {healthy:?}, every \
                 certificate renewed: {renewed:?})\n{}",
                lines.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = |n: usize| {
        let s = ha.node(n).unit_property(DAEMON, "StatusText");
        s.unwrap_or_default()
    };
    let passed = |s: &str| s.contains("last pass: ") && !s.contains("last pass: none yet");
    let mut waited = vec![String::new(); MEMBERS];
    while Instant::now() < deadline {
        let now: Vec<String> = nodes.iter().map(|&n| status(n)).collect();
        if now.iter().all(|s| passed(s)) {
            break;
        }
        for (w, s) in waited.iter_mut().zip(now) {
            if s.contains("waiting") {
                *w = s;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let statuses = nodes
        .iter()
        .map(|&n| ha.wait_pass(n, "", deadline))
        .collect();
    let passes = first.elapsed();
    let report = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    Recovery {
        statuses,
        healthy: healthy.unwrap_or_default(),
        renewed: renewed.unwrap_or_default(),
        passes,
        waited,
        report,
    }
}

impl Recovery {
    fn say(&self, what: &str) {
        say(&format!(
            "{what}: every member healthy {:.1} s, every certificate renewed {:.1} s, the \
             first passes done {:.1} s after the first start",
            self.healthy.as_secs_f64(),
            self.renewed.as_secs_f64(),
            self.passes.as_secs_f64()
        ));
        for (i, s) in self
            .waited
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
        {
            say(&format!("node{}, its last wait: {s}", i + 1));
        }
    }
}

#[test]
fn expired_everywhere_renews_and_the_cluster_comes_back() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    // The cluster was off while its certificates expired: no member can reach another.
    let (ha, due) = boot_expired(host);
    let rec = recover(&ha, &due);
    rec.say("ha expired");
    for (i, status) in rec.statuses.iter().enumerate() {
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

/// A controller whose own etcd member crash-looped on expired certificates until systemd
/// gave up (start limit hit), the two others keeping the quorum. Its daemon ran before on the
/// healthy cluster (a real pass: the member list on record, as after any earlier renewal).
/// Its pass renews the files, takes the lock and starts the member at once, without waiting
/// for the other members' health: starting what is down takes nothing down. At least 2 of 3
/// members stay healthy throughout; node1's etcd is started exactly once.
#[test]
fn a_local_member_down_on_expired_certificates_is_started_at_once() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let (ha, earlier) = after_earlier_passes(host, &[1]);
    let earlier = &earlier[0];
    let probe = ha.probe();
    ha.node(1).systemctl(&["stop", ETCD]).unwrap();
    ha.expire_leaves(1);
    let due: Vec<Due> = ha.due().into_iter().filter(|d| d.node == 1).collect();
    crash_loop_until_start_limit(&ha, 1);
    // The starting point: node2 and node3 healthy under a leader (a new one if node1's was).
    let two = |s: &Sample| s.healthy_count() == 2 && s.wrote && !s.healthy[0];
    let from = wait_sample(&probe, 0, two, Instant::now() + Duration::from_secs(30));
    let starts = ha.unit_starts(1, ETCD);
    let at = ha.start_daemons(&[1])[0];
    let up = |s: &Sample| s.healthy[0];
    wait_sample(&probe, from, up, at + PASS_TIMEOUT);
    let to_healthy = at.elapsed();
    let status = ha.wait_pass(1, earlier, at + PASS_TIMEOUT);
    std::thread::sleep(Duration::from_secs(2));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    ha.keep_journals("local-down");
    say(&format!(
        "node1: {status}\nnode1's member healthy {:.1} s after its daemon's start\n{}",
        to_healthy.as_secs_f64(),
        r.summary()
    ));
    let said = this_run_said(&ha, 1);
    say(&format!("node1's pass:\n{said}"));
    assert!(status.contains("last pass: ok"), "node1: {status}");
    for line in [
        "holding the restart lock",
        "this node's etcd member node1 is down (nothing listens at https://127.0.0.1:2379): the step for etcd.service goes ahead without waiting for the others",
        "released the restart lock",
    ] {
        assert!(said.contains(line), "node1 did not say {line:?}");
    }
    assert!(
        !said.contains("waiting for etcd member") && !said.contains("gate_timeout_secs"),
        "node1 waited for the others' health"
    );
    let alarms = ha.alarms(1);
    assert!(
        !alarms.iter().any(|a| a["id"] == "250.003"),
        "node1: {alarms:#?}"
    );
    let started_again = ha.unit_starts(1, ETCD) - starts;
    assert_eq!(
        started_again, 1,
        "node1's etcd started {started_again} times"
    );
    // From the daemon's start on, never fewer than 2 of 3 healthy.
    r.assert_awake();
    let since = r.seen().skip_while(|s| s.start < r.samples[from].start);
    let min = since.map(Sample::healthy_count).min().unwrap_or(0);
    say(&format!("node1 down: min healthy {min} of {MEMBERS}"));
    assert!(min >= 2, "fewer than 2 of 3 healthy\n{}", r.summary());
    // (Not `wait_cluster_healthy`: node2 and node3 rightly refused node1's expired
    // certificates while it crash-looped, in the runs of etcd they still run.)
    ha.wait_members_answer();
    ha.assert_renewed_and_served(&due);
    assert_lock_free(&ha);
    say(&format!(
        "a_local_member_down_on_expired_certificates_is_started_at_once: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// After an outage, two controllers' members crash-looped on expired certificates until
/// systemd gave up (start limit hit); the third member is up alone, without a leader, so it
/// grants no lease and no restart lock can be had. Both daemons (which ran before, the
/// member list on record) renew their files and start their own member without the lock:
/// node1's member lists each as a voter of the cluster its write-ahead log is of. The
/// cluster is whole again within seconds of the daemons' start, and both passes end ok.
#[test]
fn a_majority_failed_at_its_start_limit_is_started_without_the_lock() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let (ha, earlier) = after_earlier_passes(host, &[2, 3]);
    for n in [2, 3] {
        ha.node(n).systemctl(&["stop", ETCD]).unwrap();
        ha.expire_leaves(n);
    }
    let due: Vec<Due> = ha.due().into_iter().filter(|d| d.node != 1).collect();
    for n in [2, 3] {
        crash_loop_until_start_limit(&ha, n);
    }
    let probe = ha.probe_any();
    // The starting point: node1 answers alone, without a quorum.
    let alone = |s: &Sample| s.healthy_count() == 0 && !s.wrote;
    let from = wait_sample(&probe, 0, alone, Instant::now() + Duration::from_secs(30));
    let at = ha.start_daemons(&[2, 3])[0];
    let whole = |s: &Sample| s.healthy_count() == MEMBERS && s.wrote;
    wait_sample(&probe, from, whole, at + PASS_TIMEOUT);
    let to_whole = at.elapsed();
    let statuses = [2, 3].map(|n| ha.wait_pass(n, &earlier[n - 2], at + PASS_TIMEOUT));
    let r = probe.stop().unwrap_or_else(|e| panic!("{e:#}"));
    ha.keep_journals("majority-failed");
    say(&format!(
        "nodes 2 and 3: {statuses:?}\nthe cluster whole {:.1} s after the daemons' start\n{}",
        to_whole.as_secs_f64(),
        r.summary()
    ));
    let mut unlocked = 0;
    for (n, status) in [2, 3].into_iter().zip(&statuses) {
        let said = this_run_said(&ha, n);
        say(&format!("node{n}'s pass:\n{}", gate_lines(&ha, n)));
        assert!(status.contains("last pass: ok"), "node{n}: {status}");
        if said.contains("etcd has no leader") {
            assert!(
                said.contains("starting it without the lock"),
                "node{n}:\n{said}"
            );
            unlocked += 1;
        }
        let alarms = ha.alarms(n);
        assert!(
            !alarms.iter().any(|a| a["id"] == "250.003"),
            "node{n}: {alarms:#?}"
        );
    }
    assert!(unlocked >= 1, "no member was started without the lock");
    assert!(
        to_whole < Duration::from_secs(60),
        "the cluster whole only {to_whole:?} after the daemons' start"
    );
    ha.wait_members_answer();
    ha.assert_renewed_and_served(&due);
    assert_lock_free(&ha);
    say(&format!(
        "a_majority_failed_at_its_start_limit_is_started_without_the_lock: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// Three controllers booted with every etcd leaf due (`--backdate`), the shipped
/// configuration, and one earlier pass on each of `nodes` (their member list on record);
/// the cluster healthy. The earlier runs' InvocationIDs, in `nodes`' order.
fn after_earlier_passes(host: &Host, nodes: &[usize]) -> (Ha, Vec<String>) {
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config(&shipped_defaults(120));
    let earlier = nodes.iter().map(|&n| earlier_pass(&ha, n)).collect();
    ha.wait_cluster_healthy();
    (ha, earlier)
}

/// What node n's daemon has said in its current run, as plain lines.
fn this_run_said(ha: &Ha, n: usize) -> String {
    let run = ha.node(n).unit_property(DAEMON, "InvocationID").unwrap();
    ha.node(n)
        .journal(&[&format!("_SYSTEMD_INVOCATION_ID={run}"), "-o", "cat"])
}

/// One pass of node n's daemon on the healthy cluster (it renews the node's due leaves and
/// restarts its member under the lock, and records etcd's member list), then the daemon
/// stopped. Returns that run's InvocationID.
fn earlier_pass(ha: &Ha, n: usize) -> String {
    ha.start_daemons(&[n]);
    let status = ha.wait_pass(n, "", Instant::now() + PASS_TIMEOUT);
    say(&format!("node{n}, an earlier pass: {status}"));
    assert!(status.contains("last pass: ok"), "node{n}: {status}");
    let roster = format!("{STATE_DIR}/etcd-members.json");
    let kept = ha
        .node(n)
        .read_file(&roster)
        .unwrap_or_else(|e| panic!("{e:#}"));
    say(&format!(
        "node{n}: {roster}: {}",
        String::from_utf8_lossy(&kept)
    ));
    let run = ha.node(n).unit_property(DAEMON, "InvocationID").unwrap();
    ha.node(n).systemctl(&["stop", DAEMON]).unwrap();
    run
}

/// Node n's etcd started and SIGKILLed whenever it runs (Debian's Restart=on-abnormal starts
/// it again) until systemd gives up at its start limit (5 starts in 10 s): as a member
/// crash-looping on expired certificates ends, failed.
fn crash_loop_until_start_limit(ha: &Ha, n: usize) {
    let script = format!(
        "systemctl start --no-block {ETCD}
         for i in $(seq 60); do
             state=$(systemctl show -P ActiveState {ETCD})
             if [ \"$state\" = failed ] &&
                journalctl -u {ETCD} -o cat | grep -q 'Start request repeated too quickly'; then
                 exit 0
             fi
             systemctl kill -s KILL {ETCD} 2>/dev/null || true
             sleep 0.3
         done
         echo \"{ETCD} is $state\" >&2; exit 1"
    );
    ha.node(n).sh(&script).unwrap_or_else(|e| panic!("{e:#}"));
    say(&format!("node{n}: {ETCD} failed (start-limit-hit)"));
}

/// Waits until a sample after the first `skip` (in the order they started), seen awake,
/// passes `ok`; returns its index.
fn wait_sample(
    probe: &Probe,
    skip: usize,
    ok: impl Fn(&Sample) -> bool,
    deadline: Instant,
) -> usize {
    loop {
        let samples = probe.samples();
        let found = samples.iter().skip(skip).position(|s| !s.blind && ok(s));
        if let Some(i) = found {
            return skip + i;
        }
        assert!(
            Instant::now() < deadline,
            "the probe never saw it: {} samples",
            samples.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
    let Some(host) = host_or_skip() else {
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
    let Some(host) = host_or_skip() else {
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

/// benches/ha-recovery.sh: recovery from a full outage. Three controllers whose every
/// certificate expired while they were off, the three daemons started in the same second
/// (as `expired_everywhere_renews_and_the_cluster_comes_back`): the time until every member
/// was healthy and every certificate renewed, the passes it took, and what the journals say
/// of the waits. Prints `BENCH key=value` lines.
#[test]
#[ignore = "a benchmark: benches/ha-recovery.sh"]
fn bench_recovery_everything_expired() {
    bench_recovery("bench_recovery_everything_expired", false);
}

/// [`bench_recovery_everything_expired`] where every member crash-looped on its expired
/// certificates until its start limit before the daemons start: every etcd.service failed,
/// nothing listening.
#[test]
#[ignore = "a benchmark: benches/ha-recovery.sh"]
fn bench_recovery_everything_expired_members_failed() {
    bench_recovery("bench_recovery_everything_expired_members_failed", true);
}

/// The recovery benchmarks: with `failed`, every member's unit is failed first.
fn bench_recovery(test: &str, failed: bool) {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (ha, due) = boot_expired(host);
    if failed {
        for n in 1..=MEMBERS {
            crash_loop_until_start_limit(&ha, n);
        }
    }
    let rec = recover(&ha, &due);
    rec.say("ha recovery");
    ha.keep_journals(test);
    for (n, s) in rec.statuses.iter().enumerate() {
        say(&format!("node{}: {s}", n + 1));
    }
    // What every node's daemon said, counted over the three journals.
    let journals: Vec<String> = (1..=MEMBERS)
        .map(|n| ha.node(n).journal(&["-u", DAEMON, "-o", "cat"]))
        .collect();
    let count = |text: &str| -> usize { journals.iter().map(|j| j.matches(text).count()).sum() };
    let passes = count("pass starting (");
    let ok = rec
        .statuses
        .iter()
        .filter(|s| s.contains("last pass: ok"))
        .count();
    println!("BENCH recovery_to_healthy_ms={}", rec.healthy.as_millis());
    println!("BENCH recovery_to_renewed_ms={}", rec.renewed.as_millis());
    println!(
        "BENCH recovery_ms={}",
        rec.healthy.max(rec.renewed).as_millis()
    );
    println!("BENCH recovery_first_passes_ms={}", rec.passes.as_millis());
    println!("BENCH recovery_passes={passes}");
    println!("BENCH recovery_retries={}", passes.saturating_sub(MEMBERS));
    println!("BENCH recovery_first_passes_ok={ok}");
    println!(
        "BENCH recovery_gate_timeouts={}",
        count("gate_timeout_secs")
    );
    println!(
        "BENCH recovery_lock_timeouts={}",
        count("lock_timeout_secs")
    );
    println!("BENCH recovery_lock_yields={}", count("released it for"));
    println!(
        "BENCH recovery_started_at_once={}",
        count("the step for etcd.service goes ahead")
    );
    println!(
        "BENCH recovery_without_lock={}",
        count("restarting without the lock")
    );
    // The gate's wait for a node's own member after its restart, with the lock held: the
    // journal does not say when it ran out on the last step, so it is timed here.
    let held = (1..=MEMBERS)
        .flat_map(|n| {
            ha.said_restarts(
                n,
                DAEMON,
                "restarted etcd.service",
                "released the restart lock",
            )
        })
        .filter(|d| d.to != u64::MAX)
        .map(|d| (d.to - d.from) / 1000)
        .max()
        .unwrap_or(0);
    println!("BENCH recovery_lock_held_after_restart_ms={held}");
    println!("BENCH recovery_alarms={}", all_alarms(&ha).len());
    println!("BENCH probe_samples={}", rec.report.samples.len());
    let before = if failed { "failed" } else { "activating" };
    println!("BENCH members_before={before}");
}

#[test]
fn a_member_added_during_the_lock_wait_holds_the_etcd_restart() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    ha.write_config(&coordination_on(10, ""));
    // The lock held by another holder for 20 s, as `etcdctl lock` takes it.
    let (ca, cert, key) = (ha.layout.ca, ha.layout.client.0, ha.layout.client.1);
    let hold = format!(
        "systemd-run --unit=hold-lock etcdctl --endpoints={} --cacert={ca} --cert={cert} --key={key} lock {} sleep 20",
        common::ha::endpoints().join(","),
        common::ha::LOCK_PREFIX
    );
    ha.node(2).sh(&hold).unwrap_or_else(|e| panic!("{e:#}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let prefix = format!("{}/", common::ha::LOCK_PREFIX);
    while ha
        .etcdctl(1, &["get", "--prefix", &prefix, "--keys-only"])
        .map_or(true, |o| o.trim().is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "etcdctl lock never held the lock"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let etcd_before = ha.invocations(ETCD);
    ha.start_daemons(&[1]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ha
        .node(1)
        .journal(&["-u", DAEMON, "-o", "cat"])
        .contains("waiting for the restart lock")
    {
        assert!(Instant::now() < deadline, "node1 never waited for the lock");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A fourth member, added and never started, while node1 waits.
    let deadline = Instant::now() + Duration::from_secs(30);
    let add = [
        "member",
        "add",
        "node4",
        "--peer-urls=https://127.0.0.4:2380",
    ];
    while let Err(e) = ha.etcdctl(1, &add) {
        assert!(Instant::now() < deadline, "{e:#}");
        std::thread::sleep(Duration::from_millis(500));
    }
    say("a fourth member added, never started, while node1 waits for the lock");
    let status = ha.wait_pass(1, "", Instant::now() + PASS_TIMEOUT);
    say(&format!("node1: {status}"));
    assert_eq!(
        ha.invocations(ETCD)[0],
        etcd_before[0],
        "node1's member was restarted with 2 of 4 members left healthy"
    );
    let reason = one_250_003(&ha, 1);
    say(&format!("node1: 250.003: {reason}"));
    assert!(reason.contains("added, never started"), "{reason}");
    assert!(
        reason.contains("2 of 4 voting members would stay healthy"),
        "{reason}"
    );
    ha.keep_journals("a_member_added_during_the_lock_wait_holds_the_etcd_restart");
    say(&format!(
        "a_member_added_during_the_lock_wait_holds_the_etcd_restart: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}
