//! The scheduler under an injected clock: the daemon's loop is simulated over real time,
//! with the wall clock stepped at chosen instants, in a zone with Europe/Berlin's 2025 DST
//! changes (30 March 02:00 CET -> 03:00 CEST, 26 October 03:00 CEST -> 02:00 CET).

use std::time::Duration;

use chrono::{FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Utc};

use super::*;
use crate::config::parse_cron;

/// Europe/Berlin in 2025: CET (+01:00), CEST (+02:00) from 30 March 01:00 UTC to 26 October
/// 01:00 UTC.
#[derive(Debug, Clone, Copy)]
struct Berlin2025;

const CET: i32 = 3600;
const CEST: i32 = 7200;

fn utc(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
}

impl TimeZone for Berlin2025 {
    type Offset = FixedOffset;

    fn from_offset(_: &FixedOffset) -> Berlin2025 {
        Berlin2025
    }

    fn offset_from_utc_datetime(&self, t: &NaiveDateTime) -> FixedOffset {
        let summer = *t >= utc("2025-03-30 01:00:00") && *t < utc("2025-10-26 01:00:00");
        FixedOffset::east_opt(if summer { CEST } else { CET }).unwrap()
    }

    fn offset_from_utc_date(&self, d: &NaiveDate) -> FixedOffset {
        self.offset_from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap())
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<FixedOffset> {
        // Each offset whose UTC time maps back to it; CEST first (the earlier instant).
        let fits: Vec<FixedOffset> = [CEST, CET]
            .into_iter()
            .map(|s| FixedOffset::east_opt(s).unwrap())
            .filter(|o| self.offset_from_utc_datetime(&(*local - *o)) == *o)
            .collect();
        match fits[..] {
            [] => MappedLocalTime::None,
            [o] => MappedLocalTime::Single(o),
            [a, b, ..] => MappedLocalTime::Ambiguous(a, b),
        }
    }

    fn offset_from_local_date(&self, d: &NaiveDate) -> MappedLocalTime<FixedOffset> {
        self.offset_from_local_datetime(&d.and_hms_opt(0, 0, 0).unwrap())
    }
}

fn local(s: &str) -> DateTime<Berlin2025> {
    Berlin2025.from_local_datetime(&utc(s)).earliest().unwrap()
}

/// The daemon's loop from `start` (wall clock, which is also real time then) for `hours`
/// of real time. `steps`: (real time, how far the wall clock is set) at those instants.
/// `wake_every`: other wake-ups (watchdog pings, signals) in between. Returns each pass as
/// "scheduled time @ wall time it ran", in RFC 3339.
fn passes(
    cron: &str,
    start: &str,
    hours: i64,
    steps: &[(&str, TimeDelta)],
    wake_every: Option<TimeDelta>,
) -> Vec<String> {
    splayed(cron, start, hours, steps, wake_every, Duration::ZERO)
}

thread_local! {
    /// The delays [`scripted`] hands out, in order, as minutes (taken modulo the splay).
    static DRAWS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A draw for tests: the next of [`DRAWS`] in minutes, within [0, max].
fn scripted(max: Duration) -> Duration {
    let minutes = DRAWS.with(|d| {
        let mut d = d.borrow_mut();
        assert!(!d.is_empty(), "more delays drawn than scripted");
        d.remove(0)
    });
    Duration::from_secs(minutes * 60).min(max)
}

/// [`passes`] with each scheduled time delayed by the next of `DRAWS` (up to `splay`).
fn splayed(
    cron: &str,
    start: &str,
    hours: i64,
    steps: &[(&str, TimeDelta)],
    wake_every: Option<TimeDelta>,
    splay: Duration,
) -> Vec<String> {
    let start = local(start).with_timezone(&Utc);
    let end = start + TimeDelta::hours(hours);
    let mut steps: Vec<(DateTime<Utc>, TimeDelta)> = steps
        .iter()
        .map(|(at, by)| (local(at).with_timezone(&Utc), *by))
        .collect();
    steps.reverse();
    let (mut real, mut skew) = (start, TimeDelta::zero());
    let wall = |real: DateTime<Utc>, skew: TimeDelta| (real + skew).with_timezone(&Berlin2025);
    let mut s = Schedule::new(parse_cron(cron).unwrap(), &wall(real, skew));
    if !splay.is_zero() {
        s = s.with_splay(splay, scripted);
    }
    let mut out = Vec::new();
    while let Some(next) = s.wake() {
        // Real time when the wall clock reaches `next`; a step or another wake-up may come first.
        let reached = (next.with_timezone(&Utc) - skew).max(real);
        let other = wake_every.map_or(reached, |every| (real + every).min(reached));
        match steps.last() {
            Some((at, by)) if *at <= other => {
                (real, skew) = (*at, skew + *by);
                steps.pop();
            }
            _ => real = other,
        }
        if real > end {
            break;
        }
        let now = wall(real, skew);
        if let Some(t) = s.due(&now) {
            out.push(format!("{} @ {}", t.to_rfc3339(), now.to_rfc3339()));
        }
    }
    out
}

fn daily_midnight(steps: &[(&str, TimeDelta)]) -> Vec<String> {
    passes("0 0 0 * * *", "2025-06-01 12:00:00", 72, steps, None)
}

#[test]
fn one_pass_per_scheduled_time_whatever_else_wakes_the_daemon() {
    let expected = [
        "2025-06-02T00:00:00+02:00 @ 2025-06-02T00:00:00+02:00",
        "2025-06-03T00:00:00+02:00 @ 2025-06-03T00:00:00+02:00",
        "2025-06-04T00:00:00+02:00 @ 2025-06-04T00:00:00+02:00",
    ];
    assert_eq!(daily_midnight(&[]), expected);
    // Watchdog pings every 150 s (WatchdogSec=5min) wake the loop 1,700 times: same passes.
    let pinged = passes(
        "0 0 0 * * *",
        "2025-06-01 12:00:00",
        72,
        &[],
        Some(TimeDelta::seconds(150)),
    );
    assert_eq!(pinged, expected);
}

#[test]
fn spring_forward_runs_a_time_in_the_gap_once_at_the_end_of_the_gap() {
    // 02:30 does not exist on 30 March: the pass runs at 03:00 CEST, once.
    assert_eq!(
        passes("0 30 2 * * *", "2025-03-29 12:00:00", 48, &[], None),
        [
            "2025-03-30T03:00:00+02:00 @ 2025-03-30T03:00:00+02:00",
            "2025-03-31T02:30:00+02:00 @ 2025-03-31T02:30:00+02:00",
        ]
    );
    // Hourly: 01:00 CET, then 03:00 CEST (02:00 does not exist), each once.
    assert_eq!(
        passes("0 0 * * * *", "2025-03-30 00:30:00", 3, &[], None),
        [
            "2025-03-30T01:00:00+01:00 @ 2025-03-30T01:00:00+01:00",
            "2025-03-30T03:00:00+02:00 @ 2025-03-30T03:00:00+02:00",
            "2025-03-30T04:00:00+02:00 @ 2025-03-30T04:00:00+02:00",
        ]
    );
}

#[test]
fn fall_back_runs_a_fixed_time_once_and_a_wildcard_hour_at_both_occurrences() {
    // 02:30 happens twice on 26 October: a daily pass runs at the first only.
    assert_eq!(
        passes("0 30 2 * * *", "2025-10-25 12:00:00", 48, &[], None),
        [
            "2025-10-26T02:30:00+02:00 @ 2025-10-26T02:30:00+02:00",
            "2025-10-27T02:30:00+01:00 @ 2025-10-27T02:30:00+01:00",
        ]
    );
    // Hourly: 02:00 CEST and 02:00 CET are an hour apart, two scheduled times.
    let hourly = [
        "2025-10-26T01:00:00+02:00 @ 2025-10-26T01:00:00+02:00",
        "2025-10-26T02:00:00+02:00 @ 2025-10-26T02:00:00+02:00",
        "2025-10-26T02:00:00+01:00 @ 2025-10-26T02:00:00+01:00",
        "2025-10-26T03:00:00+01:00 @ 2025-10-26T03:00:00+01:00",
    ];
    assert_eq!(
        passes("0 0 * * * *", "2025-10-26 00:30:00", 4, &[], None),
        hourly
    );
    // The same with the loop woken every minute in between.
    let pinged = passes(
        "0 0 * * * *",
        "2025-10-26 00:30:00",
        4,
        &[],
        Some(TimeDelta::minutes(1)),
    );
    assert_eq!(pinged, hourly);
}

#[test]
fn a_clock_step_forward_runs_the_time_it_jumped_over_at_once() {
    // At 20:00 the clock is set 6 h ahead: 00:00 has passed, and runs at the step (a
    // monotonic sleep would have run it 6 h late by the wall clock).
    assert_eq!(
        daily_midnight(&[("2025-06-01 20:00:00", TimeDelta::hours(6))]),
        [
            "2025-06-02T00:00:00+02:00 @ 2025-06-02T02:00:00+02:00",
            "2025-06-03T00:00:00+02:00 @ 2025-06-03T00:00:00+02:00",
            "2025-06-04T00:00:00+02:00 @ 2025-06-04T00:00:00+02:00",
        ]
    );
    // A step of two days over two scheduled times: one pass for both, then on schedule.
    assert_eq!(
        daily_midnight(&[("2025-06-01 20:00:00", TimeDelta::days(2))]),
        [
            "2025-06-02T00:00:00+02:00 @ 2025-06-03T20:00:00+02:00",
            "2025-06-04T00:00:00+02:00 @ 2025-06-04T00:00:00+02:00",
            "2025-06-05T00:00:00+02:00 @ 2025-06-05T00:00:00+02:00",
            "2025-06-06T00:00:00+02:00 @ 2025-06-06T00:00:00+02:00",
        ]
    );
}

#[test]
fn a_clock_step_back_never_runs_a_time_twice_nor_skips_the_next() {
    // Just after the 00:00 pass, the clock is set 2 h back (to 22:30 the day before): the
    // wall clock reaches 00:00 again, and no pass runs for it twice.
    assert_eq!(
        daily_midnight(&[("2025-06-02 00:30:00", -TimeDelta::hours(2))]),
        [
            "2025-06-02T00:00:00+02:00 @ 2025-06-02T00:00:00+02:00",
            "2025-06-03T00:00:00+02:00 @ 2025-06-03T00:00:00+02:00",
            "2025-06-04T00:00:00+02:00 @ 2025-06-04T00:00:00+02:00",
        ]
    );
    // Waiting for 00:00 on 2 June, the clock is set back two days (it was two days ahead):
    // the wait aims again, at 00:00 on 31 May by the corrected clock (never run), instead
    // of sleeping until the wall clock reaches 2 June again.
    assert_eq!(
        daily_midnight(&[("2025-06-01 18:00:00", -TimeDelta::days(2))]),
        [
            "2025-05-31T00:00:00+02:00 @ 2025-05-31T00:00:00+02:00",
            "2025-06-01T00:00:00+02:00 @ 2025-06-01T00:00:00+02:00",
            "2025-06-02T00:00:00+02:00 @ 2025-06-02T00:00:00+02:00",
        ]
    );
}

#[test]
fn a_reload_right_after_a_pass_does_not_run_its_time_again() {
    let cron = || parse_cron("0 0 0 * * *").unwrap();
    let mut s = Schedule::new(cron(), &local("2025-06-01 23:59:00"));
    let at = local("2025-06-02 00:00:00");
    assert_eq!(s.due(&at), Some(at));
    // The clock is set back a minute, then the configuration is reloaded.
    s.replace(cron(), &local("2025-06-01 23:59:30"), Duration::ZERO);
    assert_eq!(s.next(), Some(&local("2025-06-03 00:00:00")));
    assert_eq!(s.due(&at), None);
}

#[test]
fn woken_early_nothing_is_due() {
    let mut s = Schedule::new(
        parse_cron("0 0 0 * * *").unwrap(),
        &local("2025-06-01 12:00:00"),
    );
    assert_eq!(s.due(&local("2025-06-01 23:59:59")), None);
    assert_eq!(s.next(), Some(&local("2025-06-02 00:00:00")));
}

fn script(minutes: &[u64]) {
    DRAWS.with(|d| *d.borrow_mut() = minutes.to_vec());
}

#[test]
fn a_splay_delays_each_scheduled_time_by_its_own_draw_whatever_wakes_the_daemon() {
    let hour = Duration::from_secs(3600);
    let expected = [
        "2025-06-02T00:00:00+02:00 @ 2025-06-02T00:17:00+02:00",
        "2025-06-03T00:00:00+02:00 @ 2025-06-03T00:00:00+02:00",
        "2025-06-04T00:00:00+02:00 @ 2025-06-04T01:00:00+02:00",
    ];
    // A draw when the schedule starts, then one per new scheduled time; 90 is past the
    // splay and taken as 60.
    script(&[17, 0, 90, 5]);
    let start = "2025-06-01 12:00:00";
    assert_eq!(splayed("0 0 0 * * *", start, 72, &[], None, hour), expected);
    DRAWS.with(|d| assert!(d.borrow().is_empty(), "one draw per scheduled time"));
    // Woken every minute (watchdog pings, signals), also within the delays: the same
    // passes, and no draw more.
    script(&[17, 0, 90, 5]);
    let minute = Some(TimeDelta::minutes(1));
    assert_eq!(
        splayed("0 0 0 * * *", start, 72, &[], minute, hour),
        expected
    );
    DRAWS.with(|d| assert!(d.borrow().is_empty(), "one draw per scheduled time"));
}

#[test]
fn a_clock_step_over_a_splayed_time_runs_it_at_once_and_never_twice() {
    let hour = Duration::from_secs(3600);
    // At 00:10, within the 30 min delay of 00:00, the clock is set 5 min back: still one
    // pass for 00:00, at 00:30 by the corrected clock.
    script(&[30, 30, 30, 30]);
    assert_eq!(
        splayed(
            "0 0 0 * * *",
            "2025-06-01 12:00:00",
            40,
            &[("2025-06-02 00:10:00", -TimeDelta::minutes(5))],
            None,
            hour
        ),
        [
            "2025-06-02T00:00:00+02:00 @ 2025-06-02T00:30:00+02:00",
            "2025-06-03T00:00:00+02:00 @ 2025-06-03T00:30:00+02:00",
        ]
    );
    // At 23:50, the clock is set 2 h ahead: past 00:00 and its delay, it runs at once.
    script(&[30, 30, 30, 30]);
    assert_eq!(
        splayed(
            "0 0 0 * * *",
            "2025-06-01 12:00:00",
            20,
            &[("2025-06-01 23:50:00", TimeDelta::hours(2))],
            None,
            hour
        ),
        ["2025-06-02T00:00:00+02:00 @ 2025-06-02T01:50:00+02:00"]
    );
}

#[test]
fn a_reload_within_the_delay_keeps_the_time_pending_and_its_draw() {
    let cron = || parse_cron("0 0 0 * * *").unwrap();
    let hour = Duration::from_secs(3600);
    script(&[20, 45]);
    let mut s = Schedule::new(cron(), &local("2025-06-01 23:00:00")).with_splay(hour, scripted);
    let at = local("2025-06-02 00:00:00");
    assert_eq!(s.wake(), Some(local("2025-06-02 00:20:00")));
    assert_eq!(s.due(&local("2025-06-02 00:10:00")), None);
    // A reload (same schedule and splay) at 00:10 neither skips 00:00 nor draws again.
    s.replace(cron(), &local("2025-06-02 00:10:00"), hour);
    assert_eq!(s.next(), Some(&at));
    assert_eq!(s.delay(), Duration::from_secs(20 * 60));
    assert_eq!(s.due(&local("2025-06-02 00:20:00")), Some(at));
    assert_eq!(s.wake(), Some(local("2025-06-03 00:45:00")));
    // A reload that changes the splay draws again; one to no splay runs on the hour.
    script(&[]);
    s.replace(cron(), &local("2025-06-02 12:00:00"), Duration::ZERO);
    assert_eq!(s.wake(), Some(local("2025-06-03 00:00:00")));
}

#[test]
fn the_random_delay_is_uniform_within_the_splay() {
    assert_eq!(random_delay(Duration::ZERO), Duration::ZERO);
    let max = Duration::from_secs(10);
    let draws: Vec<Duration> = (0..2000).map(|_| random_delay(max)).collect();
    assert!(draws.iter().all(|d| *d <= max), "beyond the splay");
    // Each tenth of the range gets its share (200 expected; far outside 100..300 is a bug).
    for tenth in 0..10u64 {
        let lo = Duration::from_secs(tenth);
        let n = draws
            .iter()
            .filter(|d| **d >= lo && **d < lo + Duration::from_secs(1))
            .count();
        assert!(
            (100..300).contains(&n),
            "{n} draws in [{tenth} s, {} s)",
            tenth + 1
        );
    }
}
