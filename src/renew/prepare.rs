//! Preparing one renewal: the file as it is on disk (still what was scanned), its new
//! bytes, and where they go (a symlink is followed only inside the watches).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use time::OffsetDateTime;

use super::{RenewOptions, keys, sign::sign};
use crate::format::key::Encoding;
use crate::format::pem;
use crate::fsutil::FileMeta;
use crate::inventory::{Inventory, KeyLink};
use crate::plan::Plan;

/// New file contents ready to install.
pub(super) struct Prepared {
    pub(super) cert: usize,
    pub(super) cert_target: PathBuf,
    pub(super) cert_bytes: Vec<u8>,
    pub(super) cert_meta: FileMeta,
    pub(super) key: Option<(PathBuf, Vec<u8>, FileMeta)>,
    pub(super) serial: String,
    pub(super) not_before: OffsetDateTime,
    pub(super) not_after: OffsetDateTime,
    /// A new key was generated (written to `key`, or inside `cert_bytes` for a kubeconfig).
    pub(super) rotated: bool,
    /// Further certificates renewed by the same file (other users of a kubeconfig).
    pub(super) also: Vec<(usize, String, OffsetDateTime, OffsetDateTime)>,
    /// kubelet's way: `cert_target` is its `-current.pem` symlink, swapped to a new file.
    pub(super) link: Option<super::kubelet_link::Swap>,
}

impl Prepared {
    /// Every certificate these bytes renew, with its new serial, notBefore and notAfter.
    pub(super) fn renewed(
        &self,
    ) -> impl Iterator<Item = (usize, &str, OffsetDateTime, OffsetDateTime)> {
        let first = (
            self.cert,
            self.serial.as_str(),
            self.not_before,
            self.not_after,
        );
        std::iter::once(first).chain(
            self.also
                .iter()
                .map(|(i, s, b, a)| (*i, s.as_str(), *b, *a)),
        )
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
    ca_keys: &HashMap<PathBuf, anyhow::Result<rcgen::KeyPair>>,
    opts: &RenewOptions,
    plan: &Plan,
) -> anyhow::Result<Prepared> {
    let c = &inv.certs[i];
    // A CA keeps its key, so an intermediate's own key need not be on the node.
    let key_file = match c.facts.is_ca {
        true => inv.matched_key(c),
        false => Some(inv.matched_key(c).context("key missing")?),
    };
    let (cert_target, on_disk) = as_scanned(c, opts)?;
    let add_names = plan.items.get(i).map_or(&[][..], |it| &it.add_names[..]);
    let lifetime = planned_lifetime(plan, i)?;
    let (new, new_key) = sign(inv, c, lifetime, add_names, ca_keys, opts, plan)?;
    let mut cert_bytes = match c.encoding {
        Encoding::Der => new.der.clone(),
        Encoding::Pem => replace_first_pem_cert(&on_disk, &new.der),
    };
    let rotated = new_key.is_some();
    let key = match new_key {
        // A combined file: the new key takes the old one's place in it; one file, one rename.
        Some(kp) if matches!(c.key, KeyLink::SameFile(_)) => {
            let key_file = key_file.context("key missing")?;
            let bytes = keys::encode(&kp, key_file.info.format, Encoding::Pem)?;
            cert_bytes = replace_first_pem_key(&cert_bytes, &bytes)
                .context("the combined file lost its key block since it was scanned")?;
            None
        }
        Some(kp) => {
            let key_file = key_file.context("key missing")?;
            let bytes = keys::encode(&kp, key_file.info.format, key_file.info.encoding)?;
            let target = resolve_target(&key_file.path, &opts.roots)?;
            let meta = new_key_meta(&target)?;
            Some((target, bytes, meta))
        }
        None => None,
    };
    let cert_meta = FileMeta::of(&cert_target)?;
    // kubelet's pair in use: a new dated file and its symlink swapped, the old pair kept.
    let kubelet = crate::inventory::kubelet::is_current_link(&c.path, &cert_target);
    let (cert_target, link) = match kubelet && matches!(c.key, KeyLink::SameFile(_)) {
        true => {
            let swap = super::kubelet_link::Swap::plan(&c.path, chrono::Local::now())?;
            (c.path.clone(), Some(swap))
        }
        false => (cert_target, None),
    };
    Ok(Prepared {
        cert: i,
        cert_meta,
        cert_target,
        link,
        cert_bytes,
        rotated,
        key,
        serial: new.serial,
        not_before: new.not_before,
        not_after: new.not_after,
        also: Vec::new(),
    })
}

/// The real file of `c` and its bytes, which must still hold what was scanned.
pub(super) fn as_scanned(
    c: &crate::inventory::Cert,
    opts: &RenewOptions,
) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    let target = resolve_target(&c.path, &opts.roots)?;
    let on_disk =
        crate::fsutil::read(&target).with_context(|| format!("reading {}", target.display()))?;
    if !first_cert_is(&on_disk, c.encoding, &c.facts.der) {
        bail!(
            "{} changed since it was scanned; it will be looked at again next pass",
            c.path.display()
        );
    }
    Ok((target, on_disk))
}

/// A new key's owner, group and mode: the old key's (a service group that read the old key
/// reads the new one), less any access for others.
pub(super) fn new_key_meta(old_key: &Path) -> anyhow::Result<FileMeta> {
    let meta = FileMeta::of(old_key)?;
    Ok(FileMeta {
        mode: meta.mode & 0o770,
        ..meta
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

/// The file with its first private key block replaced by `new_key` (a whole PEM block);
/// everything else kept byte for byte, in its order. `None` when it holds no key block.
pub(super) fn replace_first_pem_key(file: &[u8], new_key: &[u8]) -> Option<Vec<u8>> {
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay.get(from..)?
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let mut from = 0;
    while let Some(begin) = find(file, b"-----BEGIN ", from) {
        let label_end = find(file, b"-----", begin + 11)?;
        let label = String::from_utf8_lossy(&file[begin + 11..label_end]).into_owned();
        let end_line = format!("-----END {label}-----");
        let end = find(file, end_line.as_bytes(), label_end)? + end_line.len();
        if crate::format::key::is_private_key_label(&label) {
            let mut rest = &file[end..];
            if rest.first() == Some(&b'\r') {
                rest = &rest[1..];
            }
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
            return Some([&file[..begin], new_key, rest].concat());
        }
        from = end;
    }
    None
}

/// The file with its first certificate block replaced; other blocks (a chain, a key) kept
/// as they were, in their order. Text before it is dropped unless it holds PEM blocks (a
/// key first in a bundle): `openssl x509 -text` output describes the old certificate.
pub(super) fn replace_first_pem_cert(file: &[u8], new_der: &[u8]) -> Vec<u8> {
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let begin = [
        &b"-----BEGIN CERTIFICATE-----"[..],
        b"-----BEGIN X509 CERTIFICATE-----",
    ]
    .iter()
    .filter_map(|b| find(file, b))
    .min()
    .unwrap_or(0);
    let prefix = &file[..begin];
    let mut out = match pem::is_pem(prefix) {
        true => prefix.to_vec(),
        false => Vec::new(),
    };
    out.extend_from_slice(pem::encode("CERTIFICATE", new_der).as_bytes());
    let text = &file[begin..];
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

/// The lifetime the plan decided for certificate `i`.
pub(super) fn planned_lifetime(plan: &Plan, i: usize) -> anyhow::Result<time::Duration> {
    plan.items
        .get(i)
        .and_then(|item| item.lifetime)
        .map(|l| l.span)
        .context("the plan decided no lifetime for it (no CA found)")
}
