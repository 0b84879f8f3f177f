//! The alarms every daemon raises on the other controllers' behalf, from the cluster as
//! their records in etcd show it ([`crate::coordinate::view`]): a controller gone quiet
//! (500.230), one whose passes have failed for more than a day (500.240), and a file that
//! must be alike on every controller and is not (500.250). Pure: the daemon reads the
//! cluster, and applies what this derives to its own store (`AlarmStore::peers`).

use std::path::PathBuf;

use super::{AlarmKind, AlarmSpec, host_entity};
use crate::coordinate::view::ClusterView;

/// How long another controller's passes may fail before 500.240 is raised.
pub const FAILING_FOR_SECS: i64 = 86_400;

/// The entity of a file's drift: `file=<path>` (alike on every controller that raises it).
pub fn file_entity(path: &str) -> String {
    format!("file={path}")
}

/// The alarms `view` calls for at `now` (seconds since the Unix epoch, this node's clock).
/// Quiet and failing are raised for the other members of the etcd cluster only: this node
/// answers for itself with its own alarms, and a record of no member is nobody's roster.
pub fn desired(view: &ClusterView, now: i64) -> Vec<AlarmSpec> {
    let mut out = Vec::new();
    for c in &view.controllers {
        if c.node == view.this_node || !c.counted() {
            continue;
        }
        let name = match c.node.is_empty() {
            // A member added but not started yet has no name: its ID stands for it.
            true => format!("member-{}", c.member_id.as_deref().unwrap_or_default()),
            false => c.node.clone(),
        };
        let entity = host_entity(&name);
        let quiet = match (&c.record, c.state) {
            (None, _) => Some(format!(
                "etcd member {name} has no record: {}",
                c.note
                    .as_deref()
                    .unwrap_or(crate::coordinate::view::MISSING)
            )),
            (Some(r), "stale") if r.unleased => Some(format!(
                "etcd member {name}: {}",
                crate::coordinate::view::UNLEASED
            )),
            // The time it was written, not its age: the reason stays the same tick to tick.
            (Some(r), "stale") => Some(format!(
                "the record of {name} was last written at {}, more than two of its \
                 scheduled passes (every {}s) ago: its certrenewd runs but finishes no pass",
                rfc3339(r.written_at),
                r.interval_secs
            )),
            _ => None,
        };
        if let Some(reason) = quiet {
            out.push(spec(
                AlarmKind::ControllerQuiet,
                entity.clone(),
                reason,
                vec![],
            ));
        }
        let failing = c.record.as_ref().and_then(|r| r.last_pass.as_ref());
        if let Some(p) = failing
            && p.result == "failed"
            && let Some(since) = p.failing_since
            && now.saturating_sub(since) > FAILING_FOR_SECS
        {
            let reason = format!(
                "the passes of {name} have failed since {} (`certrenewd alarms` there says why)",
                rfc3339(since)
            );
            out.push(spec(AlarmKind::ControllerFailing, entity, reason, vec![]));
        }
    }
    // The slowest controller adopts an agreed re-issue at its next pass.
    let interval = (view.controllers.iter())
        .filter(|c| c.counted())
        .filter_map(|c| c.record.as_ref().map(|r| r.interval_secs))
        .max()
        .unwrap_or(0);
    for d in &view.drift {
        if d.rolling(now, interval) {
            continue;
        }
        let agreed = match d.agreed_since {
            Some(since) => format!(
                "; one of them is the re-issue agreed for the cluster since {}, not adopted everywhere within two scheduled passes (every {interval}s)",
                rfc3339(since)
            ),
            None => String::new(),
        };
        let reason = format!(
            "{} differs between controllers: {} ({}){agreed}",
            d.path,
            d.groups_text(),
            d.who_differs()
        );
        let subjects = vec![PathBuf::from(&d.path)];
        out.push(spec(
            AlarmKind::Drift,
            file_entity(&d.path),
            reason,
            subjects,
        ));
    }
    out
}

fn spec(kind: AlarmKind, entity: String, reason: String, subjects: Vec<PathBuf>) -> AlarmSpec {
    AlarmSpec {
        kind,
        entity,
        reasons: vec![reason],
        subjects,
    }
}

/// Unix seconds in RFC 3339; out of range (a corrupt record), the number itself.
fn rfc3339(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .map_or_else(|_| t.to_string(), crate::timefmt::rfc3339)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinate::members::Member;
    use crate::coordinate::publish::Cluster;
    use crate::coordinate::record::{Digest, LastPass, NodeRecord, SCHEMA};
    use crate::coordinate::view::view;

    const NOW: i64 = 1_795_817_468;
    const DAY: i64 = 86_400;

    fn member(id: u64, name: &str) -> Member {
        Member {
            id,
            name: name.into(),
            client_urls: vec![],
            peer_urls: vec![],
        }
    }

    fn rec(node: &str, written_at: i64, ca: &str, failing_since: Option<i64>) -> NodeRecord {
        NodeRecord {
            schema: SCHEMA,
            node: node.into(),
            written_at,
            interval_secs: DAY as u64,
            shared: vec![Digest {
                path: "/etc/kubernetes/pki/ca.crt".into(),
                what: "certificate".into(),
                sha256: ca.into(),
            }],
            last_pass: Some(LastPass {
                at: written_at,
                result: if failing_since.is_some() {
                    "failed"
                } else {
                    "ok"
                }
                .into(),
                failing_since,
                watched: 1,
                ..LastPass::default()
            }),
            ..NodeRecord::default()
        }
    }

    fn cluster(records: Vec<NodeRecord>) -> Cluster {
        Cluster {
            me: "cp1".into(),
            members: vec![
                member(0xa1, "cp1"),
                member(0xb2, "cp2"),
                member(0xc3, "cp3"),
            ],
            records: records
                .into_iter()
                .map(|r| (r.node.clone(), Ok(r)))
                .collect(),
            external: Vec::new(),
            agreed: Vec::new(),
        }
    }

    fn ids(specs: &[AlarmSpec]) -> Vec<(&'static str, &str)> {
        specs
            .iter()
            .map(|s| (s.kind.id(), s.entity.as_str()))
            .collect()
    }

    #[test]
    fn a_quiet_failing_or_drifted_controller_is_alarmed_and_a_well_one_is_not() {
        let well = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp2", NOW - 60, "aaaa", None),
            rec("cp3", NOW - 60, "aaaa", None),
        ]);
        assert_eq!(desired(&view(&well, NOW), NOW), vec![]);

        // cp2 has no record; cp3 fails since two days and holds another CA.
        let ill = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp3", NOW - 60, "bbbb", Some(NOW - 2 * DAY)),
        ]);
        let got = desired(&view(&ill, NOW), NOW);
        assert_eq!(
            ids(&got),
            [
                ("500.230", "host=cp2"),
                ("500.240", "host=cp3"),
                ("500.250", "file=/etc/kubernetes/pki/ca.crt"),
            ]
        );
        assert!(
            got[0].reason().contains("etcd member cp2 has no record"),
            "{got:?}"
        );
        assert!(got[1].reason().contains("failed since"), "{got:?}");
        // The drift names the file and every node by what it holds.
        let drift = got[2].reason();
        assert!(drift.starts_with("/etc/kubernetes/pki/ca.crt differs between controllers"));
        assert!(
            drift.contains("on cp1") && drift.contains("on cp3"),
            "{drift}"
        );
        // One each, cp2 without a record: a tie, so neither is called the odd one.
        assert!(drift.contains("no side is named"), "{drift}");
        assert!(!drift.contains("differing from the most"), "{drift}");
        // With a majority, the odd one is named.
        let odd = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp2", NOW - 60, "aaaa", None),
            rec("cp3", NOW - 60, "bbbb", None),
        ]);
        let got = desired(&view(&odd, NOW), NOW);
        assert!(
            got[0].reason().ends_with("(differing from the most: cp3)"),
            "{got:?}"
        );

        // Failing for less than a day is the controller's own business (its 250.003).
        let young = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp2", NOW - 60, "aaaa", Some(NOW - 3600)),
            rec("cp3", NOW - 60, "aaaa", None),
        ]);
        assert_eq!(desired(&view(&young, NOW), NOW), vec![]);
    }

    /// A CA re-issue agreed for the cluster rolls through the controllers, each adopting it
    /// at its next pass: the drift it makes meanwhile is no alarm for two of the slowest
    /// controller's scheduled passes from the first pass that holds it, and one after.
    #[test]
    fn an_agreed_reissue_rolling_through_is_drift_for_a_bounded_time_only() {
        let mut c = cluster(vec![
            rec("cp1", NOW - 60, "new", None),
            rec("cp2", NOW - 3600, "old", None),
            rec("cp3", NOW - 3600, "old", None),
        ]);
        let raised = desired(&view(&c, NOW), NOW);
        assert_eq!(
            ids(&raised),
            [("500.250", "file=/etc/kubernetes/pki/ca.crt")]
        );
        c.agreed = vec!["new".into()];
        let v = view(&c, NOW);
        assert_eq!(v.drift[0].agreed_since, Some(NOW - 60));
        assert_eq!(desired(&v, NOW), vec![], "rolling through");
        // Two days (each controller passes daily) after cp1 adopted it, cp2 and cp3 still
        // have not (nor written their records since: quiet too): raised, saying so.
        let late = NOW - 60 + 2 * DAY + 1;
        let mut got = desired(&view(&c, late), late);
        got.retain(|s| s.kind == AlarmKind::Drift);
        assert_eq!(ids(&got), [("500.250", "file=/etc/kubernetes/pki/ca.crt")]);
        assert!(
            got[0]
                .reason()
                .contains("one of them is the re-issue agreed for the cluster since"),
            "{got:?}"
        );
        assert!(
            got[0]
                .reason()
                .contains("within two scheduled passes (every 86400s)"),
            "{got:?}"
        );
        // A drift to bytes nobody agreed is raised at once, whatever else was agreed.
        c.agreed = vec!["other".into()];
        assert_eq!(
            ids(&desired(&view(&c, NOW), NOW)),
            [("500.250", "file=/etc/kubernetes/pki/ca.crt")]
        );
    }

    #[test]
    fn this_node_and_records_of_no_member_raise_nothing_of_their_own() {
        // cp1 (this node) has no record yet, and a removed member's record lingers.
        let c = cluster(vec![
            rec("cp2", NOW - 60, "aaaa", None),
            rec("cp3", NOW - 60, "aaaa", None),
            rec("old", NOW - 9 * DAY, "aaaa", Some(NOW - 9 * DAY)),
        ]);
        assert_eq!(desired(&view(&c, NOW), NOW), vec![]);
    }

    /// An etcd host that runs no certrenewd by design (external etcd), configured so: listed
    /// as external, never alarmed as quiet nor counted; an unconfigured one is alarmed.
    #[test]
    fn an_external_member_is_listed_and_never_alarmed() {
        let mut c = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp2", NOW - 60, "aaaa", None),
        ]);
        assert_eq!(
            ids(&desired(&view(&c, NOW), NOW)),
            [("500.230", "host=cp3")]
        );
        c.external = vec!["cp3".into()];
        let v = view(&c, NOW);
        assert_eq!(desired(&v, NOW), vec![]);
        assert_eq!((v.summary.controllers, v.summary.missing), (2, 0));
        assert!(v.all_well());
        let cp3 = v.controllers.iter().find(|c| c.node == "cp3").unwrap();
        assert_eq!(cp3.state, "external");
        assert_eq!(cp3.note.as_deref(), Some(crate::coordinate::view::EXTERNAL));
    }

    /// Only the members count: records of no member are listed, never counted nor drifted
    /// against; a record on no lease is stale whatever its date (it outlives its writer); a
    /// record dated ahead counts as written now, never as older or newer than that.
    #[test]
    fn only_members_count_and_a_record_on_no_lease_is_stale() {
        let mut forged = rec("cp3", NOW + 3650 * DAY, "aaaa", None);
        forged.unleased = true;
        let c = cluster(vec![
            rec("cp1", NOW - 60, "aaaa", None),
            rec("cp2", NOW + 600, "aaaa", None),
            forged,
            rec("ghost-1", NOW - 60, "bbbb", None),
            rec("ghost-2", NOW - 60, "bbbb", None),
        ]);
        let v = view(&c, NOW);
        assert_eq!(
            v.summary,
            crate::coordinate::view::Counts {
                controllers: 3,
                reporting: 2,
                stale: 1,
                missing: 0,
                drifted: 0,
            }
        );
        assert_eq!(v.controllers.len(), 5);
        assert!(v.drift.is_empty(), "{:?}", v.drift);
        let cp2 = v.controllers.iter().find(|c| c.node == "cp2").unwrap();
        assert_eq!((cp2.state, cp2.age_secs), ("reporting", Some(0)));
        let got = desired(&v, NOW);
        assert_eq!(ids(&got), [("500.230", "host=cp3")]);
        assert!(got[0].reason().contains("on no lease"), "{got:?}");
    }

    #[test]
    fn a_stale_record_is_quiet_under_a_clock_that_jumps_and_its_reason_stays_put() {
        let c = cluster(vec![
            rec("cp1", NOW, "aaaa", None),
            rec("cp2", NOW - 60, "aaaa", None),
            rec("cp3", NOW - 60, "aaaa", None),
        ]);
        // This node's clock jumps three days ahead: both others' records are stale now.
        let later = NOW + 3 * DAY;
        let got = desired(&view(&c, later), later);
        assert_eq!(
            ids(&got),
            [("500.230", "host=cp2"), ("500.230", "host=cp3")]
        );
        // An hour on, the reason is the same words: no "reason changed" at every look.
        let on = desired(&view(&c, later + 3600), later + 3600);
        assert_eq!(got, on);
        // Set back a year: nothing is stale, nothing raised.
        let back = NOW - 365 * DAY;
        assert_eq!(desired(&view(&c, back), back), vec![]);
        // Back to now: nothing, as before the jumps.
        assert_eq!(desired(&view(&c, NOW), NOW), vec![]);
    }
}
