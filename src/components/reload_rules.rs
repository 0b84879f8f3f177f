//! Which files each component reads again by itself, from which version, and how a new one
//! is proven in use: the one table the choice between a reload and a restart is made from.
//!
//! Each row was checked against the component's own source:
//! - etcd serves and presents its certificates through `TLSInfo`, whose `GetCertificate`
//!   and `GetClientCertificate` load the pair on every handshake (`pkg/transport/listener.go`
//!   from 3.2.0; `client/pkg/transport/` from 3.5, where the client pair of
//!   `--client-cert-file` and `--peer-client-cert-file` joined them). Its trust files are
//!   read once, into the pool the listener verifies with.
//! - kube-apiserver's `dynamiccertificates` reads its serving pairs (`--tls-cert-file`,
//!   `--tls-sni-cert-key`) and its client CA bundles again each minute from 1.17 (a file
//!   watch too from 1.23); a pair whose halves do not match is ignored and the old one kept.
//!   `--proxy-client-cert-file` joined in 1.20; `--kubelet-client-certificate` is read by
//!   client-go's certificate rotation every five minutes from 1.19. Its etcd client pair is
//!   read at its next connection to etcd, which an open connection may put off for weeks.
//! - kube-controller-manager and kube-scheduler read a kubeconfig's certificate files again
//!   every five minutes from 1.19, never what is embedded in it; their serving pairs like
//!   kube-apiserver's.
//! - kubelet reads `kubelet.crt` again from 1.31 (`ReloadKubeletServerCertificateFile`).
//!
//! Anything not in the table (a trust file of etcd, `--service-account-key-file`, a
//! kubeconfig with its certificate embedded) is read at start only: its component restarts.

use std::fmt;
use std::time::Duration;

use super::Kind;

/// A release of a component, as its server answers or its image is tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `3.4.23`, `v1.31.0`, `3.5.15-0`, `v1.30.2+k3s1`: the first three numbers.
    pub fn parse(text: &str) -> Option<Version> {
        let core = text.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next()?;
        let mut n = core.split('.').map(|p| p.parse::<u32>().ok());
        let v = Version(n.next()??, n.next()??, n.next().unwrap_or(Some(0))?);
        n.next().is_none().then_some(v)
    }

    /// The version an image reference is tagged with (`registry.k8s.io/etcd:3.5.15-0`); none
    /// when it is pinned by digest only or tagged with no version (`latest`).
    pub fn of_image(image: &str) -> Option<Version> {
        let image = image.split('@').next()?;
        let (_, tag) = image.rsplit_once(':')?;
        if tag.contains('/') {
            return None; // a registry's port, no tag
        }
        Version::parse(tag)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// When a component takes a new file in without a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAgain {
    /// On every new TLS handshake; open connections keep the old certificate.
    PerHandshake,
    /// Within this long of the change, by polling the file.
    Within(Duration),
    /// At its next connection to the server it dials, however far off.
    NextConnection,
}

/// How a new file is shown to be in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// It serves the certificate: connect where it listens (the URLs of the `listen`
    /// setting) and verify the chain served as its clients do, against the `trust` file.
    Serves {
        listen: &'static str,
        trust: &'static str,
    },
    /// It presents the pair as a client: present the pair to the server that checks it and
    /// have a real request accepted.
    Presents,
}

/// One row: `setting` of `kind` names a file read again from `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    pub setting: &'static str,
    pub since: Version,
    pub reads: ReadAgain,
    pub proof: Proof,
}

const MINUTE: Duration = Duration::from_secs(60);

const fn row(
    kind: Kind,
    setting: &'static str,
    since: Version,
    reads: ReadAgain,
    proof: Proof,
) -> Rule {
    Rule {
        kind,
        setting,
        since,
        reads,
        proof,
    }
}

const ETCD_CLIENT: Proof = Proof::Serves {
    listen: "listen-client-urls",
    trust: "trusted-ca-file",
};
const ETCD_PEER: Proof = Proof::Serves {
    listen: "listen-peer-urls",
    trust: "peer-trusted-ca-file",
};
const API_SERVING: Proof = Proof::Serves {
    listen: "secure-port",
    trust: "client-ca-file",
};

/// Every file a component reads again by itself. A setting named here for its key
/// (`key-file`) goes with the certificate of the same row's pair.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    row(Kind::Etcd, "cert-file", Version(3, 2, 0), ReadAgain::PerHandshake, ETCD_CLIENT),
    row(Kind::Etcd, "key-file", Version(3, 2, 0), ReadAgain::PerHandshake, ETCD_CLIENT),
    row(Kind::Etcd, "peer-cert-file", Version(3, 2, 0), ReadAgain::PerHandshake, ETCD_PEER),
    row(Kind::Etcd, "peer-key-file", Version(3, 2, 0), ReadAgain::PerHandshake, ETCD_PEER),
    row(Kind::Etcd, "client-cert-file", Version(3, 5, 0), ReadAgain::PerHandshake, Proof::Presents),
    row(Kind::Etcd, "client-key-file", Version(3, 5, 0), ReadAgain::PerHandshake, Proof::Presents),
    row(Kind::Etcd, "peer-client-cert-file", Version(3, 5, 0), ReadAgain::PerHandshake, Proof::Presents),
    row(Kind::Etcd, "peer-client-key-file", Version(3, 5, 0), ReadAgain::PerHandshake, Proof::Presents),
    row(Kind::ApiServer, "tls-cert-file", Version(1, 17, 0), ReadAgain::Within(MINUTE), API_SERVING),
    row(Kind::ApiServer, "tls-private-key-file", Version(1, 17, 0), ReadAgain::Within(MINUTE), API_SERVING),
    row(Kind::ApiServer, "client-ca-file", Version(1, 19, 0), ReadAgain::Within(MINUTE), Proof::Presents),
    row(Kind::ApiServer, "requestheader-client-ca-file", Version(1, 19, 0), ReadAgain::Within(MINUTE), Proof::Presents),
    row(Kind::ApiServer, "proxy-client-cert-file", Version(1, 20, 0), ReadAgain::Within(MINUTE), Proof::Presents),
    row(Kind::ApiServer, "proxy-client-key-file", Version(1, 20, 0), ReadAgain::Within(MINUTE), Proof::Presents),
    row(Kind::ApiServer, "kubelet-client-certificate", Version(1, 19, 0), ReadAgain::Within(Duration::from_secs(300)), Proof::Presents),
    row(Kind::ApiServer, "kubelet-client-key", Version(1, 19, 0), ReadAgain::Within(Duration::from_secs(300)), Proof::Presents),
    row(Kind::ApiServer, "etcd-certfile", Version(1, 17, 0), ReadAgain::NextConnection, Proof::Presents),
    row(Kind::ApiServer, "etcd-keyfile", Version(1, 17, 0), ReadAgain::NextConnection, Proof::Presents),
];

/// The row for `setting` of `kind`, whatever version runs.
pub fn rule(kind: Kind, setting: &str) -> Option<&'static Rule> {
    RULES
        .iter()
        .find(|r| r.kind == kind && r.setting == setting)
}

/// Why a file's component must restart for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// The setting's file is read at start only.
    ReadAtStartOnly,
    /// Read again only from `since`; this one runs `running`.
    TooOld { since: Version, running: Version },
    /// Which version runs is not known (no answer, no tag): unknown means restart.
    VersionUnknown,
    /// A new key with a new certificate: two renames a reader on every handshake could see
    /// half-done.
    NewKey,
}

impl fmt::Display for Restart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Restart::ReadAtStartOnly => f.write_str("read at start only"),
            Restart::TooOld { since, running } => {
                write!(f, "read again from {since}; this one runs {running}")
            }
            Restart::VersionUnknown => f.write_str("the version it runs is not known"),
            Restart::NewKey => f.write_str(
                "a new key and certificate are two files, which a reader on every handshake could see half-installed",
            ),
        }
    }
}

/// Whether `kind` reads the file its `setting` names again by itself, running `version`,
/// with the key `rotated` or kept: the row that says so, or why it must restart.
pub fn decide(
    kind: Kind,
    setting: &str,
    version: Option<Version>,
    rotated: bool,
) -> Result<&'static Rule, Restart> {
    let rule = self::rule(kind, setting).ok_or(Restart::ReadAtStartOnly)?;
    let running = version.ok_or(Restart::VersionUnknown)?;
    if running < rule.since {
        return Err(Restart::TooOld {
            since: rule.since,
            running,
        });
    }
    if rotated && rule.reads == ReadAgain::PerHandshake {
        return Err(Restart::NewKey);
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_answers_and_image_tags() {
        assert_eq!(Version::parse("3.4.23"), Some(Version(3, 4, 23)));
        assert_eq!(Version::parse("v1.31.0"), Some(Version(1, 31, 0)));
        assert_eq!(Version::parse("v1.30.2+k3s1"), Some(Version(1, 30, 2)));
        assert_eq!(Version::parse("3.5"), Some(Version(3, 5, 0)));
        assert_eq!(Version::parse("latest"), None);
        assert_eq!(Version::parse("1.2.3.4"), None);
        let of = Version::of_image;
        assert_eq!(of("registry.k8s.io/etcd:3.5.15-0"), Some(Version(3, 5, 15)));
        assert_eq!(
            of("registry.k8s.io/kube-apiserver:v1.31.1"),
            Some(Version(1, 31, 1))
        );
        assert_eq!(
            of("localhost:5000/etcd"),
            None,
            "a registry's port is no tag"
        );
        assert_eq!(
            of("quay.io/coreos/etcd:v3.5.9@sha256:abc"),
            Some(Version(3, 5, 9))
        );
        assert_eq!(of("quay.io/coreos/etcd@sha256:abc"), None);
        assert_eq!(of("etcd:latest"), None);
    }

    #[test]
    fn etcd_reloads_its_pairs_from_their_versions_and_never_its_trust() {
        let v = |s| Version::parse(s);
        let ok = |setting, version| decide(Kind::Etcd, setting, v(version), false).is_ok();
        assert!(ok("cert-file", "3.4.23"));
        assert!(ok("peer-key-file", "3.2.0"));
        assert!(!ok("cert-file", "3.1.20"));
        assert!(
            !ok("client-cert-file", "3.4.23"),
            "its client pair from 3.5"
        );
        assert!(ok("client-cert-file", "3.5.0"));
        assert_eq!(
            decide(Kind::Etcd, "trusted-ca-file", v("3.5.15"), false),
            Err(Restart::ReadAtStartOnly)
        );
        assert_eq!(
            decide(Kind::Etcd, "cert-file", None, false),
            Err(Restart::VersionUnknown)
        );
        assert_eq!(
            decide(Kind::Etcd, "cert-file", v("3.5.15"), true),
            Err(Restart::NewKey),
            "a new key is two renames a handshake could fall between"
        );
        assert_eq!(
            decide(Kind::Etcd, "client-cert-file", v("3.4.23"), false)
                .unwrap_err()
                .to_string(),
            "read again from 3.5.0; this one runs 3.4.23"
        );
    }

    #[test]
    fn the_api_server_polls_and_a_new_key_is_no_reason_to_restart_a_poller() {
        let r = decide(
            Kind::ApiServer,
            "tls-cert-file",
            Version::parse("1.31.0"),
            true,
        )
        .unwrap();
        assert_eq!(r.reads, ReadAgain::Within(MINUTE));
        assert!(
            decide(
                Kind::ApiServer,
                "etcd-cafile",
                Version::parse("1.31.0"),
                false
            )
            .is_err()
        );
        assert!(
            decide(
                Kind::ControllerManager,
                "kubeconfig",
                Version::parse("1.31.0"),
                false
            )
            .is_err()
        );
    }
}
