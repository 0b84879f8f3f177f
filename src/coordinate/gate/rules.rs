//! The gate's decisions that need no etcd: whose health a restart waits for, and which
//! members and endpoints are asked, in which order.

use crate::config::Coordination;
use crate::coordinate::members::{self, Answers, Member};
use crate::coordinate::node::NodeEtcd;
use crate::coordinate::roster::Roster;

/// Whether `m` is this node's member `me` (every member counts as such when none is named
/// so: then all must be healthy and caught up after a restart).
pub(super) fn mine(me: &str, m: &Member, all: &[Member]) -> bool {
    m.name == me || !all.iter().any(|o| o.name == me)
}

/// Whether this node's member `me` is back after its restart, given every voting member's
/// answer: healthy and caught up (every member, when none is named `me`).
pub(super) fn back(me: &str, answers: &Answers) -> Result<(), Blocked> {
    let all: Vec<Member> = answers.iter().map(|(m, _)| m.clone()).collect();
    match members::unhealthy(answers, |m| mine(me, m, &all)).first() {
        None => Ok(()),
        Some((m, why)) => Err(Blocked {
            member: Some((*m).clone()),
            why: format!("etcd member {} {why}", m.label()),
            wait: true,
        }),
    }
}

/// Whether `m` is another node's member (every member counts as such when none is this
/// node's: then all must be healthy before etcd restarts).
pub(super) fn other(me: &str, m: &Member, all: &[Member]) -> bool {
    m.name != me || !all.iter().any(|o| o.name == me)
}

/// What keeps a member's etcd restart from going ahead now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Blocked {
    /// The member waited for, if one is: the first other member that is not healthy.
    pub member: Option<Member>,
    /// Why, in words: the member's state and the count.
    pub why: String,
    /// Whether waiting can help: not for a cluster whose size alone forbids the restart.
    pub wait: bool,
}

/// Whether this node's member `me` may restart now, given every voting member's answer
/// (started or not; learners are not voters): it may when the voters that stay healthy
/// while it is down are a quorum of all of them. When no voter is this node's, any of them
/// may be the one that goes down, so one healthy member more is needed. A cluster of one
/// member has no quorum a restart could keep; a cluster of two loses it whichever restarts,
/// so there only `two` (`two_member_restarts`) lets it, with the other member healthy.
pub(super) fn etcd_restart(me: &str, answers: &Answers, two: bool) -> Result<(), Blocked> {
    let all: Vec<Member> = answers.iter().map(|(m, _)| m.clone()).collect();
    let voters = all.len();
    if voters <= 1 {
        return Ok(());
    }
    let quorum = voters / 2 + 1;
    let bad = members::unhealthy(answers, |m| other(me, m, &all));
    let others = all.iter().filter(|m| other(me, m, &all)).count();
    let healthy = others - bad.len();
    let staying = match all.iter().any(|m| m.name == me) {
        true => healthy,
        false => healthy.saturating_sub(1),
    };
    if staying >= quorum || (two && voters == 2 && staying == 1) {
        return Ok(());
    }
    if voters == 2 && !two {
        return Err(Blocked {
            member: None,
            why: format!(
                "the cluster has two voting members ({}): whichever restarts, the other alone is no quorum, so etcd would stop serving; [coordination] two_member_restarts = true restarts it all the same",
                all.iter().map(Member::label).collect::<Vec<_>>().join(", ")
            ),
            wait: false,
        });
    }
    let count = format!(
        "{staying} of {voters} voting members would stay healthy while this node's member restarts, and {quorum} are a quorum"
    );
    Err(match bad.first() {
        Some((m, why)) => Blocked {
            member: Some((*m).clone()),
            why: format!("etcd member {} {why} ({count})", m.label()),
            wait: true,
        },
        None => Blocked {
            member: None,
            why: count,
            wait: true,
        },
    })
}

/// Where the lock is kept: through another node's member first, since this node's own
/// member goes down for a moment while the lock is held; then its own; then the endpoints.
pub(super) fn lock_urls(me: &str, members: &[Member], endpoints: &[String]) -> Vec<String> {
    let (mine, others): (Vec<&Member>, Vec<&Member>) = members.iter().partition(|m| m.name == me);
    let mut urls: Vec<String> = Vec::new();
    let all = others
        .iter()
        .chain(&mine)
        .flat_map(|m| m.client_urls.iter());
    for url in all.chain(endpoints) {
        if !urls.contains(url) {
            urls.push(url.clone());
        }
    }
    urls
}

/// The endpoints asked, in order: the configured ones (when left at the default, the
/// client URLs this node's member advertises first); then the other members' client URLs as
/// etcd last listed them (`me`'s own last), so that a node whose own member is down still
/// reaches the cluster; then, for the peers `--initial-cluster` names on etcd's usual peer
/// port 2380, the same host on the usual client port 2379; then the API servers'
/// `--etcd-servers` (`servers`: an external etcd is found there). Whoever answers, the
/// member list it gives decides.
pub(super) fn endpoints(
    conf: &Coordination,
    node: Option<&NodeEtcd>,
    roster: Option<&Roster>,
    servers: &[String],
    me: &str,
) -> Vec<String> {
    let default = Coordination::default().endpoints;
    let mut eps = Vec::new();
    if conf.endpoints == default
        && let Some(n) = node
    {
        eps.extend(n.client_urls.iter().cloned());
    }
    let listed = roster.map(|r| r.client_urls(me)).unwrap_or_default();
    let guessed = node
        .iter()
        .flat_map(|n| n.peers.iter())
        .filter(|p| p.name != me)
        .filter_map(|p| {
            p.peer_url
                .strip_suffix(":2380")
                .map(|h| format!("{h}:2379"))
        });
    let all = (conf.endpoints.iter().cloned())
        .chain(listed)
        .chain(guessed)
        .chain(servers.iter().cloned());
    for e in all {
        if !eps.contains(&e) {
            eps.push(e);
        }
    }
    eps
}

/// Whether `said` differs from what was last said through here: a warning that every look
/// at the cluster would repeat is logged once, and again only once it changes.
pub(super) fn first_time(said: &str) -> bool {
    static LAST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *last == said {
        return false;
    }
    *last = said.to_string();
    true
}
