//! The process asked to stop (the daemon's SIGTERM, `renew`'s Ctrl-C): what ends a pass's
//! waits (the restart lock, the quorum gate, a restarted server's serving check) at once
//! instead of after `lock_timeout_secs`, `gate_timeout_secs` or `restart_timeout_secs`. At
//! shutdown etcd and kubelet stop first; a pass waiting for them must not hold the reboot.

use tokio::sync::watch;

/// A receiver of the stop request, with what asked it (the signal received);
/// `Stop::default()` never fires.
#[derive(Debug, Clone, Default)]
pub struct Stop(Option<watch::Receiver<Option<&'static str>>>);

/// The daemon's end: `request` fires every `Stop` made from it.
#[derive(Debug)]
pub struct StopSender(watch::Sender<Option<&'static str>>);

impl Stop {
    /// A sender and its first receiver.
    pub fn channel() -> (StopSender, Stop) {
        let (tx, rx) = watch::channel(None);
        (StopSender(tx), Stop(Some(rx)))
    }

    /// Whether a stop was requested.
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| rx.borrow().is_some())
    }

    /// What asked the stop (`SIGTERM`, `SIGINT`, …); `asked` before any ask.
    pub fn by(&self) -> &'static str {
        self.0
            .as_ref()
            .and_then(|rx| *rx.borrow())
            .unwrap_or("asked")
    }

    /// Why the waits ended, for the restarts left: the signal received named as such.
    pub fn reason(&self) -> String {
        let by = self.by();
        format!(
            "certrenewd is stopping ({by}): the wait ended, nothing more is restarted; the restarts stay owed to the next pass"
        )
    }

    /// Resolves once a stop is requested; never without a sender.
    pub async fn wait(&mut self) {
        if let Some(rx) = &mut self.0
            && rx.wait_for(Option::is_some).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await
    }
}

impl Stop {
    /// `work`, unless a stop is requested first: then [`Stopping`], its [`Stop::reason`].
    pub async fn or_stopping<T, E: From<Stopping>>(
        &self,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let mut stop = self.clone();
        tokio::select! {
            done = work => done,
            _ = stop.wait() => Err(Stopping(self.reason()).into()),
        }
    }
}

/// A wait ended by a stop request, saying so as [`Stop::reason`] does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stopping(pub String);

impl StopSender {
    /// Asks every receiver to stop, saying what asked (`SIGTERM`); the first ask is kept.
    pub fn request(&self, by: &'static str) {
        self.0.send_if_modified(|v| match v {
            Some(_) => false,
            None => {
                *v = Some(by);
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_ends_every_wait_and_a_default_stop_never_fires() {
        let (tx, stop) = Stop::channel();
        let mut a = stop.clone();
        let waiting = tokio::spawn(async move { a.wait().await });
        assert!(!stop.requested());
        tx.request("SIGINT");
        tx.request("SIGTERM");
        waiting.await.unwrap();
        assert!(stop.requested());
        // The first ask is the one said.
        assert!(stop.reason().contains("(SIGINT)"), "{}", stop.reason());
        let mut never = Stop::default();
        let r = tokio::time::timeout(std::time::Duration::from_millis(50), never.wait()).await;
        assert!(r.is_err());
        assert!(!never.requested());
    }
}
