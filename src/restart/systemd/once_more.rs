//! A restart that meets a broken D-Bus connection: connect again and try once more, or,
//! when the restart job was already queued, only watch its unit come back, so that a unit
//! (etcd, say) is never restarted twice without the waits and checks after a restart. Every
//! call is bounded by the restart's timeout and settle period.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Causes, Fence, Link, RestartMode, Snapshot, Systemd, UnitRestart, is_connection_error,
};

impl Systemd {
    /// One restart over `link`, every D-Bus call within the restart's time; on an error of
    /// the connection itself, reconnects and tries once more. Once the restart job was
    /// queued, trying once more only watches that job's unit come back: the unit (etcd,
    /// say) is never restarted twice without the waits and checks that follow a restart.
    pub(super) async fn restart_once_more(
        &self,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        fence: Fence,
    ) -> UnitRestart {
        let mut out = UnitRestart::failed(unit, String::new());
        let mut progress = Progress {
            fence,
            ..Progress::default()
        };
        let first = self
            .bounded(&self.link(), unit, mode, timeout, &mut out, &mut progress)
            .await;
        let Err(e) = first else {
            return out;
        };
        out.ok = false;
        if !is_connection_error(&e) {
            out.detail = Causes(&e).to_string();
            return out;
        }
        let again = match &progress.before {
            Some(_) if progress.queued => "watching the restart already queued",
            _ => "trying once more",
        };
        tracing::warn!(
            unit,
            "the D-Bus connection to systemd failed ({}): connecting again and {again}",
            Causes(&e)
        );
        let link = match self.reconnect().await {
            Ok(link) => link,
            Err(again) => {
                out.detail = format!(
                    "{}; connecting again failed: {}",
                    Causes(&e),
                    Causes(&again)
                );
                out.not_restarted = !progress.queued;
                return out;
            }
        };
        let mut out = UnitRestart::failed(unit, String::new());
        let second = match (progress.queued, progress.before.take()) {
            (true, Some(before)) => {
                out.main_pid_before = before.main_pid;
                let watch = link.watch(unit, &before, mode, timeout, self.settle, &mut out);
                match tokio::time::timeout(bound(timeout, self.settle), watch).await {
                    Ok(r) => r,
                    Err(_) => Err(anyhow::anyhow!(no_answer(timeout, self.settle))),
                }
            }
            _ => {
                let mut progress = Progress {
                    fence: progress.fence.clone(),
                    ..Progress::default()
                };
                self.bounded(&link, unit, mode, timeout, &mut out, &mut progress)
                    .await
            }
        };
        if let Err(again) = second {
            out.ok = false;
            out.detail = format!(
                "{} (on a new connection, after: {})",
                Causes(&again),
                Causes(&e)
            );
        }
        out
    }

    /// [`Link::run`] within the restart's time and settle period, and some slack: systemd
    /// that does not answer a call fails the restart instead of holding the pass.
    async fn bounded(
        &self,
        link: &Link,
        unit: &str,
        mode: RestartMode,
        timeout: Duration,
        out: &mut UnitRestart,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let run = link.run(unit, mode, timeout, self.settle, out, progress);
        match tokio::time::timeout(bound(timeout, self.settle), run).await {
            Ok(r) => r,
            Err(_) => {
                out.ok = false;
                out.detail = no_answer(timeout, self.settle);
                Ok(())
            }
        }
    }
}

impl Link {
    /// After the connection broke with the restart job of `unit` queued: watches the unit
    /// come back in a new run since `before`, as the restart would have, restarting nothing.
    async fn watch(
        &self,
        unit: &str,
        before: &Snapshot,
        mode: RestartMode,
        timeout: Duration,
        settle: Duration,
        out: &mut UnitRestart,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let handle = self.load(unit).await?;
        handle
            .await_active(before, mode, timeout, deadline, settle, out)
            .await
    }
}

/// How far a restart got: its unit's state before, and whether the job was queued; and
/// the fence asked right before queueing it.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) before: Option<Snapshot>,
    pub(super) queued: bool,
    pub(super) fence: Fence,
}

/// The most one restart may take over D-Bus: its timeout and settle period, and slack.
fn bound(timeout: Duration, settle: Duration) -> Duration {
    timeout + settle + Duration::from_secs(10)
}

fn no_answer(timeout: Duration, settle: Duration) -> String {
    format!(
        "systemd did not answer on D-Bus within {}s (the restart's timeout and settle period)",
        bound(timeout, settle).as_secs()
    )
}
