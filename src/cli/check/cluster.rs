//! `check --cluster`: every controller's record as etcd holds it, one section per member of
//! the etcd cluster (the roster), the summary line first. A member without a record runs
//! no certrenewd (or its certrenewd cannot publish); a record older than two of its
//! scheduled passes is stale.

use serde::Serialize;

use crate::cli::text_table::{Table, wrapped};
use crate::coordinate::publish::Cluster;
use crate::coordinate::record::{Drift, Freshness, NodeRecord, drift, freshness};

/// What a member with no record is said to be.
pub const MISSING: &str = "certrenewd not running or not reporting";

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
#[derive(Debug, Serialize, Default, PartialEq, Eq)]
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
    /// `reporting`, `stale` or `missing`.
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
        let mut c = Controller {
            node: name.clone(),
            member_id: member_id.clone(),
            state: "missing",
            age_secs: None,
            drifted: false,
            note: None,
            record: None,
        };
        match record_of(&name) {
            None => c.note = Some(MISSING.into()),
            Some((_, Err(why))) => c.note = Some(format!("its record cannot be read: {why}")),
            Some((_, Ok(r))) => {
                let age = now.saturating_sub(r.written_at);
                c.age_secs = Some(age.max(0));
                c.state = match freshness(r.written_at, r.interval_secs, now) {
                    Freshness::Fresh => "reporting",
                    Freshness::Stale { .. } => "stale",
                };
                if member_id.is_none() {
                    c.note = Some("not a member of the etcd cluster".into());
                }
                c.record = Some(r.clone());
            }
        }
        controllers.push(c);
    }
    let records: Vec<&NodeRecord> = controllers
        .iter()
        .filter_map(|c| c.record.as_ref())
        .collect();
    let drift = drift(&records);
    for c in &mut controllers {
        c.drifted = drift.iter().any(|d| d.odd_ones().contains(&c.node));
    }
    let count = |s: &str| controllers.iter().filter(|c| c.state == s).count();
    let summary = Counts {
        controllers: controllers.len(),
        reporting: count("reporting"),
        stale: count("stale"),
        missing: count("missing"),
        drifted: controllers.iter().filter(|c| c.drifted).count(),
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
        let certs_ok = self.controllers.iter().all(|c| {
            c.record
                .as_ref()
                .is_none_or(|r| r.certificates.iter().all(|x| x.status == "ok"))
        });
        s.reporting == s.controllers && s.drifted == 0 && certs_ok
    }
}

/// An age in words: `42s`, `5m`, `3h`, `2d 4h`.
pub fn age(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn when(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|t| {
            let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
            t.format(&f).ok()
        })
        .unwrap_or_else(|| t.to_string())
}

/// The table output within `page` columns, the summary line first.
pub fn render(v: &ClusterView, page: usize) -> String {
    let s = &v.summary;
    let mut out = Vec::new();
    out.extend(wrapped(
        &format!(
            "{} controllers: {} reporting, {} stale, {} missing, {} drifted (seen from {})",
            s.controllers, s.reporting, s.stale, s.missing, s.drifted, v.this_node
        ),
        "",
        page,
    ));
    for d in &v.drift {
        let groups: Vec<String> = d
            .groups
            .iter()
            .map(|(sum, nodes)| format!("{} on {}", &sum[..sum.len().min(12)], nodes.join(", ")))
            .collect();
        out.extend(wrapped(
            &format!(
                "drift: {} differs between controllers: {}",
                d.path,
                groups.join("; ")
            ),
            "",
            page,
        ));
    }
    for c in &v.controllers {
        out.push(String::new());
        let id = c
            .member_id
            .as_deref()
            .map(|i| format!(" (member {i})"))
            .unwrap_or_default();
        let mut head = format!("{}{id}: {}", c.node, c.state);
        if let Some(a) = c.age_secs {
            head += &format!(", record written {} ago", age(a));
        }
        if let Some(note) = &c.note {
            head += &format!(": {note}");
        }
        if c.drifted {
            head += ", drifted";
        }
        out.extend(wrapped(&head, "", page));
        let Some(r) = &c.record else {
            continue;
        };
        let mut facts = vec![format!("certrenewd {}", r.version)];
        match &r.last_pass {
            Some(p) => facts.push(format!(
                "last pass {} at {} ({} watched, {} due, {} renewed)",
                p.result,
                when(p.at),
                p.watched,
                p.due,
                p.renewed
            )),
            None => facts.push("no pass since it started".into()),
        }
        if let Some(p) = r.last_pass.as_ref().and_then(|p| p.failing_since) {
            facts.push(format!("failing since {}", when(p)));
        }
        if let Some(n) = r.next_pass {
            facts.push(format!("next pass {}", when(n)));
        }
        facts.push(format!("{} alarms active", r.alarms.len()));
        if !r.restarts_owed.is_empty() {
            facts.push(format!("restarts owed: {}", r.restarts_owed.join(", ")));
        }
        if let Some(t) = &r.truncated {
            facts.push(t.clone());
        }
        out.extend(wrapped(&facts.join("; "), "  ", page));
        let mut t = Table::new(&["CERTIFICATE", "ROLE", "NOT AFTER", "STATUS"], 0).elastic(0, 24);
        for x in &r.certificates {
            t.row(vec![
                x.path.clone(),
                x.role.clone(),
                x.not_after.clone(),
                x.status.clone(),
            ]);
        }
        if !t.is_empty() {
            let table = t.render(page);
            out.extend(table.lines().map(|l| format!("  {l}")));
        }
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinate::members::Member;
    use crate::coordinate::record::{CertEntry, Digest, LastPass, SCHEMA};

    fn member(id: u64, name: &str) -> Member {
        Member {
            id,
            name: name.into(),
            client_urls: vec![],
            peer_urls: vec![],
        }
    }

    fn rec(node: &str, written_at: i64, ca: &str) -> NodeRecord {
        NodeRecord {
            schema: SCHEMA,
            node: node.into(),
            version: "1.4.0".into(),
            written_at,
            interval_secs: 86_400,
            certificates: vec![CertEntry {
                path:
                    "/etc/kubernetes/pki/apiserver-etcd-client-with-a-long-name-for-the-width.crt"
                        .into(),
                role: "leaf".into(),
                not_after: "2027-11-27T21:51:08Z".into(),
                status: "due".into(),
            }],
            shared: vec![Digest {
                path: "/etc/kubernetes/pki/ca.crt".into(),
                what: "certificate".into(),
                sha256: ca.into(),
            }],
            last_pass: Some(LastPass {
                at: written_at,
                result: "ok".into(),
                failing_since: None,
                watched: 1,
                due: 1,
                renewed: 0,
            }),
            next_pass: Some(written_at + 86_400),
            ..NodeRecord::default()
        }
    }

    #[test]
    fn every_member_gets_a_section_the_summary_first_within_120_columns() {
        let now = 1_795_817_468;
        let cluster = Cluster {
            me: "cp1".into(),
            members: vec![
                member(0xa1, "cp1"),
                member(0xb2, "cp2"),
                member(0xc3, "cp3"),
            ],
            records: vec![
                ("cp1".into(), Ok(rec("cp1", now - 60, "aaaa"))),
                ("cp3".into(), Ok(rec("cp3", now - 3 * 86_400, "bbbb"))),
            ],
        };
        let v = view(&cluster, now);
        assert_eq!(
            v.summary,
            Counts {
                controllers: 3,
                reporting: 1,
                stale: 1,
                missing: 1,
                drifted: 1,
            }
        );
        assert!(!v.all_well());
        let text = render(&v, 120);
        print!("{text}");
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "3 controllers: 1 reporting, 1 stale, 1 missing, 1 drifted (seen from cp1)"
        );
        assert!(
            text.contains(&format!("cp2 (member b2): missing: {MISSING}")),
            "{text}"
        );
        assert!(
            text.contains("cp3 (member c3): stale, record written 3d 0h ago"),
            "{text}"
        );
        assert!(
            text.contains("drift: /etc/kubernetes/pki/ca.crt differs"),
            "{text}"
        );
        for l in text.lines() {
            assert!(
                l.chars().count() <= 120,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["controllers"][1]["state"], "missing");
        assert_eq!(json["controllers"][0]["record"]["node"], "cp1");
        assert_eq!(json["summary"]["missing"], 1);
        // A clock set back a day on the reader: nobody stale.
        let v = view(&cluster, now - 86_400);
        assert_eq!(v.summary.stale, 0);
    }
}
