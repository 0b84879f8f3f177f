//! The cluster as the node records show it, at one moment: one controller per etcd member
//! (the roster), then records of no member; each reporting, stale or missing, and drifted
//! when it holds a shared file the others hold otherwise. `check --cluster` prints it, and
//! the daemon raises its alarms on the other controllers' behalf and writes its gauge from it.

use serde::Serialize;

use super::publish::Cluster;
use super::record::{Drift, Freshness, NodeRecord, drift, freshness};

/// What a member with no record is said to be.
pub const MISSING: &str = "certrenewd not running or not reporting";

/// What a member configured as external is said to be.
pub const EXTERNAL: &str =
    "an external etcd member ([coordination] external_members): no controller, not counted";

/// What a record on no lease is said to be: certrenewd's own are always on one.
pub const UNLEASED: &str = "its record is on no lease, so it outlives whatever wrote it and cannot say that certrenewd runs there";

/// `check --cluster --output json`, as docs/interface.md promises.
#[derive(Debug, Serialize)]
pub struct ClusterView {
    /// The node `check` ran on (its etcd member name).
    pub this_node: String,
    /// When it was looked at, seconds since the Unix epoch (this node's clock).
    pub now: i64,
    pub summary: Counts,
    /// Files that differ between controllers.
    pub drift: Vec<Drift>,
    /// One per etcd member, in the member list's order, then records of no member.
    pub controllers: Vec<Controller>,
}

/// How many controllers are in each state.
#[derive(Debug, Clone, Serialize, Default, PartialEq, Eq)]
pub struct Counts {
    pub controllers: usize,
    pub reporting: usize,
    pub stale: usize,
    pub missing: usize,
    pub drifted: usize,
}

/// One controller.
#[derive(Debug, Serialize)]
pub struct Controller {
    pub node: String,
    /// The etcd member ID in hex; `None` for a record of no member.
    pub member_id: Option<String>,
    /// A member configured as no controller (`[coordination] external_members`).
    pub external: bool,
    /// `reporting`, `stale` or `missing`; `external` for an external member without a record.
    pub state: &'static str,
    /// Seconds since its record was written (stale and reporting).
    pub age_secs: Option<i64>,
    /// Whether it holds a file the others hold otherwise.
    pub drifted: bool,
    /// What is wrong, in words (a missing record, an unreadable one, not a member).
    pub note: Option<String>,
    /// Its record, as published.
    pub record: Option<NodeRecord>,
}

impl Controller {
    /// Whether it counts (in the summary, drift, alarms and `--fail-due`): an etcd member
    /// that is not configured as external. A key under the records' prefix is anyone's to
    /// put; only the roster says who is a controller.
    pub fn counted(&self) -> bool {
        self.member_id.is_some() && !self.external
    }
}

/// The view of `cluster` at `now`.
pub fn view(cluster: &Cluster, now: i64) -> ClusterView {
    let mut controllers = Vec::new();
    let record_of = |name: &str| cluster.records.iter().find(|(n, _)| n == name);
    let mut names: Vec<(String, Option<String>)> = cluster
        .members
        .iter()
        .map(|m| (m.name.clone(), Some(format!("{:x}", m.id))))
        .collect();
    for (n, _) in &cluster.records {
        if !names.iter().any(|(m, _)| m == n) {
            names.push((n.clone(), None));
        }
    }
    for (name, member_id) in names {
        let external = member_id.is_some() && cluster.external.contains(&name);
        let mut c = Controller {
            node: name.clone(),
            member_id: member_id.clone(),
            external,
            state: "missing",
            age_secs: None,
            drifted: false,
            note: None,
            record: None,
        };
        match record_of(&name) {
            None if external => (c.state, c.note) = ("external", Some(EXTERNAL.into())),
            None => c.note = Some(MISSING.into()),
            Some((_, Err(why))) => c.note = Some(format!("its record cannot be read: {why}")),
            Some((_, Ok(r))) => {
                // Written in the future (a clock ahead there, or behind here): written now.
                let written = r.written_at.min(now);
                c.age_secs = Some(now.saturating_sub(written));
                c.state = match freshness(written, r.interval_secs, now) {
                    _ if r.unleased => "stale",
                    Freshness::Fresh => "reporting",
                    Freshness::Stale { .. } => "stale",
                };
                c.note = match (member_id.is_none(), r.unleased) {
                    (true, _) => Some("not a member of the etcd cluster: not counted".into()),
                    _ if external => Some(EXTERNAL.into()),
                    (false, true) => Some(UNLEASED.into()),
                    (false, false) => None,
                };
                c.record = Some(r.clone());
            }
        }
        controllers.push(c);
    }
    let records: Vec<&NodeRecord> = (controllers.iter())
        .filter(|c| c.counted())
        .filter_map(|c| c.record.as_ref())
        .collect();
    let mut drift = drift(&records);
    for d in &mut drift {
        d.mark_agreed(&cluster.agreed, &records);
    }
    for c in controllers.iter_mut().filter(|c| c.counted()) {
        c.drifted = drift.iter().any(|d| d.drifted(&c.node));
    }
    let members = || controllers.iter().filter(|c| c.counted());
    let count = |s: &str| members().filter(|c| c.state == s).count();
    let summary = Counts {
        controllers: members().count(),
        reporting: count("reporting"),
        stale: count("stale"),
        missing: count("missing"),
        drifted: members().filter(|c| c.drifted).count(),
    };
    ClusterView {
        this_node: cluster.me.clone(),
        now,
        summary,
        drift,
        controllers,
    }
}

impl ClusterView {
    /// Whether everything is as it should be: every controller reporting, nothing drifted,
    /// no certificate anywhere other than ok.
    pub fn all_well(&self) -> bool {
        let s = &self.summary;
        let mut members = self.controllers.iter().filter(|c| c.counted());
        let certs_ok = members.all(|c| {
            c.record
                .as_ref()
                .is_none_or(|r| r.certificates.iter().all(|x| x.status == "ok"))
        });
        s.reporting == s.controllers && s.drifted == 0 && certs_ok
    }
}
