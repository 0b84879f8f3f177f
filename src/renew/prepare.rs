//! Preparing one renewal: the file as it is on disk (still what was scanned), its new
//! bytes, and where they go (a symlink is followed only inside the watches).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use time::OffsetDateTime;

use super::{RenewOptions, keys, sign::sign};
use crate::fsutil::FileMeta;
use crate::inventory::{Encoding, Inventory, pem};

/// New file contents ready to install.
pub(super) struct Prepared {
    pub(super) cert: usize,
    pub(super) cert_target: PathBuf,
    pub(super) cert_bytes: Vec<u8>,
    pub(super) cert_meta: FileMeta,
    pub(super) key: Option<(PathBuf, Vec<u8>, FileMeta)>,
    pub(super) serial: String,
    pub(super) not_after: OffsetDateTime,
    /// A new key was generated (written to `key`, or inside `cert_bytes` for a kubeconfig).
    pub(super) rotated: bool,
    /// Further certificates renewed by the same file (other users of a kubeconfig).
    pub(super) also: Vec<(usize, String, OffsetDateTime)>,
}

impl Prepared {
    /// Every certificate these bytes renew, with its new serial and notAfter.
    pub(super) fn renewed(&self) -> impl Iterator<Item = (usize, &str, OffsetDateTime)> {
        std::iter::once((self.cert, self.serial.as_str(), self.not_after))
            .chain(self.also.iter().map(|(i, s, t)| (*i, s.as_str(), *t)))
    }
}

/// The real file to write for `path`: a symlink is followed only to a file inside a watch.
pub(super) fn resolve_target(path: &Path, roots: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let inside = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|r| real.starts_with(&r));
    if !inside {
        bail!(
            "{} resolves to {}, outside the watched directories: not written",
            path.display(),
            real.display()
        );
    }
    Ok(real)
}

pub(super) fn prepare(
    inv: &Inventory,
    i: usize,
    ca_keys: &HashMap<PathBuf, Result<rcgen::KeyPair, String>>,
    opts: &RenewOptions,
    now: OffsetDateTime,
) -> anyhow::Result<Prepared> {
    let c = &inv.certs[i];
    let key_file = inv.matched_key(c).context("key missing")?;
    let cert_target = resolve_target(&c.path, &opts.roots)?;
    // The file must still hold what was scanned.
    let on_disk = std::fs::read(&cert_target)
        .with_context(|| format!("reading {}", cert_target.display()))?;
    if !first_cert_is(&on_disk, c.encoding, &c.facts.der) {
        bail!(
            "{} changed since it was scanned; it will be looked at again next pass",
            c.path.display()
        );
    }
    let (new, new_key) = sign(inv, c, ca_keys, opts, now)?;
    let cert_bytes = match c.encoding {
        Encoding::Der => new.der.clone(),
        Encoding::Pem => replace_first_pem_cert(&on_disk, &new.der),
    };
    let key = match new_key {
        Some(kp) => {
            let bytes = keys::encode(&kp, key_file.info.format, key_file.info.encoding)?;
            let target = resolve_target(&key_file.path, &opts.roots)?;
            let meta = FileMeta::of(&target)?;
            Some((
                target,
                bytes,
                // The old key's owner, group and mode (a service group that read the old key
                // reads the new one), less any access for others.
                FileMeta {
                    mode: meta.mode & 0o770,
                    ..meta
                },
            ))
        }
        None => None,
    };
    Ok(Prepared {
        cert: i,
        cert_meta: FileMeta::of(&cert_target)?,
        cert_target,
        cert_bytes,
        rotated: key.is_some(),
        key,
        serial: new.serial,
        not_after: new.not_after,
        also: Vec::new(),
    })
}

pub(super) fn first_cert_is(file: &[u8], encoding: Encoding, der: &[u8]) -> bool {
    match encoding {
        Encoding::Der => file == der,
        Encoding::Pem => pem::blocks(file)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| b.label == "CERTIFICATE" || b.label == "X509 CERTIFICATE")
            .is_some_and(|b| b.der == der),
    }
}

/// The file with its first certificate block replaced; other blocks (a chain) kept as they were.
pub(super) fn replace_first_pem_cert(file: &[u8], new_der: &[u8]) -> Vec<u8> {
    let mut out = pem::encode("CERTIFICATE", new_der).into_bytes();
    let text = file;
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    for end in [
        &b"-----END CERTIFICATE-----"[..],
        b"-----END X509 CERTIFICATE-----",
    ] {
        if let Some(pos) = find(text, end) {
            let mut rest = &text[pos + end.len()..];
            if rest.first() == Some(&b'\r') {
                rest = &rest[1..];
            }
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
            out.extend_from_slice(rest);
            break;
        }
    }
    out
}
