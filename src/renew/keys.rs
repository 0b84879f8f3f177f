//! Private keys for signing (CA keys) and for rotation (new leaf keys in the old file format).

use std::path::Path;

use anyhow::{Context, bail};
use rcgen::KeyPair;

use crate::der::{self, tag};
use crate::inventory::{Encoding, KeyAlg, KeyFormat, pem};

/// Reads the private key in `path` (PEM or DER, PKCS#1/PKCS#8/SEC1) for signing.
pub fn load(path: &Path) -> anyhow::Result<KeyPair> {
    let data = std::fs::read(path).with_context(|| format!("reading key {}", path.display()))?;
    let der_bytes = if pem::is_pem(&data) {
        pem::blocks(&data)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| crate::inventory::key::is_private_key_label(&b.label))
            .map(|b| b.der)
            .with_context(|| format!("no private key in {}", path.display()))?
    } else {
        data
    };
    KeyPair::try_from(der_bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("cannot load key {}: {e}", path.display()))
}

/// A new key of the same algorithm and size.
pub fn generate(alg: &KeyAlg) -> anyhow::Result<KeyPair> {
    let kp = match alg {
        KeyAlg::Rsa(bits) => {
            let size = match bits {
                2048 => rcgen::RsaKeySize::_2048,
                3072 => rcgen::RsaKeySize::_3072,
                4096 => rcgen::RsaKeySize::_4096,
                other => bail!(
                    "cannot generate a new RSA-{other} key (2048, 3072 and 4096 are supported); set rotate_keys = false"
                ),
            };
            KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size)
        }
        KeyAlg::EcP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
        KeyAlg::EcP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
        KeyAlg::EcP521 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512),
        KeyAlg::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519),
        KeyAlg::Other(_) => bail!("cannot generate a new {alg}; set rotate_keys = false"),
    };
    kp.map_err(|e| anyhow::anyhow!("generating a new {alg}: {e}"))
}

/// The key's bytes as they go into a file of `format` and `encoding` (secret material).
pub fn encode(kp: &KeyPair, format: KeyFormat, encoding: Encoding) -> anyhow::Result<Vec<u8>> {
    let pkcs8 = kp.serialize_der();
    let (label, der_bytes) = match format {
        KeyFormat::Pkcs8 => ("PRIVATE KEY", pkcs8_v1(&pkcs8)?),
        KeyFormat::Pkcs1 => ("RSA PRIVATE KEY", pkcs8_inner(&pkcs8)?.1),
        KeyFormat::Sec1 => (
            "EC PRIVATE KEY",
            sec1_from_pkcs8(&pkcs8, kp.public_key_raw())?,
        ),
        KeyFormat::EncryptedPkcs8 | KeyFormat::LegacyEncrypted => {
            bail!("cannot write an encrypted key")
        }
    };
    Ok(match encoding {
        Encoding::Pem => pem::encode(label, &der_bytes).into_bytes(),
        Encoding::Der => der_bytes,
    })
}

/// PKCS#8 v1 (RFC 5208): the generator writes Ed25519 keys as v2 (RFC 5958, version 1 with
/// the public key in `[1]`), which OpenSSL 3.0 cannot read; the public key is derivable.
fn pkcs8_v1(pkcs8: &[u8]) -> anyhow::Result<Vec<u8>> {
    let parse = || {
        let (seq, _) = der::expect(pkcs8, tag::SEQUENCE)?;
        let parts = der::children(seq.content)?;
        let [version, alg, private, rest @ ..] = parts.as_slice() else {
            return None;
        };
        if version.tag != tag::INTEGER || version.content != [1] {
            return Some(pkcs8.to_vec());
        }
        let mut out: Vec<&[u8]> = vec![&[tag::INTEGER, 1, 0], alg.raw, private.raw];
        out.extend(rest.iter().filter(|p| p.tag == tag::CTX0).map(|p| p.raw));
        Some(der::wrap_all(tag::SEQUENCE, &out))
    };
    parse().context("malformed PKCS#8 key from the key generator")
}

/// The algorithm parameters and inner private key of a PKCS#8 structure.
fn pkcs8_inner(pkcs8: &[u8]) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let parse = || {
        let (seq, _) = der::expect(pkcs8, tag::SEQUENCE)?;
        let parts = der::children(seq.content)?;
        let alg = parts.get(1)?;
        let private = parts.get(2).filter(|p| p.tag == tag::OCTET_STRING)?;
        let alg_parts = der::children(alg.content)?;
        let params = alg_parts.get(1).map(|p| p.raw.to_vec()).unwrap_or_default();
        Some((params, private.content.to_vec()))
    };
    parse().context("malformed PKCS#8 key from the key generator")
}

/// A complete SEC1 ECPrivateKey (with curve and public key) from a PKCS#8 EC key.
fn sec1_from_pkcs8(pkcs8: &[u8], public: &[u8]) -> anyhow::Result<Vec<u8>> {
    let (curve_oid, inner) = pkcs8_inner(pkcs8)?;
    let parse = || {
        let (seq, _) = der::expect(&inner, tag::SEQUENCE)?;
        let parts = der::children(seq.content)?;
        Some((parts.first()?.raw.to_vec(), parts.get(1)?.raw.to_vec()))
    };
    let (version, private) = parse().context("malformed EC key from the key generator")?;
    Ok(der::wrap_all(
        tag::SEQUENCE,
        &[
            &version,
            &private,
            &der::wrap(tag::CTX0, &curve_oid),
            &der::wrap(tag::CTX1, &der::bit_string(public)),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::key;

    #[test]
    fn rotated_keys_keep_their_file_format_and_public_key() {
        for (alg, format) in [
            (KeyAlg::EcP256, KeyFormat::Sec1),
            (KeyAlg::EcP384, KeyFormat::Sec1),
            (KeyAlg::EcP256, KeyFormat::Pkcs8),
            (KeyAlg::Ed25519, KeyFormat::Pkcs8),
            (KeyAlg::Rsa(2048), KeyFormat::Pkcs1),
        ] {
            let kp = generate(&alg).unwrap();
            let pem_bytes = encode(&kp, format, Encoding::Pem).unwrap();
            let block = pem::blocks(&pem_bytes).remove(0).unwrap();
            let info = key::from_pem(&block.label, &block.headers, &block.der).unwrap();
            assert_eq!(info.format, format, "{alg}");
            let public = info.public.unwrap();
            assert_eq!(public.alg, alg);
            assert_eq!(public.raw, kp.public_key_raw(), "{alg} {format:?}");
            // It loads back for signing.
            let der_bytes = encode(&kp, format, Encoding::Der).unwrap();
            assert_eq!(
                KeyPair::try_from(der_bytes.as_slice())
                    .unwrap()
                    .public_key_raw(),
                kp.public_key_raw()
            );
        }
    }
}
