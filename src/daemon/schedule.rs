//! When the next scheduled pass is due: the cron schedule read against the wall clock in
//! local time. Pure (the clock is an argument), so clock steps and DST changes are tested
//! with plain values; the daemon waits for [`Schedule::next`] with `wall_clock::until` and
//! calls [`Schedule::due`] whenever it wakes.
//!
//! - A pass is never run twice for one scheduled time: a time at or before the last one run
//!   is never due again, also when the clock is set back.
//! - A time is never skipped: the time waited for is due as soon as the wall clock reaches
//!   it. When the clock jumps over several times, one pass runs for all of them.
//! - Local time is croner's: a time in a DST gap runs at the end of the gap; a fixed time in
//!   a repeated hour runs once, at its first occurrence; a schedule with a wildcard hour runs
//!   at both occurrences of a repeated time.
//! - Splay (`randomized_delay_secs`, like systemd timers' `RandomizedDelaySec=`): each
//!   scheduled time is run after a delay drawn uniformly in [0, splay], drawn again for every
//!   new scheduled time. The time stays pending during its delay: a reload or a wake-up in
//!   between neither skips it nor draws again.

use std::time::Duration;

use chrono::{DateTime, Offset, TimeDelta, TimeZone};
use croner::Cron;

/// Clock offsets change by at most this much (DST moves by one hour, in a few zones two).
const DST_REACH: TimeDelta = TimeDelta::hours(3);

/// Upper bound on the cron times looked at for one answer.
const MAX_STEPS: usize = 100_000;

/// The cron schedule, and where the daemon is in it.
#[derive(Debug, Clone)]
pub(crate) struct Schedule<Tz: TimeZone> {
    cron: Cron,
    /// The scheduled time waited for; `None` when the schedule has no later time.
    next: Option<DateTime<Tz>>,
    /// The last scheduled time a pass was due for.
    last: Option<DateTime<Tz>>,
    /// The most a pass waits after its scheduled time.
    splay: Duration,
    /// The delay drawn for `next`, in [0, splay].
    delay: Duration,
    /// Draws a delay in [0, max].
    draw: fn(Duration) -> Duration,
}

impl<Tz> Schedule<Tz>
where
    Tz: TimeZone + Copy,
    Tz::Offset: Copy,
{
    /// Starts at `now`, waiting for the first scheduled time after it.
    pub(crate) fn new(cron: Cron, now: &DateTime<Tz>) -> Schedule<Tz> {
        let mut s = Schedule {
            cron,
            next: None,
            last: None,
            splay: Duration::ZERO,
            delay: Duration::ZERO,
            draw: random_delay,
        };
        s.next = s.after(now);
        s
    }

    /// The same, with each scheduled time run after a delay `draw`n in [0, `splay`].
    pub(crate) fn with_splay(mut self, splay: Duration, draw: fn(Duration) -> Duration) -> Self {
        (self.splay, self.draw) = (splay, draw);
        self.delay = self.drawn();
        self
    }

    /// Takes a new schedule and splay (a reload); a time already run is not run again, and
    /// a time in its delay stays pending if the new schedule has it.
    pub(crate) fn replace(&mut self, cron: Cron, now: &DateTime<Tz>, splay: Duration) {
        self.cron = cron;
        let from = match self.next {
            Some(at) if at <= *now => at - TimeDelta::seconds(1),
            _ => *now,
        };
        let next = self.after(&from);
        if next != self.next || splay != self.splay {
            (self.next, self.splay) = (next, splay);
            self.delay = self.drawn();
        }
    }

    /// The scheduled time waited for.
    pub(crate) fn next(&self) -> Option<&DateTime<Tz>> {
        self.next.as_ref()
    }

    /// The time between the scheduled time waited for and the one after it.
    pub(crate) fn interval(&self) -> Option<Duration> {
        let first = self.next?;
        let second = self.after(&first)?;
        (second - first).to_std().ok()
    }

    /// The delay drawn for the scheduled time waited for (zero without a splay).
    pub(crate) fn delay(&self) -> Duration {
        self.delay
    }

    /// When the pass for the scheduled time waited for runs: that time plus its delay.
    pub(crate) fn wake(&self) -> Option<DateTime<Tz>> {
        let delay = TimeDelta::from_std(self.delay).unwrap_or(TimeDelta::MAX);
        self.next.map(|at| at + delay)
    }

    /// Whenever the daemon wakes: the scheduled time a pass is due for now (its delay over),
    /// if any. Woken before the time waited for (the clock was set, or another event), it
    /// aims again from `now`: after a step back, the next time may be nearer than the one
    /// waited for. Woken within the delay, it waits on.
    pub(crate) fn due(&mut self, now: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        match (self.next, self.wake()) {
            (Some(at), Some(wake)) if *now >= wake => {
                self.last = Some(at);
                self.aim(now);
                Some(at)
            }
            (Some(at), _) if *now >= at => None,
            _ => {
                self.aim(now);
                None
            }
        }
    }

    /// Waits for the first scheduled time after `now`, with a new delay if it is a new time.
    fn aim(&mut self, now: &DateTime<Tz>) {
        let next = self.after(now);
        if next != self.next {
            self.next = next;
            self.delay = self.drawn();
        }
    }

    /// A new delay in [0, splay].
    fn drawn(&self) -> Duration {
        match self.splay.is_zero() {
            true => Duration::ZERO,
            false => (self.draw)(self.splay),
        }
    }

    /// The first scheduled time after `now` and after the last time run.
    fn after(&self, now: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        let from = match self.last {
            Some(last) if last > *now => last,
            _ => *now,
        };
        // croner searches local time forward from `from`; in a repeated hour that can
        // answer a time before `from`, or miss the second occurrence of a time, which its
        // iterator yields when started before the fold. So near an offset change the
        // search starts before it and takes the first time after `from`.
        let start = match offset_changes_near(&from) {
            true => from - DST_REACH,
            false => from,
        };
        self.cron
            .clone()
            .iter_after(start)
            .take(MAX_STEPS)
            .find(|t| *t > from)
    }
}

/// A delay drawn uniformly in [0, `max`] (millisecond steps) from the operating system's
/// random source.
pub(crate) fn random_delay(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let mut bytes = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut bytes).is_err() {
        tracing::warn!("no randomness for the schedule's splay: waiting half of it");
        return max / 2;
    }
    let steps = max.as_millis().min(u64::MAX as u128) as u64;
    Duration::from_millis(u64::from_le_bytes(bytes) % (steps + 1))
}

/// The first scheduled time after `now`: when the daemon's next pass runs (for `check`).
pub(crate) fn next_after<Tz>(cron: Cron, now: &DateTime<Tz>) -> Option<DateTime<Tz>>
where
    Tz: TimeZone + Copy,
    Tz::Offset: Copy,
{
    Schedule::new(cron, now).next
}

/// Whether the UTC offset of the zone changes within [`DST_REACH`] of `t`.
fn offset_changes_near<Tz: TimeZone>(t: &DateTime<Tz>) -> bool {
    let offset = |d: DateTime<Tz>| d.offset().fix();
    let here = offset(t.clone());
    [t.clone() - DST_REACH, t.clone() + DST_REACH]
        .into_iter()
        .any(|d| offset(d) != here)
}

#[cfg(test)]
mod tests;
