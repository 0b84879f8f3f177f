//! What wakes the daemon besides its schedule: SIGHUP, SIGTERM and SIGINT, and systemd's
//! watchdog, answered at half of `WatchdogSec=` while the daemon's work moves
//! ([`crate::progress`]).

use std::time::Duration;

use anyhow::Context;
use sd_notify::NotifyState;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use super::notify;

/// The signals the daemon acts on.
pub(super) struct Signals {
    pub(super) hup: tokio::signal::unix::Signal,
    pub(super) term: tokio::signal::unix::Signal,
    pub(super) int: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }
}

/// WATCHDOG=1 at half of `WatchdogSec=`, when systemd asks for it, unless a pass's blocking
/// work has not made one step since the last ping: then systemd, pinged no more, kills the
/// daemon (SIGABRT) and restarts it (`Restart=on-failure`), where a daemon that went on
/// pinging would stay stuck with its certificates unwatched.
pub(super) struct Watchdog {
    every: Option<Duration>,
    next: Option<Instant>,
    work: crate::progress::Watch,
    /// Since when the work has not moved, once that was seen.
    stuck_since: Option<Instant>,
}

impl Watchdog {
    pub(super) fn from_env() -> Watchdog {
        let every = sd_notify::watchdog_enabled().map(|d| d / 2);
        Watchdog {
            every,
            next: every.map(|d| Instant::now() + d),
            work: crate::progress::Watch::default(),
            stuck_since: None,
        }
    }

    /// Resolves when the next ping is due; never without a watchdog.
    pub(super) async fn due(&self) {
        match self.next {
            Some(at) => sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    pub(super) fn ping(&mut self) {
        use crate::progress::Seen;
        let now = Instant::now();
        match self.work.look() {
            Seen::Idle | Seen::Moving => {
                if let Some(since) = self.stuck_since.take() {
                    tracing::info!(
                        "the pass moves again after {}s without progress",
                        since.elapsed().as_secs()
                    );
                }
                notify(&[NotifyState::Watchdog]);
            }
            Seen::Stuck => {
                let since = *self
                    .stuck_since
                    .get_or_insert(now - self.every.unwrap_or_default());
                tracing::error!(
                    "the pass has made no progress for {}s (a file or file system that blocks?): WATCHDOG=1 withheld, systemd restarts certrenewd at WatchdogSec=",
                    since.elapsed().as_secs()
                );
            }
        }
        self.next = self.every.map(|d| now + d);
    }
}
