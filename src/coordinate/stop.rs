//! The daemon asked to stop: what ends the coordination's waits (the restart lock, the
//! quorum gate) at once instead of after `lock_timeout_secs` or `gate_timeout_secs`. At
//! shutdown etcd and kubelet stop first; a pass waiting for them must not hold the reboot.

use tokio::sync::watch;

/// A receiver of the stop request; `Stop::default()` never fires (the CLI's `renew`).
#[derive(Debug, Clone, Default)]
pub struct Stop(Option<watch::Receiver<bool>>);

/// The daemon's end: `request` fires every `Stop` made from it.
#[derive(Debug)]
pub struct StopSender(watch::Sender<bool>);

impl Stop {
    /// A sender and its first receiver.
    pub fn channel() -> (StopSender, Stop) {
        let (tx, rx) = watch::channel(false);
        (StopSender(tx), Stop(Some(rx)))
    }

    /// Whether a stop was requested.
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Resolves once a stop is requested; never without a sender.
    pub async fn wait(&mut self) {
        if let Some(rx) = &mut self.0
            && rx.wait_for(|stop| *stop).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await
    }
}

impl Stop {
    /// `work`, unless a stop is requested first: then [`STOPPING`].
    pub async fn or_stopping<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let mut stop = self.clone();
        tokio::select! {
            done = work => done,
            _ = stop.wait() => Err(STOPPING.to_string()),
        }
    }
}

impl StopSender {
    /// Asks every receiver to stop.
    pub fn request(&self) {
        self.0.send_replace(true);
    }
}

pub use crate::restart::STOPPING;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_ends_every_wait_and_a_default_stop_never_fires() {
        let (tx, stop) = Stop::channel();
        let mut a = stop.clone();
        let waiting = tokio::spawn(async move { a.wait().await });
        assert!(!stop.requested());
        tx.request();
        waiting.await.unwrap();
        assert!(stop.requested());
        let mut never = Stop::default();
        let r = tokio::time::timeout(std::time::Duration::from_millis(50), never.wait()).await;
        assert!(r.is_err());
        assert!(!never.requested());
    }
}
