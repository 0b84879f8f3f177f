//! What the daemon remembers between passes, and its upkeep: the status line systemd and
//! `check` show, this node's record for the other controllers, a pass taken in (its counts,
//! its words, when to try again), and a reload of the configuration (SIGHUP).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Local};
use sd_notify::NotifyState;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::schedule::Schedule;
use super::{memory, published, seen, verdict, watch_others};
use crate::config::{Settings, parse_cron};
use crate::pass::{self, PassOptions, PassReport};
use crate::restart::Systemd;

/// What the daemon remembers between passes.
pub(super) struct State {
    pub(super) settings: Settings,
    pub(super) config_path: Option<PathBuf>,
    /// The cron schedule in local time, and the scheduled time waited for.
    pub(super) schedule: Schedule<Local>,
    /// The D-Bus connection, made by the first pass that restarts a unit, then kept.
    pub(super) systemd: Arc<OnceCell<Systemd>>,
    /// Where alarms go (journald, `alarm_command`), made again by each reload.
    pub(super) sinks: Arc<Vec<Box<dyn crate::alarms::AlarmSink>>>,
    pub(super) last_result: String,
    pub(super) retry_at: Option<Instant>,
    pub(super) watched: usize,
    pub(super) due: usize,
    pub(super) alarms: usize,
    /// This node's record for the other controllers: its publisher, what the last scan
    /// said, and the last pass.
    pub(super) publisher: published::Shared,
    pub(super) part: published::NodePart,
    pub(super) last_pass: Option<crate::coordinate::record::LastPass>,
    /// The watch of the other controllers, a task beside the passes.
    pub(super) watcher: watch_others::Watcher,
    /// What the node runs, as the last pass read it (the static pods alone until then).
    pub(super) node: Reading,
}

/// What the node runs, as the last pass read it, shared with the watch of the other
/// controllers and given to the publisher: both reach etcd as it says.
pub(super) type Reading = Arc<std::sync::RwLock<crate::components::NodeReading>>;

pub(super) fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("sd_notify failed: {e}");
    }
}

impl State {
    pub(super) fn status_line(&self) -> String {
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
    pub(super) fn splay_note(&self) -> String {
        match self.settings.randomized_delay.is_zero() {
            true => String::new(),
            false => format!(" (+{} s splay)", self.schedule.delay().as_secs()),
        }
    }

    /// Logs when the next scheduled pass runs, once per scheduled time.
    pub(super) fn log_next(&self, logged: &mut Option<DateTime<Local>>) {
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

    pub(super) fn announce(&self) {
        let status = self.status_line();
        notify(&[NotifyState::Status(&status)]);
        seen::publish(&self.settings.state_dir, &status, false);
    }

    /// Publishes this node's record for the other controllers, in a task of its own.
    pub(super) fn publish(&self) {
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
    pub(super) fn publish_wanted(&mut self) {
        let alarms = count_alarms(&self.settings.state_dir);
        if alarms != self.alarms {
            self.alarms = alarms;
            self.announce();
        }
        self.publish();
    }

    /// What the watch of the other controllers works with now.
    pub(super) fn watched(&self) -> watch_others::Watched {
        watch_others::Watched {
            settings: self.settings.clone(),
            sinks: self.sinks.clone(),
            publisher: self.publisher.clone(),
            node: self.node.clone(),
        }
    }

    /// Connects to systemd when a pass first needs it and keeps the connection; a failed
    /// connect is tried again by the next pass that needs it.
    pub(super) fn systemd(&self) -> impl AsyncFnOnce() -> anyhow::Result<Systemd> + use<> {
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
    pub(super) fn record(&mut self, result: &anyhow::Result<PassReport>) {
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
    pub(super) async fn reload(&mut self) {
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
pub(super) fn count_alarms(state_dir: &std::path::Path) -> usize {
    crate::alarms::AlarmStore::all(state_dir).map_or(0, |a| a.len())
}

/// Scans the watches of `settings` as the node was last read (`node`: the last pass's
/// reading; before one, the static pods alone, since no systemd is asked before ready): how
/// many certificates are watched, how many are due, and the node's part of its record.
pub(super) async fn survey(
    settings: &Settings,
    node: &Reading,
) -> anyhow::Result<(usize, usize, published::NodePart)> {
    let owned = settings.clone();
    let node = node.read().map(|n| n.clone()).unwrap_or_default();
    let counts = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        let owned = pass::watching_named(&owned, &node);
        let policy = pass::policy(&owned, &PassOptions::default(), Default::default());
        let (inv, plan) = pass::scan_and_plan(&owned, &policy, &node);
        let part = published::node_part(&inv, &plan);
        (plan.items.len(), plan.due_count(), part)
    })
    .await
    .context("the scan's worker thread failed")?;
    memory::release_freed();
    Ok(counts)
}
