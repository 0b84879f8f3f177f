//! `restart::Systemd` against a real `systemd --user` and D-Bus in the sandbox
//! (`tests/sandbox/sandbox.sh`), plus checks of the sandbox harness itself.
//!
//! Each test starts its own sandbox; they skip (with a message) only when this machine cannot
//! host one (not root, no mount namespaces).

use crate::common;

use std::time::{Duration, Instant};

use certrenewd::config::Bus;
use certrenewd::restart::sequence::steps;
use certrenewd::restart::{Fence, Hold, RestartMode, Systemd, UnitControl, UnitRestart};
use common::sandbox::Sandbox;

const SLEEPER: &str =
    "[Unit]\nDescription=test sleeper\n\n[Service]\nType=simple\nExecStart=/bin/sleep infinity\n";

async fn systemd(sb: &Sandbox) -> Systemd {
    Systemd::connect_address(&sb.bus_address())
        .await
        .expect("connecting to the sandbox's systemd")
}

fn main_pid(sb: &Sandbox, unit: &str) -> u32 {
    sb.unit_property(unit, "MainPID")
        .expect("MainPID")
        .parse()
        .expect("MainPID is a number")
}

fn active_state(sb: &Sandbox, unit: &str) -> String {
    sb.unit_property(unit, "ActiveState").expect("ActiveState")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn show(r: &UnitRestart) -> String {
    format!("{r:#?}")
}

#[tokio::test]
async fn restart_changes_main_pid_and_is_ok() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("sleeper.service", SLEEPER).unwrap();
    sb.systemctl(["start", "sleeper.service"]).unwrap();
    let before = main_pid(&sb, "sleeper.service");
    assert_ne!(before, 0);

    let sd = systemd(&sb).await;
    let r = sd
        .restart(
            "sleeper.service",
            RestartMode::Restart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r.ok, "{}", show(&r));
    assert_eq!(r.job_result.as_deref(), Some("done"));
    assert_eq!(
        (r.active_state.as_str(), r.sub_state.as_str()),
        ("active", "running")
    );
    assert_eq!(r.main_pid_before, before);
    assert_ne!(r.main_pid_after, before);
    assert_eq!(r.main_pid_after, main_pid(&sb, "sleeper.service"));
    assert!(r.detail.starts_with("restarted;"), "{}", r.detail);

    // try-restart of a running unit restarts it too.
    let r2 = sd
        .restart(
            "sleeper.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r2.ok, "{}", show(&r2));
    assert_eq!(r2.main_pid_before, r.main_pid_after);
    assert_ne!(r2.main_pid_after, r.main_pid_after);
}

/// The restart lock is lost while the unit is looked up: the fence, asked after those D-Bus
/// round trips and right before the job would be queued, refuses, and systemd restarts
/// nothing.
#[tokio::test]
async fn a_fence_refused_after_the_lookups_queues_no_restart_job() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("sleeper.service", SLEEPER).unwrap();
    sb.systemctl(["start", "sleeper.service"]).unwrap();
    let before = main_pid(&sb, "sleeper.service");
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fence = {
        let asked = asked.clone();
        Fence::new(move || {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Hold::LockLost(
                "the restart lock's lease was not confirmed in time".into(),
            ))
        })
    };
    let sd = systemd(&sb).await;
    let r = sd
        .restart_fenced(
            "sleeper.service",
            RestartMode::Restart,
            Duration::from_secs(30),
            fence,
        )
        .await;
    println!("{}", r.detail);
    assert!(!r.ok && r.not_restarted, "{}", show(&r));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The unit was looked up first (its main PID read), then refused.
    assert_eq!(r.main_pid_before, before, "{}", show(&r));
    assert!(r.job_result.is_none(), "{}", show(&r));
    assert!(r.detail.contains("lease was not confirmed"), "{}", r.detail);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(main_pid(&sb, "sleeper.service"), before);
    assert_eq!(active_state(&sb, "sleeper.service"), "active");
}

#[tokio::test]
async fn restart_of_unit_failing_on_start_reports_systemd_result() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let flag = sb.dir().join("broken");
    let flag = flag.display();
    // Fails in ExecStartPre once the flag exists: the restart job itself fails.
    sb.install_unit(
        "prefail.service",
        &format!(
            "[Service]\nExecStartPre=/bin/sh -c '! test -e {flag}'\nExecStart=/bin/sleep infinity\n"
        ),
    )
    .unwrap();
    // Type=simple whose main process exits 3 right away: the job is done, the unit then fails.
    sb.install_unit(
        "crash.service",
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'test -e {flag} && exit 3; exec sleep infinity'\n"
        ),
    )
    .unwrap();
    sb.systemctl(["start", "prefail.service", "crash.service"])
        .unwrap();
    std::fs::write(sb.dir().join("broken"), "").unwrap();

    let sd = systemd(&sb).await;
    let r = sd
        .restart(
            "prefail.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    assert!(!r.ok, "{}", show(&r));
    assert_eq!(r.job_result.as_deref(), Some("failed"));
    assert_eq!(r.active_state, "failed");
    assert_eq!(
        r.detail,
        "job failed; unit is failed (failed), result: exit-code"
    );
    assert_eq!(active_state(&sb, "prefail.service"), "failed");

    let r = sd
        .restart(
            "crash.service",
            RestartMode::Restart,
            Duration::from_secs(30),
        )
        .await;
    assert!(!r.ok, "{}", show(&r));
    assert_eq!(r.job_result.as_deref(), Some("done"));
    assert_eq!(r.active_state, "failed");
    // Whether the poll saw it active for an instant or not, the verdict names the result.
    assert!(
        r.detail
            .starts_with("unit is failed after the restart (result: exit-code)"),
        "{}",
        r.detail
    );
}

/// Restarts `dbus.service` (the bus daemon of the sandbox's user manager) and waits until
/// systemd is on the new bus.
fn restart_bus_daemon(sb: &Sandbox) {
    let before = main_pid(sb, "dbus.service");
    assert_ne!(before, 0, "dbus.service is running");
    sb.systemctl(["restart", "dbus.service"]).unwrap();
    wait_until("systemd on the new bus", || {
        main_pid(sb, "dbus.service") != before
            && sb
                .exec_ok("busctl", ["--user", "status", "org.freedesktop.systemd1"])
                .is_ok()
    });
}

/// The bus daemon restarts between two restarts over one `Systemd`: the second call finds
/// the connection gone, connects again and succeeds.
#[tokio::test]
async fn a_restart_after_the_bus_daemon_restarted_connects_again() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("sleeper.service", SLEEPER).unwrap();
    sb.systemctl(["start", "sleeper.service"]).unwrap();
    let sd = systemd(&sb).await.with_settle(Duration::from_secs(1));
    let timeout = Duration::from_secs(30);
    let r = sd
        .restart("sleeper.service", RestartMode::Restart, timeout)
        .await;
    assert!(r.ok, "{}", show(&r));

    restart_bus_daemon(&sb);
    let before = main_pid(&sb, "sleeper.service");
    let r = sd
        .restart("sleeper.service", RestartMode::Restart, timeout)
        .await;
    assert!(r.ok, "after the bus restarted: {}", show(&r));
    assert_eq!(r.main_pid_before, before);
    assert_ne!(r.main_pid_after, before);
    assert_eq!(r.main_pid_after, main_pid(&sb, "sleeper.service"));
    // The new connection is kept: the next call needs no reconnection.
    let r = sd
        .restart("sleeper.service", RestartMode::Restart, timeout)
        .await;
    assert!(r.ok, "{}", show(&r));
}

/// A unit that exits 1 s after it starts is active in a new run when its restart job is
/// done, then fails: it is judged failed because it did not stay active for the settle
/// period. The settle is waited for in full even when the timeout is shorter than it.
#[tokio::test]
async fn a_unit_that_exits_a_second_after_it_starts_is_judged_failed() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit(
        "brief.service",
        "[Unit]\nStartLimitIntervalSec=0\n\n[Service]\nExecStart=/bin/sh -c 'sleep 1; exit 1'\n",
    )
    .unwrap();
    let settle = Duration::from_secs(3);
    let sd = systemd(&sb).await.with_settle(settle);
    for timeout in [Duration::from_secs(30), Duration::from_secs(1)] {
        let t0 = Instant::now();
        let r = sd
            .restart("brief.service", RestartMode::Restart, timeout)
            .await;
        let took = t0.elapsed();
        let what = format!("timeout {timeout:?}, took {took:?}: {}", show(&r));
        assert!(!r.ok, "{what}");
        assert_eq!(r.job_result.as_deref(), Some("done"), "{what}");
        assert_eq!(r.active_state, "failed", "{what}");
        assert!(
            r.detail.starts_with(
                "unit is failed after the restart (result: exit-code); it had come back (MainPID "
            ) && r.detail.ends_with(") but did not stay active for 3s"),
            "{what}"
        );
        assert!(
            took >= Duration::from_secs(1) && took < settle + Duration::from_secs(2),
            "{what}"
        );
        assert_eq!(active_state(&sb, "brief.service"), "failed");
    }
}

#[tokio::test]
async fn a_unit_that_hit_its_start_limit_is_started_again() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let flag = sb.dir().join("broken");
    std::fs::write(&flag, "").unwrap();
    // Crash-looping on a bad certificate, say: exits at once while the flag exists, is
    // restarted by systemd, and may start only twice an hour.
    sb.install_unit(
        "limited.service",
        &format!(
            "[Unit]\nStartLimitIntervalSec=1h\nStartLimitBurst=2\n\n[Service]\nExecStart=/bin/sh -c 'test -e {} && exit 1; exec sleep infinity'\nRestart=on-failure\nRestartSec=10ms\n",
            flag.display()
        ),
    )
    .unwrap();
    let _ = sb.systemctl(["start", "limited.service"]);
    // systemd 252 keeps `Result=exit-code` here; any further start is refused until
    // `systemctl reset-failed`.
    wait_until("limited.service gives up after 2 restarts", || {
        sb.systemctl(["show", "-p", "ActiveState,NRestarts", "limited.service"])
            .unwrap()
            == "NRestarts=2\nActiveState=failed\n"
    });
    // Fixed (the certificate renewed), yet a plain start is refused: the start limit holds.
    std::fs::remove_file(&flag).unwrap();
    let refused = sb.systemctl(["start", "limited.service"]);
    assert!(refused.is_err(), "the start limit holds: {refused:?}");
    // certrenewd's restart gets past it.
    let r = systemd(&sb)
        .await
        .restart(
            "limited.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r.ok, "{}", show(&r));
    assert_eq!(active_state(&sb, "limited.service"), "active");
    assert_ne!(main_pid(&sb, "limited.service"), 0);
}

#[tokio::test]
async fn try_restart_of_inactive_unit_does_not_start_it() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("idle.service", SLEEPER).unwrap();
    let sd = systemd(&sb).await;
    let r = sd
        .restart(
            "idle.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r.ok, "{}", show(&r));
    assert_eq!(r.detail, "inactive, not started (try-restart)");
    assert_eq!((r.main_pid_before, r.main_pid_after), (0, 0));
    assert_eq!(active_state(&sb, "idle.service"), "inactive");

    // restart (not try-restart) starts it.
    let r = sd
        .restart(
            "idle.service",
            RestartMode::Restart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r.ok, "{}", show(&r));
    assert_ne!(r.main_pid_after, 0);
    assert_eq!(active_state(&sb, "idle.service"), "active");
}

#[tokio::test]
async fn nonexistent_unit_fails_a_restart_and_is_passed_over_by_try_restart() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let sd = systemd(&sb).await;
    for mode in [RestartMode::Restart, RestartMode::TryRestart] {
        let r = sd
            .restart("no-such-unit.service", mode, Duration::from_secs(10))
            .await;
        // Not on this node, so not running on the old certificate: try-restart has nothing
        // to do; restart was asked to start it and cannot.
        assert_eq!(
            r.ok,
            mode == RestartMode::TryRestart,
            "{mode:?}: {}",
            show(&r)
        );
        assert_eq!(r.job_result, None);
        assert!(
            r.detail
                .starts_with("unit not loaded (load state: not-found"),
            "{}",
            r.detail
        );
    }
}

#[tokio::test]
async fn unit_slower_than_the_timeout_is_a_timeout_failure() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit(
        "slow.service",
        "[Service]\nExecStartPre=/bin/sleep 60\nExecStart=/bin/sleep infinity\n",
    )
    .unwrap();
    let sd = systemd(&sb).await;
    let t0 = Instant::now();
    let r = sd
        .restart("slow.service", RestartMode::Restart, Duration::from_secs(2))
        .await;
    let took = t0.elapsed();
    assert!(!r.ok, "{}", show(&r));
    assert_eq!(r.job_result, None);
    assert_eq!(r.active_state, "activating");
    assert_eq!(
        r.detail,
        "timed out after 2s waiting for the restart job; unit is activating (start-pre)"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "took {took:?}"
    );
}

#[tokio::test]
async fn the_stages_steps_restart_each_unit_once_in_order() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let log = sb.dir().join("starts.log");
    for name in ["a", "b"] {
        sb.install_unit(
            &format!("{name}.service"),
            &format!(
                "[Service]\nExecStartPre=/bin/sh -c 'echo {name} >> {}'\nExecStart=/bin/sleep infinity\n",
                log.display()
            ),
        )
        .unwrap();
    }
    sb.systemctl(["start", "a.service"]).unwrap();
    sb.systemctl(["start", "b.service"]).unwrap();
    std::fs::write(&log, "").unwrap();

    let sd = systemd(&sb).await;
    let units: Vec<String> = ["b.service", "a.service", "b.service", "a.service"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The restart stage's own order: each unit once, in the order first named.
    let mut out = Vec::new();
    for step in steps(&units, &[]) {
        let unit = step.target.to_string();
        out.push(
            sd.restart(&unit, RestartMode::TryRestart, Duration::from_secs(30))
                .await,
        );
    }
    let got: Vec<_> = out.iter().map(|r| (r.unit.as_str(), r.ok)).collect();
    assert_eq!(got, [("b.service", true), ("a.service", true)]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "b\na\n");
}

/// `Systemd::connect(Bus::System)` finds the sandbox through `DBUS_SYSTEM_BUS_ADDRESS`: this
/// test runs `connect_honours_bus_address_child` in a child process with that variable set.
#[test]
fn connect_honours_dbus_system_bus_address() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("sleeper.service", SLEEPER).unwrap();
    sb.systemctl(["start", "sleeper.service"]).unwrap();
    let before = main_pid(&sb, "sleeper.service");
    // libtest names a test by its module path without the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let child = format!("{module}::connect_honours_bus_address_child");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &child, "--ignored", "--nocapture"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", sb.bus_address())
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
    assert_ne!(main_pid(&sb, "sleeper.service"), before);
}

#[tokio::test]
#[ignore = "run by connect_honours_dbus_system_bus_address with DBUS_SYSTEM_BUS_ADDRESS set"]
async fn connect_honours_bus_address_child() {
    let sd = Systemd::connect(Bus::System)
        .await
        .expect("connect(Bus::System)");
    let r = sd
        .restart(
            "sleeper.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    assert!(r.ok, "{}", show(&r));
}

#[test]
fn sandbox_exec_reaches_user_manager_bus_and_journald() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    assert_eq!(
        sb.exec_ok("systemctl", ["--user", "is-system-running"])
            .unwrap()
            .trim(),
        "running"
    );
    let version = sb
        .exec_ok(
            "busctl",
            [
                "--user",
                "get-property",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "Version",
            ],
        )
        .unwrap();
    assert!(version.starts_with("s \""), "{version}");
    // Inside, the default system bus path leads to the sandbox's bus, never the machine's.
    let target = sb
        .exec_ok("readlink", ["/run/dbus/system_bus_socket"])
        .unwrap_or_default();
    if !target.is_empty() {
        assert_eq!(
            target.trim(),
            sb.dir().join("runtime/bus").display().to_string()
        );
    }
    // A structured entry sent to /run/systemd/journal/socket inside lands in DIR/journal.
    let out = sb.exec(
        "sh",
        [
            "-c",
            "printf 'MESSAGE=sandbox probe\\nALARM_ID=999.001\\nPRIORITY=3\\n' | logger --journald",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And a unit's stdout goes to the same journal.
    sb.install_unit(
        "hello.service",
        // It lingers after the echo: journald tags a stream with its unit by reading the
        // writer's cgroup, which fails for a process that has already exited.
        "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo hello from a unit; sleep 1'\n",
    )
    .unwrap();
    sb.systemctl(["start", "hello.service"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let probe = sb.journal_json(["ALARM_ID=999.001"]);
        let hello = sb.journal_json(["MESSAGE=hello from a unit"]);
        let finished = sb.journal_json(["USER_UNIT=hello.service", "JOB_RESULT=done"]);
        if probe.len() == 1 && hello.len() == 1 && finished.len() == 1 {
            assert_eq!(probe[0]["MESSAGE"], "sandbox probe");
            assert_eq!(probe[0]["PRIORITY"], "3");
            // The manager runs at the root of its own cgroup tree, so its units' output is
            // tagged like system units (_SYSTEMD_UNIT), its own messages with USER_UNIT.
            assert_eq!(hello[0]["_SYSTEMD_UNIT"], "hello.service");
            assert_eq!(finished[0]["MESSAGE"], "Finished hello.service.");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "journal entries not found: {probe:?} {hello:?} {finished:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let journal = sb.exec_ok(
        "sh",
        [
            "-c",
            "journalctl -D \"$SANDBOX_JOURNAL_DIR\" -o cat ALARM_ID=999.001",
        ],
    );
    assert_eq!(journal.unwrap().trim(), "sandbox probe");
}

#[test]
fn sandbox_stop_leaves_no_process_or_cgroup_behind() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("sleeper.service", SLEEPER).unwrap();
    sb.systemctl(["start", "sleeper.service"]).unwrap();
    let pids_file = std::fs::read_to_string(sb.dir().join("pids")).unwrap();
    let mut pids: Vec<u32> = pids_file
        .lines()
        .filter(|l| !l.contains("_start="))
        .filter_map(|l| l.split_once('=')?.1.parse().ok())
        .collect();
    pids.push(main_pid(&sb, "sleeper.service"));
    assert_eq!(pids.len(), 5, "{pids_file}");
    let cgroup = std::fs::read_to_string(sb.dir().join("cgroup")).unwrap();
    let cgroup = cgroup.trim();

    let t0 = Instant::now();
    sb.stop().unwrap();
    eprintln!("sandbox stop took {:?}", t0.elapsed());
    let deadline = Instant::now() + Duration::from_secs(5);
    for pid in pids {
        // A zombie waiting for PID 1 to reap it is gone for our purposes.
        while let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            let state = stat.rsplit_once(") ").map(|(_, r)| &r[..1]);
            if state == Some("Z") {
                break;
            }
            assert!(Instant::now() < deadline, "pid {pid} still alive: {stat}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let path = format!("{root}{cgroup}");
        assert!(!std::path::Path::new(&path).exists(), "{path} still exists");
    }
}
