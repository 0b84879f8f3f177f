//! This node's record for the other controllers (`crate::coordinate::record`): made from
//! the last scan and the daemon's state, published at start and after every pass by a task
//! of its own that a pass never waits on (bounded by [`PUBLISH_FOR`], a failure logged as a
//! warning), and taken away when the daemon stops.

use std::sync::Arc;
use std::time::Duration;

use crate::components::NodeReading;
use crate::config::Settings;
use crate::coordinate::publish::Publisher;
use crate::coordinate::record::{self, CaEntry, CertEntry, Digest, LastPass, NodeRecord};
use crate::inventory::{Inventory, KeyLink};
use crate::plan::Plan;

/// How long one publication may take before it is given up (the next pass tries again).
pub(super) const PUBLISH_FOR: Duration = Duration::from_secs(5);

/// What the scan says of the node, kept between passes.
#[derive(Debug, Clone, Default)]
pub(super) struct NodePart {
    certificates: Vec<CertEntry>,
    cas: Vec<CaEntry>,
    shared: Vec<Digest>,
}

/// The node's part of the record, from a scan and its plan.
pub(super) fn node_part(inv: &Inventory, plan: &Plan) -> NodePart {
    let rfc = crate::timefmt::rfc3339;
    let mut part = NodePart::default();
    for item in &plan.items {
        let c = &inv.certs[item.cert];
        part.certificates.push(CertEntry {
            path: c.path.display().to_string(),
            role: if c.facts.is_ca { "ca" } else { "leaf" }.into(),
            not_after: rfc(c.facts.not_after),
            status: item.status.as_str().into(),
        });
    }
    for c in inv.certs.iter().filter(|c| c.facts.is_ca) {
        let path = c.path.display().to_string();
        let sha256 = record::sha256(&c.facts.der);
        part.cas.push(CaEntry {
            path: path.clone(),
            subject: c.facts.subject.clone(),
            sha256: sha256.clone(),
            ski: c.facts.ski().map(record::hex),
        });
        // A copy inside a kubeconfig is that file's business, not a CA every node holds.
        if c.kubeconfig.is_some() {
            continue;
        }
        part.shared.push(Digest {
            path,
            what: "certificate".into(),
            sha256,
        });
        if let KeyLink::Matched(k) = c.key
            && let Some(key) = inv.keys.get(k)
            && let Some(public) = &key.info.public
        {
            part.shared.push(Digest {
                path: key.path.display().to_string(),
                what: "public key".into(),
                sha256: record::sha256(&public.raw),
            });
        }
    }
    // The service-account key pair: every API server must verify the others' tokens.
    for root in &inv.roots {
        let sa = root.join("sa.pub");
        if let Ok(bytes) = crate::fsutil::read(&sa) {
            part.shared.push(Digest {
                path: sa.display().to_string(),
                what: "public key".into(),
                sha256: record::sha256(&bytes),
            });
        }
    }
    part.shared.sort_by(|a, b| a.path.cmp(&b.path));
    part.shared.dedup_by(|a, b| a.path == b.path);
    part
}

/// What the daemon knows besides the scan.
pub(super) struct Daemon<'a> {
    pub settings: &'a Settings,
    pub interval: Duration,
    pub next_pass: Option<i64>,
    pub last_pass: Option<LastPass>,
}

/// The record as of now.
pub(super) fn record(part: &NodePart, d: &Daemon<'_>) -> NodeRecord {
    let state_dir = &d.settings.state_dir;
    let alarms = crate::alarms::AlarmStore::all(state_dir)
        .unwrap_or_default()
        .iter()
        .map(|a| format!("{} {}", a.kind.id(), a.entity))
        .collect();
    let owed = crate::restart::owed::load(state_dir).unwrap_or_default();
    // Those `renew --no-restart` left to the operator, as recorded (the record is looked at
    // again, and cleared of what started since, at each pass).
    let by_hand = crate::restart::by_hand::load(state_dir).unwrap_or_default();
    let by_hand =
        (by_hand.units.into_iter().chain(by_hand.pods)).map(|b| format!("{} (by hand)", b.name));
    NodeRecord {
        schema: record::SCHEMA,
        node: String::new(),
        member_id: None,
        version: env!("CARGO_PKG_VERSION").into(),
        written_at: time::OffsetDateTime::now_utc().unix_timestamp(),
        interval_secs: d.interval.as_secs(),
        certificates: part.certificates.clone(),
        cas: part.cas.clone(),
        shared: part.shared.clone(),
        alarms,
        last_pass: d.last_pass.clone(),
        next_pass: d.next_pass,
        restarts_owed: (owed.units.into_iter().chain(owed.pods))
            .chain(by_hand)
            .collect(),
        // Filled in by the publisher from the node's reading, as it fills in the name.
        apiservers: Vec::new(),
        truncated: None,
        unleased: false,
    }
}

/// Since when this node's passes have failed without one succeeding, after a pass that
/// ended at `now` (`ok`: it succeeded). Kept in `<state_dir>/failing_since`, so that a
/// daemon restarted (or a node rebooted) amid a run of failures does not start the count
/// again, and 500.240 on the others still comes a day after the first failure. Written
/// when a run starts, removed by the first success; unwritable, the time stays in memory
/// for this run (`earlier`).
pub(super) fn failing_since(
    state_dir: &std::path::Path,
    ok: bool,
    now: i64,
    earlier: Option<i64>,
) -> Option<i64> {
    let file = state_dir.join("failing_since");
    if ok {
        if let Err(e) = crate::fsutil::remove_if_exists(&file) {
            tracing::warn!("{e:#}");
        }
        return None;
    }
    let kept = crate::fsutil::read_to_string(&file)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok());
    if let Some(since) = kept {
        return Some(since);
    }
    let since = earlier.unwrap_or(now);
    let meta = crate::fsutil::FileMeta::own(0o600);
    if let Err(e) = crate::fsutil::replace(&file, format!("{since}\n").as_bytes(), &meta) {
        tracing::warn!("keeping when the passes started failing: {e:#}");
    }
    Some(since)
}

/// The publisher of this node's record, shared with the task that publishes.
pub(super) type Shared = Arc<tokio::sync::Mutex<Publisher>>;

/// A publisher for `settings`.
pub(super) fn publisher(settings: &Settings) -> Shared {
    let p = Publisher::new(&settings.coordination, &settings.state_dir);
    Arc::new(tokio::sync::Mutex::new(p))
}

/// Puts this node's last record again when it is not in etcd (never put: etcd out of reach,
/// or this node's client certificate refused, when it was written; or its lease lost
/// since), within [`PUBLISH_FOR`]: the others would otherwise see this node as not
/// reporting until its next pass ends, which may be long when it waits for the restart
/// lock. One being published now is left to finish. A failure is quiet (debug): the pass's
/// own publication says it.
pub(super) async fn publish_owed(p: &Shared) {
    let Ok(mut p) = p.clone().try_lock_owned() else {
        return;
    };
    if !p.owed() {
        return;
    }
    match tokio::time::timeout(PUBLISH_FOR, p.publish_owed()).await {
        Ok(Ok(Some(key))) => tracing::info!(
            "published this node's record at {key}: it was not in etcd (its lease lost, or \
             etcd out of reach when it was written)"
        ),
        r => tracing::debug!("this node's record is not published yet: {r:?}"),
    }
}

/// Whether the record's lease is to be watched between passes: coordination is not off and
/// the node was not found alone (not yet known counts as watched). Nothing wakes the daemon
/// for it on a node that is not coordinated.
pub(super) fn watching(p: &Shared, settings: &Settings) -> bool {
    settings.coordination.enabled != crate::config::Enabled::Off
        && p.try_lock().map_or(true, |p| !p.alone())
}

/// Publishes `rec` in a task of its own, reaching etcd as `node` (the last pass's reading)
/// says, within [`PUBLISH_FOR`] once the publisher is free: a publication under way (the
/// watch putting the last record again, itself bounded by [`PUBLISH_FOR`]) is waited for,
/// never the reason this one is dropped, or the others would read the record from before
/// the pass until the next one.
pub(super) fn publish(p: &Shared, rec: NodeRecord, coordination_off: bool, node: NodeReading) {
    if coordination_off {
        return;
    }
    let p = p.clone();
    tokio::spawn(async move {
        let Ok(mut p) = tokio::time::timeout(PUBLISH_FOR, p.lock_owned()).await else {
            tracing::warn!(
                "this node's record for the other controllers is not published: the one before it was still being published after {}s; the next pass tries again",
                PUBLISH_FOR.as_secs()
            );
            return;
        };
        p.knows(&node);
        match tokio::time::timeout(PUBLISH_FOR, p.publish(rec)).await {
            Ok(Ok(Some(key))) => tracing::debug!("published this node's record at {key}"),
            Ok(Ok(None)) => {}
            Ok(Err(why)) => tracing::warn!(
                "this node's record for the other controllers is not published: {why}"
            ),
            Err(_) => tracing::warn!(
                "this node's record for the other controllers is not published: etcd did not answer within {}s; the next pass tries again",
                PUBLISH_FOR.as_secs()
            ),
        }
    });
}

/// Takes the record away (its lease revoked), once a publication under way has ended,
/// waiting for it at most `wait`: the daemon stops (a second or two: unrevoked, the lease
/// expires by itself), or a reload replaces the publisher (then a put still under way on
/// the old lease would land after the new publisher's, and the record vanish with the old
/// lease, one TTL later).
pub(super) async fn retire(p: &Shared, wait: Duration) {
    let Ok(mut p) = tokio::time::timeout(wait, p.clone().lock_owned()).await else {
        tracing::warn!(
            "this node's record is still being published after {}s: left to its lease, which ends by itself",
            wait.as_secs()
        );
        return;
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), p.retire()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Policy, plan};
    use crate::served::Served;

    /// openssl's SHA-256 fingerprint of a certificate file, as lowercase hex.
    fn fingerprint(path: &std::path::Path) -> String {
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(path)
            .output()
            .expect("openssl");
        let text = String::from_utf8_lossy(&out.stdout);
        let hex = text.trim().split('=').nth(1).expect("a fingerprint");
        hex.replace(':', "").to_lowercase()
    }

    /// A publisher that reaches no etcd (coordination off): what it was given is kept.
    fn offline_publisher(dir: &std::path::Path) -> crate::coordinate::publish::Publisher {
        let conf = crate::config::Coordination {
            enabled: crate::config::Enabled::Off,
            ..crate::config::Coordination::default()
        };
        crate::coordinate::publish::Publisher::under(&conf, dir, dir)
    }

    /// A pass's record given while the watch holds the publisher (putting the last record
    /// again) is published once the watch is done, not dropped.
    #[tokio::test]
    async fn a_record_given_while_the_publisher_is_busy_is_published_after() {
        let dir = tempfile::tempdir().unwrap();
        let shared: Shared = Arc::new(tokio::sync::Mutex::new(offline_publisher(dir.path())));
        let busy = shared.clone().lock_owned().await;
        let rec = NodeRecord {
            version: "after the pass".into(),
            ..NodeRecord::default()
        };
        publish(&shared, rec, false, NodeReading::default());
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(busy);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let given = shared.lock().await.last().map(|r| r.version.clone());
            if given.as_deref() == Some("after the pass") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "dropped: {given:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Retiring waits for a publication under way instead of leaving its record behind.
    #[tokio::test]
    async fn retiring_waits_for_a_publication_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let mut publisher = offline_publisher(dir.path());
        let _ = publisher.publish(NodeRecord::default()).await;
        assert!(publisher.last().is_some());
        let shared: Shared = Arc::new(tokio::sync::Mutex::new(publisher));
        let busy = shared.clone().lock_owned().await;
        let retiring = tokio::spawn({
            let shared = shared.clone();
            async move { retire(&shared, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(busy);
        retiring.await.unwrap();
        assert!(shared.lock().await.last().is_none(), "not retired");
    }

    #[test]
    fn failing_since_outlives_a_restart_and_ends_with_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(failing_since(d, true, 100, None), None);
        assert_eq!(failing_since(d, false, 200, None), Some(200));
        assert_eq!(failing_since(d, false, 300, Some(200)), Some(200));
        // A daemon started again knows nothing in memory: the file says since when.
        assert_eq!(failing_since(d, false, 400, None), Some(200));
        assert_eq!(failing_since(d, true, 500, Some(200)), None);
        assert!(!d.join("failing_since").exists());
        assert_eq!(failing_since(d, false, 600, None), Some(600));
    }

    #[test]
    fn the_nodes_part_lists_each_certificate_and_digests_what_controllers_share() {
        let dir = tempfile::tempdir().unwrap();
        let inv = crate::test_pki::tree(dir.path());
        std::fs::write(dir.path().join("sa.pub"), "-----BEGIN PUBLIC KEY-----\n").unwrap();
        drop(inv);
        let inv = Inventory::scan(&[dir.path().to_path_buf()]);
        let now = time::macros::datetime!(2029-12-20 0:00 UTC);
        let policy = Policy {
            renew_before_days: 15,
            ca_warning_days: 180,
            ..Policy::default()
        };
        let p = plan(&inv, Served::new(), &policy, now);
        let part = node_part(&inv, &p);
        let path = |n: &str| dir.path().join(n).display().to_string();
        let status: Vec<(String, &str, &str)> = part
            .certificates
            .iter()
            .map(|c| (c.path.clone(), c.role.as_str(), c.status.as_str()))
            .collect();
        assert!(status.contains(&(path("ca.crt"), "ca", "ok")), "{status:?}");
        assert!(
            status.contains(&(path("a.crt"), "leaf", "due")),
            "{status:?}"
        );
        assert_eq!(part.certificates[0].not_after.len(), 20, "RFC 3339 UTC");
        let ca_sum = fingerprint(&dir.path().join("ca.crt"));
        assert_eq!(part.cas.len(), 1);
        assert_eq!(part.cas[0].sha256, ca_sum);
        assert_eq!(part.cas[0].ski.as_ref().map(String::len), Some(40));
        // The CA, its key's public half (never the key), and sa.pub, in path order.
        let shared: Vec<(String, &str)> = part
            .shared
            .iter()
            .map(|d| (d.path.clone(), d.what.as_str()))
            .collect();
        assert_eq!(
            shared,
            [
                (path("ca.crt"), "certificate"),
                (path("ca.key"), "public key"),
                (path("sa.pub"), "public key"),
            ]
        );
        assert_eq!(part.shared[0].sha256, ca_sum);
        let ca = inv.certs.iter().find(|c| c.facts.is_ca).unwrap();
        assert_eq!(
            part.shared[1].sha256,
            record::sha256(&ca.facts.public_key.raw),
            "the public half of ca.key is the CA's public key"
        );
    }
}
