//! Where this node serves its certificates, and the names they miss: a serving
//! certificate whose names do not cover an address it is used on fails a client exactly
//! like an expired one, and a renewal copies the old names faithfully. The addresses are
//! those etcd and kube-apiserver are told to listen on and advertise ([`sources`]); a client
//! checks them the way Go does (subjectAltName only, the common name ignored; a `*.` name
//! covers one label).

pub mod listen;
pub mod own;
pub mod shown;
mod sources;
pub use sources::ETCD_FILES;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::components::NodeReading;
use crate::inventory::Inventory;

/// A name a client connects by: an IP address or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    /// An address (`iPAddress` in a certificate).
    Ip(IpAddr),
    /// A host name, lowercase (`dNSName`).
    Dns(String),
}

impl Name {
    /// A host as a flag or URL writes it; `None` for a wildcard listen address or nothing.
    pub fn parse(host: &str) -> Option<Name> {
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return (!ip.is_unspecified()).then_some(Name::Ip(ip));
        }
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        ok.then(|| Name::Dns(host.to_ascii_lowercase()))
    }

    /// How openssl's `-addext subjectAltName` writes it: `IP:10.0.0.9`, `DNS:etcd-0`.
    pub fn san(&self) -> String {
        match self {
            Name::Ip(ip) => format!("IP:{ip}"),
            Name::Dns(d) => format!("DNS:{d}"),
        }
    }

    /// Whether a subjectAltName entry covers it, as Go's `VerifyHostname` decides.
    fn covered_by(&self, entry: &GeneralName<'_>) -> bool {
        match (self, entry) {
            (Name::Ip(IpAddr::V4(ip)), GeneralName::IPAddress(b)) => *b == ip.octets(),
            (Name::Ip(IpAddr::V6(ip)), GeneralName::IPAddress(b)) => *b == ip.octets(),
            (Name::Dns(host), GeneralName::DNSName(pattern)) => {
                let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
                match pattern.strip_prefix("*.") {
                    Some(suffix) => host
                        .split_once('.')
                        .is_some_and(|(first, rest)| !first.is_empty() && rest == suffix),
                    None => *host == pattern,
                }
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Ip(ip) => write!(f, "{ip}"),
            Name::Dns(d) => f.write_str(d),
        }
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A name a certificate is used on, and where that was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Use {
    /// The address or host name.
    pub name: Name,
    /// The flag that gives it (`--advertise-client-urls`), as a command line writes it.
    pub flag: String,
    /// The file the flag is in (a static pod manifest, an environment file, a unit).
    pub file: PathBuf,
}

impl Use {
    /// `10.0.0.9 (--advertise-client-urls in /etc/kubernetes/manifests/etcd.yaml)`.
    pub fn describe(&self) -> String {
        format!("{} ({} in {})", self.name, self.flag, self.file.display())
    }
}

/// The names each serving certificate is used on, by index into `Inventory::certs`.
pub type Served = BTreeMap<usize, Vec<Use>>;

/// The names each certificate of `inv` is used on, by certificate index, read from the
/// static pods and units the node's reading `node` found running etcd and kube-apiserver,
/// and their settings files under `root` (`/` on a node). A flag's
/// certificate is matched to the inventory by the file it resolves to (the inventory's
/// real paths are resolved already: only the few files the flags name are resolved here).
pub fn read(inv: &Inventory, root: &Path, node: &NodeReading) -> Served {
    let mut by_file: BTreeMap<PathBuf, Vec<Use>> = BTreeMap::new();
    for (cert, u) in sources::uses(root, node) {
        let real = std::fs::canonicalize(&cert).unwrap_or(cert);
        let list = by_file.entry(real).or_default();
        if !list.iter().any(|seen| seen.name == u.name) {
            list.push(u);
        }
    }
    let mut out = BTreeMap::new();
    if by_file.is_empty() {
        return out;
    }
    for (i, c) in inv.certs.iter().enumerate() {
        if c.facts.is_ca || c.index != 0 || c.kubeconfig.is_some() {
            continue;
        }
        if let Some(uses) = by_file.get(c.real()) {
            out.insert(i, uses.clone());
        }
    }
    out
}

/// The uses whose name the certificate's subjectAltName does not cover.
pub fn missing(cert_der: &[u8], uses: &[Use]) -> Vec<Use> {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return Vec::new();
    };
    let entries: Vec<GeneralName<'_>> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.clone(),
        _ => Vec::new(),
    };
    uses.iter()
        .filter(|u| !entries.iter().any(|e| u.name.covered_by(e)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_matched_as_go_matches_them() {
        let ip = Name::parse("10.0.0.9").unwrap();
        assert!(ip.covered_by(&GeneralName::IPAddress(&[10, 0, 0, 9])));
        assert!(!ip.covered_by(&GeneralName::IPAddress(&[10, 0, 0, 5])));
        assert!(!ip.covered_by(&GeneralName::DNSName("10.0.0.9")));
        let v6 = Name::parse("[fd00::9]").unwrap();
        let mut b = [0u8; 16];
        b[0] = 0xfd;
        b[15] = 9;
        assert!(v6.covered_by(&GeneralName::IPAddress(&b)));
        let host = Name::parse("Etcd-0.Example").unwrap();
        assert!(host.covered_by(&GeneralName::DNSName("etcd-0.example")));
        assert!(host.covered_by(&GeneralName::DNSName("*.example")));
        assert!(!host.covered_by(&GeneralName::DNSName("*.0.example")));
        assert!(
            !Name::parse("a.b.example")
                .unwrap()
                .covered_by(&GeneralName::DNSName("*.example"))
        );
        assert_eq!(Name::parse("0.0.0.0"), None);
        assert_eq!(Name::parse("::"), None);
        assert_eq!(Name::parse("$(HOST_IP)"), None);
        assert_eq!(ip.san(), "IP:10.0.0.9");
        assert_eq!(host.san(), "DNS:etcd-0.example");
    }
}
