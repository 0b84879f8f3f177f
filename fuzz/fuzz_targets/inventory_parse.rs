//! Arbitrary bytes through every parsing entry point the inventory uses on a file's
//! contents, as its (private) classifier does: PEM blocks, then each block as a
//! certificate or a private key by its label; the whole input as a DER key, a DER
//! certificate and a SubjectPublicKeyInfo; the signature check of whatever parsed; the
//! whole input as a kubeconfig file (YAML).
#![no_main]

use certrenewd::format::cert::{self, CertFacts};
use certrenewd::format::kubeconfig::Kubeconfig;
use certrenewd::format::{key, pem};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for block in pem::blocks(data).into_iter().flatten() {
        if (block.label == "CERTIFICATE" || block.label == "X509 CERTIFICATE")
            && let Ok(c) = CertFacts::parse(block.der.clone())
        {
            let _ = c.self_signed();
        }
        if key::is_private_key_label(&block.label) {
            let _ = key::from_pem(&block.label, &block.headers, &block.der);
        }
        let _ = key::from_der(&block.der);
    }
    let _ = key::from_der(data);
    let _ = key::spki(data);
    let _ = cert::signed_parts(data);
    if let Ok(c) = CertFacts::parse(data.to_vec()) {
        let _ = c.self_signed();
        let _ = cert::verify_signature(&c.der, &c.public_key);
    }
    let _ = Kubeconfig::parse(data);
});
