//! What the daemon makes of a pass that ended: the words of its STATUS= line and journal,
//! and when to try again. Pure: the pass's result and the time in, the verdict out.

use std::time::Duration;

use time::OffsetDateTime;

use crate::pass::PassReport;
use crate::pass::inhibit::Active;

/// How the daemon's retry and status rules see a pass that ended.
pub(super) enum Ended<'a> {
    /// Deferred by a maintenance inhibit.
    Deferred(&'a Active),
    /// Ran; `success` when everything due was renewed and in service.
    Ran { success: bool, summary: String },
    /// Could not run (the lock, the scan, a worker thread).
    Failed(String),
}

impl<'a> Ended<'a> {
    pub(super) fn of(result: &'a anyhow::Result<PassReport>) -> Ended<'a> {
        match result {
            Ok(r) => match &r.inhibited {
                // Refused by the clock: a failure, retried after the interval.
                Some(i) if i.clock => Ended::Ran {
                    success: false,
                    summary: i.describe(),
                },
                Some(i) => Ended::Deferred(i),
                None => Ended::Ran {
                    success: r.success(),
                    summary: r.summary(),
                },
            },
            Err(e) => Ended::Failed(format!("{e:#}")),
        }
    }
}

/// A journal line's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Info,
    Warn,
    Error,
}

/// What follows from a pass that ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    /// "last pass: ..." on the status line.
    pub last: String,
    /// When to run again outside the schedule, from now.
    pub retry_in: Option<Duration>,
    /// What to write to the journal.
    pub say: Vec<(Level, String)>,
}

/// The rules: a pass that ran and succeeded waits for the schedule; one that failed or could
/// not run is tried again after `retry_interval`; a deferred one is looked at again within a
/// minute (sooner when the inhibit lifts by itself), and says so loudly once the inhibit is
/// older than `inhibit_max_age`.
pub(super) fn verdict(
    ended: &Ended<'_>,
    retry_interval: Duration,
    inhibit_max_age: Duration,
    now: OffsetDateTime,
) -> Verdict {
    match ended {
        Ended::Deferred(i) => {
            let what = i.describe();
            let age = now - i.since;
            let mut say = Vec::new();
            if age > inhibit_max_age {
                say.push((
                    Level::Warn,
                    format!(
                        "renewals have been deferred for {} hours ({what}); certificates keep expiring: lift the inhibit when maintenance is over",
                        age.whole_hours()
                    ),
                ));
            }
            let again = retry_interval.min(Duration::from_secs(60));
            let lifts: Option<Duration> = i.until.and_then(|u| (u - now).try_into().ok());
            Verdict {
                last: format!("deferred ({what})"),
                retry_in: Some(lifts.map_or(again, |l| l.min(again))),
                say,
            }
        }
        Ended::Ran {
            success: true,
            summary,
        } => Verdict {
            last: format!("ok ({summary})"),
            retry_in: None,
            say: vec![(Level::Info, format!("pass succeeded: {summary}"))],
        },
        Ended::Ran {
            success: false,
            summary,
        } => Verdict {
            last: format!("FAILED ({summary})"),
            retry_in: Some(retry_interval),
            say: vec![(Level::Warn, format!("pass failed: {summary}"))],
        },
        Ended::Failed(why) => Verdict {
            last: format!("FAILED ({why})"),
            retry_in: Some(retry_interval),
            say: vec![(Level::Error, format!("pass failed: {why}"))],
        },
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

    fn inhibit(since: OffsetDateTime, until: Option<OffsetDateTime>) -> Active {
        Active {
            source: "certrenewd inhibit".into(),
            reason: "etcd upgrade".into(),
            since,
            until,
            clock: false,
        }
    }

    #[test]
    fn a_pass_that_ran_waits_for_the_schedule_or_retries_after_the_interval() {
        let ok = Ended::Ran {
            success: true,
            summary: "3 renewed".into(),
        };
        let v = verdict(&ok, HOUR, 72 * HOUR, NOW);
        assert_eq!(v.last, "ok (3 renewed)");
        assert_eq!(v.retry_in, None);
        assert_eq!(v.say, [(Level::Info, "pass succeeded: 3 renewed".into())]);
        let failed = Ended::Ran {
            success: false,
            summary: "1 failed".into(),
        };
        let v = verdict(&failed, HOUR, 72 * HOUR, NOW);
        assert_eq!(v.last, "FAILED (1 failed)");
        assert_eq!(v.retry_in, Some(HOUR));
        assert_eq!(v.say, [(Level::Warn, "pass failed: 1 failed".into())]);
        let v = verdict(&Ended::Failed("the lock".into()), HOUR, 72 * HOUR, NOW);
        assert_eq!(v.last, "FAILED (the lock)");
        assert_eq!(v.retry_in, Some(HOUR));
        assert_eq!(v.say[0].0, Level::Error);
    }

    #[test]
    fn a_deferred_pass_looks_again_within_a_minute_or_when_the_inhibit_lifts() {
        let open = inhibit(NOW - time::Duration::hours(1), None);
        let v = verdict(&Ended::Deferred(&open), HOUR, 72 * HOUR, NOW);
        assert!(v.last.starts_with("deferred (inhibited by"), "{}", v.last);
        assert_eq!(v.retry_in, Some(Duration::from_secs(60)));
        assert!(v.say.is_empty(), "{:?}", v.say);
        // Lifting in 20 s: looked at then. A retry interval under a minute is kept.
        let lifting = inhibit(NOW, Some(NOW + time::Duration::seconds(20)));
        let v = verdict(&Ended::Deferred(&lifting), HOUR, 72 * HOUR, NOW);
        assert_eq!(v.retry_in, Some(Duration::from_secs(20)));
        let v = verdict(
            &Ended::Deferred(&open),
            Duration::from_secs(30),
            72 * HOUR,
            NOW,
        );
        assert_eq!(v.retry_in, Some(Duration::from_secs(30)));
        // An inhibit whose end has passed (the file not yet read again): a minute.
        let lifted = inhibit(
            NOW - time::Duration::hours(2),
            Some(NOW - time::Duration::hours(1)),
        );
        let v = verdict(&Ended::Deferred(&lifted), HOUR, 72 * HOUR, NOW);
        assert_eq!(v.retry_in, Some(Duration::from_secs(60)));
    }

    #[test]
    fn an_inhibit_older_than_its_maximum_age_is_said_loudly() {
        let old = inhibit(NOW - time::Duration::hours(80), None);
        let v = verdict(&Ended::Deferred(&old), HOUR, 72 * HOUR, NOW);
        assert_eq!(v.say.len(), 1, "{:?}", v.say);
        assert_eq!(v.say[0].0, Level::Warn);
        assert!(
            v.say[0]
                .1
                .starts_with("renewals have been deferred for 80 hours"),
            "{}",
            v.say[0].1
        );
    }
}
