use super::rules;
use crate::config::Coordination;
use crate::coordinate::members::Member;
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
    };
    let default = Coordination::default();
    let mut expected = node.client_urls.clone();
    expected.extend(default.endpoints.iter().cloned());
    assert_eq!(
        rules::endpoints(&default, Some(&node), None, "c1"),
        expected
    );
    assert_eq!(
        rules::endpoints(&default, None, None, "c1"),
        default.endpoints
    );
    let set = Coordination {
        endpoints: vec!["https://etcd.example:2379".into()],
        ..Coordination::default()
    };
    assert_eq!(
        rules::endpoints(&set, Some(&node), None, "c1"),
        set.endpoints
    );
}
