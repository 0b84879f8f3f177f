//! `certrenewd renew`: one renewal pass now, the same code path as a scheduled pass.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::config::Settings;
use crate::pass::PassReport;
use crate::plan::{PlanItem, Status, Verdict};
use crate::renew::RenewResult;
use crate::timefmt::utc_minute;

/// Makes PATH arguments absolute and checks each is a file under a watched directory.
pub fn resolve_paths(settings: &Settings, paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let cwd = std::env::current_dir()?;
    let mut out = Vec::new();
    for p in paths {
        let abs = if p.is_absolute() {
            p.clone()
        } else {
            cwd.join(p)
        };
        let abs = normalize(&abs);
        match std::fs::symlink_metadata(&abs) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{}: no such file", abs.display())
            }
            Err(e) => bail!("{}: {e}", abs.display()),
            Ok(_) => {}
        }
        if settings.watch_for(&abs).is_none() {
            bail!(
                "{} is not under a watched directory ({})",
                abs.display(),
                settings
                    .watches
                    .iter()
                    .map(|w| w.path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !abs.is_file() {
            bail!("{} is not a certificate file", abs.display());
        }
        out.push(abs);
    }
    Ok(out)
}

/// Removes `.` and resolves `..` lexically (symlinks are left to the renewer's checks).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Where a certificate stands, in words: `due, 3.0 days left`, or `expired 2.0 days ago`
/// (never a negative count of days left). Whole tenths of a day that have passed, as
/// `check`'s table counts whole days: 2.96 days left is `2.9`, beside its `2d`, not `3.0`.
pub(crate) fn standing(item: &crate::plan::PlanItem) -> String {
    match item.not_yet_valid {
        true => "due: not valid yet, dated ahead by a clock that ran fast".to_string(),
        false => standing_of(item.status.as_str(), item.days_left),
    }
}

fn standing_of(status: &str, days_left: f64) -> String {
    let tenths = |days: f64| (days * 10.0).floor() / 10.0;
    match days_left < 0.0 {
        true => format!("expired {:.1} days ago", tenths(-days_left)),
        false => format!("{status}, {:.1} days left", tenths(days_left)),
    }
}

/// What a dry run would do: the same decisions as the real pass (inhibit, selection,
/// renewability, what cannot be read), printed as what would happen; empty when nothing
/// would, which the summary below it says.
pub fn render_plan(r: &PassReport, report: &super::renew_report::RenewReport) -> String {
    let mut out = String::new();
    if let Some(i) = &r.inhibited {
        let _ = writeln!(
            out,
            "would defer the pass: {}; nothing would be renewed or restarted (lift it with `certrenewd inhibit --clear`)",
            i.describe()
        );
    }
    for item in r.plan.items.iter().filter(|i| r.speaks_of(i.cert)) {
        let c = &r.inventory.certs[item.cert];
        let reason = item.reason.as_deref().unwrap_or("");
        if r.named.is_some() && !item.wanted() {
            let _ = writeln!(out, "not due       {}: {}", c.row_label(), not_due(r, item));
        } else if r.inhibited.is_some() {
            if item.wanted() {
                let _ = writeln!(
                    out,
                    "deferred      {} ({})",
                    c.row_label(),
                    item.status.as_str()
                );
            }
        } else if let Some(held) = held_back(r, item.cert) {
            let _ = writeln!(out, "HELD BACK     {}: {held}", c.row_label());
        } else if item.renews() {
            let ca = r.inventory.signer_words(c);
            let _ = writeln!(
                out,
                "would renew   {} ({}; {ca})",
                c.row_label(),
                standing(item)
            );
            if !item.add_names.is_empty() {
                let names: Vec<String> = item.add_names.iter().map(|n| n.san()).collect();
                let _ = writeln!(
                    out,
                    "              would add names {} (add_missing_names)",
                    names.join(", ")
                );
            }
        } else if item.verdict == Verdict::Blocked {
            let _ = writeln!(out, "would fail    {}: {reason}", c.row_label());
        } else if item.status == Status::Unrenewable {
            let _ = writeln!(out, "unrenewable   {}: {reason}", c.row_label());
        }
    }
    for e in r.inventory.errors.iter().filter(|_| r.named.is_none()) {
        let _ = writeln!(out, "would fail    {}: {}", e.path.display(), e.reason);
    }
    for copy in &r.copies.replaced {
        let cas: Vec<String> = copy.cas.iter().map(|p| p.display().to_string()).collect();
        let _ = writeln!(
            out,
            "would replace {}: its copy of CA {}",
            copy.path.display(),
            cas.join(", ")
        );
    }
    for (path, why) in &r.copies.failed {
        let _ = writeln!(out, "would fail    {}: {why}", path.display());
    }
    if !r.restarts.not_restarted.is_empty() {
        let targets: Vec<String> = r
            .restarts
            .not_restarted
            .iter()
            .map(ToString::to_string)
            .collect();
        let unless = match r.restarts.undecided {
            Some(_) => " (if the cluster allows it then: see below)",
            None => "",
        };
        let _ = writeln!(out, "would restart {}{unless}", targets.join(", "));
    }
    for (target, why) in &r.restarts.reloaded {
        let _ = writeln!(out, "would reload  {target}: {why}");
    }
    out.push_str(&super::renew_report::by_hand(report));
    for watch in &r.restarts.commands_not_run {
        let _ = writeln!(
            out,
            "would run     the post_renew_command of watch {}, after the restarts",
            watch.display()
        );
    }
    out
}

/// What `renew PATH` says of a certificate it named that is not due: until when it is good,
/// how to renew it now, and what would stop a renewal here when it falls due.
pub fn not_due(r: &PassReport, item: &PlanItem) -> String {
    let c = &r.inventory.certs[item.cert];
    let mut why = format!(
        "ok until {} ({:.0} days left, not yet in the renewal window); `certrenewd renew --force {}` renews it now",
        utc_minute(c.facts.not_after),
        item.days_left.floor(),
        c.path.display()
    );
    if let Some(p) = item.copy_of {
        // A copy is not renewed on its own: naming it again with --force changes nothing.
        let ca = r.inventory.certs[p].path.display();
        let of = r.plan.items.iter().find(|i| i.cert == p);
        return match of {
            Some(of) if !of.renewable => format!(
                "a copy of CA {ca}, which cannot be renewed here: {}",
                of.reason.as_deref().unwrap_or("its key is not usable here")
            ),
            _ => {
                let on = of
                    .and_then(|of| of.renews_on)
                    .map(|on| format!(" on {}", utc_minute(on)))
                    .unwrap_or_default();
                format!(
                    "a copy of CA {ca}: replaced with it when that is renewed{on}; `certrenewd renew --force {ca}` renews it now"
                )
            }
        };
    }
    if item.status == Status::Unrenewable
        && let Some(blocker) = &item.reason
    {
        why = format!(
            "ok until {} ({:.0} days left), but this host cannot renew it: {blocker}",
            utc_minute(c.facts.not_after),
            item.days_left.floor()
        );
    }
    why
}

/// Why the back-off holds certificate `cert` back in this pass, if it does.
pub(crate) fn held_back(r: &PassReport, cert: usize) -> Option<&str> {
    r.renewals.iter().find_map(|o| match &o.result {
        RenewResult::HeldBack { reason } if o.cert == cert => Some(reason.as_str()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    /// The dry run's days agree with `check`'s whole days: 2.96 days left is 2.9 (`2d`).
    #[test]
    fn days_are_counted_in_tenths_that_have_passed() {
        assert_eq!(super::standing_of("due", 2.96), "due, 2.9 days left");
        assert_eq!(super::standing_of("due", 3.0), "due, 3.0 days left");
        assert_eq!(super::standing_of("expired", -3.04), "expired 3.0 days ago");
        assert_eq!(super::standing_of("expired", -2.99), "expired 2.9 days ago");
    }
}
