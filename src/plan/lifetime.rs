//! The lifetime a renewal gives a leaf: the setting, kubeadm's year for what kubeadm
//! signed, else the old certificate's own, never longer nor shorter.

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
    /// kubeadm's year: the old notBefore is its CA's (see [`kubeadm_signed`]).
    Kubeadm,
}

impl std::fmt::Display for Lifetime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.source {
            LifetimeSource::Setting => "validity_days",
            LifetimeSource::WatchSetting => "validity_days of its [[watch]]",
            LifetimeSource::Kept => "the old certificate's",
            LifetimeSource::Kubeadm => {
                "kubeadm's: the old certificate was signed with its CA's notBefore"
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
    ca: &CertFacts,
    setting: Option<(u32, LifetimeSource)>,
) -> Lifetime {
    let (span, source) = match setting {
        Some((days, source)) => (Duration::days(days.into()), source),
        None if kubeadm_signed(old, ca) => (
            Duration::days(DEFAULT_LIFETIME_DAYS.into()),
            LifetimeSource::Kubeadm,
        ),
        None => (old.not_after - old.not_before, LifetimeSource::Kept),
    };
    Lifetime { span, source }
}

/// How far from a whole number of days a chosen lifetime may be: the few minutes tools set
/// notBefore back for clock skew (cfssl 5, Vault 30 s).
const CHOSEN_SLACK_SECS: i64 = 10 * 60;

/// Whether kubeadm signed `old`: kubeadm gives a leaf its CA's notBefore and a notAfter a
/// year after the signing, so notAfter - notBefore counts the CA's age at the signing as
/// well, a span nobody chose. Its notBefore is then at or before its CA's (before it, once
/// the CA was re-issued with the same key). A leaf a script made in its CA's very second,
/// or one issued before a same-key re-issue of its CA, has those notBefores too, but a
/// span that is a whole number of days (give or take the minutes tools set it back).
fn kubeadm_signed(old: &CertFacts, ca: &CertFacts) -> bool {
    let off_day = (old.not_after - old.not_before)
        .whole_seconds()
        .rem_euclid(86_400);
    let chosen = off_day <= CHOSEN_SLACK_SECS || off_day >= 86_400 - CHOSEN_SLACK_SECS;
    old.not_before <= ca.not_before && !chosen
}
