//! What the holder of the lock knows of its lease.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the holder knows of its lease: when etcd last confirmed it, and whether it is
/// counted lost (sticky: once lost, another node may have taken the lock).
pub struct Lease {
    confirmed: Mutex<Instant>,
    lost: AtomicBool,
    /// Unconfirmed for longer than this, the lease is counted lost: half the TTL, well
    /// before the server can expire it.
    pub margin: Duration,
}

impl Lease {
    /// A lease etcd granted on a request sent at `sent`: it runs for its TTL from when etcd
    /// got that request, so it is known alive only from then, not from the answer (a grant
    /// answered late, or read by a holder that froze, must not count as fresh).
    pub(in crate::coordinate) fn new(ttl: Duration, sent: Instant) -> Lease {
        Lease {
            confirmed: Mutex::new(sent),
            lost: AtomicBool::new(false),
            margin: ttl / 2,
        }
    }

    /// etcd renewed the lease on a request sent at `sent`: alive since then (never moved
    /// back by an older request's late answer).
    pub(super) fn confirm(&self, sent: Instant) {
        let mut confirmed = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
        if sent > *confirmed {
            *confirmed = sent;
        }
    }

    pub(super) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    pub fn lost(&self) -> bool {
        let since = self
            .confirmed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        if since > self.margin {
            self.lose();
        }
        self.lost.load(Ordering::SeqCst)
    }
}
