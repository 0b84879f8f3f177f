//! Renewal: reissue every planned certificate from its CA, verify it, back up the old files,
//! and install the new ones atomically under a pending record.

pub mod backup;
pub mod copies;
mod install;
pub mod keys;
mod kubeconfig;
pub mod kubelet_link;
mod kubelet_serving;
pub mod pending;
mod prepare;
pub mod reissue;
mod sign;
#[cfg(test)]
mod swapped;

use std::collections::HashMap;
use std::path::PathBuf;

use rayon::prelude::*;
use time::OffsetDateTime;

use crate::inventory::Inventory;
use crate::plan::Plan;
// The kubeconfig renewer shares the plain renewer's steps.
use prepare::{Prepared, first_cert_is, replace_first_pem_cert};
use sign::sign;

/// What the renewer is told besides the plan.
#[derive(Debug, Clone)]
pub struct RenewOptions {
    /// Generate new keys instead of reusing the old ones.
    pub rotate_keys: bool,
    /// The renewal window: a renewed certificate must end after it.
    pub renew_before_days: u32,
    /// The pending record the renewals and copies write, as the pass holds it.
    pub pending: pending::Record,
    /// Backup sets.
    pub backup_dir: PathBuf,
    /// Watch roots (files are only written inside these).
    pub roots: Vec<PathBuf>,
    /// Backup sets kept.
    pub backup_keep: u32,
    /// Backup sets older than this are pruned.
    pub backup_max_age_days: u32,
    /// How controllers agree on one re-issue of a CA: `None` issues it alone.
    pub ca_agreement: Option<std::sync::Arc<dyn CaAgreement>>,
    /// What this pass renewed before its CAs, not installed yet: an agreement is made as
    /// the client these say (an etcd client certificate that had expired renewed first).
    pub fresh: Vec<Fresh>,
}

/// A certificate file this pass renewed and has not installed yet: its path and new bytes,
/// and its key's when the pass made a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    pub cert: PathBuf,
    pub cert_bytes: Vec<u8>,
    pub key: Option<(PathBuf, Vec<u8>)>,
}

/// How the controllers of one cluster settle on a single re-issue of a CA: given
/// this node's re-issue (DER), the one every controller installs, checked as this node's
/// own would be; an error says why none can be agreed now. Once installed, each says it
/// adopted it, and the agreement goes when every member has. The pass is handed the
/// coordination stage's, through etcd (`coordinate::EtcdCaAgreement`), as [`CaAgreements`].
pub trait CaAgreement: Send + Sync + std::fmt::Debug {
    /// The re-issue of CA `ca` to install: `mine`, or another controller's, agreed as a
    /// client whose files this pass may have renewed (`fresh`).
    fn agree(
        &self,
        ca: &crate::inventory::Cert,
        mine: Vec<u8>,
        fresh: &[Fresh],
    ) -> anyhow::Result<Vec<u8>>;

    /// This node installed the re-issue of CA `old` (its facts before) the cluster agreed
    /// on, and it stayed: what was recorded, for the journal.
    fn adopted<'a>(
        &'a self,
        old: &'a crate::format::cert::CertFacts,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<String>> + Send + 'a>>;
}

/// The CA agreement of a pass that read the node as its argument says: the way into the
/// cluster the daemon and `renew` hand a pass (etcd's), or a test's fake.
pub type CaAgreements = std::sync::Arc<
    dyn Fn(&crate::components::NodeReading) -> std::sync::Arc<dyn CaAgreement> + Send + Sync,
>;

/// How one renewal went.
#[derive(Debug, Clone, PartialEq)]
pub enum RenewResult {
    /// Installed.
    Renewed {
        /// The new serial, hex.
        serial: String,
        /// The new notBefore.
        not_before: OffsetDateTime,
        /// The new notAfter.
        not_after: OffsetDateTime,
        /// Whether a new key was written.
        rotated: bool,
        /// The files replaced and their backups (what a roll-back restores).
        change: pending::Change,
    },
    /// Nothing was written for it.
    Failed {
        /// Why.
        reason: String,
    },
    /// Not attempted: its earlier renewals were rolled back, and the back-off
    /// (`crate::plan::backoff`) holds it until its next attempt.
    HeldBack {
        /// Attempts so far and when the next.
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

    /// Renewed, and still in place at the end of the pass: not put back by a roll-back
    /// (`restored` holds the real paths a roll-back restored).
    pub fn stayed(&self, restored: &[std::path::PathBuf]) -> bool {
        self.renewed() && !rolled_back(&self.path, restored)
    }
}

/// Whether a roll-back put `path`'s previous certificate back (`restored` holds the real
/// paths it restored).
pub fn rolled_back(path: &std::path::Path, restored: &[std::path::PathBuf]) -> bool {
    restored.iter().any(|r| r == path)
        || std::fs::canonicalize(path).is_ok_and(|p| restored.contains(&p))
}

/// Renews what the plan says. Every outcome is reported; nothing is written for a failure.
pub fn renew(inv: &Inventory, plan: &Plan, opts: &RenewOptions) -> Vec<RenewOutcome> {
    let items: Vec<usize> = plan.renewals().map(|i| i.cert).collect();
    if items.is_empty() {
        return Vec::new();
    }
    // Load each CA key once.
    let mut ca_keys: HashMap<PathBuf, anyhow::Result<rcgen::KeyPair>> = HashMap::new();
    for &i in &items {
        if let Some(key) = inv
            .signer_of(&inv.certs[i])
            .and_then(|ca| inv.matched_key(ca))
        {
            ca_keys
                .entry(key.path.clone())
                .or_insert_with(|| keys::load(&key.path));
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
    // The leaves first, the CAs after them: a CA's re-issue is agreed through etcd as a
    // client whose certificate this pass may just have renewed (the same CA key signs both,
    // so neither waits for the other's bytes).
    let prepare = |w: &Vec<usize>, opts: &RenewOptions| {
        let c = &inv.certs[w[0]];
        if c.kubeconfig.is_some() {
            kubeconfig::prepare(inv, w, &ca_keys, opts, plan)
        } else if crate::inventory::kubelet::is_self_signed_serving(c) {
            kubelet_serving::prepare(inv, w[0], opts, plan)
        } else {
            prepare::prepare(inv, w[0], &ca_keys, opts, plan)
        }
    };
    let is_ca = |i: &usize| inv.certs[work[*i][0]].facts.is_ca;
    let (cas, leaves): (Vec<usize>, Vec<usize>) = (0..work.len()).partition(is_ca);
    let mut prepared: Vec<Option<anyhow::Result<prepare::Prepared>>> =
        (0..work.len()).map(|_| None).collect();
    let done: Vec<_> = (leaves.par_iter())
        .map(|&i| (i, prepare(&work[i], opts)))
        .collect();
    for (i, p) in done {
        prepared[i] = Some(p);
    }
    let fresh: Vec<Fresh> = (prepared.iter().flatten().flatten())
        .filter(|p| p.link.is_none())
        .map(|p| Fresh {
            cert: p.cert_target.clone(),
            cert_bytes: p.cert_bytes.clone(),
            key: (p.key.as_ref())
                .filter(|_| p.rotated)
                .map(|(path, bytes, _)| (path.clone(), bytes.clone())),
        })
        .collect();
    let with_fresh = RenewOptions {
        fresh,
        ..opts.clone()
    };
    let done: Vec<_> = (cas.par_iter())
        .map(|&i| (i, prepare(&work[i], &with_fresh)))
        .collect();
    for (i, p) in done {
        prepared[i] = Some(p);
    }
    let prepared = prepared.into_iter().flatten();
    let mut outcomes = Vec::new();
    let mut ready = Vec::new();
    for (w, p) in work.iter().zip(prepared) {
        match p {
            Ok(p) => ready.push(p),
            Err(e) => outcomes.extend(w.iter().map(|&i| failed(inv, i, format!("{e:#}")))),
        }
    }
    if !ready.is_empty() {
        outcomes.extend(install::install(inv, ready, opts, plan.now));
    }
    outcomes.sort_by_key(|o| o.cert);
    outcomes
}

/// Prunes the backup sets (`backup_keep`, `backup_max_age_days`) and removes the temp files
/// a crash left in them. Run at the end of every pass that may write, renewals or not: a
/// pass killed while backing up leaves a temp file that the next pass, with nothing left
/// to renew, must remove too. A failure is logged.
pub fn prune_backups(opts: &RenewOptions, now: time::OffsetDateTime) {
    if let Err(e) = backup::prune(
        &opts.backup_dir,
        opts.backup_keep,
        opts.backup_max_age_days,
        now,
    ) {
        tracing::warn!("pruning backups in {}: {e:#}", opts.backup_dir.display());
    }
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
