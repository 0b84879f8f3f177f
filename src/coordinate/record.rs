//! The node record: what one controller's certrenewd publishes of its node in etcd, for the
//! other controllers and for `check --cluster` on any of them. It sits at
//! `<lock_prefix>.nodes/<node>` (beside the restart lock, as the CA re-issues do: an etcd
//! RBAC role granted on the key prefix `<lock_prefix>` covers them all), on a lease the
//! daemon keeps alive while it runs, so the record of a daemon that stopped goes away with
//! its lease. Its fields are part of the interface (docs/interface.md, "The node record"),
//! versioned by `schema`.
//!
//! Only plain values here: the record is filled in by the pass and the daemon, which know
//! the inventory, the alarms and the schedule.

use serde::{Deserialize, Serialize};

/// The version of the record's fields: raised when a field changes meaning or goes away
/// (adding one does not).
pub const SCHEMA: u32 = 1;

/// A record is never larger than this: a kubeadm node's is a few KiB, and etcd's values
/// are meant to be small (a node watching thousands of files publishes their summary only).
pub const MAX_BYTES: usize = 64 * 1024;

/// One controller's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NodeRecord {
    /// [`SCHEMA`] of the writer.
    pub schema: u32,
    /// The node's name: its etcd member name (the key's last part).
    pub node: String,
    /// Its etcd member ID in hex, as `etcdctl member list` shows it, when known.
    #[serde(default)]
    pub member_id: Option<String>,
    /// certrenewd's version.
    pub version: String,
    /// When the record was written, in seconds since the Unix epoch (the writer's clock).
    pub written_at: i64,
    /// Seconds between two scheduled passes of the writer: a record older than two of them
    /// is stale ([`freshness`]).
    pub interval_secs: u64,
    /// The certificates watched, in path order.
    #[serde(default)]
    pub certificates: Vec<CertEntry>,
    /// The CA certificates, with their digests.
    #[serde(default)]
    pub cas: Vec<CaEntry>,
    /// What every controller must hold alike (CA certificates, their keys' public halves,
    /// `sa.pub`, the front-proxy CA), by path: what drift is told by.
    #[serde(default)]
    pub shared: Vec<Digest>,
    /// The active alarms, as `<id> <entity>`.
    #[serde(default)]
    pub alarms: Vec<String>,
    /// The last pass, if one ran since the daemon started.
    #[serde(default)]
    pub last_pass: Option<LastPass>,
    /// When the next scheduled pass runs, in seconds since the Unix epoch.
    #[serde(default)]
    pub next_pass: Option<i64>,
    /// Restarts owed (units and static pods): held by coordination or failed.
    #[serde(default)]
    pub restarts_owed: Vec<String>,
    /// Where this node's API servers are reached from the other controllers (`host:port`,
    /// by `--advertise-address` and `--secure-port`): asked for `/readyz` before another
    /// controller's API server restarts, and for nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apiservers: Vec<String>,
    /// Set when the record was cut to fit [`MAX_BYTES`]: what was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
    /// Read from a key on no lease: it outlives whatever wrote it, so it cannot say that a
    /// certrenewd runs (set by the reader, never published).
    #[serde(skip)]
    pub unleased: bool,
}

/// One certificate of the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertEntry {
    pub path: String,
    /// `ca` or `leaf`.
    pub role: String,
    /// RFC 3339 UTC.
    pub not_after: String,
    /// `ok`, `due`, `expired` or `unrenewable`, as `check` says.
    pub status: String,
}

/// One CA of the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaEntry {
    pub path: String,
    pub subject: String,
    /// SHA-256 of the certificate's DER, lowercase hex.
    pub sha256: String,
    /// subjectKeyIdentifier, lowercase hex, when it has one.
    pub ski: Option<String>,
}

/// The digest of something every controller must hold alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// The file.
    pub path: String,
    /// What is digested: `certificate` (its DER) or `public key` (the public half of a key
    /// file, so that no secret is published).
    pub what: String,
    /// SHA-256, lowercase hex.
    pub sha256: String,
}

/// The last pass, as the record says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LastPass {
    /// When it ended, in seconds since the Unix epoch.
    pub at: i64,
    /// `ok`, `failed` or `inhibited`, as the daemon's status line words it.
    pub result: String,
    /// Since when passes have failed without one succeeding in between (seconds since the
    /// Unix epoch); `None` when the last one succeeded.
    #[serde(default)]
    pub failing_since: Option<i64>,
    pub watched: usize,
    pub due: usize,
    pub renewed: usize,
    /// Components whose renewals were installed at their turns (`on_renew = "reload"`):
    /// shown in use, not restarted (a restart avoided).
    #[serde(default)]
    pub reloads_proven: usize,
    /// Of those, shown and refused as their clients would refuse them: put back.
    #[serde(default)]
    pub reloads_refused: usize,
    /// Of those, not shown in use: restarted instead.
    #[serde(default)]
    pub reloads_restarted: usize,
}

/// SHA-256 of `data`, lowercase hex.
pub fn sha256(data: &[u8]) -> String {
    hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data).as_ref())
}

/// Lowercase hex.
pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key prefix of every node's record under the lock's prefix `lock_prefix`.
pub fn prefix(lock_prefix: &str) -> String {
    format!("{}.nodes/", lock_prefix.trim_end_matches('/'))
}

/// The key of `node`'s record.
pub fn key(lock_prefix: &str, node: &str) -> String {
    format!("{}{node}", prefix(lock_prefix))
}

impl NodeRecord {
    /// The record as published: JSON of at most [`MAX_BYTES`]. Too large, it keeps what
    /// drift and the alarms are told by (CAs, digests, alarms, passes) and leaves out
    /// certificates from the end (not due first, so that a due one stays seen), saying so
    /// in `truncated`.
    pub fn encode(&self) -> Vec<u8> {
        let mut rec = self.clone();
        let mut out = serde_json::to_vec(&rec).unwrap_or_default();
        if out.len() <= MAX_BYTES {
            return out;
        }
        let all = rec.certificates.len();
        // The ones that matter first: what is not `ok` stays.
        rec.certificates.sort_by_key(|c| c.status == "ok");
        while out.len() > MAX_BYTES && !rec.certificates.is_empty() {
            let over = out.len() - MAX_BYTES;
            // Drop about as many as the excess takes, at least one.
            let each = (out.len() / rec.certificates.len().max(1)).max(1);
            let drop = over.div_ceil(each).clamp(1, rec.certificates.len());
            rec.certificates.truncate(rec.certificates.len() - drop);
            rec.truncated = Some(format!(
                "{} of {all} certificates left out to keep the record under {} KiB",
                all - rec.certificates.len(),
                MAX_BYTES / 1024
            ));
            out = serde_json::to_vec(&rec).unwrap_or_default();
        }
        if out.len() > MAX_BYTES {
            rec.shared.clear();
            rec.cas.clear();
            rec.alarms.truncate(50);
            rec.truncated = Some(format!(
                "every certificate, CA and digest left out to keep the record under {} KiB",
                MAX_BYTES / 1024
            ));
            out = serde_json::to_vec(&rec).unwrap_or_default();
        }
        out
    }

    /// A record read back; Err says what is wrong with it.
    pub fn decode(bytes: &[u8]) -> Result<NodeRecord, NotARecord> {
        serde_json::from_slice(bytes).map_err(NotARecord::Json)
    }

    /// A record as another controller wrote it at the key of `node`: another controller's
    /// word, so untrusted. Larger than [`MAX_BYTES`] it is not read; every text in it is made
    /// [`visible`] (no control character reaches a terminal, the journal or the hook); its
    /// `node` is the key's, whatever the record says.
    pub fn read_untrusted(node: &str, bytes: &[u8]) -> Result<NodeRecord, NotARecord> {
        if bytes.len() > MAX_BYTES {
            return Err(NotARecord::TooLarge { size: bytes.len() });
        }
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(NotARecord::Json)?;
        visible_strings(&mut value);
        let mut rec: NodeRecord = serde_json::from_value(value).map_err(NotARecord::Json)?;
        rec.node = node.to_owned();
        Ok(rec)
    }
}

/// Why what was read at a node's key is not taken for its record.
#[derive(Debug, thiserror::Error)]
pub enum NotARecord {
    #[error("{size} bytes, over the {} KiB a record may have: not read", MAX_BYTES / 1024)]
    TooLarge { size: usize },
    #[error("not a node record: {0}")]
    Json(serde_json::Error),
}

/// `text` with every control character (and every character that reorders text on a
/// terminal) written as its escape, `\u{1b}` for ESC: what another controller wrote is
/// shown, never acted on. Backslashes are doubled, so an escape shown was not written as one.
pub fn visible(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(|c| hidden(c) || c == '\\') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Every string in `value`, keys of objects left as they are, made [`visible`].
fn visible_strings(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => *s = visible(s),
        Value::Array(items) => items.iter_mut().for_each(visible_strings),
        Value::Object(map) => map.values_mut().for_each(visible_strings),
        _ => {}
    }
}

/// Whether a record is recent enough to speak for its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Written within two scheduled passes of now.
    Fresh,
    /// Older than two scheduled passes: its certrenewd runs (the lease is kept alive) but
    /// has not finished a pass for that long. `age_secs` as this node's clock says.
    Stale { age_secs: i64 },
}

/// Whether a record written at `written_at` by a daemon passing every `interval_secs` is
/// stale at `now` (both clocks in seconds since the Unix epoch, read on different nodes):
/// older than two scheduled passes. A record from the future (the reader's clock behind the
/// writer's, or set back) is fresh: a clock set back never makes a controller look quiet,
/// and a controller that really goes quiet is told by its lease, which does not depend on
/// either clock.
pub fn freshness(written_at: i64, interval_secs: u64, now: i64) -> Freshness {
    let age = now.saturating_sub(written_at);
    let limit = i64::try_from(interval_secs.max(1)).unwrap_or(i64::MAX / 2) * 2;
    match age > limit {
        true => Freshness::Stale { age_secs: age },
        false => Freshness::Fresh,
    }
}

/// A digest as a person compares it: its first 12 characters. Counted in characters, not
/// bytes: a record is another controller's word, and a digest in it may be anything.
fn short(sum: &str) -> String {
    sum.chars().take(12).collect()
}

/// A file that is not alike on every controller that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// The file.
    pub path: String,
    /// The nodes by what they hold: one group per SHA-256, the largest first (the nodes
    /// that differ from the most are in the later groups).
    pub groups: Vec<(String, Vec<String>)>,
    /// When one of the groups holds a CA re-issue agreed for the cluster (its bytes are
    /// under `<lock_prefix>.ca-renewals/`): since when, as the first record holding it says
    /// (its last pass, Unix seconds). It rolls through the controllers, each at its next
    /// pass: drift for a bounded time, not an alarm ([`Drift::rolling`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreed_since: Option<i64>,
}

impl Drift {
    /// The groups in words, the largest first: `3cae64589760 on node1, node2; 6eb733865…`
    /// (each SHA-256 cut to 12 characters).
    pub fn groups_text(&self) -> String {
        let groups: Vec<String> = (self.groups.iter())
            .map(|(sum, nodes)| format!("{} on {}", short(sum), nodes.join(", ")))
            .collect();
        groups.join("; ")
    }

    /// Whether one digest is held by more controllers than any other. A tie (two
    /// controllers, or a third without a record) has no majority: neither side is right
    /// by count, and copying "the most controllers' file" could overwrite the good one.
    pub fn has_majority(&self) -> bool {
        match self.groups.as_slice() {
            [first, second, ..] => first.1.len() > second.1.len(),
            _ => true,
        }
    }

    /// The nodes outside the largest group: those that differ from the most; none when
    /// there is no majority (a tie names no side).
    pub fn odd_ones(&self) -> Vec<String> {
        if !self.has_majority() {
            return Vec::new();
        }
        self.groups
            .iter()
            .skip(1)
            .flat_map(|(_, n)| n.clone())
            .collect()
    }

    /// Whether the drift is an agreed re-issue rolling through the controllers at `now`
    /// (Unix seconds): within two of the slowest controller's scheduled passes
    /// (`interval_secs`) of the first holding it, by when each adopts it at its next pass.
    pub fn rolling(&self, now: i64, interval_secs: u64) -> bool {
        let bound = 2 * i64::try_from(interval_secs).unwrap_or(i64::MAX / 2);
        self.agreed_since
            .is_some_and(|since| now.saturating_sub(since) <= bound)
    }

    /// The agreed re-issue among the groups: marks the drift with since when it rolls
    /// through, from `records`, when one group's digest is among `agreed` (the SHA-256 of
    /// each re-issue agreed for the cluster).
    pub fn mark_agreed(&mut self, agreed: &[String], records: &[&NodeRecord]) {
        let Some((_, holders)) = (self.groups.iter()).find(|(sum, _)| agreed.contains(sum)) else {
            return;
        };
        let since = (records.iter())
            .filter(|r| holders.contains(&r.node))
            .map(|r| r.last_pass.as_ref().map_or(r.written_at, |p| p.at))
            .min();
        self.agreed_since = since;
    }

    /// Whether `node` holds the file in one of the groups.
    pub fn holds(&self, node: &str) -> bool {
        self.groups.iter().any(|(_, n)| n.iter().any(|n| n == node))
    }

    /// Whether `node` is drifted: it differs from the most, or it holds the file where no
    /// digest has a majority (every holder then, none named the odd one).
    pub fn drifted(&self, node: &str) -> bool {
        match self.has_majority() {
            true => self.odd_ones().iter().any(|n| n == node),
            false => self.holds(node),
        }
    }

    /// Who differs, in words: the odd ones, or that no side has a majority.
    pub fn who_differs(&self) -> String {
        match self.has_majority() {
            true => format!("differing from the most: {}", self.odd_ones().join(", ")),
            false => "no digest is held by more controllers than the other: no side is named; \
                      find which file the cluster's certificates verify against before copying either"
                .to_string(),
        }
    }
}

/// What differs between `records`: every shared file ([`NodeRecord::shared`]) held by two
/// or more of them under more than one digest, in path order. A file only one controller
/// holds is nobody's drift (not every node runs every component).
pub fn drift(records: &[&NodeRecord]) -> Vec<Drift> {
    use std::collections::BTreeMap;
    let mut by_path: BTreeMap<&str, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    for r in records {
        for d in &r.shared {
            by_path
                .entry(d.path.as_str())
                .or_default()
                .entry(d.sha256.as_str())
                .or_default()
                .push(r.node.clone());
        }
    }
    by_path
        .into_iter()
        .filter(|(_, sums)| sums.len() > 1)
        .map(|(path, sums)| {
            let mut groups: Vec<(String, Vec<String>)> = sums
                .into_iter()
                .map(|(sum, mut nodes)| {
                    nodes.sort();
                    (sum.to_string(), nodes)
                })
                .collect();
            // The majority first; a tie by the first node's name, so every node says it alike.
            groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.1.cmp(&b.1)));
            Drift {
                path: path.to_string(),
                groups,
                agreed_since: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record is another controller's word: read at the key of etcd-3 it is etcd-3's,
    /// whatever its `node` says; every text in it is shown escaped, backslashes doubled so
    /// that no escape can be forged; one over the bound is not read.
    #[test]
    fn an_untrusted_record_is_named_by_its_key_escaped_and_bounded() {
        let written = serde_json::json!({
            "schema": 1, "node": "etcd-1", "version": "\u{1b}[2J\\u{1b}",
            "written_at": 1, "interval_secs": 60,
            "certificates": [{"path": "/a\nforged line\u{202e}", "role": "leaf",
                "not_after": "x", "status": "ok"}],
            "alarms": ["250.003 host=\u{7}"]
        });
        let bytes = written.to_string().into_bytes();
        let rec = NodeRecord::read_untrusted("etcd-3", &bytes).expect("a record");
        assert_eq!(rec.node, "etcd-3");
        assert_eq!(rec.version, "\\u{1b}[2J\\\\u{1b}");
        assert_eq!(rec.certificates[0].path, "/a\\u{a}forged line\\u{202e}");
        assert_eq!(rec.alarms, ["250.003 host=\\u{7}"]);
        assert!(!rec.unleased);
        let huge = format!(
            "{{\"schema\": 1, \"node\": \"x\", \"version\": \"{}\", \"written_at\": 1, \"interval_secs\": 1}}",
            "a".repeat(MAX_BYTES)
        );
        let why = NodeRecord::read_untrusted("x", huge.as_bytes()).expect_err("too large");
        assert!(matches!(why, NotARecord::TooLarge { .. }), "{why}");
        assert!(why.to_string().contains("over the 64 KiB"), "{why}");
        // Plain text stays as it is.
        assert_eq!(
            visible("/etc/kubernetes/pki/ca.crt"),
            "/etc/kubernetes/pki/ca.crt"
        );
    }

    /// A kubeadm control-plane node's certificates, as its record lists them.
    fn kubeadm() -> NodeRecord {
        let pki = "/etc/kubernetes/pki";
        let mut certificates = Vec::new();
        for name in [
            "ca",
            "apiserver",
            "apiserver-kubelet-client",
            "apiserver-etcd-client",
            "front-proxy-ca",
            "front-proxy-client",
            "etcd/ca",
            "etcd/server",
            "etcd/peer",
            "etcd/healthcheck-client",
        ] {
            certificates.push(CertEntry {
                path: format!("{pki}/{name}.crt"),
                role: if name.ends_with("ca") { "ca" } else { "leaf" }.into(),
                not_after: "2027-11-27T21:51:08Z".into(),
                status: "ok".into(),
            });
        }
        for conf in [
            "admin",
            "super-admin",
            "controller-manager",
            "scheduler",
            "kubelet",
        ] {
            certificates.push(CertEntry {
                path: format!("/etc/kubernetes/{conf}.conf"),
                role: "leaf".into(),
                not_after: "2027-11-27T21:51:08Z".into(),
                status: "due".into(),
            });
        }
        let digest = sha256(b"x");
        let cas = ["ca", "front-proxy-ca", "etcd/ca"].map(|n| CaEntry {
            path: format!("{pki}/{n}.crt"),
            subject: format!("CN={n}"),
            sha256: digest.clone(),
            ski: Some(hex(&[7; 20])),
        });
        let mut shared: Vec<Digest> = cas
            .iter()
            .map(|c| Digest {
                path: c.path.clone(),
                what: "certificate".into(),
                sha256: digest.clone(),
            })
            .collect();
        for k in ["ca.key", "front-proxy-ca.key", "etcd/ca.key", "sa.pub"] {
            shared.push(Digest {
                path: format!("{pki}/{k}"),
                what: "public key".into(),
                sha256: digest.clone(),
            });
        }
        NodeRecord {
            schema: SCHEMA,
            node: "controller-1".into(),
            member_id: Some("8e9e05c52164694d".into()),
            version: "1.4.0".into(),
            written_at: 1_795_817_468,
            interval_secs: 86_400,
            certificates,
            cas: cas.to_vec(),
            shared,
            alarms: vec!["500.100 /etc/kubernetes/admin.conf".into()],
            last_pass: Some(LastPass {
                at: 1_795_817_460,
                result: "ok".into(),
                failing_since: None,
                watched: 15,
                due: 5,
                renewed: 2,
                reloads_proven: 1,
                reloads_refused: 0,
                reloads_restarted: 0,
            }),
            next_pass: Some(1_795_903_868),
            restarts_owed: vec!["kube-apiserver".into()],
            apiservers: vec!["10.0.0.1:6443".into()],
            truncated: None,
            unleased: false,
        }
    }

    #[test]
    fn the_record_reads_back_as_written_under_its_documented_names() {
        let rec = kubeadm();
        let bytes = rec.encode();
        assert_eq!(NodeRecord::decode(&bytes).unwrap(), rec);
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let mut names: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "alarms",
                "apiservers",
                "cas",
                "certificates",
                "interval_secs",
                "last_pass",
                "member_id",
                "next_pass",
                "node",
                "restarts_owed",
                "schema",
                "shared",
                "version",
                "written_at"
            ]
        );
        let c = &v["certificates"][0];
        for f in ["path", "role", "not_after", "status"] {
            assert!(c.get(f).is_some(), "{f} in {c}");
        }
        for f in ["path", "subject", "sha256", "ski"] {
            assert!(v["cas"][0].get(f).is_some(), "{f}");
        }
        let last = [
            "at",
            "result",
            "failing_since",
            "watched",
            "due",
            "renewed",
            "reloads_proven",
            "reloads_refused",
            "reloads_restarted",
        ];
        for f in last {
            assert!(v["last_pass"].get(f).is_some(), "{f}");
        }
        // A record from a later writer with a field this one does not know still reads.
        let mut later = v.clone();
        later["something_new"] = serde_json::json!(1);
        let later = serde_json::to_vec(&later).unwrap();
        assert_eq!(NodeRecord::decode(&later).unwrap(), rec);
        let why = NodeRecord::decode(b"{").unwrap_err();
        assert!(matches!(why, NotARecord::Json(_)), "{why}");
        assert!(why.to_string().starts_with("not a node record: "), "{why}");
        assert_eq!(
            key("/certrenewd/restart-lock", "cp1"),
            "/certrenewd/restart-lock.nodes/cp1"
        );
    }

    #[test]
    fn a_kubeadm_nodes_record_is_a_few_kib_and_a_huge_one_is_cut_to_the_bound() {
        let rec = kubeadm();
        let n = rec.encode().len();
        assert!((1024..8 * 1024).contains(&n), "{n} bytes");

        // Thousands of watched files: cut under the bound, the due ones and every digest
        // kept, and said so.
        let mut huge = kubeadm();
        for i in 0..5000 {
            huge.certificates.push(CertEntry {
                path: format!("/srv/tenants/{i:05}/tls.crt"),
                role: "leaf".into(),
                not_after: "2027-11-27T21:51:08Z".into(),
                status: "ok".into(),
            });
        }
        let bytes = huge.encode();
        assert!(bytes.len() <= MAX_BYTES, "{}", bytes.len());
        let back = NodeRecord::decode(&bytes).unwrap();
        assert_eq!(back.shared, huge.shared);
        assert_eq!(back.cas, huge.cas);
        assert_eq!(
            back.certificates
                .iter()
                .filter(|c| c.status == "due")
                .count(),
            5
        );
        let note = back.truncated.expect("said");
        assert!(note.contains("of 5015 certificates left out"), "{note}");
        assert!(back.certificates.len() > 100, "{}", back.certificates.len());
    }

    #[test]
    fn a_record_is_stale_after_two_scheduled_passes_and_a_clock_set_back_stales_nothing() {
        let day = 86_400u64;
        let written = 1_795_817_468i64;
        // Within two passes: fresh, to the second.
        assert_eq!(freshness(written, day, written), Freshness::Fresh);
        assert_eq!(
            freshness(written, day, written + 2 * day as i64),
            Freshness::Fresh
        );
        // Past it: stale, with its age.
        assert_eq!(
            freshness(written, day, written + 2 * day as i64 + 1),
            Freshness::Stale {
                age_secs: 2 * day as i64 + 1
            }
        );
        // The reader's clock jumps forward a year: the record is that old by its clock.
        let year = 365 * day as i64;
        assert!(matches!(
            freshness(written, day, written + year),
            Freshness::Stale { .. }
        ));
        // ... and back by a year, or the writer's clock is ahead: never stale.
        assert_eq!(freshness(written, day, written - year), Freshness::Fresh);
        assert_eq!(freshness(written, day, i64::MIN), Freshness::Fresh);
        // An hourly schedule stales in two hours; an interval of 0 (a broken schedule)
        // is taken as a second, not as "always stale".
        assert!(matches!(
            freshness(written, 3600, written + 7201),
            Freshness::Stale { .. }
        ));
        assert_eq!(freshness(written, 0, written + 2), Freshness::Fresh);
        assert_eq!(
            freshness(i64::MIN, day, i64::MAX),
            Freshness::Stale { age_secs: i64::MAX }
        );
    }

    #[test]
    fn drift_is_a_shared_file_that_differs_between_controllers_that_hold_it() {
        let with = |node: &str, ca: &str, sa: Option<&str>| {
            let mut r = kubeadm();
            r.node = node.into();
            r.shared = vec![Digest {
                path: "/etc/kubernetes/pki/ca.crt".into(),
                what: "certificate".into(),
                sha256: ca.into(),
            }];
            if let Some(sa) = sa {
                r.shared.push(Digest {
                    path: "/etc/kubernetes/pki/sa.pub".into(),
                    what: "public key".into(),
                    sha256: sa.into(),
                });
            }
            r
        };
        let (a, b, c) = (
            with("cp1", "aa", Some("s")),
            with("cp2", "aa", None),
            with("cp3", "aa", Some("s")),
        );
        assert_eq!(drift(&[&a, &b, &c]), []);
        let c = with("cp3", "bb", Some("s"));
        let d = drift(&[&a, &b, &c]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].path, "/etc/kubernetes/pki/ca.crt");
        assert_eq!(d[0].odd_ones(), ["cp3"]);
        assert_eq!(
            d[0].groups[0],
            ("aa".into(), vec!["cp1".into(), "cp2".into()])
        );
        assert!(d[0].drifted("cp3") && !d[0].drifted("cp1"));
        // Two controllers, each its own (the third without a record): a tie names no side,
        // and both are drifted, in the same order on every node.
        let tie = &drift(&[&c, &a])[0];
        assert!(!tie.has_majority());
        assert_eq!(tie.odd_ones(), Vec::<String>::new());
        assert!(tie.drifted("cp1") && tie.drifted("cp3") && !tie.drifted("cp2"));
        assert!(
            tie.who_differs().contains("no side is named"),
            "{}",
            tie.who_differs()
        );
        assert_eq!(tie.groups, drift(&[&a, &c])[0].groups);
    }

    /// A record is another controller's word: a digest that is not hex, even one whose 12th
    /// byte falls inside a character, is shown cut at 12 characters, never a panic (which
    /// killed `check --cluster` and, for good, the daemon's watch of the other controllers).
    #[test]
    fn a_digest_of_any_characters_is_shown_cut_without_a_panic() {
        let with = |node: &str, sum: &str| {
            let mut r = kubeadm();
            r.node = node.into();
            r.shared = vec![Digest {
                path: "/etc/kubernetes/pki/ca.crt".into(),
                what: "certificate".into(),
                sha256: sum.into(),
            }];
            r
        };
        let honest = with("cp1", "3cae645897601f00");
        let odd = with("cp2", "abcdefghijk\u{e9}\u{e9}\u{1b}]0;pwned");
        let d = drift(&[&honest, &odd]);
        assert_eq!(
            d[0].groups_text(),
            "3cae64589760 on cp1; abcdefghijk\u{e9} on cp2"
        );
        assert_eq!(short("\u{1F600}"), "\u{1F600}");
    }
}
