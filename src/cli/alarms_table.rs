//! The `certrenewd alarms` table, for people: within the page, one reason entry per line.

use super::text_table;
use crate::alarms::{ActiveAlarm, raised, sorted};

/// How many reason entries the table shows under an alarm, unless asked for all.
const SHOWN_ENTRIES: usize = 5;

/// Where an alarm's text and its reason entries start under its row.
const TEXT_INDENT: &str = "         ";
const REASON_INDENT: &str = "           ";

/// The active alarms as a table for people, or "no active alarms": one row per alarm (ID,
/// SEVERITY, RAISED, ENTITY), its text below it, then its reason one entry per line. Within
/// `width` columns an entry is cut short (`…`) and at most five are shown, with how many
/// more there are; `full` shows every entry whole, wrapped. `--output json` and journald
/// have the whole reason too.
pub fn render_table(alarms: &[ActiveAlarm], width: usize, full: bool) -> String {
    if alarms.is_empty() {
        return "no active alarms\n".to_owned();
    }
    let header = ["ID", "SEVERITY", "RAISED"];
    let rows: Vec<([String; 3], &ActiveAlarm)> = sorted(alarms)
        .into_iter()
        .map(|a| {
            let cells = [
                a.kind.id().to_owned(),
                a.kind.severity().as_str().to_owned(),
                raised(a),
            ];
            (cells, a)
        })
        .collect();
    let mut widths = header.map(str::len);
    for (cells, _) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: [&str; 3], last: &str| {
        for (c, w) in cells.iter().zip(widths) {
            out.push_str(c);
            out.push_str(&" ".repeat(w - c.chars().count() + 2));
        }
        out.push_str(last);
        out.push('\n');
    };
    let room = width.saturating_sub(REASON_INDENT.len()).max(40);
    let mut out = String::new();
    line(&mut out, header, "ENTITY");
    let row_width: usize = widths.iter().map(|w| w + 2).sum();
    for (cells, a) in &rows {
        let cells = [cells[0].as_str(), cells[1].as_str(), cells[2].as_str()];
        match row_width + text_table::display_width(&a.entity) <= width {
            true => line(&mut out, cells, &a.entity),
            // Too long for the row: the certificate's path whole on the line below, where
            // it has the page (an elided path cannot be told from its neighbours).
            false => {
                let (host, path) = match a.entity.split_once(".certificate=") {
                    Some((host, path)) => (format!("{host}.certificate="), path),
                    None => (String::new(), a.entity.as_str()),
                };
                line(&mut out, cells, &host);
                out.push_str(TEXT_INDENT);
                out.push_str(path);
                out.push('\n');
            }
        }
        out.push_str(TEXT_INDENT);
        out.push_str(a.kind.text());
        out.push('\n');
        let entries = entries(a);
        let shown = if full { entries.len() } else { SHOWN_ENTRIES };
        for entry in entries.iter().take(shown) {
            let lines = match full {
                true => text_table::wrapped(entry, REASON_INDENT, width),
                false => vec![format!(
                    "{REASON_INDENT}{}",
                    text_table::cut_end(entry, room)
                )],
            };
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        if entries.len() > shown {
            out.push_str(REASON_INDENT);
            out.push_str(&format!(
                "... and {} more (`certrenewd alarms -v` shows every one)\n",
                entries.len() - shown
            ));
        }
    }
    out
}

/// An alarm's reason, one entry per line: its typed entries, or the lines of its text.
fn entries(a: &ActiveAlarm) -> Vec<&str> {
    match a.reasons.is_empty() {
        false => a.reasons.iter().map(String::as_str).collect(),
        true => a.reason.lines().filter(|l| !l.trim().is_empty()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::AlarmKind;
    use crate::alarms::test_alarms as alarms;
    use time::macros::datetime;

    #[test]
    fn table() {
        assert_eq!(render_table(&[], 120, false), "no active alarms\n");
        let t = render_table(&alarms(), 120, false);
        assert_eq!(
            t,
            "\
ID       SEVERITY  RAISED                ENTITY
500.210  critical  2026-11-21T00:10:03Z  host=controller-0.certificate=/etc/kubernetes/pki/ca.crt
         Certificate expired
           expired 2026-11-20T00:00:00Z
           CAs are never reissued
250.003  major     2026-11-21T00:10:03Z  host=controller-0
         Kubernetes certificates renewal failed
           /etc/etcd/etcd-server.crt: CA key not on this host
"
        );
    }

    #[test]
    fn a_long_reason_fits_the_page_and_says_how_much_more_there_is() {
        let entry = |i: usize| format!("/etc/kubernetes/pki/leaf-{i}.crt: {}", "why ".repeat(100));
        let alarm = ActiveAlarm {
            kind: AlarmKind::RenewalFailed,
            entity: "host=controller-0".into(),
            reason: (0..8).map(entry).collect::<Vec<_>>().join("; "),
            reasons: (0..8).map(entry).collect(),
            subjects: Vec::new(),
            raised_at: datetime!(2026-11-21 00:10:03 UTC),
        };
        let t = render_table(std::slice::from_ref(&alarm), 120, false);
        let widest = t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= 120, "{widest} columns:\n{t}");
        assert_eq!(t.lines().count(), 1 + 2 + 5 + 1, "{t}");
        assert!(t.lines().nth(3).unwrap().ends_with("why…"), "{t}");
        assert!(
            t.ends_with("... and 3 more (`certrenewd alarms -v` shows every one)\n"),
            "{t}"
        );
        // Asked for all: every entry whole, wrapped within the page.
        let all = render_table(std::slice::from_ref(&alarm), 120, true);
        assert!(all.lines().all(|l| l.chars().count() <= 120), "{all}");
        let text: String = all.split_whitespace().collect::<Vec<_>>().join(" ");
        for e in &alarm.reasons {
            assert!(text.contains(e.trim_end()), "{e} missing:\n{all}");
        }
    }
}
