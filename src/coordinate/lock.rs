//! The cluster-wide restart lock: etcd's mutex recipe on a lease, as `etcdctl lock` takes it
//! (clientv3/concurrency): each contender puts `<prefix>/<lease id>` on its lease, in a
//! transaction that keeps its place when it is already there; the lock belongs to the key with
//! the oldest create revision, and a contender waits until every older key is gone. The value
//! is the contender's member name, so a waiter can say who holds it. Only KV on the prefix is
//! used: it works with etcd RBAC and certificate-CN users limited to prefixes (etcd 3.4's
//! server-side election service mixes up users whose campaigns overlap, etcd-io/etcd#17502).
//! The lease is kept alive while the holder works; a holder that dies loses the lock when the
//! lease runs out, so the lock never wedges.
//!
//! The lock fences: a holder counts it lost as soon as etcd has not confirmed its lease for
//! half the TTL ([`Held::lost`]: every keep-alive round has a deadline and moves on to the
//! next member when one does not answer in time, so a frozen member cannot keep it waiting
//! while the server lets the lease run out), and [`Held::confirm`] reads its own key back
//! (the create revision it queued with) before anything destructive, as etcd's own mutex
//! recipe does after waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use tokio::task::JoinHandle;

pub use super::conn::Conn;
use super::conn::Refusal;
use crate::stop::Stop;
pub use lease::Lease;

mod lease;

/// How often a waiter looks whether the keys before its own are gone, and how long to wait
/// before asking again when no member answered.
const QUEUE_POLL: Duration = Duration::from_millis(500);
/// After a keep-alive round that failed, the next member is asked this soon.
const RETRY_BREATH: Duration = Duration::from_millis(100);
/// Releasing never holds a pass up for longer than this (the lease expires anyway).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// The lock, held.
pub struct Held {
    conn: Conn,
    lease: i64,
    key: String,
    /// The create revision of `key`: the lock is this node's while `key` has it.
    revision: i64,
    keeper: Keeper,
    state: Arc<Lease>,
    /// How long it took to get.
    pub waited: Duration,
}

/// What keeps a lease alive, stopped when dropped: a holder dropped without `release()` (an
/// early return, a panic) stops renewing its lease, so the lock is free again once the
/// lease's TTL runs out instead of being held for as long as the process lives.
pub(super) enum Keeper {
    /// A task on the caller's runtime (a node record's lease).
    Task(JoinHandle<()>),
    /// A thread with a runtime and a connection of its own (the restart lock's lease): the
    /// pass's runtime has one thread, which blocks for as long as an fsync takes while the
    /// lock is held, and a lease unconfirmed for half its TTL is counted lost. Ends when
    /// this is dropped, or when the pass's runtime has not run its pulse task for
    /// [`stalled_after`] (a holder wedged for good must not keep the lock).
    Thread {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        pulse: JoinHandle<()>,
    },
}

impl Drop for Keeper {
    fn drop(&mut self) {
        match self {
            Keeper::Task(task) => task.abort(),
            Keeper::Thread { stop, pulse } => {
                pulse.abort();
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
            }
        }
    }
}

/// How long the pass's runtime may go without running its pulse before the lease's own
/// thread stops renewing it: twice the TTL (a minute by default), far past any fsync a
/// healthy disk takes, and short enough that a holder wedged for good frees the lock.
fn stalled_after(ttl: Duration) -> Duration {
    ttl * 2
}

/// Keeps the restart lock's `lease` alive on a thread of its own, through a connection of
/// its own to the members `conn` knows. A thread that cannot be had leaves the lease
/// unrenewed: counted lost after half its TTL, so nothing more is restarted (said).
fn keep_apart(conn: &Conn, lease: i64, ttl: Duration, state: Arc<Lease>) -> Keeper {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let conn = conn.apart();
    let beat = Arc::new(std::sync::Mutex::new(Instant::now()));
    let beating = beat.clone();
    let pulse = tokio::spawn(async move {
        loop {
            *beating.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let run = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let watch = stalled(beat, stalled_after(ttl), state.clone());
        match rt {
            Ok(rt) => rt.block_on(async {
                tokio::select! {
                    _ = keep_alive(conn, lease, ttl, state) => {}
                    _ = watch => {}
                    _ = stopped => {}
                }
            }),
            Err(e) => tracing::warn!("the restart lock's lease is not kept alive: {e}"),
        }
    };
    let spawned = std::thread::Builder::new()
        .name("lock-lease".into())
        .spawn(run);
    if let Err(e) = spawned {
        tracing::warn!("the restart lock's lease is not kept alive: no thread for it: {e}");
    }
    Keeper::Thread {
        stop: Some(stop),
        pulse,
    }
}

/// Returns once the pass's runtime has not run its pulse for `bound`, the lease counted
/// lost: it is renewed no longer, and expires after its TTL.
async fn stalled(beat: Arc<std::sync::Mutex<Instant>>, bound: Duration, state: Arc<Lease>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let since = beat.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
        if since > bound {
            state.lose();
            tracing::warn!(
                "this pass has not run for {}s while holding the restart lock: its lease is renewed no longer, and the lock is free once it expires",
                since.as_secs()
            );
            return;
        }
    }
}

/// Why the lock was not had.
#[derive(Debug)]
pub enum NotHad {
    /// Another node held it for the whole of `lock_timeout`.
    Timeout { holder: Option<String> },
    /// No lease was granted within its bound: etcd grants none without a leader (a
    /// majority of its members down), and waiting out `lock_timeout` would not change that.
    NoLease { waited: Duration },
    /// etcd refused: permission, or an error other than nobody answering.
    Refused(Queueing),
    /// The daemon is stopping: the wait was given up.
    Stopping,
}

/// Why this node could not queue for the lock.
#[derive(Debug, thiserror::Error)]
pub enum Queueing {
    /// etcd refused to write or read `key`.
    #[error("etcd refused {key}: {why}")]
    Refused { key: String, why: Refusal },
    /// etcd refused a lease to queue on.
    #[error("cannot grant a lease: {0}")]
    NoLease(Refusal),
    /// etcd's answer to the queueing transaction had no revision.
    #[error("etcd gave no revision for {0}")]
    NoRevision(String),
}

/// Why the lock is not (or no longer known to be) this node's, from [`Held::confirm`].
#[derive(Debug, thiserror::Error)]
pub enum Lapsed {
    /// The lease went unconfirmed past the margin: counted lost for good.
    #[error("its lease was not confirmed in time")]
    Unconfirmed,
    /// The key exists again under another create revision: someone else's now.
    #[error("{key} was created again (revision {now}, not {was})")]
    Recreated { key: String, now: i64, was: i64 },
    /// The key is gone with its lease.
    #[error("{0} is gone (its lease expired or was revoked)")]
    Gone(String),
    /// etcd refused to read the key back.
    #[error("reading {key} back: {why}")]
    Unreadable { key: String, why: Refusal },
    /// No member answered within the margin.
    #[error("no etcd member answered for {key} within {}s", margin.as_secs_f64())]
    Unanswered { key: String, margin: Duration },
}

/// How long the lock is waited for, and on what lease.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// The lease's TTL.
    pub ttl: Duration,
    /// How long to wait for the lock in all.
    pub timeout: Duration,
    /// How long to wait for a lease to be granted (one round: members answering without a
    /// leader grant none).
    pub grant: Duration,
}

/// Takes the lock under `prefix` as `me` on the lease and within the waits of `terms`, or
/// until `stop`. `waiting(holder)` is called whenever the holder seen changes while waiting.
///
/// A waiter whose lease etcd has not confirmed within the margin (the member it talked to
/// froze, say) leaves the queue and joins it again on a new lease: it holds nothing yet, so
/// nothing is fenced, and its old key goes with the old lease, at the latest when it expires.
pub async fn acquire(
    conn: Conn,
    prefix: &str,
    me: &str,
    terms: Terms,
    mut stop: Stop,
    mut waiting: impl FnMut(&str),
) -> Result<Held, NotHad> {
    let Terms { ttl, timeout, .. } = terms;
    let start = Instant::now();
    let mut conn = conn;
    let mut seen: Option<String> = None;
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        let secs = ttl.as_secs() as i64;
        // Stamped when the answered request was sent (each attempt its own).
        let grant = conn.call(|mut c| async move {
            let sent = Instant::now();
            c.lease_grant(secs, None).await.map(|l| (sent, l.id()))
        });
        let asked = Instant::now();
        let (sent, lease) = tokio::select! {
            r = tokio::time::timeout(left.min(terms.grant), grant) => match r {
                Ok(Ok(granted)) => granted,
                Ok(Err(why)) => {
                    return Err(NotHad::Refused(Queueing::NoLease(why)));
                }
                Err(_) if terms.grant < left => {
                    return Err(NotHad::NoLease { waited: asked.elapsed() });
                }
                Err(_) => {
                    let holder = holder(&mut conn, prefix).await.or(seen);
                    return Err(NotHad::Timeout { holder });
                }
            },
            _ = stop.wait() => return Err(NotHad::Stopping),
        };
        let state = Arc::new(Lease::new(ttl, sent));
        let keeper = keep_apart(&conn, lease, ttl, state.clone());
        let key = format!("{prefix}/{lease:x}");
        let queued = queue(&mut conn, prefix, &key, me, lease, &state, |h: &str| {
            if h != me && seen.as_deref() != Some(h) {
                waiting(h);
                seen = Some(h.to_string());
            }
        });
        let left = timeout.saturating_sub(start.elapsed());
        let outcome = tokio::select! {
            r = tokio::time::timeout(left, queued) => match r {
                Ok(r) => r.map_err(NotHad::Refused),
                Err(_) => Err(NotHad::Timeout { holder: None }),
            },
            // Leaves the queue at once (the lease is revoked below).
            _ = stop.wait() => Err(NotHad::Stopping),
        };
        let not_had = match outcome {
            Ok(revision) => {
                let mut held = Held {
                    conn,
                    lease,
                    key,
                    revision,
                    keeper,
                    state,
                    waited: Duration::ZERO,
                };
                // etcd's mutex recipe: after the wait, the key must still be there, ours.
                match held.confirm().await {
                    Ok(()) => {
                        held.waited = start.elapsed();
                        return Ok(held);
                    }
                    Err(why) => {
                        tracing::info!(
                            holder = me,
                            "the restart lock's lease lapsed while this node waited ({why}); queueing again on a new lease"
                        );
                        drop(held.keeper);
                        conn = held.conn;
                        revoke(&mut conn, lease).await;
                        continue;
                    }
                }
            }
            Err(NotHad::Timeout { .. }) => NotHad::Timeout {
                holder: holder(&mut conn, prefix).await.or(seen),
            },
            Err(e) => e,
        };
        drop(keeper);
        revoke(&mut conn, lease).await;
        return Err(not_had);
    }
}

/// Revokes `lease` (its key leaves the queue with it), not waiting long: unrevoked, it
/// expires by itself.
async fn revoke(conn: &mut Conn, lease: i64) {
    let revoke = conn.call(|mut c| async move { c.lease_revoke(lease).await });
    let _ = tokio::time::timeout(RELEASE_TIMEOUT, revoke).await;
}

/// Puts `key` in the queue (or finds it there) and waits until no older key is left (or the
/// lease is lost); the key's create revision.
async fn queue(
    conn: &mut Conn,
    prefix: &str,
    key: &str,
    me: &str,
    lease: i64,
    state: &Lease,
    mut waiting: impl FnMut(&str),
) -> Result<i64, Queueing> {
    let refused = |why: Refusal| Queueing::Refused {
        key: key.to_string(),
        why,
    };
    // Idempotent: asked again after a lost answer, it finds its own key.
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            me,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = conn
        .call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map_err(refused)?;
    let mine = match resp.op_responses().first() {
        Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
        _ => resp.header().map(|h| h.revision()),
    }
    .ok_or_else(|| Queueing::NoRevision(key.to_string()))?;
    let older = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(mine - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1);
    let dir = format!("{prefix}/");
    loop {
        let r = conn
            .call(|mut c| {
                let (dir, older) = (dir.clone(), older.clone());
                async move { c.get(dir, Some(older)).await }
            })
            .await
            .map_err(refused)?;
        // A lease lost while waiting ends the wait too: the confirmation that follows fails.
        if r.kvs().is_empty() || state.lost() {
            return Ok(mine);
        }
        if let Some(h) = holder(conn, prefix).await {
            waiting(&h);
        }
        tokio::time::sleep(QUEUE_POLL).await;
    }
}

/// The member name of whoever holds the lock now (the oldest key), if anyone answers.
pub async fn holder(conn: &mut Conn, prefix: &str) -> Option<String> {
    let mut c = conn.client().await?;
    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let resp = c.get(format!("{prefix}/"), Some(oldest)).await.ok()?;
    let kv = resp.kvs().first()?;
    Some(holder_name(kv.key(), kv.value()))
}

/// The member names of every contender under `prefix`, the holder first; `None` when no
/// member answers in time.
pub async fn queued(conn: &mut Conn, prefix: &str) -> Option<Vec<String>> {
    let all = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let dir = format!("{prefix}/");
    let ask = conn.call(|mut c| {
        let (dir, all) = (dir.clone(), all.clone());
        async move { c.get(dir, Some(all)).await }
    });
    let resp = tokio::time::timeout(RELEASE_TIMEOUT, ask)
        .await
        .ok()?
        .ok()?;
    Some(
        resp.kvs()
            .iter()
            .map(|kv| holder_name(kv.key(), kv.value()))
            .collect(),
    )
}

/// A holder by its member name; one without (etcdctl lock puts none), by its key.
fn holder_name(key: &[u8], value: &[u8]) -> String {
    match value {
        [] => format!("an unnamed holder of {}", String::from_utf8_lossy(key)),
        name => String::from_utf8_lossy(name).into_owned(),
    }
}

/// How often the lease is refreshed, and how long one refresh may take before the member
/// asked is passed over: a sixth of the TTL (at least half a second), so that a member that
/// does not answer is left for the next one well inside the margin of half the TTL (at
/// worst a refresh interval, a round that times out, and a round with the next member).
fn refresh_every(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(500))
}

/// Refreshes the restart lock's lease until aborted (see [`keep_lease`]).
async fn keep_alive(conn: Conn, lease: i64, ttl: Duration, state: Arc<Lease>) {
    keep_lease(conn, lease, ttl, state, "the restart lock").await
}

/// Refreshes the lease of `what` (for the log: `the restart lock`) until aborted, through
/// whichever member answers in time; each confirmation is noted in `state`. Marks it lost
/// when etcd says the lease is gone.
pub(super) async fn keep_lease(
    mut conn: Conn,
    lease: i64,
    ttl: Duration,
    state: Arc<Lease>,
    what: &'static str,
) {
    let every = refresh_every(ttl);
    let mut open = None;
    loop {
        let round = async {
            if open.is_none() {
                let mut c = conn.client().await.ok_or(())?;
                open = Some(c.lease_keep_alive(lease).await.map_err(|_| ())?);
            }
            let (keeper, stream) = open.as_mut().ok_or(())?;
            // The lease runs for its TTL from when etcd got this request, so it is known
            // alive only from when the request was sent: a holder frozen after sending must
            // not count a late answer as fresh.
            let sent = Instant::now();
            keeper.keep_alive().await.map_err(|_| ())?;
            let r = stream.message().await.map_err(|_| ())?.ok_or(())?;
            Ok::<_, ()>((sent, r))
        };
        match tokio::time::timeout(every, round).await {
            Ok(Ok((sent, r))) if r.ttl() > 0 => state.confirm(sent),
            Ok(Ok(_)) => {
                tracing::warn!(
                    lease,
                    "etcd says {what}'s lease has expired: {what} is lost"
                );
                state.lose();
                return;
            }
            // No answer in time, or the stream broke: the next member, at once (after a
            // breath, should every member refuse at once).
            _ => {
                open = None;
                conn.skip();
                if state.lost() {
                    tracing::warn!(
                        lease,
                        "etcd has not confirmed {what}'s lease for {}s (half its TTL): {what} is counted lost",
                        state.margin.as_secs_f64()
                    );
                    return;
                }
                tokio::time::sleep(RETRY_BREATH).await;
                continue;
            }
        }
        tokio::time::sleep(every).await;
    }
}

impl Held {
    /// Counted lost: etcd has not confirmed the lease for half its TTL, or said it is gone.
    /// Another node may hold the lock now.
    pub fn lost(&self) -> bool {
        self.state.lost()
    }

    /// What the holder knows of its lease, to ask from elsewhere (right before a restart
    /// job is queued).
    pub fn watch(&self) -> Arc<Lease> {
        self.state.clone()
    }

    /// The outage that starts now (this node's member's restart in a cluster of two, where
    /// etcd serves nothing until it is back) is not counted against the lease until etcd
    /// confirms it again; [`Held::resume`] ends it, reading the key back, before anything
    /// further.
    pub fn excuse(&self) {
        self.state.excuse();
    }

    /// How long the lease may go unconfirmed before it is counted lost.
    pub fn margin(&self) -> Duration {
        self.state.margin
    }

    /// Whether an outage of its own is excused now ([`Held::excuse`]), not yet resumed from.
    pub fn excused(&self) -> bool {
        self.state.is_excused()
    }

    /// After an excused outage ([`Held::excuse`]): waits, within the margin, for etcd to
    /// confirm the lease on a keep-alive sent from now on, ends the excuse, and reads the key
    /// back ([`Held::confirm`]). Without an excuse, the read back alone.
    pub async fn resume(&mut self) -> Result<(), Lapsed> {
        if self.state.is_excused() {
            let back = Instant::now();
            let deadline = back + self.state.margin;
            while self.state.confirmed() < back && !self.state.lost() {
                if Instant::now() >= deadline {
                    self.state.lose();
                    return Err(Lapsed::Unconfirmed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            self.state.unexcuse();
        }
        self.confirm().await
    }

    /// Reads the lock's key back: it must exist with the create revision it was queued with,
    /// within the margin. Err says why the lock is not (or no longer known to be) this node's;
    /// the lock then counts as lost.
    pub async fn confirm(&mut self) -> Result<(), Lapsed> {
        let key = self.key.clone();
        let read = self.conn.call(|mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        });
        let why = match tokio::time::timeout(self.state.margin, read).await {
            Ok(Ok(r)) => match r.kvs().first().map(|kv| kv.create_revision()) {
                Some(rev) if rev == self.revision && !self.lost() => return Ok(()),
                Some(_) if self.lost() => Lapsed::Unconfirmed,
                Some(now) => Lapsed::Recreated {
                    key,
                    now,
                    was: self.revision,
                },
                None => Lapsed::Gone(key),
            },
            Ok(Err(why)) => Lapsed::Unreadable { key, why },
            Err(_) => Lapsed::Unanswered {
                key,
                margin: self.state.margin,
            },
        };
        self.state.lose();
        Err(why)
    }

    /// Gives the lock up: delete the key, then revoke the lease (which would remove it too).
    pub async fn release(self) {
        drop(self.keeper);
        let (mut conn, key, lease) = (self.conn, self.key, self.lease);
        let give_up = async {
            conn.call(|mut c| {
                let key = key.clone();
                async move { c.delete(key, None).await }
            })
            .await?;
            conn.call(|mut c| async move { c.lease_revoke(lease).await })
                .await
        };
        match tokio::time::timeout(RELEASE_TIMEOUT, give_up).await {
            Ok(Ok(_)) => {}
            Ok(Err(why)) => {
                tracing::warn!("releasing the restart lock: {why}; its lease expires by itself")
            }
            Err(_) => tracing::warn!(
                "releasing the restart lock: no etcd member answered; its lease expires by itself"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
