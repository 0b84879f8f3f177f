//! kubelet's certificate store (client-go's `certificate.FileStore`): each rotation writes a
//! new pair, certificate then key in one PEM file named `<prefix>-YYYY-MM-DD-HH-MM-SS.pem`,
//! and points the symlink `<prefix>-current.pem` at it; the pairs it rotated away from stay.
//! The pair in use is listed by the symlink kubelet reads (and renewed kubelet's way,
//! `renew::link`); the others are passed over as superseded.

use std::fs;
use std::path::{Path, PathBuf};

use super::Skipped;
use super::walk::Found;

/// The symlink's name after the prefix.
const CURRENT: &str = "-current.pem";

/// The `<prefix>` of a dated pair's file name `<prefix>-YYYY-MM-DD-HH-MM-SS.pem`.
pub fn dated_prefix(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".pem")?;
    let split = stem.len().checked_sub(20)?;
    let (prefix, stamp) = (stem.get(..split)?, stem.get(split..)?);
    let stamp = stamp.strip_prefix('-')?;
    let digits = stamp.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 | 10 | 13 | 16 => b == b'-',
        _ => b.is_ascii_digit(),
    });
    (digits && !prefix.is_empty()).then_some(prefix)
}

/// Whether `link` is the `<prefix>-current.pem` symlink of the dated pair `real` (a real
/// path) in the same directory.
pub fn is_current_link(link: &Path, real: &Path) -> bool {
    let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    let (Some(link_name), Some(real_name)) = (name(link), name(real)) else {
        return false;
    };
    let Some(prefix) = dated_prefix(&real_name) else {
        return false;
    };
    link_name == format!("{prefix}{CURRENT}")
        && fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink())
        && link
            .parent()
            .and_then(|d| fs::canonicalize(d).ok())
            .is_some_and(|d| Some(d.as_path()) == real.parent())
}

/// The throwaway CA's common name, `<host>-ca@<unix time>`, when `raw_name` is one: the CA
/// kubelet makes with its self-signed serving certificate (`kubelet.crt`) and whose key it
/// throws away.
pub fn throwaway_ca(raw_name: &[u8]) -> Option<String> {
    crate::format::cert::common_name(raw_name).filter(|cn| {
        cn.rsplit_once("-ca@").is_some_and(|(host, t)| {
            !host.is_empty() && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

/// The lifetime kubelet gives its self-signed serving pair (`maxAge` in client-go's
/// certutil), and a renewal of it.
pub const SELF_SIGNED_DAYS: i64 = 365;

/// Whether `c` is kubelet's self-signed serving certificate: the first certificate of a
/// `kubelet.crt` signed by a throwaway CA (see [`throwaway_ca`]).
pub fn is_self_signed_serving(c: &super::Cert) -> bool {
    c.index == 0
        && c.kubeconfig.is_none()
        && c.path.file_name().is_some_and(|n| n == "kubelet.crt")
        && throwaway_ca(c.facts.raw_issuer()).is_some()
}

/// Whether kubelet renews `c` itself: its self-signed serving pair (it makes a new one at
/// start once the old one ended), or the pair in use behind a `<prefix>-current.pem`
/// symlink (client-go's certificate manager rotates it). `renew --force --all` leaves them
/// to kubelet, as `kubeadm certs renew all` does; due, they are renewed as a net.
pub fn rotates(c: &super::Cert) -> bool {
    is_self_signed_serving(c) || (c.kubeconfig.is_none() && is_current_link(&c.path, c.real()))
}

/// Drops the throwaway CA that `kubelet.crt` carries after its leaf: it is part of that
/// serving pair, listed, counted and alarmed with it, not a CA of its own.
pub(super) fn drop_throwaway_cas(certs: &mut Vec<super::Cert>) {
    certs.retain(|c| {
        !(c.index > 0
            && c.facts.is_ca
            && c.path.file_name().is_some_and(|n| n == "kubelet.crt")
            && throwaway_ca(c.facts.raw_subject()).is_some())
    });
}

/// Lists kubelet's pair in use by its `-current.pem` symlink, and passes over the dated
/// pairs that symlink no longer points at.
pub(super) fn arrange(found: &mut Found) {
    let mut keep = Vec::with_capacity(found.files.len());
    for mut f in std::mem::take(&mut found.files) {
        if let Some(at) = f.aliases.iter().position(|a| is_current_link(a, &f.real)) {
            let link = f.aliases.remove(at);
            let own = std::mem::replace(&mut f.path, link);
            f.aliases.push(own);
            f.aliases.sort();
            keep.push(f);
            continue;
        }
        match superseded(&f.path, &f.real) {
            Some(reason) => found.skipped.push(Skipped {
                path: f.path,
                reason,
            }),
            None => keep.push(f),
        }
    }
    keep.sort_by(|a, b| a.path.cmp(&b.path));
    found.files = keep;
}

/// Why a dated pair is not in use: its directory's `-current.pem` symlink names another.
fn superseded(path: &Path, real: &Path) -> Option<String> {
    let prefix = dated_prefix(path.file_name()?.to_str()?)?;
    let link: PathBuf = path.with_file_name(format!("{prefix}{CURRENT}"));
    let target = fs::read_link(&link).ok()?;
    if fs::canonicalize(&link).is_ok_and(|t| t == real) {
        return None;
    }
    Some(format!(
        "superseded: {} points at {}; kubelet keeps the pairs it rotated away from (remove \
         this one when it is no longer wanted)",
        link.display(),
        target.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_names_are_kubelets() {
        let p = dated_prefix;
        assert_eq!(
            p("kubelet-client-2025-01-31-23-59-07.pem"),
            Some("kubelet-client")
        );
        assert_eq!(
            p("kubelet-server-2025-01-31-23-59-07.pem"),
            Some("kubelet-server")
        );
        for no in [
            "kubelet-client-current.pem",
            "kubelet-client-2025-01-31-23-59.pem",
            "-2025-01-31-23-59-07.pem",
            "kubelet-client-2025-01-31-23-59-07.crt",
            "kubelet-client-2025_01-31-23-59-07.pem",
            "2025-01-31-23-59-07.pem",
        ] {
            assert_eq!(p(no), None, "{no}");
        }
    }

    #[test]
    fn kubelets_throwaway_ca_is_known_by_its_name() {
        let name = |cn: &str| {
            let mut params = rcgen::CertificateParams::default();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            let facts = crate::format::cert::CertFacts::parse(cert.der().to_vec()).unwrap();
            throwaway_ca(facts.raw_subject())
        };
        assert_eq!(
            name("node-1-ca@1765065110").as_deref(),
            Some("node-1-ca@1765065110")
        );
        for no in [
            "node-1@1765065110",
            "-ca@1765065110",
            "node-1-ca@",
            "node-1-ca@17x",
            "ca",
        ] {
            assert_eq!(name(no), None, "{no}");
        }
    }
}
