//! The back-off in a pass (`crate::pass::backoff`): certificates whose renewal was rolled back
//! are held back until their next attempt; after the restarts, the ledger learns which
//! renewals were rolled back and which stayed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::PassOptions;
use super::backoff::{self, Ledger, MAX_ATTEMPTS_PER_DAY};
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::plan::{Plan, PutOff, Status};
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::RestartOutcomes;
use crate::timefmt::rfc3339;

/// Puts off the renewals the back-off holds (the plan says so of each), and an outcome for
/// each of those. A certificate named on the command line (`renew PATH`, or `--force`) is
/// not held.
pub(super) fn hold_back(
    inv: &Inventory,
    plan: &mut Plan,
    ledger: &Ledger,
    opts: &PassOptions,
) -> Vec<RenewOutcome> {
    let mut held = Vec::new();
    if opts.force {
        return held;
    }
    let now = plan.now;
    for item in plan.items.iter_mut().filter(|i| i.renews()) {
        let c = &inv.certs[item.cert];
        let named = opts.only.as_ref().is_some_and(|o| o.contains(&c.path));
        if named {
            continue;
        }
        if let Some(e) = ledger.holds(&c.path, now) {
            tracing::warn!(path = %c.path.display(), "{}", e.held_reason());
            item.put_off(PutOff::BackOff);
            held.push(RenewOutcome {
                cert: item.cert,
                path: c.path.clone(),
                watch: c.watch,
                result: RenewResult::HeldBack {
                    reason: e.held_reason(),
                },
            });
        }
    }
    held
}

/// Records in the ledger the certificates a roll-back of this pass put back (for each, its
/// attempts and next attempt), whichever pass renewed them: a renewal owed from an earlier
/// pass that is rolled back now waits as long as one of this pass. Forgets the renewals of
/// this pass that stayed and the certificates no longer due.
pub(super) fn settle(
    settings: &Settings,
    inv: &Inventory,
    plan: &Plan,
    renewals: &[RenewOutcome],
    restarts: &RestartOutcomes,
) -> anyhow::Result<Vec<(PathBuf, String)>> {
    // Dated when the pass that rolled back started: a pass scheduled `retry_interval` later
    // is not held back by the minutes this one took.
    let now = plan.now;
    let mut ledger = backoff::load(&settings.state_dir)?;
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
    let mut lines = Vec::new();
    for path in renewed.iter().filter(|p| !put_back.contains(*p)) {
        ledger.clear(path);
    }
    for path in &put_back {
        let e = ledger.rolled_back(path, now, settings.retry_interval);
        lines.push((
            (*path).clone(),
            format!(
                "attempt {} rolled back; next attempt not before {} (back-off, at most {} \
                 attempts a day)",
                e.attempts,
                rfc3339(e.next),
                MAX_ATTEMPTS_PER_DAY
            ),
        ));
    }
    // Not due when the pass began; a file put back since is due again.
    let ok = (plan.items.iter())
        .filter(|i| i.status == Status::Ok)
        .map(|i| &inv.certs[i.cert].path);
    for path in ok.filter(|p| !put_back.contains(p)) {
        ledger.clear(path);
    }
    if ledger != before {
        backoff::save(&settings.state_dir, &ledger)?;
    }
    Ok(lines)
}
