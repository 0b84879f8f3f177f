//! The cluster-wide restart lock: etcd's election API on a lease, as `etcdctl elect` and
//! `etcdctl lock` use it. The campaign's value is the holder's member name, so every waiter
//! can say who holds it. The lease is kept alive while the holder works; a holder that dies
//! loses the lock when the lease runs out, so the lock never wedges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaderKey, ResignOptions};
use tokio::task::JoinHandle;

use super::members::describe;

/// How often a waiter asks who holds the lock (for STATUS= and the log).
const HOLDER_POLL: Duration = Duration::from_secs(2);

/// The lock, held.
pub struct Held {
    client: Client,
    lease: i64,
    key: LeaderKey,
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

/// Takes the lock named `prefix` as `me` on a lease of `ttl`, waiting up to `timeout`.
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
    let campaign = campaign(client.clone(), prefix, me, lease);
    tokio::pin!(campaign);
    let mut poll = tokio::time::interval(HOLDER_POLL);
    let mut seen: Option<String> = None;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let outcome = loop {
        tokio::select! {
            r = &mut campaign => break r.map_err(NotHad::Refused),
            _ = &mut deadline => break Err(NotHad::Timeout { holder: seen.clone() }),
            _ = poll.tick() => {
                if let Some(h) = holder(client, prefix).await.filter(|h| h != me)
                    && seen.as_ref() != Some(&h)
                {
                    waiting(&h);
                    seen = Some(h);
                }
            }
        }
    };
    match outcome {
        Ok(key) => Ok(Held {
            client: client.clone(),
            lease,
            key,
            keeper,
            lost,
            waited: start.elapsed(),
        }),
        Err(e) => {
            keeper.abort();
            // Our campaign key lives on the lease: revoking it withdraws us from the queue.
            let _ = c.lease_revoke(lease).await;
            Err(e)
        }
    }
}

/// Campaigns until elected. A campaign is one long RPC that the client's request timeout
/// cuts off; campaigning again on the same lease resumes the same place in the queue.
async fn campaign(mut c: Client, prefix: &str, me: &str, lease: i64) -> Result<LeaderKey, String> {
    loop {
        match c.campaign(prefix, me, lease).await {
            Ok(mut resp) => {
                return resp
                    .take_leader()
                    .ok_or_else(|| format!("campaign for {prefix}: etcd returned no leader key"));
            }
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err(format!("campaign for {prefix} refused: {}", describe(&e))),
        }
    }
}

/// The client's own request timeout (not an answer from etcd).
fn timed_out(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(s.code(), tonic::Code::Cancelled | tonic::Code::DeadlineExceeded)
            && s.message().contains("Timeout expired"))
}

/// The member name of whoever holds the lock now, if anyone.
pub async fn holder(client: &Client, prefix: &str) -> Option<String> {
    let mut c = client.clone();
    let resp = c.leader(prefix).await.ok()?;
    let kv = resp.kv()?;
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

    /// Gives the lock up: resign, then revoke the lease (which also removes the key).
    pub async fn release(self) {
        self.keeper.abort();
        let mut c = self.client;
        let resign = ResignOptions::new().with_leader(self.key);
        if let Err(e) = c.resign(Some(resign)).await {
            tracing::debug!("resign: {}", describe(&e));
        }
        if let Err(e) = c.lease_revoke(self.lease).await {
            tracing::warn!(
                "could not revoke the restart lock's lease ({}); it expires by itself",
                describe(&e)
            );
        }
    }
}
