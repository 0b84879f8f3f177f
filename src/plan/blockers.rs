//! Why a leaf cannot be renewed on this node: its kubeconfig, its place, its key, its CA
//! and the lifetime a renewal would get. Every problem is said, in the order to fix them.

use time::{Duration, OffsetDateTime};

use super::{LifetimeSource, lifetime};
use crate::format::kubeconfig::KubeconfigUser;
use crate::inventory::{Cert, Inventory, IssuerLink, KeyLink};
use crate::timefmt::utc_minute;

/// Why this host cannot renew `c`, or `None` if it can: every problem, in the order an
/// operator fixes them (`; also: ` between them), so that fixing the first does not only
/// reveal the next at the following pass. A certificate certrenewd leaves to others (a
/// kubeconfig's external file, a bundle's later certificate) is said to be that alone.
pub fn why_unrenewable(
    inv: &Inventory,
    c: &Cert,
    now: OffsetDateTime,
    window: Duration,
    validity_days: Option<(u32, LifetimeSource)>,
    issuer_renewed: bool,
) -> Option<String> {
    if let Some(why) = crate::inventory::managed::reason(&c.path) {
        return Some(why);
    }
    if let Some(k) = &c.kubeconfig
        && let Some(why) = kubeconfig_blocker(c, k)
    {
        return Some(why);
    }
    if crate::inventory::kubelet::is_self_signed_serving(c) {
        // Renewed as kubelet makes it (a new throwaway CA): only its key and place matter.
        let mut why: Vec<String> = key_blocker(inv, c).into_iter().collect();
        if inv.outside_watches(c) {
            why.push(format!(
                "{} resolves to {}, outside the watched directories: certrenewd writes only inside them",
                c.path.display(),
                c.real().display()
            ));
        }
        return (!why.is_empty()).then(|| why.join("; also: "));
    }
    if c.index > 0 {
        return Some(format!(
            "not renewable in place: certificate {} of {} in a bundle file (only a file's first certificate is renewed)",
            c.index + 1,
            c.certs_in_file
        ));
    }
    let mut why = Vec::new();
    if c.kubeconfig.is_none() && inv.outside_watches(c) {
        why.push(format!(
            "{} resolves to {}, outside the watched directories: certrenewd writes only inside them (watch that directory, or replace the symlink by the file)",
            c.path.display(),
            c.real().display()
        ));
    }
    why.extend(key_blocker(inv, c));
    match &c.issuer {
        IssuerLink::Found(i) => {
            let ca = &inv.certs[*i];
            why.extend(ca_key_blocker(inv, ca));
            // A CA out of its validity says it all of the lifetime a renewal would get; a CA
            // this pass renews (same key) is not cut short.
            match ca_time_blocker(ca, now) {
                Some(_) | None if issuer_renewed => {
                    why.extend(lifetime_blocker(c, ca, None, window, validity_days))
                }
                Some(t) => why.push(t),
                None => why.extend(lifetime_blocker(c, ca, Some(now), window, validity_days)),
            }
        }
        IssuerLink::SelfSigned => why.push("no CA found: the certificate is self-signed".into()),
        IssuerLink::NotFound(w) => why.push(format!("no CA found: {w}")),
    }
    (!why.is_empty()).then(|| why.join("; also: "))
}

/// Why a certificate from a kubeconfig cannot be renewed here, if it cannot.
fn kubeconfig_blocker(c: &Cert, k: &KubeconfigUser) -> Option<String> {
    if let Some(file) = &k.external {
        return Some(format!(
            "the kubeconfig names the external file {} (user {:?}): certrenewd does not rewrite it; kubelet rotates its own client certificate (rotateCertificates), other clients renew it where it was made",
            file.display(),
            k.user
        ));
    }
    if let Some(shared) = k.shared {
        return Some(format!(
            "client-certificate-data of user {:?} {shared} in {}; certrenewd rewrites a value only where it stands alone: renew it by hand",
            k.user,
            c.path.display()
        ));
    }
    if c.key == KeyLink::Missing {
        return Some(format!(
            "key missing: user {:?} has no client-key-data",
            k.user
        ));
    }
    match (&c.issuer, &k.signed_by_cluster_ca) {
        (IssuerLink::NotFound(_), Some(ca)) => Some(format!(
            "CA key not on this host: the certificate-authority-data ({ca}) signed it, but no watched directory holds that CA with its key (watch the directory with ca.crt and ca.key, e.g. /etc/kubernetes/pki)"
        )),
        _ => None,
    }
}

/// Why the certificate's own key cannot be used, if it cannot.
fn key_blocker(inv: &Inventory, c: &Cert) -> Option<String> {
    let key_path = |k: usize| inv.keys[k].path.display().to_string();
    match c.key {
        KeyLink::Matched(_) | KeyLink::SameFile(_) => None,
        KeyLink::Missing => Some(unreadable_key(inv, c).unwrap_or_else(|| {
            "key missing: no matching key file (x.key, x-key.pem) beside the certificate".into()
        })),
        KeyLink::Encrypted(k) => Some(format!(
            "key is encrypted ({}): certrenewd cannot use a key protected by a passphrase",
            key_path(k)
        )),
        KeyLink::Mismatch(k) => Some(format!(
            "key does not match certificate: {} holds a different key",
            key_path(k)
        )),
    }
}

/// The certificate's key file by name, when it is there but cannot be read or parsed.
fn unreadable_key(inv: &Inventory, c: &Cert) -> Option<String> {
    (inv.unreadable_key(c))
        .map(|e| format!("key cannot be read: {}: {}", e.path.display(), e.reason))
}

/// Why the CA's key cannot sign, if it cannot.
fn ca_key_blocker(inv: &Inventory, ca: &Cert) -> Option<String> {
    let key_path = |k: usize| inv.keys[k].path.display().to_string();
    let ca_path = ca.path.display();
    match ca.key {
        KeyLink::Matched(_) | KeyLink::SameFile(_) => None,
        KeyLink::Missing => Some(match inv.unreadable_key(ca) {
            // There, but not readable by this user: not known to be absent.
            Some(e) => format!("CA key cannot be read: {}: {}", e.path.display(), e.reason),
            None => format!(
                "CA key not on this host: {ca_path} has no key beside it (renew on the host that holds the CA key, or copy the key here)"
            ),
        }),
        KeyLink::Encrypted(k) => Some(format!(
            "CA key is encrypted ({}): certrenewd cannot use a key protected by a passphrase",
            key_path(k)
        )),
        KeyLink::Mismatch(k) => Some(format!(
            "CA key does not match CA certificate: {} does not belong to {ca_path}",
            key_path(k)
        )),
    }
}

/// Why the CA cannot sign now, if its validity forbids it.
fn ca_time_blocker(ca: &Cert, now: OffsetDateTime) -> Option<String> {
    let ca_path = ca.path.display();
    if now > ca.facts.not_after {
        return Some(format!(
            "CA expired on {} ({ca_path}): the CA must be rotated first",
            utc_minute(ca.facts.not_after)
        ));
    }
    if now < ca.facts.not_before {
        return Some(format!(
            "CA not yet valid until {} ({ca_path}): check the clock",
            utc_minute(ca.facts.not_before)
        ));
    }
    None
}

/// Why a renewed certificate would be due again at once, if it would.
fn lifetime_blocker(
    c: &Cert,
    ca: &Cert,
    now: Option<OffsetDateTime>,
    window: Duration,
    validity_days: Option<(u32, LifetimeSource)>,
) -> Option<String> {
    let lifetime = lifetime(&c.facts, &c.path, &ca.facts, validity_days);
    if lifetime.span <= window {
        return Some(format!(
            "lifetime of {} is not longer than the {}-day renewal window: a renewed certificate would be due at once; set validity_days",
            lifetime,
            window.whole_days()
        ));
    }
    if let Some(now) = now
        && ca.facts.not_after - now <= window
    {
        return Some(format!(
            "CA expires within the renewal window (on {}, {}): a renewed certificate would still be due; rotate the CA",
            utc_minute(ca.facts.not_after),
            ca.path.display()
        ));
    }
    None
}
