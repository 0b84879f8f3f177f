//! Waiting for a wall-clock time, as systemd's timers do: a timerfd on CLOCK_REALTIME,
//! absolute, with TFD_TIMER_CANCEL_ON_SET. tokio's timers run on the monotonic clock, which
//! stands still while a VM is paused or the host suspended and knows nothing of clock
//! steps, so a sleep toward a cron time computed before could end hours off. This wakes at
//! the wall time itself, or at once when the clock is set, for the schedule to be read again.

use std::io;
use std::time::SystemTime;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Why [`until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// The wall clock reached the time.
    Reached,
    /// The wall clock was set (stepped) before that.
    ClockSet,
}

/// Waits until the wall clock reaches `at`, or is set: whichever comes first.
pub(crate) async fn until(at: SystemTime) -> io::Result<Woke> {
    let fd = timerfd_create(
        TimerfdClockId::Realtime,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?;
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let spec = Itimerspec {
        it_interval: zero,
        it_value: timespec(at),
    };
    timerfd_settime(
        &fd,
        TimerfdTimerFlags::ABSTIME | TimerfdTimerFlags::CANCEL_ON_SET,
        &spec,
    )?;
    #[allow(unsafe_code)]
    // SAFETY: tokio requires the descriptor to stay open, the same one, while the AsyncFd
    // holds it. It is an OwnedFd moved into the AsyncFd: closed only when that drops it.
    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
    loop {
        let mut ready = fd.readable().await?;
        let mut expirations = [0u8; 8];
        match rustix::io::read(ready.get_inner(), &mut expirations) {
            Ok(_) => return Ok(Woke::Reached),
            Err(rustix::io::Errno::CANCELED) => return Ok(Woke::ClockSet),
            Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
            Err(e) => return Err(e.into()),
        }
    }
}

/// `at` as a CLOCK_REALTIME timespec, never zero (a zero time disarms the timer): a time at
/// or before 1970 is 1 ns after it, long past, so the timer fires at once.
fn timespec(at: SystemTime) -> Timespec {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .max(std::time::Duration::from_nanos(1));
    Timespec {
        tv_sec: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: since.subsec_nanos().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn wakes_at_the_wall_clock_time() {
        let t0 = Instant::now();
        let woke = until(SystemTime::now() + Duration::from_millis(300)).await;
        let took = t0.elapsed();
        assert_eq!(woke.unwrap(), Woke::Reached);
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_time_already_past_wakes_at_once() {
        let t0 = Instant::now();
        let woke = until(SystemTime::now() - Duration::from_secs(3600)).await;
        assert_eq!(woke.unwrap(), Woke::Reached);
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(until(SystemTime::UNIX_EPOCH).await.unwrap(), Woke::Reached);
    }
}
