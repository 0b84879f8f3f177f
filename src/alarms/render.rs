//! Output of `certrenewd alarms`: a table for people, JSON for scripts.

use serde::Serialize;
use time::format_description::well_known::Rfc3339;

use super::ActiveAlarm;

/// One alarm as `alarms --output json` shows it (INTERFACE.md).
#[derive(Serialize)]
struct AlarmView<'a> {
    id: &'static str,
    severity: &'static str,
    entity: &'a str,
    text: &'static str,
    reason: &'a str,
    raised_at: String,
}

/// The JSON document of `alarms --output json`.
#[derive(Serialize)]
struct AlarmsView<'a> {
    alarms: Vec<AlarmView<'a>>,
}

/// Most severe first, then by ID, entity and kind: the order of both outputs.
fn sorted(alarms: &[ActiveAlarm]) -> Vec<&ActiveAlarm> {
    let mut v: Vec<&ActiveAlarm> = alarms.iter().collect();
    v.sort_by(|a, b| {
        (a.kind.severity(), a.kind.id(), &a.entity, a.kind).cmp(&(
            b.kind.severity(),
            b.kind.id(),
            &b.entity,
            b.kind,
        ))
    });
    v
}

fn raised(a: &ActiveAlarm) -> String {
    a.raised_at
        .format(&Rfc3339)
        .unwrap_or_else(|_| a.raised_at.to_string())
}

/// The active alarms as `{"alarms":[{"id","severity","entity","text","reason","raised_at"}]}`, pretty-printed.
pub fn render_json(alarms: &[ActiveAlarm]) -> String {
    let view = AlarmsView {
        alarms: sorted(alarms)
            .into_iter()
            .map(|a| AlarmView {
                id: a.kind.id(),
                severity: a.kind.severity().as_str(),
                entity: &a.entity,
                text: a.kind.text(),
                reason: &a.reason,
                raised_at: raised(a),
            })
            .collect(),
    };
    // Serialising plain strings into a Vec cannot fail.
    serde_json::to_string_pretty(&view).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

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
    for (cells, a) in &rows {
        line(&mut out, [&cells[0], &cells[1], &cells[2]], &a.entity);
        out.push_str(TEXT_INDENT);
        out.push_str(a.kind.text());
        out.push('\n');
        let entries = entries(a);
        let shown = if full { entries.len() } else { SHOWN_ENTRIES };
        for entry in entries.iter().take(shown) {
            let lines = match full {
                true => textwrap::wrap(entry, room),
                false => vec![cut(entry, room)],
            };
            for l in lines {
                out.push_str(REASON_INDENT);
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

/// `s` in at most `max` columns, cut at the end with `…`.
fn cut(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    use textwrap::core::display_width;
    if display_width(s) <= max {
        return s.into();
    }
    let mut out = String::new();
    for c in s.chars() {
        if display_width(&out) + display_width(c.encode_utf8(&mut [0; 4])) > max - 1 {
            break;
        }
        out.push(c);
    }
    let mut out = out.trim_end().to_owned();
    out.push('…');
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::AlarmKind;
    use time::macros::datetime;

    fn alarms() -> Vec<ActiveAlarm> {
        vec![
            ActiveAlarm {
                kind: AlarmKind::RenewalFailed,
                entity: "host=controller-0".into(),
                reason: "/etc/etcd/etcd-server.crt: CA key not on this host".into(),
                reasons: Vec::new(),
                subjects: Vec::new(),
                raised_at: datetime!(2026-11-21 00:10:03 UTC),
            },
            ActiveAlarm {
                kind: AlarmKind::Expired,
                entity: "host=controller-0.certificate=/etc/kubernetes/pki/ca.crt".into(),
                reason: "expired 2026-11-20T00:00:00Z\nCAs are never reissued".into(),
                reasons: Vec::new(),
                subjects: Vec::new(),
                raised_at: datetime!(2026-11-21 00:10:03 UTC),
            },
        ]
    }

    #[test]
    fn json_has_the_interface_shape() -> anyhow::Result<()> {
        let v: serde_json::Value = serde_json::from_str(&render_json(&alarms()))?;
        let expected = serde_json::json!({ "alarms": [
            { "id": "500.210", "severity": "critical",
              "entity": "host=controller-0.certificate=/etc/kubernetes/pki/ca.crt",
              "text": "Certificate expired",
              "reason": "expired 2026-11-20T00:00:00Z\nCAs are never reissued",
              "raised_at": "2026-11-21T00:10:03Z" },
            { "id": "250.003", "severity": "major", "entity": "host=controller-0",
              "text": "Kubernetes certificates renewal failed",
              "reason": "/etc/etcd/etcd-server.crt: CA key not on this host",
              "raised_at": "2026-11-21T00:10:03Z" }
        ]});
        assert_eq!(v, expected);
        let empty: serde_json::Value = serde_json::from_str(&render_json(&[]))?;
        assert_eq!(empty, serde_json::json!({ "alarms": [] }));
        Ok(())
    }

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
