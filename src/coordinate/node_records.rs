//! Reading every node's record ([`super::record`]) from etcd: the keys under
//! `<lock_prefix>.nodes/` listed a page at a time, each record read on its own, bounded in
//! number whatever is put under the prefix. The daemon's watch, `check --cluster` and the
//! gate (the other controllers' API servers) read them here.

use etcd_client::GetOptions;

use super::conn::Unreached;
use super::lock::Conn;
use super::record::{self, NodeRecord, NotARecord};

/// Why a node's key did not read as its record: that record's error, never the cluster's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordUnread {
    /// etcd refused the read, as it said.
    #[error("etcd refused to read it: {0}")]
    Refused(String),
    /// What was there is not a record.
    #[error("{0}")]
    NotARecord(std::sync::Arc<NotARecord>),
}

/// Every node's record under `lock_prefix`, by node name, read through `conn`.
pub(super) async fn records(
    conn: &mut Conn,
    lock_prefix: &str,
) -> Result<Vec<(String, Result<NodeRecord, RecordUnread>)>, Unreached> {
    let prefix = record::prefix(lock_prefix);
    let keys = list_keys(conn, &prefix).await?;
    let mut records = Vec::new();
    for key in keys.into_iter().take(MAX_RECORDS) {
        let shown = String::from_utf8_lossy(&key).into_owned();
        let node = record::visible(shown.strip_prefix(&prefix).unwrap_or(&shown));
        // A record whose lease ended since it was listed is gone, not unreadable.
        if let Some(read) = read_record(conn, key, &node).await {
            records.push((node, read));
        }
    }
    Ok(records)
}

/// How many keys one request lists, and how many records are read at most: far more than
/// the controllers of any cluster, and bounded whatever is put under the prefix.
pub(super) const PAGE: i64 = 50;
const MAX_RECORDS: usize = 1_000;

/// The keys under `prefix`, without their values (a value of any size costs nothing here),
/// a page at a time.
async fn list_keys(conn: &mut Conn, prefix: &str) -> Result<Vec<Vec<u8>>, Unreached> {
    let end = prefix_end(prefix.as_bytes());
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut from = prefix.as_bytes().to_vec();
    loop {
        let page = conn
            .call(|mut c| {
                let (from, end) = (from.clone(), end.clone());
                async move {
                    let opts = GetOptions::new()
                        .with_range(end)
                        .with_keys_only()
                        .with_limit(PAGE);
                    c.get(from, Some(opts)).await
                }
            })
            .await
            .map_err(|why| Unreached::Not(format!("etcd refused to read {prefix}: {why}")))?;
        keys.extend(page.kvs().iter().map(|kv| kv.key().to_vec()));
        match (page.more(), keys.last()) {
            (true, Some(last)) if keys.len() < MAX_RECORDS => {
                from = last.clone();
                from.push(0);
            }
            _ => return Ok(keys),
        }
    }
}

/// The first key after every key that starts with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One record, read on its own: one too large for a message, or refused, is that record's
/// error, never the whole cluster's. None when it is gone since it was listed.
async fn read_record(
    conn: &mut Conn,
    key: Vec<u8>,
    node: &str,
) -> Option<Result<NodeRecord, RecordUnread>> {
    let got = conn
        .call(|mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        })
        .await;
    let got = match got {
        Ok(got) => got,
        Err(why) => return Some(Err(RecordUnread::Refused(why.to_string()))),
    };
    let kv = got.kvs().first()?;
    let read = NodeRecord::read_untrusted(node, kv.value())
        .map_err(|e| RecordUnread::NotARecord(std::sync::Arc::new(e)));
    Some(read.map(|mut rec| {
        rec.unleased = kv.lease() == 0;
        rec
    }))
}
