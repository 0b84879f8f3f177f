//! DER through the `der` crate, in the one shape the TBS splice and the signature check need:
//! each element with its exact bytes (`raw`), so that what a renewal keeps is copied, never
//! re-encoded. Object identifiers come from const-oid's database. (Key files are read and
//! written with the pkcs1, pkcs8, sec1 and spki crates.)

use ::der::asn1::{AnyRef, BitStringRef, GeneralizedTime, UintRef, UtcTime};
use ::der::{DateTime, Decode, Encode, Reader, SliceReader, Tag, Tagged};
use const_oid::ObjectIdentifier;

/// One DER element: its tag, the whole encoding, and its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The element's tag.
    pub tag: Tag,
    /// The element as encoded: header and contents.
    pub raw: &'a [u8],
    /// The contents octets.
    pub content: &'a [u8],
}

/// The object identifiers certrenewd reads and writes, by the names used here.
pub mod oid {
    pub use const_oid::db::rfc5280::{
        ID_CE_AUTHORITY_KEY_IDENTIFIER as AUTHORITY_KEY_ID,
        ID_CE_SUBJECT_ALT_NAME as SUBJECT_ALT_NAME, ID_CE_SUBJECT_KEY_IDENTIFIER as SUBJECT_KEY_ID,
    };
    pub use const_oid::db::rfc5912::{
        ECDSA_WITH_SHA_256 as ECDSA_SHA256, ECDSA_WITH_SHA_384 as ECDSA_SHA384,
        ECDSA_WITH_SHA_512 as ECDSA_SHA512, ID_EC_PUBLIC_KEY as EC_PUBLIC_KEY, RSA_ENCRYPTION,
        SECP_256_R_1 as P256, SECP_384_R_1 as P384, SECP_521_R_1 as P521,
        SHA_1_WITH_RSA_ENCRYPTION as SHA1_WITH_RSA, SHA_256_WITH_RSA_ENCRYPTION as SHA256_WITH_RSA,
        SHA_384_WITH_RSA_ENCRYPTION as SHA384_WITH_RSA,
        SHA_512_WITH_RSA_ENCRYPTION as SHA512_WITH_RSA,
    };
    /// Certificate Transparency (RFC 6962): the SCT list and the precertificate poison.
    pub use const_oid::db::rfc6962::{
        CT_PRECERT_POISON as CT_POISON, CT_PRECERT_SCTS as CT_SCT_LIST,
    };
    /// id-Ed25519 (RFC 8410): the key type and the signature algorithm.
    pub use const_oid::db::rfc8410::ID_ED_25519 as ED25519;
}

impl Tlv<'_> {
    /// Whether this element is the OBJECT IDENTIFIER `oid`.
    pub fn is_oid(&self, oid: &ObjectIdentifier) -> bool {
        self.tag == tag::OID && self.content == oid.as_bytes()
    }
}

/// The tags used here.
pub mod tag {
    use ::der::{Tag, TagNumber};

    /// INTEGER
    pub const INTEGER: Tag = Tag::Integer;
    /// BIT STRING
    pub const BIT_STRING: Tag = Tag::BitString;
    /// OCTET STRING
    pub const OCTET_STRING: Tag = Tag::OctetString;
    /// NULL
    pub const NULL: Tag = Tag::Null;
    /// OBJECT IDENTIFIER
    pub const OID: Tag = Tag::ObjectIdentifier;
    /// BOOLEAN
    pub const BOOLEAN: Tag = Tag::Boolean;
    /// SEQUENCE
    pub const SEQUENCE: Tag = Tag::Sequence;
    /// [0] constructed
    pub const CTX0: Tag = context(true, 0);
    /// [3] constructed
    pub const CTX3: Tag = context(true, 3);
    /// [0] primitive
    pub const CTX0_PRIM: Tag = context(false, 0);
    /// [2] primitive: a GeneralName's dNSName
    pub const DNS_NAME: Tag = context(false, 2);
    /// [7] primitive: a GeneralName's iPAddress
    pub const IP_ADDRESS: Tag = context(false, 7);

    const fn context(constructed: bool, number: u32) -> Tag {
        Tag::ContextSpecific {
            constructed,
            number: TagNumber(number),
        }
    }
}

/// Reads one element from the front of `input`; returns it and what follows.
pub fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let raw = SliceReader::new(input).ok()?.tlv_bytes().ok()?;
    let any = AnyRef::from_der(raw).ok()?;
    let tlv = Tlv {
        tag: any.tag(),
        raw,
        content: any.value(),
    };
    Some((tlv, &input[raw.len()..]))
}

/// Reads one element that must have `tag`.
pub fn expect(input: &[u8], tag: Tag) -> Option<(Tlv<'_>, &[u8])> {
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

/// The encoding of a value that cannot fail: every length here comes from parsed DER or a
/// certificate field, far below DER's limit.
fn encoded(value: ::der::Result<Vec<u8>>) -> Vec<u8> {
    value.expect("a DER element far below 256 MiB")
}

/// Encodes `tag` around `content`.
pub fn wrap(tag: Tag, content: &[u8]) -> Vec<u8> {
    encoded(AnyRef::new(tag, content).and_then(|any| any.to_der()))
}

/// Encodes `tag` around the concatenation of already-encoded parts.
pub fn wrap_all(tag: Tag, parts: &[&[u8]]) -> Vec<u8> {
    wrap(tag, &parts.concat())
}

/// Encodes an unsigned big-endian number as a DER INTEGER.
pub fn uint(bytes: &[u8]) -> Vec<u8> {
    encoded(UintRef::new(bytes).and_then(|n| n.to_der()))
}

/// Encodes an OBJECT IDENTIFIER.
pub fn oid_tlv(oid: &ObjectIdentifier) -> Vec<u8> {
    encoded(oid.to_der())
}

/// Encodes a BIT STRING with no unused bits.
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    encoded(BitStringRef::new(0, bytes).and_then(|b| b.to_der()))
}

/// Encodes a time as UTCTime (years up to 2049) or GeneralizedTime (from 2050), as RFC 5280
/// wants; times before 1970 are refused.
pub fn time(t: time::OffsetDateTime) -> Result<Vec<u8>, TimeError> {
    let secs = u64::try_from(t.unix_timestamp()).map_err(|_| TimeError::Before1970(t))?;
    let at = DateTime::from_unix_duration(std::time::Duration::from_secs(secs))
        .map_err(|e| TimeError::Unencodable(t, e))?;
    let encoded = if at.year() < 2050 {
        UtcTime::from_date_time(at).and_then(|u| u.to_der())
    } else {
        GeneralizedTime::from_date_time(at).to_der()
    };
    encoded.map_err(|e| TimeError::Unencodable(t, e))
}

/// Why a time cannot be a certificate's.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    #[error("{0} is before 1970")]
    Before1970(time::OffsetDateTime),
    #[error("{0}: {1}")]
    Unencodable(time::OffsetDateTime, der::Error),
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
        // A long-form tag for a number that fits the short form is not DER.
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
        assert_eq!(time(t).unwrap(), wrap(Tag::UtcTime, b"261121010203Z"));
        let t = time::macros::datetime!(2051-01-01 00:00:00 UTC);
        assert_eq!(
            time(t).unwrap(),
            wrap(Tag::GeneralizedTime, b"20510101000000Z")
        );
    }
}
