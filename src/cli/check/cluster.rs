//! `check --cluster`: every controller's record as etcd holds it, one section per member of
//! the etcd cluster (the roster), the summary line first. A member without a record runs
//! no certrenewd (or its certrenewd cannot publish); a record older than two of its
//! scheduled passes is stale.

use crate::cli::text_table::{Table, wrapped};
pub use crate::coordinate::view::{ClusterView, Controller, Counts, MISSING, view};

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
        .map_or_else(|_| t.to_string(), crate::timefmt::utc_minute)
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
        let line = format!(
            "drift: {} differs between controllers: {}{}",
            d.path,
            d.groups_text(),
            match d.has_majority() {
                true => "",
                false => " (a tie: no side is named)",
            }
        );
        let line = match d.agreed_since {
            Some(since) => format!(
                "{line}; one side is the CA re-issue agreed for the cluster, held since {} and adopted by each controller at its next pass",
                when(since)
            ),
            None => line,
        };
        out.extend(wrapped(&line, "", page));
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
        // Its alarms by ID and entity: what to look at there (`certrenewd alarms` on it says why).
        const SHOWN: usize = 10;
        for a in r.alarms.iter().take(SHOWN) {
            out.extend(wrapped(&format!("alarm {a}"), "  ", page));
        }
        if r.alarms.len() > SHOWN {
            let more = r.alarms.len() - SHOWN;
            out.push(format!(
                "  … {more} more alarms (`certrenewd alarms` on {})",
                c.node
            ));
        }
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
    use crate::coordinate::publish::Cluster;
    use crate::coordinate::record::{CertEntry, Digest, LastPass, NodeRecord, SCHEMA};

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
                ..LastPass::default()
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
                (
                    "cp1".into(),
                    Ok(NodeRecord {
                        alarms: vec!["500.230 host=cp2".into()],
                        ..rec("cp1", now - 60, "aaaa")
                    }),
                ),
                ("cp3".into(), Ok(rec("cp3", now - 3 * 86_400, "bbbb"))),
            ],
            external: Vec::new(),
            agreed: Vec::new(),
        };
        let v = view(&cluster, now);
        assert_eq!(
            v.summary,
            Counts {
                controllers: 3,
                reporting: 1,
                stale: 1,
                missing: 1,
                // One CA each, cp2 without a record: a tie, both drifted, none the odd one.
                drifted: 2,
            }
        );
        assert!(!v.all_well());
        let text = render(&v, 120);
        print!("{text}");
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "3 controllers: 1 reporting, 1 stale, 1 missing, 2 drifted (seen from cp1)"
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
        assert!(text.contains("(a tie: no side is named)"), "{text}");
        assert!(
            text.contains("\n  alarm 500.230 host=cp2\n"),
            "the alarms cp1 raised on cp2's behalf: {text}"
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
