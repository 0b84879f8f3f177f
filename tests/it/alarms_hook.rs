//! The `alarm_command` hook: environment, failure and timeout.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use certrenewd::alarms::{AlarmEvent, AlarmHook, AlarmKind, AlarmSink, HookError, Transition};

fn event(transition: Transition, reason: &str) -> AlarmEvent {
    AlarmEvent {
        transition,
        kind: AlarmKind::Expired,
        entity: "host=c0.certificate=/etc/etcd/peer.crt".to_owned(),
        reason: reason.to_owned(),
    }
}

/// A hook that writes its ALARM_* environment, NUL-separated, to `out`.
fn recording_hook(dir: &Path, out: &Path) -> anyhow::Result<AlarmHook> {
    let script = dir.join("hook.sh");
    std::fs::write(&script, "#!/bin/sh\nenv -0 > \"$1\"\n")?;
    AlarmHook::new(
        vec![
            "/bin/sh".into(),
            script.display().to_string(),
            out.display().to_string(),
        ],
        Duration::from_secs(10),
    )
}

fn alarm_env(out: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let raw = std::fs::read(out)?;
    Ok(raw
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .filter(|kv| kv.starts_with("ALARM_"))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

#[test]
fn hook_gets_every_documented_variable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("env");
    let hook = recording_hook(dir.path(), &out)?;

    hook.run(&event(
        Transition::Set,
        "expired 2026-11-20\nnot renewable: no CA key",
    ))?;
    let env = alarm_env(&out)?;
    let expected: BTreeMap<String, String> = [
        ("ALARM_ID", "500.210"),
        ("ALARM_STATE", "set"),
        ("ALARM_SEVERITY", "critical"),
        ("ALARM_ENTITY", "host=c0.certificate=/etc/etcd/peer.crt"),
        (
            "ALARM_REASON",
            "expired 2026-11-20\nnot renewable: no CA key",
        ),
        ("ALARM_TEXT", "Certificate expired"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(env, expected);

    hook.run(&event(Transition::Clear, "renewed"))?;
    let env = alarm_env(&out)?;
    assert_eq!(env.get("ALARM_STATE").map(String::as_str), Some("clear"));
    assert_eq!(env.get("ALARM_REASON").map(String::as_str), Some("renewed"));

    // A reason update is not a raise or clear: the hook does not run.
    std::fs::remove_file(&out)?;
    hook.run(&event(
        Transition::Update {
            previous_reason: "a".into(),
        },
        "b",
    ))?;
    assert!(!out.exists(), "hook ran for an update");
    Ok(())
}

#[test]
fn hook_past_its_timeout_is_killed_and_reaped() -> anyhow::Result<()> {
    let hook = AlarmHook::new(
        vec!["/bin/sleep".into(), "30".into()],
        Duration::from_millis(300),
    )?;
    let start = Instant::now();
    let err = hook.run(&event(Transition::Set, "r"));
    let took = start.elapsed();
    let pid = match err {
        Err(HookError::TimedOut { pid, timeout, .. }) => {
            assert_eq!(timeout, Duration::from_millis(300));
            pid
        }
        other => panic!("expected a timeout, got {other:?}"),
    };
    assert!(
        took >= Duration::from_millis(300),
        "returned early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "did not return in time: {took:?}"
    );
    // Killed and reaped: no process (not even a zombie) is left under that PID.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists"
    );

    // Through the sink interface the hook runs in the background: emit returns while the
    // hook still runs, flush waits for it (killed at its timeout), and the failure is only
    // logged.
    let start = Instant::now();
    hook.emit(&event(Transition::Clear, "r"));
    hook.flush();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "flush: {took:?}");
    Ok(())
}

/// Shown by order, not by a stopwatch: when `emit` returns, the hook has not finished (it
/// waits for a file the test creates only afterwards); `flush` returns once it has.
#[test]
fn emit_returns_while_the_hook_runs_and_flush_waits_for_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (go, done) = (dir.path().join("go"), dir.path().join("done"));
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; touch '{}'",
        go.display(),
        done.display()
    );
    let hook = AlarmHook::new(
        vec!["/bin/sh".into(), "-c".into(), script],
        Duration::from_secs(60),
    )?;
    hook.emit(&event(Transition::Set, "r"));
    assert!(!done.exists(), "emit waited for the hook");
    std::fs::write(&go, b"")?;
    hook.flush();
    assert!(done.exists(), "flush returned before the hook ended");
    Ok(())
}

#[test]
fn failing_or_missing_hook_is_an_error_not_a_panic() -> anyhow::Result<()> {
    let hook = AlarmHook::new(
        vec!["/bin/sh".into(), "-c".into(), "exit 3".into()],
        Duration::from_secs(10),
    )?;
    match hook.run(&event(Transition::Set, "r")) {
        Err(HookError::Failed { status, .. }) => assert_eq!(status.code(), Some(3)),
        other => panic!("expected a failure, got {other:?}"),
    }
    hook.emit(&event(Transition::Set, "r"));
    hook.flush();

    let missing = AlarmHook::new(
        vec!["/nonexistent/alarm-hook".into()],
        Duration::from_secs(1),
    )?;
    let err = missing.run(&event(Transition::Set, "r"));
    assert!(
        matches!(&err, Err(HookError::Spawn { program, .. }) if program == "/nonexistent/alarm-hook"),
        "{err:?}"
    );
    missing.emit(&event(Transition::Set, "r"));
    missing.flush();

    assert!(AlarmHook::new(Vec::new(), Duration::from_secs(1)).is_err());
    Ok(())
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_children() -> anyhow::Result<()> {
    // A shell hook whose child outlives it unless the whole process group is killed.
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("child.pid");
    let hook = AlarmHook::new(
        vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("sleep 30 & echo $! > {}; wait", pidfile.display()),
        ],
        Duration::from_millis(500),
    )?;
    let err = hook.run(&event(Transition::Set, "r"));
    assert!(
        matches!(err, Err(HookError::TimedOut { .. })),
        "expected a timeout, got {err:?}"
    );
    let child: u32 = std::fs::read_to_string(&pidfile)?.trim().parse()?;
    // The child was killed with the group; once its parent is gone it is reaped by init (or
    // by us being its subreaper), so wait briefly for /proc to forget it.
    let gone = (0..100).any(|_| {
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let alive = !state.is_empty() && !state.contains(") Z ");
        if alive {
            std::thread::sleep(Duration::from_millis(20));
        }
        !alive
    });
    assert!(gone, "the hook's child {child} survived the timeout");
    Ok(())
}

/// Whether `pid` still runs (a zombie waiting for its new parent to reap it does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_hook_that_forks_sleepers_leaves_no_process_after_its_timeout() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pids = dir.path().join("pids");
    let script = format!(
        "sleep 600 & echo $! > {p}; (sleep 600 & echo $! >> {p}; wait) & echo $! >> {p}; wait",
        p = pids.display()
    );
    let hook = AlarmHook::new(
        vec!["/bin/sh".into(), "-c".into(), script],
        Duration::from_millis(500),
    )?;
    let err = hook.run(&event(Transition::Set, "r"));
    assert!(
        matches!(err, Err(HookError::TimedOut { .. })),
        "expected a timeout, got {err:?}"
    );
    let forked: Vec<u32> = std::fs::read_to_string(&pids)?
        .split_whitespace()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    assert_eq!(forked.len(), 3, "{forked:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while forked.iter().any(|&p| running(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = forked.into_iter().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "still running after the timeout: {left:?}");
    Ok(())
}
