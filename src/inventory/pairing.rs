//! Pairing each certificate with its key (confirmed by public key) and linking it to the CA
//! that signed it (by name bytes and key identifiers, confirmed by the signature).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::format::cert::IssuerKey;

use super::checked::{Checked, Pair};

use super::*;

impl Inventory {
    /// The file a CA is renewed from, when `cert` is a CA: of every copy of it (the same CA,
    /// re-issued or not: [`CertFacts::same_ca`]) that is alone in a file of its own, the
    /// first whose key is here, else the first. The others (bundles, chain files, the same
    /// CA under another name) are copies, replaced with it.
    ///
    /// [`CertFacts::same_ca`]: crate::format::cert::CertFacts::same_ca
    pub fn ca_primary(&self, cert: usize) -> Option<usize> {
        let c = self.certs.get(cert)?;
        if !c.facts.is_ca {
            return None;
        }
        let own_files = || {
            self.certs.iter().enumerate().filter(|(_, o)| {
                o.index == 0
                    && o.certs_in_file == 1
                    && o.kubeconfig.is_none()
                    && o.facts.same_ca(&c.facts)
            })
        };
        own_files()
            .find(|(_, o)| self.matched_key(o).is_some())
            .or_else(|| own_files().next())
            .map(|(i, _)| i)
    }

    pub(super) fn pair_keys(&mut self) {
        // By the bytes of the path: keys and certificates were listed by the same walk.
        let by_path: HashMap<&OsStr, usize> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.path.as_os_str(), i))
            .collect();
        let links: Vec<KeyLink> = self
            .certs
            .iter()
            .map(|c| {
                if c.kubeconfig.is_some() {
                    return c.key.clone(); // paired when its kubeconfig was read
                }
                if c.index > 0 {
                    return KeyLink::Missing; // only a file's first certificate has a key beside it
                }
                if let KeyLink::SameFile(k) = c.key {
                    return check_pair(&c.facts, k, &self.keys[k], KeyLink::SameFile(k));
                }
                candidates(&c.path)
                    .find_map(|p| by_path.get(p.as_os_str()).copied())
                    .map_or(KeyLink::Missing, |k| {
                        check_pair(&c.facts, k, &self.keys[k], KeyLink::Matched(k))
                    })
            })
            .collect();
        for (c, link) in self.certs.iter_mut().zip(links) {
            c.key = link;
        }
    }

    /// Links every certificate to its signer; the signatures `checked` knows to verify are
    /// not checked again, and those that verified are noted in `verified` (a pass records
    /// them).
    pub(super) fn link_issuers(&mut self, checked: &Checked) {
        // Candidate signers by the exact bytes of their subject name.
        let mut by_subject: HashMap<&[u8], Vec<usize>> = HashMap::new();
        // Each CA's key, parsed once for all the certificates checked against it, and the
        // digest that names it in `checked`.
        let mut ca_keys: Vec<Option<(IssuerKey<'_>, Pair)>> = Vec::new();
        ca_keys.resize_with(self.certs.len(), || None);
        for (i, c) in self.certs.iter().enumerate() {
            if c.facts.is_ca {
                by_subject.entry(c.facts.raw_subject()).or_default().push(i);
                ca_keys[i] = Some((IssuerKey::new(&c.facts), Checked::ca_digest(&c.facts)));
            }
        }
        let (links, pairs): (Vec<IssuerLink>, Vec<Vec<Pair>>) = self
            .certs
            .par_iter()
            .map(|c| {
                if c.facts.raw_subject() == c.facts.raw_issuer()
                    && c.facts.signed_by(&c.facts).is_ok()
                {
                    return (IssuerLink::SelfSigned, Vec::new());
                }
                let Some(candidates) = by_subject.get(c.facts.raw_issuer()) else {
                    let why = format!(
                        "no CA certificate with subject \"{}\" under the watched paths",
                        c.facts.issuer
                    );
                    return (IssuerLink::NotFound(why), Vec::new());
                };
                let mut verified: Vec<usize> = Vec::new();
                let mut pairs: Vec<Pair> = Vec::new();
                let mut why = String::new();
                for &i in candidates {
                    let Some((key, ca)) = &ca_keys[i] else {
                        continue;
                    };
                    let pair = Checked::pair(&c.facts, ca);
                    match checked.known(&pair) {
                        true => Ok(()),
                        false => key.signed(&c.facts),
                    }
                    .map_or_else(
                        |e| why = format!("{}: {e}", self.certs[i].path.display()),
                        |()| {
                            verified.push(i);
                            pairs.push(pair);
                        },
                    );
                }
                // Of several copies of the same CA, prefer the one whose key is here.
                let link = verified
                    .iter()
                    .copied()
                    .find(|&i| matches!(self.certs[i].key, KeyLink::Matched(_)))
                    .or(verified.first().copied())
                    .map_or_else(
                        || {
                            IssuerLink::NotFound(format!(
                                "CA \"{}\" found but it did not sign this certificate ({why})",
                                c.facts.issuer
                            ))
                        },
                        IssuerLink::Found,
                    );
                (link, pairs)
            })
            .unzip();
        for (c, link) in self.certs.iter_mut().zip(links) {
            c.issuer = link;
        }
        self.verified = pairs.into_iter().flatten().collect();
    }
}

pub(crate) fn check_pair(c: &CertFacts, k: usize, key: &KeyFile, ok: KeyLink) -> KeyLink {
    if key.info.encrypted() {
        return KeyLink::Encrypted(k);
    }
    match &key.info.public {
        Some(p) if *p == c.public_key => ok,
        _ => KeyLink::Mismatch(k),
    }
}

/// Key file names controllers use for a certificate file, most usual first.
pub fn key_candidates(cert_path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = candidates(cert_path).collect();
    out.dedup();
    out
}

/// [`key_candidates`], made one at a time (the first is usually the key).
fn candidates(cert_path: &Path) -> impl Iterator<Item = PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    // Bytes, not UTF-8: a certificate with any file name gets its key looked for.
    let name = cert_path.file_name().map_or(&[][..], |n| n.as_bytes());
    let stem = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => &name[..dot],
        None => name,
    };
    let dir = cert_path.parent().unwrap_or(Path::new(""));
    let suffixes = [".key", "-key.pem", "-key.der", ".key.der", ".key.pem"];
    suffixes
        .into_iter()
        .filter(move |_| !name.is_empty())
        .map(move |suffix| {
            dir.join(std::ffi::OsString::from_vec(
                [stem, suffix.as_bytes()].concat(),
            ))
        })
        .filter(move |p| p != cert_path)
}
