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
    /// Waits until the members `wanted` picks are healthy, up to `gate_timeout_secs`. With
    /// `yielding`, a member that is down (nothing listens at its client URLs) and waits in
    /// the lock's queue ends the wait: it cannot become healthy while this node holds the
    /// lock it waits for.
    pub(super) async fn healthy(
        &mut self,
        wanted: impl Fn(&Member) -> bool,
        when: &str,
        yielding: bool,
    ) -> Result<(), Unmet> {
        let start = Instant::now();
        loop {
            let State::Locked(l) = &mut self.state else {
                return Ok(());
            };
            if l.held.lost() {
                return Err(Unmet::Failed(lost_reason(l.held.margin())));
            }
            // A member that had not started when the list was read advertises no client
            // URL in it: read the list again, or the wait runs out on a member that is up.
            if l.members.iter().any(|m| m.client_urls.is_empty())
                && let Some(fresh) = members::list_through(&mut l.conn).await
            {
                l.members = fresh;
            }
            let mut answers = Vec::new();
            for m in &l.members {
                answers.push((m.clone(), members::status(m, l.tls.clone()).await));
            }
            let bad = members::unhealthy(&answers, &wanted);
            let Some((name, why)) = bad.first() else {
                return Ok(());
            };
            let (name, why) = (name.to_string(), why.clone());
            if yielding
                && !self.yielded.contains(&name)
                && let Some(m) = l.members.iter().find(|m| m.name == name)
                && down(m).await
                && lock::queued(&mut l.conn, &self.conf.lock_prefix)
                    .await
                    .is_some_and(|q| q.iter().skip(1).any(|h| *h == name))
            {
                return Err(Unmet::Yield(name));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(Unmet::Failed(Hold::Unhealthy(format!(
                    "etcd member {name} {why}: {when} (waited {}s, gate_timeout_secs); nothing more is restarted, the new files stay installed, and the next pass retries",
                    self.conf.gate_timeout.as_secs()
                ))));
            }
            status(&format!(
                "holding the restart lock; waiting for etcd member {name}: {why}"
            ));
            pause(&self.stop).await;
            if self.stop.requested() {
                return Err(Unmet::Failed(Hold::Stopping));
            }
        }
    }

    /// Before this node's etcd restarts: its own member, when down, is restarted at once
    /// (starting what is down takes nothing down); otherwise every other member must be
    /// healthy first, and a member that is down and queued for the lock goes first.
    pub(super) async fn ready_for_etcd(&mut self, step: &Step) -> Result<(), Hold> {
        loop {
            let all = self.members();
            if let Some(mine) = all.iter().find(|m| m.name == self.me)
                && down(mine).await
            {
                tracing::warn!(
                    "this node's etcd member {} is down (nothing listens at {}): restarting {} at once, without waiting for the others, since starting what is down takes nothing down",
                    self.me,
                    mine.client_urls.join(", "),
                    step.target
                );
                return Ok(());
            }
            let me = self.me.clone();
            let others = |m: &Member| rules::other(&me, m, &all);
            let when = format!(
                "before {} restarts, every other etcd member must be healthy",
                step.target
            );
            match self.healthy(others, &when, true).await {
                Ok(()) => return Ok(()),
                Err(Unmet::Failed(why)) => return Err(why),
                Err(Unmet::Yield(name)) => self.requeue(&name).await?,
            }
        }
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
