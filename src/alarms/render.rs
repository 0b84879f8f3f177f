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

/// The active alarms as a table (ID, SEVERITY, ENTITY, RAISED, TEXT / REASON), or "no active alarms".
pub fn render_table(alarms: &[ActiveAlarm]) -> String {
    if alarms.is_empty() {
        return "no active alarms\n".to_owned();
    }
    let header = ["ID", "SEVERITY", "ENTITY", "RAISED"];
    let rows: Vec<([String; 4], &ActiveAlarm)> = sorted(alarms)
        .into_iter()
        .map(|a| {
            (
                [
                    a.kind.id().to_owned(),
                    a.kind.severity().as_str().to_owned(),
                    a.entity.clone(),
                    raised(a),
                ],
                a,
            )
        })
        .collect();
    let mut widths = header.map(str::len);
    for (cells, _) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let indent: usize = widths.iter().map(|w| w + 2).sum();
    let mut out = String::new();
    let line = |out: &mut String, cells: [&str; 4], last: &str| {
        for (c, w) in cells.iter().zip(widths) {
            out.push_str(c);
            out.push_str(&" ".repeat(w - c.chars().count() + 2));
        }
        out.push_str(last);
        out.push('\n');
    };
    line(&mut out, header, "TEXT / REASON");
    for (cells, a) in &rows {
        line(
            &mut out,
            [&cells[0], &cells[1], &cells[2], &cells[3]],
            a.kind.text(),
        );
        for reason_line in a.reason.lines().filter(|l| !l.trim().is_empty()) {
            out.push_str(&" ".repeat(indent));
            out.push_str(reason_line);
            out.push('\n');
        }
    }
    out
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
        assert_eq!(render_table(&[]), "no active alarms\n");
        let t = render_table(&alarms());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines[0].starts_with("ID       SEVERITY  ENTITY"), "{t}");
        assert!(
            lines[0].ends_with("RAISED                TEXT / REASON"),
            "{t}"
        );
        assert!(
            lines[1].starts_with("500.210  critical  host=controller-0.certificate="),
            "{t}"
        );
        assert!(
            lines[1].ends_with("2026-11-21T00:10:03Z  Certificate expired"),
            "{t}"
        );
        let col = lines[0].find("TEXT / REASON").unwrap_or(0);
        assert_eq!(lines[2].find("expired 2026"), Some(col), "{t}");
        assert_eq!(lines[3].find("CAs are"), Some(col), "{t}");
        assert!(
            lines[4].starts_with("250.003  major     host=controller-0 "),
            "{t}"
        );
        assert_eq!(lines[4].find("Kubernetes"), Some(col), "{t}");
        assert_eq!(lines[5].find("/etc/etcd/etcd-server.crt"), Some(col), "{t}");
    }
}
