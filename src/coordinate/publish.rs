//! Publishing this node's record ([`super::record`]) in etcd, and reading every node's: the
//! record is put at `<lock_prefix>.nodes/<member name>` on a lease of `lease_ttl_secs` that
//! is kept alive while the daemon runs (the lock's keep-alive, through whichever member
//! answers), so a daemon that stops (or dies) takes its record with it within a TTL. The
//! caller bounds every call: nothing in a pass waits on publishing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use etcd_client::{GetOptions, PutOptions};

use super::EtcdGate;
pub use super::conn::Unreached;
use super::lock::{Conn, Keeper, Lease, keep_lease};
use super::members::Member;
use super::node_records::{PAGE, RecordUnread, prefix_end, records};
use super::record::{self, NodeRecord};
use crate::components::NodeReading;
use crate::config::Coordination;

/// What the log calls the record's lease.
const WHAT: &str = "the node record";

/// Publishes this node's record, keeping one lease for as long as it lives.
pub struct Publisher {
    conf: Coordination,
    root: PathBuf,
    state_dir: PathBuf,
    live: Option<Live>,
    /// Whether a record was ever published: one whose lease is lost since is owed again
    /// ([`Publisher::lapsed`]).
    published: bool,
    /// Whether the last attempt found this node not coordinated (nobody to tell).
    alone: bool,
    /// The last record given to publish, as written: put again while it is not in etcd.
    last: Option<NodeRecord>,
    /// What the node runs, as the last pass read it: where etcd's settings and client
    /// pairs are.
    node: NodeReading,
}

/// The lease the record is on, kept alive, and the way in it was granted through.
struct Live {
    conn: Conn,
    lease: i64,
    state: Arc<Lease>,
    _keeper: Keeper,
    me: String,
    members: Vec<Member>,
}

impl Publisher {
    /// A publisher under `conf`, reading the members last listed from `state_dir`.
    pub fn new(conf: &Coordination, state_dir: &Path) -> Publisher {
        Publisher::under(conf, Path::new("/"), state_dir)
    }

    /// The same for a node whose files are under `root` (tests: a tree).
    pub fn under(conf: &Coordination, root: &Path, state_dir: &Path) -> Publisher {
        Publisher {
            conf: conf.clone(),
            root: root.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            live: None,
            published: false,
            alone: false,
            last: None,
            node: NodeReading::default(),
        }
    }

    /// The last record given to publish, as written.
    pub fn last(&self) -> Option<&NodeRecord> {
        self.last.as_ref()
    }

    /// From now on, reaches etcd as `node` (a pass's reading) says this node does.
    pub fn knows(&mut self, node: &NodeReading) {
        self.node = node.clone();
    }

    /// Puts `rec` (its `node` and `member_id` filled in as etcd knows this node, its
    /// `apiservers` as the node's reading says, written now)
    /// on the lease, granting a new one when there is none yet or the last was lost. The key
    /// written; `None` when this node is not coordinated (off, a cluster of one: nobody to
    /// tell); Err says why the record is not published.
    pub async fn publish(&mut self, mut rec: NodeRecord) -> Result<Option<String>, NotPublished> {
        rec.written_at = time::OffsetDateTime::now_utc().unix_timestamp();
        self.last = Some(rec.clone());
        self.put(rec).await
    }

    /// Puts the last record again, as it was written (its time kept: a record put again
    /// after its lease was lost must not look newer than the pass it tells of), when it is
    /// not in etcd: never put (etcd was out of reach, or refused this node's client
    /// certificate, when it was written: an expired one is renewed by the pass) or its lease
    /// lost since. `Ok(None)` when nothing is owed.
    pub async fn publish_owed(&mut self) -> Result<Option<String>, NotPublished> {
        if !self.owed() {
            return Ok(None);
        }
        match self.last.clone() {
            Some(rec) => self.put(rec).await,
            None => Ok(None),
        }
    }

    /// Whether a record given to publish is not in etcd now (and this node is not alone).
    pub fn owed(&self) -> bool {
        self.last.is_some()
            && !self.alone
            && (!self.published || self.live.as_ref().is_none_or(|l| l.state.lost()))
    }

    async fn put(&mut self, mut rec: NodeRecord) -> Result<Option<String>, NotPublished> {
        if self.live.as_ref().is_none_or(|l| l.state.lost()) {
            self.live = None;
            self.live = match self.grant().await {
                Ok(live) => Some(live),
                Err(Unreached::Alone(_)) => {
                    self.alone = true;
                    return Ok(None);
                }
                Err(Unreached::Not(why)) => return Err(NotPublished::Unreached(why)),
            };
        }
        let Some(live) = self.live.as_mut() else {
            return Err(NotPublished::NoLease);
        };
        rec.node = live.me.clone();
        rec.apiservers = crate::served::listen::apiservers(&self.node).0;
        rec.member_id = live
            .members
            .iter()
            .find(|m| m.name == live.me)
            .map(|m| format!("{:x}", m.id));
        let key = record::key(&self.conf.lock_prefix, &live.me);
        let value = rec.encode();
        let lease = live.lease;
        let put = live.conn.call(|mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                let opts = PutOptions::new().with_lease(lease);
                c.put(key, value, Some(opts)).await
            }
        });
        match put.await {
            Ok(_) => {
                self.published = true;
                self.alone = false;
                Ok(Some(key))
            }
            Err(why) => {
                // A lease etcd no longer knows is refused too: the next time grants anew.
                self.live = None;
                Err(NotPublished::Refused {
                    key,
                    why: why.to_string(),
                })
            }
        }
    }

    async fn grant(&self) -> Result<Live, Unreached> {
        let gate = EtcdGate::under(&self.conf, &self.root)
            .reading_in(&self.state_dir)
            .knowing(&self.node);
        let (mut conn, me, members) = gate.reach().await?;
        let ttl = self.conf.lease_ttl;
        let secs = ttl.as_secs() as i64;
        // Stamped when the answered request was sent (each attempt its own).
        let (sent, lease) = conn
            .call(|mut c| async move {
                let sent = std::time::Instant::now();
                c.lease_grant(secs, None).await.map(|l| (sent, l.id()))
            })
            .await
            .map_err(|why| Unreached::Not(format!("cannot grant a lease: {why}")))?;
        let state = Arc::new(Lease::new(ttl, sent));
        let keeper = Keeper::Task(tokio::spawn(keep_lease(
            conn.clone(),
            lease,
            ttl,
            state.clone(),
            WHAT,
        )));
        Ok(Live {
            conn,
            lease,
            state,
            _keeper: keeper,
            me,
            members,
        })
    }

    /// Whether this node was last found not coordinated (off, a cluster of one): there is
    /// no record whose lease could be lost.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// Takes the record away at once (the daemon stops): the lease is revoked. Bounded by
    /// the caller; unrevoked, it expires by itself.
    pub async fn retire(&mut self) {
        self.published = false;
        self.last = None;
        if let Some(mut live) = self.live.take() {
            let lease = live.lease;
            let _ = live
                .conn
                .call(|mut c| async move { c.lease_revoke(lease).await })
                .await;
        }
    }
}

/// Why this node's record is not in etcd now.
#[derive(Debug, thiserror::Error)]
pub enum NotPublished {
    /// The cluster cannot be had, as the gate says.
    #[error("{0}")]
    Unreached(String),
    #[error("no lease")]
    NoLease,
    #[error("etcd refused {key}: {why}")]
    Refused { key: String, why: String },
}

/// The cluster as the node records show it: the members (the roster) and every record
/// found, by key's last part.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// This node's member name.
    pub me: String,
    /// The etcd members.
    pub members: Vec<Member>,
    /// The records, by node name; a value that does not read as a record, as why not.
    pub records: Vec<(String, Result<NodeRecord, RecordUnread>)>,
    /// The members configured as no controller (`[coordination] external_members`).
    pub external: Vec<String>,
    /// The SHA-256 of each CA re-issue agreed for the cluster (the bytes under
    /// `<lock_prefix>.ca-renewals/`): a drift to one of them is a re-issue rolling through.
    pub agreed: Vec<String>,
}

/// Reads the member list and every record under `conf`'s prefix, through `gate` (which
/// says where the node's files are, what it runs, and whether the member list read is
/// recorded). Err says in one line why the cluster cannot be read: `Alone` where there is
/// rightly no cluster to read (coordination off, a cluster of one). Bounded by the caller.
pub async fn read_cluster(conf: &Coordination, gate: EtcdGate) -> Result<Cluster, Unreached> {
    let (mut conn, me, members) = gate.reach().await?;
    let records = records(&mut conn, &conf.lock_prefix).await?;
    let agreed = agreed(&mut conn, &conf.lock_prefix).await?;
    Ok(Cluster {
        me,
        members,
        records,
        external: conf.external_members.clone(),
        agreed,
    })
}

/// The SHA-256 of each CA re-issue agreed for the cluster, at most [`PAGE`] of them (one per
/// CA that came due since the last were cleaned up).
async fn agreed(conn: &mut Conn, lock_prefix: &str) -> Result<Vec<String>, Unreached> {
    let prefix = super::gate::ca_prefix(lock_prefix);
    let end = prefix_end(prefix.as_bytes());
    let got = conn
        .call(|mut c| {
            let (from, end) = (prefix.clone(), end.clone());
            async move {
                let opts = GetOptions::new().with_range(end).with_limit(PAGE);
                c.get(from, Some(opts)).await
            }
        })
        .await
        .map_err(|why| Unreached::Not(format!("etcd refused to read {prefix}: {why}")))?;
    // Beside each re-issue, a key per member that adopted it, with no value.
    let reissues = got.kvs().iter().filter(|kv| !kv.value().is_empty());
    Ok(reissues.map(|kv| record::sha256(kv.value())).collect())
}
