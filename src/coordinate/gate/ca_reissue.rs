//! One re-issue of a CA for the cluster. Controllers of one cluster hold
//! the same CA and its key, and come due together. The first to get there publishes its
//! re-issue in etcd, in a transaction that creates the key only if it is not there; the
//! others take those bytes (the renewer then checks them as its own: signed by the same
//! key, same subject and key identifier, everything under the watches verifying against
//! them). Every controller ends with identical CA files. When the agreement cannot be had
//! on a cluster, the CA is not re-issued: the pass fails, saying why, and the next retries.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::*;
use crate::format::cert::{CertFacts, hex};

/// The bytes a node installs for a CA's re-issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// The new certificate, DER.
    pub der: Vec<u8>,
    /// How it was agreed, for the journal: alone, published, or taken.
    pub how: String,
}

/// The renew stage's [`CaAgreement`]: one re-issue of a CA for the cluster, agreed through
/// etcd by [`EtcdGate::agree_on_ca`] under these settings.
///
/// [`CaAgreement`]: crate::renew::CaAgreement
#[derive(Debug)]
pub struct EtcdCaAgreement {
    pub conf: crate::config::Coordination,
    /// Where the members last listed are kept (a dry run's agreement is never asked).
    pub state_dir: std::path::PathBuf,
    /// Ends the agreement's waits when the daemon stops.
    pub stop: Stop,
    /// What the node runs (the pass's reading): where etcd's settings and client pairs are.
    pub node: crate::components::NodeReading,
}

impl crate::renew::CaAgreement for EtcdCaAgreement {
    fn agree(
        &self,
        ca: &crate::inventory::Cert,
        mine: Vec<u8>,
        fresh: &[crate::renew::Fresh],
    ) -> anyhow::Result<Vec<u8>> {
        use anyhow::Context;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the etcd client")?;
        let mut gate = EtcdGate::new(&self.conf)
            .recording_in(&self.state_dir)
            .knowing(&self.node)
            .stopped_by(self.stop.clone())
            .renewed(fresh);
        // Said before the wait: finding the cluster and its answer may take up to the gate's
        // timeout, and the journal should show what the pass waits on meanwhile.
        tracing::info!(path = %ca.path.display(), "CA {}: asking the controllers of this cluster to agree on its re-issue", ca.path.display());
        let agreed = rt.block_on(crate::progress::waiting(gate.agree_on_ca(&ca.facts, mine)));
        let agreed = agreed.map_err(|why| {
            anyhow::anyhow!(
                "not re-issued: the controllers of this cluster re-issue a CA once, for all of them, and cannot agree on it now ({why}); the next pass tries again"
            )
        })?;
        tracing::info!(path = %ca.path.display(), "CA {}: {}", ca.path.display(), agreed.how);
        Ok(agreed.der)
    }

    fn adopted<'a>(
        &'a self,
        old: &'a CertFacts,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<String>> + Send + 'a>>
    {
        Box::pin(async move {
            let mut gate = EtcdGate::new(&self.conf)
                .recording_in(&self.state_dir)
                .knowing(&self.node)
                .stopped_by(self.stop.clone());
            Ok(gate.adopted(old).await?)
        })
    }
}

impl EtcdCaAgreement {
    /// The agreements of passes under `settings`, their waits ended by `stop`.
    pub fn each_pass(
        settings: &crate::config::Settings,
        stop: &Stop,
    ) -> crate::renew::CaAgreements {
        let (conf, state_dir, stop) = (
            settings.coordination.clone(),
            settings.state_dir.clone(),
            stop.clone(),
        );
        std::sync::Arc::new(move |node: &crate::components::NodeReading| {
            std::sync::Arc::new(EtcdCaAgreement {
                conf: conf.clone(),
                state_dir: state_dir.clone(),
                stop: stop.clone(),
                node: node.clone(),
            }) as std::sync::Arc<dyn crate::renew::CaAgreement>
        })
    }
}

/// Why the controllers' agreement on a CA's re-issue, or this node's adoption of it, is not
/// had now; each says so in the operator's words.
#[derive(Debug, thiserror::Error)]
pub enum NoAgreement {
    /// The restart gate's reason for holding: the cluster cannot be joined now.
    #[error("{0}")]
    Held(String),
    /// No member answers: nowhere to agree until etcd does.
    #[error("{0}; the re-issue is agreed through etcd, so it waits until etcd answers")]
    Down(String),
    /// No member answers, said as seen (an adoption waits for the next pass).
    #[error("{0}")]
    Seen(String),
    /// etcd refused the agreement's key (to this node's client user, when known).
    #[error("etcd refused {key}{}: {why}", user.as_ref().map(|u| format!(" to user {u}")).unwrap_or_default())]
    Refused {
        key: String,
        why: String,
        user: Option<String>,
    },
    #[error("no etcd member answered within {}s (gate_timeout_secs)", .0.as_secs())]
    NoAnswer(Duration),
    #[error("etcd key {0} exists but could not be read")]
    Unreadable(String),
    /// The daemon is stopping: the wait was ended.
    #[error(transparent)]
    Stopping(#[from] crate::stop::Stopping),
}

/// Where the re-issues agreed for the cluster are kept: beside the restart lock's prefix,
/// not under it (the lock's queue is every key under `<lock_prefix>/`).
pub fn ca_prefix(lock_prefix: &str) -> String {
    format!("{}.ca-renewals/", lock_prefix.trim_end_matches('/'))
}

/// The etcd key of the re-issue of CA `old`, under [`ca_prefix`].
pub fn ca_key(lock_prefix: &str, old: &CertFacts) -> String {
    let id = match old.ski() {
        Some(ski) => hex(ski),
        None => hex(&old.public_key.raw[..old.public_key.raw.len().min(32)]),
    };
    format!("{}{id}/{}", ca_prefix(lock_prefix), old.serial)
}

impl EtcdGate {
    /// The re-issue of CA `old` this node installs: `mine` when it is alone (coordination
    /// off, a single member, no etcd here) or the first of the cluster to publish one,
    /// else the one another controller published. An error when it is one of several and
    /// they cannot agree now (etcd unreachable, the cluster down, the key refused).
    /// Every wait in it (finding the cluster, the transaction) ends when the daemon stops.
    pub async fn agree_on_ca(
        &mut self,
        old: &CertFacts,
        mine: Vec<u8>,
    ) -> Result<Agreed, NoAgreement> {
        self.stop
            .clone()
            .or_stopping(self.agree_now(old, mine))
            .await
    }

    async fn agree_now(&mut self, old: &CertFacts, mine: Vec<u8>) -> Result<Agreed, NoAgreement> {
        let cluster = match Box::pin(self.join()).await {
            Joined::Held(why) => return Err(NoAgreement::Held(why)),
            Joined::Alone(why) => {
                return Ok(Agreed {
                    der: mine,
                    how: format!(
                        "issued here: this node coordinates with no other controller ({why})"
                    ),
                });
            }
            // What stops a restart's lock does not stop a restart (nothing to protect), but
            // the agreement has nowhere to be made: say what was seen, not what a restart
            // would conclude from it.
            Joined::Down(down) => return Err(NoAgreement::Down(down.seen)),
            Joined::Cluster(c) => c,
        };
        let key = ca_key(&self.conf.lock_prefix, old);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), mine.clone(), None)])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let mut conn = cluster.conn;
        let limit = self.conf.gate_timeout.max(Duration::from_secs(1));
        let asked = conn.call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        });
        let resp = match tokio::time::timeout(limit, asked).await {
            Ok(Ok(r)) => r,
            Ok(Err(why)) => {
                return Err(NoAgreement::Refused {
                    key,
                    why: format!("{why}"),
                    user: Some(cluster.files.user()),
                });
            }
            Err(_) => return Err(NoAgreement::NoAnswer(limit)),
        };
        if resp.succeeded() {
            return Ok(Agreed {
                der: mine,
                how: format!("issued here and published for the cluster at etcd key {key}"),
            });
        }
        let theirs = match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        };
        match theirs {
            // Asked again after a lost answer, it finds its own.
            Some(der) if der == mine => Ok(Agreed {
                der,
                how: format!("issued here and published for the cluster at etcd key {key}"),
            }),
            Some(der) => Ok(Agreed {
                der,
                how: format!("taken from etcd key {key}, where another controller published it"),
            }),
            None => Err(NoAgreement::Unreadable(key)),
        }
    }
}

/// The members still to adopt an agreed re-issue, given those that have (`adopted`): every
/// member but those configured as no controller (`external`), which run no certrenewd and
/// so never adopt; waited for, they would keep the agreement's key forever.
pub(super) fn still_to_adopt<'a>(
    members: &'a [Member],
    adopted: &[String],
    external: &[String],
) -> Vec<&'a str> {
    (members.iter())
        .map(|m| m.name.as_str())
        .filter(|n| !adopted.iter().any(|a| a == n))
        .filter(|n| !external.iter().any(|e| e == n))
        .collect()
}

impl EtcdGate {
    /// This node installed the re-issue of CA `old` the cluster agreed on: it says so under
    /// the agreement's key, and once every member of the cluster has, the agreement is
    /// removed (no controller will ask for it again). What was done, for the journal; kept
    /// (a member's name unknown, say) is safe: the key only answers a later ask the same.
    pub async fn adopted(&mut self, old: &CertFacts) -> Result<String, NoAgreement> {
        self.stop.clone().or_stopping(self.adopted_now(old)).await
    }

    async fn adopted_now(&mut self, old: &CertFacts) -> Result<String, NoAgreement> {
        let cluster = match Box::pin(self.join()).await {
            Joined::Cluster(c) => c,
            Joined::Alone(_) => return Ok("issued here alone: nothing to record".into()),
            Joined::Held(why) => return Err(NoAgreement::Held(why)),
            Joined::Down(down) => return Err(NoAgreement::Seen(down.seen)),
        };
        let key = ca_key(&self.conf.lock_prefix, old);
        let marks = format!("{key}/adopted/");
        let mine = format!("{marks}{}", self.me);
        let mut conn = cluster.conn;
        let limit = self.conf.gate_timeout.max(Duration::from_secs(1));
        let record = async {
            conn.call(|mut c| {
                let mine = mine.clone();
                async move { c.put(mine, "", None).await }
            })
            .await?;
            let listed = conn
                .call(|mut c| {
                    let marks = marks.clone();
                    let keys = GetOptions::new().with_prefix().with_keys_only();
                    async move { c.get(marks, Some(keys)).await }
                })
                .await?;
            let adopted: Vec<String> = listed
                .kvs()
                .iter()
                .map(|kv| {
                    String::from_utf8_lossy(kv.key())
                        .trim_start_matches(&marks)
                        .to_string()
                })
                .collect();
            let left = still_to_adopt(&cluster.members, &adopted, &self.conf.external_members);
            if !left.is_empty() {
                return Ok(format!(
                    "adopted at etcd key {key}; still to adopt it: {}",
                    left.join(", ")
                ));
            }
            // Two members can see every mark at once: one removes it, the other says so.
            let done = Txn::new()
                .when([Compare::create_revision(
                    key.as_str(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then([
                    TxnOp::delete(key.as_str(), None),
                    TxnOp::delete(marks.as_str(), Some(DeleteOptions::new().with_prefix())),
                ]);
            let removed = conn
                .call(|mut c| {
                    let done = done.clone();
                    async move { c.txn(done).await }
                })
                .await?;
            Ok(match removed.succeeded() {
                true => format!("every member has adopted it: etcd key {key} removed"),
                false => format!(
                    "adopted at etcd key {key}, which another member, the last to adopt it, already removed"
                ),
            })
        };
        match tokio::time::timeout(limit, record).await {
            Ok(r) => r.map_err(|refused: Refusal| NoAgreement::Refused {
                key,
                why: refused.to_string(),
                user: None,
            }),
            Err(_) => Err(NoAgreement::NoAnswer(limit)),
        }
    }
}
