//! `certrenewd run`: the one task that owns the daemon's state and waits, without polling,
//! for the next cron tick (on the wall clock: see `wall_clock`), a retry, SIGHUP (reload),
//! SIGTERM/SIGINT (stop), a watchdog ping, or the watch of the other controllers
//! (`watch_others`) asking for this node's record to be published again. What it remembers
//! between passes, and keeps up to date, is `remembered`'s.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Local};
use sd_notify::NotifyState;
use tokio::time::{Instant, sleep_until};

mod boot;
pub mod memory;
mod watch_others;
mod published;
mod remembered;
pub(crate) mod schedule;
pub mod seen;
mod signals;
mod verdict;
mod wall_clock;

use self::remembered::{Reading, State, count_alarms, notify, survey};
use self::schedule::Schedule;
use self::signals::{Signals, Watchdog};
use self::wall_clock::Woke;
use crate::config::{Settings, parse_cron};
use crate::pass::{self, PassOptions};

/// Why the daemon is about to run a pass.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Start,
    /// The repair at start owes restarts: they are done at once, even without `run_on_start`.
    Recovery,
    Cron,
    Retry,
}

/// What the daemon's main loop does next. Idle, it waits for a cron tick, a retry, or a
/// signal; a pass runs to its end (its waits cut short by SIGTERM) and leaves the daemon
/// idle, or stopping; a pass stuck after SIGTERM ends the process (`give_up_on_stuck_pass`).
/// docs/architecture.md draws it.
#[derive(Debug, Clone, Copy)]
enum Next {
    Idle,
    Pass(Trigger),
    Stop,
}

/// A pass in flight, as its signals left it: running (SIGHUP: reload after it), or asked to
/// stop, with how many seconds in a row its blocking work has made no step.
enum InFlight {
    Running { reload_after: bool },
    Stopping { still: u64 },
}

impl InFlight {
    /// Asked to stop: a pass asked again keeps its count.
    fn stopped(self) -> InFlight {
        match self {
            InFlight::Running { .. } => InFlight::Stopping { still: 0 },
            stopping => stopping,
        }
    }

    fn is_stopping(&self) -> bool {
        matches!(self, InFlight::Stopping { .. })
    }
}

/// Runs the daemon until SIGTERM or SIGINT. `settings` were validated by the caller.
pub async fn run(settings: Settings, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    let cron = parse_cron(&settings.schedule).map_err(anyhow::Error::msg)?;
    let mut signals = Signals::install()?;
    let mut watchdog = Watchdog::from_env();
    let (mut state, owed) = start(settings, config_path, cron).await?;
    let mut next = match (state.settings.run_on_start, owed) {
        (true, _) => Next::Pass(Trigger::Start),
        (false, true) => Next::Pass(Trigger::Recovery),
        (false, false) => Next::Idle,
    };
    let mut logged = None;
    let mut orphans = tokio::time::interval(ORPHANS_LOOK);
    orphans.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        match next {
            Next::Stop => break,
            Next::Pass(trigger) => {
                next = run_pass(&mut state, trigger, &mut signals, &mut watchdog).await;
                continue;
            }
            Next::Idle => {}
        }
        state.log_next(&mut logged);
        let wake = state.schedule.wake();
        let wanted = state.watcher.wanted.clone();
        tokio::select! {
            _ = wake_at(wake) => {
                if state.schedule.due(&Local::now()).is_some() {
                    next = Next::Pass(Trigger::Cron);
                }
            }
            _ = sleep_until(state.retry_at.unwrap_or_else(far)), if state.retry_at.is_some() => {
                state.retry_at = None;
                next = Next::Pass(Trigger::Retry);
            }
            _ = watchdog.due() => watchdog.ping(),
            _ = orphans.tick() => {
                let dir = state.settings.state_dir.clone();
                let _ = tokio::task::spawn_blocking(move || pass::put_back_orphans(&dir, "a certrenewd that is gone")).await;
            }
            _ = wanted.notified() => state.publish_wanted(),
            _ = signals.hup.recv() => state.reload().await,
            _ = signals.term.recv() => next = Next::Stop,
            _ = signals.int.recv() => next = Next::Stop,
        }
    }
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    seen::publish(&state.settings.state_dir, &state.status_line(), true);
    // Alarm hooks still queued run (each within its timeout) before the daemon exits.
    let sinks = state.sinks.clone();
    let _ = tokio::task::spawn_blocking(move || pass::flush_sinks(&sinks)).await;
    state.watcher.stop();
    published::retire(&state.publisher, std::time::Duration::from_secs(2)).await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves when the wall clock reaches `at`, or is set (the schedule is then read again);
/// never without a time. Without a timerfd (a seccomp filter, an old kernel) it looks again
/// at least every minute.
async fn wake_at(at: Option<DateTime<Local>>) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(at) = at else {
        return std::future::pending().await;
    };
    match wall_clock::until(at.into()).await {
        Ok(Woke::Reached) => {}
        Ok(Woke::ClockSet) => tracing::info!("the wall clock was set: reading the schedule again"),
        Err(e) => {
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "cannot wait on the wall clock ({e}): reading the schedule every minute instead"
                );
            }
            let left = (at - Local::now()).to_std().unwrap_or_default();
            tokio::time::sleep(left.min(Duration::from_secs(60))).await;
        }
    }
}

/// An instant that never comes (a year away).
fn far() -> Instant {
    Instant::now() + Duration::from_secs(365 * 86_400)
}

/// Repairs what a crash left, takes the first inventory and sends READY=1. Also returns
/// whether the repair owes restarts.
async fn start(
    settings: Settings,
    config_path: Option<PathBuf>,
    cron: croner::Cron,
) -> anyhow::Result<(State, bool)> {
    // An interrupted install and static pod manifests a crash left out are repaired before
    // READY=1, even without a pass at start: the units ordered after this one start on
    // whole pairs.
    let owned = settings.clone();
    let owed = match tokio::task::spawn_blocking(move || pass::recover_at_start(&owned)).await {
        Ok(Ok(owed)) => owed,
        Ok(Err(e)) => {
            tracing::error!("repairing what a crash left: {e:#}");
            false
        }
        Err(e) => {
            tracing::error!("the recovery worker thread failed: {e}");
            false
        }
    };
    let sinks = pass::sinks(&settings);
    if settings.run_on_start {
        boot::renew_before_ready(&settings, &sinks).await;
    }
    // No systemd is asked before ready: the units' settings come with the first pass.
    let node: Reading = Arc::new(std::sync::RwLock::new(
        crate::components::NodeReading::read(&settings.manifests_dir),
    ));
    let (watched, due, part) = survey(&settings, &node).await?;
    let publisher = published::publisher(&settings);
    let watcher = watch_others::Watcher::start(watch_others::Watched {
        settings: settings.clone(),
        sinks: sinks.clone(),
        publisher: publisher.clone(),
        node: node.clone(),
    });
    let splay = settings.randomized_delay;
    let state = State {
        watched,
        due,
        alarms: count_alarms(&settings.state_dir),
        settings,
        config_path,
        schedule: Schedule::new(cron, &Local::now()).with_splay(splay, schedule::random_delay),
        systemd: Arc::default(),
        sinks,
        last_result: "none yet".into(),
        retry_at: None,
        publisher,
        part,
        last_pass: None,
        watcher,
        node,
    };
    state.publish();
    let status = state.status_line();
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    seen::publish(&state.settings.state_dir, &status, false);
    tracing::info!("started: {status}");
    if owed {
        tracing::info!("restarts owed by an earlier pass: running a pass now");
    }
    Ok((state, owed))
}

/// How often the daemon looks for static pod manifests that a process now gone left out of
/// the manifest directory (a `renew` killed mid-restart): its pod stays down meanwhile.
const ORPHANS_LOOK: Duration = Duration::from_secs(15);

/// How long after SIGTERM a pass may make no step before the daemon exits without it.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Ends the daemon whose pass made no step for [`STOP_GRACE`] after SIGTERM: its thread is
/// stuck in a system call (a file or file system that blocks) and would hold the stop until
/// `TimeoutStopSec=`. Exiting is a crash as far as the pass is concerned, and every step of
/// it survives one: an install half done is finished or rolled back at the next start, the
/// restarts owed stay recorded.
fn give_up_on_stuck_pass(state: &State) -> ! {
    tracing::error!(
        "stopping: the pass has made no progress for {}s since SIGTERM (a file or file system that blocks?): exiting without it; the next start repairs what it left",
        STOP_GRACE.as_secs()
    );
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: the pass was stuck"),
    ]);
    seen::publish(&state.settings.state_dir, "stopped with a pass stuck", true);
    std::process::exit(1)
}

/// Runs one pass to completion, pinging the watchdog meanwhile; signals that arrive during
/// it are acted on after it. Returns what the daemon does next: idle, or stop.
async fn run_pass(
    state: &mut State,
    trigger: Trigger,
    signals: &mut Signals,
    watchdog: &mut Watchdog,
) -> Next {
    let status = format!("running a pass ({trigger:?})");
    notify(&[NotifyState::Status(&status)]);
    seen::publish(&state.settings.state_dir, &status, false);
    tracing::info!("pass starting ({trigger:?})");
    let connect = state.systemd();
    let settings = state.settings.clone();
    // SIGTERM during the pass ends its waits for the restart lock and the quorum gate at
    // once; the restarts it did not do stay owed to the next start.
    let (stop, stop_rx) = crate::coordinate::Stop::channel();
    let opts = PassOptions {
        stop: stop_rx,
        ..PassOptions::default()
    };
    let seams = pass::Seams::etcd(&settings, &opts.stop);
    let fut = pass::run(&settings, &opts, connect, seams, state.sinks.clone());
    tokio::pin!(fut);
    let mut in_flight = InFlight::Running {
        reload_after: false,
    };
    // After SIGTERM: the pass's blocking work, looked at every second.
    let mut after_term = crate::progress::Watch::default();
    let result = loop {
        tokio::select! {
            r = &mut fut => break r,
            _ = watchdog.due() => watchdog.ping(),
            _ = tokio::time::sleep(Duration::from_secs(1)), if in_flight.is_stopping() => {
                if let InFlight::Stopping { still } = &mut in_flight {
                    *still = match after_term.look() {
                        crate::progress::Seen::Stuck => *still + 1,
                        _ => 0,
                    };
                    if *still >= STOP_GRACE.as_secs() {
                        give_up_on_stuck_pass(state);
                    }
                }
            }
            _ = signals.term.recv() => { tracing::info!("SIGTERM: ending the pass in flight at its next step (no more waiting for a lock or the quorum gate), then stopping"); stop.request("SIGTERM"); in_flight = in_flight.stopped(); }
            _ = signals.int.recv() => { tracing::info!("SIGINT: ending the pass in flight at its next step (no more waiting for a lock or the quorum gate), then stopping"); stop.request("SIGINT"); in_flight = in_flight.stopped(); }
            _ = signals.hup.recv() => {
                tracing::info!("SIGHUP during a pass: reloading after it");
                if let InFlight::Running { reload_after } = &mut in_flight {
                    *reload_after = true;
                }
            }
        }
    };
    let stopping = in_flight.is_stopping();
    state.record(&result);
    if let (Err(e), false) = (&result, stopping) {
        let (settings, sinks) = (&state.settings, state.sinks.clone());
        pass::raise_could_not_run(settings, format!("{e:#}"), sinks).await;
    }
    // The pass's inventory is the node before it: what it changed is read again, so that
    // the other controllers see the certificates renewed and the CAs re-issued as they are
    // now (not "due", not a CA that drifted).
    let changed = result.as_ref().is_ok_and(|r| !r.renewals.is_empty());
    drop(result);
    if changed && !stopping {
        match survey(&state.settings, &state.node).await {
            Ok((watched, due, part)) => {
                (state.watched, state.due, state.part) = (watched, due, part)
            }
            Err(e) => tracing::warn!("reading the node again after the pass: {e:#}"),
        }
    }
    memory::release_freed();
    state.announce();
    state.publish();
    match in_flight {
        InFlight::Stopping { .. } => Next::Stop,
        InFlight::Running { reload_after } => {
            if reload_after {
                state.reload().await;
            }
            Next::Idle
        }
    }
}
