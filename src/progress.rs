//! Whether the work on the blocking threads moves: what the daemon's watchdog pings depend
//! on. A pass's blocking stages (the scan, the renewals, the alarms) run on threads of
//! their own while the daemon's task keeps waking, so a thread stuck in a system call (a
//! file that blocks, a hung file system) would not stop WATCHDOG=1 by itself. Each step of
//! that work (every file read, every directory listed, every certificate renewed, every
//! poll of a wait) calls [`step`]; while such work is in flight ([`Busy`]), the daemon pings
//! only if the count moved since its last ping, so systemd kills and restarts a daemon
//! whose pass stopped making progress.
//!
//! Only steps taken on a thread doing such work count: the daemon's watch of the other
//! controllers reads files and etcd on a schedule of its own, and counting its steps would
//! feed the watchdog every half lease TTL while the pass itself stands still.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static STEPS: AtomicU64 = AtomicU64::new(0);
static BUSY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many [`Busy`] this thread holds: its steps count only while it holds one.
    static WORKING: Cell<usize> = const { Cell::new(0) };
}

/// One more step done; counted when this thread does a pass's blocking work ([`busy`]).
pub fn step() {
    if WORKING.with(Cell::get) > 0 {
        STEPS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Blocking work in flight, for as long as it is held: made on the thread doing the work,
/// so a thread that never returns keeps it. It stays on that thread (not `Send`): the
/// steps it counts are that thread's.
#[must_use]
pub struct Busy(PhantomData<*const ()>);

/// Marks the blocking work about to be done on this thread (see [`Busy`]).
pub fn busy() -> Busy {
    BUSY.fetch_add(1, Ordering::SeqCst);
    WORKING.with(|w| w.set(w.get() + 1));
    step();
    Busy(PhantomData)
}

impl Drop for Busy {
    fn drop(&mut self) {
        step();
        WORKING.with(|w| w.set(w.get() - 1));
        BUSY.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `wait` (an async wait bounded by its own timeout and ended by SIGTERM, such as the
/// etcd client's) on a blocking thread's runtime, a step every second meanwhile: waiting
/// there is progress, not a thread stuck.
pub async fn waiting<F: std::future::Future>(wait: F) -> F::Output {
    let tick = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            step();
        }
    };
    tokio::select! {
        out = wait => out,
        never = tick => never,
    }
}

/// What the watchdog saw at its last look.
#[derive(Debug, Default)]
pub struct Watch {
    last: u64,
}

/// What the watchdog makes of the work since its last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// No blocking work in flight.
    Idle,
    /// In flight, and it moved.
    Moving,
    /// In flight, and not one step since the last look.
    Stuck,
}

impl Watch {
    /// Looks at the work since the last look.
    pub fn look(&mut self) -> Seen {
        let now = STEPS.load(Ordering::Relaxed);
        let moved = std::mem::replace(&mut self.last, now) != now;
        match (BUSY.load(Ordering::SeqCst), moved) {
            (0, _) => Seen::Idle,
            (_, true) => Seen::Moving,
            (_, false) => Seen::Stuck,
        }
    }
}
