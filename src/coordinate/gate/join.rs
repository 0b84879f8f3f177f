//! How a pass joins the coordination, once, at its first restart: the node's own etcd
//! settings, the members, the decision (coordinated, not coordinated, or held) and the lock.

use super::*;

impl EtcdGate {
    /// Decides how this pass restarts, once: reads the node's etcd settings, connects, reads
    /// the members, takes the lock. The decision and why go to the journal.
    pub(super) async fn start(&mut self) -> State {
        match self.join().await {
            Joined::Alone(state) | Joined::Down(state) => state,
            Joined::Cluster(c) => self.lock(c.conn, &c.files, c.tls, c.members).await,
        }
    }

    /// Whether this node is one of several controllers it can reach through etcd: the
    /// node's etcd settings, the client identity, the members.
    pub(super) async fn join(&mut self) -> Joined {
        if self.conf.enabled == Enabled::Off {
            return Joined::Alone(ungated("[coordination] enabled = false".into()));
        }
        let node = node::read(&self.root);
        if let Some(n) = &node {
            if self.conf.member_name.is_none()
                && let Some(name) = &n.name
            {
                self.me = name.clone();
            }
            if self.conf.enabled == Enabled::Auto && n.members() == 1 {
                return Joined::Alone(ungated(format!(
                    "etcd's --initial-cluster in {} names a single member",
                    n.describe_sources()
                )));
            }
        }
        let endpoints = rules::endpoints(&self.conf, node.as_ref());
        let Some(files) = identity::find(&self.conf, &self.root) else {
            return Joined::Alone(self.no_identity(node.as_ref(), &endpoints).await);
        };
        let tls = match files.tls() {
            Ok(t) => t,
            Err(e) => {
                let why = format!("cannot read the etcd client identity: {e:#}");
                return Joined::Alone(refused(why));
            }
        };
        let eps = endpoints.join(", ");
        let answering = match members::first_answering(&endpoints, &tls).await {
            Ok(url) => url.clone(),
            Err(errors) => {
                return match nobody_answers(node.as_ref(), &endpoints, &errors, &files).await {
                    State::Ungated => Joined::Down(State::Ungated),
                    other => Joined::Alone(other),
                };
            }
        };
        let members = match self.member_list(&answering, &tls).await {
            Ok(m) => m,
            Err(why) => {
                let user = files.user();
                return Joined::Alone(refused(format!(
                    "etcd at {eps} answers but gives no member list to user {user}: {why}"
                )));
            }
        };
        if members.len() <= 1 && self.conf.enabled == Enabled::Auto {
            return Joined::Alone(ungated(format!("etcd at {eps} has a single member")));
        }
        if !members.iter().any(|m| m.name == self.me) {
            tracing::warn!(
                "this node's name {:?} is not an etcd member name ({}): every member must be healthy around an etcd restart; set [coordination] member_name",
                self.me,
                names(&members)
            );
        }
        let conn = Conn::new(
            rules::lock_urls(&self.me, &members, &endpoints),
            tls.clone(),
        );
        Joined::Cluster(Box::new(Cluster {
            conn,
            files,
            tls,
            members,
        }))
    }

    /// The member list, asked until `gate_timeout_secs` while the cluster elects a leader.
    pub(super) async fn member_list(
        &self,
        url: &String,
        tls: &TlsOptions,
    ) -> Result<Vec<Member>, String> {
        let start = Instant::now();
        loop {
            let listed = match members::connect(std::slice::from_ref(url), tls.clone()).await {
                Ok(mut c) => members::list(&mut c).await,
                Err(e) => Err(e),
            };
            match listed {
                Ok(m) => return Ok(m),
                Err(e) if !members::unreachable(&e) => return Err(members::describe(&e)),
                Err(e) if start.elapsed() >= self.conf.gate_timeout => {
                    return Err(members::describe(&e));
                }
                Err(_) if self.stop.requested() => return Err(STOPPING.into()),
                Err(_) => pause(&self.stop).await,
            }
        }
    }

    pub(super) async fn lock(
        &mut self,
        conn: Conn,
        files: &Files,
        tls: TlsOptions,
        members: Vec<Member>,
    ) -> State {
        let prefix = self.conf.lock_prefix.clone();
        status(&format!("waiting for the restart lock {prefix}"));
        let waiting = |holder: &str| {
            tracing::info!(
                holder,
                "waiting for the restart lock {prefix} (held by {holder})"
            );
            status(&format!("waiting for the restart lock (held by {holder})"));
        };
        let (ttl, timeout) = (self.conf.lease_ttl, self.conf.lock_timeout);
        let stop = self.stop.clone();
        match lock::acquire(conn, &prefix, &self.me, ttl, timeout, stop, waiting).await {
            Ok(held) => {
                tracing::info!(
                    holder = self.me,
                    "holding the restart lock {prefix} (waited {:.1}s; lease TTL {}s)",
                    held.waited.as_secs_f64(),
                    ttl.as_secs()
                );
                status("holding the restart lock; restarting one component at a time");
                self.lock_wait = Some(held.waited);
                State::Locked(Box::new(Locked { held, tls, members }))
            }
            Err(NotHad::Timeout { holder }) => {
                let by = holder
                    .map(|h| format!("held by {h}"))
                    .unwrap_or_else(|| "held".into());
                refused(format!(
                    "the restart lock {prefix} was {by} for all of lock_timeout_secs ({}s); the new files stay installed and the next pass restarts",
                    timeout.as_secs()
                ))
            }
            Err(NotHad::Stopping) => refused(STOPPING.into()),
            Err(NotHad::Refused(why)) => refused(format!(
                "cannot take the restart lock as etcd user {}: {why}; grant it read and write on the key prefix {prefix}/",
                files.user()
            )),
        }
    }

    /// No client identity: coordination cannot be had. Under `auto`, that is fine only on a
    /// node that runs no etcd: none in its configuration and nothing listening at the
    /// endpoints. Anywhere else restarts are held, since controllers might restart together.
    pub(super) async fn no_identity(&self, node: Option<&NodeEtcd>, endpoints: &[String]) -> State {
        let looked = identity::looked_for();
        let fix = "set [coordination] cert, key and ca to a client certificate the members accept (or enabled = false to restart without coordination)";
        if self.conf.enabled == Enabled::On {
            return refused(format!(
                "coordination is on but there is no etcd client certificate on this node (looked for {looked}); {fix}"
            ));
        }
        if let Some(n) = node {
            return refused(format!(
                "this node runs an etcd member ({}) but has no etcd client certificate to coordinate with (looked for {looked}); restarts are held so that controllers do not restart together; {fix}",
                n.describe_sources()
            ));
        }
        let (refusing, listening) = probe(endpoints).await;
        if listening.is_empty() {
            return ungated(format!(
                "no etcd configuration on this node and nothing listens at {}: this node runs no etcd member",
                refusing.join(", ")
            ));
        }
        refused(format!(
            "something listens at {} but this node has no etcd client certificate to coordinate with (looked for {looked}); restarts are held so that controllers do not restart together; {fix}",
            listening.join(", ")
        ))
    }
}

/// The rule for a cluster nobody answers: it is down only when every member this node knows
/// of (its endpoints, and the peers its etcd configuration names) refuses connections; then
/// there is no quorum to protect and waiting would leave it down, so restart without the
/// lock. Anything else (TLS or certificate refused, no answer in time, a member listening
/// that does not answer this client) may be a cluster that is up: hold the restarts.
pub(super) async fn nobody_answers(
    node: Option<&NodeEtcd>,
    endpoints: &[String],
    errors: &[String],
    files: &Files,
) -> State {
    let mut targets = endpoints.to_vec();
    for p in node.iter().flat_map(|n| &n.peers) {
        targets.push(p.peer_url.clone());
    }
    let (refusing, listening) = probe(&targets).await;
    let why = errors.join("; ");
    if listening.is_empty() {
        tracing::warn!(
            "no etcd member answers ({why}) and every one refuses connections ({}): the cluster is down, so there is no quorum to protect; restarting without the lock",
            refusing.join(", ")
        );
        return State::Ungated;
    }
    // What the members that listen say of this node's client certificate, in TLS terms.
    let mut tls = Vec::new();
    for url in endpoints.iter().filter(|u| listening.contains(u)) {
        let Some((host, port)) = node::host_port(url) else {
            continue;
        };
        let limit = Duration::from_secs(3);
        if let Some(e) =
            endpoints::client_refused(&format!("{host}:{port}"), &files.cert, &files.key, limit)
                .await
        {
            tls.push(format!(
                "{url} refuses {} in the TLS handshake: {e}",
                files.cert.display()
            ));
        }
    }
    let tls = match tls.is_empty() {
        true => String::new(),
        false => format!("; {}", tls.join("; ")),
    };
    refused(format!(
        "no etcd member answers this node's client ({why}{tls}), but {} accept connections: the cluster may be up and refusing this client (its certificate or CA), or too slow to answer; restarts are held so that controllers do not restart together",
        listening.join(", ")
    ))
}

/// The URLs of `targets` that refuse TCP connections, and those that accept them (or do not
/// answer at all within the probe's timeout: a member that may be up).
pub(super) async fn probe(targets: &[String]) -> (Vec<String>, Vec<String>) {
    let mut refusing = Vec::new();
    let mut listening = Vec::new();
    for t in targets {
        match members::refuses(t).await {
            true => refusing.push(t.clone()),
            false => listening.push(t.clone()),
        }
    }
    (refusing, listening)
}

/// Restarts as without coordination, for this reason (logged once per pass).
pub(super) fn ungated(why: String) -> State {
    tracing::info!("not coordinated with other controllers: {why}");
    State::Ungated
}
