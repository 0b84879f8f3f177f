//! The report of a `--dry-run` pass: what the pass would do, in the states of the real
//! report (`would_renew`, `would_fail`, `would_restart`), with its summary and exit status.

use super::from_pass::{
    commands_not_run, each_not_restarted, errors, held, names_added, outcome_of,
    unrestarted_readers, watched_dirs,
};
use super::summary::summary;
use super::*;
use crate::components::Component;
use crate::config::{Settings, Watch};
use crate::pass::PassReport;

/// What a `--dry-run` pass would do, as the report of the real one would say it: each
/// certificate it would renew, fail on, hold back or (named) leave alone; each service it
/// would restart; the files it could not read; its exit status.
pub fn dry_run(settings: &Settings, r: &PassReport) -> RenewReport {
    let mut out = RenewReport {
        dry_run: true,
        deferred: r.inhibited.as_ref().map(|i| i.describe()),
        certificates: Vec::new(),
        units: Vec::new(),
        static_pods: Vec::new(),
        endpoints: Vec::new(),
        commands: Vec::new(),
        copies: copies(r, true),
        errors: Vec::new(),
        watched_dirs: 0,
        summary: String::new(),
        success: r.exit_ok(),
    };
    if r.inhibited.is_none() {
        for item in r.plan.items.iter().filter(|i| r.speaks_of(i.cert)) {
            let c = &r.inventory.certs[item.cert];
            let (state, reason) = match crate::cli::renew::held_back(r, item.cert) {
                Some(why) => (CertState::HeldBack, why.to_string()),
                None if item.renews() => (
                    CertState::WouldRenew,
                    format!(
                        "{}; {}",
                        crate::cli::renew::standing(item),
                        r.inventory.signer_words(c)
                    ),
                ),
                None if item.verdict == crate::plan::Verdict::Blocked => {
                    let why = item.reason.clone().unwrap_or_default();
                    (CertState::WouldFail, why)
                }
                None if r.named.is_some() => {
                    (CertState::NotDue, crate::cli::renew::not_due(r, item))
                }
                None => continue,
            };
            out.certificates.push(CertOutcome {
                state,
                reason: Some(reason),
                lifetime: item
                    .renews()
                    .then(|| super::lifetime_words(settings, r, item, super::would_span(r, item)))
                    .flatten(),
                names_added: names_added(item),
                also_read_by: match item.renews() {
                    true => unrestarted_readers(settings, r, item.cert),
                    false => Vec::new(),
                },
                ..outcome_of(c)
            });
        }
        let why = "it reads a certificate the pass would renew, or its watch has one";
        each_not_restarted(r, &mut out, ServiceState::WouldRestart, why);
        for (target, why) in &r.restarts.reloaded {
            let outcome = |name: &str| ServiceOutcome {
                name: name.to_string(),
                state: ServiceState::WouldReload,
                reason: why.clone(),
                after_rollback: None,
            };
            match target {
                crate::restart::step::Target::Unit(u) => out.units.push(outcome(u)),
                crate::restart::step::Target::Pod(p) => out.static_pods.push(outcome(p)),
            }
        }
        for s in out.units.iter_mut().chain(out.static_pods.iter_mut()) {
            if let Some(why) = why_restart(settings, r, &s.name) {
                s.reason = why;
            }
        }
        // Not known now: each might be held; why is said once, in the summary.
        if r.restarts.undecided.is_some() {
            for s in out.units.iter_mut().chain(out.static_pods.iter_mut()) {
                s.reason = format!("{} (if the cluster allows it then: see below)", s.reason);
            }
        }
        // Held for a cause known now (no etcd client identity, say), as the pass would.
        held(r, &mut out, "");
        let why = "its watch has a certificate the pass would renew; run after the restarts";
        commands_not_run(settings, r, &mut out, CommandState::WouldRun, why);
        out.errors = errors(r);
        out.watched_dirs = watched_dirs(settings, r);
    }
    out.summary = summary(r, &out);
    out
}

/// Why the pass would restart the unit or static pod `name`, from the node's reading: the
/// certificates it would renew that it reads, or why what it reads is not all known (then
/// every renewal of its watch restarts it). None when the reading does not have it.
fn why_restart(settings: &Settings, r: &PassReport, name: &str) -> Option<String> {
    let manifest = Watch::manifest_path(&settings.manifests_dir, name);
    let c: &Component = r.node.unit(name).or_else(|| r.node.pod(&manifest))?;
    if !c.known() {
        let why = c
            .unknown
            .as_deref()
            .unwrap_or("it runs no program certrenewd follows");
        return Some(format!(
            "its watch has a certificate the pass would renew, and what it reads is not all known: {why}"
        ));
    }
    let renewed: Vec<String> = (r.plan.items.iter())
        .filter(|i| i.renews())
        .map(|i| &r.inventory.certs[i.cert].path)
        .filter(|p| c.reads(p))
        .map(|p| p.display().to_string())
        .collect();
    (!renewed.is_empty()).then(|| {
        format!(
            "it reads {}, which the pass would renew",
            renewed.join(", ")
        )
    })
}
