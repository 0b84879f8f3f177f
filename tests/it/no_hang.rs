//! Nothing the daemon or the CLI reads can stop them: a FIFO, a device or an endless file
//! where a kubeconfig or the configuration is expected ends the command promptly with an
//! error naming the file and why (not a regular file, larger than the bound), never a
//! hang; and SIGTERM during a pass ends it at its next step. Each test runs the real
//! binary on a tree made by the real openssl (`tests/fixtures/mkpki.sh`) and gives it a
//! deadline: a command still running then is killed (by its PID) and the test fails.

use crate::common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pki::{Run, Tree, isolate, path_str, toml_str};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

/// Long enough for a scan of the kubeadm tree on a loaded machine; far shorter than forever.
const DEADLINE: Duration = Duration::from_secs(30);

/// Waits for `child` until `deadline`; kills it (by its PID) then. `None` when it had to be
/// killed: it hung.
fn finish(mut child: Child, args: &[&str], deadline: Duration) -> Option<Run> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for certrenewd") {
            let mut stdout = String::new();
            let mut stderr = String::new();
            let _ = child
                .stdout
                .take()
                .map(|mut o| o.read_to_string(&mut stdout));
            let _ = child
                .stderr
                .take()
                .map(|mut e| e.read_to_string(&mut stderr));
            return Some(Run {
                args: args.iter().map(|s| s.to_string()).collect(),
                code: status.code().unwrap_or(-1),
                stdout,
                stderr,
            });
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `certrenewd --config CONFIG ARGS`, killed after [`DEADLINE`].
fn run_within(config: &Path, args: &[&str]) -> Option<Run> {
    let mut cmd = Command::new(BIN);
    cmd.arg("--config").arg(config).args(args);
    let child = isolate(&mut cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting certrenewd");
    finish(child, args, DEADLINE)
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {} (coreutils) failed", path.display());
}

/// The kubeadm tree with one more watch listing `kubeconfig`.
fn tree_with_kubeconfig(kubeconfig: &Path) -> Tree {
    let tree = Tree::new(&["kubeadm"], "kubeadm");
    let pki = tree.abs("etc/kubernetes/pki");
    let extra = format!(
        "[[watch]]\npath = {}\nunits = []\nkubeconfigs = [{}]\n",
        toml_str(pki.parent().unwrap()),
        toml_str(kubeconfig)
    );
    let mut text = fs::read_to_string(&tree.config).unwrap();
    // Before `[coordination]`, which `single_node` appended last.
    let at = text.find("\n[coordination]").unwrap_or(text.len());
    text.insert_str(at, &format!("\n{extra}"));
    fs::write(&tree.config, text).unwrap();
    tree
}

/// A kubeconfig named in the config that is a FIFO ends `check` and `renew` at once, with
/// the file in `check`'s errors and in the pass's alarm, saying it is not a regular file.
#[test]
fn a_fifo_kubeconfig_is_an_error_of_check_and_renew_not_a_hang() {
    let holder = tempfile::tempdir().unwrap();
    let fifo = holder.path().join("admin.conf");
    mkfifo(&fifo);
    let tree = tree_with_kubeconfig(&fifo);

    let r = run_within(&tree.config, &["check", "--output", "json"]);
    let r = r.unwrap_or_else(|| panic!("check hung on the FIFO {}", fifo.display()));
    let doc = r.json();
    let errors: Vec<String> = (doc["errors"].as_array().into_iter().flatten())
        .filter(|e| e["path"] == path_str(&fifo))
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    println!("check: {}: {errors:?}", fifo.display());
    assert!(
        errors.iter().any(|e| e.contains("not a regular file")),
        "{r}"
    );

    let r = run_within(&tree.config, &["renew", "--no-restart"]);
    let r = r.unwrap_or_else(|| panic!("renew hung on the FIFO {}", fifo.display()));
    println!("renew exited {}", r.code);
    assert_eq!(r.code, 1, "{r}");
    let a = run_within(&tree.config, &["alarms", "--output", "json"]).expect("alarms");
    let alarms = a.json()["alarms"].as_array().cloned().unwrap_or_default();
    let named = alarms.iter().any(|a| {
        let reason = a["reason"].as_str().unwrap_or_default();
        reason.contains(path_str(&fifo)) && reason.contains("not a regular file")
    });
    assert!(named, "{alarms:#?}");
}

/// `--config` naming a FIFO, a character device that never ends (/dev/zero) or a regular
/// file larger than any configuration: a clear error naming the file and why, exit status 2.
#[test]
fn a_config_that_is_not_a_bounded_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("certrenewd.toml");
    mkfifo(&fifo);
    let huge = dir.path().join("huge.toml");
    let f = fs::File::create(&huge).unwrap();
    // Sparse: 64 MiB of comment-free zeros that cost no disk.
    f.set_len(64 << 20).unwrap();
    let cases: [(PathBuf, &str); 3] = [
        (fifo.clone(), "not a regular file"),
        (PathBuf::from("/dev/zero"), "not a regular file"),
        (huge.clone(), "larger than"),
    ];
    for (config, why) in &cases {
        let r = run_within(config, &["check"]);
        let r = r.unwrap_or_else(|| panic!("--config {} hung", config.display()));
        println!(
            "--config {}: exit {}: {}",
            config.display(),
            r.code,
            r.stderr.trim()
        );
        assert_eq!(r.code, 2, "{r}");
        assert!(
            r.stderr.contains(path_str(config)) && r.stderr.contains(why),
            "{r}"
        );
    }
}

/// SIGTERM while the daemon's pass waits for the state lock (held here, as `renew` would
/// hold it) ends that pass at once and the daemon with it, long before `lock_timeout_secs`.
#[test]
fn sigterm_ends_a_pass_waiting_for_the_state_lock() {
    let tree = Tree::with_config(
        &["kubeadm"],
        "kubeadm",
        "run_on_start = true\nlock_timeout_secs = 600\nschedule = \"0 0 0 1 1 *\"",
    );
    fs::create_dir_all(&tree.state).unwrap();
    let lock_path = tree.state.join("lock");
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .unwrap();
    lock.lock().expect("taking the state lock");

    let mut cmd = Command::new(BIN);
    cmd.arg("--config").arg(&tree.config).arg("run");
    let child = isolate(&mut cmd)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting certrenewd run");
    let pid = child.id();
    // Time for the start and its scan; the pass then waits for the lock held above (its
    // log, on stderr outside journald, is read once it has ended).
    std::thread::sleep(Duration::from_secs(5));
    let term = Instant::now();
    sigterm(pid);
    let r = finish(child, &["run"], Duration::from_secs(10));
    let r = r.unwrap_or_else(|| panic!("certrenewd run (pid {pid}) still ran 10 s after SIGTERM"));
    println!(
        "stopped {:.1}s after SIGTERM, exit {}",
        term.elapsed().as_secs_f64(),
        r.code
    );
    assert!(
        r.stderr.contains("waiting for another certrenewd holding"),
        "the pass never waited for the lock: {r}"
    );
    assert!(r.stderr.contains("stopped"), "{r}");
    drop(lock);
}

/// A `renew --output json` that cannot have the state lock (another certrenewd holds it past
/// `lock_timeout_secs`) still prints a JSON document, saying why there is no report.
#[test]
fn renew_json_without_the_state_lock_is_still_json() {
    let tree = Tree::with_config(&["kubeadm"], "kubeadm", "lock_timeout_secs = 1");
    fs::create_dir_all(&tree.state).unwrap();
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(tree.state.join("lock"))
        .unwrap();
    lock.lock().expect("taking the state lock");
    let r = tree.run(&["renew", "--output", "json"]);
    assert_eq!(r.code, 1, "{r}");
    let doc = r.json();
    assert_eq!(doc["success"], false, "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("another certrenewd") && e.contains("lock_timeout_secs")),
        "{doc}"
    );
    drop(lock);
}

/// SIGTERM to `pid`, a child this test started.
fn sigterm(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).expect("a child's PID");
    rustix::process::kill_process(p, rustix::process::Signal::TERM)
        .unwrap_or_else(|e| panic!("kill -TERM {pid}: {e}"));
}

/// Under a real systemd (the sandbox's user manager), the shipped unit runs the daemon whose
/// pass hangs on a blocking thread (the failpoints build, stopped for good at the start of
/// the pass's local work, as a read of a file that blocks would): the daemon's task still
/// wakes, but WATCHDOG=1 is withheld, so systemd kills it for the watchdog and starts it
/// again. The watch of the other controllers runs meanwhile with the default lease TTL
/// (30 s: a look every 15 s, reading its alarm store) and `WatchdogSec=40s` (a ping every
/// 20 s, each after a look of the watch): the watch's reads are not the pass's progress.
#[test]
fn a_stuck_pass_stops_the_watchdog_pings_and_systemd_restarts_the_daemon() {
    use common::e2e::{
        DAEMON, config_text, daemon_messages, daemon_unit, install_daemon, wait_for,
    };
    let Some(sb) = common::sandbox::Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let watched = tmp.path().join("pki");
    fs::create_dir(&watched).unwrap();
    let state = tmp.path().join("state");
    let cfg = tmp.path().join("c.toml");
    let text = config_text(
        &state,
        "run_on_start = true\nschedule = \"0 0 0 1 1 *\"",
        &[common::e2e::WatchSpec {
            path: watched,
            units: &[],
        }],
    );
    fs::write(&cfg, common::single_node(&text)).unwrap();
    install_daemon(&sb, &cfg, tmp.path());
    // The failpoints build, hanging at the pass, restarted 1 s after a failure.
    let failpoints = common::failpoints::binary();
    let unit = daemon_unit(&cfg, tmp.path())
        .replace(BIN, &failpoints.display().to_string())
        .replace("RestartSec=30s", "RestartSec=1s")
        .replace(
            &format!("\nWatchdogSec={}s\n", common::e2e::WATCHDOG.as_secs()),
            "\nWatchdogSec=40s\n",
        )
        .replace(
            "[Service]\n",
            "[Service]\nEnvironment=CERTRENEWD_FAILPOINT=pass-local:hang\n",
        );
    assert!(unit.contains("RestartSec=1s"), "{unit}");
    assert!(unit.contains("\nWatchdogSec=40s\n"), "{unit}");
    assert!(!text.contains("lease_ttl_secs"), "{text}");
    sb.install_unit(DAEMON, &unit).unwrap();
    sb.systemctl(["start", DAEMON]).expect("systemctl start");
    let first = common::e2e::main_pid(&sb, DAEMON);
    let started = Instant::now();
    // Why the first run ended, while it waits for its restart (Result= is reset then).
    let mut results = std::collections::BTreeSet::new();
    let restarted = wait_for("the watchdog's restart", Duration::from_secs(120), || {
        results.insert(common::e2e::prop(&sb, DAEMON, "Result"));
        let n: u32 = common::e2e::prop(&sb, DAEMON, "NRestarts")
            .parse()
            .unwrap_or(0);
        let pid = common::e2e::main_pid(&sb, DAEMON);
        match n >= 1 && pid != 0 && pid != first {
            true => Ok(pid),
            false => Err((n, pid, results.clone())),
        }
    });
    println!(
        "restarted by systemd {:.1}s after start: pid {first} -> {restarted}",
        started.elapsed().as_secs_f64()
    );
    let said = daemon_messages(&sb);
    assert!(
        said.iter().any(|l| l.contains("WATCHDOG=1 withheld")),
        "{said:#?}"
    );
    assert!(results.contains("watchdog"), "Result= seen: {results:?}");
    let _ = sb.systemctl(["stop", DAEMON]);
}

/// SIGTERM while the pass is stuck for good on a blocking thread (the failpoints build,
/// stopped at the start of the pass's local work, as a read of a file that blocks would):
/// the daemon does not wait for it forever but exits, saying why, once the pass has made
/// no step for a while after SIGTERM; what it left is repaired at the next start.
#[test]
fn sigterm_ends_the_daemon_even_when_its_pass_is_stuck() {
    let tmp = tempfile::tempdir().unwrap();
    let watched = tmp.path().join("pki");
    fs::create_dir(&watched).unwrap();
    let cfg = tmp.path().join("c.toml");
    let text = format!(
        "state_dir = {}\nrun_on_start = true\nschedule = \"0 0 0 1 1 *\"\n[[watch]]\npath = {}\nunits = []\n",
        toml_str(&tmp.path().join("state")),
        toml_str(&watched)
    );
    fs::write(&cfg, common::single_node(&text)).unwrap();
    let mut cmd = Command::new(common::failpoints::binary());
    cmd.arg("--config").arg(&cfg).arg("run");
    let child = isolate(&mut cmd)
        .env("RUST_LOG", "info")
        .env("CERTRENEWD_FAILPOINT", "pass-local:hang")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting certrenewd run");
    let pid = child.id();
    // Time for the start; the pass then hangs at the failpoint.
    std::thread::sleep(Duration::from_secs(5));
    let term = Instant::now();
    sigterm(pid);
    let r = finish(child, &["run"], DEADLINE);
    let r = r.unwrap_or_else(|| {
        panic!("certrenewd run (pid {pid}), its pass stuck, still ran {DEADLINE:?} after SIGTERM")
    });
    println!(
        "exited {} {:.1}s after SIGTERM",
        r.code,
        term.elapsed().as_secs_f64()
    );
    assert!(r.stderr.contains("pass starting"), "{r}");
    assert!(r.stderr.contains("exiting without it"), "{r}");
    assert_ne!(r.code, 0, "{r}");
}

/// A FIFO where a certificate's file is (`apiserver.crt` in a watched directory) is an error
/// of `check` and of the pass, as the docs promise of a file that cannot be read: a
/// certificate kube-apiserver needs is gone, and passing it over left it out of every count.
#[test]
fn a_fifo_named_as_a_certificate_is_an_error_not_skipped() {
    let tree = Tree::new(&["kubeadm"], "kubeadm");
    let fifo = tree.abs("etc/kubernetes/pki/apiserver.crt");
    fs::remove_file(&fifo).unwrap();
    mkfifo(&fifo);
    let r = run_within(&tree.config, &["check", "--output", "json"]);
    let r = r.unwrap_or_else(|| panic!("check hung on the FIFO {}", fifo.display()));
    let doc = r.json();
    let listed = |key: &str| -> Vec<String> {
        (doc[key].as_array().into_iter().flatten())
            .filter(|e| e["path"] == path_str(&fifo))
            .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(listed("skipped"), Vec::<String>::new(), "{r}");
    assert_eq!(listed("errors"), ["not a regular file (a FIFO)"], "{r}");
    let r = run_within(&tree.config, &["renew", "--no-restart"]);
    let r = r.unwrap_or_else(|| panic!("renew hung on the FIFO {}", fifo.display()));
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout.contains(&format!(
            "FAILED        {}: not a regular file (a FIFO)",
            fifo.display()
        )),
        "{r}"
    );
}
