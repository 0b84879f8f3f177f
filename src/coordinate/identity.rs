//! The etcd client identity certrenewd coordinates with: the configured files, else the first
//! complete set the node already has (the ones its API server or health checks use).

use std::path::{Path, PathBuf};

use anyhow::Context;
use etcd_client::{Certificate, Identity, TlsOptions};

use crate::config::Coordination;

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

/// The identity to use: the configured one, or the first known set present under `root`
/// (`/` on a node; tests pass a tree). `None` when the node has none.
pub fn find(c: &Coordination, root: &Path) -> Option<Files> {
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
    KNOWN
        .iter()
        .map(|(cert, key, ca)| Files {
            cert: under(cert),
            key: under(key),
            ca: ca_for(ca),
        })
        .find(|f| f.cert.is_file() && f.key.is_file() && f.ca.is_file())
}

/// Where `find` looks, for the message when it finds nothing.
pub fn looked_for() -> String {
    let mut certs: Vec<&str> = Vec::new();
    for (c, _, _) in KNOWN {
        if !certs.contains(c) {
            certs.push(c);
        }
    }
    certs.join(", ")
}

impl Files {
    /// The TLS options for a connection as this identity, read now (after this pass's
    /// renewals: a renewed client certificate is used at once).
    pub fn tls(&self) -> anyhow::Result<TlsOptions> {
        let read = |p: &Path| crate::fsutil::read(p).with_context(|| p.display().to_string());
        let (cert, key, ca) = (read(&self.cert)?, read(&self.key)?, read(&self.ca)?);
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

    #[test]
    fn the_first_complete_known_set_is_used() {
        let t = tempfile::tempdir().unwrap();
        let c = Coordination::default();
        assert_eq!(find(&c, t.path()), None);
        // StarlingX: the etcd client without its CA is not a set; with it, it is.
        touch(t.path(), "/etc/etcd/etcd-client.crt");
        touch(t.path(), "/etc/etcd/etcd-client.key");
        assert_eq!(find(&c, t.path()), None);
        touch(t.path(), "/etc/etcd/ca.crt");
        let f = find(&c, t.path()).unwrap();
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
        let f = find(&c, t.path()).unwrap();
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
        let f = find(&c, t.path()).unwrap();
        assert_eq!(f.cert, PathBuf::from("/x/c.pem"));
        assert_eq!(f.ca, t.path().join("etc/etcd/ca.pem"));
    }
}
