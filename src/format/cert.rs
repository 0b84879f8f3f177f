//! One X.509 certificate: the facts the planner and renewer need, and its signature check.

use std::sync::OnceLock;

use aws_lc_rs::signature::{ParsedPublicKey, UnparsedPublicKey, VerificationAlgorithm};
use time::OffsetDateTime;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::key::{self, KeyAlg, PublicKey};
use crate::format::der::{self, oid, tag};

/// Why bytes are not a certificate read here; each says so in the operator's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("no PEM certificate in it")]
    NoPem,
    /// A PEM block that cannot be read, as the PEM reader says.
    #[error("{0}")]
    Pem(String),
    #[error("not a certificate: X.509 parse error: {0}")]
    X509(String),
    #[error("not a certificate: {0} unexpected bytes after the certificate")]
    Trailing(usize),
    #[error("not a certificate: unreadable subjectPublicKeyInfo")]
    PublicKey,
}

/// The parts of a certificate read once at scan time.
#[derive(Debug, Clone)]
pub struct CertFacts {
    /// The certificate as stored.
    pub der: Vec<u8>,
    /// Subject, readable (`CN=etcd-server, O=...`).
    pub subject: String,
    /// Issuer, readable.
    pub issuer: String,
    /// Serial in lowercase hex.
    pub serial: String,
    /// Start of validity.
    pub not_before: OffsetDateTime,
    /// End of validity.
    pub not_after: OffsetDateTime,
    /// basicConstraints CA:TRUE (or a self-signed v1 certificate).
    pub is_ca: bool,
    /// Where in `der` the subject name is (see [`CertFacts::raw_subject`]): the names and
    /// key identifiers are read from the certificate, not kept a second time.
    subject_at: Span,
    issuer_at: Span,
    ski_at: Option<Span>,
    aki_at: Option<Span>,
    /// The certified public key.
    pub public_key: PublicKey,
    /// Usable as a TLS client certificate (no extendedKeyUsage, or clientAuth/any in it).
    pub client_auth: bool,
    /// Its authorityKeyIdentifier names the issuer's serial (authorityCertSerialNumber):
    /// it verifies only against that very issuer certificate, not a re-issue of it.
    pub aki_names_serial: bool,
}

/// A range of `CertFacts::der`.
#[derive(Debug, Clone, Copy)]
struct Span(u32, u32);

impl Span {
    /// Where `part`, a slice of `whole`, is in it.
    fn of(whole: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
        debug_assert!(start + part.len() <= whole.len());
        Span(start as u32, (start + part.len()) as u32)
    }

    fn get(self, der: &[u8]) -> &[u8] {
        der.get(self.0 as usize..self.1 as usize)
            .unwrap_or_default()
    }
}

impl CertFacts {
    /// Subject name, exactly as encoded.
    pub fn raw_subject(&self) -> &[u8] {
        self.subject_at.get(&self.der)
    }

    /// Issuer name, exactly as encoded.
    pub fn raw_issuer(&self) -> &[u8] {
        self.issuer_at.get(&self.der)
    }

    /// subjectKeyIdentifier.
    pub fn ski(&self) -> Option<&[u8]> {
        self.ski_at.map(|s| s.get(&self.der))
    }

    /// authorityKeyIdentifier keyIdentifier.
    pub fn aki(&self) -> Option<&[u8]> {
        self.aki_at.map(|s| s.get(&self.der))
    }

    /// The first certificate in PEM bytes (a bundle, a combined certificate+key file).
    pub fn first_in_pem(pem_bytes: &[u8]) -> Result<CertFacts, CertError> {
        let block = super::pem::blocks(pem_bytes)
            .into_iter()
            .find(|b| {
                b.as_ref().map_or(true, |b| {
                    b.label == "CERTIFICATE" || b.label == "X509 CERTIFICATE"
                })
            })
            .ok_or(CertError::NoPem)?
            .map_err(|e| CertError::Pem(e.reason))?;
        CertFacts::parse(block.der)
    }

    /// Parses a DER certificate; the error says what is wrong.
    pub fn parse(der_bytes: Vec<u8>) -> Result<CertFacts, CertError> {
        let (rest, cert) =
            X509Certificate::from_der(&der_bytes).map_err(|e| CertError::X509(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CertError::Trailing(rest.len()));
        }
        let public_key = key::spki(cert.public_key().raw).ok_or(CertError::PublicKey)?;
        let at = |part: &[u8]| Span::of(&der_bytes, part);
        let mut ski_at = None;
        let mut aki_at = None;
        let mut aki_names_serial = false;
        for ext in cert.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => ski_at = Some(at(k.0)),
                ParsedExtension::AuthorityKeyIdentifier(a) => {
                    aki_at = a.key_identifier.as_ref().map(|k| at(k.0));
                    aki_names_serial = a.authority_cert_serial.is_some();
                }
                _ => {}
            }
        }
        let (raw_subject, raw_issuer) = (cert.subject().as_raw(), cert.issuer().as_raw());
        let has_bc = cert.basic_constraints().ok().flatten().is_some();
        let is_ca = cert.is_ca() || (!has_bc && cert.version().0 == 0 && raw_subject == raw_issuer);
        let client_auth = match cert.extended_key_usage() {
            Ok(Some(eku)) => eku.value.client_auth || eku.value.any,
            Ok(None) => true,
            Err(_) => false,
        };
        let facts = CertFacts {
            client_auth,
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            serial: hex(cert.raw_serial()),
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            is_ca,
            subject_at: at(raw_subject),
            issuer_at: at(raw_issuer),
            ski_at,
            aki_at,
            public_key,
            aki_names_serial,
            der: Vec::new(),
        };
        Ok(CertFacts {
            der: der_bytes,
            ..facts
        })
    }

    /// Whether `issuer` signed this certificate (names, key ids, then the signature itself).
    pub fn signed_by(&self, issuer: &CertFacts) -> Result<(), NotSigned> {
        self.names_issuer(issuer)?;
        verify_signature(&self.der, &issuer.public_key)
    }

    /// Whether this certificate names `issuer` as its signer: issuer name, and the key
    /// identifiers when both are there.
    fn names_issuer(&self, issuer: &CertFacts) -> Result<(), NotSigned> {
        if self.raw_issuer() != issuer.raw_subject() {
            return Err(NotSigned::IssuerName);
        }
        if let (Some(aki), Some(ski)) = (self.aki(), issuer.ski())
            && aki != ski
        {
            return Err(NotSigned::KeyIdentifier);
        }
        Ok(())
    }

    /// Whether `other` is the same CA, possibly re-issued: both CAs with the same subject,
    /// issuer, key and subjectKeyIdentifier (what a same-key renewal keeps), so each
    /// verifies what the other signed.
    pub fn same_ca(&self, other: &CertFacts) -> bool {
        self.is_ca
            && other.is_ca
            && self.raw_subject() == other.raw_subject()
            && self.raw_issuer() == other.raw_issuer()
            && self.public_key.raw == other.public_key.raw
            && self.ski() == other.ski()
    }

    /// Whether the subject and issuer are the same and the certificate verifies with its own key.
    pub fn self_signed(&self) -> bool {
        self.raw_subject() == self.raw_issuer() && self.signed_by(self).is_ok()
    }
}

/// A CA's public key for checking the certificates it signed, parsed by aws-lc once (for
/// the first signature algorithm it is checked with: a CA signs with one) instead of once
/// a certificate.
pub struct IssuerKey<'a> {
    facts: &'a CertFacts,
    parsed: OnceLock<Option<(&'static dyn VerificationAlgorithm, ParsedPublicKey)>>,
}

impl<'a> IssuerKey<'a> {
    /// The key of the CA `facts`, not parsed yet.
    pub fn new(facts: &'a CertFacts) -> Self {
        IssuerKey {
            facts,
            parsed: OnceLock::new(),
        }
    }

    /// Whether this CA signed `cert`: the same checks and answers as `cert.signed_by(ca)`.
    pub fn signed(&self, cert: &CertFacts) -> Result<(), NotSigned> {
        cert.names_issuer(self.facts)?;
        let key = &self.facts.public_key.raw;
        let SignatureInput {
            algorithm,
            tbs,
            signature,
        } = signature_input(&cert.der, &self.facts.public_key)?;
        let parsed = self.parsed.get_or_init(|| {
            ParsedPublicKey::new(algorithm, key)
                .ok()
                .map(|p| (algorithm, p))
        });
        match parsed {
            Some((a, p)) if std::ptr::addr_eq(*a, algorithm) => p.verify_sig(tbs, signature),
            _ => UnparsedPublicKey::new(algorithm, key).verify(tbs, signature),
        }
        .map_err(|_| NotSigned::Signature)
    }
}

/// The first common name (CN) of a DER-encoded distinguished name, if it has one.
pub fn common_name(raw_name: &[u8]) -> Option<String> {
    let (_, name) = x509_parser::x509::X509Name::from_der(raw_name).ok()?;
    let cn = name.iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The attributes of a distinguished name x509-certificate-exporter puts in its labels, read
/// as Go's `pkix.Name` does: the first country, province, locality, organization and unit,
/// and the last common name; empty where the name has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameFields {
    /// C.
    pub country: String,
    /// ST.
    pub province: String,
    /// L.
    pub locality: String,
    /// O.
    pub organization: String,
    /// OU.
    pub unit: String,
    /// CN.
    pub common_name: String,
}

/// The [`NameFields`] of a DER-encoded distinguished name (all empty when it does not parse).
pub fn name_fields(raw_name: &[u8]) -> NameFields {
    let Ok((_, name)) = x509_parser::x509::X509Name::from_der(raw_name) else {
        return NameFields::default();
    };
    NameFields {
        country: first_text(name.iter_country()),
        province: first_text(name.iter_state_or_province()),
        locality: first_text(name.iter_locality()),
        organization: first_text(name.iter_organization()),
        unit: first_text(name.iter_organizational_unit()),
        common_name: (name.iter_common_name())
            .filter_map(|a| a.as_str().ok())
            .last()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The first of these attributes that is a string.
fn first_text<'a, 'b: 'a>(
    mut values: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'b>>,
) -> String {
    values
        .find_map(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The decimal form of a serial given in hex ([`CertFacts::serial`]), as Go's
/// `big.Int.String()` writes a certificate's serial number.
pub fn decimal_serial(hex: &str) -> String {
    // Little-endian base-10 digits, multiplied by 16 and added to, one hex digit at a time.
    let mut digits: Vec<u8> = vec![0];
    for c in hex.chars() {
        let mut carry = c.to_digit(16).unwrap_or(0);
        for d in digits.iter_mut() {
            let v = u32::from(*d) * 16 + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            digits.push((carry % 10) as u8);
            carry /= 10;
        }
    }
    while digits.len() > 1 && digits.last() == Some(&0) {
        digits.pop();
    }
    digits.iter().rev().map(|d| char::from(b'0' + d)).collect()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)].into());
        out.push(DIGITS[usize::from(b & 0x0f)].into());
    }
    out
}

/// The three parts of a signed certificate: tbsCertificate, the algorithm, the signature bits.
pub fn signed_parts(cert_der: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (outer, _) = der::expect(cert_der, tag::SEQUENCE)?;
    let parts = der::children(outer.content)?;
    let [tbs, alg, sig] = parts.as_slice() else {
        return None;
    };
    if tbs.tag != tag::SEQUENCE || alg.tag != tag::SEQUENCE || sig.tag != tag::BIT_STRING {
        return None;
    }
    Some((tbs.raw, alg.raw, sig.content.get(1..)?))
}

/// Checks the certificate's signature with `issuer_key`.
pub fn verify_signature(cert_der: &[u8], issuer_key: &PublicKey) -> Result<(), NotSigned> {
    let input = signature_input(cert_der, issuer_key)?;
    UnparsedPublicKey::new(input.algorithm, &issuer_key.raw)
        .verify(input.tbs, input.signature)
        .map_err(|_| NotSigned::Signature)
}

/// Why a certificate does not verify as signed by a CA; the text names the first check
/// that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSigned {
    /// Its issuer name is not the CA's subject.
    #[error("issuer name differs")]
    IssuerName,
    /// Its authority key identifier is not the CA's subject key identifier.
    #[error("authority key identifier differs")]
    KeyIdentifier,
    /// Its signature cannot be checked with this key (malformed, or an algorithm this key
    /// does not sign with).
    #[error("{0}")]
    Unverifiable(String),
    /// The signature does not verify with the CA's key.
    #[error("signature does not verify")]
    Signature,
}

/// What checking a certificate's signature takes.
pub struct SignatureInput<'a> {
    /// The aws-lc algorithm: the certificate's signature algorithm with the key's type.
    pub algorithm: &'static dyn VerificationAlgorithm,
    /// The signed bytes (tbsCertificate).
    pub tbs: &'a [u8],
    /// The signature.
    pub signature: &'a [u8],
}

/// What checking the certificate's signature with `issuer_key` takes.
pub fn signature_input<'a>(
    cert_der: &'a [u8],
    issuer_key: &PublicKey,
) -> Result<SignatureInput<'a>, NotSigned> {
    use aws_lc_rs::signature as s;
    let bad = |what: &str| NotSigned::Unverifiable(what.to_string());
    let (tbs, alg, sig) = signed_parts(cert_der).ok_or_else(|| bad("malformed certificate"))?;
    let (alg_oid, _) = der::read(
        der::expect(alg, tag::SEQUENCE)
            .ok_or_else(|| bad("bad algorithm"))?
            .0
            .content,
    )
    .ok_or_else(|| bad("bad algorithm"))?;
    let is = |id| alg_oid.is_oid(&id);
    let algorithm: &'static dyn VerificationAlgorithm = match (&issuer_key.alg, ()) {
        (KeyAlg::Rsa(_), _) if is(oid::SHA256_WITH_RSA) => &s::RSA_PKCS1_2048_8192_SHA256,
        (KeyAlg::Rsa(_), _) if is(oid::SHA384_WITH_RSA) => &s::RSA_PKCS1_2048_8192_SHA384,
        (KeyAlg::Rsa(_), _) if is(oid::SHA512_WITH_RSA) => &s::RSA_PKCS1_2048_8192_SHA512,
        (KeyAlg::Rsa(_), _) if is(oid::SHA1_WITH_RSA) => {
            &s::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY
        }
        (KeyAlg::EcP256, _) if is(oid::ECDSA_SHA256) => &s::ECDSA_P256_SHA256_ASN1,
        (KeyAlg::EcP256, _) if is(oid::ECDSA_SHA384) => &s::ECDSA_P256_SHA384_ASN1,
        (KeyAlg::EcP384, _) if is(oid::ECDSA_SHA384) => &s::ECDSA_P384_SHA384_ASN1,
        (KeyAlg::EcP384, _) if is(oid::ECDSA_SHA256) => &s::ECDSA_P384_SHA256_ASN1,
        (KeyAlg::EcP521, _) if is(oid::ECDSA_SHA512) => &s::ECDSA_P521_SHA512_ASN1,
        (KeyAlg::Ed25519, _) if is(oid::ED25519) => &s::ED25519,
        (k, _) => {
            return Err(NotSigned::Unverifiable(format!(
                "signature algorithm {:02x?} with a {k} issuer key is not supported",
                alg_oid.content
            )));
        }
    };
    Ok(SignatureInput {
        algorithm,
        tbs,
        signature: sig,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_in_decimal_as_go_writes_them() {
        assert_eq!(decimal_serial("00"), "0");
        assert_eq!(decimal_serial("5eed"), "24301");
        // 20 bytes, beyond any machine integer (Python: int(..., 16)).
        assert_eq!(
            decimal_serial("6a90cebace9a782be19ca632b9f28c1f67aef500"),
            "608382337713960607420151767261851955534232483072"
        );
    }
}
