//! What the holder of the lock knows of its lease.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the holder knows of its lease: when etcd last confirmed it, and whether it is
/// counted lost (sticky: once lost, another node may have taken the lock).
pub struct Lease {
    confirmed: Mutex<Instant>,
    lost: AtomicBool,
    /// An outage the holder makes itself is under way (its own member's restart in a
    /// cluster of two, where etcd serves nothing meanwhile): the lease is not counted lost
    /// for going unconfirmed until the holder ends it, after etcd confirmed the lease again.
    excused: AtomicBool,
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
            excused: AtomicBool::new(false),
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

    /// The outage that starts now is the holder's own doing: see `excused`.
    pub(super) fn excuse(&self) {
        self.excused.store(true, Ordering::SeqCst);
    }

    /// The outage is over: the lease counts as it did, from its last confirmation.
    pub(super) fn unexcuse(&self) {
        self.excused.store(false, Ordering::SeqCst);
    }

    pub(super) fn is_excused(&self) -> bool {
        self.excused.load(Ordering::SeqCst)
    }

    /// When etcd last confirmed it (the request's send time).
    pub(super) fn confirmed(&self) -> Instant {
        *self.confirmed.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn lost(&self) -> bool {
        if !self.is_excused() && self.confirmed().elapsed() > self.margin {
            self.lose();
        }
        self.lost.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excused_outage_is_not_counted_until_the_holder_ends_it() {
        let lease = Lease::new(Duration::from_millis(40), Instant::now());
        lease.excuse();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!lease.lost(), "unconfirmed past the margin, but excused");
        // A confirmation does not end it: one may come before the outage begins.
        lease.confirm(Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!lease.lost(), "still excused");
        // Ended: the margin counts from the last confirmation.
        lease.unexcuse();
        assert!(
            lease.lost(),
            "unconfirmed past the margin once the excuse is over"
        );
        // Lost stays lost, excused or not.
        lease.excuse();
        assert!(lease.lost());
    }
}
