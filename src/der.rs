//! Minimal DER reading and writing: just enough to take keys and certificates apart and
//! to put a to-be-signed certificate back together without re-encoding what we keep.

/// One DER element: its tag byte, the whole encoding, and its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The identifier octet (single-byte tags only).
    pub tag: u8,
    /// The element as encoded: header and contents.
    pub raw: &'a [u8],
    /// The contents octets.
    pub content: &'a [u8],
}

/// Universal and context tags used here.
pub mod tag {
    /// INTEGER
    pub const INTEGER: u8 = 0x02;
    /// BIT STRING
    pub const BIT_STRING: u8 = 0x03;
    /// OCTET STRING
    pub const OCTET_STRING: u8 = 0x04;
    /// NULL
    pub const NULL: u8 = 0x05;
    /// OBJECT IDENTIFIER
    pub const OID: u8 = 0x06;
    /// BOOLEAN
    pub const BOOLEAN: u8 = 0x01;
    /// UTCTime
    pub const UTC_TIME: u8 = 0x17;
    /// GeneralizedTime
    pub const GENERALIZED_TIME: u8 = 0x18;
    /// SEQUENCE
    pub const SEQUENCE: u8 = 0x30;
    /// [0] constructed
    pub const CTX0: u8 = 0xa0;
    /// [1] constructed
    pub const CTX1: u8 = 0xa1;
    /// [3] constructed
    pub const CTX3: u8 = 0xa3;
    /// [0] primitive
    pub const CTX0_PRIM: u8 = 0x80;
}

/// Reads one element from the front of `input`; returns it and what follows.
pub fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tags never occur in what we parse
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    let (content, after) = rest.split_at(len);
    Some((
        Tlv {
            tag,
            raw: &input[..header + len],
            content,
        },
        after,
    ))
}

/// Reads one element that must have `tag`.
pub fn expect(input: &[u8], tag: u8) -> Option<(Tlv<'_>, &[u8])> {
    read(input).filter(|(t, _)| t.tag == tag)
}

/// All elements of a constructed value's contents, in order.
pub fn children(mut content: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (t, rest) = read(content)?;
        out.push(t);
        content = rest;
    }
    Some(out)
}

/// Encodes a length in DER.
fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// Encodes `tag` around `content`.
pub fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    push_len(&mut out, content.len());
    out.extend_from_slice(content);
    out
}

/// Encodes `tag` around the concatenation of already-encoded parts.
pub fn wrap_all(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    wrap(tag, &parts.concat())
}

/// Encodes an unsigned big-endian number as a DER INTEGER.
pub fn uint(bytes: &[u8]) -> Vec<u8> {
    let trimmed = {
        let skip = bytes
            .iter()
            .take_while(|&&b| b == 0)
            .count()
            .min(bytes.len().saturating_sub(1));
        &bytes[skip..]
    };
    if trimmed.first().is_some_and(|&b| b & 0x80 != 0) {
        let mut c = vec![0];
        c.extend_from_slice(trimmed);
        wrap(tag::INTEGER, &c)
    } else {
        wrap(tag::INTEGER, trimmed)
    }
}

/// Encodes a dotted OID string (arcs as numbers).
pub fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').filter_map(|a| a.parse().ok()).collect();
    let mut c = Vec::new();
    if arcs.len() >= 2 {
        base128(&mut c, arcs[0] * 40 + arcs[1]);
        for &a in &arcs[2..] {
            base128(&mut c, a);
        }
    }
    wrap(tag::OID, &c)
}

fn base128(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = vec![(v & 0x7f) as u8];
    v >>= 7;
    while v > 0 {
        tmp.push(0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    tmp.reverse();
    out.extend(tmp);
}

/// Encodes a BIT STRING with no unused bits.
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(bytes.len() + 1);
    c.push(0);
    c.extend_from_slice(bytes);
    wrap(tag::BIT_STRING, &c)
}

/// Encodes a time as UTCTime (years 1950..2049) or GeneralizedTime (otherwise), as RFC 5280 wants.
pub fn time(t: time::OffsetDateTime) -> Vec<u8> {
    let t = t.to_offset(time::UtcOffset::UTC);
    let (y, mo, d, h, mi, s) = (
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    );
    if (1950..2050).contains(&y) {
        let text = format!("{:02}{mo:02}{d:02}{h:02}{mi:02}{s:02}Z", y % 100);
        wrap(tag::UTC_TIME, text.as_bytes())
    } else {
        let text = format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}Z");
        wrap(tag::GENERALIZED_TIME, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_and_wrap_round_trip_short_and_long_lengths() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let content = vec![7u8; len];
            let enc = wrap(tag::OCTET_STRING, &content);
            let (t, rest) = read(&enc).unwrap();
            assert_eq!(t.tag, tag::OCTET_STRING);
            assert_eq!(t.content, &content[..]);
            assert_eq!(t.raw, &enc[..]);
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn truncated_input_is_refused_not_panicked_on() {
        let enc = wrap(tag::SEQUENCE, &[1, 2, 3, 4]);
        for cut in 0..enc.len() {
            assert!(read(&enc[..cut]).is_none());
        }
        assert!(read(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_none());
        assert!(read(&[0x1f, 0x01, 0x00]).is_none());
    }

    #[test]
    fn integers_and_oids_encode_like_openssl() {
        assert_eq!(uint(&[0x00, 0x80]), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0x00, 0x00, 0x01]), vec![0x02, 0x01, 0x01]);
        assert_eq!(uint(&[0]), vec![0x02, 0x01, 0x00]);
        // sha256WithRSAEncryption
        assert_eq!(
            oid("1.2.840.113549.1.1.11"),
            vec![
                0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b
            ]
        );
    }

    #[test]
    fn times_pick_utc_or_generalized_by_year() {
        let t = time::macros::datetime!(2026-11-21 01:02:03 UTC);
        assert_eq!(time(t), wrap(tag::UTC_TIME, b"261121010203Z"));
        let t = time::macros::datetime!(2051-01-01 00:00:00 UTC);
        assert_eq!(time(t), wrap(tag::GENERALIZED_TIME, b"20510101000000Z"));
    }
}
