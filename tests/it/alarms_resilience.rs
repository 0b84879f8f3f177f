//! The alarm stage never costs a pass its report, its exit status or its time,
//! through the real binary:
//! - a corrupt `alarms.json` is kept aside (`alarms.json.corrupt-<time>`), logged naming
//!   both files, and the state rebuilt from the pass, whose report and exit status are those
//!   of the same pass without the corruption;
//! - a hung `alarm_command` (which forks sleepers) runs in the background: `renew` prints its
//!   report and releases the state lock in about the time a pass takes, and the daemon's pass
//!   ends as fast; the hook's whole process group is killed at its timeout.
//!
//! The tree: a CA and a due leaf made as in life (issued 355 days ago for 365 days, with
//! `faketime` and the openssl CLI), and a due leaf whose CA key is not on the host (it raises
//! 250.003 and 500.200, so that there are alarms, and the pass exits 1).

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pki::{Run, isolate, run_bin, toml_str};
use common::sh;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

struct Setup {
    tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
}

impl Setup {
    /// The tree and a config with `extra` top-level lines.
    fn new(extra: &str) -> Setup {
        let tmp = tempfile::Builder::new()
            .prefix("alarms-resilience.")
            .tempdir()
            .expect("temp dir");
        let d = tmp.path();
        fs::create_dir_all(d.join("pki")).expect("mkdir");
        sh(
            d,
            "ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1 2>/dev/null; }
             ca() { ec $1.key; faketime -f -730d openssl req -x509 -new -key $1.key -subj /CN=${1##*/} \
                 -days 3650 -addext basicConstraints=critical,CA:TRUE \
                 -addext keyUsage=critical,keyCertSign,cRLSign -out $1.crt; }
             ca pki/ca
             ca offsite
             printf 'basicConstraints=critical,CA:FALSE\\nextendedKeyUsage=serverAuth\\nsubjectAltName=DNS:node-0\\n' > ext.cnf
             leaf() { ec pki/$1.key; openssl req -new -key pki/$1.key -subj /CN=$1 -out $1.csr
               faketime -f -355d openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key \
                 -days 365 -extfile ext.cnf -out pki/$1.crt; }
             leaf server pki/ca
             leaf orphan offsite
             chmod 600 pki/*.key",
        );
        let s = Setup {
            config: d.join("certrenewd.toml"),
            state: d.join("state"),
            tmp,
        };
        let cfg = format!(
            "state_dir = {}\nlock_timeout_secs = 2\n{extra}\n\n[[watch]]\npath = {}\nunits = []\nstatic_pods = []\nkubeconfigs = []\n",
            toml_str(&s.state),
            toml_str(&s.tmp.path().join("pki")),
        );
        fs::write(&s.config, common::single_node(&cfg)).expect("config");
        s
    }

    fn renew(&self) -> Run {
        run_bin(&self.config, &["renew"])
    }

    /// `certrenewd alarms --output json`: (id, entity) of each active alarm, sorted.
    fn alarms(&self) -> Vec<(String, String)> {
        let r = run_bin(&self.config, &["alarms", "--output", "json"]);
        assert_eq!(r.code, 0, "{r}");
        let mut out: Vec<(String, String)> = r.json()["alarms"]
            .as_array()
            .expect("array")
            .iter()
            .map(|a| {
                (
                    a["id"].as_str().expect("id").to_owned(),
                    a["entity"].as_str().expect("entity").to_owned(),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// A hook that forks two sleepers, records their PIDs, and waits for them.
    fn hung_hook(dir: &Path, timeout_secs: u64) -> String {
        let pids = dir.join("hook-pids");
        format!(
            "alarm_command = [\"/bin/sh\", \"-c\", \"sleep 600 & echo $! >> {p}; sleep 600 & echo $! >> {p}; wait\"]\nalarm_command_timeout_secs = {timeout_secs}",
            p = pids.display()
        )
    }
}

/// The lines of a `renew` report that say what became of each certificate.
fn outcome_lines(stdout: &str) -> Vec<String> {
    let mut v: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("renewed") || l.starts_with("FAILED"))
        .map(|l| l.split(" serial ").next().unwrap_or(l).to_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_corrupt_alarm_state_is_kept_aside_and_the_pass_report_stands() {
    // The same pass on an identical tree without the corruption: the oracle.
    let control = Setup::new("");
    let want = control.renew();
    assert_eq!(want.code, 1, "the orphan leaf makes the pass fail: {want}");
    let want_alarms = control.alarms();
    assert!(
        want_alarms.iter().any(|(id, _)| id == "250.003")
            && want_alarms.iter().any(|(id, _)| id == "500.200"),
        "{want_alarms:?}"
    );

    let s = Setup::new("");
    fs::create_dir_all(&s.state).expect("mkdir");
    let garbage = b"{\"version\": 1, \"alarms\": [{\"kind\": \"expi";
    fs::write(s.state.join("alarms.json"), garbage).expect("write");
    let r = s.renew();
    eprintln!("{r}");
    assert_eq!(r.code, want.code, "exit status: {r}");
    let rel = |out: &str, root: &Path| out.replace(&*root.display().to_string(), "ROOT");
    assert_eq!(
        outcome_lines(&rel(&r.stdout, s.tmp.path())),
        outcome_lines(&rel(&want.stdout, control.tmp.path())),
        "the report: {r}"
    );
    // Kept aside, byte for byte.
    let aside = set_aside(&s.state, "alarms.json");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(fs::read(&aside[0]).expect("aside"), garbage);
    // One log line names both files.
    let state_file = s.state.join("alarms.json").display().to_string();
    let aside_name = aside[0].display().to_string();
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains(&state_file) && l.contains(&aside_name)),
        "no log line names {state_file} and {aside_name}:\n{}",
        r.stderr
    );
    // The state is rebuilt from the pass: the same alarms as the control's.
    let rebase = |v: Vec<(String, String)>, root: &Path| -> Vec<(String, String)> {
        v.into_iter().map(|(id, e)| (id, rel(&e, root))).collect()
    };
    assert_eq!(
        rebase(s.alarms(), s.tmp.path()),
        rebase(want_alarms, control.tmp.path())
    );
    // And the next pass finds nothing corrupt.
    let again = s.renew();
    assert!(!again.stderr.contains("corrupt"), "{again}");
}

/// The files `<record>.corrupt-*` in `state`: `record` kept aside.
fn set_aside(state: &Path, record: &str) -> Vec<PathBuf> {
    let prefix = format!("{record}.corrupt-");
    fs::read_dir(state)
        .expect("state dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect()
}

/// `flock -n` on the state lock: whether nobody holds it.
fn lock_is_free(state: &Path) -> bool {
    Command::new("flock")
        .args(["-n", "-E", "99"])
        .arg(state.join("lock"))
        .arg("true")
        .status()
        .expect("flock")
        .success()
}

fn running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Every sleeper the hook forked is gone (within a few seconds of the end of `what`).
fn assert_no_sleeper_left(dir: &Path, what: &str) {
    let pids = hook_pids(dir).unwrap_or_else(|e| panic!("{what}: the hook never ran: {e}"));
    assert!(!pids.is_empty(), "{what}: the hook forked nothing");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| running(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = pids.into_iter().filter(|&p| running(p)).collect();
    assert!(
        left.is_empty(),
        "{what}: the hook's sleepers still run: {left:?}"
    );
}

/// Whether the hung hook is still running: none of the sleepers it has forked so far has
/// been killed (a hook not started yet counts as running: nothing waited for it).
fn hook_still_runs(dir: &Path) -> bool {
    hook_pids(dir).unwrap_or_default().into_iter().all(running)
}

/// The PIDs of the sleepers the hung hook has forked so far (it writes each to `hook-pids`).
fn hook_pids(dir: &Path) -> std::io::Result<Vec<u32>> {
    Ok(fs::read_to_string(dir.join("hook-pids"))?
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect())
}

/// `certrenewd --config C ARGS` with stdout and stderr piped.
fn spawn(config: &Path, args: &[&str]) -> Child {
    isolate(Command::new(BIN).arg("--config").arg(config).args(args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn certrenewd")
}

/// Reads `from` line by line until a line satisfies `done`; the time it took from `start`.
fn wait_for_line(
    from: impl std::io::Read,
    start: Instant,
    done: impl Fn(&str) -> bool,
) -> Duration {
    for line in BufReader::new(from).lines() {
        let line = line.expect("read");
        eprintln!("| {line}");
        if done(&line) {
            return start.elapsed();
        }
    }
    panic!("the stream ended before the line came");
}

#[test]
fn a_hung_hook_neither_delays_renew_nor_holds_the_lock() {
    // The hook's timeout: long, so that even a slow pass reports well before it. That the
    // report did not wait is shown by order (the hook still runs when it comes), not timed.
    const TIMEOUT: u64 = 15;
    // The same pass without a hook: its exit status is the one wanted.
    let control = Setup::new("");
    let want = control.renew();
    assert_eq!(want.code, 1, "{want}");

    let s = Setup::new("");
    let hook = Setup::hung_hook(s.tmp.path(), TIMEOUT);
    let cfg = fs::read_to_string(&s.config).expect("config");
    fs::write(&s.config, cfg.replacen("\n", &format!("\n{hook}\n"), 1)).expect("config");
    let start = Instant::now();
    let mut child = spawn(&s.config, &["renew"]);
    let stdout = child.stdout.take().expect("stdout");
    // The report's last line is its alarm summary or the last outcome: wait for the FAILED
    // line of the orphan, which comes after every renewal line.
    let reported = wait_for_line(stdout, start, |l| {
        l.starts_with("FAILED") && l.contains("orphan")
    });
    let hook_runs = hook_still_runs(s.tmp.path());
    let free = lock_is_free(&s.state);
    eprintln!("with a hung hook, report after {reported:?}");
    assert!(
        hook_runs,
        "the report waited for the hook to be killed: {reported:?}"
    );
    assert!(free, "the state lock is held while the hook runs");
    // The hook is killed at its timeout, whole process group, and then the command exits.
    let status = child.wait().expect("wait");
    let total = start.elapsed();
    assert_eq!(status.code(), Some(want.code), "exit status");
    assert!(
        total >= Duration::from_secs(TIMEOUT),
        "exited before the hook's timeout: {total:?}"
    );
    assert_no_sleeper_left(s.tmp.path(), "renew");
}

#[test]
fn a_hung_hook_does_not_delay_the_daemons_pass() {
    // As above: a long timeout, and the order shown, not a time.
    const TIMEOUT: u64 = 15;
    let s = Setup::new("");
    let hook = Setup::hung_hook(s.tmp.path(), TIMEOUT);
    let cfg = fs::read_to_string(&s.config).expect("config");
    fs::write(
        &s.config,
        cfg.replacen("\n", &format!("\nrun_on_start = true\n{hook}\n"), 1),
    )
    .expect("config");
    let start = Instant::now();
    let mut child = spawn(&s.config, &["run"]);
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = s.tmp.path().to_path_buf();
    let reader = std::thread::spawn(move || {
        let took = wait_for_line(stderr, start, |l| {
            l.contains("pass failed") || l.contains("pass succeeded")
        });
        let _ = tx.send((took, hook_still_runs(&dir)));
    });
    let (pass_done, hook_runs) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the daemon's pass did not end");
    eprintln!("daemon pass with a hung hook ended after {pass_done:?}");
    assert!(
        hook_runs,
        "the pass waited for the hook to be killed: {pass_done:?}"
    );
    assert!(
        lock_is_free(&s.state),
        "the state lock is held between passes"
    );
    // Stopping waits for the hook (killed at its timeout), then exits 0.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "the daemon's exit");
    drop(reader);
    assert_no_sleeper_left(s.tmp.path(), "the daemon");
}

/// A corrupt record of the pass's own (`pending.json`, `restarts.json`,
/// `static-pods.json`) no longer stops every pass before its alarms. It is set aside
/// (`<name>.corrupt-<time>`, byte for byte), the pass renews and alarms as it would have, and
/// every pass and `check` report the file set aside as an error, with what to do, until the
/// operator removes it.
#[test]
fn a_corrupt_pass_record_is_set_aside_reported_and_the_pass_goes_on() {
    for record in ["pending.json", "restarts.json", "static-pods.json"] {
        let s = Setup::new("");
        fs::create_dir_all(&s.state).expect("mkdir");
        let garbage = b"{\"version\": 2, \"chan";
        fs::write(s.state.join(record), garbage).expect("write");
        let r = s.renew();
        eprintln!("{record}: {r}");
        assert_eq!(r.code, 1, "{record}: {r}");
        // The pass went on: the due leaf is renewed, the alarms are applied.
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("renewed") && l.contains("server.crt")),
            "{record}: {r}"
        );
        let alarms = s.alarms();
        assert!(
            alarms.iter().any(|(id, _)| id == "500.200"),
            "{record}: {alarms:?}"
        );
        assert!(
            alarms.iter().any(|(id, _)| id == "250.003"),
            "{record}: {alarms:?}"
        );
        // Set aside, byte for byte.
        let aside = set_aside(&s.state, record);
        assert_eq!(aside.len(), 1, "{record}: {aside:?}");
        assert_eq!(fs::read(&aside[0]).expect("aside"), garbage);
        assert!(!s.state.join(record).exists());
        // Reported by check (and by every pass) until removed.
        let reported = |s: &Setup| -> Vec<String> {
            let c = run_bin(&s.config, &["check", "--output", "json"]);
            c.json()["errors"]
                .as_array()
                .expect("errors")
                .iter()
                .filter(|e| e["path"].as_str().is_some_and(|p| p.contains(".corrupt-")))
                .map(|e| e["reason"].as_str().unwrap_or("").to_owned())
                .collect()
        };
        let why = reported(&s);
        assert_eq!(why.len(), 1, "{record}: {why:?}");
        assert!(why[0].contains("then remove this file"), "{why:?}");
        let again = s.renew();
        assert!(again.stdout.contains(".corrupt-"), "{record}: {again}");
        fs::remove_file(&aside[0]).expect("remove");
        assert!(reported(&s).is_empty(), "{record}");
    }
}

/// A daemon's pass that cannot run (here `restarts.json` is a directory, so the pass's
/// records cannot be read) raises its 250.003 all the same, naming why, instead of only
/// logging it; the next pass that runs settles it with the rest.
#[test]
fn a_daemon_pass_that_cannot_run_raises_its_alarm() {
    let s = Setup::new("run_on_start = true");
    fs::create_dir_all(s.state.join("restarts.json")).expect("mkdir");
    let start = Instant::now();
    let mut child = spawn(&s.config, &["run"]);
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let took = wait_for_line(stderr, start, |l| {
            l.contains("alarm 250.003 set") && l.contains("the pass could not run: ")
        });
        let _ = tx.send(took);
    });
    let raised = rx.recv_timeout(Duration::from_secs(60));
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("wait");
    drop(reader);
    let raised = raised.expect("no 250.003 raised for the pass that could not run");
    eprintln!("raised {raised:?} after start; the daemon exited {status}");
    let reasons = |s: &Setup| -> Vec<String> {
        let r = run_bin(&s.config, &["alarms", "--output", "json"]);
        (r.json()["alarms"].as_array().expect("alarms").iter())
            .filter(|a| a["id"] == "250.003")
            .map(|a| a["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let stored = reasons(&s);
    assert!(
        stored
            .iter()
            .any(|r| r.contains("the pass could not run: ") && r.contains("restarts.json")),
        "{stored:?}"
    );
    // Repaired: the next pass runs (the leaf whose CA key is elsewhere still fails it) and
    // the cause that is over goes from 250.003.
    fs::remove_dir(s.state.join("restarts.json")).expect("rmdir");
    let r = s.renew();
    assert!(r.stdout.contains("renewed"), "{r}");
    let stored = reasons(&s);
    assert!(
        !stored.iter().any(|r| r.contains("could not run")),
        "{stored:?}"
    );
}
