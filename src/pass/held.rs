//! The back-off in a pass (`crate::plan::backoff`): the planner puts off the renewals of
//! certificates whose renewal was rolled back until their next attempt; after the restarts,
//! the ledger learns which renewals were rolled back and which stayed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::config::Settings;
use crate::inventory::Inventory;
use crate::plan::backoff::{self, Ledger, RolledBack};
use crate::plan::{Plan, PutOff, Status, Verdict};
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::RestartOutcomes;

/// An outcome for each renewal the back-off put off (the planner did, from the ledger read
/// as the pass began), and the journal's word on each.
pub(super) fn held_back(inv: &Inventory, plan: &Plan, ledger: &Ledger) -> Vec<RenewOutcome> {
    let put_off = (plan.items.iter()).filter(|i| i.verdict == Verdict::PutOff(PutOff::BackOff));
    put_off
        .filter_map(|item| {
            let c = &inv.certs[item.cert];
            let reason = ledger.holds(&c.path, plan.now)?.held_reason();
            tracing::warn!(path = %c.path.display(), "{reason}");
            Some(RenewOutcome {
                cert: item.cert,
                path: c.path.clone(),
                watch: c.watch,
                result: RenewResult::HeldBack { reason },
            })
        })
        .collect()
}

/// Records in the ledger the certificates a roll-back of this pass put back (for each, its
/// attempts and next attempt), whichever pass renewed them: a renewal owed from an earlier
/// pass that is rolled back now waits as long as one of this pass. Forgets the renewals of
/// this pass that stayed and the certificates no longer due.
pub(super) fn settle(
    settings: &Settings,
    inv: &Inventory,
    plan: &Plan,
    ledger: &mut Ledger,
    renewals: &[RenewOutcome],
    restarts: &RestartOutcomes,
) -> anyhow::Result<Vec<RolledBack>> {
    // Dated when the pass that rolled back started: a pass scheduled `retry_interval` later
    // is not held back by the minutes this one took.
    let now = plan.now;
    let before = ledger.clone();
    let renewed: BTreeSet<&PathBuf> = renewals
        .iter()
        .filter(|r| r.renewed())
        .map(|r| &r.path)
        .collect();
    let put_back: BTreeSet<&PathBuf> = (inv.certs.iter())
        .map(|c| &c.path)
        .filter(|p| crate::renew::rolled_back(p, &restarts.restored))
        .collect();
    let mut out = Vec::new();
    for path in renewed.iter().filter(|p| !put_back.contains(*p)) {
        ledger.clear(path);
    }
    for path in &put_back {
        let e = ledger.rolled_back(path, now, settings.retry_interval);
        out.push(RolledBack {
            path: (*path).clone(),
            attempts: e.attempts,
            next: e.next,
        });
    }
    // Not due when the pass began; a file put back since is due again.
    let ok = (plan.items.iter())
        .filter(|i| i.status == Status::Ok)
        .map(|i| &inv.certs[i.cert].path);
    for path in ok.filter(|p| !put_back.contains(p)) {
        ledger.clear(path);
    }
    if *ledger != before {
        backoff::save(&settings.state_dir, ledger)?;
    }
    Ok(out)
}
