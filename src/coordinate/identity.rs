//! The etcd client identity certrenewd coordinates with: the configured files, else the first
//! complete set the node already has (the ones its API server or health checks use).

use std::path::{Path, PathBuf};

use anyhow::Context;
use etcd_client::{Certificate, Identity, TlsOptions};

use crate::config::Coordination;
use crate::renew::Fresh;

/// Client certificate, key and CA of the shapes the seeds show, most specific first.
const KNOWN: &[(&str, &str, &str)] = &[
    // kubeadm: the etcd health-check client, then the API server's etcd client.
    (
        "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
        "/etc/kubernetes/pki/etcd/healthcheck-client.key",
        "/etc/kubernetes/pki/etcd/ca.crt",
    ),
    (
        "/etc/kubernetes/pki/apiserver-etcd-client.crt",
        "/etc/kubernetes/pki/apiserver-etcd-client.key",
        "/etc/kubernetes/pki/etcd/ca.crt",
    ),
    // StarlingX: etcd's own client certificate, and the API server's (signed by the etcd CA).
    (
        "/etc/etcd/etcd-client.crt",
        "/etc/etcd/etcd-client.key",
        "/etc/etcd/ca.crt",
    ),
    (
        "/etc/kubernetes/pki/apiserver-etcd-client.crt",
        "/etc/kubernetes/pki/apiserver-etcd-client.key",
        "/etc/etcd/ca.crt",
    ),
    // The hard way: the API server's certificate, also etcd's client certificate.
    (
        "/etc/etcd/kubernetes.pem",
        "/etc/etcd/kubernetes-key.pem",
        "/etc/etcd/ca.pem",
    ),
];

/// The files of one client identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// Client certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA bundle the members' server certificates are checked against.
    pub ca: PathBuf,
}

/// The etcd client pairs the node's own settings name, as (certificate, key, CA):
/// `NodeReading::etcd_clients`.
pub type Named = [(PathBuf, PathBuf, PathBuf)];

/// The identity to use: the configured one, else, of the known sets present under `root`
/// (`/` on a node; tests pass a tree) and then the pairs the node's settings name (`named`)
/// whose certificate may be used as a client (clientAuth; kubespray's member pair), the
/// first whose certificate is valid now, else the first of them (an expired one is still
/// named in what the members answer). `None` when the node has none.
pub fn find(c: &Coordination, root: &Path, named: &Named) -> Option<Files> {
    find_with(c, root, named, &[])
}

/// [`find`], a certificate this pass renewed and has not installed yet (`fresh`) judged by
/// its new bytes: an expired client certificate renewed first is the valid one.
pub fn find_with(c: &Coordination, root: &Path, named: &Named, fresh: &[Fresh]) -> Option<Files> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    let ca_for = |ca: &str| c.ca.clone().unwrap_or_else(|| under(ca));
    if let (Some(cert), Some(key)) = (&c.cert, &c.key) {
        let ca = c.ca.clone().or_else(|| {
            KNOWN
                .iter()
                .map(|(_, _, ca)| under(ca))
                .find(|p| p.is_file())
        })?;
        return Some(Files {
            cert: cert.clone(),
            key: key.clone(),
            ca,
        });
    }
    let known = KNOWN.iter().map(|(cert, key, ca)| Files {
        cert: under(cert),
        key: under(key),
        ca: ca_for(ca),
    });
    let complete = |f: &Files| f.cert.is_file() && f.key.is_file() && f.ca.is_file();
    let named = (named.iter())
        .map(|(cert, key, ca)| Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: c.ca.clone().unwrap_or_else(|| ca.clone()),
        })
        .filter(|f| complete(f) && client_auth(&f.cert));
    let found: Vec<Files> = known.filter(complete).chain(named).collect();
    let valid = (found.iter())
        .position(|f| valid_now(&f.cert, fresh))
        .unwrap_or(0);
    found.into_iter().nth(valid)
}

/// Whether the first certificate in `file` (as `fresh` has it, when it does) is valid now
/// (past its notBefore, before its notAfter).
fn valid_now(file: &Path, fresh: &[Fresh]) -> bool {
    let data = match fresh.iter().find(|f| f.cert == file) {
        Some(f) => f.cert_bytes.clone(),
        None => crate::fsutil::read(file).unwrap_or_default(),
    };
    let now = time::OffsetDateTime::now_utc();
    crate::format::cert::CertFacts::first_in_pem(&data)
        .is_ok_and(|c| c.not_before <= now && now < c.not_after)
}

/// Whether the first certificate in `file` may authenticate a client (no extended key
/// usage, or one naming clientAuth).
fn client_auth(file: &Path) -> bool {
    let data = crate::fsutil::read(file).unwrap_or_default();
    crate::format::cert::CertFacts::first_in_pem(&data).is_ok_and(|c| c.client_auth)
}

/// Where `find` looks, for the message when it finds nothing.
pub fn looked_for(named: &Named) -> String {
    let mut certs: Vec<String> = Vec::new();
    let named = named.iter().map(|(c, _, _)| c.display().to_string());
    for c in KNOWN.iter().map(|(c, _, _)| c.to_string()).chain(named) {
        if !certs.contains(&c) {
            certs.push(c);
        }
    }
    certs.join(", ")
}

impl Files {
    /// The TLS options for a connection as this identity, read now (after this pass's
    /// renewals: a renewed client certificate is used at once).
    pub fn tls(&self) -> anyhow::Result<TlsOptions> {
        self.tls_with(&[])
    }

    /// [`Files::tls`], with the new bytes of what this pass renewed and has not installed
    /// yet (`fresh`: a CA's agreement comes before the install).
    pub fn tls_with(&self, fresh: &[Fresh]) -> anyhow::Result<TlsOptions> {
        let read = |p: &Path| crate::fsutil::read(p).with_context(|| p.display().to_string());
        let renewed = fresh.iter().find(|f| f.cert == self.cert);
        let cert = match renewed {
            Some(f) => f.cert_bytes.clone(),
            None => read(&self.cert)?,
        };
        let key = match renewed.and_then(|f| f.key.as_ref()) {
            Some((path, bytes)) if *path == self.key => bytes.clone(),
            _ => read(&self.key)?,
        };
        let ca = read(&self.ca)?;
        Ok(TlsOptions::new()
            .ca_certificate(Certificate::from_pem(ca))
            .identity(Identity::from_pem(cert, key)))
    }

    /// The certificate's subject CN: the etcd user name under client-certificate auth.
    pub fn user(&self) -> String {
        let pem = crate::fsutil::read(&self.cert).unwrap_or_default();
        let cn = x509_parser::pem::parse_x509_pem(&pem)
            .ok()
            .and_then(|(_, p)| {
                let cert = p.parse_x509().ok()?;
                let cn = cert.subject().iter_common_name().next()?;
                cn.as_str().ok().map(str::to_string)
            });
        cn.unwrap_or_else(|| "?".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, p: &str) {
        let p = root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    /// A PEM client certificate valid from `from` to `to` days from now, self-signed.
    fn client_cert(root: &Path, p: &str, from: i64, to: i64) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now + time::Duration::days(from);
        params.not_after = now + time::Duration::days(to);
        let cert = params.self_signed(&key).unwrap();
        let p = root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, cert.pem()).unwrap();
    }

    #[test]
    fn the_first_identity_valid_now_wins_over_an_expired_one_before_it() {
        let t = tempfile::tempdir().unwrap();
        let c = Coordination::default();
        // kubeadm's health-check client, expired; the API server's etcd client, valid.
        client_cert(
            t.path(),
            "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
            -400,
            -35,
        );
        client_cert(
            t.path(),
            "/etc/kubernetes/pki/apiserver-etcd-client.crt",
            -30,
            335,
        );
        for p in [
            "/etc/kubernetes/pki/etcd/healthcheck-client.key",
            "/etc/kubernetes/pki/etcd/ca.crt",
            "/etc/kubernetes/pki/apiserver-etcd-client.key",
        ] {
            touch(t.path(), p);
        }
        let f = find(&c, t.path(), &[]).unwrap();
        assert!(f.cert.ends_with("pki/apiserver-etcd-client.crt"), "{f:?}");
        // Both expired: the first is named all the same.
        client_cert(
            t.path(),
            "/etc/kubernetes/pki/apiserver-etcd-client.crt",
            -400,
            -1,
        );
        let f = find(&c, t.path(), &[]).unwrap();
        assert!(f.cert.ends_with("etcd/healthcheck-client.crt"), "{f:?}");
    }

    #[test]
    fn the_first_complete_known_set_is_used() {
        let t = tempfile::tempdir().unwrap();
        let c = Coordination::default();
        assert_eq!(find(&c, t.path(), &[]), None);
        // StarlingX: the etcd client without its CA is not a set; with it, it is.
        touch(t.path(), "/etc/etcd/etcd-client.crt");
        touch(t.path(), "/etc/etcd/etcd-client.key");
        assert_eq!(find(&c, t.path(), &[]), None);
        touch(t.path(), "/etc/etcd/ca.crt");
        let f = find(&c, t.path(), &[]).unwrap();
        assert_eq!(f.cert, t.path().join("etc/etcd/etcd-client.crt"));
        assert_eq!(f.ca, t.path().join("etc/etcd/ca.crt"));
        // kubeadm's health-check client comes first.
        for p in [
            "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
            "/etc/kubernetes/pki/etcd/healthcheck-client.key",
            "/etc/kubernetes/pki/etcd/ca.crt",
        ] {
            touch(t.path(), p);
        }
        let f = find(&c, t.path(), &[]).unwrap();
        assert!(f.cert.ends_with("etcd/healthcheck-client.crt"), "{f:?}");
    }

    #[test]
    fn configured_files_win_and_the_ca_is_found_when_not_given() {
        let t = tempfile::tempdir().unwrap();
        touch(t.path(), "/etc/etcd/ca.pem");
        let c = Coordination {
            cert: Some("/x/c.pem".into()),
            key: Some("/x/k.pem".into()),
            ..Coordination::default()
        };
        let f = find(&c, t.path(), &[]).unwrap();
        assert_eq!(f.cert, PathBuf::from("/x/c.pem"));
        assert_eq!(f.ca, t.path().join("etc/etcd/ca.pem"));
    }

    /// A pair the node's settings name is used when no known set is there, and only when
    /// its certificate may authenticate a client: kubespray's member pair (clientAuth and
    /// serverAuth) is, a serving-only certificate is not.
    #[test]
    fn a_named_pair_is_used_only_when_it_may_be_a_client() {
        let t = tempfile::tempdir().unwrap();
        let write = |name: &str, usages: Vec<rcgen::ExtendedKeyUsagePurpose>| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec!["node1".into()]).unwrap();
            params.extended_key_usages = usages;
            let cert = params.self_signed(&key).unwrap();
            let (c, k) = (
                t.path().join(format!("{name}.pem")),
                t.path().join(format!("{name}-key.pem")),
            );
            std::fs::write(&c, cert.pem()).unwrap();
            std::fs::write(&k, key.serialize_pem()).unwrap();
            (c, k, t.path().join("ca.pem"))
        };
        use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        std::fs::write(t.path().join("ca.pem"), "ca").unwrap();
        let serving = write("serving", vec![ServerAuth]);
        let member = write("member", vec![ClientAuth, ServerAuth]);
        let c = Coordination::default();
        let root = t.path().join("root");
        assert_eq!(find(&c, &root, std::slice::from_ref(&serving)), None);
        let f = find(&c, &root, &[serving.clone(), member.clone()]).unwrap();
        assert_eq!((f.cert, f.key, f.ca), member);
        let list = looked_for(std::slice::from_ref(&serving));
        assert!(list.ends_with(&serving.0.display().to_string()), "{list}");
    }
}
