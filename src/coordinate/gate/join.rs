//! How a pass joins the coordination, once, at its first restart: the node's own etcd
//! settings and the members last listed say where to look; the cluster's live member list
//! decides (coordinated, not coordinated, or held); then the lock.

use super::*;

impl EtcdGate {
    /// Decides how this pass restarts, once: finds the cluster, reads its members, takes
    /// the lock. The decision and why go to the journal.
    pub(super) async fn start(&mut self) -> State {
        match self.join().await {
            Joined::Alone(why) => ungated(why),
            Joined::Held(why) => refused(Hold::Refused(why)),
            Joined::Down(down) if down.own => {
                tracing::warn!(
                    "{down}; starting it without the lock, then joining the others before anything else restarts"
                );
                State::OwnStart
            }
            Joined::Down(down) => unlocked(&down),
            Joined::Cluster(c) => self.lock(c.conn, &c.files, c.tls, c.members).await,
        }
    }

    /// After this node's member's start without the lock: the others joined as at the
    /// start, asked again until `gate_timeout_secs` while the member comes up and the
    /// cluster finds its quorum when it `started` (asked once when it did not: nothing
    /// changed that waiting would see); never a second start without the lock.
    pub(super) async fn rejoin(&mut self, started: bool) -> State {
        let start = Instant::now();
        loop {
            let why = match self.join().await {
                Joined::Alone(why) => return ungated(why),
                Joined::Cluster(c) => {
                    tracing::info!(
                        "joining the other controllers after this node's etcd member's start"
                    );
                    return self.lock(c.conn, &c.files, c.tls, c.members).await;
                }
                Joined::Down(down) if !down.own => return unlocked(&down),
                Joined::Down(down) => down.seen,
                Joined::Held(why) => why,
            };
            if self.stop.requested() {
                return refused(Hold::Stopping(self.stop.reason()));
            }
            if !started {
                return refused(Hold::Refused(why));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return refused(Hold::Refused(format!(
                    "this node's etcd member was started without the lock, as it was down and no member answered, and the others could not be joined within gate_timeout_secs ({}s): {why}",
                    self.conf.gate_timeout.as_secs()
                )));
            }
            pause(&self.stop).await;
        }
    }

    /// Whether this node is one of several controllers it can reach through etcd. Only the
    /// cluster's member list says so: `--initial-cluster` names the members a node knew when
    /// it was bootstrapped (kubeadm's first controller names itself alone, and every node
    /// does after `kubeadm upgrade`), so the node's settings and the members last listed
    /// only say where to ask.
    pub(super) async fn join(&mut self) -> Joined {
        if self.conf.enabled == Enabled::Off {
            return Joined::Alone("[coordination] enabled = false".into());
        }
        let node = node::read(&self.root, &self.etcd);
        if let Some(n) = &node
            && self.conf.member_name.is_none()
            && let Some(name) = &n.name
        {
            self.me = name.clone();
        }
        let roster = self.roster.as_deref().and_then(roster::read);
        let endpoints = rules::endpoints(
            &self.conf,
            node.as_ref(),
            roster.as_ref(),
            &self.etcd_servers,
            &self.me,
        );
        let found = identity::find_with(&self.conf, &self.root, &self.etcd_clients, &self.fresh);
        let Some(files) = found else {
            return self.no_identity(node.as_ref(), &endpoints).await;
        };
        let tls = match files.tls_with(&self.fresh) {
            Ok(t) => t,
            Err(e) => {
                return Joined::Held(format!("cannot read the etcd client identity: {e:#}"));
            }
        };
        let eps = endpoints.join(", ");
        let known = Known {
            node: node.as_ref(),
            roster: roster.as_ref(),
            endpoints: &endpoints,
        };
        let answering = match members::first_answering(&endpoints, &tls).await {
            Ok(url) => url.clone(),
            Err(errors) => return self.nobody_answers(&known, &errors, &files).await,
        };
        let members = match self.member_list(&answering, &tls).await {
            Ok(m) => m,
            Err(why) => {
                let user = files.user();
                return Joined::Held(format!(
                    "etcd at {eps} answers but gives no member list to user {user}: {why}"
                ));
            }
        };
        if self.write_roster
            && let Some(dir) = &self.roster
        {
            roster::write(dir, &members, &answering);
        }
        // Other API servers named: they take turns through the lock all the same, with
        // etcd's one member keeping it (StarlingX duplex: one member, two API servers).
        let apiservers = self.configured_apiservers();
        if members.len() <= 1 && self.conf.enabled == Enabled::Auto && apiservers.is_empty() {
            return Joined::Alone(format!(
                "the cluster's member list (asked at {answering}) has a single member, {}",
                names(&members)
            ));
        }
        if let Some(own) = self.leaderless(&known, &members, &tls).await {
            return own;
        }
        if !members.iter().any(|m| m.name == self.me) {
            let said = format!(
                "this node's name {:?} is not an etcd member name ({}): an etcd restart here waits until one member more than a quorum is healthy, not knowing which member is this node's; set [coordination] member_name",
                self.me,
                names(&members)
            );
            // Said once while it stays so: every pass and every look at the other
            // controllers joins the cluster again.
            if rules::first_time(&said) {
                tracing::warn!("{said}");
            }
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
            from: answering,
        }))
    }

    /// The member list, asked until `gate_timeout_secs` while the cluster elects a leader.
    pub(super) async fn member_list(
        &self,
        url: &String,
        tls: &TlsOptions,
    ) -> anyhow::Result<Vec<Member>> {
        let start = Instant::now();
        loop {
            let listed = match members::connect(std::slice::from_ref(url), tls.clone()).await {
                Ok(mut c) => members::list(&mut c).await,
                Err(e) => Err(e),
            };
            match listed {
                Ok(m) => return Ok(m),
                Err(e) if !members::unreachable(&e) => anyhow::bail!(members::describe(&e)),
                Err(e) if start.elapsed() >= self.conf.gate_timeout => {
                    anyhow::bail!(members::describe(&e));
                }
                Err(_) if self.stop.requested() => anyhow::bail!(self.stop.reason()),
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
        let live = crate::live::waiting(format!("the restart lock {prefix}"));
        let waiting = |holder: &str| {
            tracing::info!(
                holder,
                "waiting for the restart lock {prefix} (held by {holder})"
            );
            status(&format!("waiting for the restart lock (held by {holder})"));
            live.say(format!("the restart lock {prefix} (held by {holder})"));
        };
        let (ttl, timeout) = (self.conf.lease_ttl, self.conf.lock_timeout);
        let terms = lock::Terms {
            ttl,
            timeout,
            grant: self.conf.gate_timeout,
        };
        let stop = self.stop.clone();
        let own = conn.clone();
        match lock::acquire(conn, &prefix, &self.me, terms, stop, waiting).await {
            Ok(held) => {
                tracing::info!(
                    holder = self.me,
                    "holding the restart lock {prefix} (waited {:.1}s; lease TTL {}s)",
                    held.waited.as_secs_f64(),
                    ttl.as_secs()
                );
                status("holding the restart lock; restarting one component at a time");
                self.lock_wait = Some(held.waited);
                State::Locked(Box::new(Locked {
                    held,
                    conn: own,
                    files: files.clone(),
                    tls,
                    members,
                }))
            }
            Err(NotHad::Timeout { holder }) => {
                let by = holder
                    .map(|h| format!("held by {h}"))
                    .unwrap_or_else(|| "held".into());
                refused(Hold::Refused(format!(
                    "the restart lock {prefix} was {by} for all of lock_timeout_secs ({}s); the new files stay installed and the next pass restarts",
                    timeout.as_secs()
                )))
            }
            Err(NotHad::NoLease { waited }) => refused(Hold::Refused(format!(
                "etcd granted no lease to queue for the restart lock {prefix} in {:.0}s (gate_timeout_secs): its members answer but none grants one, as when they have no leader (a majority of them down); the new files stay installed and the next pass restarts",
                waited.as_secs_f64()
            ))),
            Err(NotHad::Stopping) => refused(Hold::Stopping(self.stop.reason())),
            Err(NotHad::Refused(why)) => refused(Hold::Refused(format!(
                "cannot take the restart lock as etcd user {}: {why}; grant it read and write on the key prefixes {prefix}/, {prefix}.ca-renewals/, {prefix}.nodes/ and {prefix}.refused/ (one prefix grant on {prefix} covers them all)",
                files.user()
            ))),
        }
    }

    /// No client identity: coordination cannot be had. Under `auto`, that is fine only on a
    /// node that runs no etcd: none in its configuration, no etcd restart owed, and nothing
    /// listening at the endpoints. Anywhere else restarts are held, since controllers might
    /// restart together.
    pub(super) async fn no_identity(
        &self,
        node: Option<&NodeEtcd>,
        endpoints: &[String],
    ) -> Joined {
        let looked = identity::looked_for(&self.etcd_clients);
        let fix = "set [coordination] cert, key and ca to a client certificate the members accept (or enabled = false to restart without coordination)";
        if self.conf.enabled == Enabled::On {
            return Joined::Held(format!(
                "coordination is on but there is no etcd client certificate on this node; {fix} (looked for {looked})"
            ));
        }
        if let Some(n) = node {
            return Joined::Held(format!(
                "this node runs an etcd member ({}) but has no etcd client certificate to coordinate with; restarts are held so that controllers do not restart together; {fix} (looked for {looked})",
                n.describe_sources()
            ));
        }
        if let Some(target) = &self.owed_etcd {
            return Joined::Held(format!(
                "this pass owes a restart of {target}, so this node runs an etcd member, but neither its settings nor an etcd client certificate were found; restarts are held so that controllers do not restart together; {fix} (looked in {} for the settings, for {looked})",
                node::looked_in(self.conf.manifests.as_deref(), &self.etcd)
            ));
        }
        let (refusing, listening) = probe(endpoints).await;
        if listening.is_empty() {
            return Joined::Alone(format!(
                "no etcd configuration on this node and nothing listens at {}: this node runs no etcd member",
                refusing.join(", ")
            ));
        }
        Joined::Held(format!(
            "something listens at {} but this node has no etcd client certificate to coordinate with; restarts are held so that controllers do not restart together; {fix} (looked for {looked})",
            listening.join(", ")
        ))
    }

    /// The rule for a cluster nobody answers: it is down only when etcd's member list on
    /// record names two or more members and every URL this node knows of (its endpoints,
    /// the peers its etcd settings name, the members last listed) refuses connections; then
    /// there is no quorum to protect and waiting would leave it down, so restart without the
    /// lock. Loopback, one configured endpoint or `--initial-cluster` never say so: they
    /// name what this node knew, not the cluster (external etcd leaves nothing on loopback;
    /// `kubeadm upgrade` leaves each node naming itself alone). This node's own member down
    /// while the pass owes it a restart lets that start go ahead alone ([`State::OwnStart`]).
    /// Anything else (TLS or certificate refused, no answer in time, a member listening that
    /// does not answer this client, no member list on record) may be a cluster that is up:
    /// hold the restarts.
    pub(super) async fn nobody_answers(
        &self,
        known: &Known<'_>,
        errors: &[String],
        files: &Files,
    ) -> Joined {
        let mut targets = known.endpoints.to_vec();
        let peers = known
            .node
            .iter()
            .flat_map(|n| n.peers.iter().map(|p| p.peer_url.clone()));
        let listed = known.roster.iter().flat_map(|r| r.peer_urls());
        for url in peers.chain(listed) {
            if !targets.contains(&url) {
                targets.push(url);
            }
        }
        let (refusing, listening, blocked) = probe_all(&targets).await;
        let why = errors.join("; ");
        if listening.is_empty() {
            // The members' URLs known from somewhere: the node's settings, a member list on
            // record, or `endpoints` an operator set.
            let told = self.conf.endpoints != Coordination::default().endpoints;
            let roster = known.roster.filter(|r| !r.members.is_empty());
            if let Some(r) = roster
                && r.members.len() >= 2
            {
                return Joined::Down(Down {
                    seen: format!(
                        "no etcd member answers ({why}) and every one refuses connections ({}), the {} members of etcd's member list (read {}) among them",
                        refusing.join(", "),
                        r.members.len(),
                        r.when()
                    ),
                    so: "the cluster is down, so there is no quorum to protect",
                    own: false,
                });
            }
            if let Some(r) = roster
                && self.conf.enabled == Enabled::Auto
            {
                return Joined::Alone(format!(
                    "etcd's member list (read {}) names a single member, {}, and nothing listens at {}",
                    r.when(),
                    names(&r.members),
                    refusing.join(", ")
                ));
            }
            if let Some(target) = &self.owed_etcd
                && known.node.is_none()
                && !told
            {
                return Joined::Held(format!(
                    "this pass owes a restart of {target}, so this node runs an etcd member, but no member answers ({why}), its settings were not found (looked in {}) and etcd's member list was never recorded here: the other members may be up where this node cannot see them; restarts are held; set [coordination] endpoints to the members' client URLs",
                    node::looked_in(self.conf.manifests.as_deref(), &self.etcd)
                ));
            }
        }
        // This node's own member down (nothing listens at its client URLs) while the pass
        // owes it a restart: starting what is down takes nothing down, and a cluster whose
        // members all wait for a quorum to answer never gets one otherwise. Only that start:
        // the rest of the pass joins the others after it.
        let mine = own_urls(known, &self.me);
        if self.owed_etcd.is_some() && !mine.is_empty() && refusing_all(&mine).await {
            return Joined::Down(Down {
                seen: format!(
                    "no etcd member answers ({why}) and this node's own member is down (nothing listens at {})",
                    mine.join(", ")
                ),
                so: "starting it takes nothing down",
                own: true,
            });
        }
        if listening.is_empty() {
            return Joined::Held(format!(
                "no etcd member answers ({why}) and every URL this node knows refuses connections ({}), but etcd's member list was never recorded here: a cluster that is down cannot be told from members out of this node's sight, so this waits until etcd answers (each pass and the daemon's watch of the other controllers record the list)",
                refusing.join(", ")
            ));
        }
        // What the members that listen say of this node's client certificate, in TLS terms.
        let mut tls = Vec::new();
        for url in known.endpoints.iter().filter(|u| listening.contains(u)) {
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
        let blocked = blocked_clause(&blocked);
        if !blocked.is_empty() {
            return Joined::Held(format!(
                "no etcd member answers this node's client ({why}){blocked}; restarts are held so that controllers do not restart together"
            ));
        }
        Joined::Held(format!(
            "no etcd member answers this node's client ({why}{tls}), but {} accept connections: the cluster may be up and refusing this client (its certificate or CA), or too slow to answer; restarts are held so that controllers do not restart together",
            listening.join(", ")
        ))
    }

    /// A cluster that answers without a leader (a majority of its members down) while this
    /// node's own member is down and the pass owes it a restart: no lease is granted
    /// without a leader, so the lock is never had, and a member that hit its start limit
    /// stays down for good unless it is started here. Its start goes ahead without the lock
    /// ([`State::OwnStart`]: a unit only when it failed, a static pod only when the container
    /// runtime reports no container of it that runs) when a member that answers lists it as a voter of the cluster its write-ahead
    /// log is of; otherwise the restarts are held. `None`: not this case.
    async fn leaderless(
        &self,
        known: &Known<'_>,
        members: &[Member],
        tls: &TlsOptions,
    ) -> Option<Joined> {
        self.owed_etcd.as_ref()?;
        let mine = own_urls(known, &self.me);
        if mine.is_empty() || !refusing_all(&mine).await {
            return None;
        }
        let others: Vec<&Member> = members.iter().filter(|m| m.name != self.me).collect();
        let answered = without_leader(&others, tls).await?;
        let (by, status) = answered.first()?;
        let by = by.label();
        let seen = format!(
            "{}, and this node's own member is down (nothing listens at {})",
            no_leader(members, answered.len()),
            mine.join(", ")
        );
        let not = "so it is not started without the lock, and no lock can be had without a leader";
        if !members.iter().any(|m| m.name == self.me) {
            return Some(Joined::Held(format!(
                "{seen}, but {by}'s member list names no voting member {:?} (this node's member name): {not}",
                self.me
            )));
        }
        let dir = known.node.and_then(|n| n.data_dir.as_deref());
        let Some(dir) = dir else {
            return Some(Joined::Held(format!(
                "{seen}, but its data directory (--data-dir) was not found in its settings, so whether it is of {by}'s cluster cannot be told: {not}"
            )));
        };
        let under = self.root.join(dir.strip_prefix("/").unwrap_or(dir));
        let logged = match wal::logged(&under) {
            Ok(l) => l,
            Err(e) => {
                return Some(Joined::Held(format!(
                    "{seen}, but whether it is of {by}'s cluster cannot be told: {e:#}; {not}"
                )));
            }
        };
        if logged.cluster_id != status.cluster_id {
            return Some(Joined::Held(format!(
                "{seen}, but its write-ahead log in {} is of cluster {:x}, not {by}'s {:x} (a snapshot restored since?): {not}",
                dir.display(),
                logged.cluster_id,
                status.cluster_id
            )));
        }
        Some(Joined::Down(Down {
            seen: format!(
                "{seen}; {by}'s member list names it a voter of the same cluster ({:x}, as its write-ahead log in {} says)",
                logged.cluster_id,
                dir.display()
            ),
            so: "starting it takes nothing down, and the quorum needs it",
            own: true,
        }))
    }
}

/// What the members answer when none of them has a leader: `None` when one has (or asked
/// so far, one does), else each that answered, with its status (none may have).
pub(super) async fn without_leader<'m>(
    members: &[&'m Member],
    tls: &TlsOptions,
) -> Option<Vec<(&'m Member, members::Status)>> {
    let mut answered = Vec::new();
    for m in members {
        if let Ok(s) = members::status(m, tls.clone()).await {
            if s.leader != 0 {
                return None;
            }
            answered.push((*m, s));
        }
    }
    Some(answered)
}

/// `etcd has no leader: of its N voting members (…), n answer(s) without one`: said of
/// `members` of which `answered` answer, none with a leader.
pub(super) fn no_leader(members: &[Member], answered: usize) -> String {
    format!(
        "etcd has no leader: of its {} voting members ({}), {answered} answer{} without one",
        members.len(),
        names(members),
        if answered == 1 { "s" } else { "" }
    )
}

/// Where a node looks for its cluster when no member answers.
pub(super) struct Known<'a> {
    pub node: Option<&'a NodeEtcd>,
    pub roster: Option<&'a Roster>,
    pub endpoints: &'a [String],
}

/// This node's member's client URLs: as its settings advertise them, else as the member
/// list on record has them.
fn own_urls(known: &Known<'_>, me: &str) -> Vec<String> {
    match known
        .node
        .map(|n| n.client_urls.clone())
        .filter(|u| !u.is_empty())
    {
        Some(urls) => urls,
        None => known
            .roster
            .and_then(|r| r.members.iter().find(|m| m.name == me))
            .map(|m| m.client_urls.clone())
            .unwrap_or_default(),
    }
}

/// Whether every one of `urls` refuses connections.
pub(super) async fn refusing_all(urls: &[String]) -> bool {
    let (_, listening) = probe(urls).await;
    listening.is_empty()
}

/// The URLs of `targets` that refuse TCP connections, and those that accept them (or do not
/// answer at all within the probe's timeout, or that this host does not let it connect to:
/// a member that may be up).
pub(super) async fn probe(targets: &[String]) -> (Vec<String>, Vec<String>) {
    let (refusing, listening, _) = probe_all(targets).await;
    (refusing, listening)
}

/// [`probe`], and of the listening, those this host does not let it connect to, each as
/// `URL (why)`.
async fn probe_all(targets: &[String]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut refusing, mut listening, mut blocked) = (Vec::new(), Vec::new(), Vec::new());
    for t in targets {
        match members::knock(t).await {
            members::Knock::Refused => refusing.push(t.clone()),
            members::Knock::Blocked(e) => {
                blocked.push(format!("{t} ({e})"));
                listening.push(t.clone());
            }
            members::Knock::Other => listening.push(t.clone()),
        }
    }
    (refusing, listening, blocked)
}

/// The URLs this host does not let it connect to, in a clause for a held reason (empty
/// when none): said apart, since the fix is on this host, not in etcd.
fn blocked_clause(blocked: &[String]) -> String {
    match blocked.is_empty() {
        true => String::new(),
        false => format!(
            "; this host does not let certrenewd connect to {}: a firewall rule, or the certrenewd unit's IPAddressDeny= (the shipped unit allows loopback and private addresses only; add the members' with `systemctl edit certrenewd`, IPAddressAllow=ADDRESS under [Service])",
            blocked.join(", ")
        ),
    }
}

/// Restarts without the lock, the whole cluster being down (said as a warning, once).
fn unlocked(down: &Down) -> State {
    tracing::warn!("{down}; restarting without the lock");
    State::Ungated
}

/// Restarts as without coordination, for this reason (logged once per pass).
pub(super) fn ungated(why: String) -> State {
    tracing::info!("not coordinated with other controllers: {why}");
    State::Ungated
}
