//! Minimal DER reading and writing: just enough to take a certificate apart and to put a
//! to-be-signed certificate back together without re-encoding what we keep. (Key files are
//! read and written with the pkcs1, pkcs8, sec1 and spki crates.)

use const_oid::ObjectIdentifier;

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

/// The object identifiers certrenewd reads and writes, each encoded once at compile time.
pub mod oid {
    use const_oid::ObjectIdentifier as Oid;

    /// rsaEncryption (RFC 8017).
    pub const RSA_ENCRYPTION: Oid = Oid::new_unwrap("1.2.840.113549.1.1.1");
    /// id-ecPublicKey (RFC 5480).
    pub const EC_PUBLIC_KEY: Oid = Oid::new_unwrap("1.2.840.10045.2.1");
    /// id-Ed25519 (RFC 8410): the key type and the signature algorithm.
    pub const ED25519: Oid = Oid::new_unwrap("1.3.101.112");
    /// secp256r1 (NIST P-256).
    pub const P256: Oid = Oid::new_unwrap("1.2.840.10045.3.1.7");
    /// secp384r1 (NIST P-384).
    pub const P384: Oid = Oid::new_unwrap("1.3.132.0.34");
    /// secp521r1 (NIST P-521).
    pub const P521: Oid = Oid::new_unwrap("1.3.132.0.35");
    /// sha1WithRSAEncryption.
    pub const SHA1_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.5");
    /// sha256WithRSAEncryption.
    pub const SHA256_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.11");
    /// sha384WithRSAEncryption.
    pub const SHA384_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.12");
    /// sha512WithRSAEncryption.
    pub const SHA512_WITH_RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.13");
    /// ecdsa-with-SHA256.
    pub const ECDSA_SHA256: Oid = Oid::new_unwrap("1.2.840.10045.4.3.2");
    /// ecdsa-with-SHA384.
    pub const ECDSA_SHA384: Oid = Oid::new_unwrap("1.2.840.10045.4.3.3");
    /// ecdsa-with-SHA512.
    pub const ECDSA_SHA512: Oid = Oid::new_unwrap("1.2.840.10045.4.3.4");
    /// authorityKeyIdentifier extension.
    pub const AUTHORITY_KEY_ID: Oid = Oid::new_unwrap("2.5.29.35");
    /// subjectKeyIdentifier extension.
    pub const SUBJECT_KEY_ID: Oid = Oid::new_unwrap("2.5.29.14");
    /// Certificate Transparency SCT list (RFC 6962).
    pub const CT_SCT_LIST: Oid = Oid::new_unwrap("1.3.6.1.4.1.11129.2.4.2");
    /// Certificate Transparency precertificate poison (RFC 6962).
    pub const CT_POISON: Oid = Oid::new_unwrap("1.3.6.1.4.1.11129.2.4.3");
}

impl Tlv<'_> {
    /// Whether this element is the OBJECT IDENTIFIER `oid`.
    pub fn is_oid(&self, oid: &ObjectIdentifier) -> bool {
        self.tag == tag::OID && self.content == oid.as_bytes()
    }
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

/// Encodes an OBJECT IDENTIFIER.
pub fn oid_tlv(oid: &ObjectIdentifier) -> Vec<u8> {
    wrap(tag::OID, oid.as_bytes())
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
            oid_tlv(&oid::SHA256_WITH_RSA),
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
