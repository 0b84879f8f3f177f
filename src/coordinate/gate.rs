//! [`EtcdGate`]: the restart stage's gate when controllers coordinate through etcd. It takes
//! the cluster-wide lock before the first restart, holds etcd's restart until every other
//! member is healthy, holds everything after it until the local member is healthy and
//! caught up again, and releases the lock when the stage is over.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_client::TlsOptions;

use super::identity::{self, Files};
use super::lock::{self, Conn, Held, NotHad};
use super::members::{self, Member};
use super::node::{self, NodeEtcd};
use super::stop::{STOPPING, Stop};
use crate::config::{Coordination, Enabled};
use crate::restart::endpoints;
use crate::restart::sequence::{Component, Gate, Step};

mod ca;
pub use ca::EtcdCaAgreement;
mod join;
mod rules;
#[cfg(test)]
mod tests;

/// How often the health of the members is asked while waiting for them.
const HEALTH_POLL: Duration = Duration::from_secs(1);

/// The gate of one pass's restart stage.
pub struct EtcdGate {
    conf: Coordination,
    /// Where the node's files are (`/`; a tree in tests).
    root: PathBuf,
    /// This node's member name.
    me: String,
    state: State,
    /// How long this pass waited for the lock, once it had it.
    pub lock_wait: Option<Duration>,
    /// Ends the waits when the daemon stops.
    stop: Stop,
}

enum State {
    /// Nothing asked yet: nothing is contacted until a restart is due.
    Fresh,
    /// Restart as without coordination (off, single member, or nobody answers).
    Ungated,
    /// Restart nothing more this pass, for this reason.
    Refused(String),
    /// The lock is held.
    Locked(Box<Locked>),
}

/// How this node stands with the other controllers ([`EtcdGate::join`]).
enum Joined {
    /// Not coordinated (off, one member, no etcd here: `Ungated`) or held (`Refused`).
    Alone(State),
    /// Every member this node knows of refuses connections: the cluster is down.
    Down(State),
    /// One of several members, reachable.
    Cluster(Box<Cluster>),
}

/// A reachable cluster of several members, and this node's way in.
struct Cluster {
    conn: Conn,
    files: Files,
    tls: TlsOptions,
    members: Vec<Member>,
}

struct Locked {
    held: Held,
    tls: TlsOptions,
    members: Vec<Member>,
}

impl EtcdGate {
    /// The gate for a pass on this node under `conf`.
    pub fn new(conf: &Coordination) -> EtcdGate {
        EtcdGate::under(conf, Path::new("/"))
    }

    /// The gate for a node whose files are under `root` (tests: a tree).
    pub fn under(conf: &Coordination, root: &Path) -> EtcdGate {
        let me = conf.member_name.clone().unwrap_or_else(hostname);
        EtcdGate {
            conf: conf.clone(),
            root: root.to_path_buf(),
            me,
            state: State::Fresh,
            lock_wait: None,
            stop: Stop::default(),
        }
    }

    /// The same gate, its waits ended by `stop`.
    pub fn stopped_by(mut self, stop: Stop) -> EtcdGate {
        self.stop = stop;
        self
    }

    /// Waits until the members `wanted` picks are healthy, up to `gate_timeout_secs`.
    async fn healthy(&self, wanted: impl Fn(&Member) -> bool, when: &str) -> Result<(), String> {
        let State::Locked(l) = &self.state else {
            return Ok(());
        };
        let start = Instant::now();
        loop {
            if l.held.lost() {
                return Err(lost_reason(l.held.margin()));
            }
            let mut answers = Vec::new();
            for m in &l.members {
                answers.push((m.clone(), members::status(m, l.tls.clone()).await));
            }
            let bad = members::unhealthy(&answers, &wanted);
            let Some((name, why)) = bad.first() else {
                return Ok(());
            };
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(format!(
                    "etcd member {name} {why}: {when} (waited {}s, gate_timeout_secs); nothing more is restarted, the new files stay installed, and the next pass retries",
                    self.conf.gate_timeout.as_secs()
                ));
            }
            status(&format!(
                "holding the restart lock; waiting for etcd member {name}: {why}"
            ));
            pause(&self.stop).await;
            if self.stop.requested() {
                return Err(STOPPING.into());
            }
        }
    }

    /// Whether the lock is still this node's, right before `step` or after a wait: not
    /// counted lost, and when `read_back`, its key read back from etcd with its revision.
    async fn fence(&mut self, step: &Step, read_back: bool) -> Result<(), String> {
        let State::Locked(l) = &mut self.state else {
            return Ok(());
        };
        if l.held.lost() {
            return Err(lost_reason(l.held.margin()));
        }
        if read_back && let Err(why) = l.held.confirm().await {
            return Err(format!(
                "the restart lock is no longer known to be this node's ({why}): {} is not restarted, nor anything after it; the next pass retries",
                step.target
            ));
        }
        Ok(())
    }

    fn members(&self) -> Vec<Member> {
        match &self.state {
            State::Locked(l) => l.members.clone(),
            _ => Vec::new(),
        }
    }
}

impl Gate for EtcdGate {
    async fn before(&mut self, step: &Step) -> Result<(), String> {
        if matches!(self.state, State::Fresh) {
            // Boxed: connecting, probing and queueing make a large future, and a caller's
            // stack (a test thread's 2 MiB in a debug build) need not hold it.
            self.state = Box::pin(self.start()).await;
        }
        match &self.state {
            State::Fresh | State::Ungated => return Ok(()),
            State::Refused(why) => return Err(why.clone()),
            State::Locked(_) if self.stop.requested() => return Err(STOPPING.into()),
            State::Locked(_) => {}
        }
        self.fence(step, false).await?;
        if step.component == Component::Etcd {
            let all = self.members();
            let others = |m: &Member| rules::other(&self.me, m, &all);
            self.healthy(
                others,
                &format!(
                    "before {} restarts, every other etcd member must be healthy",
                    step.target
                ),
            )
            .await?;
        }
        // Right before the restart, after any wait: still this node's lock, and for etcd,
        // its key read back from the cluster.
        self.fence(step, step.component == Component::Etcd).await
    }

    async fn after(&mut self, step: &Step, ok: bool) -> Result<(), String> {
        if !matches!(self.state, State::Locked(_)) || step.component != Component::Etcd {
            return Ok(());
        }
        if !ok {
            return Err(format!(
                "{} did not come back: nothing else restarts on this node while the lock is held",
                step.target
            ));
        }
        let all = self.members();
        let mine = |m: &Member| rules::mine(&self.me, m, &all);
        self.healthy(
            mine,
            &format!(
                "after {} restarted, this node's etcd member must be healthy and caught up",
                step.target
            ),
        )
        .await?;
        self.fence(step, false).await
    }

    async fn finish(&mut self) {
        if let State::Locked(l) = std::mem::replace(&mut self.state, State::Fresh) {
            l.held.release().await;
            tracing::info!(
                holder = self.me,
                "released the restart lock {}",
                self.conf.lock_prefix
            );
        }
    }
}

/// Waits one health poll, or less when a stop is requested.
async fn pause(stop: &Stop) {
    let mut stop = stop.clone();
    tokio::select! {
        _ = tokio::time::sleep(HEALTH_POLL) => {}
        _ = stop.wait() => {}
    }
}

/// Why nothing more restarts once the lease is counted lost.
fn lost_reason(margin: Duration) -> String {
    format!(
        "the restart lock's lease was not confirmed by etcd for {}s (half its TTL) while this node held it: another node may hold the lock now, so nothing more is restarted this pass",
        margin.as_secs_f64()
    )
}

fn refused(why: String) -> State {
    tracing::warn!("restarts held back: {why}");
    State::Refused(why)
}

fn names(members: &[Member]) -> String {
    let n: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    n.join(", ")
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn status(s: &str) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(s)]);
}
