//! The quorum gate's waits: for the members' health before and after this node's etcd
//! restarts, for none when this node's own member is down (starting what is down takes
//! nothing down), and the lock given up for a member that is down and waits for it.

use super::*;

/// Why a wait for the members' health ended without them healthy.
pub(super) enum Unmet {
    /// Not in time, the lock lost, or stopping: nothing more restarts.
    Failed(Hold),
    /// This member is down and waits in the lock's queue: it must go first.
    Yield(String),
}

impl EtcdGate {
    /// Waits until `judge`, given every voting member's answer, has nothing to wait for, up
    /// to `gate_timeout_secs`. The member list is read anew at every look, linearizably, so
    /// that a member added meanwhile (started or not) counts. With `yielding`, a member that
    /// is down (nothing listens at its client URLs) and waits in the lock's queue ends the
    /// wait: it cannot become healthy while this node holds the lock it waits for.
    pub(super) async fn healthy(
        &mut self,
        judge: impl Fn(&Answers) -> Result<(), Blocked>,
        when: &str,
        yielding: bool,
    ) -> Result<(), Unmet> {
        let start = Instant::now();
        let live = crate::live::waiting(format!("the etcd members ({when})"));
        loop {
            let State::Locked(l) = &mut self.state else {
                return Ok(());
            };
            if l.held.lost() {
                return Err(Unmet::Failed(lost_reason(l.held.margin())));
            }
            // Asked of the other members first: this node's own may be the one restarting.
            let mut known = l.members.clone();
            known.sort_by_key(|m| m.name == self.me);
            let urls = l.conn.urls().to_vec();
            let listed = members::list_now(&known, &urls, &self.conf.lock_prefix, &l.tls);
            let blocked = match listed.await {
                Ok(fresh) => {
                    l.members = fresh;
                    // Asked at once: raft indexes read one after another are of different
                    // moments, and a member asked last looks ahead of one asked first.
                    let tls = &l.tls;
                    let asks = (l.members.iter())
                        .map(|m| async move { (m.clone(), members::status(m, tls.clone()).await) });
                    let answers: Vec<_> = futures_util::future::join_all(asks).await;
                    match judge(&answers) {
                        Ok(()) => return Ok(()),
                        Err(b) => b,
                    }
                }
                Err(why) => Blocked {
                    member: None,
                    why: format!("the member list cannot be read again ({why})"),
                    wait: true,
                },
            };
            if !blocked.wait {
                return Err(Unmet::Failed(Hold::Unhealthy(format!(
                    "{}: {when}; nothing more is restarted, the new files stay installed, and the next pass retries",
                    blocked.why
                ))));
            }
            if yielding
                && let Some(m) = &blocked.member
                && !self.yielded.contains(&m.name)
                && down(m).await
                && lock::queued(&mut l.conn, &self.conf.lock_prefix)
                    .await
                    .is_some_and(|q| q.iter().skip(1).any(|h| *h == m.name))
            {
                return Err(Unmet::Yield(m.name.clone()));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(Unmet::Failed(Hold::Unhealthy(format!(
                    "{}: {when} (waited {}s, gate_timeout_secs); nothing more is restarted, the new files stay installed, and the next pass retries",
                    blocked.why,
                    self.conf.gate_timeout.as_secs()
                ))));
            }
            status(&format!(
                "holding the restart lock; waiting: {}",
                blocked.why
            ));
            live.say(format!("the etcd members: {}", blocked.why));
            pause(&self.stop).await;
            if self.stop.requested() {
                return Err(Unmet::Failed(Hold::Stopping(self.stop.reason())));
            }
        }
    }

    /// Before this node's etcd restarts: its own member, when down, is restarted at once
    /// (starting what is down takes nothing down); otherwise the members that stay healthy
    /// while it restarts must be a quorum of all voters first (`rules::etcd_restart`), a
    /// member that is down and queued for the lock goes first (a leading member hands its
    /// leadership over when it is taken down: `Gate::restarting`).
    pub(super) async fn ready_for_etcd(&mut self, step: &Step) -> Result<(), Hold> {
        loop {
            let all = self.members();
            if let Some(mine) = all.iter().find(|m| m.name == self.me)
                && down(mine).await
            {
                tracing::warn!(
                    "this node's etcd member {} is down (nothing listens at {}): the step for {} goes ahead without waiting for the others, since starting what is down takes nothing down",
                    self.me,
                    mine.client_urls.join(", "),
                    step.target
                );
                return Ok(());
            }
            let me = self.me.clone();
            let two = self.conf.two_member_restarts;
            let quorum = |answers: &Answers| rules::etcd_restart(&me, answers, two);
            let when = format!(
                "before {} restarts, the etcd members that stay healthy while it does must be a quorum of all voting members",
                step.target
            );
            match self.healthy(quorum, &when, true).await {
                Ok(()) => return Ok(()),
                Err(Unmet::Failed(why)) => return Err(why),
                Err(Unmet::Yield(name)) => self.requeue(&name).await?,
            }
        }
    }

    /// When this node's member leads the cluster, hands the leadership to the healthy other
    /// member furthest along, so that its restart costs no election (a leader that stops
    /// leaves the cluster without one until the others notice, and writes stall meanwhile).
    /// A hand-over that fails is said, and the restart goes on: an election is what a
    /// restart of a leader always cost.
    pub(super) async fn hand_leadership_over(&mut self, step: &Step) {
        let State::Locked(l) = &self.state else {
            return;
        };
        let Some(mine) = l.members.iter().find(|m| m.name == self.me) else {
            return;
        };
        let leads = match members::status(mine, l.tls.clone()).await {
            Ok(s) => s.leader != 0 && s.leader == s.member_id,
            Err(_) => false,
        };
        if !leads {
            return;
        }
        let mut best: Option<(&Member, u64)> = None;
        for m in l.members.iter().filter(|m| m.name != self.me && m.id != 0) {
            if let Ok(s) = members::status(m, l.tls.clone()).await
                && s.leader != 0
                && s.errors.is_empty()
                && best.is_none_or(|(_, index)| s.raft_index > index)
            {
                best = Some((m, s.raft_index));
            }
        }
        let Some((to, _)) = best else {
            return;
        };
        match members::move_leader(mine, to.id, l.tls.clone()).await {
            Ok(()) => tracing::info!(
                holder = self.me,
                "this node's etcd member {} led the cluster: handed the leadership to {} before {} restarts",
                self.me,
                to.label(),
                step.target
            ),
            Err(why) => tracing::warn!(
                holder = self.me,
                "this node's etcd member {} leads the cluster and could not hand the leadership to {} ({why}): {} restarts as the leader, and the others elect a new one",
                self.me,
                to.label(),
                step.target
            ),
        }
    }

    /// In a cluster of one voting member (its API servers coordinated all the same) or two
    /// (restarted only as `two_member_restarts` says), etcd serves nothing while this node's
    /// member restarts: the lease goes unconfirmed for that long without being lost, and is
    /// read back after the restart ([`Gate::after`]) before anything further.
    pub(super) fn excuse_quorumless_outage(&self, step: &Step) {
        let State::Locked(l) = &self.state else {
            return;
        };
        let why = match l.members.len() {
            1 => "a single voting member",
            2 => "two voting members",
            _ => return,
        };
        tracing::warn!(
            holder = self.me,
            "the cluster has {why} ({}): etcd serves nothing while {} restarts; the restart lock's key is read back once it is back",
            names(&l.members),
            step.target
        );
        l.held.excuse();
    }

    /// Gives the lock up for `member`, down and waiting for it, and queues again.
    async fn requeue(&mut self, member: &str) -> Result<(), Hold> {
        let State::Locked(l) = std::mem::replace(&mut self.state, State::Fresh) else {
            return Ok(());
        };
        let Locked {
            held,
            conn,
            files,
            tls,
            members,
        } = *l;
        held.release().await;
        self.yielded.push(member.to_string());
        tracing::info!(
            holder = self.me,
            "etcd member {member} is down and waits for the restart lock {}: released it for {member} to restart first; queueing again",
            self.conf.lock_prefix
        );
        self.state = Box::pin(self.lock(conn, &files, tls, members)).await;
        match &self.state {
            State::Refused(why) => Err(why.clone()),
            _ => Ok(()),
        }
    }
}

/// Whether `m` is down: nothing listens at any of its client URLs.
async fn down(m: &Member) -> bool {
    !m.client_urls.is_empty() && super::join::refusing_all(&m.client_urls).await
}
