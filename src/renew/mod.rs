//! Renewal: reissue every planned certificate from its CA, verify it, back up the old files,
//! and install the new ones atomically under a pending record.

pub mod keys;
mod kubeconfig;
pub mod reissue;
pub mod txn;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use time::OffsetDateTime;

use crate::fsutil::{self, FileMeta};
use crate::inventory::cert::CertFacts;
use crate::inventory::{Encoding, Inventory, par_map, pem};
use crate::plan::Plan;

/// What the renewer is told besides the plan.
#[derive(Debug, Clone)]
pub struct RenewOptions {
    /// Generate new keys instead of reusing the old ones.
    pub rotate_keys: bool,
    /// Lifetime override for renewed certificates.
    pub validity_days: Option<u32>,
    /// The renewal window: a renewed certificate must end after it.
    pub renew_before_days: u32,
    /// Alarm state and the pending record.
    pub state_dir: PathBuf,
    /// Backup sets.
    pub backup_dir: PathBuf,
    /// Watch roots (files are only written inside these).
    pub roots: Vec<PathBuf>,
    /// Units of each watch, by watch index (recorded for restart after a crash).
    pub units: Vec<Vec<String>>,
    /// Static pods of each watch, by watch index (recorded likewise).
    pub pods: Vec<Vec<String>>,
    /// Backup sets kept.
    pub backup_keep: u32,
    /// Backup sets older than this are pruned.
    pub backup_max_age_days: u32,
}

/// How one renewal went.
#[derive(Debug, Clone, PartialEq)]
pub enum RenewResult {
    /// Installed.
    Renewed {
        /// The new serial, hex.
        serial: String,
        /// The new notAfter.
        not_after: OffsetDateTime,
        /// Whether a new key was written.
        rotated: bool,
    },
    /// Nothing was written for it.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One certificate's renewal.
#[derive(Debug, Clone, PartialEq)]
pub struct RenewOutcome {
    /// Index into `Inventory::certs`.
    pub cert: usize,
    /// The certificate file.
    pub path: PathBuf,
    /// Watch index (for the units to restart).
    pub watch: usize,
    /// What happened.
    pub result: RenewResult,
}

impl RenewOutcome {
    /// Whether it was renewed.
    pub fn renewed(&self) -> bool {
        matches!(self.result, RenewResult::Renewed { .. })
    }
}

/// New file contents ready to install.
struct Prepared {
    cert: usize,
    cert_target: PathBuf,
    cert_bytes: Vec<u8>,
    cert_meta: FileMeta,
    key: Option<(PathBuf, Vec<u8>, FileMeta)>,
    serial: String,
    not_after: OffsetDateTime,
    /// A new key was generated (written to `key`, or inside `cert_bytes` for a kubeconfig).
    rotated: bool,
    /// Further certificates renewed by the same file (other users of a kubeconfig).
    also: Vec<(usize, String, OffsetDateTime)>,
}

impl Prepared {
    /// Every certificate these bytes renew, with its new serial and notAfter.
    fn renewed(&self) -> impl Iterator<Item = (usize, &str, OffsetDateTime)> {
        std::iter::once((self.cert, self.serial.as_str(), self.not_after))
            .chain(self.also.iter().map(|(i, s, t)| (*i, s.as_str(), *t)))
    }
}

/// Renews what the plan says. Every outcome is reported; nothing is written for a failure.
pub fn renew(inv: &Inventory, plan: &Plan, opts: &RenewOptions) -> Vec<RenewOutcome> {
    let now = plan.now;
    let items: Vec<usize> = plan.renewals().map(|i| i.cert).collect();
    if items.is_empty() {
        return Vec::new();
    }
    // Load each CA key once.
    let mut ca_keys: HashMap<PathBuf, Result<rcgen::KeyPair, String>> = HashMap::new();
    for &i in &items {
        if let Some(key) = inv
            .issuer_of(&inv.certs[i])
            .and_then(|ca| inv.matched_key(ca))
        {
            ca_keys
                .entry(key.path.clone())
                .or_insert_with(|| keys::load(&key.path).map_err(|e| format!("{e:#}")));
        }
    }
    // One piece of work per file: a kubeconfig's users are renewed together.
    let mut work: Vec<Vec<usize>> = Vec::new();
    for &i in &items {
        let c = &inv.certs[i];
        let same_file = |w: &Vec<usize>| {
            c.kubeconfig.is_some()
                && inv.certs[w[0]].kubeconfig.is_some()
                && inv.certs[w[0]].path == c.path
        };
        match work.iter_mut().find(|w| same_file(w)) {
            Some(w) => w.push(i),
            None => work.push(vec![i]),
        }
    }
    let prepared = par_map(&work, |w| {
        if inv.certs[w[0]].kubeconfig.is_some() {
            kubeconfig::prepare(inv, w, &ca_keys, opts, now)
        } else {
            prepare(inv, w[0], &ca_keys, opts, now)
        }
    });
    let mut outcomes = Vec::new();
    let mut ready = Vec::new();
    for (w, p) in work.iter().zip(prepared) {
        match p {
            Ok(p) => ready.push(p),
            Err(e) => outcomes.extend(w.iter().map(|&i| failed(inv, i, format!("{e:#}")))),
        }
    }
    if !ready.is_empty() {
        outcomes.extend(install(inv, ready, opts, now));
    }
    outcomes.sort_by_key(|o| o.cert);
    if let Err(e) = txn::prune(
        &opts.backup_dir,
        opts.backup_keep,
        opts.backup_max_age_days,
        now,
    ) {
        tracing::warn!("pruning backups in {}: {e:#}", opts.backup_dir.display());
    }
    outcomes
}

fn failed(inv: &Inventory, i: usize, reason: String) -> RenewOutcome {
    let c = &inv.certs[i];
    RenewOutcome {
        cert: i,
        path: c.path.clone(),
        watch: c.watch,
        result: RenewResult::Failed { reason },
    }
}

/// The real file to write for `path`: a symlink is followed only to a file inside a watch.
fn resolve_target(path: &Path, roots: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let inside = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|r| real.starts_with(&r));
    if !inside {
        bail!(
            "{} resolves to {}, outside the watched directories: not written",
            path.display(),
            real.display()
        );
    }
    Ok(real)
}

fn random_serial() -> anyhow::Result<[u8; 16]> {
    let mut s = [0u8; 16];
    aws_lc_rs::rand::fill(&mut s).map_err(|_| anyhow!("no randomness for the serial"))?;
    s[0] = (s[0] & 0x7f) | 0x40; // positive, and always 16 octets
    Ok(s)
}

/// A new certificate for `c`, signed by its CA and verified; with the new key pair when
/// rotating.
pub(crate) fn sign(
    inv: &Inventory,
    c: &crate::inventory::Cert,
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
    let (not_before, not_after) = reissue::validity(&c.facts, &ca.facts, opts.validity_days, now);
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
    let new = verify(
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

fn prepare(
    inv: &Inventory,
    i: usize,
    ca_keys: &HashMap<PathBuf, Result<rcgen::KeyPair, String>>,
    opts: &RenewOptions,
    now: OffsetDateTime,
) -> anyhow::Result<Prepared> {
    let c = &inv.certs[i];
    let key_file = inv.matched_key(c).context("key missing")?;
    let cert_target = resolve_target(&c.path, &opts.roots)?;
    // The file must still hold what was scanned.
    let on_disk = std::fs::read(&cert_target)
        .with_context(|| format!("reading {}", cert_target.display()))?;
    if !first_cert_is(&on_disk, c.encoding, &c.facts.der) {
        bail!(
            "{} changed since it was scanned; it will be looked at again next pass",
            c.path.display()
        );
    }
    let (new, new_key) = sign(inv, c, ca_keys, opts, now)?;
    let cert_bytes = match c.encoding {
        Encoding::Der => new.der.clone(),
        Encoding::Pem => replace_first_pem_cert(&on_disk, &new.der),
    };
    let key = match new_key {
        Some(kp) => {
            let bytes = keys::encode(&kp, key_file.info.format, key_file.info.encoding)?;
            let target = resolve_target(&key_file.path, &opts.roots)?;
            let meta = FileMeta::of(&target)?;
            Some((
                target,
                bytes,
                // The old key's owner, group and mode (a service group that read the old key
                // reads the new one), less any access for others.
                FileMeta {
                    mode: meta.mode & 0o770,
                    ..meta
                },
            ))
        }
        None => None,
    };
    Ok(Prepared {
        cert: i,
        cert_meta: FileMeta::of(&cert_target)?,
        cert_target,
        cert_bytes,
        rotated: key.is_some(),
        key,
        serial: new.serial,
        not_after: new.not_after,
        also: Vec::new(),
    })
}

fn first_cert_is(file: &[u8], encoding: Encoding, der: &[u8]) -> bool {
    match encoding {
        Encoding::Der => file == der,
        Encoding::Pem => pem::blocks(file)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| b.label == "CERTIFICATE" || b.label == "X509 CERTIFICATE")
            .is_some_and(|b| b.der == der),
    }
}

/// The file with its first certificate block replaced; other blocks (a chain) kept as they were.
fn replace_first_pem_cert(file: &[u8], new_der: &[u8]) -> Vec<u8> {
    let mut out = pem::encode("CERTIFICATE", new_der).into_bytes();
    let text = file;
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    for end in [
        &b"-----END CERTIFICATE-----"[..],
        b"-----END X509 CERTIFICATE-----",
    ] {
        if let Some(pos) = find(text, end) {
            let mut rest = &text[pos + end.len()..];
            if rest.first() == Some(&b'\r') {
                rest = &rest[1..];
            }
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
            out.extend_from_slice(rest);
            break;
        }
    }
    out
}

/// Checks the new certificate before anything is written.
fn verify(
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
    if new.raw_subject != old.raw_subject {
        return Err("subject differs from the old certificate".into());
    }
    if new.raw_issuer != ca.raw_subject {
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

/// Backs up, records intent, writes temps, renames (key first), fsyncs, marks installed.
fn install(
    inv: &Inventory,
    ready: Vec<Prepared>,
    opts: &RenewOptions,
    now: OffsetDateTime,
) -> Vec<RenewOutcome> {
    let mut outcomes = Vec::new();
    let fail = |p: &Prepared, why: &str| -> Vec<RenewOutcome> {
        p.renewed()
            .map(|(i, _, _)| failed(inv, i, why.to_string()))
            .collect()
    };
    let fail_all = |ready: &[Prepared], why: &str| -> Vec<RenewOutcome> {
        ready.iter().flat_map(|p| fail(p, why)).collect()
    };
    let set = match txn::backup_set(&opts.backup_dir, now) {
        Ok(s) => s,
        Err(e) => {
            return fail_all(
                &ready,
                &format!("cannot create a backup, nothing written: {e:#}"),
            );
        }
    };
    // 1. Backups, then the pending record naming every change.
    let mut changes = Vec::new();
    let mut staged = Vec::new();
    for p in ready {
        let backup = (|| -> anyhow::Result<txn::Change> {
            let cert_backup = txn::backup_file(&set, &p.cert_target)?;
            let (key, key_backup) = match &p.key {
                Some((k, _, _)) => (Some(k.clone()), Some(txn::backup_file(&set, k)?)),
                None => {
                    let key = inv.matched_key(&inv.certs[p.cert]).map(|k| k.path.clone());
                    // A kubeconfig holds its own key: it was backed up with the file.
                    if let Some(k) = key.as_ref().filter(|k| **k != inv.certs[p.cert].path) {
                        txn::backup_file(&set, k)?;
                    }
                    (None, None)
                }
            };
            Ok(txn::Change {
                cert: p.cert_target.clone(),
                key,
                cert_backup,
                key_backup,
            })
        })();
        match backup {
            Ok(c) => {
                changes.push(c);
                staged.push(p);
            }
            Err(e) => outcomes.extend(fail(&p, &format!("cannot back up, nothing written: {e:#}"))),
        }
    }
    if staged.is_empty() {
        return outcomes;
    }
    let mut units: Vec<String> = Vec::new();
    for p in &staged {
        for u in opts
            .units
            .get(inv.certs[p.cert].watch)
            .into_iter()
            .flatten()
        {
            if !units.contains(u) {
                units.push(u.clone());
            }
        }
    }
    let mut pods: Vec<String> = Vec::new();
    for p in &staged {
        for pod in opts.pods.get(inv.certs[p.cert].watch).into_iter().flatten() {
            if !pods.contains(pod) {
                pods.push(pod.clone());
            }
        }
    }
    let mut pending = txn::Pending {
        phase: txn::Phase::Writing,
        changes,
        units,
        pods,
    };
    if let Err(e) = txn::save(&opts.state_dir, &pending) {
        outcomes.extend(fail_all(
            &staged,
            &format!("cannot record the pending change, nothing written: {e:#}"),
        ));
        return outcomes;
    }
    crate::failpoint!("after-pending-record");
    // 2. Temp files for each pair; a pair whose temps cannot be written is dropped whole.
    let mut written = Vec::new();
    for p in staged {
        let r = (|| -> anyhow::Result<()> {
            if let Some((k, bytes, meta)) = &p.key {
                fsutil::write_temp(k, bytes, meta)?;
            }
            fsutil::write_temp(&p.cert_target, &p.cert_bytes, &p.cert_meta)?;
            Ok(())
        })();
        match r {
            Ok(()) => written.push(p),
            Err(e) => {
                let _ = std::fs::remove_file(fsutil::temp_path(&p.cert_target));
                if let Some((k, _, _)) = &p.key {
                    let _ = std::fs::remove_file(fsutil::temp_path(k));
                }
                outcomes.extend(fail(&p, &format!("nothing written: {e:#}")));
            }
        }
    }
    crate::failpoint!("after-temps");
    // 3. Renames: key first, then certificate (recovery relies on this order).
    for p in written {
        let r = (|| -> anyhow::Result<()> {
            if let Some((k, _, _)) = &p.key {
                fsutil::rename(&fsutil::temp_path(k), k)?;
                crate::failpoint!("between-key-and-cert");
            }
            fsutil::rename(&fsutil::temp_path(&p.cert_target), &p.cert_target)?;
            let mut dirs = vec![p.cert_target.parent()];
            dirs.push(p.key.as_ref().and_then(|(k, _, _)| k.parent()));
            for d in dirs.into_iter().flatten() {
                fsutil::sync_dir(d)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                for (i, serial, not_after) in p.renewed() {
                    let c = &inv.certs[i];
                    tracing::info!(path = %p.cert_target.display(), serial = %serial, "renewed {}", c.label());
                    outcomes.push(RenewOutcome {
                        cert: i,
                        path: c.path.clone(),
                        watch: c.watch,
                        result: RenewResult::Renewed {
                            serial: serial.to_string(),
                            not_after,
                            rotated: p.rotated,
                        },
                    });
                }
            }
            Err(e) => outcomes.extend(fail(&p, &format!("{e:#}"))),
        }
    }
    crate::failpoint!("after-renames");
    // Units are restarted by the caller, which clears the record afterwards.
    pending.phase = txn::Phase::Installed;
    // Each renewed path resolved once (`Change::cert` is already the resolved target).
    let renewed: std::collections::HashSet<PathBuf> = outcomes
        .iter()
        .filter(|o| o.renewed())
        .filter_map(|o| std::fs::canonicalize(&o.path).ok())
        .collect();
    pending.changes.retain(|c| renewed.contains(&c.cert));
    let saved = if pending.changes.is_empty() {
        txn::clear(&opts.state_dir)
    } else {
        txn::save(&opts.state_dir, &pending)
    };
    if let Err(e) = saved {
        tracing::error!(
            "updating the pending record in {}: {e:#}",
            opts.state_dir.display()
        );
    }
    outcomes
}
