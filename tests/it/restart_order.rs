//! The restart order on a real systemd user manager: etcd first, then kube-apiserver, then
//! the rest, one at a time, each back (and settled) before the next starts, whatever the
//! order of the configuration. Each unit writes its start time and systemd's InvocationID
//! to a log; the run's new InvocationIDs and the journal's start messages agree with it.

use crate::common;

use std::fs;
use std::path::Path;

use common::e2e::mkpki;
use common::sandbox::Sandbox;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

/// In the order the watch lists them: the reverse of the order they must restart in.
const UNITS: [&str; 3] = [
    "kube-scheduler.service",
    "kube-apiserver.service",
    "etcd.service",
];

/// One start a unit logged: (time in seconds, unit, InvocationID).
fn starts(log: &Path) -> Vec<(f64, String, String)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "log line {l:?}");
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

#[test]
fn units_restart_etcd_first_then_the_apiserver_then_the_rest_one_at_a_time() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("pki");
    mkpki("starlingx", &tree);
    let etcd = tree.join("etc/etcd");
    let log = tmp.path().join("starts.log");
    let record = tmp.path().join("record.sh");
    fs::write(
        &record,
        format!(
            "echo \"$(date +%s.%N) $1 $INVOCATION_ID\" >> {}\nexec sleep infinity\n",
            log.display()
        ),
    )
    .unwrap();
    for unit in UNITS {
        let text = format!("[Service]\nExecStart=/bin/sh {} {unit}\n", record.display());
        sb.install_unit(unit, &text).unwrap();
        sb.systemctl(["start", unit]).unwrap();
    }
    let before: Vec<String> = UNITS
        .iter()
        .map(|u| sb.unit_property(u, "InvocationID").unwrap())
        .collect();
    let started = starts(&log).len();
    assert_eq!(started, 3, "{:?}", starts(&log));

    let config = tmp.path().join("c.toml");
    let text = format!(
        "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\nrestart_settle_secs = 1\n\n\
         [[watch]]\npath = \"{}\"\nunits = {:?}\n",
        tmp.path().join("state").display(),
        etcd.display(),
        UNITS
    );
    fs::write(&config, common::single_node(&text)).unwrap();
    let out = sb.exec(BIN, ["--config", config.to_str().unwrap(), "renew"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("renewed"), "{stdout}");

    // One new start per unit, etcd first, then kube-apiserver, then kube-scheduler.
    let all = starts(&log);
    let restarts = &all[started..];
    let order: Vec<&str> = restarts.iter().map(|(_, u, _)| u.as_str()).collect();
    assert_eq!(
        order,
        [
            "etcd.service",
            "kube-apiserver.service",
            "kube-scheduler.service"
        ],
        "{all:?}"
    );
    // Each start is the unit's current run, a new one.
    for (i, unit) in UNITS.iter().enumerate() {
        let now = sb.unit_property(unit, "InvocationID").unwrap();
        assert_ne!(now, before[i], "{unit} not restarted");
        let logged = restarts.iter().find(|(_, u, _)| u == unit).unwrap();
        assert_eq!(
            logged.2, now,
            "{unit}: the logged start is not its current run"
        );
    }
    // Each was confirmed back and settled (restart_settle_secs = 1) before the next started.
    for pair in restarts.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap >= 1.0,
            "{} started {gap:.3} s after {}",
            pair[1].1,
            pair[0].1
        );
    }
    // The report lists them in the same order.
    let at = |u: &str| {
        stdout
            .find(&format!("restarted     {u}:"))
            .unwrap_or_else(|| panic!("{u} not reported restarted:\n{stdout}"))
    };
    assert!(
        at("etcd.service") < at("kube-apiserver.service"),
        "{stdout}"
    );
    assert!(
        at("kube-apiserver.service") < at("kube-scheduler.service"),
        "{stdout}"
    );
    // The journal's start messages of the new runs come in the same order.
    let journal: Vec<String> = sb
        .journal_json(Vec::<String>::new())
        .iter()
        .filter_map(|e| {
            let id = e["USER_INVOCATION_ID"]
                .as_str()
                .or(e["INVOCATION_ID"].as_str())?;
            let unit = restarts.iter().find(|(_, _, i)| i == id)?;
            Some(unit.1.clone())
        })
        .collect();
    let mut seen: Vec<String> = Vec::new();
    for u in journal {
        if !seen.contains(&u) {
            seen.push(u);
        }
    }
    assert_eq!(seen, order, "journal order");
}
