//! kubelet's self-signed serving pair (`kubelet.crt`, `kubelet.key`), renewed the way kubelet
//! makes it when it starts without one (client-go's `GenerateSelfSignedCertKey`): a new
//! throwaway CA `<host>-ca@<unix time>` (serial 1, its key discarded) and a leaf
//! `<host>@<unix time>` (serial 2, serverAuth) it signs, both RSA 2048, valid from an hour
//! ago for a year; `kubelet.crt` holds the leaf then the CA, `kubelet.key` the leaf's key.
//! The leaf keeps the old one's names. The pair is installed like any renewal (backed up,
//! atomically, kubelet restarted under the usual rules).

use anyhow::{Context, anyhow, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyUsagePurpose, SanType, SerialNumber,
};
use time::Duration;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::RenewOptions;
use super::keys;
use super::prepare::{Prepared, as_scanned, new_key_meta, resolve_target};
use crate::format::cert::CertFacts;
use crate::format::key::KeyAlg;
use crate::fsutil::FileMeta;
use crate::inventory::{Cert, Inventory};
use crate::plan::Plan;

use crate::inventory::kubelet::SELF_SIGNED_DAYS as LIFETIME_DAYS;

/// A new pair for `inv.certs[i]`, kubelet's `kubelet.crt`.
pub(super) fn prepare(
    inv: &Inventory,
    i: usize,
    opts: &RenewOptions,
    plan: &Plan,
) -> anyhow::Result<Prepared> {
    let c = &inv.certs[i];
    let key_file = inv.matched_key(c).context("key missing")?;
    let (cert_target, _) = as_scanned(c, opts)?;
    let host = host_of(c);
    let now = plan.now;
    let not_before = (now - Duration::hours(1))
        .replace_nanosecond(0)
        .unwrap_or(now);
    let not_after = not_before + Duration::days(LIFETIME_DAYS);
    let stamp = now.unix_timestamp();
    let rsa = KeyAlg::Rsa(2048);
    let (ca_key, leaf_key) = (keys::generate(&rsa)?, keys::generate(&rsa)?);

    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{host}-ca@{stamp}"));
    ca.serial_number = Some(SerialNumber::from_slice(&[1]));
    (ca.not_before, ca.not_after) = (not_before, not_after);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(|e| anyhow!("making the throwaway CA: {e}"))?;

    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{host}@{stamp}"));
    leaf.serial_number = Some(SerialNumber::from_slice(&[2]));
    (leaf.not_before, leaf.not_after) = (not_before, not_after);
    leaf.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.subject_alt_names = names_of(&c.facts.der)?;
    let issuer = Issuer::from_params(&ca, &ca_key);
    let leaf_cert = leaf
        .signed_by(&leaf_key, &issuer)
        .map_err(|e| anyhow!("signing the serving certificate: {e}"))?;

    let new = CertFacts::parse(leaf_cert.der().to_vec())
        .map_err(|e| anyhow!("the new serving certificate: {e}"))?;
    new.signed_by(
        &CertFacts::parse(ca_cert.der().to_vec())
            .map_err(|e| anyhow!("the new throwaway CA: {e}"))?,
    )
    .map_err(|e| anyhow!("the new certificate failed verification, nothing written: {e}"))?;
    if new.public_key.raw != leaf_key.public_key_raw() {
        bail!("the new certificate failed verification, nothing written: its key differs");
    }
    let cert_bytes = format!("{}{}", leaf_cert.pem(), ca_cert.pem()).into_bytes();
    let key_target = resolve_target(&key_file.path, &opts.roots)?;
    let key_bytes = keys::encode(&leaf_key, key_file.info.format, key_file.info.encoding)?;
    let key_meta = new_key_meta(&key_target)?;
    Ok(Prepared {
        cert: i,
        cert_meta: FileMeta::of(&cert_target)?,
        cert_target,
        link: None,
        cert_bytes,
        rotated: true,
        key: Some((key_target, key_bytes, key_meta)),
        serial: new.serial,
        not_before: new.not_before,
        not_after: new.not_after,
        also: Vec::new(),
    })
}

/// The host kubelet named the pair after: the old leaf's `<host>@<unix time>`, else its
/// throwaway CA's `<host>-ca@<unix time>`.
fn host_of(c: &Cert) -> String {
    let cn = crate::format::cert::common_name(c.facts.raw_subject()).unwrap_or_default();
    match cn.rsplit_once('@') {
        Some((host, t)) if !host.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            host.to_string()
        }
        _ => crate::inventory::kubelet::throwaway_ca(c.facts.raw_issuer())
            .and_then(|ca| ca.rsplit_once("-ca@").map(|(h, _)| h.to_string()))
            .unwrap_or(cn),
    }
}

/// The old leaf's DNS names and addresses, in order, for the new one.
fn names_of(der: &[u8]) -> anyhow::Result<Vec<SanType>> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| anyhow!("reading the old names: {e}"))?;
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for n in &san.value.general_names {
        match n {
            GeneralName::DNSName(d) => out.push(SanType::DnsName(
                (*d).try_into()
                    .map_err(|e| anyhow!("the old name {d:?}: {e}"))?,
            )),
            GeneralName::IPAddress(b) => match b.len() {
                4 => out.push(SanType::IpAddress(
                    <[u8; 4]>::try_from(*b).map(std::net::IpAddr::from)?,
                )),
                16 => out.push(SanType::IpAddress(
                    <[u8; 16]>::try_from(*b).map(std::net::IpAddr::from)?,
                )),
                _ => bail!("the old certificate names an address of {} bytes", b.len()),
            },
            _ => {}
        }
    }
    Ok(out)
}
