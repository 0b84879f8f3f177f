//! The closing line of a `renew` report: how many certificates, units, static pods and
//! endpoints ended in each state, and the verdict (done, failed, a dry run).

use super::*;
use crate::pass::PassReport;

/// `2 certificates renewed, 1 rolled back; 1 unit restarted, 1 not active — failed, see ...`.
pub(super) fn summary(r: &PassReport, out: &RenewReport) -> String {
    if let Some(why) = &out.deferred {
        return format!("pass deferred: {why}");
    }
    let certs = counts(
        out.certificates.iter().map(|c| c.state),
        &[
            (CertState::Renewed, "renewed"),
            (CertState::RolledBack, "rolled back"),
            (CertState::Failed, "failed"),
            (CertState::HeldBack, "held back"),
            (CertState::NotDue, "not due"),
            (CertState::WouldRenew, "would be renewed"),
            (CertState::WouldFail, "would fail"),
        ],
    );
    let services = |list: &[ServiceOutcome], what: &str| {
        let words = [
            (ServiceState::Restarted, "restarted"),
            (ServiceState::Reloaded, "reloaded"),
            (ServiceState::Refused, "refused"),
            (ServiceState::NotRestarted, "not restarted"),
            (ServiceState::HeldBack, "held back"),
            (ServiceState::Failed, "not active"),
            (ServiceState::WouldRestart, "would be restarted"),
            (ServiceState::WouldReload, "would be reloaded"),
        ];
        let n = list.len();
        let parts = counts(list.iter().map(|s| s.state), &words);
        (n > 0).then(|| format!("{} {}", noun(n, what), parts.join(", ")))
    };
    let mut parts: Vec<String> = Vec::new();
    if !certs.is_empty() {
        let n = out.certificates.len();
        parts.push(format!("{} {}", noun(n, "certificate"), certs.join(", ")));
    }
    parts.extend(services(&out.units, "unit"));
    parts.extend(services(&out.static_pods, "static pod"));
    if !out.commands.is_empty() {
        let words = [
            (CommandState::Ran, "ran"),
            (CommandState::Failed, "failed"),
            (CommandState::NotRun, "not run"),
            (CommandState::WouldRun, "would be run"),
        ];
        let done = counts(out.commands.iter().map(|c| c.state), &words);
        let n = out.commands.len();
        parts.push(format!("{} {}", noun(n, "command"), done.join(", ")));
    }
    let bad_endpoints = out.endpoints.iter().filter(|e| !e.ok).count();
    if bad_endpoints > 0 {
        parts.push(format!(
            "{} not serving the new certificate",
            noun(bad_endpoints, "endpoint")
        ));
    }
    // Client pairs an earlier pass renewed and could not show accepted: presented again.
    let earlier = |list: &[(std::path::PathBuf, String)]| {
        let renewed = |p: &std::path::PathBuf| r.renewals.iter().any(|o| o.path == *p);
        let mut paths: Vec<_> = list
            .iter()
            .map(|(p, _)| p)
            .filter(|p| !renewed(p))
            .collect();
        paths.dedup();
        paths.len()
    };
    let (accepted, unproven) = (
        earlier(&r.restarts.pairs_accepted),
        earlier(&r.restarts.pairs_unproven) + earlier(&r.restarts.pairs_refused),
    );
    if accepted + unproven > 0 {
        let n = accepted + unproven;
        let how = [(accepted, "accepted"), (unproven, "not accepted")]
            .into_iter()
            .filter(|(k, _)| *k > 0)
            .map(|(k, w)| format!("{k} {w}"))
            .collect::<Vec<_>>();
        parts.push(format!(
            "{} presented again (owed by an earlier pass), {}",
            noun(n, "client pair"),
            how.join(", ")
        ));
    }
    let released = earlier(&r.restarts.pairs_not_presented);
    if released > 0 {
        parts.push(format!(
            "{} owed by an earlier pass, not presented, no longer owed (the journal says why)",
            noun(released, "client pair")
        ));
    }
    if out.watched_dirs > 0 {
        parts.push(match out.watched_dirs {
            1 => "1 watched directory missing or unreadable".to_string(),
            n => format!("{n} watched directories missing or unreadable"),
        });
    }
    if out.errors.len() > out.watched_dirs {
        let files = out.errors.len() - out.watched_dirs;
        let files = match files {
            1 => "1 file".to_string(),
            n => format!("{n} files"),
        };
        parts.push(format!("{files} cannot be read"));
    }
    if parts.is_empty() {
        return format!(
            "nothing to renew: {} certificates, none due",
            r.plan.items.len()
        );
    }
    let untouched = out
        .certificates
        .iter()
        .all(|c| c.state == CertState::NotDue)
        && out.units.is_empty()
        && out.static_pods.is_empty()
        && out.commands.is_empty();
    let verdict = match (out.dry_run, out.success) {
        (true, true) => "dry run, nothing changed",
        (true, false) => "dry run, nothing changed; the pass would fail",
        (false, true) if untouched => "nothing renewed",
        (false, true) => "done",
        (false, false) => "failed, see `certrenewd alarms`",
    };
    match &r.restarts.undecided {
        Some(why) if out.dry_run => format!("{} — {verdict}; {why}", parts.join("; ")),
        _ => format!("{} — {verdict}", parts.join("; ")),
    }
}

/// `2 renewed`, `1 rolled back`, ... for the states present, in the order of `words`.
fn counts<S: PartialEq + Copy>(
    states: impl Iterator<Item = S>,
    words: &[(S, &str)],
) -> Vec<String> {
    let states: Vec<S> = states.collect();
    words
        .iter()
        .map(|(s, w)| (states.iter().filter(|x| *x == s).count(), w))
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect()
}

/// `1 unit`, `2 units`.
fn noun(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}:"),
        _ => format!("{n} {what}s:"),
    }
}
