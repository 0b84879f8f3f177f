//! Private and public keys: which format a key file is in, which algorithm, and the public
//! key it belongs to — read from the key's own structure, without loading it for signing.

use der::asn1::{AnyRef, ObjectIdentifier, OctetStringRef};
use der::{Decode, Encode, Reader, SliceReader};
use pkcs1::{RsaPrivateKeyRef, RsaPublicKeyRef};
use pkcs8::PrivateKeyInfoRef;
use sec1::EcPrivateKey;
use spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};

use crate::format::der::oid;

/// The algorithm and size of a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyAlg {
    /// RSA with a modulus of this many bits.
    Rsa(usize),
    /// ECDSA on NIST P-256.
    EcP256,
    /// ECDSA on NIST P-384.
    EcP384,
    /// ECDSA on NIST P-521.
    EcP521,
    /// Ed25519.
    Ed25519,
    /// Anything else, by OID.
    Other(String),
}

impl std::fmt::Display for KeyAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyAlg::Rsa(bits) => write!(f, "RSA-{bits}"),
            KeyAlg::EcP256 => f.write_str("ECDSA P-256"),
            KeyAlg::EcP384 => f.write_str("ECDSA P-384"),
            KeyAlg::EcP521 => f.write_str("ECDSA P-521"),
            KeyAlg::Ed25519 => f.write_str("Ed25519"),
            KeyAlg::Other(oid) => write!(f, "key type {oid}"),
        }
    }
}

/// A public key as a certificate carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// Algorithm and size.
    pub alg: KeyAlg,
    /// The subjectPublicKey bits (RSAPublicKey DER, EC point, or Ed25519 key).
    pub raw: Vec<u8>,
}

/// How a private key file is structured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// PKCS#1 `RSA PRIVATE KEY`.
    Pkcs1,
    /// PKCS#8 `PRIVATE KEY`.
    Pkcs8,
    /// SEC1 `EC PRIVATE KEY`.
    Sec1,
    /// PKCS#8 `ENCRYPTED PRIVATE KEY`.
    EncryptedPkcs8,
    /// A legacy OpenSSL PEM with `Proc-Type: 4,ENCRYPTED`.
    LegacyEncrypted,
}

/// PEM or DER on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Base64 between BEGIN/END lines.
    Pem,
    /// Raw DER.
    Der,
}

/// What a private key file holds, minus the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// File structure.
    pub format: KeyFormat,
    /// PEM or DER.
    pub encoding: Encoding,
    /// Its public half, when readable (not for encrypted keys).
    pub public: Option<PublicKey>,
}

impl KeyInfo {
    /// Whether the key needs a passphrase (certrenewd never asks for one).
    pub fn encrypted(&self) -> bool {
        matches!(
            self.format,
            KeyFormat::EncryptedPkcs8 | KeyFormat::LegacyEncrypted
        )
    }
}

/// The curve named by EC algorithm parameters (an OID; anything else is reported by its bytes).
fn curve(params: AnyRef<'_>) -> KeyAlg {
    match params.decode_as::<ObjectIdentifier>() {
        Ok(oid::P256) => KeyAlg::EcP256,
        Ok(oid::P384) => KeyAlg::EcP384,
        Ok(oid::P521) => KeyAlg::EcP521,
        _ => KeyAlg::Other(format!("EC curve {:02x?}", params.value())),
    }
}

fn other(alg: &AlgorithmIdentifierRef<'_>) -> KeyAlg {
    KeyAlg::Other(format!("{:02x?}", alg.oid.as_bytes()))
}

fn rsa_bits(modulus: &[u8]) -> usize {
    let m = &modulus[modulus.iter().take_while(|&&b| b == 0).count()..];
    m.first()
        .map_or(0, |&b| m.len() * 8 - b.leading_zeros() as usize)
}

/// Reads a SubjectPublicKeyInfo.
pub fn spki(der_bytes: &[u8]) -> Option<PublicKey> {
    let info = SubjectPublicKeyInfoRef::from_der(der_bytes).ok()?;
    let raw = info.subject_public_key.raw_bytes();
    let alg = match info.algorithm.oid {
        oid::RSA_ENCRYPTION => KeyAlg::Rsa(rsa_bits(
            RsaPublicKeyRef::from_der(raw).ok()?.modulus.as_bytes(),
        )),
        oid::EC_PUBLIC_KEY => curve(info.algorithm.parameters?),
        oid::ED25519 => KeyAlg::Ed25519,
        _ => other(&info.algorithm),
    };
    Some(PublicKey {
        alg,
        raw: raw.to_vec(),
    })
}

fn pkcs1_public(der_bytes: &[u8]) -> Option<PublicKey> {
    let key = RsaPrivateKeyRef::from_der(der_bytes).ok()?;
    Some(PublicKey {
        alg: KeyAlg::Rsa(rsa_bits(key.modulus.as_bytes())),
        raw: key.public_key().to_der().ok()?,
    })
}

/// SEC1 ECPrivateKey; `outer_curve` comes from PKCS#8 parameters when wrapped.
fn sec1_public(der_bytes: &[u8], outer_curve: Option<KeyAlg>) -> Option<PublicKey> {
    let key = EcPrivateKey::from_der(der_bytes).ok()?;
    let alg = match key.parameters.and_then(|p| p.named_curve()) {
        Some(named) => curve(AnyRef::from(&named)),
        None => outer_curve?,
    };
    let raw = match key.public_key {
        Some(raw) => raw.to_vec(),
        None => derive_ec_public(&alg, der_bytes)?,
    };
    Some(PublicKey { alg, raw })
}

fn derive_ec_public(alg: &KeyAlg, sec1: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::signature::{self, KeyPair};
    let a = match alg {
        KeyAlg::EcP256 => &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        KeyAlg::EcP384 => &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        KeyAlg::EcP521 => &signature::ECDSA_P521_SHA512_ASN1_SIGNING,
        _ => return None,
    };
    let kp = signature::EcdsaKeyPair::from_private_key_der(a, sec1).ok()?;
    Some(kp.public_key().as_ref().to_vec())
}

fn pkcs8_public(der_bytes: &[u8]) -> Option<PublicKey> {
    let info = PrivateKeyInfoRef::from_der(der_bytes).ok()?;
    let private = info.private_key.as_bytes();
    match info.algorithm.oid {
        oid::RSA_ENCRYPTION => pkcs1_public(private),
        oid::EC_PUBLIC_KEY => sec1_public(private, info.algorithm.parameters.map(curve)),
        oid::ED25519 => Some(PublicKey {
            alg: KeyAlg::Ed25519,
            raw: match info.public_key {
                Some(bits) => bits.raw_bytes().to_vec(),
                None => ed25519_public(private)?,
            },
        }),
        _ => Some(PublicKey {
            alg: other(&info.algorithm),
            raw: Vec::new(),
        }),
    }
}

/// The public key of an Ed25519 CurvePrivateKey (an OCTET STRING holding the seed).
fn ed25519_public(private: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
    let seed = <&OctetStringRef>::from_der(private).ok()?;
    let kp = Ed25519KeyPair::from_seed_unchecked(seed.as_bytes()).ok()?;
    Some(kp.public_key().as_ref().to_vec())
}

/// Whether a PEM label is a private key's.
pub fn is_private_key_label(label: &str) -> bool {
    matches!(
        label,
        "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "ENCRYPTED PRIVATE KEY"
    )
}

/// Why a PEM block is not a private key this reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Its label names no private key.
    #[error("not a private key ({0})")]
    NotAKey(String),
    /// Its label names a key, and its bytes are not one: what it should have been.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Reads a private key PEM block.
pub fn from_pem(
    label: &str,
    headers: &[(String, String)],
    der_bytes: &[u8],
) -> Result<KeyInfo, KeyError> {
    let legacy_encrypted = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("Proc-Type") && v.contains("ENCRYPTED"));
    let format = match label {
        _ if legacy_encrypted => KeyFormat::LegacyEncrypted,
        "ENCRYPTED PRIVATE KEY" => KeyFormat::EncryptedPkcs8,
        "RSA PRIVATE KEY" => KeyFormat::Pkcs1,
        "EC PRIVATE KEY" => KeyFormat::Sec1,
        "PRIVATE KEY" => KeyFormat::Pkcs8,
        other => return Err(KeyError::NotAKey(other.to_string())),
    };
    let public = match format {
        KeyFormat::EncryptedPkcs8 if !is_encrypted_pkcs8(der_bytes) => {
            return Err(KeyError::Malformed("encrypted PKCS#8 key"));
        }
        KeyFormat::EncryptedPkcs8 | KeyFormat::LegacyEncrypted => None,
        KeyFormat::Pkcs1 => {
            Some(pkcs1_public(der_bytes).ok_or(KeyError::Malformed("PKCS#1 RSA key"))?)
        }
        KeyFormat::Sec1 => {
            Some(sec1_public(der_bytes, None).ok_or(KeyError::Malformed("SEC1 EC key"))?)
        }
        KeyFormat::Pkcs8 => Some(pkcs8_public(der_bytes).ok_or(KeyError::Malformed("PKCS#8 key"))?),
    };
    Ok(KeyInfo {
        format,
        encoding: Encoding::Pem,
        public,
    })
}

/// Reads a DER private key of any supported structure, if `der_bytes` is one.
pub fn from_der(der_bytes: &[u8]) -> Option<KeyInfo> {
    let info = |format, public| {
        Some(KeyInfo {
            format,
            encoding: Encoding::Der,
            public: Some(public),
        })
    };
    if let Some(p) = pkcs8_public(der_bytes) {
        return info(KeyFormat::Pkcs8, p);
    }
    if let Some(p) = pkcs1_public(der_bytes) {
        return info(KeyFormat::Pkcs1, p);
    }
    if let Some(p) = sec1_public(der_bytes, None) {
        return info(KeyFormat::Sec1, p);
    }
    is_encrypted_pkcs8(der_bytes).then_some(KeyInfo {
        format: KeyFormat::EncryptedPkcs8,
        encoding: Encoding::Der,
        public: None,
    })
}

/// Whether `der_bytes` is an EncryptedPrivateKeyInfo: SEQ { AlgorithmIdentifier, OCTET STRING }.
/// The scheme is not interpreted (certrenewd never decrypts), so any cipher is recognised.
fn is_encrypted_pkcs8(der_bytes: &[u8]) -> bool {
    let shape = |r: &mut SliceReader<'_>| {
        r.sequence(|r| {
            AlgorithmIdentifierRef::decode(r)?;
            <&OctetStringRef>::decode(r).map(drop)
        })
    };
    SliceReader::new(der_bytes)
        .and_then(|mut r| {
            shape(&mut r)?;
            r.finish()
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_give_the_same_public_key_as_their_certificates() {
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ED25519,
        ] {
            let kp = rcgen::KeyPair::generate_for(alg).unwrap();
            let info = from_der(&kp.serialize_der()).unwrap();
            assert_eq!(info.format, KeyFormat::Pkcs8);
            let public = info.public.unwrap();
            assert_eq!(public.raw, kp.public_key_raw(), "{alg:?}");
            let from_spki = spki(&rcgen::PublicKeyData::subject_public_key_info(&kp)).unwrap();
            assert_eq!(from_spki, public);
        }
    }

    #[test]
    fn garbage_is_not_a_key() {
        assert!(from_der(&[]).is_none());
        assert!(from_der(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_none());
        assert!(from_pem("CERTIFICATE", &[], &[]).is_err());
        assert!(from_pem("RSA PRIVATE KEY", &[], &[0x30, 0x00]).is_err());
    }

    #[test]
    fn encrypted_pkcs8_is_recognised_whatever_its_cipher() {
        use crate::format::der::{self, tag};
        // pbeWithSHAAnd3-KeyTripleDES-CBC (PKCS#12), which no PKCS#5 parser knows.
        let pbe = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x01, 0x03];
        let params = der::wrap_all(
            tag::SEQUENCE,
            &[&der::wrap(tag::OCTET_STRING, &[1; 8]), &[2, 1, 1]],
        );
        let alg = der::wrap_all(tag::SEQUENCE, &[&der::wrap(tag::OID, &pbe), &params]);
        let key = der::wrap_all(
            tag::SEQUENCE,
            &[&alg, &der::wrap(tag::OCTET_STRING, &[7; 32])],
        );
        let info = from_der(&key).unwrap();
        assert_eq!(info.format, KeyFormat::EncryptedPkcs8);
        assert!(info.encrypted() && info.public.is_none());
        assert!(from_pem("ENCRYPTED PRIVATE KEY", &[], &key).is_ok());
        assert!(from_pem("ENCRYPTED PRIVATE KEY", &[], &key[..key.len() - 1]).is_err());
    }

    #[test]
    fn rsa_bit_length_counts_from_the_top_bit() {
        assert_eq!(rsa_bits(&[0x00, 0x80, 0, 0]), 24);
        assert_eq!(rsa_bits(&[0x01, 0xff]), 9);
    }
}
