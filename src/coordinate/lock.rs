//! The cluster-wide restart lock: etcd's mutex recipe on a lease, as `etcdctl lock` takes it
//! (clientv3/concurrency): each contender puts `<prefix>/<lease id>` on its lease, in a
//! transaction that keeps its place when it is already there; the lock belongs to the key with
//! the oldest create revision, and a contender waits until every older key is gone. The value
//! is the contender's member name, so a waiter can say who holds it. Only KV on the prefix is
//! used: it works with etcd RBAC and certificate-CN users limited to that prefix (etcd 3.4's
//! server-side election service mixes up users whose campaigns overlap, etcd-io/etcd#17502).
//! The lease is kept alive while the holder works; a holder that dies loses the lock when the
//! lease runs out, so the lock never wedges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::task::JoinHandle;

use super::members::{describe, unreachable};

/// How often a waiter looks whether the keys before its own are gone.
const QUEUE_POLL: Duration = Duration::from_millis(500);

/// The lock, held.
pub struct Held {
    client: Client,
    lease: i64,
    key: String,
    keeper: JoinHandle<()>,
    lost: Arc<AtomicBool>,
    /// How long it took to get.
    pub waited: Duration,
}
/// Why the lock was not had.
#[derive(Debug)]
pub enum NotHad {
    /// Another node held it for the whole of `lock_timeout`.
    Timeout { holder: Option<String> },
    /// etcd refused: permission, or an error other than nobody answering.
    Refused(String),
}

/// Takes the lock under `prefix` as `me` on a lease of `ttl`, waiting up to `timeout`.
/// `waiting(holder)` is called whenever the holder seen changes while waiting.
pub async fn acquire(
    client: &Client,
    prefix: &str,
    me: &str,
    ttl: Duration,
    timeout: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Held, NotHad> {
    let start = Instant::now();
    let mut c = client.clone();
    let lease = c
        .lease_grant(ttl.as_secs() as i64, None)
        .await
        .map_err(|e| NotHad::Refused(format!("cannot grant a lease: {}", describe(&e))))?
        .id();
    let lost = Arc::new(AtomicBool::new(false));
    let keeper = tokio::spawn(keep_alive(client.clone(), lease, ttl, lost.clone()));
    let key = format!("{prefix}/{lease:x}");
    let mut seen: Option<String> = None;
    let queued = queue(client, prefix, &key, me, lease, |h: &str| {
        if h != me && seen.as_deref() != Some(h) {
            waiting(h);
            seen = Some(h.to_string());
        }
    });
    let outcome = match tokio::time::timeout(timeout, queued).await {
        Ok(r) => r.map_err(NotHad::Refused),
        Err(_) => Err(NotHad::Timeout {
            holder: holder(client, prefix).await.or(seen),
        }),
    };
    match outcome {
        Ok(()) => Ok(Held {
            client: client.clone(),
            lease,
            key,
            keeper,
            lost,
            waited: start.elapsed(),
        }),
        Err(e) => {
            keeper.abort();
            // The key lives on the lease: revoking it leaves the queue.
            let _ = c.lease_revoke(lease).await;
            Err(e)
        }
    }
}

/// Puts `key` in the queue (or finds it there) and waits until no older key is left.
async fn queue(
    client: &Client,
    prefix: &str,
    key: &str,
    me: &str,
    lease: i64,
    mut waiting: impl FnMut(&str),
) -> Result<(), String> {
    let mut c = client.clone();
    let refused = |e: etcd_client::Error| format!("etcd refused {key}: {}", describe(&e));
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            me,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = c.txn(txn).await.map_err(refused)?;
    let mine = match resp.op_responses().first() {
        Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
        _ => resp.header().map(|h| h.revision()),
    }
    .ok_or_else(|| format!("etcd gave no revision for {key}"))?;
    let older = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(mine - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1);
    loop {
        match c.get(format!("{prefix}/"), Some(older.clone())).await {
            Ok(r) if r.kvs().is_empty() => return Ok(()),
            Ok(_) => {
                if let Some(h) = holder(client, prefix).await {
                    waiting(&h);
                }
            }
            Err(e) if unreachable(&e) => {} // a member restarting: ask again
            Err(e) => return Err(refused(e)),
        }
        tokio::time::sleep(QUEUE_POLL).await;
    }
}

/// The member name of whoever holds the lock now (the oldest key), if anyone.
pub async fn holder(client: &Client, prefix: &str) -> Option<String> {
    let mut c = client.clone();
    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let resp = c.get(format!("{prefix}/"), Some(oldest)).await.ok()?;
    let kv = resp.kvs().first()?;
    Some(String::from_utf8_lossy(kv.value()).into_owned())
}

/// Refreshes the lease at a third of its TTL until aborted; sets `lost` when etcd says the
/// lease is gone or cannot be reached for longer than the TTL.
async fn keep_alive(mut c: Client, lease: i64, ttl: Duration, lost: Arc<AtomicBool>) {
    let every = (ttl / 3).max(Duration::from_secs(1));
    let mut last_ok = Instant::now();
    loop {
        let alive = match c.lease_keep_alive(lease).await {
            Ok((mut keeper, mut stream)) => loop {
                if keeper.keep_alive().await.is_err() {
                    break true;
                }
                match stream.message().await {
                    Ok(Some(r)) if r.ttl() > 0 => last_ok = Instant::now(),
                    Ok(Some(_)) => break false,
                    _ => break true,
                }
                tokio::time::sleep(every).await;
            },
            Err(_) => true,
        };
        if !alive || last_ok.elapsed() > ttl {
            tracing::warn!(
                lease,
                "the restart lock's lease has expired: the lock is lost"
            );
            lost.store(true, Ordering::SeqCst);
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Held {
    /// The lease ran out: another node may hold the lock now.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Gives the lock up: delete the key, then revoke the lease (which would remove it too).
    pub async fn release(self) {
        self.keeper.abort();
        let mut c = self.client;
        if let Err(e) = c.delete(self.key.as_str(), None).await {
            tracing::debug!("deleting {}: {}", self.key, describe(&e));
        }
        if let Err(e) = c.lease_revoke(self.lease).await {
            tracing::warn!(
                "could not revoke the restart lock's lease ({}); it expires by itself",
                describe(&e)
            );
        }
    }
}
