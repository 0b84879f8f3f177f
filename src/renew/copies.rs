//! The copies of a renewed CA. A CA is re-issued in its own file
//! ([`Inventory::ca_primary`]); every other copy of it on the node (a trust bundle, a chain
//! file, the same CA under another name, `certificate-authority-data` in a kubeconfig) is
//! then replaced with the new certificate, everything else in the file byte for byte, a
//! bundle's other certificates in their order.
//!
//! A copy is replaced when it is an older issue of a CA whose own file holds a newer one
//! that verifies. That is decided from the files as they are, at every pass: copies that a
//! crash, a failed write or a roll-back left behind are caught up by the next pass. Old and
//! new issues carry the same key and key identifier, so a node holding both verifies
//! everything at every instant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memchr::memmem;
use time::OffsetDateTime;

use super::kubeconfig::edit::{encode_data, replaceable, same_but_edits, splice};
use super::prepare::resolve_target;
use super::{RenewOptions, pending};
use crate::format::cert::CertFacts;
use crate::format::kubeconfig::{Document, Kubeconfig, decode_data};
use crate::format::pem;
use crate::fsutil::FileMeta;
use crate::inventory::Inventory;

/// A CA's own file as it is now: what its copies are replaced with.
struct Current {
    path: PathBuf,
    facts: CertFacts,
    /// Renewed by the pass a dry run shows: every copy of it is replaced.
    renewing: bool,
}

/// One file holding older copies, with its new bytes.
struct Edit {
    /// As listed.
    path: PathBuf,
    /// The real file written.
    target: PathBuf,
    /// The CA files whose copies it holds.
    cas: Vec<PathBuf>,
    bytes: Vec<u8>,
    meta: FileMeta,
}

/// A file whose copies were replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct Replaced {
    /// The file, as listed.
    pub path: PathBuf,
    /// The CA files whose new certificates it now holds.
    pub cas: Vec<PathBuf>,
    /// Its backup (what a roll-back restores); `None` in a dry run, which writes nothing.
    pub change: Option<pending::Change>,
}

/// What a pass did with the copies of CAs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Copies {
    /// Files whose copies were replaced.
    pub replaced: Vec<Replaced>,
    /// Files whose copies could not be replaced, and why: each an error of the pass.
    pub failed: Vec<(PathBuf, String)>,
}

impl Copies {
    /// The changes made, for the restart stage.
    pub fn changes(&self) -> Vec<pending::Change> {
        self.replaced
            .iter()
            .filter_map(|r| r.change.clone())
            .collect()
    }
}

/// The files a pass would rewrite, with the CA files whose copies each holds: copies of
/// `renewing` (inventory indices of CAs the pass renews) and older copies of every CA. For
/// a dry run: the CAs are taken as scanned, nothing is written.
pub fn would_replace(inv: &Inventory, renewing: &[usize]) -> Copies {
    let currents = (0..inv.certs.len())
        .filter(|&i| inv.ca_primary(i) == Some(i))
        .map(|i| Current {
            path: inv.certs[i].path.clone(),
            facts: inv.certs[i].facts.clone(),
            renewing: renewing.contains(&i),
        })
        .collect();
    let (edits, failed) = edits(inv, &[], currents);
    let replaced = edits
        .into_iter()
        .map(|e| Replaced {
            path: e.path,
            cas: e.cas,
            change: None,
        })
        .collect();
    Copies { replaced, failed }
}

/// Replaces every older copy of a CA on the node with the certificate in the CA's own
/// file, under the pending record and with backups, as renewals are installed: in the
/// backup set of this pass's `renewals` when they made one (one pass, one set).
pub fn refresh(
    inv: &Inventory,
    opts: &RenewOptions,
    now: OffsetDateTime,
    renewals: &[super::RenewOutcome],
) -> Copies {
    let (edits, mut failed) = find(inv, &opts.roots);
    if edits.is_empty() {
        return Copies {
            replaced: Vec::new(),
            failed,
        };
    }
    let mut replaced = Vec::new();
    let set = renewals.iter().find_map(|o| match &o.result {
        super::RenewResult::Renewed { change, .. } => {
            super::backup::set_of(&opts.backup_dir, &change.cert_backup)
        }
        _ => None,
    });
    if let Err(e) = write::install(edits, opts, now, set, &mut replaced, &mut failed) {
        tracing::error!("replacing copies of renewed CAs: {e:#}");
    }
    for r in &replaced {
        tracing::info!(
            path = %r.path.display(),
            "{}: the copy of CA {} replaced with its renewed certificate",
            r.path.display(),
            r.cas.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    Copies { replaced, failed }
}

/// Every CA's own file as it is now, and the files holding older copies of them with
/// their new bytes; what could not be read or rewritten.
fn find(inv: &Inventory, roots: &[PathBuf]) -> (Vec<Edit>, Vec<(PathBuf, String)>) {
    let mut failed = Vec::new();
    let mut currents = Vec::new();
    for (i, c) in inv.certs.iter().enumerate() {
        if inv.ca_primary(i) != Some(i) {
            continue;
        }
        match current(inv, i) {
            Ok(Some(facts)) => currents.push(Current {
                path: c.path.clone(),
                facts,
                renewing: false,
            }),
            Ok(None) => {}
            Err(e) => failed.push((c.path.clone(), format!("{e:#}"))),
        }
    }
    let (edits, more) = edits(inv, roots, currents);
    failed.extend(more);
    (edits, failed)
}

/// The files holding copies of `currents` to replace, with their new bytes; what could not
/// be read or rewritten. `roots` empty: the target is not resolved (a dry run).
fn edits(
    inv: &Inventory,
    roots: &[PathBuf],
    currents: Vec<Current>,
) -> (Vec<Edit>, Vec<(PathBuf, String)>) {
    let mut failed = Vec::new();
    if currents.is_empty() {
        return (Vec::new(), failed);
    }
    // Where copies may be: CAs of the same identity, chain files, kubeconfigs.
    let own: Vec<&Path> = inv
        .certs
        .iter()
        .filter(|c| currents.iter().any(|cur| cur.path == c.path))
        .map(|c| c.real())
        .collect();
    let mut files: BTreeMap<PathBuf, (PathBuf, bool)> = BTreeMap::new();
    for c in inv.certs.iter().filter(|c| c.kubeconfig.is_none()) {
        let holds = c.certs_in_file > 1 || currents.iter().any(|cur| cur.facts.same_ca(&c.facts));
        if holds && !own.contains(&c.real()) {
            files.insert(c.real().to_path_buf(), (c.path.clone(), false));
        }
    }
    for k in &inv.kubeconfigs {
        let real = std::fs::canonicalize(k).unwrap_or_else(|_| k.clone());
        files.insert(real, (k.clone(), true));
    }
    let mut edits = Vec::new();
    for (real, (path, kubeconfig)) in files {
        match rewrite_file(&real, &path, kubeconfig, &currents) {
            Ok(None) => {}
            Ok(Some((bytes, cas))) => {
                let target = match kubeconfig || roots.is_empty() {
                    true => Ok(real),
                    false => resolve_target(&path, roots),
                };
                match target.and_then(|t| Ok((FileMeta::of(&t)?, t))) {
                    Ok((meta, target)) => edits.push(Edit {
                        path,
                        target,
                        cas,
                        bytes,
                        meta,
                    }),
                    Err(e) => failed.push((path, format!("{e:#}"))),
                }
            }
            Err(e) => failed.push((path, format!("{e:#}"))),
        }
    }
    (edits, failed)
}

/// The certificate CA `i`'s own file holds now, if it is still that CA; an error when it
/// does not verify (its copies are then left as they are).
fn current(inv: &Inventory, i: usize) -> anyhow::Result<Option<CertFacts>> {
    let c = &inv.certs[i];
    let bytes = match crate::fsutil::read(c.real()) {
        Ok(b) => b,
        // Gone since the scan: the next scan says so.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", c.path.display())),
    };
    let facts = match pem::is_pem(&bytes) {
        true => CertFacts::first_in_pem(&bytes),
        false => CertFacts::parse(bytes),
    };
    // No longer that CA (replaced by hand since the scan): the next scan looks again.
    let facts = match facts {
        Ok(f) if f.same_ca(&c.facts) => f,
        _ => return Ok(None),
    };
    let signer = match facts.raw_subject() == facts.raw_issuer() {
        true => &facts,
        false => match inv.issuer_of(c) {
            Some(issuer) => &issuer.facts,
            None => return Ok(None),
        },
    };
    facts.signed_by(signer).map_err(|e| {
        anyhow::anyhow!(
            "{} does not verify against its issuer ({e}): its copies are left as they are",
            c.path.display()
        )
    })?;
    Ok(Some(facts))
}

/// The CA a certificate is replaced with: a newer issue of it, or one being renewed.
fn newer<'a>(currents: &'a [Current], old: &CertFacts) -> Option<&'a Current> {
    currents.iter().find(|cur| {
        cur.facts.same_ca(old)
            && (cur.renewing || (cur.facts.der != old.der && old.not_after < cur.facts.not_after))
    })
}

/// A file's new bytes, and the CA files whose copies they replace.
type Rewritten = (Vec<u8>, Vec<PathBuf>);

/// The new bytes of a file holding older copies, and the CAs they copy; `None` when it
/// holds none.
fn rewrite_file(
    real: &Path,
    path: &Path,
    kubeconfig: bool,
    currents: &[Current],
) -> anyhow::Result<Option<Rewritten>> {
    let bytes = match crate::fsutil::read(real) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    };
    let mut cas = Vec::new();
    let mut swap = |old: &CertFacts| {
        let cur = newer(currents, old)?;
        if !cas.contains(&cur.path) {
            cas.push(cur.path.clone());
        }
        Some(cur.facts.der.clone())
    };
    let new = if kubeconfig {
        rewrite_kubeconfig(&bytes, path, &mut swap)?
    } else if pem::is_pem(&bytes) {
        rewrite_pem(&bytes, &mut swap)
    } else {
        CertFacts::parse(bytes).ok().and_then(|f| swap(&f))
    };
    Ok(new.map(|b| (b, cas)))
}

/// PEM text with each certificate block that `swap` gives new DER for replaced; every
/// other byte kept.
fn rewrite_pem(
    text: &[u8],
    swap: &mut impl FnMut(&CertFacts) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    let mut changed = false;
    while let Some(start) = memmem::find(&text[at..], BEGIN).map(|p| p + at) {
        let Some(end) = memmem::find(&text[start..], END).map(|p| p + start + END.len()) else {
            break;
        };
        let block = &text[start..end];
        let new = pem::blocks(block)
            .into_iter()
            .next()
            .and_then(Result::ok)
            .and_then(|b| CertFacts::parse(b.der).ok())
            .and_then(|f| swap(&f));
        out.extend_from_slice(&text[at..start]);
        match new {
            Some(der) => {
                out.extend_from_slice(pem::encode("CERTIFICATE", &der).trim_end().as_bytes());
                changed = true;
            }
            None => out.extend_from_slice(block),
        }
        at = end;
    }
    out.extend_from_slice(&text[at..]);
    changed.then_some(out)
}

/// A kubeconfig with the copies in its clusters' `certificate-authority-data` replaced,
/// checked by reading it back: the same document, only those values changed.
fn rewrite_kubeconfig(
    bytes: &[u8],
    path: &Path,
    swap: &mut impl FnMut(&CertFacts) -> Option<Vec<u8>>,
) -> anyhow::Result<Option<Vec<u8>>> {
    // One that is not understood is reported by the scan; it is never rewritten.
    let Ok(doc) = Document::parse(bytes) else {
        return Ok(None);
    };
    let Ok(config) = Kubeconfig::from_document(&doc) else {
        return Ok(None);
    };
    let mut edits = Vec::new();
    for cluster in &config.clusters {
        let Some(value) = &cluster.ca_data else {
            continue;
        };
        let Ok(old_pem) = decode_data(&value.text) else {
            continue;
        };
        if let Some(new_pem) = rewrite_pem(&old_pem, swap) {
            let owner = format!("cluster {:?}", cluster.name);
            let span = replaceable(bytes, value, "certificate-authority-data", &owner, path)?;
            edits.push((span, encode_data(&new_pem)));
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }
    let new = splice(bytes, &edits);
    let check = Document::parse(&new)
        .map_err(anyhow::Error::from)
        .and_then(|d| same_but_edits(&doc, &d, &edits));
    check.map_err(|e| {
        anyhow::anyhow!(
            "the rewritten {} failed its check, not written: {e}",
            path.display()
        )
    })?;
    Ok(Some(new))
}

mod write;
#[cfg(test)]
mod tests;
