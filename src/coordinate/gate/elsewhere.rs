//! An etcd step of another cluster than the lock's (kubespray's `etcd-events`, a second
//! cluster for events): gated on that cluster's own quorum, asked at the client URLs its
//! own settings name with the same client identity, and its member waited for there after
//! its restart. The lock's cluster says nothing of it: the main cluster healthy with an
//! events member down would let the events cluster lose its quorum.

use super::*;
use crate::format::flags::host_port;
use crate::served::listen::{self, Server};

/// Another etcd cluster a step's member belongs to, as its settings say.
#[derive(Debug, Clone)]
pub(super) struct Elsewhere {
    /// Its client URLs (`https://host:port`).
    urls: Vec<String>,
    /// Its member's name there (`--name`), when its settings say.
    name: Option<String>,
}

impl EtcdGate {
    /// The cluster of `step`'s etcd when it is not the lock's: its settings (the node's
    /// reading) name client addresses none of the lock's members advertises. None when they
    /// name none (it is taken as the lock's, the stricter), or no lock is held.
    pub(super) fn elsewhere(&self, step: &Step) -> Option<Elsewhere> {
        let State::Locked(l) = &self.state else {
            return None;
        };
        let name = match &step.target {
            Target::Unit(n) | Target::Pod(n) => n.as_str(),
        };
        let all = self.node.pods.iter().chain(&self.node.units);
        let runs = all.into_iter().find(|c| c.name() == name)?;
        let listeners = match &step.target {
            Target::Pod(_) => listen::of_pod(runs, Server::Etcd),
            Target::Unit(u) => {
                let text = (u.to_string(), runs.settings_text());
                listen::of_unit(&self.root, Server::Etcd, Some(&text))
            }
        };
        let ours = |addr: &str| {
            (l.members.iter())
                .flat_map(|m| &m.client_urls)
                .filter_map(|u| host_port(u))
                .any(|(h, p)| {
                    let h = h.trim_matches(['[', ']']);
                    addr == format!("{h}:{p}") || addr == format!("[{h}]:{p}")
                })
        };
        if listeners.is_empty() || listeners.iter().any(|l| ours(&l.addr)) {
            return None;
        }
        let yaml = false;
        Some(Elsewhere {
            urls: listeners
                .iter()
                .map(|l| format!("https://{}", l.addr))
                .collect(),
            name: crate::format::flags::setting(&runs.settings_text(), "name", yaml),
        })
    }

    /// Waits, up to `gate_timeout_secs`, until `judge` has nothing to wait for in the
    /// cluster `at`, its voting members listed anew at each look and asked at once.
    pub(super) async fn healthy_elsewhere(
        &self,
        at: &Elsewhere,
        judge: impl Fn(&Answers) -> Result<(), Blocked>,
        when: &str,
    ) -> Result<(), Hold> {
        let State::Locked(l) = &self.state else {
            return Ok(());
        };
        let start = Instant::now();
        let _live = crate::live::waiting(format!(
            "the etcd members at {} ({when})",
            at.urls.join(", ")
        ));
        loop {
            if l.held.lost() {
                return Err(lost_reason(l.held.margin()));
            }
            let listed = members::list_now(&[], &at.urls, &self.conf.lock_prefix, &l.tls).await;
            let why = match listed {
                Ok(fresh) => {
                    let asks = (fresh.iter()).map(|m| async move {
                        (m.clone(), members::status(m, l.tls.clone()).await)
                    });
                    let answers: Vec<_> = futures_util::future::join_all(asks).await;
                    match judge(&answers) {
                        Ok(()) => return Ok(()),
                        Err(b) if !b.wait => {
                            return Err(Hold::Unhealthy(format!(
                                "{} (the cluster at {}): {when}",
                                b.why,
                                at.urls.join(", ")
                            )));
                        }
                        Err(b) => b.why,
                    }
                }
                Err(why) => format!("its member list cannot be read ({why})"),
            };
            if self.stop.requested() {
                return Err(Hold::Stopping(self.stop.reason()));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(Hold::Unhealthy(format!(
                    "{why} (the cluster at {}, not the lock's): {when} (waited {}s, gate_timeout_secs); the next pass retries",
                    at.urls.join(", "),
                    self.conf.gate_timeout.as_secs()
                )));
            }
            status(&format!("waiting: {why}"));
            pause(&self.stop).await;
        }
    }

    /// Before `step`, of the cluster `at`: the members that stay healthy while it restarts
    /// are a quorum of that cluster's voters.
    pub(super) async fn ready_elsewhere(&self, step: &Step, at: &Elsewhere) -> Result<(), Hold> {
        let me = at.name.clone().unwrap_or_default();
        let two = self.conf.two_member_restarts;
        let when = format!(
            "before {} restarts, the members of its own etcd cluster that stay healthy while it does must be a quorum of its voting members",
            step.target
        );
        self.healthy_elsewhere(at, |a| rules::etcd_restart(&me, a, two), &when)
            .await
    }

    /// After `step`, of the cluster `at`: its member there healthy and caught up.
    pub(super) async fn back_elsewhere(&self, step: &Step, at: &Elsewhere) -> Result<(), Hold> {
        let me = at.name.clone().unwrap_or_default();
        let mine = |answers: &Answers| rules::back(&me, answers);
        let when = format!(
            "after {} restarted, its member of its own etcd cluster must be healthy and caught up",
            step.target
        );
        self.healthy_elsewhere(at, mine, &when).await
    }
}
