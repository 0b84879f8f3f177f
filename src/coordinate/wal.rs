//! Which cluster this node's etcd member belongs to, as its write-ahead log says: read while
//! the member is down, to tell a member of the cluster that answers from a stale one (a
//! snapshot restored elsewhere makes a new cluster; the members left on their old data must
//! not be started into a quorum of the old one).
//!
//! etcd writes every WAL file (`<data-dir>/member/wal/*.wal`) as frames: a little-endian
//! 64-bit length (its top byte, when its high bit is set, counting the padding to 8 bytes),
//! then a `walpb.Record`. The second record of each file is the metadata record, whose data
//! is an `etcdserverpb.Metadata` naming the member and its cluster.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use prost::Message;

/// `walpb.Record` (etcd's `server/storage/wal/walpb/record.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct Record {
    #[prost(int64, tag = "1")]
    kind: i64,
    #[prost(uint32, tag = "2")]
    crc: u32,
    #[prost(bytes = "vec", tag = "3")]
    data: Vec<u8>,
}

/// `etcdserverpb.Metadata`: what every WAL file says of its member.
#[derive(Clone, PartialEq, prost::Message)]
struct Metadata {
    #[prost(uint64, tag = "1")]
    node_id: u64,
    #[prost(uint64, tag = "2")]
    cluster_id: u64,
}

/// The record type of the metadata record (`metadataType`).
const METADATA: i64 = 1;
/// A frame larger than this is no metadata record: the file is not what it seems.
const MAX_FRAME: u64 = 1 << 20;

/// The member and the cluster its write-ahead log was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    pub member_id: u64,
    pub cluster_id: u64,
}

/// The member and cluster of the write-ahead log under `data_dir`; Err names the file and
/// why it says neither.
pub fn logged(data_dir: &Path) -> anyhow::Result<Logged> {
    let wal = data_dir.join("member/wal");
    let newest = newest_file(&wal)?;
    let mut file =
        std::fs::File::open(&newest).with_context(|| format!("opening {}", newest.display()))?;
    // The first records of a file are small; a metadata record is well within this.
    let mut head = Vec::new();
    (&mut file)
        .take(64 * 1024)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", newest.display()))?;
    metadata(&head).with_context(|| format!("{} (etcd's write-ahead log)", newest.display()))
}

/// The last WAL file by name (their names order them).
fn newest_file(wal: &Path) -> anyhow::Result<PathBuf> {
    let entries = std::fs::read_dir(wal).with_context(|| format!("listing {}", wal.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    files.sort();
    match files.pop() {
        Some(f) => Ok(f),
        None => bail!("{} holds no *.wal file", wal.display()),
    }
}

/// The metadata record among the first frames of a WAL file.
fn metadata(mut bytes: &[u8]) -> anyhow::Result<Logged> {
    // A crc record comes first, then the metadata record.
    for _ in 0..2 {
        let Some((len, rest)) = bytes.split_first_chunk::<8>() else {
            bail!("ends before its metadata record");
        };
        let field = u64::from_le_bytes(*len);
        let size = field & 0x00ff_ffff_ffff_ffff;
        let pad = match field >> 63 {
            1 => (field >> 56) & 0x7,
            _ => 0,
        };
        if size > MAX_FRAME {
            bail!("a frame of {size} bytes: not a write-ahead log etcd wrote");
        }
        let (size, framed) = (size as usize, (size + pad) as usize);
        if rest.len() < framed {
            bail!("ends inside a frame of {size} bytes");
        }
        let record = Record::decode(&rest[..size]).context("an unreadable record")?;
        if record.kind == METADATA {
            let m = Metadata::decode(record.data.as_slice()).context("unreadable metadata")?;
            return Ok(Logged {
                member_id: m.node_id,
                cluster_id: m.cluster_id,
            });
        }
        bytes = &rest[framed..];
    }
    bail!("no metadata record where etcd writes it (the second record)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as etcd's encoder writes it: the length with its padding count, the record,
    /// the padding.
    fn frame(record: &Record) -> Vec<u8> {
        let data = record.encode_to_vec();
        let pad = (8 - data.len() % 8) % 8;
        let mut field = data.len() as u64;
        if pad != 0 {
            field |= (0x80 | pad as u64) << 56;
        }
        let mut out = field.to_le_bytes().to_vec();
        out.extend_from_slice(&data);
        out.extend(std::iter::repeat_n(0, pad));
        out
    }

    #[test]
    fn the_metadata_record_names_the_member_and_its_cluster() {
        let crc = Record {
            kind: 4,
            crc: 0,
            data: Vec::new(),
        };
        let meta = Metadata {
            node_id: 0x8e9e05c52164694d,
            cluster_id: 0xcdf818194e3a8c32,
        };
        let meta = Record {
            kind: METADATA,
            crc: 0x1234,
            data: meta.encode_to_vec(),
        };
        let mut bytes = frame(&crc);
        bytes.extend(frame(&meta));
        let want = Logged {
            member_id: 0x8e9e05c52164694d,
            cluster_id: 0xcdf818194e3a8c32,
        };
        assert_eq!(metadata(&bytes).unwrap(), want);
        // Cut short, or not a log at all: said, never a guess.
        let e = metadata(&bytes[..bytes.len() - 3]).unwrap_err();
        assert_eq!(format!("{e:#}"), "ends inside a frame of 29 bytes");
        let e = metadata(b"not a log, a text file\n").unwrap_err();
        assert!(format!("{e:#}").contains("not a write-ahead log"), "{e:#}");
    }
}
