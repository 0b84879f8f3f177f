//! Private keys for signing (CA keys) and for rotation (new leaf keys in the old file format).

use std::path::Path;

use anyhow::{Context, bail};
use der::{Decode, Encode};
use pkcs8::PrivateKeyInfoRef;
use rcgen::KeyPair;
use sec1::EcPrivateKey;

use crate::format::key::{Encoding, KeyAlg, KeyFormat};
use crate::format::pem;

/// Reads the private key in `path` (PEM or DER, PKCS#1/PKCS#8/SEC1) for signing.
pub fn load(path: &Path) -> anyhow::Result<KeyPair> {
    let data =
        crate::fsutil::read(path).with_context(|| format!("reading key {}", path.display()))?;
    let der_bytes = if pem::is_pem(&data) {
        pem::blocks(&data)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| crate::format::key::is_private_key_label(&b.label))
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
    let info = PrivateKeyInfoRef::from_der(&pkcs8).map_err(generator_error)?;
    let (label, der_bytes) = match format {
        // PKCS#8 v1 (RFC 5208): the generator writes Ed25519 keys as v2 (RFC 5958, with the
        // public key), which OpenSSL 3.0 cannot read; the public key is derivable.
        KeyFormat::Pkcs8 => (
            "PRIVATE KEY",
            PrivateKeyInfoRef::new(info.algorithm, info.private_key).to_der(),
        ),
        KeyFormat::Pkcs1 => ("RSA PRIVATE KEY", Ok(info.private_key.as_bytes().to_vec())),
        // A complete ECPrivateKey: with its curve and public key, as openssl writes it.
        KeyFormat::Sec1 => {
            let sec1 =
                EcPrivateKey::from_der(info.private_key.as_bytes()).map_err(generator_error)?;
            let curve = info.algorithm.parameters_oid().map_err(generator_error)?;
            let full = EcPrivateKey {
                parameters: Some(curve.into()),
                public_key: Some(kp.public_key_raw()),
                ..sec1
            };
            ("EC PRIVATE KEY", full.to_der())
        }
        KeyFormat::EncryptedPkcs8 | KeyFormat::LegacyEncrypted => {
            bail!("cannot write an encrypted key")
        }
    };
    let der_bytes = der_bytes.map_err(generator_error)?;
    Ok(match encoding {
        Encoding::Pem => pem::encode(label, &der_bytes).into_bytes(),
        Encoding::Der => der_bytes,
    })
}

fn generator_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("malformed key from the key generator: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::key;

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
