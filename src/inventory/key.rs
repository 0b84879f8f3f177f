//! Private and public keys: which format a key file is in, which algorithm, and the public
//! key it belongs to — read from the key's own structure, without loading it for signing.

use crate::der::{self, Tlv, oid, tag};

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

fn curve(t: &Tlv<'_>) -> KeyAlg {
    if t.is_oid(&oid::P256) {
        KeyAlg::EcP256
    } else if t.is_oid(&oid::P384) {
        KeyAlg::EcP384
    } else if t.is_oid(&oid::P521) {
        KeyAlg::EcP521
    } else {
        KeyAlg::Other(format!("EC curve {:02x?}", t.content))
    }
}

fn rsa_bits(modulus: &[u8]) -> usize {
    let m: &[u8] = {
        let skip = modulus.iter().take_while(|&&b| b == 0).count();
        &modulus[skip..]
    };
    match m.first() {
        Some(&b) => (m.len() - 1) * 8 + (8 - b.leading_zeros() as usize),
        None => 0,
    }
}

/// Reads a SubjectPublicKeyInfo.
pub fn spki(der_bytes: &[u8]) -> Option<PublicKey> {
    let (seq, _) = der::expect(der_bytes, tag::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let [alg, bits, ..] = parts.as_slice() else {
        return None;
    };
    let alg_parts = der::children(alg.content)?;
    let alg_id = alg_parts.first()?;
    if bits.tag != tag::BIT_STRING || bits.content.is_empty() {
        return None;
    }
    let raw = bits.content[1..].to_vec();
    let alg = if alg_id.is_oid(&oid::RSA_ENCRYPTION) {
        let (rsa, _) = der::expect(&raw, tag::SEQUENCE)?;
        let (n, _) = der::expect(rsa.content, tag::INTEGER)?;
        KeyAlg::Rsa(rsa_bits(n.content))
    } else if alg_id.is_oid(&oid::EC_PUBLIC_KEY) {
        curve(alg_parts.get(1)?)
    } else if alg_id.is_oid(&oid::ED25519) {
        KeyAlg::Ed25519
    } else {
        KeyAlg::Other(format!("{:02x?}", alg_id.content))
    };
    Some(PublicKey { alg, raw })
}

fn pkcs1_public(der_bytes: &[u8]) -> Option<PublicKey> {
    let (seq, _) = der::expect(der_bytes, tag::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let [version, n, e, _d, ..] = parts.as_slice() else {
        return None;
    };
    if version.tag != tag::INTEGER || n.tag != tag::INTEGER || e.tag != tag::INTEGER {
        return None;
    }
    Some(PublicKey {
        alg: KeyAlg::Rsa(rsa_bits(n.content)),
        raw: der::wrap_all(tag::SEQUENCE, &[n.raw, e.raw]),
    })
}

/// SEC1 ECPrivateKey; `outer_curve` comes from PKCS#8 parameters when wrapped.
fn sec1_public(der_bytes: &[u8], outer_curve: Option<KeyAlg>) -> Option<PublicKey> {
    let (seq, _) = der::expect(der_bytes, tag::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let version = parts.first()?;
    let private = parts.get(1)?;
    if version.tag != tag::INTEGER || version.content != [1] || private.tag != tag::OCTET_STRING {
        return None;
    }
    let mut alg = outer_curve;
    let mut public = None;
    for p in &parts[2..] {
        match p.tag {
            tag::CTX0 => alg = Some(curve(&der::read(p.content)?.0)),
            tag::CTX1 => {
                let (bits, _) = der::expect(p.content, tag::BIT_STRING)?;
                public = bits.content.get(1..).map(<[u8]>::to_vec);
            }
            _ => {}
        }
    }
    let alg = alg?;
    let raw = match public {
        Some(raw) => raw,
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
    let (seq, _) = der::expect(der_bytes, tag::SEQUENCE)?;
    let parts = der::children(seq.content)?;
    let [version, alg, private, rest @ ..] = parts.as_slice() else {
        return None;
    };
    if version.tag != tag::INTEGER || alg.tag != tag::SEQUENCE || private.tag != tag::OCTET_STRING {
        return None;
    }
    let alg_parts = der::children(alg.content)?;
    let alg_id = alg_parts.first()?;
    if alg_id.is_oid(&oid::RSA_ENCRYPTION) {
        pkcs1_public(private.content)
    } else if alg_id.is_oid(&oid::EC_PUBLIC_KEY) {
        sec1_public(private.content, alg_parts.get(1).map(curve))
    } else if alg_id.is_oid(&oid::ED25519) {
        if let Some(p) = rest.iter().find(|p| p.tag == 0x81 || p.tag == tag::CTX1) {
            let bits = if p.tag == 0x81 {
                p.content
            } else {
                der::expect(p.content, tag::BIT_STRING)?.0.content
            };
            return Some(PublicKey {
                alg: KeyAlg::Ed25519,
                raw: bits.get(1..)?.to_vec(),
            });
        }
        let (seed, _) = der::expect(private.content, tag::OCTET_STRING)?;
        let kp = aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(seed.content).ok()?;
        use aws_lc_rs::signature::KeyPair;
        Some(PublicKey {
            alg: KeyAlg::Ed25519,
            raw: kp.public_key().as_ref().to_vec(),
        })
    } else {
        Some(PublicKey {
            alg: KeyAlg::Other(format!("{:02x?}", alg_id.content)),
            raw: Vec::new(),
        })
    }
}

/// Whether a PEM label is a private key's.
pub fn is_private_key_label(label: &str) -> bool {
    matches!(
        label,
        "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "ENCRYPTED PRIVATE KEY"
    )
}

/// Reads a private key PEM block.
pub fn from_pem(
    label: &str,
    headers: &[(String, String)],
    der_bytes: &[u8],
) -> Result<KeyInfo, String> {
    let legacy_encrypted = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("Proc-Type") && v.contains("ENCRYPTED"));
    let format = match label {
        _ if legacy_encrypted => KeyFormat::LegacyEncrypted,
        "ENCRYPTED PRIVATE KEY" => KeyFormat::EncryptedPkcs8,
        "RSA PRIVATE KEY" => KeyFormat::Pkcs1,
        "EC PRIVATE KEY" => KeyFormat::Sec1,
        "PRIVATE KEY" => KeyFormat::Pkcs8,
        other => return Err(format!("not a private key ({other})")),
    };
    let public = match format {
        KeyFormat::EncryptedPkcs8 if !is_encrypted_pkcs8(der_bytes) => {
            return Err("malformed encrypted PKCS#8 key".into());
        }
        KeyFormat::EncryptedPkcs8 | KeyFormat::LegacyEncrypted => None,
        KeyFormat::Pkcs1 => Some(pkcs1_public(der_bytes).ok_or("malformed PKCS#1 RSA key")?),
        KeyFormat::Sec1 => Some(sec1_public(der_bytes, None).ok_or("malformed SEC1 EC key")?),
        KeyFormat::Pkcs8 => Some(pkcs8_public(der_bytes).ok_or("malformed PKCS#8 key")?),
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

/// Whether `der_bytes` is shaped like an EncryptedPrivateKeyInfo:
/// SEQ { SEQ { OID pbes2 ... }, OCTET STRING }.
fn is_encrypted_pkcs8(der_bytes: &[u8]) -> bool {
    let shape = || {
        let (seq, _) = der::expect(der_bytes, tag::SEQUENCE)?;
        let parts = der::children(seq.content)?;
        match parts.as_slice() {
            [alg, data] if alg.tag == tag::SEQUENCE && data.tag == tag::OCTET_STRING => {
                Some(der::children(alg.content)?.first()?.tag == tag::OID)
            }
            _ => None,
        }
    };
    shape() == Some(true)
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
    fn rsa_bit_length_counts_from_the_top_bit() {
        assert_eq!(rsa_bits(&[0x00, 0x80, 0, 0]), 24);
        assert_eq!(rsa_bits(&[0x01, 0xff]), 9);
    }
}
