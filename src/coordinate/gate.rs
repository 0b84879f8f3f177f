//! [`EtcdGate`]: the restart stage's gate when controllers coordinate through etcd. It takes
//! the cluster-wide lock before the first restart, holds etcd's restart until the members
//! that stay healthy during it are a quorum of all voters (by the member list as it is
//! then), holds everything after it until the local member is healthy and caught up again,
//! and releases the lock when the stage is over.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_client::TlsOptions;

use super::conn::{Refusal, Unreached};
use super::identity::{self, Files};
use super::lock::{self, Conn, Held, NotHad};
use super::members::{self, Answers, Member};
use super::node::{self, NodeEtcd};
use super::node_records;
use super::roster::{self, Roster};
use super::wal;
use crate::components::NodeReading;
use crate::config::{Coordination, Enabled};
use crate::restart::Gate;
use crate::restart::endpoints;
use crate::restart::serving::Client;
use crate::restart::step::{Component, Step, Target};
use crate::restart::{Fence, Hold};
use crate::stop::Stop;

mod apiservers;
mod ca_reissue;
mod elsewhere;
pub use ca_reissue::EtcdCaAgreement;
pub(super) use ca_reissue::ca_prefix;
mod health;
mod refusals;
use health::Unmet;
mod join;
mod rules;
use rules::Blocked;
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
    /// The members this pass gave the lock up for (once each: two nodes whose members are
    /// both down never hand it back and forth).
    yielded: Vec<String>,
    /// Ends the waits when the daemon stops.
    stop: Stop,
    /// The state directory where the members last listed are kept, if any.
    roster: Option<PathBuf>,
    /// Whether a member list read is recorded there (a pass; `check` only reads).
    write_roster: bool,
    /// The etcd restart this pass owes (its first step), if any: proof that this node runs
    /// a member, whatever its settings files say.
    owed_etcd: Option<String>,
    /// The static pod and the unit running etcd, with their settings (the node's reading,
    /// by what they run): kubespray's bare `ExecStart=etcd` keeps every setting in
    /// `/etc/etcd.env`.
    etcd: node::Runs,
    /// The etcd client pairs the node's settings name (the node's reading).
    etcd_clients: Vec<(PathBuf, PathBuf, PathBuf)>,
    /// The API servers' `--etcd-servers` (the node's reading).
    etcd_servers: Vec<String>,
    /// The step `before` let through is this node's member's start without the lock.
    own_start: bool,
    /// A client pair this node's API server accepts, to ask the others' `/readyz` with.
    apiserver_client: Option<Client>,
    /// The node's reading: what each step runs, with its settings.
    node: NodeReading,
    /// What this pass renewed and has not installed yet: the client identity is read as
    /// these say (a CA's agreement comes before the install).
    fresh: Vec<crate::renew::Fresh>,
    /// Where this node's API server answered `/readyz` right before the etcd step under
    /// way: it must answer again before the next step.
    own_apiserver: Option<String>,
    /// A renewal was refused here this pass ([`refusals`]).
    refused_here: bool,
}

enum State {
    /// Nothing asked yet: nothing is contacted until a restart is due.
    Fresh,
    /// Restart as without coordination (off, single member, or the cluster is down).
    Ungated,
    /// No member answers and this node's own member is down: its start goes ahead without
    /// the lock (it takes nothing down, and a cluster whose members all wait for a quorum
    /// never gets one otherwise), and nothing else does before the others are joined.
    OwnStart,
    /// This node's member's start went ahead so: the next step joins the others first,
    /// waiting for them when it did start.
    Rejoin { started: bool },
    /// Restart nothing more this pass, for this reason.
    Refused(Hold),
    /// The lock is held.
    Locked(Box<Locked>),
}

/// How this node stands with the other controllers ([`EtcdGate::join`]), and why.
enum Joined {
    /// Not coordinated: off, a cluster of one member, or no etcd here.
    Alone(String),
    /// Restarts held: coordination is called for and cannot be had.
    Held(String),
    /// Every member of the member list on record refuses connections (the cluster is down),
    /// or this node's own member does and the pass owes it a restart (`own`).
    Down(Down),
    /// One of several members, reachable.
    Cluster(Box<Cluster>),
}

/// How a pass would restart now, as the cluster says ([`EtcdGate::outlook`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreseen {
    /// `coordinated`, `not coordinated` or `held`, as `check` says it.
    pub restarts: &'static str,
    /// Why, in words.
    pub why: String,
    /// Held, but for one start: this node's etcd member is down and the pass owes it a
    /// restart, so that start goes ahead without the lock (the first step).
    pub own_start: bool,
}

/// Why restarts go ahead without the lock: what was seen, and what that means for a restart
/// (which is not what it means for a CA's agreement).
struct Down {
    seen: String,
    so: &'static str,
    /// Only this node's member is known down: only its start goes ahead.
    own: bool,
}

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.seen, self.so)
    }
}

/// A reachable cluster of several members, and this node's way in.
struct Cluster {
    conn: Conn,
    files: Files,
    tls: TlsOptions,
    members: Vec<Member>,
    /// The client URL whose member listed them.
    from: String,
}

struct Locked {
    held: Held,
    /// A connection of its own, to queue again when the lock is given up for a member that
    /// is down and waits for it.
    conn: Conn,
    files: Files,
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
            yielded: Vec::new(),
            stop: Stop::default(),
            roster: None,
            write_roster: false,
            owed_etcd: None,
            etcd: node::Runs::default(),
            etcd_clients: Vec::new(),
            etcd_servers: Vec::new(),
            own_start: false,
            apiserver_client: None,
            node: NodeReading::default(),
            fresh: Vec::new(),
            own_apiserver: None,
            refused_here: false,
        }
    }

    /// The same gate, reading the members last listed from `state_dir` and recording them
    /// there when it reads them anew.
    pub fn recording_in(mut self, state_dir: &Path) -> EtcdGate {
        self.roster = Some(state_dir.to_path_buf());
        self.write_roster = true;
        self
    }

    /// The same gate, reading the members last listed from `state_dir`, writing nothing.
    pub fn reading_in(mut self, state_dir: &Path) -> EtcdGate {
        self.roster = Some(state_dir.to_path_buf());
        self.write_roster = false;
        self
    }

    /// The same gate, knowing what the node's units run (the node's reading).
    pub fn knowing(mut self, node: &NodeReading) -> EtcdGate {
        self.knows(node);
        self
    }

    /// The same gate, reaching etcd as the client this pass renewed and has not installed
    /// yet (`fresh`), where it did.
    pub fn renewed(mut self, fresh: &[crate::renew::Fresh]) -> EtcdGate {
        self.fresh = fresh.to_vec();
        self
    }

    /// The same gate, its waits ended by `stop`.
    pub fn stopped_by(mut self, stop: Stop) -> EtcdGate {
        self.stop = stop;
        self
    }

    /// Whether the lock is still this node's, right before `step` or after a wait: not
    /// counted lost, and when `read_back`, its key read back from etcd with its revision.
    async fn fence(&mut self, step: &Step, read_back: bool) -> Result<(), Hold> {
        let State::Locked(l) = &mut self.state else {
            return Ok(());
        };
        if l.held.lost() {
            return Err(lost_reason(l.held.margin()));
        }
        // An excused outage is never left without the key read back.
        let read_back = read_back || l.held.excused();
        if read_back && let Err(why) = l.held.resume().await {
            return Err(Hold::LockLost(format!(
                "the restart lock is no longer known to be this node's ({why}): {} is not restarted, nor anything after it; the next pass retries",
                step.target
            )));
        }
        Ok(())
    }

    /// The same gate, for a pass whose restarts are `steps` (a dry run's outlook): a first
    /// step that restarts etcd proves a member here, as it does to a pass.
    pub fn owing(mut self, steps: &[Step]) -> EtcdGate {
        if let Some(s) = steps.first().filter(|s| s.component == Component::Etcd) {
            self.owed_etcd = Some(s.target.to_string());
        }
        self
    }

    /// How a pass would restart now, as the cluster says, and why; nothing is written and
    /// no lock is taken (`check`, a dry run).
    pub async fn outlook(mut self) -> Foreseen {
        let (restarts, why) = match self.join().await {
            Joined::Alone(why) => ("not coordinated", why),
            Joined::Held(why) => ("held", why),
            Joined::Down(down) if down.own => {
                return Foreseen {
                    restarts: "held",
                    why: format!(
                        "{down}: a pass starts it without the lock (a unit only when it failed, a static pod only when the container runtime reports no container of it that runs), and restarts nothing else until it has joined the others"
                    ),
                    own_start: true,
                };
            }
            Joined::Down(down) => (
                "not coordinated",
                format!("{down}: a pass restarts without the lock while it stays so"),
            ),
            Joined::Cluster(c) => {
                let all: Vec<&Member> = c.members.iter().collect();
                if let Some(answered) = join::without_leader(&all, &c.tls).await
                    && !answered.is_empty()
                {
                    let why = format!(
                        "{} (a majority of them down?), and no lease is granted without a leader: a pass holds its restarts, but for this node's own member's start when it is down and failed",
                        join::no_leader(&c.members, answered.len())
                    );
                    return Foreseen {
                        restarts: "held",
                        why,
                        own_start: false,
                    };
                }
                let (n, listed) = (c.members.len(), names(&c.members));
                let node = node::read(&self.root, &self.etcd)
                    .map(|n| format!("; this node's etcd settings: {}", n.describe_sources()))
                    .unwrap_or_default();
                (
                    "coordinated",
                    format!(
                        "etcd member {} of {n} ({listed}: the cluster's member list, asked at {}{node}), as etcd user {}: one controller restarts at a time",
                        self.me,
                        c.from,
                        c.files.user()
                    ),
                )
            }
        };
        Foreseen {
            restarts,
            why,
            own_start: false,
        }
    }

    /// A way into the cluster for publishing and reading node records: a connection
    /// through whichever member answers, this node's member name and the members. Err says
    /// why there is none: [`Unreached::Alone`] (coordination off, a cluster of one, no etcd
    /// here) or [`Unreached::Not`] (no identity, nobody answers, a refusal).
    pub(super) async fn reach(mut self) -> Result<(Conn, String, Vec<Member>), Unreached> {
        match self.join().await {
            Joined::Cluster(c) => Ok((c.conn, self.me, c.members)),
            Joined::Alone(why) => Err(Unreached::Alone(why)),
            Joined::Held(why) => Err(Unreached::Not(why)),
            Joined::Down(down) => Err(Unreached::Not(down.seen)),
        }
    }

    fn members(&self) -> Vec<Member> {
        match &self.state {
            State::Locked(l) => l.members.clone(),
            _ => Vec::new(),
        }
    }
}

impl Gate for EtcdGate {
    fn knows(&mut self, node: &NodeReading) {
        self.etcd = node::Runs::of(node);
        self.etcd_clients = node.etcd_clients();
        self.etcd_servers = node.etcd_servers();
        let api = (node.pods.iter().chain(&node.units))
            .find(|c| c.kind == Some(crate::components::Kind::ApiServer));
        self.apiserver_client =
            api.and_then(|api| crate::restart::serving::apiserver_client(node, api));
        self.node = node.clone();
    }

    async fn before(&mut self, step: &Step) -> Result<(), Hold> {
        self.own_start = false;
        if matches!(self.state, State::Fresh) {
            // Steps come etcd first: a first step that restarts etcd proves a member here.
            if step.component == Component::Etcd {
                self.owed_etcd = Some(step.target.to_string());
            }
            // Boxed: connecting, probing and queueing make a large future, and a caller's
            // stack (a test thread's 2 MiB in a debug build) need not hold it.
            self.state = Box::pin(self.start()).await;
        }
        // Stopping ends the stage at its next step, coordinated or not: what is left stays
        // owed to the next start.
        if self.stop.requested() {
            return Err(Hold::Stopping(self.stop.reason()));
        }
        let own_start = step.component == Component::Etcd;
        match self.state {
            State::Rejoin { started } => self.state = Box::pin(self.rejoin(started)).await,
            State::OwnStart if !own_start => self.state = Box::pin(self.rejoin(false)).await,
            _ => {}
        }
        match &self.state {
            State::Fresh | State::Ungated => return Ok(()),
            State::OwnStart | State::Rejoin { .. } => {
                // That one start: whatever follows joins the others first.
                self.state = State::Rejoin { started: false };
                self.own_start = true;
                return Ok(());
            }
            State::Refused(why) => return Err(why.clone()),
            State::Locked(_) if self.stop.requested() => {
                return Err(Hold::Stopping(self.stop.reason()));
            }
            State::Locked(_) => {}
        }
        self.fence(step, false).await?;
        // An etcd of another cluster (etcd-events) is gated on that cluster's quorum.
        let elsewhere = (step.component == Component::Etcd)
            .then(|| self.elsewhere(step))
            .flatten();
        match &elsewhere {
            Some(at) => Box::pin(self.ready_elsewhere(step, at)).await?,
            // Boxed, as the start: its waits and a possible turn in the queue are large.
            None if step.component == Component::Etcd => {
                Box::pin(self.ready_for_etcd(step)).await?
            }
            None => {}
        }
        if step.component == Component::ApiServer {
            Box::pin(self.ready_for_apiserver(step)).await?;
        }
        // Right before the restart, after any wait: still this node's lock, and for etcd,
        // its key read back from the cluster.
        self.fence(step, step.component == Component::Etcd).await?;
        if step.component == Component::Etcd && elsewhere.is_none() {
            self.excuse_quorumless_outage(step);
            self.own_apiserver = self.own_apiserver_ready().await;
        }
        Ok(())
    }

    async fn after(&mut self, step: &Step, ok: bool) -> Result<(), Hold> {
        if let State::Rejoin { started } = &mut self.state {
            *started = ok && step.component == Component::Etcd;
        }
        if !matches!(self.state, State::Locked(_)) || step.component != Component::Etcd {
            return Ok(());
        }
        if !ok {
            return Err(Hold::NotBack(format!(
                "{} did not come back: nothing else restarts on this node while the lock is held",
                step.target
            )));
        }
        if let Some(at) = self.elsewhere(step) {
            Box::pin(self.back_elsewhere(step, &at)).await?;
            return self.fence(step, false).await;
        }
        let me = self.me.clone();
        let mine = |answers: &Answers| rules::back(&me, answers);
        let when = format!(
            "after {} restarted, this node's etcd member must be healthy and caught up",
            step.target
        );
        let waited = Box::pin(self.healthy(mine, &when, false)).await;
        match waited {
            Err(Unmet::Failed(hold)) => return Err(hold),
            // Not asked to yield here; said as what it is if it ever were.
            Err(Unmet::Yield(name)) => {
                return Err(Hold::Unhealthy(format!(
                    "etcd member {name} is down and waits for the restart lock: {when}"
                )));
            }
            Ok(()) => {}
        }
        if let Some(addr) = self.own_apiserver.take() {
            Box::pin(self.own_apiserver_back(step, &addr)).await?;
        }
        // Read back: the key was had before the restart, and etcd may have served nothing
        // while it lasted (a cluster of two).
        self.fence(step, true).await
    }

    fn start_only(&self) -> bool {
        self.own_start
    }

    /// The lease as the holder knows it, asked right before the job is queued: the D-Bus
    /// round trips after `before` have no other check.
    fn fence(&self) -> Fence {
        match &self.state {
            State::Locked(l) => {
                let lease = l.held.watch();
                Fence::new(move || match lease.lost() {
                    true => Err(lost_reason(lease.margin)),
                    false => Ok(()),
                })
            }
            _ => Fence::default(),
        }
    }

    fn lock_wait(&self) -> Option<Duration> {
        self.lock_wait
    }

    fn stop(&self) -> Stop {
        self.stop.clone()
    }

    fn probe_client(&self) -> Option<(PathBuf, PathBuf)> {
        identity::find(&self.conf, &self.root, &self.etcd_clients).map(|f| (f.cert, f.key))
    }

    fn peer_urls(&self) -> Vec<String> {
        (self.members().into_iter())
            .filter(|m| m.name != self.me)
            .flat_map(|m| m.peer_urls)
            .collect()
    }

    /// This node's member, when it leads, hands the leadership over first: a leader that
    /// stops costs an election. A member that reads its renewals again stays leader.
    async fn restarting(&mut self, step: &Step) {
        if step.component == Component::Etcd && self.elsewhere(step).is_none() {
            self.hand_leadership_over(step).await;
        }
    }

    async fn may_install(&mut self, step: &Step) -> Result<(), Hold> {
        self.others_refused(step).await
    }

    async fn refused(&mut self, step: &Step, why: &str) {
        self.note_refused(step, why).await
    }

    async fn finish(&mut self) {
        self.clear_refused().await;
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
fn lost_reason(margin: Duration) -> Hold {
    Hold::LockLost(format!(
        "the restart lock's lease was not confirmed by etcd for {}s (half its TTL) while this node held it: another node may hold the lock now, so nothing more is restarted this pass",
        margin.as_secs_f64()
    ))
}

/// Restarts refused for `why`: said (a warning) with the first restart it holds.
fn refused(why: Hold) -> State {
    tracing::debug!("restarts held back: {why}");
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
