//! Which alarms should be active after a pass, derived from what the pass saw and did:
//! the plan (due, expired, unrenewable), the renewals and the restarts, and the alarms
//! active (what a pass that decides nothing keeps). Pure.

use std::path::PathBuf;

use super::{ActiveAlarm, AlarmKind, AlarmSpec, cert_entity, host_entity};
use crate::inventory::{Cert, Inventory};
use crate::plan::{Plan, PlanItem, Status, Verdict};
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
    // (what failed, the file it is)
    let mut failures: Vec<(String, PathBuf)> = Vec::new();
    for item in &plan.items {
        let c = &inv.certs[item.cert];
        let outcome = renewals.iter().find(|r| r.cert == item.cert);
        if let Some(failure) = renewal_failure(c, item, outcome) {
            failures.push((failure, c.path.clone()));
        }
        if let Some(alarm) = certificate_alarm(host, c, item, outcome, only) {
            // Several users of one kubeconfig share its entity: one alarm naming each.
            add_alarm(&mut out, alarm);
        }
        out.extend(names_alarm(host, c, item, outcome, only));
    }
    // What could not be read may be the certificate that expires: each is a failure.
    failures.extend(
        inv.errors
            .iter()
            .filter(|e| only.is_none_or(|o| o.contains(&e.path)))
            .map(|e| {
                (
                    format!("{}: {}", e.path.display(), e.reason),
                    e.path.clone(),
                )
            }),
    );
    add_failures(host, &mut out, failures);
    out.extend(services_alarm(host, renewals, restarts));
    out
}

/// The alarms active now (`active`, as the store holds them), as they are: a pass that
/// decides nothing keeps them.
pub fn kept(active: &[ActiveAlarm]) -> Vec<AlarmSpec> {
    active.iter().cloned().map(AlarmSpec::from).collect()
}

/// Adds `alarm`, merged into one of the same kind and entity when there is one.
pub fn add_alarm(out: &mut Vec<AlarmSpec>, alarm: AlarmSpec) {
    match out
        .iter_mut()
        .find(|a| a.kind == alarm.kind && a.entity == alarm.entity)
    {
        Some(a) => a.merge(alarm.reasons, alarm.subjects),
        None => out.push(alarm),
    }
}

/// Adds failures of the pass (what failed, the file it is) to its 250.003 "renewal
/// failed", raised first.
pub fn add_failures(host: &str, out: &mut Vec<AlarmSpec>, failures: Vec<(String, PathBuf)>) {
    if failures.is_empty() {
        return;
    }
    let (reasons, paths): (Vec<String>, Vec<PathBuf>) = failures.into_iter().unzip();
    match out
        .iter_mut()
        .find(|a| a.kind == AlarmKind::RenewalFailed && a.entity == host_entity(host))
    {
        Some(a) => a.merge(reasons, paths),
        None => {
            let mut alarm = AlarmSpec {
                kind: AlarmKind::RenewalFailed,
                entity: host_entity(host),
                reasons: Vec::new(),
                subjects: Vec::new(),
            };
            alarm.merge(reasons, paths);
            out.insert(0, alarm);
        }
    }
}

/// Why this due certificate was not renewed by the pass, for 250.003, if it was not.
fn renewal_failure(c: &Cert, item: &PlanItem, outcome: Option<&RenewOutcome>) -> Option<String> {
    if let Some(RenewOutcome {
        result: RenewResult::Failed { reason },
        ..
    }) = outcome
    {
        return Some(format!("{}: {reason}", c.label()));
    }
    // Due here and unrenewable, or forced by the operator and impossible.
    let reason = item
        .reason
        .as_deref()
        .filter(|_| item.verdict == Verdict::Blocked)?;
    Some(format!("{}: {reason}", c.label()))
}

/// The 500.200/500.210 of a certificate in its warning period that this pass left as it
/// was; a due certificate that a limited pass did not select is left to the next full pass.
fn certificate_alarm(
    host: &str,
    c: &Cert,
    item: &PlanItem,
    outcome: Option<&RenewOutcome>,
    only: Option<&[PathBuf]>,
) -> Option<AlarmSpec> {
    let renewed = outcome.is_some_and(RenewOutcome::renewed);
    let selected = only.is_none_or(|o| o.contains(&c.path));
    let left_alone = item.status == Status::Unrenewable || (selected && !renewed);
    if !item.in_warning || renewed || !left_alone {
        return None;
    }
    let failed = outcome.and_then(|o| match &o.result {
        RenewResult::Failed { reason } => Some(reason.clone()),
        RenewResult::Renewed { .. } | RenewResult::HeldBack { .. } => None,
    });
    let held = outcome.and_then(|o| match &o.result {
        RenewResult::HeldBack { reason } => Some(reason.clone()),
        _ => None,
    });
    let reason = item.reason.clone().or(failed).or(held);
    Some(window_alarm(
        host,
        c,
        item,
        reason.as_deref().unwrap_or("not renewed"),
    ))
}

/// Certificate `c`'s 500.200 (500.210 once expired): `LABEL expires on WHEN: why`.
fn window_alarm(host: &str, c: &Cert, item: &PlanItem, why: &str) -> AlarmSpec {
    let (kind, when) = match item.expired {
        true => (AlarmKind::Expired, "expired on"),
        false => (AlarmKind::ExpiringSoon, "expires on"),
    };
    AlarmSpec {
        kind,
        entity: cert_entity(host, &c.path),
        subjects: vec![c.path.clone()],
        reasons: vec![format!(
            "{} {when} {}: {why}",
            c.label(),
            rfc3339(c.facts.not_after)
        )],
    }
}

/// The 500.200/500.210 of each certificate a roll-back put back, read from the files as they
/// are after it (`inv`, `plan`): the previous certificate is in its window again (an
/// expired one is never put back), and stays there until the back-off lets it be renewed.
/// 250.003 "not all services have been updated" says why beside it. Those in `refused` were
/// put back because what checks them refused them (their clients, or the server of a client
/// pair), not because a service did not come back.
pub fn rolled_back(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    restored: &[PathBuf],
    refused: &[PathBuf],
) -> Vec<AlarmSpec> {
    let mut out = Vec::new();
    for item in plan.items.iter().filter(|i| i.in_warning) {
        let c = &inv.certs[item.cert];
        if !crate::renew::rolled_back(&c.path, restored) {
            continue;
        }
        let why = match crate::renew::rolled_back(&c.path, refused) {
            true => {
                "its renewal was refused by what checks it (250.003 says why) and put back; \
                 the back-off sets its next attempt"
            }
            false => {
                "its renewal was rolled back because a service did not come back on it; \
                 the back-off sets its next attempt"
            }
        };
        add_alarm(&mut out, window_alarm(host, c, item, why));
    }
    out
}

/// The 500.220 of a serving certificate whose names miss an address it is used on, unless
/// this pass's renewal added them.
fn names_alarm(
    host: &str,
    c: &Cert,
    item: &PlanItem,
    outcome: Option<&RenewOutcome>,
    only: Option<&[PathBuf]>,
) -> Option<AlarmSpec> {
    let added = !item.add_names.is_empty() && outcome.is_some_and(RenewOutcome::renewed);
    let selected = only.is_none_or(|o| o.contains(&c.path));
    if item.names_missing.is_empty() || added || !selected {
        return None;
    }
    let what: Vec<String> = item.names_missing.iter().map(|u| u.describe()).collect();
    Some(AlarmSpec {
        kind: AlarmKind::NamesMissing,
        entity: cert_entity(host, &c.path),
        subjects: vec![c.path.clone()],
        reasons: vec![format!(
            "{} does not name {}: a client connecting by it fails as if the certificate had expired; add_missing_names = true adds them at its next renewal",
            c.path.display(),
            what.join(", ")
        )],
    })
}

/// The 250.003 "renewed but not all services have been updated", when a service did not
/// come back; it names what was rolled back.
fn services_alarm(
    host: &str,
    renewals: &[RenewOutcome],
    restarts: &RestartOutcomes,
) -> Option<AlarmSpec> {
    let held = renewals.iter().filter_map(|r| match &r.result {
        RenewResult::HeldBack { reason } => Some(format!("{}: {reason}", r.path.display())),
        _ => None,
    });
    let bad: Vec<String> = restarts.failures().into_iter().chain(held).collect();
    if bad.is_empty() {
        return None;
    }
    // How many, not which: the reason stays short (the pass's report and the alarm's
    // subjects name them).
    let what = match renewals.iter().filter(|r| r.renewed()).count() {
        0 => String::new(),
        1 => " (1 certificate renewed)".to_string(),
        n => format!(" ({n} certificates renewed)"),
    };
    // One entry per failure; the count of what was renewed goes with the last of them.
    let mut reasons = bad;
    if let Some(last) = reasons.last_mut() {
        last.push_str(&what);
    }
    reasons.extend(restarts.rolled_back.iter().map(ToString::to_string));
    let backoff = restarts.backoff.iter();
    reasons.extend(backoff.map(|b| format!("{}: {b}", b.path.display())));
    let mut alarm = AlarmSpec {
        kind: AlarmKind::ServicesNotUpdated,
        entity: host_entity(host),
        reasons: Vec::new(),
        subjects: Vec::new(),
    };
    // Every certificate renewed (rolled back or not) or held back by this pass.
    let subjects = renewals
        .iter()
        .filter(|r| r.renewed() || matches!(r.result, RenewResult::HeldBack { .. }))
        .map(|r| r.path.clone())
        .collect();
    alarm.merge(reasons, subjects);
    Some(alarm)
}

/// A partial pass (`renew PATH...`) reconciles only what it examined: the alarms of the
/// certificates it was limited to follow `desired`, and so does a host-wide alarm whose
/// subjects are all certificates it examined (the operator fixed the cause and renewed
/// them by name); every other active alarm stays as it is (also one saved before alarms
/// carried their subjects: the next full pass settles it), and a host-wide alarm the
/// partial pass raises is added to it, entry by entry. Pure.
pub fn scoped(
    host: &str,
    only: &[PathBuf],
    active: &[AlarmSpec],
    desired: Vec<AlarmSpec>,
) -> Vec<AlarmSpec> {
    let examined: Vec<String> = only.iter().map(|p| cert_entity(host, p)).collect();
    let owned = |a: &AlarmSpec| {
        examined.contains(&a.entity)
            || (!a.subjects.is_empty() && a.subjects.iter().all(|n| only.contains(n)))
    };
    let mut out: Vec<AlarmSpec> = active.iter().filter(|a| !owned(a)).cloned().collect();
    // A certificate's own alarm (500.200, 500.210, 500.220) is this pass's to raise only
    // for a certificate it examined; the others are the next full pass's.
    let certificate = format!("{}.certificate=", host_entity(host));
    let theirs = |d: &AlarmSpec| d.entity.starts_with(&certificate) && !owned(d);
    for d in desired.into_iter().filter(|d| !theirs(d)) {
        match out
            .iter_mut()
            .find(|a| a.kind == d.kind && a.entity == d.entity)
        {
            Some(a) => a.merge(d.reasons, d.subjects),
            None => out.push(d),
        }
    }
    out
}

/// While inhibited: the active alarms stay as they are, and expired certificates are alarmed.
pub fn deferred(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    active: &[ActiveAlarm],
) -> Vec<AlarmSpec> {
    let mut out = kept(active);
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
                subjects: vec![c.path.clone()],
                reasons: vec![format!(
                    "{} expired on {}; renewal is deferred by a maintenance inhibit",
                    c.path.display(),
                    rfc3339(c.facts.not_after)
                )],
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
