//! Reading one file the walk found and telling what it holds: certificates (PEM or DER), a
//! private key, something else, or a file that cannot be read; never more than
//! `MAX_FILE_SIZE`, never a panic.

use std::path::Path;

use super::walk::io_reason;
use super::{Encoding, MAX_FILE_SIZE};
use crate::format::cert::CertFacts;
use crate::format::key::{self, KeyInfo};
use crate::format::pem;
use crate::fsutil::{self, Follow, ReadError};

/// What one file turned out to hold.
pub(super) enum Content {
    /// Certificates (and possibly a key in the same file), with blocks that failed.
    Certs {
        certs: Vec<CertFacts>,
        keys: Vec<KeyInfo>,
        errors: Vec<String>,
        encoding: Encoding,
    },
    /// A private key.
    Key(KeyInfo),
    /// Nothing of ours (a public key, parameters).
    Ignored,
    /// Something else that is not a certificate (a CSR in a `.pem`), with what it is.
    Skip(String),
    /// Named like a certificate or key but cannot be read or parsed: unreadable, empty,
    /// truncated, corrupt. An error of the pass: it may be the certificate that expires.
    Bad(String),
}

/// Reads and classifies one file; never panics, never reads more than `MAX_FILE_SIZE`.
pub(super) fn read_file(path: &Path, follow: Follow) -> Content {
    let data = match read_bounded(path, follow) {
        Ok(d) => d,
        Err(e) => return Content::Bad(unreadable(path, &e)),
    };
    if data.iter().all(|b| b.is_ascii_whitespace()) {
        return Content::Bad("empty file".into());
    }
    if pem::is_pem(&data) {
        classify_pem(&data)
    } else {
        classify_der(data)
    }
}

/// The file's bytes, or why they cannot be had: through [`fsutil::read_regular`], so a
/// FIFO, a device or a symlink put in the place of a file listed as regular (`follow`
/// `No`) is refused, never waited on or followed.
pub(super) fn read_bounded(path: &Path, follow: Follow) -> Result<Vec<u8>, ReadError> {
    fsutil::read_regular(path, MAX_FILE_SIZE, follow)
}

/// Why `path` could not be read, as the scan reports it.
pub(super) fn unreadable(path: &Path, e: &ReadError) -> String {
    match e {
        ReadError::Io(e) => io_reason(path, e),
        other => other.to_string(),
    }
}

fn classify_pem(data: &[u8]) -> Content {
    let mut certs = Vec::new();
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    let mut other_labels = Vec::new();
    for (n, block) in pem::blocks(data).into_iter().enumerate() {
        match block {
            Ok(b) if b.label == "CERTIFICATE" || b.label == "X509 CERTIFICATE" => {
                match CertFacts::parse(b.der) {
                    Ok(c) => certs.push(c),
                    Err(e) => errors.push(format!("PEM block {}: {e}", n + 1)),
                }
            }
            Ok(b) if key::is_private_key_label(&b.label) => {
                match key::from_pem(&b.label, &b.headers, &b.der) {
                    Ok(k) => keys.push(k),
                    Err(e) => errors.push(format!("PEM block {}: not a private key: {e}", n + 1)),
                }
            }
            Ok(b) => other_labels.push(b.label),
            // Named for what the block says it is: a truncated key is a corrupt key.
            Err(e) => errors.push(format!(
                "{}: PEM block {}{}: {}",
                match e.label.as_str() {
                    l if key::is_private_key_label(l) => "not a usable private key",
                    "" | "CERTIFICATE" | "X509 CERTIFICATE" => "not a certificate",
                    _ => "not a certificate or key",
                },
                n + 1,
                if e.label.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", e.label)
                },
                e.reason
            )),
        }
    }
    if !certs.is_empty() {
        // Exact sizes: these lists outlive the reading thread's other allocations.
        certs.shrink_to_fit();
        keys.shrink_to_fit();
        return Content::Certs {
            certs,
            keys,
            errors,
            encoding: Encoding::Pem,
        };
    }
    if let Some(k) = keys.into_iter().next() {
        return Content::Key(k);
    }
    if let Some(e) = errors.into_iter().next() {
        return Content::Bad(e);
    }
    if other_labels
        .iter()
        .all(|l| l == "PUBLIC KEY" || l == "RSA PUBLIC KEY" || l.contains("PARAMETERS"))
    {
        return Content::Ignored;
    }
    Content::Skip(format!(
        "not a certificate: holds only {}",
        other_labels.join(", ")
    ))
}

fn classify_der(mut data: Vec<u8>) -> Content {
    data.shrink_to_fit(); // kept as the certificate's DER
    if let Some(k) = key::from_der(&data) {
        return Content::Key(k);
    }
    match CertFacts::parse(data) {
        Ok(c) => Content::Certs {
            certs: vec![c],
            keys: Vec::new(),
            errors: Vec::new(),
            encoding: Encoding::Der,
        },
        Err(_) => Content::Bad(
            "not a certificate: neither a PEM file nor a DER certificate or key".into(),
        ),
    }
}
