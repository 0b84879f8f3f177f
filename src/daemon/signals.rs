//! What wakes the daemon besides its schedule: SIGHUP, SIGTERM and SIGINT, and systemd's
//! watchdog, answered at half of `WatchdogSec=`.

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

/// WATCHDOG=1 at half of `WatchdogSec=`, when systemd asks for it.
pub(super) struct Watchdog {
    every: Option<Duration>,
    next: Option<Instant>,
}

impl Watchdog {
    pub(super) fn from_env() -> Watchdog {
        let every = sd_notify::watchdog_enabled().map(|d| d / 2);
        Watchdog {
            every,
            next: every.map(|d| Instant::now() + d),
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
        notify(&[NotifyState::Watchdog]);
        self.next = self.every.map(|d| Instant::now() + d);
    }
}
