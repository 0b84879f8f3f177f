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
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};
use tokio::task::JoinHandle;

use super::members::{self, describe, unreachable};

/// How often a waiter looks whether the keys before its own are gone, and how long to wait
/// before asking again when no member answered.
const QUEUE_POLL: Duration = Duration::from_millis(500);
/// Releasing never holds a pass up for longer than this (the lease expires anyway).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to whichever member answers, made again through the next one when the
/// member it used stops answering (it may be restarting: the holder restarts its own).
#[derive(Clone)]
pub struct Conn {
    urls: Vec<String>,
    tls: TlsOptions,
    client: Option<Client>,
}

impl Conn {
    /// Members' client URLs in order of preference, and the identity.
    pub fn new(urls: Vec<String>, tls: TlsOptions) -> Conn {
        Conn {
            urls,
            tls,
            client: None,
        }
    }

    async fn client(&mut self) -> Option<Client> {
        if self.client.is_none() {
            let url = members::first_answering(&self.urls, &self.tls).await.ok()?;
            let one = std::slice::from_ref(url);
            self.client = members::connect(one, self.tls.clone()).await.ok();
        }
        self.client.clone()
    }

    /// Runs `op` until etcd answers it: Ok, or Err with etcd's refusal. While no member
    /// answers it asks again (the caller bounds the wait).
    async fn call<T, F, Fut>(&mut self, mut op: F) -> Result<T, String>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        loop {
            if let Some(c) = self.client().await {
                match op(c).await {
                    Ok(v) => return Ok(v),
                    Err(e) if !unreachable(&e) => return Err(describe(&e)),
                    Err(_) => self.client = None,
                }
            }
            tokio::time::sleep(QUEUE_POLL).await;
        }
    }
}

/// The lock, held.
pub struct Held {
    conn: Conn,
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
    conn: Conn,
    prefix: &str,
    me: &str,
    ttl: Duration,
    timeout: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Held, NotHad> {
    let start = Instant::now();
    let mut conn = conn;
    let secs = ttl.as_secs() as i64;
    let grant = conn.call(|mut c| async move { c.lease_grant(secs, None).await });
    let lease = match tokio::time::timeout(timeout, grant).await {
        Ok(Ok(l)) => l.id(),
        Ok(Err(why)) => return Err(NotHad::Refused(format!("cannot grant a lease: {why}"))),
        Err(_) => return Err(NotHad::Timeout { holder: None }),
    };
    let lost = Arc::new(AtomicBool::new(false));
    let keeper = tokio::spawn(keep_alive(conn.clone(), lease, ttl, lost.clone()));
    let key = format!("{prefix}/{lease:x}");
    let mut seen: Option<String> = None;
    let queued = queue(&mut conn, prefix, &key, me, lease, |h: &str| {
        if h != me && seen.as_deref() != Some(h) {
            waiting(h);
            seen = Some(h.to_string());
        }
    });
    let left = timeout.saturating_sub(start.elapsed());
    let outcome = match tokio::time::timeout(left, queued).await {
        Ok(r) => r.map_err(NotHad::Refused),
        Err(_) => Err(NotHad::Timeout { holder: None }),
    };
    match outcome {
        Ok(()) => Ok(Held {
            conn,
            lease,
            key,
            keeper,
            lost,
            waited: start.elapsed(),
        }),
        Err(e) => {
            keeper.abort();
            let e = match e {
                NotHad::Timeout { .. } => NotHad::Timeout {
                    holder: holder(&mut conn, prefix).await.or(seen),
                },
                refused => refused,
            };
            // The key lives on the lease: revoking it leaves the queue.
            let revoke = conn.call(|mut c| async move { c.lease_revoke(lease).await });
            let _ = tokio::time::timeout(RELEASE_TIMEOUT, revoke).await;
            Err(e)
        }
    }
}

/// Puts `key` in the queue (or finds it there) and waits until no older key is left.
async fn queue(
    conn: &mut Conn,
    prefix: &str,
    key: &str,
    me: &str,
    lease: i64,
    mut waiting: impl FnMut(&str),
) -> Result<(), String> {
    let refused = |why: String| format!("etcd refused {key}: {why}");
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
    .ok_or_else(|| format!("etcd gave no revision for {key}"))?;
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
        if r.kvs().is_empty() {
            return Ok(());
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
    Some(String::from_utf8_lossy(kv.value()).into_owned())
}

/// Refreshes the lease at a third of its TTL until aborted, through whichever member
/// answers; sets `lost` when etcd says the lease is gone or nothing was refreshed for a TTL.
async fn keep_alive(mut conn: Conn, lease: i64, ttl: Duration, lost: Arc<AtomicBool>) {
    let every = (ttl / 3).max(Duration::from_secs(1));
    let mut last_ok = Instant::now();
    loop {
        let mut expired = false;
        if let Some(mut c) = conn.client().await
            && let Ok((mut keeper, mut stream)) = c.lease_keep_alive(lease).await
        {
            loop {
                if keeper.keep_alive().await.is_err() {
                    break;
                }
                match stream.message().await {
                    Ok(Some(r)) if r.ttl() > 0 => last_ok = Instant::now(),
                    Ok(Some(_)) => {
                        expired = true;
                        break;
                    }
                    _ => break,
                }
                tokio::time::sleep(every).await;
            }
        }
        conn.client = None;
        if expired || last_ok.elapsed() > ttl {
            tracing::warn!(
                lease,
                "the restart lock's lease has expired: the lock is lost"
            );
            lost.store(true, Ordering::SeqCst);
            return;
        }
        tokio::time::sleep(QUEUE_POLL).await;
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
