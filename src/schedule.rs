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
        };
        s.next = s.after(now);
        s
    }

    /// Takes a new schedule (a reload); a time already run is not run again.
    pub(crate) fn replace(&mut self, cron: Cron, now: &DateTime<Tz>) {
        self.cron = cron;
        self.next = self.after(now);
    }

    /// The scheduled time waited for.
    pub(crate) fn next(&self) -> Option<&DateTime<Tz>> {
        self.next.as_ref()
    }

    /// Whenever the daemon wakes: the scheduled time a pass is due for now, if any. Woken
    /// before the time waited for (the clock was set, or another event), it aims again from
    /// `now`: after a step back, the next time may be nearer than the one waited for.
    pub(crate) fn due(&mut self, now: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        match self.next {
            Some(at) if *now >= at => {
                self.last = Some(at);
                self.next = self.after(now);
                Some(at)
            }
            _ => {
                self.next = self.after(now);
                None
            }
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
