//! What `renew PATH` may name: a certificate (a CA only with `renew_cas` on). A private key,
//! a file holding no certificate (skipped, or unreadable as one), or a CA while CA renewal is off is refused before the
//! pass, with what to do instead (the pass would only say "nothing to renew").

use std::path::{Path, PathBuf};

use crate::inventory::{Cert, Inventory, IssuerLink, KeyLink};

/// `paths` as the pass lists them: a symlink to a watched certificate is that certificate,
/// listed by its file (the link is one of its `aliases`).
pub fn as_listed(inv: &Inventory, paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths
        .into_iter()
        .map(
            |p| match inv.certs.iter().find(|c| c.aliases.contains(&p)) {
                Some(c) => c.path.clone(),
                None => p,
            },
        )
        .collect()
}

/// Why each of `paths` cannot be renewed, one line each; empty when all are certificates a
/// pass can be limited to. `force` is repeated in the commands suggested.
pub fn refusals(inv: &Inventory, paths: &[PathBuf], force: bool, renew_cas: bool) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| refusal(inv, p, force, renew_cas))
        .collect()
}

fn refusal(inv: &Inventory, path: &Path, force: bool, renew_cas: bool) -> Option<String> {
    let named: Vec<(usize, &Cert)> = inv
        .certs
        .iter()
        .enumerate()
        .filter(|(_, c)| c.path == path || c.aliases.iter().any(|a| a == path))
        .collect();
    if let Some(&(ca, cert)) = named.first() {
        // A bundle with a leaf in it is the leaf's file.
        return (!renew_cas && named.iter().all(|(_, c)| c.facts.is_ca))
            .then(|| ca_refusal(inv, path, ca, cert));
    }
    if let Some(k) = inv.keys.iter().position(|k| k.path == path) {
        return Some(key_refusal(inv, path, k, force, renew_cas));
    }
    // A file that could not be read as a certificate is an error of the scan, not a
    // skipped file: without this the pass would only say "nothing to renew".
    let error = (inv.skipped.iter().chain(&inv.errors))
        .find(|s| s.path == path)
        .map(|s| format!("{} cannot be renewed: {}", path.display(), s.reason));
    // Anything else the scan passed over quietly (kubeadm's `sa.pub`): a pass limited to it
    // would renew nothing and succeed.
    error.or_else(|| {
        Some(format!(
            "{} holds no certificate certrenewd renews (a public key, or another file the scan passes over): name a certificate file",
            path.display()
        ))
    })
}

/// A CA certificate: what certrenewd does instead, and the leaves it signed.
fn ca_refusal(inv: &Inventory, path: &Path, ca: usize, cert: &Cert) -> String {
    let signed: Vec<String> = inv
        .certs
        .iter()
        .filter(|c| c.issuer == IssuerLink::Found(ca) && !c.facts.is_ca)
        .map(|c| c.path.display().to_string())
        .collect();
    let mut why = format!(
        "{} is a CA certificate ({}) and CA renewal is off (renew_cas = false): set renew_cas = true to renew it with the same key, or renew it with your PKI tool; then `certrenewd renew` re-issues the certificates it signed as they fall due",
        path.display(),
        cert.facts.subject
    );
    if !signed.is_empty() {
        why += &format!(
            ", or at once: `certrenewd renew --force {}`",
            signed.join(" ")
        );
    }
    why
}

/// A private key: the certificates that use it.
fn key_refusal(inv: &Inventory, path: &Path, key: usize, force: bool, renew_cas: bool) -> String {
    // A key is found by each of its names: any of them is the same file.
    let real = std::fs::canonicalize(path).ok();
    let same_key = |k: usize| {
        k == key || (real.is_some() && std::fs::canonicalize(&inv.keys[k].path).ok() == real)
    };
    let users: Vec<&Cert> = inv
        .certs
        .iter()
        .filter(|c| match c.key {
            KeyLink::Matched(k) | KeyLink::Mismatch(k) | KeyLink::Encrypted(k) => same_key(k),
            KeyLink::Missing | KeyLink::SameFile(_) => false,
        })
        .collect();
    let show = |certs: &[&Cert]| {
        let mut paths: Vec<String> = certs.iter().map(|c| c.path.display().to_string()).collect();
        paths.dedup();
        paths.join(" ")
    };
    let (cas, leaves): (Vec<&Cert>, Vec<&Cert>) = users.iter().partition(|c| c.facts.is_ca);
    if leaves.is_empty() && !cas.is_empty() && renew_cas {
        return format!(
            "{} is the private key of the CA certificate {}: renew the CA certificate instead: `certrenewd renew --force {}`",
            path.display(),
            show(&cas),
            show(&cas)
        );
    }
    if leaves.is_empty() && !cas.is_empty() {
        return format!(
            "{} is the private key of the CA certificate {}: CA renewal is off (renew_cas = false); renew it with your PKI tool",
            path.display(),
            show(&cas)
        );
    }
    if leaves.is_empty() {
        return format!(
            "{} is a private key that no certificate under the watched paths uses: name a certificate file to renew",
            path.display()
        );
    }
    let flag = if force { "--force " } else { "" };
    let what = match leaves.len() {
        1 => "the certificate that uses it",
        _ => "the certificates that use it",
    };
    format!(
        "{} is a private key, not a certificate: renew {what} instead: `certrenewd renew {flag}{}`",
        path.display(),
        show(&leaves)
    )
}
