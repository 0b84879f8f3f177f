//! Signing: the new certificate for an old one, built from its to-be-signed bytes, signed
//! with the CA key, and verified before anything is written.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use time::OffsetDateTime;

use super::{RenewOptions, keys, reissue};
use crate::format::cert::CertFacts;
use crate::inventory::Inventory;

/// A new certificate for `c`, signed by its CA and verified, with `add_names` appended to
/// its subjectAltName; with the new key pair when rotating.
pub(crate) fn sign(
    inv: &Inventory,
    c: &crate::inventory::Cert,
    lifetime: time::Duration,
    add_names: &[crate::served::Name],
    ca_keys: &HashMap<PathBuf, anyhow::Result<rcgen::KeyPair>>,
    opts: &RenewOptions,
    plan: &crate::plan::Plan,
) -> anyhow::Result<(CertFacts, Option<rcgen::KeyPair>)> {
    let now = plan.now;
    // A root CA signs its own re-issue (same key, subject and key identifier).
    let ca = inv.signer_of(c).context("no CA found")?;
    let ca_key_file = inv.matched_key(ca).context("CA key not on this host")?;
    let ca_key = match ca_keys.get(&ca_key_file.path) {
        Some(Ok(k)) => k,
        Some(Err(e)) => bail!("CA key unusable: {e:#}"),
        None => bail!("CA key not loaded"),
    };
    // A CA keeps its key: that is what keeps everything it signed verifying.
    let new_key = if opts.rotate_keys && !c.facts.is_ca {
        Some(keys::generate(&c.facts.public_key.alg)?)
    } else {
        None
    };
    let ca_alg = &ca.facts.public_key.alg;
    let sig_alg = reissue::signature_algorithm(ca_alg).map_err(|e| anyhow!(e))?;
    let (not_before, not_after) = reissue::validity(lifetime, signer_end(inv, c, plan), now);
    let r = reissue::Reissue {
        old: &c.facts,
        ca: &ca.facts,
        serial: random_serial()?,
        not_before,
        not_after,
        new_spki: new_key.as_ref().map(|kp| {
            (
                rcgen::PublicKeyData::subject_public_key_info(kp),
                kp.public_key_raw().to_vec(),
            )
        }),
        add_names,
    };
    let tbs = r
        .tbs(&sig_alg)
        .map_err(|e| anyhow!("building the certificate: {e}"))?;
    let signature = rcgen::SigningKey::sign(ca_key, &tbs)
        .map_err(|e| anyhow!("signing with {}: {e}", ca_key_file.path.display()))?;
    let new_der = reissue::assemble(&tbs, &sig_alg, &signature);
    let expected_key = new_key
        .as_ref()
        .map_or(c.facts.public_key.raw.as_slice(), |kp| kp.public_key_raw());
    // A CA's own window was checked by the plan (its lifetime is longer than it).
    let window = match c.facts.is_ca {
        true => 0,
        false => opts.renew_before_days,
    };
    let verify = |der: Vec<u8>, whose: &str| {
        verify_new(
            &c.facts,
            add_names,
            &ca.facts,
            der,
            expected_key,
            now,
            window,
        )
        .and_then(|new| match c.facts.is_ca {
            true => verify_same_ca(inv, c, new),
            false => Ok(new),
        })
        .map_err(|e| anyhow!("{whose} failed verification, nothing written: {e}"))
    };
    // Verified before it is offered to the cluster: a re-issue this node would refuse is
    // never published for the others to take.
    let mut new = crate::failpoint::io("verify-reissue")
        .map_err(|e| anyhow!("the new certificate failed verification, nothing written: {e}"))
        .and_then(|()| verify(new_der.clone(), "the new certificate"))?;
    if let (true, Some(agreement)) = (c.facts.is_ca, &opts.ca_agreement) {
        // One re-issue for the cluster; another controller's is checked as ours was.
        let agreed = agreement.agree(c, new_der.clone(), &opts.fresh)?;
        if agreed != new_der {
            new = verify(
                agreed,
                "the re-issue another controller published for the cluster",
            )?;
        }
    }
    Ok((new, new_key))
}

/// A re-issued CA must stand in for the old one: same subject, key and key identifier, and
/// every certificate under the watches that the old one signed verifies against it.
fn verify_same_ca(
    inv: &Inventory,
    old: &crate::inventory::Cert,
    new: CertFacts,
) -> anyhow::Result<CertFacts> {
    if new.public_key.raw != old.facts.public_key.raw {
        bail!("the CA's key differs");
    }
    if new.ski() != old.facts.ski() {
        bail!("the CA's subjectKeyIdentifier differs");
    }
    if !new.is_ca {
        bail!("the re-issue is not a CA");
    }
    let signed = inv.certs.iter().filter(|l| {
        !std::ptr::eq(*l, old) && inv.issuer_of(l).is_some_and(|ca| std::ptr::eq(ca, old))
    });
    for l in signed {
        l.facts.signed_by(&new).map_err(|e| {
            anyhow!(
                "{} (signed by the old CA) does not verify against the re-issue: {e}",
                l.path.display()
            )
        })?;
    }
    Ok(new)
}

/// Where a renewal of `c` is cut: its CA's notAfter, or the notAfter of the CA's re-issue
/// when this pass renews the CA too (same key); a root's re-issue is not cut.
fn signer_end(
    inv: &Inventory,
    c: &crate::inventory::Cert,
    plan: &crate::plan::Plan,
) -> OffsetDateTime {
    let now = plan.now;
    let uncut = now + time::Duration::days(100 * 365);
    match c.issuer {
        crate::inventory::IssuerLink::Found(s) => match plan.items.get(s) {
            Some(it) if it.renews() => it.lifetime.map_or(inv.certs[s].facts.not_after, |l| {
                reissue::validity(l.span, uncut, now).1
            }),
            _ => inv.certs[s].facts.not_after,
        },
        _ => uncut,
    }
}

fn random_serial() -> anyhow::Result<[u8; 16]> {
    let mut s = [0u8; 16];
    aws_lc_rs::rand::fill(&mut s).map_err(|_| anyhow!("no randomness for the serial"))?;
    s[0] = (s[0] & 0x7f) | 0x40; // positive, and always 16 octets
    Ok(s)
}

/// Checks the new certificate before anything is written.
fn verify_new(
    old: &CertFacts,
    add_names: &[crate::served::Name],
    ca: &CertFacts,
    new_der: Vec<u8>,
    key_raw: &[u8],
    now: OffsetDateTime,
    window_days: u32,
) -> anyhow::Result<CertFacts> {
    let extensions_before = reissue::extensions_but_key_ids(&old.der, add_names);
    let extensions_after = reissue::extensions_but_key_ids(&new_der, &[]);
    let new = CertFacts::parse(new_der)?;
    new.signed_by(ca)
        .map_err(|e| anyhow!("does not verify against the CA: {e}"))?;
    if new.raw_subject() != old.raw_subject() {
        bail!("subject differs from the old certificate");
    }
    if new.raw_issuer() != ca.raw_subject() {
        bail!("issuer differs from the CA's subject");
    }
    if extensions_before != extensions_after {
        bail!("names, usages or other extensions differ from the old certificate");
    }
    if new.public_key.raw != key_raw {
        bail!("public key does not match the key");
    }
    // A re-issue taken from another controller was dated by its clock: say which clock is
    // off. Its notBefore is five minutes back, so only a larger skew is refused, and only
    // until this clock reaches it.
    if now < new.not_before {
        bail!(
            "not valid yet: valid from {}, and this node's clock reads {} (the clock that dated it runs ahead of this one; it is taken once this clock reaches that time, or once the clocks agree)",
            crate::timefmt::rfc3339(new.not_before),
            crate::timefmt::rfc3339(now)
        );
    }
    if now > new.not_after {
        bail!(
            "expired on {}, and this node's clock reads {}",
            crate::timefmt::rfc3339(new.not_after),
            crate::timefmt::rfc3339(now)
        );
    }
    if new.not_after - now <= time::Duration::days(window_days.into()) {
        bail!(
            "it would expire on {} — still inside the {window_days}-day renewal window (the CA's own expiry or the certificate lifetime is too short; see validity_days)",
            new.not_after.date()
        );
    }
    Ok(new)
}
