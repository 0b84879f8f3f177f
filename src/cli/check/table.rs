//! The `check` table, in the spirit of `kubeadm certs check-expiration`: the leaf
//! certificates grouped by the watched directory that holds them (kubeconfigs by their
//! directory), the CAs in a table of their own, long reasons on lines below their row, what
//! could not be read, what the state directory says of interrupted work, and a closing
//! summary with the next pass.

use std::collections::HashMap;

use time::OffsetDateTime;

use super::notes::notes;
use super::{CertReport, CheckReport, Summary, count, lines};
use crate::cli::text_table::Table;

/// The whole table output, laid out within `page` columns.
pub fn render_table(r: &CheckReport, page: usize) -> String {
    let (cas, leaves): (Vec<&CertReport>, Vec<&CertReport>) =
        r.certificates.iter().partition(|c| c.is_ca);
    let mut sections: Vec<String> = Vec::new();
    // Where a name would not fit whole beside the full columns (80 columns, kubeadm's
    // names), the dates go without their time and RESIDUAL TIME is LEFT: every row on one
    // line, both tables alike.
    let full = |compact| {
        (
            leaf_table(&leaves, r.now, compact),
            ca_table(&cas, r.now, compact),
        )
    };
    let (mut leaf, mut ca) = full(false);
    if !leaf.fits(page) || !ca.fits(page) {
        (leaf, ca) = full(true);
    }
    if !leaves.is_empty() {
        sections.push(leaf.render(page));
    }
    if !cas.is_empty() {
        sections.push(ca.render(page));
    }
    if r.certificates.is_empty() {
        sections.push("(no certificates found under the watched paths)\n".into());
    }
    if !r.components.is_empty() {
        sections.push(super::components::section(&r.components, page));
    }
    let problems = problems(r, page);
    if !problems.is_empty() {
        sections.push(problems);
    }
    let notes = notes(r, page);
    if !notes.is_empty() {
        sections.push(notes);
    }
    sections.push(lines(&summary_line(r), "", page));
    sections.join("\n")
}

/// The certificates of each group in the order of the scan, each group sorted by name.
fn grouped<'a, 'r>(certs: &[&'a CertReport<'r>]) -> Vec<(String, Vec<&'a CertReport<'r>>)> {
    let mut groups: Vec<(String, Vec<&CertReport<'r>>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for c in certs {
        let heading = match c.place.kubeconfigs {
            true => format!("{} (kubeconfigs)", c.place.group),
            false => c.place.group.to_string(),
        };
        let i = *index.entry(heading.clone()).or_insert_with(|| {
            groups.push((heading, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(c);
    }
    for (_, certs) in &mut groups {
        certs.sort_by(|a, b| a.place.name.cmp(&b.place.name));
    }
    groups
}

/// The titles of the columns of dates: `compact` for a narrow page.
fn date_titles(compact: bool) -> [&'static str; 2] {
    match compact {
        true => ["EXPIRES (UTC)", "LEFT"],
        false => ["EXPIRES (UTC)", "RESIDUAL TIME"],
    }
}

fn leaf_table(leaves: &[&CertReport], now: OffsetDateTime, compact: bool) -> Table {
    let [expires_title, left_title] = date_titles(compact);
    let header = ["CERTIFICATE", expires_title, left_title, "CA", "STATUS"];
    let mut t = Table::new(&header, 2)
        .elastic(0, 20)
        .elastic(3, 12)
        .whole_first();
    for (heading, certs) in grouped(leaves) {
        t.heading(heading);
        // A kubeconfig's user is said only where one file holds several to tell apart.
        let shared = |c: &CertReport| {
            certs
                .iter()
                .filter(|o| o.place.name == c.place.name)
                .count()
                > 1
        };
        for &c in &certs {
            let ca = c.ca_name.as_deref().unwrap_or("-").to_string();
            t.row(vec![
                leaf_name(c, shared(c)),
                expires(&crate::timefmt::rfc3339(c.not_after), compact),
                residual(now, c.not_after),
                ca,
                c.status.as_str().into(),
            ]);
            if let Some(links) = also(c) {
                t.note(links);
            }
            if let Some(file) = c
                .kubeconfig
                .as_ref()
                .and_then(|k| k.client_certificate.as_ref())
            {
                t.note(format!(
                    "client-certificate: {file} (kubelet rotates it; never rewritten)"
                ));
            }
            if let Some(reason) = &c.reason {
                t.note(reason.to_string());
            }
            if !c.names_missing.is_empty() {
                let what: Vec<String> = c.names_missing.iter().map(|u| u.describe()).collect();
                // What adds them, as the setting stands: a renewal with the setting off
                // keeps the names, so the note must not promise it.
                let fix = match c.adds_names {
                    true => "its next renewal adds it (add_missing_names)".to_string(),
                    false => format!(
                        "add_missing_names = true, then `certrenewd renew --force {}` adds it",
                        c.path
                    ),
                };
                t.note(format!(
                    "does not name {} (alarm 500.220; {fix})",
                    what.join(", ")
                ));
            }
        }
    }
    t
}

fn ca_table(cas: &[&CertReport], now: OffsetDateTime, compact: bool) -> Table {
    let [expires_title, left_title] = date_titles(compact);
    let header = [
        "CERTIFICATE AUTHORITY",
        expires_title,
        left_title,
        "KEY ON NODE",
        "STATUS",
    ];
    let mut t = Table::new(&header, 2).elastic(0, 16).whole_first();
    for (heading, certs) in grouped(cas) {
        t.heading(heading);
        for c in certs {
            let name = c.short_name.as_deref().unwrap_or(&c.place.name).to_string();
            t.row(vec![
                name,
                expires(&crate::timefmt::rfc3339(c.not_after), compact),
                residual(now, c.not_after),
                c.key_on_node.into(),
                c.status.as_str().into(),
            ]);
            if let Some(links) = also(c) {
                t.note(links);
            }
            let notes = [c.reason.map(str::to_string), c.renewal_note()];
            for note in notes.into_iter().chain([c.old_ca_advice.clone()]).flatten() {
                t.note(note);
            }
        }
    }
    t
}

/// A leaf's name under its group: the relative path, and the kubeconfig user where the
/// file holds several (`shared`).
fn leaf_name(c: &CertReport, shared: bool) -> String {
    match &c.kubeconfig {
        Some(k) if shared => format!("{} (user {})", c.place.name, k.user),
        _ => c.place.name.to_string(),
    }
}

/// `also LINK, ...`: the symlinks to it, each relative to the group when inside it, on a
/// line of their own below the row, so that a narrow page never cuts a name for them.
fn also(c: &CertReport) -> Option<String> {
    if c.aliases.is_empty() {
        return None;
    }
    let prefix = format!("{}/", c.place.group.trim_end_matches('/'));
    let links: Vec<&str> = c
        .aliases
        .iter()
        .map(|a| a.strip_prefix(&prefix).unwrap_or(a))
        .collect();
    // kubelet's pair in use is listed by its symlink; the alias is the file it points at.
    let dated = |l: &str| {
        let name = l.rsplit('/').next().unwrap_or(l);
        crate::inventory::kubelet::dated_prefix(name).is_some()
    };
    if c.path.ends_with("-current.pem") && links.iter().all(|l| dated(l)) {
        return Some(format!("-> {} (kubelet's pair in use)", links.join(", ")));
    }
    let what = match links.len() {
        1 => "symlink",
        _ => "symlinks",
    };
    Some(format!("also {} ({what} to it)", links.join(", ")))
}

/// `2026-12-03T17:13:00Z` as `2026-12-03 17:13` (the header says UTC); `compact`, the
/// date alone.
fn expires(rfc3339: &str, compact: bool) -> String {
    let end = if compact { 10 } else { 16 };
    rfc3339.get(..end).unwrap_or(rfc3339).replacen('T', " ", 1)
}

/// The time left as kubeadm shows it: `1y 35d`, `9d`, `12h`, `expired`. Years are
/// calendar years counted from `now`, then the days after the last anniversary: counting
/// 365-day years drifts a day per 29 February, so that a certificate ending on today's
/// date eight years on read `8y 2d`, and one two days short of it `8y 0d`.
fn residual(now: OffsetDateTime, not_after: OffsetDateTime) -> String {
    let days = crate::plan::days_until(not_after, now);
    if days < 0.0 {
        return "expired".into();
    }
    let mut years = not_after.year() - now.year();
    if years > 0 && years_on(now, years) > not_after {
        years -= 1;
    }
    if years >= 1 {
        let rest = (not_after - years_on(now, years)).whole_days();
        format!("{years}y {rest}d")
    } else if days >= 1.0 {
        format!("{}d", days.floor() as i64)
    } else {
        format!("{}h", (days * 24.0).floor() as i64)
    }
}

/// `t` the same date and time `years` later; 29 February falls back to the 28th, the last
/// day of February in a common year, so that a year from it never runs into March.
fn years_on(t: OffsetDateTime, years: i32) -> OffsetDateTime {
    let year = t.year() + years;
    t.replace_year(year)
        .or_else(|_| t.replace_day(28).and_then(|t| t.replace_year(year)))
        .unwrap_or(t)
}

/// What could not be read (each an error of the pass), then what was passed over.
fn problems(r: &CheckReport, page: usize) -> String {
    let mut out = String::new();
    let mut sorted = |list: &[super::SkippedReport], word: &str| {
        let mut list: Vec<_> = list.iter().collect();
        list.sort_by(|a, b| a.path.cmp(&b.path));
        for e in list {
            let text = format!("{word:<8} {}: {}", e.path, e.reason);
            out.push_str(&hanging(&text, 9, page));
        }
    };
    sorted(&r.errors, "error");
    sorted(&r.skipped, "skipped");
    out
}

/// `14 certificates: 9 ok, 4 due, 1 unrenewable — next pass 00:00`.
fn summary_line(r: &CheckReport) -> String {
    let s: &Summary = &r.summary;
    let statuses: Vec<String> = [
        (s.ok, "ok"),
        (s.due, "due"),
        (s.expired, "expired"),
        (s.unrenewable, "unrenewable"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, word)| format!("{n} {word}"))
    .collect();
    let copies = match s.copies {
        0 => String::new(),
        1 => " and 1 copy of a CA".to_string(),
        n => format!(" and {n} copies of a CA"),
    };
    let mut line = match (s.certificates, s.copies) {
        (0, 0) => "no certificates".to_string(),
        (n, _) => format!(
            "{}{copies}: {}",
            count(n, "certificate"),
            statuses.join(", ")
        ),
    };
    let mut unread = Vec::new();
    // What `--fail-due` fails for beside the statuses.
    match s.names_missing {
        0 => {}
        1 => unread.push("1 lacks a name it is served on (500.220)".to_string()),
        n => unread.push(format!("{n} lack a name they are served on (500.220)")),
    }
    if s.watched_dirs > 0 {
        unread.push(match s.watched_dirs {
            1 => "1 watched directory missing or unreadable".to_string(),
            n => format!("{n} watched directories missing or unreadable"),
        });
    }
    if s.errors > s.watched_dirs {
        let files = s.errors - s.watched_dirs;
        unread.push(format!("{} cannot be read", count(files, "file")));
    }
    if s.skipped > 0 {
        unread.push(format!("{} skipped", s.skipped));
    }
    // Installed files their services may not run on yet, said in a paragraph below.
    if r.restarts_owed.is_some() {
        unread.push("restarts owed".into());
    }
    if r.restarts_by_hand.is_some() {
        unread.push("restarts owed by hand".into());
    }
    if !unread.is_empty() {
        line.push_str(&format!("; {}", unread.join(", ")));
    }
    // Both times are RFC 3339 UTC to the second: their text orders as they do.
    let deferred = r
        .inhibited
        .as_ref()
        .is_some_and(|i| match (&i.until, &r.next_pass) {
            (Some(until), Some(next)) => until >= next,
            _ => true,
        });
    let stopped = matches!(r.daemon.state, "not_running" | "never");
    let next = match (&r.next_pass_local, deferred) {
        _ if stopped => "no pass while the daemon is not running".to_string(),
        (None, _) => "no pass scheduled".to_string(),
        (Some(t), false) => format!("next pass {t}"),
        (Some(t), true) => format!("next pass {t}, deferred while inhibited"),
    };
    format!("{line} — {next}")
}

/// `text` wrapped to `page`, lines after the first indented by `hang` columns.
fn hanging(text: &str, hang: usize, page: usize) -> String {
    let rest = " ".repeat(hang);
    let options = textwrap::Options::new(page)
        .subsequent_indent(&rest)
        .break_words(true)
        // A path stays whole where it can: not broken at its hyphens.
        .word_splitter(textwrap::WordSplitter::NoHyphenation);
    textwrap::wrap(text, options)
        .into_iter()
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-27 12:00 UTC);

    #[test]
    fn residual_time_reads_like_kubeadm() {
        let in_days = |d: f64| residual(NOW, NOW + time::Duration::seconds_f64(d * 86_400.0));
        assert_eq!(in_days(400.2), "1y 35d");
        assert_eq!(in_days(9.9), "9d");
        assert_eq!(in_days(0.5), "12h");
        assert_eq!(in_days(-1.0), "expired");
    }

    #[test]
    fn residual_years_are_calendar_years() {
        let cases = [
            (datetime!(2034-11-25 12:00 UTC), "7y 363d"),
            (datetime!(2034-11-27 12:00 UTC), "8y 0d"),
            (datetime!(2034-11-27 11:59 UTC), "7y 364d"),
            (datetime!(2027-11-27 12:00 UTC), "1y 0d"),
        ];
        for (not_after, want) in cases {
            let got = residual(NOW, not_after);
            println!("{not_after}: {got}");
            assert_eq!(got, want, "{not_after}");
        }
    }

    #[test]
    fn a_year_from_29_february_ends_on_the_28th() {
        let leap = datetime!(2028-02-29 00:00 UTC);
        assert_eq!(residual(leap, datetime!(2029-02-28 00:00 UTC)), "1y 0d");
        assert_eq!(residual(leap, datetime!(2029-02-27 00:00 UTC)), "364d");
    }

    #[test]
    fn expiry_is_the_minute_in_utc() {
        assert_eq!(expires("2026-12-03T17:13:00Z", false), "2026-12-03 17:13");
        assert_eq!(expires("2026-12-03T17:13:00Z", true), "2026-12-03");
    }
}
