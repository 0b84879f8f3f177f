//! The gate's decisions that need no etcd: whose health a restart waits for, and which
//! members and endpoints are asked, in which order.

use crate::config::Coordination;
use crate::coordinate::members::Member;
use crate::coordinate::node::NodeEtcd;

/// Whether `m` is this node's member `me` (every member counts as such when none is named
/// so: then all must be healthy and caught up after a restart).
pub(super) fn mine(me: &str, m: &Member, all: &[Member]) -> bool {
    m.name == me || !all.iter().any(|o| o.name == me)
}

/// Whether `m` is another node's member (every member counts as such when none is this
/// node's: then all must be healthy before etcd restarts).
pub(super) fn other(me: &str, m: &Member, all: &[Member]) -> bool {
    m.name != me || !all.iter().any(|o| o.name == me)
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

/// The endpoints asked first: the configured ones; when left at the default, the client
/// URLs this node's member advertises come first.
pub(super) fn endpoints(conf: &Coordination, node: Option<&NodeEtcd>) -> Vec<String> {
    let default = Coordination::default().endpoints;
    let mut eps = Vec::new();
    if conf.endpoints == default
        && let Some(n) = node
    {
        eps.extend(n.client_urls.iter().cloned());
    }
    for e in &conf.endpoints {
        if !eps.contains(e) {
            eps.push(e.clone());
        }
    }
    eps
}
