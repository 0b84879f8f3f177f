use super::{ca_reissue, rules};
use crate::config::Coordination;
use crate::coordinate::members::{Member, Status, Unanswered};
use crate::coordinate::node::NodeEtcd;

fn member(name: &str, url: &str) -> Member {
    Member {
        id: 0,
        name: name.into(),
        client_urls: vec![url.into()],
        peer_urls: Vec::new(),
    }
}

fn three() -> Vec<Member> {
    vec![
        member("c1", "https://10.0.0.1:2379"),
        member("c2", "https://10.0.0.2:2379"),
        member("c3", "https://10.0.0.3:2379"),
    ]
}

fn picked(all: &[Member], pick: impl Fn(&Member) -> bool) -> Vec<&str> {
    all.iter()
        .filter(|m| pick(m))
        .map(|m| m.name.as_str())
        .collect()
}

#[test]
fn etcd_restarts_after_the_others_are_healthy_and_is_waited_for_itself() {
    let all = three();
    // Before c2's etcd restarts: c1 and c3 must be healthy; after: c2 itself.
    assert_eq!(picked(&all, |m| rules::other("c2", m, &all)), ["c1", "c3"]);
    assert_eq!(picked(&all, |m| rules::mine("c2", m, &all)), ["c2"]);
    // A node whose name is no member's cannot tell its own: every member, both times.
    assert_eq!(
        picked(&all, |m| rules::other("ctl-2", m, &all)),
        ["c1", "c2", "c3"]
    );
    assert_eq!(
        picked(&all, |m| rules::mine("ctl-2", m, &all)),
        ["c1", "c2", "c3"]
    );
}

#[test]
fn the_lock_is_kept_through_the_other_members_first() {
    let all = three();
    let eps = [
        "https://127.0.0.1:2379".to_owned(),
        "https://10.0.0.2:2379".to_owned(),
    ];
    assert_eq!(
        rules::lock_urls("c2", &all, &eps),
        [
            "https://10.0.0.1:2379",
            "https://10.0.0.3:2379",
            "https://10.0.0.2:2379",
            "https://127.0.0.1:2379",
        ]
    );
}

#[test]
fn the_nodes_own_client_urls_come_first_only_when_endpoints_are_left_at_the_default() {
    let node = NodeEtcd {
        sources: Vec::new(),
        name: Some("c1".into()),
        peers: Vec::new(),
        client_urls: vec!["https://10.0.0.1:2379".into()],
        data_dir: None,
    };
    let default = Coordination::default();
    let mut expected = node.client_urls.clone();
    expected.extend(default.endpoints.iter().cloned());
    assert_eq!(
        rules::endpoints(&default, Some(&node), None, &[], "c1"),
        expected
    );
    assert_eq!(
        rules::endpoints(&default, None, None, &[], "c1"),
        default.endpoints
    );
    let set = Coordination {
        endpoints: vec!["https://etcd.example:2379".into()],
        ..Coordination::default()
    };
    assert_eq!(
        rules::endpoints(&set, Some(&node), None, &[], "c1"),
        set.endpoints
    );
    // External etcd: nothing of it in the node's settings, the API server's servers last.
    let servers = ["https://127.0.0.11:2379".to_string()];
    assert_eq!(
        rules::endpoints(&default, None, None, &servers, "c1"),
        ["https://127.0.0.1:2379", "https://127.0.0.11:2379"]
    );
}

/// Every member named, each answering healthy but those in `down`.
fn answers(names: &[&str], down: &[&str]) -> Vec<(Member, Result<Status, Unanswered>)> {
    names
        .iter()
        .map(|n| {
            let status = match down.contains(n) {
                true => Err(Unanswered::Failed("connection refused".to_string())),
                false => Ok(Status {
                    member_id: 0,
                    cluster_id: 0,
                    leader: 1,
                    raft_index: 10,
                    errors: Vec::new(),
                    learner: false,
                }),
            };
            (member(n, &format!("https://{n}:2379")), status)
        })
        .collect()
}

#[test]
fn etcd_restarts_when_the_members_that_stay_healthy_are_a_quorum_of_all_voters() {
    let five = ["c1", "c2", "c3", "c4", "c5"];
    // Five members, one dead: the other three healthy ones are a quorum of five.
    assert_eq!(
        rules::etcd_restart("c1", &answers(&five, &["c5"]), false),
        Ok(())
    );
    // Two dead: two would stay, three are needed; the wait names a dead one and the count.
    let held = rules::etcd_restart("c1", &answers(&five, &["c4", "c5"]), false).unwrap_err();
    assert!(held.wait);
    assert_eq!(held.member.map(|m| m.name), Some("c4".into()));
    assert_eq!(
        held.why,
        "etcd member c4 does not answer: connection refused (2 of 5 voting members would stay healthy while this node's member restarts, and 3 are a quorum)"
    );
    // This node's own member dead does not count against it: it is the one restarting.
    assert_eq!(
        rules::etcd_restart("c5", &answers(&five, &["c5"]), false),
        Ok(())
    );
    // Three members: every other one must be healthy, as before.
    let three = ["c1", "c2", "c3"];
    assert_eq!(
        rules::etcd_restart("c1", &answers(&three, &[]), false),
        Ok(())
    );
    assert!(rules::etcd_restart("c1", &answers(&three, &["c3"]), false).is_err());
    // A node that is no member's cannot tell which goes down: one healthy more is needed.
    assert!(rules::etcd_restart("ctl", &answers(&three, &[]), false).is_ok());
    assert!(rules::etcd_restart("ctl", &answers(&three, &["c3"]), false).is_err());
}

#[test]
fn a_member_added_and_never_started_counts_as_a_voter_that_is_not_healthy() {
    let mut all = answers(&["c1", "c2", "c3"], &[]);
    let added = Member {
        id: 0x8e9e05c52164694d,
        name: String::new(),
        client_urls: Vec::new(),
        peer_urls: vec!["https://10.0.0.4:2380".into()],
    };
    all.push((added, Err(Unanswered::NoClientUrl)));
    // Four voters, quorum three: c1 restarting leaves c2 and c3, two.
    let held = rules::etcd_restart("c1", &all, false).unwrap_err();
    assert!(held.wait);
    assert!(
        held.why.starts_with(
            "etcd member 8e9e05c52164694d (added, never started; peer URLs https://10.0.0.4:2380) does not answer"
        ),
        "{}",
        held.why
    );
    assert!(held.why.contains("2 of 4 voting members"), "{}", held.why);
}

#[test]
fn a_cluster_of_two_members_restarts_etcd_only_when_configured_and_one_of_one_always_may() {
    let held = rules::etcd_restart("c1", &answers(&["c1", "c2"], &[]), false).unwrap_err();
    assert!(!held.wait, "waiting cannot help");
    assert!(
        held.why
            .starts_with("the cluster has two voting members (c1, c2)"),
        "{}",
        held.why
    );
    assert_eq!(
        rules::etcd_restart("c1", &answers(&["c1"], &[]), false),
        Ok(())
    );
    // Configured to: with the other member healthy only.
    let two = ["c1", "c2"];
    assert_eq!(rules::etcd_restart("c1", &answers(&two, &[]), true), Ok(()));
    assert_eq!(
        rules::etcd_restart("c1", &answers(&two, &["c1"]), true),
        Ok(())
    );
    let held = rules::etcd_restart("c1", &answers(&two, &["c2"]), true).unwrap_err();
    assert!(held.wait, "the other member may come back");
    assert_eq!(held.member.map(|m| m.name), Some("c2".into()));
}

#[test]
fn a_warning_every_look_would_repeat_is_said_once_and_again_when_it_changes() {
    let a = "this node's name \"x\" is not an etcd member name (c1, c2, c3): test a";
    let b = "this node's name \"x\" is not an etcd member name (c1, c2): test b";
    assert!(rules::first_time(a));
    assert!(!rules::first_time(a));
    assert!(rules::first_time(b));
    assert!(rules::first_time(a));
}

#[test]
fn an_agreed_reissue_waits_for_every_member_but_those_that_run_no_certrenewd() {
    let all = three();
    let adopted = vec!["c1".to_string()];
    assert_eq!(
        ca_reissue::still_to_adopt(&all, &adopted, &[]),
        ["c2", "c3"]
    );
    // c3 is an external etcd member: it never adopts, and the key must not wait for it.
    let external = vec!["c3".to_string()];
    assert_eq!(
        ca_reissue::still_to_adopt(&all, &adopted, &external),
        ["c2"]
    );
    let adopted = vec!["c1".to_string(), "c2".to_string()];
    assert!(ca_reissue::still_to_adopt(&all, &adopted, &external).is_empty());
}
