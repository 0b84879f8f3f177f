//! Signing: the new certificate for an old one, built from its to-be-signed bytes, signed
//! with the CA key, and verified before anything is written.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use time::OffsetDateTime;

use super::{RenewOptions, keys, reissue};
use crate::format::cert::CertFacts;
use crate::inventory::Inventory;

/// A new certificate for `c`, signed by its CA and verified; with the new key pair when
/// rotating.
pub(crate) fn sign(
    inv: &Inventory,
    c: &crate::inventory::Cert,
    lifetime: time::Duration,
    ca_keys: &HashMap<PathBuf, Result<rcgen::KeyPair, String>>,
    opts: &RenewOptions,
    now: OffsetDateTime,
) -> anyhow::Result<(CertFacts, Option<rcgen::KeyPair>)> {
    let ca = inv.issuer_of(c).context("no CA found")?;
    let ca_key_file = inv.matched_key(ca).context("CA key not on this host")?;
    let ca_key = match ca_keys.get(&ca_key_file.path) {
        Some(Ok(k)) => k,
        Some(Err(e)) => bail!("CA key unusable: {e}"),
        None => bail!("CA key not loaded"),
    };
    let new_key = if opts.rotate_keys {
        Some(keys::generate(&c.facts.public_key.alg)?)
    } else {
        None
    };
    let ca_alg = &ca.facts.public_key.alg;
    let sig_alg = reissue::signature_algorithm(ca_alg).map_err(|e| anyhow!(e))?;
    let (not_before, not_after) = reissue::validity(lifetime, ca.facts.not_after, now);
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
    let new = verify_new(
        &c.facts,
        &ca.facts,
        new_der,
        expected_key,
        opts.renew_before_days,
        now,
    )
    .map_err(|e| anyhow!("the new certificate failed verification, nothing written: {e}"))?;
    Ok((new, new_key))
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
    ca: &CertFacts,
    new_der: Vec<u8>,
    key_raw: &[u8],
    window_days: u32,
    now: OffsetDateTime,
) -> Result<CertFacts, String> {
    let extensions_before = reissue::extensions_but_key_ids(&old.der);
    let extensions_after = reissue::extensions_but_key_ids(&new_der);
    let new = CertFacts::parse(new_der)?;
    new.signed_by(ca)
        .map_err(|e| format!("does not verify against the CA: {e}"))?;
    if new.raw_subject() != old.raw_subject() {
        return Err("subject differs from the old certificate".into());
    }
    if new.raw_issuer() != ca.raw_subject() {
        return Err("issuer differs from the CA's subject".into());
    }
    if extensions_before != extensions_after {
        return Err("names, usages or other extensions differ from the old certificate".into());
    }
    if new.public_key.raw != key_raw {
        return Err("public key does not match the key".into());
    }
    if now < new.not_before || now > new.not_after {
        return Err("not valid now".into());
    }
    if new.not_after - now <= time::Duration::days(window_days.into()) {
        return Err(format!(
            "it would expire on {} — still inside the {window_days}-day renewal window (the CA's own expiry or the certificate lifetime is too short; see validity_days)",
            new.not_after.date()
        ));
    }
    Ok(new)
}
