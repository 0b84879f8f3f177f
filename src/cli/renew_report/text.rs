//! The report as text, for people.

use std::fmt::Write as _;

use super::*;

/// The width of the state words, so what they name lines up.
const WORD: usize = 14;

/// The report as text: one line per certificate, unit, static pod, endpoint and unreadable
/// file, the state first (capitals when something is wrong), more facts on indented lines
/// below, and the summary last.
pub fn render_text(out: &RenewReport) -> String {
    let mut text = String::new();
    let mut line = |word: &str, rest: String| {
        let _ = writeln!(text, "{word:<WORD$}{rest}");
    };
    // Why a lifetime was chosen is said once; later lines of the same say only the span
    // and whose it is (`365 days, kubeadm's`).
    let mut explained: Vec<&str> = Vec::new();
    for c in &out.certificates {
        let word = match c.state {
            CertState::Renewed => "renewed",
            CertState::RolledBack => "ROLLED BACK",
            CertState::Failed => "FAILED",
            CertState::HeldBack => "HELD BACK",
            CertState::NotDue => "not due",
            CertState::WouldRenew => "would renew",
            CertState::WouldFail => "WOULD FAIL",
        };
        match (&c.serial, &c.not_after) {
            (Some(serial), Some(until)) if c.state == CertState::Renewed => {
                let key = if c.new_key { " (new key)" } else { "" };
                let lifetime = match c.lifetime.as_deref() {
                    Some(l) if explained.contains(&l) => match l.split_once(": ") {
                        Some((short, _)) => format!("; lifetime {short} (as above)"),
                        None => format!("; lifetime {l}"),
                    },
                    Some(l) => {
                        explained.push(l);
                        format!("; lifetime {l}")
                    }
                    None => String::new(),
                };
                line(
                    word,
                    format!("{} serial {serial} until {until}{key}{lifetime}", c.label),
                );
            }
            _ => line(
                word,
                format!("{}: {}", c.label, c.reason.as_deref().unwrap_or("")),
            ),
        }
        let more = match c.state {
            CertState::Renewed => c.reason.as_ref(),
            _ => c.backoff.as_ref(),
        };
        if let Some(more) = more {
            line("", more.clone());
        }
        if !c.names_added.is_empty() {
            let names = c.names_added.join(", ");
            line("", format!("names added {names} (add_missing_names)"));
        }
    }
    // A cause several restarts were held for is said once, before the first of them; each
    // then names itself and points at it.
    let held = |s: &&ServiceOutcome| s.state == ServiceState::HeldBack;
    let all_held: Vec<&ServiceOutcome> = out
        .units
        .iter()
        .chain(&out.static_pods)
        .filter(held)
        .collect();
    let shared = |reason: &str| all_held.iter().filter(|h| h.reason == reason).count();
    let mut said: Vec<&str> = Vec::new();
    for (list, prefix) in [(&out.units, ""), (&out.static_pods, "static pod ")] {
        for s in list {
            let n = match s.state {
                ServiceState::HeldBack => shared(&s.reason),
                _ => 0,
            };
            if n > 1 {
                if !said.contains(&s.reason.as_str()) {
                    said.push(&s.reason);
                    let cause = s
                        .reason
                        .strip_prefix("not restarted: ")
                        .unwrap_or(&s.reason);
                    line("HELD BACK", format!("{n} restarts, for one cause: {cause}"));
                }
                line(
                    "HELD BACK",
                    format!("{prefix}{}: not restarted, for the cause above", s.name),
                );
                continue;
            }
            let word = match (s.state, prefix.is_empty()) {
                (ServiceState::Restarted, _) => "restarted",
                (ServiceState::Reloaded, _) => "reloaded",
                (ServiceState::Refused, _) => "REFUSED",
                (ServiceState::NotRestarted, _) => "not restarted",
                (ServiceState::HeldBack, _) => "HELD BACK",
                (ServiceState::Failed, true) => "NOT ACTIVE",
                (ServiceState::Failed, false) => "NOT RESTARTED",
                (ServiceState::WouldRestart, _) => "would restart",
                (ServiceState::WouldReload, _) => "would reload",
            };
            line(word, format!("{prefix}{}: {}", s.name, s.reason));
            match &s.after_rollback {
                Some(a) if a.active => line(
                    "",
                    format!("started again on the previous certificates: {}", a.reason),
                ),
                Some(a) => line(
                    "",
                    format!("STILL NOT ACTIVE after the roll-back: {}", a.reason),
                ),
                None => {}
            }
        }
    }
    for rest in by_hand_lines(out) {
        line("BY HAND", rest);
    }
    for c in &out.commands {
        let word = match c.state {
            CommandState::Ran => "ran",
            CommandState::Failed => "FAILED",
            CommandState::NotRun => "not run",
            CommandState::WouldRun => "would run",
        };
        let program = c.command.first().map_or("", String::as_str);
        line(
            word,
            format!(
                "post_renew_command {program} (watch {}): {}",
                c.watch, c.reason
            ),
        );
    }
    for c in &out.copies {
        let word = match c.state {
            CopyState::Replaced => "replaced",
            CopyState::Failed => "NOT REPLACED",
            CopyState::WouldReplace => "would replace",
            CopyState::RolledBack => "ROLLED BACK",
        };
        let what = match (c.cas.as_slice(), c.state) {
            (cas, CopyState::RolledBack) if !cas.is_empty() => format!(
                "{}: its copy of CA {} is the previous one again",
                c.path,
                cas.join(", ")
            ),
            ([], _) => format!("{}: a copy of a renewed CA", c.path),
            (cas, _) => format!("{}: its copy of CA {}", c.path, cas.join(", ")),
        };
        match &c.reason {
            Some(why) => line(word, format!("{what}: {why}")),
            None => line(word, what),
        }
    }
    for e in &out.endpoints {
        let word = if e.ok { "verified" } else { "NOT SERVED" };
        line(word, format!("{}: {}", e.endpoint, e.reason));
    }
    for e in &out.errors {
        line("FAILED", format!("{}: {}", e.path, e.reason));
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(&out.summary);
    text.push('\n');
    text
}

/// A line for each static pod and unit that reads a certificate renewed (a dry run: to be
/// renewed) and that no watch restarts for it: the operator restarts it by hand.
pub fn by_hand(out: &RenewReport) -> String {
    (by_hand_lines(out).into_iter())
        .map(|rest| format!("{:<WORD$}{rest}\n", "BY HAND"))
        .collect()
}

/// What [`by_hand`] says of each, after its state word.
fn by_hand_lines(out: &RenewReport) -> Vec<String> {
    let renewed = match out.dry_run {
        true => "which the pass would renew",
        false => "renewed",
    };
    let also = (out.certificates.iter()).map(|c| (c.path.as_str(), c.also_read_by.as_slice()));
    (crate::cli::by_reader(also).into_iter())
        .map(|(reader, files)| {
            let (what, list) = crate::cli::reader_kind(reader);
            format!(
                "{what} {reader}: reads {} ({renewed}), but no watch restarts it: certrenewd \
                 never does; restart it by hand, or name it in the watch's {list}",
                files.join(", ")
            )
        })
        .collect()
}
