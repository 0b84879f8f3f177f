//! CAs in the plan. A CA whose signing key is on the node (its own for a root,
//! its issuer's for an intermediate) is renewed within its own window
//! (`ca_renew_before_days`) with the same key, subject and key identifier: every
//! certificate the old one signed verifies against the new one, so nothing has a flag day.
//! Where a same-key renewal would break something it is refused, saying why; a CA that
//! cannot be renewed is reported from `ca_warning_days` on, as before.

use time::{Duration, OffsetDateTime};

use super::{Lifetime, LifetimeSource, PlanItem, Policy, Status, Verdict, days_until};
use crate::inventory::{Cert, Inventory, IssuerLink, KeyLink};
use crate::timefmt::utc_minute;

/// The verdict for CA certificate `i`.
pub(super) fn plan_ca(
    inv: &Inventory,
    policy: &Policy,
    i: usize,
    c: &Cert,
    now: OffsetDateTime,
    issuer_renewed: bool,
) -> PlanItem {
    let days_left = days_until(c.facts.not_after, now);
    let expired = now > c.facts.not_after;
    let in_warning = c.facts.not_after - now <= Duration::days(policy.ca_warning_days.into());
    let window = policy.ca_window_for(c.watch);
    // A CA whose whole life is not longer than the window is never due by it (it would be
    // due every day): it is reported as one this node cannot renew, from ca_warning_days.
    let span = c.facts.not_after - c.facts.not_before;
    // Dated ahead by a clock that ran fast: every certificate it signed is refused until
    // its notBefore. The clock of this pass was checked first (`crate::pass::clock`), so
    // the CA is re-issued now, with its own key, as at its end.
    let not_yet_valid = now < c.facts.not_before;
    let due = window.is_some_and(|w| (span > w && c.facts.not_after - now <= w) || not_yet_valid);
    let selected = policy
        .only
        .as_ref()
        .is_none_or(|paths| paths.contains(&c.path));
    // A CA is renewed on demand only when named (`renew --force CA-PATH`), not by `--all`.
    let forced = policy.force && policy.only.is_some();
    let blocker = match window {
        Some(w) => why_ca_unrenewable(inv, c, now, w, issuer_renewed),
        None => Some("CA renewal is off (renew_cas = false)".to_string()),
    };
    // A CA whose signing key is kept off the node on purpose (an offline root) is a layout,
    // not a failure: its window is said (500.200, then 500.210), the pass is not failed.
    let kept_off = blocker.is_some() && key_kept_off(inv, c);
    let wanted = selected && ((due && !kept_off) || forced);
    let when = utc_minute(c.facts.not_after);
    let ahead = format!(
        "not valid until {}: dated ahead by a clock that ran fast, so every certificate it signed is refused until then",
        utc_minute(c.facts.not_before)
    );
    let (status, reason) = match (&blocker, due) {
        (None, true) if expired => (Status::Expired, None),
        (None, true) if not_yet_valid => (Status::Due, Some(format!("{ahead}; due now"))),
        (Some(why), _) if not_yet_valid => (
            Status::Unrenewable,
            Some(format!("{ahead}; it cannot be re-issued here: {why}")),
        ),
        (None, true) => (Status::Due, None),
        (Some(why), _) if expired && kept_off => (
            Status::Unrenewable,
            Some(format!(
                "CA expired on {when}; its key is kept off this node ({why}): re-issue it where its key is, with the same key, and install the new CA certificate here"
            )),
        ),
        (Some(why), _) if expired => (
            Status::Unrenewable,
            Some(format!(
                "CA expired on {when} and cannot be renewed here: {why}"
            )),
        ),
        (Some(why), true) if kept_off && !forced => (
            Status::Unrenewable,
            Some(format!(
                "CA expires within {} days (on {when}); its key is kept off this node ({why}): re-issue it where its key is, with the same key (every certificate it signed keeps verifying), and install the new CA certificate here before then",
                days_left.ceil() as i64
            )),
        ),
        (Some(why), _) if in_warning || (wanted && due) => (
            Status::Unrenewable,
            Some(format!(
                "CA expires within {} days (on {when}) and cannot be renewed here: {why}",
                days_left.ceil() as i64
            )),
        ),
        // Named by the operator, far from its end: only why it cannot be done.
        (Some(why), _) if wanted => (
            Status::Unrenewable,
            Some(format!("CA (ends on {when}) cannot be renewed here: {why}")),
        ),
        // Another manager's: whose it is, said far from its end too.
        _ => (Status::Ok, crate::inventory::managed::reason(&c.path)),
    };
    PlanItem {
        cert: i,
        status,
        verdict: Verdict::of(wanted, blocker.is_none()),
        renewable: blocker.is_none(),
        renews_on: match (&blocker, window) {
            (None, Some(w)) if !due => Some(c.facts.not_after - w),
            _ => None,
        },
        reason,
        days_left,
        in_warning: in_warning || due || not_yet_valid,
        expired,
        not_yet_valid,
        is_ca: true,
        // The old certificate's lifetime, starting now: never inflated.
        lifetime: Some(Lifetime {
            span: c.facts.not_after - c.facts.not_before,
            source: LifetimeSource::Kept,
        }),
        copy_of: None,
        names_missing: Vec::new(),
        add_names: Vec::new(),
    }
}

/// Whether the key that signs CA `c` (its own for a root, its issuer's for an
/// intermediate) is not on this node, or is protected by a passphrase: kept off it on
/// purpose, as an offline root is.
fn key_kept_off(inv: &Inventory, c: &Cert) -> bool {
    let signer = match &c.issuer {
        IssuerLink::SelfSigned => c,
        IssuerLink::Found(s) => &inv.certs[*s],
        IssuerLink::NotFound(_) => return true,
    };
    matches!(signer.key, KeyLink::Missing | KeyLink::Encrypted(_))
}

/// Why this node cannot renew CA `c` with the same key, or `None` if it can.
pub fn why_ca_unrenewable(
    inv: &Inventory,
    c: &Cert,
    now: OffsetDateTime,
    window: Duration,
    issuer_renewed: bool,
) -> Option<String> {
    if let Some(why) = crate::inventory::managed::reason(&c.path) {
        return Some(why);
    }
    let mut why = Vec::new();
    if c.index > 0 || c.kubeconfig.is_some() {
        return Some(
            "a copy inside a bundle or kubeconfig: the CA is renewed from its own file".into(),
        );
    }
    // The key that signs it: its own for a root, its issuer's for an intermediate.
    let signer = match &c.issuer {
        IssuerLink::SelfSigned => c,
        IssuerLink::Found(s) => &inv.certs[*s],
        IssuerLink::NotFound(w) => {
            return Some(format!(
                "its issuer is not on this node ({w}): renew it where its issuer's key is"
            ));
        }
    };
    let signer_path = signer.path.display();
    match signer.key {
        KeyLink::Matched(_) | KeyLink::SameFile(_) => {}
        KeyLink::Missing => why.push(match inv.unreadable_key(signer) {
            Some(e) => format!("CA key cannot be read: {}: {}", e.path.display(), e.reason),
            None => format!("CA key not on this host: {signer_path} has no key beside it"),
        }),
        KeyLink::Encrypted(_) => why.push(format!(
            "the key of {signer_path} is encrypted: certrenewd cannot use a key protected by a passphrase"
        )),
        KeyLink::Mismatch(k) => why.push(format!(
            "CA key does not match CA certificate: {} does not belong to {signer_path}",
            inv.keys[k].path.display()
        )),
    }
    if !std::ptr::eq(signer, c) && !issuer_renewed && signer.facts.not_after - now <= window {
        why.push(format!(
            "its issuer {signer_path} ends on {} (within the CA renewal window) and is not renewed here",
            utc_minute(signer.facts.not_after)
        ));
    }
    if std::ptr::eq(signer, c) && c.facts.aki_names_serial {
        why.push(
            "its authorityKeyIdentifier names its own serial, which a re-issue changes; rotate it by hand"
                .into(),
        );
    }
    let span = c.facts.not_after - c.facts.not_before;
    if span <= window {
        why.push(format!(
            "its lifetime of {} days is not longer than the {}-day CA renewal window: a renewed CA would be due at once (set ca_renew_before_days lower)",
            span.whole_days(),
            window.whole_days()
        ));
    }
    // Another CA certificate for the same subject and key, from another issuer: a
    // cross-signed CA, whose chains a re-issue of one of them would not keep.
    let cross = inv.certs.iter().find(|o| {
        o.facts.is_ca
            && o.index == 0
            && o.facts.raw_subject() == c.facts.raw_subject()
            && o.facts.public_key.raw == c.facts.public_key.raw
            && o.facts.raw_issuer() != c.facts.raw_issuer()
    });
    if let Some(o) = cross {
        why.push(format!(
            "cross-signed: {} holds the same subject and key from another issuer; rotate it by hand",
            o.path.display()
        ));
    }
    // What it signed must verify against the re-issue: a certificate whose
    // authorityKeyIdentifier names this CA's serial would not.
    let pinned: Vec<String> = inv
        .certs
        .iter()
        .filter(|l| matches!(l.issuer, IssuerLink::Found(s) if std::ptr::eq(&inv.certs[s], c)))
        .filter(|l| l.facts.aki_names_serial)
        .map(|l| l.path.display().to_string())
        .collect();
    if !pinned.is_empty() {
        why.push(format!(
            "{} name this CA's serial in their authorityKeyIdentifier and would not verify against a re-issue: {} (reissue them without authorityCertSerialNumber first)",
            match pinned.len() {
                1 => "1 certificate signed by it".to_string(),
                n => format!("{n} certificates signed by it"),
            },
            pinned.join(", ")
        ));
    }
    (!why.is_empty()).then(|| why.join("; also: "))
}
