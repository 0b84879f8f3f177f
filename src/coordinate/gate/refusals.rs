//! A renewal refused on one controller holds the others' installs at their turns: what made
//! its clients refuse it (a CA they do not trust, a clock ahead, a name missing) would be
//! installed on the next controller too, and served there until its proof refused it in
//! turn. The controller that refused one writes `<lock_prefix>.refused/<node>` while it holds
//! the restart lock, on a lease of a day (the next day's pass writes it again if the fault
//! stays); another reads the prefix before each install at a turn, under the lock, and holds
//! the install while a key of another node is there; a pass of the node's own that holds the
//! lock and refuses nothing deletes its key.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{EtcdGate, State};
use crate::restart::Hold;
use crate::restart::step::Step;

/// How long a refusal holds the others when no pass of its node clears it.
const TTL_SECS: i64 = 86_400;

/// How long one read or write of the refusals may take: the lock is held meanwhile.
const CALL_FOR: Duration = Duration::from_secs(10);

/// What a refusal's key holds.
#[derive(Debug, Serialize, Deserialize)]
struct Refused {
    node: String,
    step: String,
    why: String,
    /// Seconds since the Unix epoch, the writer's clock.
    at: i64,
}

/// What a refusal written `at` (the writer's clock) says of the writer's clock, read `now`
/// here: one ahead by more than a lease's worth of slack dates its certificates in the
/// future, which its peers refuse as not yet valid, the likeliest cause of the refusal.
fn clock_ahead(node: &str, at: i64, now: i64) -> String {
    let ahead = at - now;
    let by = match ahead {
        ..=300 => return String::new(),
        301..86_400 => format!("{} minutes", ahead / 60),
        _ => format!("{:.1} days", ahead as f64 / 86_400.0),
    };
    format!(
        " ({node}'s clock read {by} ahead of this one when it wrote this: what a clock ahead issues is not yet valid for the others; set its clock right)"
    )
}

fn prefix(lock_prefix: &str) -> String {
    format!("{lock_prefix}.refused/")
}

impl EtcdGate {
    fn refusal_key(&self) -> String {
        format!("{}{}", prefix(&self.conf.lock_prefix), self.me)
    }

    /// Err when another controller's refusal stands: `step` installs nothing this pass.
    /// Without the lock (not coordinated) there is no one to ask.
    pub(super) async fn others_refused(&mut self, step: &Step) -> Result<(), Hold> {
        let (from, me) = (prefix(&self.conf.lock_prefix), self.me.clone());
        let State::Locked(l) = &mut self.state else {
            return Ok(());
        };
        let read = l.conn.call(|mut c| {
            let from = from.clone();
            let opts = etcd_client::GetOptions::new().with_prefix();
            async move { c.get(from, Some(opts)).await }
        });
        let cannot = |why: String| {
            Hold::Refused(format!(
                "the renewals refused on other controllers cannot be read at {from} ({why}): {} installs nothing at its turn",
                step.target
            ))
        };
        let answer = match tokio::time::timeout(CALL_FOR, read).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(why)) => return Err(cannot(why.to_string())),
            Err(_) => return Err(cannot(format!("no answer within {CALL_FOR:?}"))),
        };
        let theirs = (answer.kvs().iter())
            .filter_map(|kv| serde_json::from_slice::<Refused>(kv.value()).ok())
            .find(|r| r.node != me);
        match theirs {
            None => Ok(()),
            Some(r) => Err(Hold::Refused(format!(
                "a renewal at its turn was refused on {} ({} at {}): {}{}; no controller installs one at its turn until a pass there refuses none (or the key {}{} is deleted; it lapses a day after it was written)",
                r.node,
                r.step,
                time::OffsetDateTime::from_unix_timestamp(r.at)
                    .map_or_else(|_| r.at.to_string(), crate::timefmt::rfc3339),
                r.why,
                clock_ahead(
                    &r.node,
                    r.at,
                    time::OffsetDateTime::now_utc().unix_timestamp()
                ),
                from,
                r.node
            ))),
        }
    }

    /// `step`'s renewal was refused here: the others hold theirs. A write that fails is
    /// said and goes no further (each of them would refuse its own in turn).
    pub(super) async fn note_refused(&mut self, step: &Step, why: &str) {
        self.refused_here = true;
        let key = self.refusal_key();
        let State::Locked(l) = &mut self.state else {
            return;
        };
        let value = serde_json::to_vec(&Refused {
            node: self.me.clone(),
            step: step.target.to_string(),
            why: why.to_string(),
            at: time::OffsetDateTime::now_utc().unix_timestamp(),
        })
        .unwrap_or_default();
        let write = l.conn.call(|mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                let lease = c.lease_grant(TTL_SECS, None).await?.id();
                let opts = etcd_client::PutOptions::new().with_lease(lease);
                c.put(key, value, Some(opts)).await
            }
        });
        match tokio::time::timeout(CALL_FOR, write).await {
            Ok(Ok(_)) => {
                tracing::info!(
                    holder = self.me,
                    "wrote {key}: the other controllers install no renewal at their turns while it stands"
                )
            }
            Ok(Err(e)) => tracing::warn!(
                "cannot write {key}: {e}; the other controllers may install the same fault and refuse it in turn"
            ),
            Err(_) => tracing::warn!(
                "cannot write {key}: no answer within {CALL_FOR:?}; the other controllers may install the same fault and refuse it in turn"
            ),
        }
    }

    /// Before the lock is released: a pass here that refused nothing takes back a refusal
    /// of an earlier one.
    pub(super) async fn clear_refused(&mut self) {
        if self.refused_here {
            return;
        }
        let key = self.refusal_key();
        let State::Locked(l) = &mut self.state else {
            return;
        };
        let delete = l.conn.call(|mut c| {
            let key = key.clone();
            async move { c.delete(key, None).await }
        });
        match tokio::time::timeout(CALL_FOR, delete).await {
            Ok(Ok(r)) if r.deleted() > 0 => {
                tracing::info!(
                    holder = self.me,
                    "deleted {key}: this pass refused no renewal"
                )
            }
            Ok(Ok(_)) => {}
            // Not allowed to delete it, not allowed to have written it: nothing to take back.
            Ok(Err(e)) if e.to_string().contains("permission denied") => {}
            Ok(Err(e)) => tracing::warn!("cannot delete {key}: {e}"),
            Err(_) => tracing::warn!("cannot delete {key}: no answer within {CALL_FOR:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::clock_ahead;

    #[test]
    fn a_writer_clock_ahead_is_named_as_the_likely_cause() {
        let now = 1_780_000_000;
        assert_eq!(clock_ahead("node1", now + 120, now), "");
        assert_eq!(clock_ahead("node1", now - 86_400, now), "");
        let said = clock_ahead("node1", now + 2 * 86_400 + 60, now);
        assert!(
            said.starts_with(" (node1's clock read 2.0 days ahead of this one when it wrote this"),
            "{said}"
        );
        assert!(clock_ahead("node1", now + 3_600, now).contains("read 60 minutes ahead"));
    }
}
