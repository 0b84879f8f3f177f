//! The contract of `UnitControl`: the same scenarios, run against the in-memory `FakeUnits`
//! that the pipeline's unit tests use and against `Systemd` on a real `systemd --user` in
//! the sandbox, give the same outcomes. An outcome is compared by what the pipeline reads and
//! what `UnitRestart` promises (ok, the job's result, ActiveState and SubState, whether there
//! was a main process before and whether the one after is new), never by its sentence.
//!
//! The fake is scripted with `FakeUnits::set`; the real side makes a unit behave the same way
//! with flag files that its `ExecStartPre=` reads (see [`RealUnits::script`]).

use crate::common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use certrenewd::restart::fake::{FakeBehaviour, FakeUnits};
use certrenewd::restart::{RestartMode, Systemd, UnitControl, UnitRestart};
use common::sandbox::Sandbox;

/// Long enough for any restart that works.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The timeout a hanging unit is given.
const HANG_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a restarted unit must stay active on the real side (the daemon's default is 5 s).
const SETTLE: Duration = Duration::from_secs(1);

/// One side of the contract: a `UnitControl` and a way to make its units behave.
trait Side {
    type Control: UnitControl;
    /// `fake` or `systemd`, for the messages.
    fn name(&self) -> &'static str;
    fn control(&self) -> &Self::Control;
    /// Makes `unit` behave as `how` from now on. A unit not seen before is running now
    /// (unless `how` is `Inactive`); a known unit keeps its state and only its next starts
    /// change.
    fn script(&self, unit: &str, how: FakeBehaviour);
}

struct FakeSide(FakeUnits);

impl Side for FakeSide {
    type Control = FakeUnits;
    fn name(&self) -> &'static str {
        "fake"
    }
    fn control(&self) -> &FakeUnits {
        &self.0
    }
    fn script(&self, unit: &str, how: FakeBehaviour) {
        self.0.set(unit, how);
    }
}

/// Units on the sandbox's systemd, each an `ExecStart=/bin/sleep infinity` whose
/// `ExecStartPre=` exits 1 while `DIR/UNIT.fail` exists and sleeps 10 minutes while
/// `DIR/UNIT.hang` does.
struct RealUnits<'a> {
    sb: &'a Sandbox,
    systemd: Systemd,
    known: Mutex<HashSet<String>>,
}

impl RealUnits<'_> {
    fn flag(&self, unit: &str, kind: &str) -> std::path::PathBuf {
        self.sb.dir().join(format!("{unit}.{kind}"))
    }

    fn unit_text(&self, unit: &str) -> String {
        format!(
            "[Unit]\nStartLimitIntervalSec=0\n\n[Service]\n\
             ExecStartPre=/bin/sh -c 'test -e {fail} && exit 1; test -e {hang} && exec sleep 600; exit 0'\n\
             ExecStart=/bin/sleep infinity\n",
            fail = self.flag(unit, "fail").display(),
            hang = self.flag(unit, "hang").display(),
        )
    }

    fn set_flag(&self, unit: &str, kind: &str, on: bool) {
        let path = self.flag(unit, kind);
        match on {
            true => std::fs::write(&path, "").unwrap(),
            false => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

impl Side for RealUnits<'_> {
    type Control = Systemd;
    fn name(&self) -> &'static str {
        "systemd"
    }
    fn control(&self) -> &Systemd {
        &self.systemd
    }
    fn script(&self, unit: &str, how: FakeBehaviour) {
        if self.known.lock().unwrap().insert(unit.to_string()) {
            self.sb.install_unit(unit, &self.unit_text(unit)).unwrap();
            if how != FakeBehaviour::Inactive {
                self.sb.systemctl(["start", unit]).unwrap();
            }
        } else if how == FakeBehaviour::Inactive {
            self.sb.systemctl(["stop", unit]).unwrap();
        }
        if let FakeBehaviour::Fail(result) = &how {
            assert_eq!(
                result, "exit-code",
                "the real units can only fail with exit-code"
            );
        }
        self.set_flag(unit, "fail", matches!(how, FakeBehaviour::Fail(_)));
        self.set_flag(unit, "hang", how == FakeBehaviour::Hang);
    }
}

/// A main process compared with the one before the restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pid {
    /// No main process (MainPID 0).
    None,
    /// The main process from before the restart.
    Old,
    /// A main process other than the one before.
    New,
}

/// What the contract compares of a `UnitRestart`: everything but the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    ok: bool,
    job_result: Option<String>,
    active_state: String,
    sub_state: String,
    before: Pid,
    after: Pid,
}

impl Shape {
    fn of(r: &UnitRestart) -> Shape {
        let pid = |p: u32| match p {
            0 => Pid::None,
            p if p == r.main_pid_before => Pid::Old,
            _ => Pid::New,
        };
        Shape {
            ok: r.ok,
            job_result: r.job_result.clone(),
            active_state: r.active_state.clone(),
            sub_state: r.sub_state.clone(),
            before: pid(r.main_pid_before),
            after: pid(r.main_pid_after),
        }
    }
}

fn shape(
    ok: bool,
    job_result: Option<&str>,
    (active_state, sub_state): (&str, &str),
    before: Pid,
    after: Pid,
) -> Shape {
    Shape {
        ok,
        job_result: job_result.map(String::from),
        active_state: active_state.into(),
        sub_state: sub_state.into(),
        before,
        after,
    }
}

/// Restarts `unit` on `side`, checks the outcome against `want` and returns how long it took.
async fn check<S: Side>(
    side: &S,
    what: &str,
    unit: &str,
    mode: RestartMode,
    timeout: Duration,
    want: Shape,
) -> Duration {
    let t0 = Instant::now();
    let r = side.control().restart(unit, mode, timeout).await;
    let took = t0.elapsed();
    let why = format!("{}: {what} ({mode}, took {took:?}): {r:#?}", side.name());
    assert_eq!(r.unit, unit, "{why}");
    assert_eq!(Shape::of(&r), want, "{why}");
    took
}

/// The scenarios, in order; each names what `UnitControl` promises.
async fn contract<S: Side>(side: &S) {
    use RestartMode::{Restart, TryRestart};
    let done = Some("done");
    let running = ("active", "running");

    // A running unit that restarts fine is active again in a new main process, whether
    // restart or try-restart is asked.
    side.script("fine.service", FakeBehaviour::Ok);
    let back = shape(true, done, running, Pid::Old, Pid::New);
    for mode in [Restart, TryRestart] {
        check(
            side,
            "restarts fine",
            "fine.service",
            mode,
            TIMEOUT,
            back.clone(),
        )
        .await;
    }

    // A running unit whose start fails: the job fails, the unit is failed with no process.
    side.script("broken.service", FakeBehaviour::Fail("exit-code".into()));
    check(
        side,
        "fails to start",
        "broken.service",
        TryRestart,
        TIMEOUT,
        shape(
            false,
            Some("failed"),
            ("failed", "failed"),
            Pid::Old,
            Pid::None,
        ),
    )
    .await;
    // Its fault gone, even try-restart starts the failed unit again (it was not stopped on
    // purpose).
    side.script("broken.service", FakeBehaviour::Ok);
    check(
        side,
        "failed earlier, now fixed",
        "broken.service",
        TryRestart,
        TIMEOUT,
        shape(true, done, running, Pid::None, Pid::New),
    )
    .await;

    // A unit whose start never finishes: the whole timeout is waited for the job, and not
    // much longer; the job is not seen to end, the old process is gone, the unit is starting.
    side.script("stuck.service", FakeBehaviour::Hang);
    let took = check(
        side,
        "hangs past the timeout",
        "stuck.service",
        Restart,
        HANG_TIMEOUT,
        shape(
            false,
            None,
            ("activating", "start-pre"),
            Pid::Old,
            Pid::None,
        ),
    )
    .await;
    assert!(
        took >= HANG_TIMEOUT && took < HANG_TIMEOUT + Duration::from_secs(3),
        "{}: the hanging restart took {took:?}",
        side.name()
    );

    // An inactive unit: try-restart leaves it inactive and that is fine; restart starts it.
    side.script("idle.service", FakeBehaviour::Inactive);
    check(
        side,
        "inactive, try-restart",
        "idle.service",
        TryRestart,
        TIMEOUT,
        shape(true, done, ("inactive", "dead"), Pid::None, Pid::None),
    )
    .await;
    check(
        side,
        "inactive, restart",
        "idle.service",
        Restart,
        TIMEOUT,
        shape(true, done, running, Pid::None, Pid::New),
    )
    .await;

    // A unit that is not on the node: no job; try-restart passes it over (it cannot be
    // running on an old certificate), restart cannot start it.
    let gone = ("inactive", "dead");
    check(
        side,
        "not loaded, try-restart",
        "absent.service",
        TryRestart,
        TIMEOUT,
        shape(true, None, gone, Pid::None, Pid::None),
    )
    .await;
    check(
        side,
        "not loaded, restart",
        "absent.service",
        Restart,
        TIMEOUT,
        shape(false, None, gone, Pid::None, Pid::None),
    )
    .await;
}

/// One contract, both sides: the fake first (no sandbox needed), then the real systemd.
#[tokio::test]
async fn fake_units_keep_the_contract_of_systemd() {
    contract(&FakeSide(FakeUnits::new())).await;

    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let systemd = Systemd::connect_address(&sb.bus_address())
        .await
        .expect("connecting to the sandbox's systemd")
        .with_settle(SETTLE);
    let real = RealUnits {
        sb: &sb,
        systemd,
        known: Mutex::new(HashSet::new()),
    };
    contract(&real).await;
}
