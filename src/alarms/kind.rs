//! The alarm kinds of the interface table: fault ID, severity, text and MESSAGE_IDs.

use serde::{Deserialize, Serialize};

/// The journald MESSAGE_IDs, one per kind and state; each has an entry in systemd/certrenewd.catalog.
pub mod message_ids {
    /// 250.003 "renewal failed" raised.
    pub const RENEWAL_FAILED_SET: &str = "c09dac120e7c4060a49973317381e336";
    /// 250.003 "renewal failed" cleared.
    pub const RENEWAL_FAILED_CLEAR: &str = "be17bb5638ef412ebf613150b5c25d95";
    /// 250.003 "renewed but not all services updated" raised.
    pub const SERVICES_NOT_UPDATED_SET: &str = "22c183ff061446049b7c4e2e2ab1e59e";
    /// 250.003 "renewed but not all services updated" cleared.
    pub const SERVICES_NOT_UPDATED_CLEAR: &str = "772a13dc7d4e40c9887adc0e57ce8dba";
    /// 500.200 "certificate expiring soon" raised.
    pub const EXPIRING_SOON_SET: &str = "26644d9902644f06b48230ceffaab780";
    /// 500.200 "certificate expiring soon" cleared.
    pub const EXPIRING_SOON_CLEAR: &str = "7b0048f27dbb406594800e43cb9b2d01";
    /// 500.210 "certificate expired" raised.
    pub const EXPIRED_SET: &str = "396550d90d4044a49193f3eab7a8747e";
    /// 500.210 "certificate expired" cleared.
    pub const EXPIRED_CLEAR: &str = "e53e48e9085643b4a541215819f746f4";
    /// 500.220 "certificate does not name an address it is used on" raised.
    pub const NAMES_MISSING_SET: &str = "61036fe9b3044b4aad2c155b9bb8b4d8";
    /// 500.220 "certificate does not name an address it is used on" cleared.
    pub const NAMES_MISSING_CLEAR: &str = "6dfec419c7a34a94973703e96621b796";
    /// 500.230 "controller's certrenewd not reporting" raised.
    pub const CONTROLLER_QUIET_SET: &str = "704196a660ee4a2696c5965e01e0b5da";
    /// 500.230 "controller's certrenewd not reporting" cleared.
    pub const CONTROLLER_QUIET_CLEAR: &str = "070c6fe4fc36439b9df6664954051142";
    /// 500.240 "controller's certificate renewal failing" raised.
    pub const CONTROLLER_FAILING_SET: &str = "37a7c3b09d4a4aec956cf9192afcc534";
    /// 500.240 "controller's certificate renewal failing" cleared.
    pub const CONTROLLER_FAILING_CLEAR: &str = "3c2ff71ba444485cbd9153be00fcf9e0";
    /// 500.250 "controllers hold different CAs or keys" raised.
    pub const DRIFT_SET: &str = "22193b2ddb08477c9d82310a19279f93";
    /// 500.250 "controllers hold different CAs or keys" cleared.
    pub const DRIFT_CLEAR: &str = "92a719dc14d4475dabc3c3636337917c";
    /// 500.260 "services still trust a CA certificate about to end" raised.
    pub const OLD_CA_IN_USE_SET: &str = "3be919794c994b3b9d5f312dea85d8d5";
    /// 500.260 "services still trust a CA certificate about to end" cleared.
    pub const OLD_CA_IN_USE_CLEAR: &str = "d60a1f9a18c34a80b3361d23fac9c32c";
}

/// What an alarm reports; with its entity it identifies one alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmKind {
    /// 250.003: a pass could not renew one or more due certificates.
    RenewalFailed,
    /// 250.003: certificates were renewed but a dependent unit did not come back.
    ServicesNotUpdated,
    /// 500.200: a certificate is inside its warning period and was not renewed.
    ExpiringSoon,
    /// 500.210: a certificate has expired and was not renewed.
    Expired,
    /// 500.220: a serving certificate does not name an address it is used on.
    NamesMissing,
    /// 500.230: another controller's certrenewd publishes no record, or a stale one: it has
    /// stopped, or has not finished a pass for two of its scheduled intervals.
    ControllerQuiet,
    /// 500.240: another controller's passes have failed for more than a day.
    ControllerFailing,
    /// 500.250: a CA, a CA key or the service-account key differs between controllers.
    Drift,
    /// 500.260: the components that hold a re-issued CA's old certificate in memory have
    /// not been restarted (their restarts held), and that certificate ends soon.
    OldCaInUse,
}

/// How bad an alarm is, in StarlingX terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Service is lost or about to be: PRIORITY 2.
    Critical,
    /// Service is degraded: PRIORITY 3.
    Major,
    /// Minor degradation: PRIORITY 4.
    Minor,
    /// Worth a look: PRIORITY 4.
    Warning,
}

/// Whether a journald entry raises or clears an alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmState {
    /// The alarm is raised.
    Set,
    /// The alarm's condition is gone.
    Clear,
}

impl AlarmKind {
    /// Every kind, in the order of the interface table.
    pub const ALL: [AlarmKind; 9] = [
        AlarmKind::RenewalFailed,
        AlarmKind::ServicesNotUpdated,
        AlarmKind::ExpiringSoon,
        AlarmKind::Expired,
        AlarmKind::NamesMissing,
        AlarmKind::ControllerQuiet,
        AlarmKind::ControllerFailing,
        AlarmKind::Drift,
        AlarmKind::OldCaInUse,
    ];

    /// The kinds raised on the other controllers' behalf, from their records in etcd, between
    /// passes; they are kept apart from a pass's own (`AlarmStore::peers`).
    pub const PEERS: [AlarmKind; 3] = [
        AlarmKind::ControllerQuiet,
        AlarmKind::ControllerFailing,
        AlarmKind::Drift,
    ];

    /// The StarlingX fault ID (ALARM_ID).
    pub fn id(self) -> &'static str {
        match self {
            AlarmKind::RenewalFailed | AlarmKind::ServicesNotUpdated => "250.003",
            AlarmKind::ExpiringSoon => "500.200",
            AlarmKind::Expired => "500.210",
            AlarmKind::NamesMissing => "500.220",
            AlarmKind::ControllerQuiet => "500.230",
            AlarmKind::ControllerFailing => "500.240",
            AlarmKind::Drift => "500.250",
            AlarmKind::OldCaInUse => "500.260",
        }
    }

    /// The severity (ALARM_SEVERITY).
    pub fn severity(self) -> Severity {
        match self {
            AlarmKind::RenewalFailed
            | AlarmKind::ServicesNotUpdated
            | AlarmKind::ExpiringSoon
            | AlarmKind::NamesMissing
            | AlarmKind::ControllerQuiet
            | AlarmKind::ControllerFailing
            | AlarmKind::Drift => Severity::Major,
            AlarmKind::Expired | AlarmKind::OldCaInUse => Severity::Critical,
        }
    }

    /// The fixed text of the interface table.
    pub fn text(self) -> &'static str {
        match self {
            AlarmKind::RenewalFailed => "Kubernetes certificates renewal failed",
            AlarmKind::ServicesNotUpdated => {
                "Kubernetes certificates have been renewed but not all services have been updated"
            }
            AlarmKind::ExpiringSoon => "Certificate expiring soon",
            AlarmKind::Expired => "Certificate expired",
            AlarmKind::NamesMissing => "Certificate does not name an address it is used on",
            AlarmKind::ControllerQuiet => "Controller's certificate renewal not reporting",
            AlarmKind::ControllerFailing => {
                "Controller's certificate renewal failing for more than a day"
            }
            AlarmKind::Drift => "Controllers hold different CAs or keys",
            AlarmKind::OldCaInUse => "Services still trust a CA certificate about to end",
        }
    }

    /// The stable serde name, as written in the state file (e.g. "renewal_failed").
    pub fn name(self) -> &'static str {
        match self {
            AlarmKind::RenewalFailed => "renewal_failed",
            AlarmKind::ServicesNotUpdated => "services_not_updated",
            AlarmKind::ExpiringSoon => "expiring_soon",
            AlarmKind::Expired => "expired",
            AlarmKind::NamesMissing => "names_missing",
            AlarmKind::ControllerQuiet => "controller_quiet",
            AlarmKind::ControllerFailing => "controller_failing",
            AlarmKind::Drift => "drift",
            AlarmKind::OldCaInUse => "old_ca_in_use",
        }
    }

    /// The journald MESSAGE_ID of a raise or clear of this kind.
    pub fn message_id(self, state: AlarmState) -> &'static str {
        use message_ids::*;
        match (self, state) {
            (AlarmKind::RenewalFailed, AlarmState::Set) => RENEWAL_FAILED_SET,
            (AlarmKind::RenewalFailed, AlarmState::Clear) => RENEWAL_FAILED_CLEAR,
            (AlarmKind::ServicesNotUpdated, AlarmState::Set) => SERVICES_NOT_UPDATED_SET,
            (AlarmKind::ServicesNotUpdated, AlarmState::Clear) => SERVICES_NOT_UPDATED_CLEAR,
            (AlarmKind::ExpiringSoon, AlarmState::Set) => EXPIRING_SOON_SET,
            (AlarmKind::ExpiringSoon, AlarmState::Clear) => EXPIRING_SOON_CLEAR,
            (AlarmKind::Expired, AlarmState::Set) => EXPIRED_SET,
            (AlarmKind::Expired, AlarmState::Clear) => EXPIRED_CLEAR,
            (AlarmKind::NamesMissing, AlarmState::Set) => NAMES_MISSING_SET,
            (AlarmKind::NamesMissing, AlarmState::Clear) => NAMES_MISSING_CLEAR,
            (AlarmKind::ControllerQuiet, AlarmState::Set) => CONTROLLER_QUIET_SET,
            (AlarmKind::ControllerQuiet, AlarmState::Clear) => CONTROLLER_QUIET_CLEAR,
            (AlarmKind::ControllerFailing, AlarmState::Set) => CONTROLLER_FAILING_SET,
            (AlarmKind::ControllerFailing, AlarmState::Clear) => CONTROLLER_FAILING_CLEAR,
            (AlarmKind::Drift, AlarmState::Set) => DRIFT_SET,
            (AlarmKind::Drift, AlarmState::Clear) => DRIFT_CLEAR,
            (AlarmKind::OldCaInUse, AlarmState::Set) => OLD_CA_IN_USE_SET,
            (AlarmKind::OldCaInUse, AlarmState::Clear) => OLD_CA_IN_USE_CLEAR,
        }
    }

    /// The journald PRIORITY of a raise or clear of this kind.
    pub fn priority(self, state: AlarmState) -> u8 {
        match state {
            AlarmState::Set => self.severity().priority(),
            AlarmState::Clear => 5,
        }
    }
}

impl std::fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Severity {
    /// The lowercase name (ALARM_SEVERITY value).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Major => "major",
            Severity::Minor => "minor",
            Severity::Warning => "warning",
        }
    }

    /// The syslog priority of a raise with this severity.
    pub fn priority(self) -> u8 {
        match self {
            Severity::Critical => 2,
            Severity::Major => 3,
            Severity::Minor | Severity::Warning => 4,
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AlarmState {
    /// The ALARM_STATE value: "set" or "clear".
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmState::Set => "set",
            AlarmState::Clear => "clear",
        }
    }
}

impl std::fmt::Display for AlarmState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const STATES: [AlarmState; 2] = [AlarmState::Set, AlarmState::Clear];

    #[test]
    fn message_ids_are_distinct_128_bit_lowercase_hex() {
        let mut seen = HashSet::new();
        for kind in AlarmKind::ALL {
            for state in STATES {
                let id = kind.message_id(state);
                assert_eq!(id.len(), 32, "{id}");
                assert!(
                    id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                    "{id}"
                );
                assert!(seen.insert(id), "duplicate MESSAGE_ID {id}");
            }
        }
        assert_eq!(seen.len(), 2 * AlarmKind::ALL.len());
    }

    #[test]
    fn catalog_has_one_entry_per_message_id() {
        let catalog = include_str!("../../systemd/certrenewd.catalog");
        let headers: Vec<&str> = catalog
            .lines()
            .filter_map(|l| l.strip_prefix("-- "))
            .map(str::trim)
            .collect();
        for kind in AlarmKind::ALL {
            for state in STATES {
                let id = kind.message_id(state);
                assert_eq!(
                    headers.iter().filter(|h| **h == id).count(),
                    1,
                    "catalog entry for {kind} {state} ({id})"
                );
            }
        }
        assert_eq!(
            headers.len(),
            2 * AlarmKind::ALL.len(),
            "unexpected catalog headers: {headers:?}"
        );
    }

    #[test]
    fn interface_table() {
        use AlarmKind::*;
        assert_eq!(RenewalFailed.id(), "250.003");
        assert_eq!(ServicesNotUpdated.id(), "250.003");
        assert_eq!(ExpiringSoon.id(), "500.200");
        assert_eq!(Expired.id(), "500.210");
        assert_eq!(NamesMissing.id(), "500.220");
        assert_eq!(ControllerQuiet.id(), "500.230");
        assert_eq!(ControllerFailing.id(), "500.240");
        assert_eq!(Drift.id(), "500.250");
        assert_eq!(OldCaInUse.id(), "500.260");
        assert_eq!(Expired.priority(AlarmState::Set), 2);
        assert_eq!(OldCaInUse.priority(AlarmState::Set), 2);
        assert_eq!(RenewalFailed.priority(AlarmState::Set), 3);
        assert_eq!(Expired.priority(AlarmState::Clear), 5);
        assert_eq!(Severity::Warning.priority(), 4);
        for kind in AlarmKind::ALL {
            let json = serde_json::to_string(&kind).expect("serialise");
            assert_eq!(json, format!("\"{}\"", kind.name()));
        }
    }
}
