//! The report from what the pass did: each certificate's final state, each restart, the
//! restarts held back, and the summary line.

use std::path::Path;

use super::summary::summary;
use super::*;
use crate::config::Settings;
use crate::pass::PassReport;
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::UnitRestart;
use crate::restart::static_pods::PodRestart;
use crate::restart::step::Target;

/// The final state of everything `r` touched.
pub fn report(settings: &Settings, r: &PassReport) -> RenewReport {
    let mut out = RenewReport {
        dry_run: false,
        deferred: r.inhibited.as_ref().map(|i| i.describe()),
        certificates: certificates(settings, r),
        units: r.restarts.units.iter().map(|u| unit(r, u)).collect(),
        static_pods: r.restarts.pods.iter().map(|p| pod(r, p)).collect(),
        endpoints: r
            .restarts
            .endpoints
            .iter()
            .map(|e| EndpointOutcome {
                endpoint: e.endpoint.clone(),
                ok: e.ok,
                reason: e.detail.clone(),
            })
            .collect(),
        commands: r
            .restarts
            .commands
            .iter()
            .map(|c| CommandOutcome {
                watch: c.watch.display().to_string(),
                command: c.argv.clone(),
                state: match c.ok {
                    true => CommandState::Ran,
                    false => CommandState::Failed,
                },
                reason: c.detail.clone(),
            })
            .collect(),
        copies: copies(r, false),
        errors: errors(r),
        watched_dirs: watched_dirs(settings, r),
        summary: String::new(),
        success: r.exit_ok(),
    };
    let shown = (r.restarts.reloaded.iter()).map(|(t, how)| (t, ServiceState::Reloaded, how));
    let refused = (r.restarts.refused.iter()).map(|(t, why)| (t, ServiceState::Refused, why));
    for (target, state, reason) in shown.chain(refused) {
        let outcome = |name: &str| ServiceOutcome {
            name: name.to_string(),
            state,
            reason: reason.clone(),
            after_rollback: None,
        };
        match target {
            Target::Unit(u) => out.units.push(outcome(u)),
            Target::Pod(p) => out.static_pods.push(outcome(p)),
        }
    }
    not_restarted(r, &mut out);
    let why = "--no-restart: run it once the services use the new certificates";
    commands_not_run(settings, r, &mut out, CommandState::NotRun, why);
    held(r, &mut out, "not restarted: ");
    out.summary = summary(r, &out);
    out
}

/// How many of [`errors`] are watched directories themselves.
pub(super) fn watched_dirs(settings: &Settings, r: &PassReport) -> usize {
    match r.named {
        Some(_) => 0,
        None => crate::cli::check::watched_dir_errors(settings, &r.inventory),
    }
}

/// The files that could not be read: a whole pass's, not `renew PATH`'s.
pub(super) fn errors(r: &PassReport) -> Vec<SkippedReport> {
    r.inventory
        .errors
        .iter()
        .filter(|_| r.named.is_none())
        .map(|e| SkippedReport {
            path: e.path.display().to_string(),
            reason: e.reason.clone(),
        })
        .collect()
}

/// The renewals, then the due certificates this host cannot renew, then (for `renew PATH`)
/// the certificates named that were not due.
fn certificates(settings: &Settings, r: &PassReport) -> Vec<CertOutcome> {
    let mut out: Vec<CertOutcome> = r.renewals.iter().map(|o| renewal(settings, r, o)).collect();
    out.extend(put_back_for_earlier_passes(settings, r));
    for item in r
        .plan
        .items
        .iter()
        .filter(|i| i.verdict == crate::plan::Verdict::Blocked)
    {
        if r.inhibited.is_some() || r.renewals.iter().any(|o| o.cert == item.cert) {
            continue;
        }
        let c = &r.inventory.certs[item.cert];
        out.push(CertOutcome {
            state: CertState::Failed,
            reason: item.reason.clone(),
            ..outcome_of(c)
        });
    }
    if r.named.is_some() && r.inhibited.is_none() {
        for item in r
            .plan
            .items
            .iter()
            .filter(|i| !i.wanted() && r.speaks_of(i.cert))
        {
            let c = &r.inventory.certs[item.cert];
            out.push(CertOutcome {
                state: CertState::NotDue,
                reason: Some(crate::cli::renew::not_due(r, item)),
                ..outcome_of(c)
            });
        }
    }
    out
}

/// The files a roll-back of this pass put back that an earlier pass renewed (its restarts
/// were owed): one line each, as for this pass's own renewals.
fn put_back_for_earlier_passes(settings: &Settings, r: &PassReport) -> Vec<CertOutcome> {
    let mut out: Vec<CertOutcome> = Vec::new();
    let ours = |p: &Path| (r.renewals.iter()).any(|o| o.path == p);
    for c in &r.inventory.certs {
        let path = c.path.display().to_string();
        if ours(&c.path)
            || out.iter().any(|o| o.path == path)
            || !crate::renew::rolled_back(&c.path, &r.restarts.restored)
        {
            continue;
        }
        let real = std::fs::canonicalize(&c.path).unwrap_or_else(|_| c.path.clone());
        out.push(CertOutcome {
            state: CertState::RolledBack,
            reason: Some(rolled_back_reason(settings, r, &real, c.watch)),
            backoff: backoff_of(r, &c.path),
            ..outcome_of(c)
        });
    }
    out
}

/// Why the certificate at `real` was put back: who did not come back on it.
fn rolled_back_reason(settings: &Settings, r: &PassReport, real: &Path, watch: usize) -> String {
    if let Some((_, why)) = r.restarts.refused_certs.iter().find(|(p, _)| p == real) {
        return format!(
            "served, and refused as its clients would refuse it ({why}); the previous certificate is back in place, and nothing was restarted"
        );
    }
    if let Some((_, why)) = r.restarts.pairs_refused.iter().find(|(p, _)| p == real) {
        return format!(
            "presented to the server that checks it and refused ({why}); the previous certificate is back in place"
        );
    }
    let who = (r.restarts.restored_for.iter())
        .find(|(p, _)| p == real)
        .map_or_else(
            || down_services(settings, r, watch),
            |(_, who)| {
                (who.iter().map(ToString::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
    format!(
        "{who} did not come back on the new certificate; the previous certificate and key are \
         back in place"
    )
}

/// The names a renewal of `item` adds, as openssl writes them.
pub(super) fn names_added(item: &crate::plan::PlanItem) -> Vec<String> {
    item.add_names.iter().map(|n| n.san()).collect()
}

pub(super) fn outcome_of(c: &crate::inventory::Cert) -> CertOutcome {
    CertOutcome {
        path: c.path.display().to_string(),
        user: c.kubeconfig.as_ref().map(|k| k.user.clone()),
        index: c.place(),
        state: CertState::Failed,
        reason: None,
        serial: None,
        not_after: None,
        new_key: false,
        lifetime: None,
        names_added: Vec::new(),
        backoff: None,
        also_read_by: Vec::new(),
        label: c.row_label(),
    }
}

fn renewal(settings: &Settings, r: &PassReport, o: &RenewOutcome) -> CertOutcome {
    let mut base = outcome_of(&r.inventory.certs[o.cert]);
    if let RenewResult::Renewed {
        not_before,
        not_after,
        ..
    } = &o.result
    {
        let item = r.plan.items.iter().find(|i| i.cert == o.cert);
        base.lifetime = item
            .and_then(|i| super::lifetime_words(settings, r, i, Some(*not_after - *not_before)));
        base.names_added = item.map(names_added).unwrap_or_default();
    }
    let real = std::fs::canonicalize(&o.path).unwrap_or_else(|_| o.path.clone());
    match &o.result {
        RenewResult::Failed { reason } => CertOutcome {
            reason: Some(reason.clone()),
            ..base
        },
        RenewResult::HeldBack { reason } => CertOutcome {
            state: CertState::HeldBack,
            reason: Some(reason.clone()),
            ..base
        },
        RenewResult::Renewed { .. } if r.restarts.restored.contains(&real) => CertOutcome {
            state: CertState::RolledBack,
            reason: Some(rolled_back_reason(settings, r, &real, o.watch)),
            backoff: backoff_of(r, &o.path),
            ..base
        },
        RenewResult::Renewed {
            serial,
            not_after,
            rotated,
            ..
        } => CertOutcome {
            state: CertState::Renewed,
            reason: r
                .restarts
                .not_restored
                .iter()
                .find(|(p, _)| *p == real)
                .map(|(_, e)| match e.starts_with("not rolled back") {
                    // Refused on purpose (the previous one expired): the reason says it all.
                    true => e.clone(),
                    false => format!("rolling back failed ({e}): the new certificate stays"),
                })
                .or_else(|| {
                    let mut unproven =
                        (r.restarts.pairs_unproven.iter()).chain(&r.restarts.pairs_not_presented);
                    unproven
                        .find(|(p, _)| *p == o.path)
                        .map(|(_, why)| why.clone())
                })
                .or_else(|| {
                    let accepted = (r.restarts.pairs_accepted.iter())
                        .filter(|(p, _)| *p == o.path)
                        .map(|(_, how)| how.as_str())
                        .collect::<Vec<_>>();
                    (!accepted.is_empty())
                        .then(|| format!("client pair presented: {}", accepted.join("; ")))
                }),
            serial: Some(serial.clone()),
            not_after: Some(crate::timefmt::rfc3339(*not_after)),
            new_key: *rotated,
            also_read_by: unrestarted_readers(settings, r, o.cert),
            ..base
        },
    }
}

/// The static pods and units found to read certificate `cert` that no watch restarts for it.
pub(super) fn unrestarted_readers(settings: &Settings, r: &PassReport, cert: usize) -> Vec<String> {
    let c = &r.inventory.certs[cert];
    crate::restart::targets::unrestarted_readers(&r.node, settings.watches.get(c.watch), &c.path)
}

/// The services of watch `watch` that did not come back in this pass, in a phrase.
fn down_services(settings: &Settings, r: &PassReport, watch: usize) -> String {
    let Some(w) = settings.watches.get(watch) else {
        return "a service".into();
    };
    let units = r
        .restarts
        .units
        .iter()
        .filter(|u| !u.ok && w.units.contains(&u.unit))
        .map(|u| u.unit.clone());
    let pods = r
        .restarts
        .pods
        .iter()
        .filter(|p| !p.ok && w.static_pods.contains(&p.pod))
        .map(|p| format!("static pod {}", p.pod));
    let endpoints = r
        .restarts
        .endpoints
        .iter()
        .filter(|e| !e.ok && w.verify_endpoints.contains(&e.endpoint))
        .map(|e| format!("the server at {}", e.endpoint));
    let all: Vec<String> = units.chain(pods).chain(endpoints).collect();
    match all.is_empty() {
        true => "a service".into(),
        false => all.join(", "),
    }
}

fn backoff_of(r: &PassReport, path: &Path) -> Option<String> {
    r.restarts
        .backoff
        .iter()
        .find(|b| b.path == path)
        .map(|b| b.to_string())
}

fn unit(r: &PassReport, u: &UnitRestart) -> ServiceOutcome {
    let state = match (u.ok, u.active_state == "active") {
        (true, true) => ServiceState::Restarted,
        (true, false) => ServiceState::NotRestarted,
        (false, _) => ServiceState::Failed,
    };
    ServiceOutcome {
        name: u.unit.clone(),
        state,
        reason: not_reloaded(r, Target::Unit(u.unit.clone()), &u.detail),
        after_rollback: r
            .restarts
            .units_again
            .iter()
            .find(|a| a.unit == u.unit)
            .map(|a| AfterRollback {
                active: a.ok,
                reason: a.detail.clone(),
            }),
    }
}

fn pod(r: &PassReport, p: &PodRestart) -> ServiceOutcome {
    ServiceOutcome {
        name: p.pod.clone(),
        state: match p.ok {
            true => ServiceState::Restarted,
            false => ServiceState::Failed,
        },
        reason: not_reloaded(r, Target::Pod(p.pod.clone()), &p.detail),
        after_rollback: r
            .restarts
            .pods_again
            .iter()
            .find(|a| a.pod == p.pod)
            .map(|a| AfterRollback {
                active: a.ok,
                reason: a.detail.clone(),
            }),
    }
}

/// A restart's `detail`, and why it was made when its renewed files were to be shown in use
/// instead (`on_renew = "reload"`).
fn not_reloaded(r: &PassReport, target: Target, detail: &str) -> String {
    match r.restarts.fell_back.iter().find(|(t, _)| *t == target) {
        Some((_, why)) => format!("{detail} (restarted, not reloaded: {why})"),
        None => detail.to_string(),
    }
}

/// The services owed a restart that `--no-restart` left alone.
fn not_restarted(r: &PassReport, out: &mut RenewReport) {
    let why = "--no-restart: restart it to load the new certificates (`certrenewd check` shows it owed until it has started again or serves them)";
    each_not_restarted(r, out, ServiceState::NotRestarted, why);
}

/// The watches' commands the pass did not run (`--no-restart`, or a dry run), as `state`.
pub(super) fn commands_not_run(
    settings: &Settings,
    r: &PassReport,
    out: &mut RenewReport,
    state: CommandState,
    reason: &str,
) {
    for watch in &r.restarts.commands_not_run {
        let w = settings.watches.iter().find(|w| &w.path == watch);
        out.commands.push(CommandOutcome {
            watch: watch.display().to_string(),
            command: w
                .and_then(|w| w.post_renew_command.clone())
                .unwrap_or_default(),
            state,
            reason: reason.into(),
        });
    }
}

/// Each service owed a restart the pass did not do (`--no-restart`, or a dry run), in its
/// list, with `state` and `reason`.
pub(super) fn each_not_restarted(
    r: &PassReport,
    out: &mut RenewReport,
    state: ServiceState,
    reason: &str,
) {
    for target in &r.restarts.not_restarted {
        let (list, name) = match target {
            Target::Pod(pod) => (&mut out.static_pods, pod),
            Target::Unit(unit) => (&mut out.units, unit),
        };
        list.push(ServiceOutcome {
            name: name.to_string(),
            state,
            reason: reason.into(),
            after_rollback: None,
        });
    }
}

/// The units and static pods the restart gate held back: not restarted (or, after a
/// roll-back, not started again), owed to the next pass.
pub(super) fn held(r: &PassReport, out: &mut RenewReport, say: &str) {
    for (target, reason) in &r.restarts.held {
        let (list, name) = match target {
            Target::Pod(pod) => (&mut out.static_pods, pod),
            Target::Unit(unit) => (&mut out.units, unit),
        };
        match list.iter_mut().find(|s| &s.name == name) {
            // It failed on the new certificate and was not started again.
            Some(s) if s.after_rollback.is_none() => {
                s.after_rollback = Some(AfterRollback {
                    active: false,
                    reason: format!("not started again, held back: {reason}"),
                });
            }
            Some(_) => {}
            None => list.push(ServiceOutcome {
                name: name.to_string(),
                state: ServiceState::HeldBack,
                reason: format!("{say}{reason}"),
                after_rollback: None,
            }),
        }
    }
}
