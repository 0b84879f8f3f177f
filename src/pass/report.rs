//! What a pass did, for the CLI's output, the daemon's STATUS= and the logs.

use super::inhibit;
use crate::alarms::{AlarmEvent, AlarmKind, AlarmSpec};
use crate::inventory::Inventory;
use crate::plan::Plan;
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::RestartOutcomes;

/// What a pass did.
#[derive(Debug)]
pub struct PassReport {
    /// Set when the pass was deferred by a maintenance inhibit.
    pub inhibited: Option<inhibit::Active>,
    /// The scan.
    pub inventory: Inventory,
    /// The plan.
    pub plan: Plan,
    /// One per renewal attempted.
    pub renewals: Vec<RenewOutcome>,
    /// The copies of renewed CAs on the node replaced (a dry run: that it would replace),
    /// and those that could not be.
    pub copies: crate::renew::copies::Copies,
    /// Units and static pods restarted, endpoints checked, what was rolled back.
    pub restarts: RestartOutcomes,
    /// Alarm raises, clears and updates.
    pub alarm_events: Vec<AlarmEvent>,
    /// The alarms that should be active after this pass.
    pub desired_alarms: Vec<AlarmSpec>,
    /// The certificate files `renew PATH...` limited the pass to; `None` for a whole pass.
    pub named: Option<Vec<std::path::PathBuf>>,
    /// The node's reading the restarts were chosen from.
    pub node: crate::components::NodeReading,
}

impl PassReport {
    /// Every due certificate renewed and every affected unit restarted and active.
    pub fn success(&self) -> bool {
        !failed(&self.desired_alarms)
    }

    /// What `renew` exits with: [`PassReport::success`]; for a deferred pass, whether
    /// nothing was due; a pass the clock check refused, never.
    pub fn exit_ok(&self) -> bool {
        match &self.inhibited {
            Some(i) => !i.clock && self.due_count() == 0,
            None => self.success(),
        }
    }

    /// Whether certificate `cert` is one this pass speaks of: any, or one of those named.
    pub fn speaks_of(&self, cert: usize) -> bool {
        let c = &self.inventory.certs[cert];
        self.named.as_ref().is_none_or(|n| n.contains(&c.path))
    }

    /// How many certificates are due, expired or unrenewable-and-due.
    pub fn due_count(&self) -> usize {
        self.plan.due_count()
    }

    /// How many certificates were renewed and stayed in service (not rolled back).
    pub fn renewed_count(&self) -> usize {
        let restored = &self.restarts.restored;
        self.renewals.iter().filter(|r| r.stayed(restored)).count()
    }

    /// How many due copies of a CA (a bundle's, a kubeconfig's) followed their CA: it was
    /// renewed and stayed, and their file did not fail to be replaced.
    pub fn copies_followed(&self) -> usize {
        let restored = &self.restarts.restored;
        let stayed = |ca: usize| (self.renewals.iter()).any(|r| r.cert == ca && r.stayed(restored));
        let failed = |i: usize| {
            let path = &self.inventory.certs[i].path;
            self.copies.failed.iter().any(|(p, _)| p == path)
        };
        (self.plan.items.iter().enumerate())
            .filter(|(i, item)| {
                item.status != crate::plan::Status::Ok
                    && item.copy_of.is_some_and(stayed)
                    && !failed(*i)
            })
            .count()
    }

    /// How many due certificates are still due after the pass: not renewed, or renewed and
    /// then rolled back; a copy of a CA that was renewed is not.
    pub fn still_due_count(&self) -> usize {
        (self.due_count()).saturating_sub(self.renewed_count() + self.copies_followed())
    }

    /// A short summary for logs and STATUS=, in final states: `renewed` counts the
    /// certificates in service at the end; those a roll-back put back and those the back-off
    /// held are counted apart.
    pub fn summary(&self) -> String {
        let count =
            |f: fn(&RenewResult) -> bool| self.renewals.iter().filter(|o| f(&o.result)).count();
        let failed = count(|r| matches!(r, RenewResult::Failed { .. }));
        let held_certs = count(|r| matches!(r, RenewResult::HeldBack { .. }));
        let rolled_back =
            count(|r| matches!(r, RenewResult::Renewed { .. })) - self.renewed_count();
        let r = &self.restarts;
        let bad =
            r.units.iter().filter(|u| !u.ok).count() + r.pods.iter().filter(|p| !p.ok).count();
        // A try-restart leaves a unit that is not running (or not on this node) as it was:
        // fine, but not a restart.
        let passed_over = r
            .units
            .iter()
            .filter(|u| u.ok && u.active_state != "active")
            .count();
        let certs = self.plan.items.len();
        let units = (r.units.iter())
            .filter(|u| u.ok && u.active_state == "active")
            .count();
        let pods = r.pods.iter().filter(|p| p.ok).count();
        // Static pods are not units: named apart when some were restarted.
        let restarted = match (units, pods) {
            (u, 0) => format!("{u} unit{}", plural(u)),
            (0, p) => format!("{p} static pod{}", plural(p)),
            (u, p) => format!("{u} unit{} and {p} static pod{}", plural(u), plural(p)),
        };
        let mut out = format!(
            "{certs} certificate{}, {} due, {} renewed, {} failed, {restarted} restarted, {} not active",
            plural(certs),
            self.due_count(),
            self.renewed_count(),
            failed,
            bad
        );
        if passed_over > 0 {
            out.push_str(&format!(
                ", {passed_over} passed over (not running, or not on this node)"
            ));
        }
        // Shown serving their renewed files without a restart: counted apart from the
        // restarts, so that "0 units restarted" after a renewal is not read as nothing done.
        if !r.reloaded.is_empty() {
            out.push_str(&format!(", {} reloaded (not restarted)", r.reloaded.len()));
        }
        match self.copies_followed() {
            0 => {}
            1 => out.push_str(", 1 copy of a renewed CA replaced with it"),
            n => out.push_str(&format!(", {n} copies of renewed CAs replaced with them")),
        }
        if rolled_back > 0 {
            out.push_str(&format!(", {rolled_back} rolled back"));
        }
        if held_certs > 0 {
            out.push_str(&format!(", {held_certs} held back by the back-off"));
        }
        if !r.held.is_empty() {
            out.push_str(&format!(", {} held back", r.held.len()));
        }
        let unrenewable = self.plan.unrenewable_leaves();
        if unrenewable > 0 {
            out.push_str(&format!(", {unrenewable} cannot be renewed here"));
        }
        let unreadable = self.inventory.errors.len();
        if unreadable > 0 {
            out.push_str(&format!(", {unreadable} cannot be read"));
        }
        out
    }
}

/// Whether these alarms say the pass failed (a renewal, or a service on the new certificate).
pub(super) fn failed(alarms: &[AlarmSpec]) -> bool {
    alarms.iter().any(|a| {
        matches!(
            a.kind,
            AlarmKind::RenewalFailed | AlarmKind::ServicesNotUpdated
        )
    })
}

/// The plural ending of a count of `n`: "1 unit", "2 units".
pub fn plural(n: usize) -> &'static str {
    match n {
        1 => "",
        _ => "s",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restart::UnitRestart;

    fn unit(name: &str, ok: bool, active: &str) -> UnitRestart {
        UnitRestart {
            unit: name.into(),
            ok,
            job_result: None,
            active_state: active.into(),
            sub_state: String::new(),
            main_pid_before: 0,
            main_pid_after: 0,
            detail: String::new(),
            not_restarted: false,
        }
    }

    #[test]
    fn a_unit_passed_over_by_try_restart_is_not_counted_restarted() {
        let inventory = Inventory::default();
        let plan = crate::plan::plan(
            &inventory,
            Default::default(),
            &crate::plan::Policy::default(),
            time::OffsetDateTime::now_utc(),
        );
        let report = PassReport {
            inhibited: None,
            inventory,
            plan,
            renewals: Vec::new(),
            copies: Default::default(),
            restarts: RestartOutcomes {
                units: vec![
                    unit("etcd.service", true, "active"),
                    unit("kubelet.service", true, ""),
                    unit("kube-proxy.service", false, "failed"),
                ],
                ..Default::default()
            },
            alarm_events: Vec::new(),
            desired_alarms: Vec::new(),
            named: None,
            node: Default::default(),
        };
        assert_eq!(
            report.summary(),
            "0 certificates, 0 due, 0 renewed, 0 failed, 1 unit restarted, 1 not active, 1 passed over (not running, or not on this node)"
        );
        // Static pods are named as such, not counted as units.
        let pod = |name: &str| crate::restart::static_pods::PodRestart {
            pod: name.into(),
            manifest: format!("/m/{name}.yaml").into(),
            ok: true,
            detail: String::new(),
            not_restarted: false,
        };
        let mut report = report;
        report.restarts.pods = vec![pod("etcd"), pod("kube-apiserver")];
        assert!(
            (report.summary()).contains(", 1 unit and 2 static pods restarted, 1 not active"),
            "{}",
            report.summary()
        );
        report.restarts.units.clear();
        assert!(
            (report.summary()).contains(", 0 failed, 2 static pods restarted, 0 not active"),
            "{}",
            report.summary()
        );
        // A member shown serving its renewed files is not a restart, and is said.
        report.restarts.pods.clear();
        let member = crate::restart::step::Target::Unit("etcd.service".into());
        report.restarts.reloaded = vec![(member, "read again".into())];
        assert!(
            (report.summary())
                .contains(", 0 units restarted, 0 not active, 1 reloaded (not restarted)"),
            "{}",
            report.summary()
        );
    }
}
