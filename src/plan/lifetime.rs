//! The lifetime a renewal gives a leaf: the setting, kubeadm's year for what kubeadm
//! signed, else the old certificate's own, never longer nor shorter.

use std::path::Path;

use time::Duration;

use crate::format::cert::CertFacts;

/// The lifetime a renewal gives a leaf, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// notAfter - notBefore of the renewed certificate (before the CA's notAfter cuts it).
    pub span: Duration,
    /// Why that span.
    pub source: LifetimeSource,
}

/// Where a renewed certificate's lifetime comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifetimeSource {
    /// `validity_days`.
    Setting,
    /// `validity_days` of the certificate's `[[watch]]`.
    WatchSetting,
    /// The old certificate's: its notAfter - notBefore.
    Kept,
    /// kubeadm's year: the old notBefore is its CA's, and so says `.0` (see
    /// [`kubeadm_signed`]).
    Kubeadm(KubeadmSign),
    /// kubelet's year for its self-signed serving pair, made anew as kubelet makes it.
    Kubelet,
}

/// What, beside a notBefore that is its CA's, shows that kubeadm signed a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeadmSign {
    /// A span nobody chose: not a whole number of days.
    Span,
    /// The names kubeadm gives: its CA's and the leaf's (subject or file name).
    Names,
}

impl std::fmt::Display for Lifetime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.source {
            LifetimeSource::Setting => "validity_days",
            LifetimeSource::WatchSetting => "validity_days of its [[watch]]",
            LifetimeSource::Kept => "the old certificate's",
            LifetimeSource::Kubeadm(KubeadmSign::Span) => {
                "kubeadm's: the old certificate was signed with its CA's notBefore, for a span nobody chose"
            }
            LifetimeSource::Kubelet => {
                "kubelet's: a new self-signed pair with a new throwaway CA, as kubelet makes it"
            }
            LifetimeSource::Kubeadm(KubeadmSign::Names) => {
                "kubeadm's: the old certificate was signed with its CA's notBefore, and it and its CA have kubeadm's names"
            }
        };
        write!(f, "{} days, {why}", self.span.whole_days())
    }
}

/// kubeadm's certificate validity (`kubeadmconstants.CertificateValidityPeriod`).
pub const DEFAULT_LIFETIME_DAYS: u32 = 365;

/// The lifetime a renewed certificate gets: `validity_days` (its watch's, else the global
/// one) when set; else kubeadm's year for a leaf kubeadm signed ([`kubeadm_signed`]); else
/// the one it was issued with, notAfter - notBefore: never longer nor shorter.
pub fn lifetime(
    old: &CertFacts,
    path: &Path,
    ca: &CertFacts,
    setting: Option<(u32, LifetimeSource)>,
) -> Lifetime {
    let (span, source) = match (setting, kubeadm_signed(old, path, ca)) {
        (Some((days, source)), _) => (Duration::days(days.into()), source),
        (None, Some(sign)) => (
            Duration::days(DEFAULT_LIFETIME_DAYS.into()),
            LifetimeSource::Kubeadm(sign),
        ),
        (None, None) => (old.not_after - old.not_before, LifetimeSource::Kept),
    };
    Lifetime { span, source }
}

/// How far from a whole number of days a chosen lifetime may be: the few minutes tools set
/// notBefore back for clock skew (cfssl 5, Vault 30 s).
const CHOSEN_SLACK_SECS: i64 = 10 * 60;

/// Whether kubeadm signed `old` (at `path`), and what shows it. kubeadm gives a leaf its
/// CA's notBefore and a notAfter a year after the signing, so notAfter - notBefore counts
/// the CA's age at the signing as well, a span nobody chose. Its notBefore is then at or
/// before its CA's (before it, once the CA was re-issued with the same key). A leaf a
/// script made in its CA's very second, or one issued before a same-key re-issue of its
/// CA, has those notBefores too, but a span that is a whole number of days (give or take
/// the minutes tools set it back) — as has a kubeadm leaf renewed at the time of day its
/// CA was made: then the names kubeadm gives its CAs and leaves tell them apart.
fn kubeadm_signed(old: &CertFacts, path: &Path, ca: &CertFacts) -> Option<KubeadmSign> {
    if old.not_before > ca.not_before {
        return None;
    }
    let off_day = (old.not_after - old.not_before)
        .whole_seconds()
        .rem_euclid(86_400);
    let chosen = off_day <= CHOSEN_SLACK_SECS || off_day >= 86_400 - CHOSEN_SLACK_SECS;
    if !chosen {
        return Some(KubeadmSign::Span);
    }
    kubeadm_names(old, path, ca).then_some(KubeadmSign::Names)
}

/// The common names kubeadm gives its CAs (`certs.KubeadmCertRootCA`, `...EtcdCA`,
/// `...FrontProxyCA`).
const KUBEADM_CAS: [&str; 3] = ["kubernetes", "etcd-ca", "front-proxy-ca"];

/// The common names of the leaves kubeadm signs with them, but the etcd server's and peer's
/// (the node's name) and kubelet's client (`system:node:` and the node's name).
const KUBEADM_LEAVES: [&str; 9] = [
    "kube-apiserver",
    "kube-apiserver-kubelet-client",
    "kube-apiserver-etcd-client",
    "front-proxy-client",
    "kube-etcd-healthcheck-client",
    "kubernetes-admin",
    "kubernetes-super-admin",
    "system:kube-controller-manager",
    "system:kube-scheduler",
];

/// The files kubeadm writes its leaves to, under `/etc/kubernetes` (`pki/` and `pki/etcd/`
/// for certificates, the kubeconfigs beside them).
const KUBEADM_FILES: [&str; 12] = [
    "apiserver.crt",
    "apiserver-kubelet-client.crt",
    "apiserver-etcd-client.crt",
    "front-proxy-client.crt",
    "etcd/server.crt",
    "etcd/peer.crt",
    "etcd/healthcheck-client.crt",
    "admin.conf",
    "super-admin.conf",
    "controller-manager.conf",
    "scheduler.conf",
    "kubelet.conf",
];

/// Whether `old`'s CA has one of kubeadm's CA names and `old` one of its leaves' names or
/// files.
fn kubeadm_names(old: &CertFacts, path: &Path, ca: &CertFacts) -> bool {
    let cn = |f: &CertFacts| crate::format::cert::common_name(f.raw_subject());
    let ca_named = cn(ca).is_some_and(|n| KUBEADM_CAS.contains(&n.as_str()));
    let leaf_named = cn(old)
        .is_some_and(|n| KUBEADM_LEAVES.contains(&n.as_str()) || n.starts_with("system:node:"));
    let file = path.file_name().map(Path::new);
    let parent = path.parent().and_then(Path::file_name).map(Path::new);
    let in_file = KUBEADM_FILES.iter().any(|f| {
        let f = Path::new(f);
        match (
            f.parent().filter(|p| !p.as_os_str().is_empty()),
            f.file_name(),
        ) {
            (Some(dir), name) => parent == Some(dir) && file.map(|p| p.as_os_str()) == name,
            (None, name) => file.map(|p| p.as_os_str()) == name,
        }
    });
    ca_named && (leaf_named || in_file)
}
