//! The file formats certrenewd reads and writes, shared by the inventory (which reads them)
//! and the renewer (which writes them back): DER with byte spans, PEM blocks, X.509
//! certificates, private and public keys, kubeconfig YAML, static pod manifests.

pub mod cert;
pub mod der;
pub mod flags;
pub mod key;
pub mod kubeconfig;
pub mod manifest;
pub mod pem;
