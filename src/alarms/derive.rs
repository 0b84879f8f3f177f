//! Which alarms should be active after a pass, derived from what the pass saw and did:
//! the plan (due, expired, unrenewable), the renewals and the restarts. Pure but for
//! reading the active set while a maintenance inhibit defers the pass.

use std::path::{Path, PathBuf};

use super::{AlarmKind, AlarmSpec, AlarmStore, cert_entity, host_entity};
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::RestartOutcomes;
use crate::timefmt::rfc3339;

/// The alarms that should be active after this pass. Pure.
pub fn desired(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    only: Option<&[PathBuf]>,
    renewals: &[RenewOutcome],
    restarts: &RestartOutcomes,
) -> Vec<AlarmSpec> {
    let mut out: Vec<AlarmSpec> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for item in &plan.items {
        let c = &inv.certs[item.cert];
        let outcome = renewals.iter().find(|r| r.cert == item.cert);
        let renewed = outcome.is_some_and(RenewOutcome::renewed);
        if let Some(RenewOutcome {
            result: RenewResult::Failed { reason },
            ..
        }) = outcome
        {
            failures.push(format!("{}: {reason}", c.label()));
        } else if !c.facts.is_ca && !item.renew && item.reason.is_some() {
            // Due here and unrenewable, or forced by the operator and impossible.
            failures.push(format!(
                "{}: {}",
                c.label(),
                item.reason.as_deref().unwrap_or("cannot be renewed here")
            ));
        }
        // Per-certificate warnings for what this pass left as it was; a due certificate
        // that a limited pass did not select is left to the next full pass.
        let selected = only.is_none_or(|o| o.contains(&c.path));
        let left_alone = item.status == Status::Unrenewable || (selected && !renewed);
        if !item.in_warning || renewed || !left_alone {
            continue;
        }
        let reason = item
            .reason
            .clone()
            .or_else(|| {
                outcome.and_then(|o| match &o.result {
                    RenewResult::Failed { reason } => Some(reason.clone()),
                    RenewResult::Renewed { .. } => None,
                })
            })
            .unwrap_or_else(|| "not renewed".into());
        let (kind, when) = if item.expired {
            (AlarmKind::Expired, "expired on")
        } else {
            (AlarmKind::ExpiringSoon, "expires on")
        };
        let entity = cert_entity(host, &c.path);
        let reason = format!(
            "{} {when} {}: {reason}",
            c.label(),
            rfc3339(c.facts.not_after)
        );
        // Several users of one kubeconfig share its entity: one alarm naming each.
        match out
            .iter_mut()
            .find(|a| a.kind == kind && a.entity == entity)
        {
            Some(a) => a.reason = format!("{}; {reason}", a.reason),
            None => out.push(AlarmSpec {
                kind,
                entity,
                reason,
            }),
        }
    }
    if !failures.is_empty() {
        out.insert(
            0,
            AlarmSpec {
                kind: AlarmKind::RenewalFailed,
                entity: host_entity(host),
                reason: failures.join("; "),
            },
        );
    }
    let bad_units = restarts.failures();
    if !bad_units.is_empty() {
        let renewed: Vec<String> = renewals
            .iter()
            .filter(|r| r.renewed())
            .map(|r| r.path.display().to_string())
            .collect();
        let what = if renewed.is_empty() {
            String::new()
        } else {
            format!(" (renewed: {})", renewed.join(", "))
        };
        out.push(AlarmSpec {
            kind: AlarmKind::ServicesNotUpdated,
            entity: host_entity(host),
            reason: [
                vec![format!("{}{what}", bad_units.join("; "))],
                restarts.rolled_back.clone(),
            ]
            .concat()
            .join("; "),
        });
    }
    out
}

/// While inhibited: the active alarms stay as they are, and expired certificates are alarmed.
pub fn deferred(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    state_dir: &Path,
) -> anyhow::Result<Vec<AlarmSpec>> {
    let mut out: Vec<AlarmSpec> = AlarmStore::new(state_dir)
        .load()?
        .into_iter()
        .map(|a| AlarmSpec {
            kind: a.kind,
            entity: a.entity,
            reason: a.reason,
        })
        .collect();
    for item in plan.items.iter().filter(|i| i.expired) {
        let c = &inv.certs[item.cert];
        let entity = cert_entity(host, &c.path);
        if !out
            .iter()
            .any(|a| a.kind == AlarmKind::Expired && a.entity == entity)
        {
            out.push(AlarmSpec {
                kind: AlarmKind::Expired,
                entity,
                reason: format!(
                    "{} expired on {}; renewal is deferred by a maintenance inhibit",
                    c.path.display(),
                    rfc3339(c.facts.not_after)
                ),
            });
        }
    }
    Ok(out)
}
