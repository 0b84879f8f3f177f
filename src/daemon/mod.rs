//! `certrenewd run`: the one task that owns the daemon's state and waits, without polling,
//! for the next cron tick (on the wall clock: see `wall_clock`), a retry, SIGHUP (reload),
//! SIGTERM/SIGINT (stop), a watchdog ping, or the watch of the other controllers (`peers`)
//! asking for this node's record to be published again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Local};
use sd_notify::NotifyState;
use tokio::sync::OnceCell;
use tokio::time::{Instant, sleep_until};

mod boot;
pub mod memory;
mod watch_others;
mod published;
pub(crate) mod schedule;
pub mod seen;
mod signals;
mod verdict;
mod wall_clock;

use self::schedule::Schedule;
use self::signals::{Signals, Watchdog};
use self::wall_clock::Woke;
use crate::config::{Settings, parse_cron};
use crate::pass::{self, PassOptions, PassReport};
use crate::restart::Systemd;

/// Why the daemon is about to run a pass.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Start,
    /// The repair at start owes restarts: they are done at once, even without `run_on_start`.
    Recovery,
    Cron,
    Retry,
}

/// What the daemon remembers between passes.
struct State {
    settings: Settings,
    config_path: Option<PathBuf>,
    /// The cron schedule in local time, and the scheduled time waited for.
    schedule: Schedule<Local>,
    /// The D-Bus connection, made by the first pass that restarts a unit, then kept.
    systemd: Arc<OnceCell<Systemd>>,
    /// Where alarms go (journald, `alarm_command`), made again by each reload.
    sinks: Arc<Vec<Box<dyn crate::alarms::AlarmSink>>>,
    last_result: String,
    retry_at: Option<Instant>,
    watched: usize,
    due: usize,
    alarms: usize,
    /// This node's record for the other controllers: its publisher, what the last scan
    /// said, and the last pass.
    publisher: published::Shared,
    part: published::NodePart,
    last_pass: Option<crate::coordinate::record::LastPass>,
    /// The watch of the other controllers, a task beside the passes.
    watcher: watch_others::Watcher,
    /// What the node runs, as the last pass read it (the static pods alone until then).
    node: Reading,
}

/// What the node runs, as the last pass read it, shared with the watch of the other
/// controllers and given to the publisher: both reach etcd as it says.
type Reading = Arc<std::sync::RwLock<crate::components::NodeReading>>;

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("sd_notify failed: {e}");
    }
}

impl State {
    fn status_line(&self) -> String {
        let next = self
            .schedule
            .next()
            .map(|t| t.format("%Y-%m-%d %H:%M:%S %Z").to_string() + &self.splay_note())
            .unwrap_or_else(|| "never".into());
        let retry = if self.retry_at.is_some() {
            format!(", retry in {}s", self.settings.retry_interval.as_secs())
        } else {
            String::new()
        };
        let plural = crate::pass::plural;
        format!(
            "{} certificate{} watched, {} due, {} alarm{} active; last pass: {}; next pass {next}{retry}",
            self.watched,
            plural(self.watched),
            self.due,
            self.alarms,
            plural(self.alarms),
            self.last_result
        )
    }

    /// " (+N s splay)" when scheduled passes are splayed, else nothing.
    fn splay_note(&self) -> String {
        match self.settings.randomized_delay.is_zero() {
            true => String::new(),
            false => format!(" (+{} s splay)", self.schedule.delay().as_secs()),
        }
    }

    /// Logs when the next scheduled pass runs, once per scheduled time.
    fn log_next(&self, logged: &mut Option<DateTime<Local>>) {
        let wake = self.schedule.wake();
        if wake == *logged {
            return;
        }
        *logged = wake;
        if let Some(at) = self.schedule.next() {
            let at = at.format("%Y-%m-%d %H:%M:%S %Z");
            tracing::info!("next pass at {at}{}", self.splay_note());
        }
    }

    fn announce(&self) {
        let status = self.status_line();
        notify(&[NotifyState::Status(&status)]);
        seen::publish(&self.settings.state_dir, &status, false);
    }

    /// Publishes this node's record for the other controllers, in a task of its own.
    fn publish(&self) {
        let d = published::Daemon {
            settings: &self.settings,
            interval: self.schedule.interval().unwrap_or_default() + self.settings.randomized_delay,
            next_pass: self.schedule.wake().map(|t| t.timestamp()),
            last_pass: self.last_pass.clone(),
        };
        let rec = published::record(&self.part, &d);
        let off = self.settings.coordination.enabled == crate::config::Enabled::Off;
        let node = self.node.read().map(|n| n.clone()).unwrap_or_default();
        published::publish(&self.publisher, rec, off, node);
    }

    /// Publishes the record again as the watch of the other controllers asks: the alarms on
    /// their behalf changed.
    fn publish_wanted(&mut self) {
        let alarms = count_alarms(&self.settings.state_dir);
        if alarms != self.alarms {
            self.alarms = alarms;
            self.announce();
        }
        self.publish();
    }

    /// What the watch of the other controllers works with now.
    fn watched(&self) -> watch_others::Watched {
        watch_others::Watched {
            settings: self.settings.clone(),
            sinks: self.sinks.clone(),
            publisher: self.publisher.clone(),
            node: self.node.clone(),
        }
    }

    /// Connects to systemd when a pass first needs it and keeps the connection; a failed
    /// connect is tried again by the next pass that needs it.
    fn systemd(&self) -> impl AsyncFnOnce() -> anyhow::Result<Systemd> + use<> {
        let cell = self.systemd.clone();
        let (bus, settle) = (self.settings.bus, self.settings.restart_settle);
        async move || {
            cell.get_or_try_init(|| Systemd::connect(bus))
                .await
                .cloned()
                .map(|s| s.with_settle(settle))
        }
    }

    /// Takes in a pass that ended: the counts, the status words, when to try again.
    fn record(&mut self, result: &anyhow::Result<PassReport>) {
        let ended = verdict::Ended::of(result);
        let v = verdict::verdict(
            &ended,
            self.settings.retry_interval,
            self.settings.inhibit_max_age,
            time::OffsetDateTime::now_utc(),
        );
        for (level, line) in &v.say {
            match level {
                verdict::Level::Info => tracing::info!("{line}"),
                verdict::Level::Warn => tracing::warn!("{line}"),
                verdict::Level::Error => tracing::error!("{line}"),
            }
        }
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let (word, ok) = match &ended {
            verdict::Ended::Deferred(_) => ("inhibited", true),
            verdict::Ended::Ran { success, .. } => {
                (if *success { "ok" } else { "failed" }, *success)
            }
            verdict::Ended::Failed(_) => ("failed", false),
        };
        let earlier = self.last_pass.as_ref().and_then(|p| p.failing_since);
        let failing_since = published::failing_since(&self.settings.state_dir, ok, now, earlier);
        let mut last = crate::coordinate::record::LastPass {
            at: now,
            result: word.into(),
            failing_since,
            watched: self.watched,
            due: self.due,
            ..Default::default()
        };
        if let (Ok(r), verdict::Ended::Ran { .. }) = (result, &ended) {
            self.part = published::node_part(&r.inventory, &r.plan);
            if let Ok(mut node) = self.node.write() {
                *node = r.node.clone();
            }
            (last.watched, last.due, last.renewed) =
                (r.plan.items.len(), r.still_due_count(), r.renewed_count());
            last.reloads_proven = r.restarts.reloaded.len();
            last.reloads_refused = r.restarts.refused.len();
            last.reloads_restarted = r.restarts.fell_back.len();
        }
        self.last_pass = Some(last);
        if let (Ok(r), verdict::Ended::Ran { .. }) = (result, &ended) {
            self.watched = r.plan.items.len();
            self.due = r.still_due_count();
            self.alarms = count_alarms(&self.settings.state_dir);
        }
        self.last_result = v.last;
        self.retry_at = v.retry_in.map(|d| Instant::now() + d);
    }

    /// Reloads the configuration (SIGHUP) and scans the watches it names.
    async fn reload(&mut self) {
        let now = sd_notify::NotifyState::monotonic_usec_now();
        match now {
            Ok(m) => notify(&[NotifyState::Reloading, m]),
            Err(_) => notify(&[NotifyState::Reloading]),
        }
        let loaded = Settings::load(self.config_path.as_deref())
            .map_err(anyhow::Error::from)
            .and_then(|new| {
                let cron = parse_cron(&new.schedule).map_err(anyhow::Error::msg)?;
                Ok((new, cron))
            });
        match loaded {
            Ok((new, cron)) => {
                if new.bus != self.settings.bus {
                    self.systemd = Arc::default();
                }
                // Events already queued for the old hook still run, in its thread.
                self.sinks = pass::sinks(&new);
                if new.coordination != self.settings.coordination
                    || new.state_dir != self.settings.state_dir
                {
                    published::retire(&self.publisher, published::PUBLISH_FOR).await;
                    self.publisher = published::publisher(&new);
                }
                self.settings = new;
                let splay = self.settings.randomized_delay;
                self.schedule.replace(cron, &Local::now(), splay);
                tracing::info!("configuration reloaded");
                match survey(&self.settings, &self.node).await {
                    Ok((watched, due, part)) => {
                        (self.watched, self.due, self.part) = (watched, due, part);
                    }
                    Err(e) => tracing::warn!("{e:#}"),
                }
                self.watcher.update(self.watched());
                self.publish();
            }
            Err(e) => tracing::error!("reload refused, keeping the running configuration: {e:#}"),
        }
        let status = self.status_line();
        notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
        seen::publish(&self.settings.state_dir, &status, false);
    }
}

/// How many alarms are active on this node: the passes' and those raised on the others' behalf.
fn count_alarms(state_dir: &std::path::Path) -> usize {
    crate::alarms::AlarmStore::all(state_dir).map_or(0, |a| a.len())
}

/// Scans the watches of `settings` as the node was last read (`node`: the last pass's
/// reading; before one, the static pods alone, since no systemd is asked before ready): how
/// many certificates are watched, how many are due, and the node's part of its record.
async fn survey(
    settings: &Settings,
    node: &Reading,
) -> anyhow::Result<(usize, usize, published::NodePart)> {
    let owned = settings.clone();
    let node = node.read().map(|n| n.clone()).unwrap_or_default();
    let counts = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        let owned = pass::watching_named(&owned, &node);
        let policy = pass::policy(&owned, &PassOptions::default());
        let (inv, plan) = pass::scan_and_plan(&owned, &policy, &node);
        let part = published::node_part(&inv, &plan);
        (plan.items.len(), plan.due_count(), part)
    })
    .await
    .context("the scan's worker thread failed")?;
    memory::release_freed();
    Ok(counts)
}

/// Runs the daemon until SIGTERM or SIGINT. `settings` were validated by the caller.
pub async fn run(settings: Settings, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    let cron = parse_cron(&settings.schedule).map_err(anyhow::Error::msg)?;
    let mut signals = Signals::install()?;
    let mut watchdog = Watchdog::from_env();
    let (mut state, owed) = start(settings, config_path, cron).await?;
    let mut pending = match (state.settings.run_on_start, owed) {
        (true, _) => Some(Trigger::Start),
        (false, true) => Some(Trigger::Recovery),
        (false, false) => None,
    };
    let mut stopping = false;
    let mut logged = None;
    let mut orphans = tokio::time::interval(ORPHANS_LOOK);
    orphans.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stopping {
        if let Some(trigger) = pending.take() {
            stopping = run_pass(&mut state, trigger, &mut signals, &mut watchdog).await;
            continue;
        }
        state.log_next(&mut logged);
        let next = state.schedule.wake();
        let wanted = state.watcher.wanted.clone();
        tokio::select! {
            _ = wake_at(next) => {
                if state.schedule.due(&Local::now()).is_some() {
                    pending = Some(Trigger::Cron);
                }
            }
            _ = sleep_until(state.retry_at.unwrap_or_else(far)), if state.retry_at.is_some() => {
                state.retry_at = None;
                pending = Some(Trigger::Retry);
            }
            _ = watchdog.due() => watchdog.ping(),
            _ = orphans.tick() => {
                let dir = state.settings.state_dir.clone();
                let _ = tokio::task::spawn_blocking(move || pass::put_back_orphans(&dir, "a certrenewd that is gone")).await;
            }
            _ = wanted.notified() => state.publish_wanted(),
            _ = signals.hup.recv() => state.reload().await,
            _ = signals.term.recv() => stopping = true,
            _ = signals.int.recv() => stopping = true,
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
/// it are acted on after it. Returns whether the daemon is to stop.
async fn run_pass(
    state: &mut State,
    trigger: Trigger,
    signals: &mut Signals,
    watchdog: &mut Watchdog,
) -> bool {
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
    let mut gate = pass::gate(&settings, &opts.stop);
    let fut = pass::run(&settings, &opts, connect, &mut gate, state.sinks.clone());
    tokio::pin!(fut);
    let (mut stopping, mut reload_after) = (false, false);
    // After SIGTERM: the pass's blocking work, looked at every second.
    let (mut after_term, mut still) = (crate::progress::Watch::default(), 0u64);
    let result = loop {
        tokio::select! {
            r = &mut fut => break r,
            _ = watchdog.due() => watchdog.ping(),
            _ = tokio::time::sleep(Duration::from_secs(1)), if stopping => {
                still = match after_term.look() {
                    crate::progress::Seen::Stuck => still + 1,
                    _ => 0,
                };
                if still >= STOP_GRACE.as_secs() {
                    give_up_on_stuck_pass(state);
                }
            }
            _ = signals.term.recv() => { tracing::info!("SIGTERM: ending the pass in flight at its next step (no more waiting for a lock or the quorum gate), then stopping"); stop.request("SIGTERM"); stopping = true; }
            _ = signals.int.recv() => { tracing::info!("SIGINT: ending the pass in flight at its next step (no more waiting for a lock or the quorum gate), then stopping"); stop.request("SIGINT"); stopping = true; }
            _ = signals.hup.recv() => { tracing::info!("SIGHUP during a pass: reloading after it"); reload_after = true; }
        }
    };
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
    if reload_after && !stopping {
        state.reload().await;
    }
    stopping
}
