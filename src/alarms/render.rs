//! `certrenewd alarms --output json`, and the order both outputs list alarms in (the table
//! for people is `cli::alarms_table`).

use serde::Serialize;
use time::format_description::well_known::Rfc3339;

use super::ActiveAlarm;

/// One alarm as `alarms --output json` shows it (docs/interface.md).
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
pub fn sorted(alarms: &[ActiveAlarm]) -> Vec<&ActiveAlarm> {
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

/// When it was raised, RFC 3339.
pub fn raised(a: &ActiveAlarm) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::test_alarms as alarms;

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
}
