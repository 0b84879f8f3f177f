//! Reissuing one certificate: the old to-be-signed structure with a new serial, validity,
//! issuer (the CA's subject bytes), key identifiers and, when rotating, key — every other
//! byte carried over — signed again with the CA key.

use const_oid::ObjectIdentifier;
use time::{Duration, OffsetDateTime};

use crate::format::cert::CertFacts;
use crate::format::der::{self, Tlv, oid, tag};
use crate::format::key::KeyAlg;
use crate::served::Name;

/// Certificate Transparency: SCT list and precertificate poison no longer apply once reissued.
const OIDS_DROPPED: [ObjectIdentifier; 2] = [oid::CT_SCT_LIST, oid::CT_POISON];

/// How the new certificate differs from the old.
pub struct Reissue<'a> {
    /// The certificate being renewed.
    pub old: &'a CertFacts,
    /// The CA certificate that signs it.
    pub ca: &'a CertFacts,
    /// New serial (positive, at most 20 octets).
    pub serial: [u8; 16],
    /// notBefore.
    pub not_before: OffsetDateTime,
    /// notAfter.
    pub not_after: OffsetDateTime,
    /// A new SubjectPublicKeyInfo (DER) when rotating, with its raw key bits.
    pub new_spki: Option<(Vec<u8>, Vec<u8>)>,
    /// Names appended to its subjectAltName (`add_missing_names`); usually none.
    pub add_names: &'a [Name],
}

/// Why a re-issue's tbsCertificate cannot be made from the old certificate.
#[derive(Debug, thiserror::Error)]
pub enum Unbuildable {
    #[error("cannot sign with a {0} CA key")]
    CaKey(String),
    /// A part of the old certificate that cannot be read, named.
    #[error("{0}")]
    Malformed(&'static str),
    #[error("subject bytes do not match the parsed subject")]
    SubjectMismatch,
    #[error(transparent)]
    Time(#[from] crate::format::der::TimeError),
}

/// The AlgorithmIdentifier for signatures made with a CA key of this type.
pub fn signature_algorithm(ca_key: &KeyAlg) -> Result<Vec<u8>, Unbuildable> {
    Ok(match ca_key {
        KeyAlg::Rsa(_) => der::wrap_all(
            tag::SEQUENCE,
            &[
                &der::oid_tlv(&oid::SHA256_WITH_RSA),
                &der::wrap(tag::NULL, &[]),
            ],
        ),
        KeyAlg::EcP256 => der::wrap(tag::SEQUENCE, &der::oid_tlv(&oid::ECDSA_SHA256)),
        KeyAlg::EcP384 => der::wrap(tag::SEQUENCE, &der::oid_tlv(&oid::ECDSA_SHA384)),
        KeyAlg::EcP521 => der::wrap(tag::SEQUENCE, &der::oid_tlv(&oid::ECDSA_SHA512)),
        KeyAlg::Ed25519 => der::wrap(tag::SEQUENCE, &der::oid_tlv(&oid::ED25519)),
        other => return Err(Unbuildable::CaKey(other.to_string())),
    })
}

/// SHA-1 of the public key bits: the subjectKeyIdentifier openssl and Go compute.
pub fn key_identifier(public_key_bits: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        public_key_bits,
    )
    .as_ref()
    .to_vec()
}

fn extension(id: &ObjectIdentifier, critical: bool, value: &[u8]) -> Vec<u8> {
    let crit = if critical {
        der::wrap(tag::BOOLEAN, &[0xff])
    } else {
        Vec::new()
    };
    der::wrap_all(
        tag::SEQUENCE,
        &[
            &der::oid_tlv(id),
            &crit,
            &der::wrap(tag::OCTET_STRING, value),
        ],
    )
}

fn ext_oid<'a>(ext: &Tlv<'a>) -> Option<Tlv<'a>> {
    der::read(ext.content).map(|(t, _)| t)
}

fn ext_critical(ext: &Tlv<'_>) -> bool {
    der::children(ext.content)
        .and_then(|c| {
            c.get(1)
                .map(|b| b.tag == tag::BOOLEAN && b.content == [0xff])
        })
        .unwrap_or(false)
}

/// The subjectAltName extension `ext` (or a new one, non-critical, when `None`) with `add`
/// appended: the names it had stay first, byte for byte.
fn san_with(ext: Option<&Tlv<'_>>, add: &[Name]) -> Result<Vec<u8>, Unbuildable> {
    let mut names: Vec<u8> = match ext {
        Some(ext) => {
            let parts = der::children(ext.content)
                .ok_or(Unbuildable::Malformed("malformed subjectAltName"))?;
            let value = parts.last().filter(|v| v.tag == tag::OCTET_STRING);
            let (seq, _) = value
                .and_then(|v| der::expect(v.content, tag::SEQUENCE))
                .ok_or(Unbuildable::Malformed("malformed subjectAltName"))?;
            seq.content.to_vec()
        }
        None => Vec::new(),
    };
    for name in add {
        names.extend(match name {
            Name::Dns(host) => der::wrap(tag::DNS_NAME, host.as_bytes()),
            Name::Ip(std::net::IpAddr::V4(ip)) => der::wrap(tag::IP_ADDRESS, &ip.octets()),
            Name::Ip(std::net::IpAddr::V6(ip)) => der::wrap(tag::IP_ADDRESS, &ip.octets()),
        });
    }
    let critical = ext.is_some_and(ext_critical);
    Ok(extension(
        &oid::SUBJECT_ALT_NAME,
        critical,
        &der::wrap(tag::SEQUENCE, &names),
    ))
}

impl Reissue<'_> {
    /// The new tbsCertificate, to be signed with the CA key whose algorithm is `sig_alg`.
    ///
    /// Spliced by hand from the old one's DER rather than built with a certificate builder
    /// such as rcgen: subject, SANs and extensions stay byte for byte as issued, where a
    /// re-encoding builder would normalise them, and Go and etcd compare issuer bytes.
    pub fn tbs(&self, sig_alg: &[u8]) -> Result<Vec<u8>, Unbuildable> {
        let (old_tbs, _, _) = crate::format::cert::signed_parts(&self.old.der)
            .ok_or(Unbuildable::Malformed("malformed certificate"))?;
        let (seq, _) = der::expect(old_tbs, tag::SEQUENCE)
            .ok_or(Unbuildable::Malformed("malformed tbsCertificate"))?;
        let fields =
            der::children(seq.content).ok_or(Unbuildable::Malformed("malformed tbsCertificate"))?;
        let mut i = 0;
        let mut out: Vec<Vec<u8>> = Vec::new();
        let version = fields
            .first()
            .filter(|f| f.tag == tag::CTX0)
            .map(|f| f.raw.to_vec());
        if let Some(v) = &version {
            out.push(v.clone());
            i += 1;
        }
        // serial, signature, issuer, validity, subject, spki
        let rest = fields
            .get(i..i + 6)
            .ok_or(Unbuildable::Malformed("truncated tbsCertificate"))?;
        let (subject, spki) = (rest[4], rest[5]);
        if subject.raw != self.old.raw_subject() {
            return Err(Unbuildable::SubjectMismatch);
        }
        out.push(der::uint(&self.serial));
        out.push(sig_alg.to_vec());
        out.push(self.ca.raw_subject().to_vec());
        out.push(der::wrap_all(
            tag::SEQUENCE,
            &[&der::time(self.not_before)?, &der::time(self.not_after)?],
        ));
        out.push(subject.raw.to_vec());
        out.push(match &self.new_spki {
            Some((spki_der, _)) => spki_der.clone(),
            None => spki.raw.to_vec(),
        });
        // issuerUniqueID / subjectUniqueID are obsolete and tied to the old issuer: dropped.
        if let Some(exts) = fields[i + 6..].iter().find(|f| f.tag == tag::CTX3) {
            out.push(self.extensions(exts)?);
        } else if version.is_some() && (self.ca.ski().is_some() || !self.add_names.is_empty()) {
            // A v3 certificate without extensions gets only the key identifier link, and
            // the names it is to have.
            let mut exts = match self.add_names.is_empty() {
                true => Vec::new(),
                false => san_with(None, self.add_names)?,
            };
            exts.extend(self.aki_extension(false).unwrap_or_default());
            out.push(der::wrap(tag::CTX3, &der::wrap(tag::SEQUENCE, &exts)));
        }
        let parts: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
        Ok(der::wrap_all(tag::SEQUENCE, &parts))
    }

    fn aki_extension(&self, critical: bool) -> Option<Vec<u8>> {
        let ski = self.ca.ski()?;
        let value = der::wrap(tag::SEQUENCE, &der::wrap(tag::CTX0_PRIM, ski));
        Some(extension(&oid::AUTHORITY_KEY_ID, critical, &value))
    }

    fn extensions(&self, ctx3: &Tlv<'_>) -> Result<Vec<u8>, Unbuildable> {
        let (list, _) = der::expect(ctx3.content, tag::SEQUENCE)
            .ok_or(Unbuildable::Malformed("malformed extensions"))?;
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut saw_aki = false;
        let mut saw_san = false;
        for ext in
            der::children(list.content).ok_or(Unbuildable::Malformed("malformed extensions"))?
        {
            let id = ext_oid(&ext).ok_or(Unbuildable::Malformed("malformed extension"))?;
            let critical = ext_critical(&ext);
            if id.is_oid(&oid::SUBJECT_ALT_NAME) && !self.add_names.is_empty() {
                saw_san = true;
                out.push(san_with(Some(&ext), self.add_names)?);
            } else if id.is_oid(&oid::AUTHORITY_KEY_ID) && self.old.der == self.ca.der {
                // A root's re-issue: its own identifier, byte for byte.
                saw_aki = true;
                out.push(ext.raw.to_vec());
            } else if id.is_oid(&oid::AUTHORITY_KEY_ID) {
                saw_aki = true;
                // Point at the CA's own key identifier; keep the old one if the CA has none.
                out.push(
                    self.aki_extension(critical)
                        .unwrap_or_else(|| ext.raw.to_vec()),
                );
            } else if id.is_oid(&oid::SUBJECT_KEY_ID) {
                match &self.new_spki {
                    Some((_, bits)) => out.push(extension(
                        &oid::SUBJECT_KEY_ID,
                        critical,
                        &der::wrap(tag::OCTET_STRING, &key_identifier(bits)),
                    )),
                    None => out.push(ext.raw.to_vec()),
                }
            } else if OIDS_DROPPED.iter().any(|o| id.is_oid(o)) {
                continue;
            } else {
                out.push(ext.raw.to_vec());
            }
        }
        if !saw_san && !self.add_names.is_empty() {
            out.push(san_with(None, self.add_names)?);
        }
        if !saw_aki
            && self.old.der != self.ca.der
            && let Some(aki) = self.aki_extension(false)
        {
            out.push(aki);
        }
        let parts: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
        Ok(der::wrap(tag::CTX3, &der::wrap_all(tag::SEQUENCE, &parts)))
    }
}

/// The signed certificate from its parts.
pub fn assemble(tbs: &[u8], sig_alg: &[u8], signature: &[u8]) -> Vec<u8> {
    der::wrap_all(tag::SEQUENCE, &[tbs, sig_alg, &der::bit_string(signature)])
}

/// Validity of the renewed certificate: a few minutes back for clock skew, the `lifetime`
/// the plan decided, never past the CA's notAfter.
pub fn validity(
    lifetime: Duration,
    ca_not_after: OffsetDateTime,
    now: OffsetDateTime,
) -> (OffsetDateTime, OffsetDateTime) {
    let not_before = (now - Duration::minutes(5))
        .replace_nanosecond(0)
        .unwrap_or(now);
    let not_after = (not_before + lifetime).min(ca_not_after);
    (not_before, not_after)
}

/// Extensions of a certificate other than the key identifiers, as encoded, in order; with
/// `add` appended to its subjectAltName as a re-issue appends them (what the re-issue of
/// it must have).
pub fn extensions_but_key_ids(cert_der: &[u8], add: &[Name]) -> Vec<Vec<u8>> {
    let Some((tbs, _, _)) = crate::format::cert::signed_parts(cert_der) else {
        return Vec::new();
    };
    let Some((seq, _)) = der::expect(tbs, tag::SEQUENCE) else {
        return Vec::new();
    };
    let Some(fields) = der::children(seq.content) else {
        return Vec::new();
    };
    // No extensions at all (a v1 certificate, or none written): an empty list.
    let list = match fields.iter().find(|f| f.tag == tag::CTX3) {
        Some(ctx3) => match der::expect(ctx3.content, tag::SEQUENCE) {
            Some((list, _)) => list.content,
            None => return Vec::new(),
        },
        None => &[],
    };
    let is_san = |e: &Tlv<'_>| ext_oid(e).is_some_and(|id| id.is_oid(&oid::SUBJECT_ALT_NAME));
    let children = der::children(list).unwrap_or_default();
    let mut out: Vec<Vec<u8>> = children
        .iter()
        .copied()
        .filter(|e| {
            ext_oid(e).is_some_and(|id| {
                !id.is_oid(&oid::AUTHORITY_KEY_ID)
                    && !id.is_oid(&oid::SUBJECT_KEY_ID)
                    && !OIDS_DROPPED.iter().any(|d| id.is_oid(d))
            })
        })
        .map(|e| match is_san(&e) && !add.is_empty() {
            true => san_with(Some(&e), add).unwrap_or_default(),
            false => e.raw.to_vec(),
        })
        .collect();
    if !add.is_empty() && !children.iter().any(is_san) {
        out.extend(san_with(None, add));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::cert::CertFacts;

    /// A leaf without a subjectAltName and its CA, by rcgen.
    fn leaf_without_names() -> (CertFacts, CertFacts, rcgen::KeyPair) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, &ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let leaf = params.signed_by(&key, &issuer).unwrap();
        let facts = |der: &[u8]| CertFacts::parse(der.to_vec()).unwrap();
        (facts(leaf.der()), facts(ca.der()), ca_key)
    }

    #[test]
    fn names_are_added_in_a_new_subject_alt_name_when_there_was_none() {
        let (old, ca, ca_key) = leaf_without_names();
        let add = [
            Name::parse("10.0.0.9").unwrap(),
            Name::parse("etcd-0").unwrap(),
        ];
        let now = OffsetDateTime::now_utc();
        let r = Reissue {
            old: &old,
            ca: &ca,
            serial: [0x41; 16],
            not_before: now,
            not_after: now + Duration::days(30),
            new_spki: None,
            add_names: &add,
        };
        let sig_alg = signature_algorithm(&ca.public_key.alg).unwrap();
        let tbs = r.tbs(&sig_alg).unwrap();
        let sig = rcgen::SigningKey::sign(&ca_key, &tbs).unwrap();
        let new = assemble(&tbs, &sig_alg, &sig);
        let uses: Vec<crate::served::Use> = add
            .iter()
            .map(|n| crate::served::Use {
                name: n.clone(),
                flag: "--advertise-client-urls".into(),
                file: "etcd.yaml".into(),
            })
            .collect();
        assert_eq!(crate::served::missing(&old.der, &uses).len(), 2);
        assert!(crate::served::missing(&new, &uses).is_empty());
        assert_eq!(
            extensions_but_key_ids(&old.der, &add),
            extensions_but_key_ids(&new, &[]),
            "what the verifier expects is what was built"
        );
        CertFacts::parse(new).unwrap().signed_by(&ca).unwrap();
    }
}
