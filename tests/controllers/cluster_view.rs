//! The cluster view on three booted controllers (tests/controllers/common/ha.rs): every
//! controller's certrenewd publishes its node record in etcd, `certrenewd check --cluster`
//! shows every member's, and every daemon raises, on the other controllers' behalf, the
//! alarms of a controller whose certrenewd stopped reporting (500.230) and of a shared file
//! that differs between controllers (500.250).
//!
//! - `cluster_view_names_a_quiet_controller_and_drift`: every leaf due (issued 355 days ago
//!   for 365, `mkpki.sh ha-etcd --backdate`), no pass at start so they stay due. With the three
//!   daemons running, `check --cluster` from node1 has 3 reporting and every node's due
//!   leaves. node2's certrenewd stopped: nodes 1 and 3 raise 500.230 `host=node2` within two
//!   lease TTLs, in `alarms` and the journal, and `check --cluster` has node2 missing; started
//!   again, they clear; each change of a node's alarms publishes its record again, and the
//!   view lists them under it. node3's etcd CA (certificate and key) replaced by another and its
//!   daemon reloaded: every node raises 500.250 `file=/etc/etcd/ca.crt` naming the nodes on
//!   each side, `check --cluster` has 1 drifted; the files put back, it clears everywhere.

use crate::common;

use std::fs;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use common::controllers::host_or_skip;
use common::ha::{CONFIG, DAEMON, Ha, LEASE_TTL_SECS, MEMBERS, coordination_on, say};

/// The alarm of a controller whose certrenewd does not report (no record, or a stale one).
const NOT_REPORTING: &str = "500.230";
/// The alarm of a shared file (a CA, a CA key's public half, sa.pub) that differs.
const DRIFT: &str = "500.250";
/// Where every node's daemon and `check --cluster` find the members' CA: a copy of the
/// cluster's CA outside the watched /etc/etcd. node3's /etc/etcd/ca.crt is replaced below by
/// a CA that did not sign the members' server certificates: had node3's client trusted it,
/// its daemon could no longer reach etcd to publish the record that shows the drift.
const TRUST: &str = "/etc/certrenewd/etcd-ca.crt";
/// What `check --cluster` fits its page to when its stdout is not a terminal.
const PIPED_COLUMNS: usize = 120;

/// How long the others take to see a record come or go: a daemon reads the cluster every
/// half lease TTL, and a stopped daemon's record goes with its lease at once; two TTLs, and
/// slack for a loaded 2-CPU machine running three controllers.
fn within_two_ttls() -> Duration {
    Duration::from_secs(2 * LEASE_TTL_SECS + 5)
}

#[test]
fn cluster_view_names_a_quiet_controller_and_drift() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let started = Instant::now();
    let ha = Ha::boot(host, &["--backdate"]);
    ha.wait_cluster_healthy();
    // No pass at start: the due leaves stay due, and nothing restarts etcd while the view is
    // looked at. The daemon still scans and publishes its record at start.
    let ca = ha.layout.ca;
    for n in 1..=MEMBERS {
        let made = fs::read(ha.on_host(n, ca)).unwrap();
        ha.node(n).write_file(TRUST, &made, 0o644).unwrap();
    }
    ha.write_config_edited(
        &coordination_on(120, &format!("ca = \"{TRUST}\"\n")),
        &[("run_on_start = true", "run_on_start = false")],
    );
    assert!(
        String::from_utf8(ha.node(1).read_file(CONFIG).unwrap())
            .unwrap()
            .contains("run_on_start = false")
    );

    // All three reporting, every node's due leaves listed.
    let daemons_started = ha.start_daemons(&[1, 2, 3])[0];
    let (text, waited) = wait_for(
        "check --cluster on node1: 3 controllers: 3 reporting",
        Duration::from_secs(60),
        || {
            let text = check_cluster(&ha, 1);
            text.starts_with(
                "3 controllers: 3 reporting, 0 stale, 0 missing, 0 drifted (seen from node1)",
            )
            .then_some(text.clone())
            .ok_or(text)
        },
    );
    say(&format!(
        "cluster_view: 3 reporting {:.1} s after the daemons' start",
        waited.as_secs_f64()
    ));
    let json = check_cluster_json(&ha, 1);
    say(&format!(
        "=== check --cluster from node1 ===\n{text}=== end ==="
    ));
    say(&format!(
        "=== check --cluster --output json from node1: node1's entry ===\n{:#}\n=== end ===",
        entry(&json, "node1")
    ));
    assert_eq!(json["this_node"], "node1", "{json:#}");
    for (count, want) in [
        ("controllers", 3),
        ("reporting", 3),
        ("stale", 0),
        ("missing", 0),
        ("drifted", 0),
    ] {
        assert_eq!(json["summary"][count], want, "summary.{count}: {json:#}");
    }
    for n in 1..=MEMBERS {
        let node = format!("node{n}");
        let c = entry(&json, &node);
        assert_eq!(c["state"], "reporting", "{c:#}");
        assert_eq!(c["drifted"], false, "{c:#}");
        assert!(c["member_id"].is_string(), "{c:#}");
        assert_eq!(c["record"]["node"], node.as_str(), "{c:#}");
        let certs = c["record"]["certificates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for &(_, leaf) in ha.layout.leaves {
            let listed = certs.iter().find(|x| x["path"] == leaf);
            let listed = listed.unwrap_or_else(|| panic!("{node}'s record lists no {leaf}: {c:#}"));
            assert_eq!(listed["role"], "leaf", "{node}: {listed}");
            assert_eq!(listed["status"], "due", "{node}: {listed}");
        }
        // The CA is one of the files the controllers compare.
        let shared = c["record"]["shared"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            shared.iter().any(|d| d["path"] == ca),
            "{node} shares no {ca}: {c:#}"
        );
        // The head line of its section.
        let id = c["member_id"].as_str().unwrap();
        assert!(
            text.contains(&format!("{node} (member {id}): reporting")),
            "no section for {node}:\n{text}"
        );
    }
    // Each leaf a row in each of the three sections, status due.
    for &(_, leaf) in ha.layout.leaves {
        let rows = text
            .lines()
            .filter(|l| l.contains(leaf) && l.split_whitespace().last() == Some("due"))
            .count();
        assert_eq!(
            rows, MEMBERS,
            "{leaf} due in {rows} sections, not {MEMBERS}:\n{text}"
        );
    }
    // No alarm once every daemon has read the cluster at least twice (first one TTL after
    // its start, then every half TTL): no pass ran (none failing, 500.240), nothing differs
    // (500.250), and the daemons, started one after the other, never called each other
    // quiet (500.230), not even for a moment.
    let read_twice = Duration::from_secs(2 * LEASE_TTL_SECS);
    std::thread::sleep(read_twice.saturating_sub(daemons_started.elapsed()));
    no_alarm_anywhere(&ha, "the three daemons started");
    for n in 1..=MEMBERS {
        let early = raises(&ha, n, NOT_REPORTING, None, 0);
        assert!(
            early.is_empty(),
            "node{n} called a controller quiet while the daemons started: {early:#?}"
        );
    }

    // node2's certrenewd stopped: nodes 1 and 3 say so.
    let before_stop = now_us();
    let t0 = Instant::now();
    ha.node(2)
        .systemctl(&["stop", DAEMON])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let stopping = t0.elapsed();
    wait_for(
        "500.230 host=node2 active on node1 and node3 after node2's certrenewd stopped",
        within_two_ttls(),
        || {
            let seen: Vec<String> = [1, 3]
                .iter()
                .map(|&n| format!("node{n}: {}", ids(&ha.alarms(n))))
                .collect();
            [1, 3]
                .iter()
                .all(|&n| active(&ha, n, NOT_REPORTING, "host=node2").is_some())
                .then_some(())
                .ok_or(seen.join("; "))
        },
    );
    let raised = t0.elapsed();
    say(&format!(
        "cluster_view: node2 stopped in {:.1} s; 500.230 host=node2 on node1 and node3 {:.1} s \
         after the stop began (bound {} s)",
        stopping.as_secs_f64(),
        raised.as_secs_f64(),
        within_two_ttls().as_secs()
    ));
    for n in [1, 3] {
        let a = active(&ha, n, NOT_REPORTING, "host=node2").unwrap();
        say(&format!("node{n}: {a}"));
    }
    let logged = raises(&ha, 1, NOT_REPORTING, Some("host=node2"), before_stop);
    assert!(
        !logged.is_empty(),
        "node1's journal has no raise of 500.230 host=node2 (ALARM_ID=500.230 ALARM_STATE=set) \
         since node2's certrenewd stopped:\n{}",
        ha.node(1).journal(&["-u", DAEMON, "-n", "40"])
    );
    say(&format!("node1's journal: {}", logged[0]["MESSAGE"]));
    let text = check_cluster(&ha, 1);
    assert!(
        text.starts_with("3 controllers: 2 reporting, 0 stale, 1 missing, 0 drifted"),
        "{text}"
    );
    let id2 = entry(&check_cluster_json(&ha, 1), "node2")["member_id"]
        .as_str()
        .map(str::to_string)
        .expect("node2's member ID");
    assert!(
        text.contains(&format!(
            "node2 (member {id2}): missing: certrenewd not running or not reporting"
        )),
        "{text}"
    );
    // A change of its alarms publishes a node's record again: the view lists, under node1
    // and node3, the alarm each raised on node2's behalf.
    let raised_for_2 = format!("{NOT_REPORTING} host=node2");
    let (json, _) = wait_for(
        "node1's and node3's records listing 500.230 host=node2",
        within_two_ttls(),
        || {
            let json = check_cluster_json(&ha, 1);
            let seen = [1, 3].map(|n| record_alarms(&json, &format!("node{n}")));
            let listed = seen.iter().all(|a| a.contains(&raised_for_2));
            listed.then_some(json).ok_or(format!("{seen:?}"))
        },
    );
    let text = check_cluster(&ha, 1);
    say(&format!(
        "=== check --cluster from node1, node2's certrenewd stopped ===\n{text}=== end ==="
    ));
    say(&format!(
        "=== check --cluster --output json from node1, node2's certrenewd stopped: node1's \
         entry ===\n{:#}\n=== end ===",
        entry(&json, "node1")
    ));
    for node in ["node1", "node3"] {
        let section = section(&text, node);
        assert!(
            section
                .lines()
                .any(|l| l == format!("  alarm {raised_for_2}")),
            "{node}'s section has no line `  alarm {raised_for_2}`:\n{section}"
        );
    }

    // node2's certrenewd back: the alarms clear.
    let t0 = Instant::now();
    ha.node(2)
        .systemctl(&["start", DAEMON])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let starting = t0.elapsed();
    wait_for(
        "500.230 host=node2 cleared on node1 and node3 after node2's certrenewd started",
        within_two_ttls(),
        || {
            let seen: Vec<String> = [1, 3]
                .iter()
                .map(|&n| format!("node{n}: {}", ids(&ha.alarms(n))))
                .collect();
            [1, 3]
                .iter()
                .all(|&n| active(&ha, n, NOT_REPORTING, "host=node2").is_none())
                .then_some(())
                .ok_or(seen.join("; "))
        },
    );
    say(&format!(
        "cluster_view: node2 started (ready) in {:.1} s; 500.230 cleared on node1 and node3 \
         {:.1} s after the start began (bound {} s after ready)",
        starting.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        within_two_ttls().as_secs()
    ));
    let cleared = ha.node(1).journal_json(&[
        &format!("ALARM_ID={NOT_REPORTING}"),
        "ALARM_STATE=clear",
        "ALARM_ENTITY=host=node2",
    ]);
    assert!(
        !cleared.is_empty(),
        "node1's journal has no clear of 500.230 host=node2"
    );
    let text = check_cluster(&ha, 1);
    assert!(
        text.starts_with("3 controllers: 3 reporting, 0 stale, 0 missing"),
        "{text}"
    );
    // ... and their records, published again, no longer list it.
    wait_for(
        "node1's and node3's records no longer listing 500.230 host=node2",
        within_two_ttls(),
        || {
            let json = check_cluster_json(&ha, 1);
            let seen = [1, 3].map(|n| record_alarms(&json, &format!("node{n}")));
            let gone = seen.iter().all(|a| !a.contains(&raised_for_2));
            gone.then_some(()).ok_or(format!("{seen:?}"))
        },
    );

    // node3's etcd CA and its key replaced by another CA: every node sees the drift.
    let (crt, key) = (
        ha.on_host(3, ca),
        ha.on_host(3, &ca.replace(".crt", ".key")),
    );
    let saved = (fs::read(&crt).unwrap(), fs::read(&key).unwrap());
    let other = tempfile::tempdir().unwrap();
    let (other_crt, other_key) = (other.path().join("ca.crt"), other.path().join("ca.key"));
    let (other_crt, other_key) = (
        other_crt.display().to_string(),
        other_key.display().to_string(),
    );
    common::openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &other_key,
        "-subj",
        "/CN=another etcd CA",
        "-days",
        "3650",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        &other_crt,
    ]);
    fs::write(&crt, fs::read(&other_crt).unwrap()).unwrap();
    fs::write(&key, fs::read(&other_key).unwrap()).unwrap();
    let t0 = Instant::now();
    ha.node(3)
        .systemctl(&["reload", DAEMON])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let entity = format!("file={ca}");
    wait_for(
        &format!("500.250 {entity} active on node1, node2 and node3 after node3's reload"),
        within_two_ttls(),
        || {
            let seen: Vec<String> = (1..=MEMBERS)
                .map(|n| format!("node{n}: {}", ids(&ha.alarms(n))))
                .collect();
            (1..=MEMBERS)
                .all(|n| active(&ha, n, DRIFT, &entity).is_some())
                .then_some(())
                .ok_or(seen.join("; "))
        },
    );
    say(&format!(
        "cluster_view: 500.250 {entity} on every node {:.1} s after node3's reload (bound {} s)",
        t0.elapsed().as_secs_f64(),
        within_two_ttls().as_secs()
    ));
    for n in 1..=MEMBERS {
        let all = ha.alarms(n);
        say(&format!("node{n}: alarms {}", ids(&all)));
        let a = active(&ha, n, DRIFT, &entity).unwrap();
        let reason = a["reason"].as_str().unwrap_or_default();
        say(&format!("node{n}: {a}"));
        assert!(
            reason.contains(&format!("{ca} differs between controllers: "))
                && reason.contains(" on node1, node2")
                && reason.contains(" on node3"),
            "node{n}: the reason does not name {ca} and the nodes on each side: {reason}"
        );
    }
    let drift_alarm = format!("{DRIFT} {entity}");
    wait_for(
        &format!("every node's record listing {drift_alarm}"),
        within_two_ttls(),
        || {
            let json = check_cluster_json(&ha, 1);
            let seen = [1, 2, 3].map(|n| record_alarms(&json, &format!("node{n}")));
            let listed = seen.iter().all(|a| a.contains(&drift_alarm));
            listed.then_some(()).ok_or(format!("{seen:?}"))
        },
    );
    let text = check_cluster(&ha, 1);
    say(&format!(
        "=== check --cluster from node1, node3 drifted ===\n{text}=== end ==="
    ));
    for n in 1..=MEMBERS {
        let section = section(&text, &format!("node{n}"));
        assert!(
            section
                .lines()
                .any(|l| l == format!("  alarm {drift_alarm}")),
            "node{n}'s section has no line `  alarm {drift_alarm}`:\n{section}"
        );
    }
    assert!(
        text.starts_with("3 controllers: 3 reporting, 0 stale, 0 missing, 1 drifted"),
        "{text}"
    );
    let drift_line = text
        .lines()
        .find(|l| l.starts_with(&format!("drift: {ca} differs between controllers: ")));
    let drift_line = drift_line.unwrap_or_else(|| panic!("no drift line for {ca}:\n{text}"));
    assert!(
        drift_line.contains(" on node1, node2") && drift_line.contains(" on node3"),
        "{drift_line}"
    );
    let head = section(&text, "node3")
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(head.ends_with(", drifted"), "node3's head line: {head}");
    let json = check_cluster_json(&ha, 1);
    assert_eq!(json["summary"]["drifted"], 1, "{json:#}");
    assert_eq!(entry(&json, "node3")["drifted"], true);
    assert_eq!(entry(&json, "node1")["drifted"], false);

    // The files put back byte for byte: the drift clears everywhere.
    fs::write(&crt, &saved.0).unwrap();
    fs::write(&key, &saved.1).unwrap();
    let t0 = Instant::now();
    ha.node(3)
        .systemctl(&["reload", DAEMON])
        .unwrap_or_else(|e| panic!("{e:#}"));
    no_alarm_anywhere(&ha, "node3's files were put back");
    say(&format!(
        "cluster_view: 500.250 cleared on every node {:.1} s after node3's reload",
        t0.elapsed().as_secs_f64()
    ));
    let text = check_cluster(&ha, 1);
    assert!(
        text.starts_with("3 controllers: 3 reporting, 0 stale, 0 missing, 0 drifted"),
        "{text}"
    );
    say(&format!(
        "cluster_view_names_a_quiet_controller_and_drift: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// `certrenewd check --cluster` on node n (stdout piped: [`PIPED_COLUMNS`] wide), checked to
/// fit its page.
fn check_cluster(ha: &Ha, n: usize) -> String {
    let text = ha
        .node(n)
        .run(["certrenewd", "check", "--cluster"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    for l in text.lines() {
        let width = l.chars().count();
        assert!(
            width <= PIPED_COLUMNS,
            "check --cluster on node{n}: a line of {width} columns:\n{l}\n{text}"
        );
    }
    text
}

/// `certrenewd check --cluster --output json` on node n.
fn check_cluster_json(ha: &Ha, n: usize) -> Value {
    let text = ha
        .node(n)
        .run(["certrenewd", "check", "--cluster", "--output", "json"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("check --cluster's JSON: {e}: {text}"))
}

/// The controller entry of `node` in `check --cluster --output json`.
fn entry(json: &Value, node: &str) -> Value {
    json["controllers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["node"] == node))
        .cloned()
        .unwrap_or_else(|| panic!("no controller {node} in {json:#}"))
}

/// The alarms listed in `node`'s record in `check --cluster --output json`.
fn record_alarms(json: &Value, node: &str) -> Vec<String> {
    entry(json, node)["record"]["alarms"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The section of `node` in `check --cluster`'s text: its head line to the blank line.
fn section(text: &str, node: &str) -> String {
    let head = format!("{node} (member ");
    text.lines()
        .skip_while(|l| !l.starts_with(&head))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until no node has an alarm active (`certrenewd alarms`), within two lease TTLs.
fn no_alarm_anywhere(ha: &Ha, after: &str) {
    wait_for(
        &format!("no alarm active on any node after {after}"),
        within_two_ttls(),
        || {
            let left: Vec<String> = (1..=MEMBERS)
                .map(|n| (n, ha.alarms(n)))
                .filter(|(_, a)| !a.is_empty())
                .map(|(n, a)| format!("node{n}: {}", ids(&a)))
                .collect();
            left.is_empty().then_some(()).ok_or(left.join("; "))
        },
    );
}

/// The alarm `id` on `entity` active on node n.
fn active(ha: &Ha, n: usize, id: &str, entity: &str) -> Option<Value> {
    ha.alarms(n)
        .into_iter()
        .find(|a| a["id"] == id && a["entity"] == entity)
}

/// `ID ENTITY, ...` of alarms, for a message.
fn ids(alarms: &[Value]) -> String {
    let all: Vec<String> = alarms
        .iter()
        .map(|a| {
            format!(
                "{} {}",
                a["id"].as_str().unwrap_or("?"),
                a["entity"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!("[{}]", all.join(", "))
}

/// Raises of alarm `id` (on `entity`, or on any) in node n's journal at or after `since_us`
/// (µs of the realtime clock the controllers share with the host).
fn raises(ha: &Ha, n: usize, id: &str, entity: Option<&str>, since_us: u64) -> Vec<Value> {
    let id = format!("ALARM_ID={id}");
    let entity = entity.map(|e| format!("ALARM_ENTITY={e}"));
    let mut args = vec![id.as_str(), "ALARM_STATE=set"];
    args.extend(entity.as_deref());
    ha.node(n)
        .journal_json(&args)
        .into_iter()
        .filter(|e| {
            e["__REALTIME_TIMESTAMP"]
                .as_str()
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t >= since_us)
        })
        .collect()
}

/// The host's realtime clock in µs.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros() as u64
}

/// Polls `look` every 250 ms until it gives a value, within `limit`; returns the value and
/// the time it took. On timeout, panics naming `what` and what `look` saw last.
fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut look: impl FnMut() -> Result<T, String>,
) -> (T, Duration) {
    let started = Instant::now();
    loop {
        match look() {
            Ok(v) => return (v, started.elapsed()),
            Err(seen) => assert!(
                started.elapsed() < limit,
                "waited {:.1} s for {what}; last seen: {seen}",
                started.elapsed().as_secs_f64()
            ),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
