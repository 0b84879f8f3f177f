//! The `certrenewd alarms` table, for people: within the page, one reason entry per line.

use super::text_table;
use crate::alarms::{ActiveAlarm, raised, sorted};

/// How many reason entries the table shows under an alarm, unless asked for all.
const SHOWN_ENTRIES: usize = 5;
/// How many lines one entry takes at most, unless asked for all: wrapped at words, the
/// rest cut after a whole word (`…`), never inside a date or a path.
const ENTRY_LINES: usize = 3;

/// Where an alarm's text and its reason entries start under its row.
const TEXT_INDENT: &str = "         ";
const REASON_INDENT: &str = "           ";

/// The active alarms as a table for people, or "no active alarms": one row per alarm (ID,
/// SEVERITY, RAISED, ENTITY), its text below it, then its reason one entry after another.
/// Within `width` columns an entry is wrapped at words over at most three lines (cut after a
/// whole word, `…`), and at most five are shown, with how many more there are; `full` shows
/// every entry whole. An entity too long for its row is on the line below, whole, as
/// `--acknowledge` and journalctl's ALARM_ENTITY= take it. `--output json` and journald
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
        // No trailing blanks when the entity is on the line below.
        out.truncate(out.trim_end_matches(' ').len());
        out.push('\n');
    };
    let mut out = String::new();
    line(&mut out, header, "ENTITY");
    let row_width: usize = widths.iter().map(|w| w + 2).sum();
    for (cells, a) in &rows {
        let cells = [cells[0].as_str(), cells[1].as_str(), cells[2].as_str()];
        match row_width + text_table::display_width(&a.entity) <= width {
            true => line(&mut out, cells, &a.entity),
            // Too long for the row: whole on the line below, where it has the page (an
            // elided or split entity cannot be told from its neighbours, nor copied).
            false => {
                line(&mut out, cells, "");
                // Under the text when it fits there, else from the page's left edge.
                if TEXT_INDENT.len() + text_table::display_width(&a.entity) <= width {
                    out.push_str(TEXT_INDENT);
                }
                out.push_str(&a.entity);
                out.push('\n');
            }
        }
        out.push_str(TEXT_INDENT);
        out.push_str(a.kind.text());
        out.push('\n');
        let entries = entries(a);
        let shown = if full { entries.len() } else { SHOWN_ENTRIES };
        for entry in entries.iter().take(shown) {
            let mut lines = text_table::wrapped(entry, REASON_INDENT, width);
            if !full && lines.len() > ENTRY_LINES {
                lines.truncate(ENTRY_LINES);
                let last = lines.last_mut().expect("three lines");
                // Room for the `…` after a whole word; a line of one word (a long path)
                // gives way whole.
                while text_table::display_width(last) + 1 > width.max(REASON_INDENT.len() + 2) {
                    match last.trim_end().rfind(' ') {
                        Some(cut) if cut >= REASON_INDENT.len() => last.truncate(cut),
                        _ => last.truncate(0),
                    }
                }
                if last.trim().is_empty() {
                    *last = REASON_INDENT.to_string();
                }
                last.push('…');
            }
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
        // Five entries of three lines each, the third cut after a whole word.
        assert_eq!(t.lines().count(), 1 + 2 + 5 * 3 + 1, "{t}");
        assert!(t.lines().nth(5).unwrap().ends_with(" why…"), "{t}");
        assert!(
            t.ends_with("... and 3 more (`certrenewd alarms -v` shows every one)\n"),
            "{t}"
        );
        // At 80 columns: a date is never cut, and an entity too long for its row is whole
        // on the line below.
        let long = ActiveAlarm {
            kind: AlarmKind::ExpiringSoon,
            entity: "host=controller-0.certificate=/var/lib/kubelet/pki/kubelet-client-current.pem".into(),
            reason: String::new(),
            reasons: vec![
                "/var/lib/kubelet/pki/kubelet-client-current.pem expires on 2026-12-09T15:29:14Z: renewed by the next pass".into(),
            ],
            subjects: Vec::new(),
            raised_at: datetime!(2026-11-21 00:10:03 UTC),
        };
        let t = render_table(std::slice::from_ref(&long), 80, false);
        // Every line within the page but the entity's own, which is never split.
        assert!(
            t.lines()
                .filter(|l| !l.contains(&long.entity))
                .all(|l| l.chars().count() <= 80 && !l.ends_with(' ')),
            "{t}"
        );
        assert!(t.contains(&format!("\n{}\n", long.entity)), "{t}");
        let flat = t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&long.reasons[0]), "{t}");
        assert!(!t.contains('…'), "{t}");

        // Asked for all: every entry whole, wrapped within the page.
        let all = render_table(std::slice::from_ref(&alarm), 120, true);
        assert!(all.lines().all(|l| l.chars().count() <= 120), "{all}");
        let text: String = all.split_whitespace().collect::<Vec<_>>().join(" ");
        for e in &alarm.reasons {
            assert!(text.contains(e.trim_end()), "{e} missing:\n{all}");
        }
    }
}
