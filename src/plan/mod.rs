//! The plan: for every certificate, whether it is ok, due, expired or unrenewable here, why,
//! and whether this pass renews it. Pure: `(Inventory, Policy, now) -> Plan`.

use std::path::PathBuf;

use serde::Serialize;
use time::{Duration, OffsetDateTime};

use crate::inventory::{Cert, Inventory, IssuerLink};
use crate::served::Served;

pub mod backoff;
mod blockers;
mod ca;
mod lifetime;

pub use blockers::why_unrenewable;
use ca::plan_ca;
pub use ca::why_ca_unrenewable;
pub use lifetime::{DEFAULT_LIFETIME_DAYS, KubeadmSign, Lifetime, LifetimeSource, lifetime};

/// What the planner is told besides the inventory.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Leaves expiring within this many days are due.
    pub renew_before_days: u32,
    /// CAs expiring within this many days are reported.
    pub ca_warning_days: u32,
    /// Renew the selected certificates even if they are not due.
    pub force: bool,
    /// When set, only these certificate files are renewed.
    pub only: Option<Vec<PathBuf>>,
    /// Lifetime of renewed certificates; `None` keeps each certificate's own.
    pub validity_days: Option<u32>,
    /// Per watch (by index): its own `validity_days`, before the global one.
    pub watch_validity_days: Vec<Option<u32>>,
    /// CAs whose signing key is on the node are renewed (same key, subject and key
    /// identifier) this many days before they end; `None`: CAs are only reported.
    pub ca_renew_before_days: Option<u32>,
    /// Per watch (by index): its own `ca_renew_before_days`, before the global one.
    pub watch_ca_renew_before_days: Vec<Option<u32>>,
    /// A renewal adds the names a serving certificate misses ([`crate::served`]).
    pub add_missing_names: bool,
    /// Per watch (by index): its own `add_missing_names`, before the global one.
    pub watch_add_missing_names: Vec<Option<bool>>,
    /// The back-off: a renewal it holds at the plan's time is put off
    /// ([`PutOff::BackOff`]), unless forced or named in `only`.
    pub back_off: backoff::Ledger,
}

impl Policy {
    /// The `validity_days` that applies to certificates of watch `watch`, and whose it is.
    fn validity_days_for(&self, watch: usize) -> Option<(u32, LifetimeSource)> {
        let own = self.watch_validity_days.get(watch).copied().flatten();
        own.map(|d| (d, LifetimeSource::WatchSetting))
            .or(self.validity_days.map(|d| (d, LifetimeSource::Setting)))
    }

    /// Whether renewals of watch `watch` add the names its certificates miss.
    fn adds_names(&self, watch: usize) -> bool {
        let own = self.watch_add_missing_names.get(watch).copied().flatten();
        own.unwrap_or(self.add_missing_names)
    }

    /// The CA renewal window of watch `watch`; `None` when CAs are not renewed.
    pub fn ca_window_for(&self, watch: usize) -> Option<Duration> {
        let global = self.ca_renew_before_days?;
        let own = self
            .watch_ca_renew_before_days
            .get(watch)
            .copied()
            .flatten();
        Some(Duration::days(own.unwrap_or(global).into()))
    }
}

/// A certificate's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Outside the renewal window (a CA: outside its own window and warning period).
    Ok,
    /// Inside the renewal window, renewable here.
    Due,
    /// Past notAfter, renewable here.
    Expired,
    /// A leaf this host cannot renew (decided at every scan, due or not), or a CA near
    /// its end that this host cannot renew.
    Unrenewable,
}

impl Status {
    /// The word used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Due => "due",
            Status::Expired => "expired",
            Status::Unrenewable => "unrenewable",
        }
    }
}

/// What this pass does with a certificate: one state, where flags could say two at once
/// (renewed and not wanted, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Left as it is: not due (nor forced), or not among those the pass was asked about.
    Left,
    /// Wanted (due or forced, and selected), and this host cannot renew it: the item's
    /// `reason` says why.
    Blocked,
    /// Renewed in this stage.
    Renews,
    /// Wanted and renewable, and not renewed in this stage, for the reason it carries.
    PutOff(PutOff),
}

/// Why a certificate this pass wants, and could renew, is not renewed in a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOff {
    /// The back-off holds it: its last renewal was rolled back.
    BackOff,
    /// Installed at its restart step, under the restart gate (its watch reloads).
    AtStep,
    /// Renewed in the pass's renew stage, not at this step.
    RenewStage,
}

impl Verdict {
    /// The verdict of a certificate the pass wants or not, that this host can renew or not.
    pub fn of(wanted: bool, renewable: bool) -> Verdict {
        match (wanted, renewable) {
            (false, _) => Verdict::Left,
            (true, false) => Verdict::Blocked,
            (true, true) => Verdict::Renews,
        }
    }
}

/// The verdict for one certificate.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanItem {
    /// Index into `Inventory::certs`.
    pub cert: usize,
    /// Its state.
    pub status: Status,
    /// Why it is unrenewable.
    pub reason: Option<String>,
    /// Days until notAfter (negative once expired).
    pub days_left: f64,
    /// What this pass does with it.
    pub verdict: Verdict,
    /// Whether this host can renew it when it is due (a CA: with CA renewal on): what
    /// `check` and the metrics say of it ahead of its window. What the pass does with it
    /// now is its `verdict` alone (a wanted one this host cannot renew is `Blocked`).
    pub renewable: bool,
    /// A CA this host renews, not due yet: when its window opens.
    pub renews_on: Option<OffsetDateTime>,
    /// Whether it was inside its warning period (leaf window, CA warning days) or expired.
    pub in_warning: bool,
    /// Whether it has expired.
    pub expired: bool,
    /// Whether it is not valid yet (notBefore ahead of now: issued by a clock that ran
    /// ahead): every verifier refuses it, so it is due whatever its notAfter.
    pub not_yet_valid: bool,
    /// Whether it is a CA.
    pub is_ca: bool,
    /// The lifetime a renewal gives it ([`lifetime`]): a leaf whose CA is known.
    pub lifetime: Option<Lifetime>,
    /// A copy of a CA (in a bundle, or the same CA under another name): the certificate it
    /// is replaced with when that one is renewed ([`Inventory::ca_primary`]); not renewed
    /// on its own.
    pub copy_of: Option<usize>,
    /// Names it is served on that its subjectAltName does not cover ([`crate::served`]).
    pub names_missing: Vec<crate::served::Use>,
    /// Names this renewal adds to its subjectAltName: the missing ones, when its watch has
    /// `add_missing_names` (the one case where a renewal changes a certificate's names).
    pub add_names: Vec<crate::served::Name>,
}

impl PlanItem {
    /// Whether this pass wants it renewed: due (or forced) and selected.
    pub fn wanted(&self) -> bool {
        self.verdict != Verdict::Left
    }

    /// Whether it is renewed in this stage.
    pub fn renews(&self) -> bool {
        self.verdict == Verdict::Renews
    }

    /// Not renewed in this stage, for `why`, if it was to be.
    pub fn put_off(&mut self, why: PutOff) {
        if self.renews() {
            self.verdict = Verdict::PutOff(why);
        }
    }
}

/// The verdicts for all certificates, in inventory order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// One item per certificate.
    pub items: Vec<PlanItem>,
    /// The time the plan was made for.
    pub now: OffsetDateTime,
    /// The names each serving certificate is used on ([`crate::served::read`]).
    pub served: Served,
}

impl Plan {
    /// How many certificates are due, expired or unrenewable (not `ok`).
    pub fn due_count(&self) -> usize {
        self.items.iter().filter(|i| i.status != Status::Ok).count()
    }

    /// How many leaves this host cannot renew (due or not).
    pub fn unrenewable_leaves(&self) -> usize {
        self.items
            .iter()
            .filter(|i| i.status == Status::Unrenewable && !i.is_ca)
            .count()
    }

    /// Items this pass renews.
    pub fn renewals(&self) -> impl Iterator<Item = &PlanItem> {
        self.items.iter().filter(|i| i.renews())
    }

    /// Puts off the renewals the back-off holds now; once every verdict is made, so that it
    /// holds the renewals rolled back and changes the verdict of nothing else.
    fn hold_back(&mut self, inv: &Inventory, policy: &Policy) {
        if policy.force {
            return;
        }
        for item in self.items.iter_mut().filter(|i| i.renews()) {
            let path = &inv.certs[item.cert].path;
            let named = policy.only.as_ref().is_some_and(|o| o.contains(path));
            if !named && policy.back_off.holds(path, self.now).is_some() {
                item.put_off(PutOff::BackOff);
            }
        }
    }

    /// The plan of the renewals made at one restart step: those of `certs`, put off until
    /// then; every other is not renewed there (it was, or is not, in the renew stage).
    pub fn at_step(&self, certs: &[usize]) -> Plan {
        let mut only = self.clone();
        for item in &mut only.items {
            match certs.contains(&item.cert) {
                // Wanted, and not blocked: its verdict alone says so.
                true if matches!(item.verdict, Verdict::PutOff(_) | Verdict::Renews) => {
                    item.verdict = Verdict::Renews
                }
                true => {}
                false => item.put_off(PutOff::RenewStage),
            }
        }
        only
    }
}

/// The item of CA `i`, a copy of `p` (whose item is `of`): its status and renewal date are
/// `p`'s, since it is replaced with it; it raises no alarm of its own and is not renewed
/// on its own.
fn copy_item(of: &PlanItem, inv: &Inventory, i: usize, p: usize, now: OffsetDateTime) -> PlanItem {
    let c = &inv.certs[i];
    PlanItem {
        cert: i,
        verdict: Verdict::Left,
        in_warning: false,
        reason: of.reason.as_ref().map(|why| {
            format!(
                "a copy of {}, replaced with it: {why}",
                inv.certs[p].path.display()
            )
        }),
        days_left: days_until(c.facts.not_after, now),
        expired: now > c.facts.not_after,
        copy_of: Some(p),
        ..of.clone()
    }
}

/// Days between `now` and `t`, fractional.
pub fn days_until(t: OffsetDateTime, now: OffsetDateTime) -> f64 {
    (t - now).as_seconds_f64() / 86_400.0
}

/// How deep a chain of CAs under a root the plan orders (issuers before what they sign).
const MAX_CA_DEPTH: usize = 4;

/// Makes the plan; `served` says which names each serving certificate must have.
pub fn plan(inv: &Inventory, served: Served, policy: &Policy, now: OffsetDateTime) -> Plan {
    let window = Duration::days(policy.renew_before_days.into());
    // CAs first, each after its issuer: what a pass renews of a CA, what it signs in the
    // same pass may count on (the re-issue has the same key).
    let mut cas: Vec<Option<PlanItem>> = vec![None; inv.certs.len()];
    let renewed_now = |cas: &[Option<PlanItem>], c: &Cert| match c.issuer {
        IssuerLink::Found(s) => cas[s].as_ref().is_some_and(|it| {
            it.renews()
                || it
                    .copy_of
                    .is_some_and(|p| cas[p].as_ref().is_some_and(|p| p.renews()))
        }),
        _ => false,
    };
    let primary: Vec<Option<usize>> = (0..inv.certs.len())
        .map(|i| inv.ca_primary(i).filter(|&p| p != i))
        .collect();
    for round in 0..=MAX_CA_DEPTH {
        for (i, c) in inv.certs.iter().enumerate() {
            let issuer_planned = match c.issuer {
                IssuerLink::Found(s) => cas[s].is_some() || !inv.certs[s].facts.is_ca,
                _ => true,
            };
            if !c.facts.is_ca || cas[i].is_some() {
                continue;
            }
            if let Some(p) = primary[i] {
                // A copy follows the file it is replaced with.
                cas[i] = cas[p].as_ref().map(|it| copy_item(it, inv, i, p, now));
            } else if issuer_planned || round == MAX_CA_DEPTH {
                cas[i] = Some(plan_ca(inv, policy, i, c, now, renewed_now(&cas, c)));
            }
        }
    }
    // Copies of a CA planned in the last round, after them.
    for (i, p) in primary.iter().enumerate() {
        if let (None, Some(p)) = (&cas[i], p) {
            cas[i] = cas[*p].as_ref().map(|it| copy_item(it, inv, i, *p, now));
        }
    }
    let items = inv
        .certs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let days_left = days_until(c.facts.not_after, now);
            let expired = now > c.facts.not_after;
            if let Some(ca) = &cas[i] {
                return ca.clone();
            }
            let issuer_renewed = renewed_now(&cas, c);
            let not_yet_valid = now < c.facts.not_before;
            let due = c.facts.not_after - now <= window || not_yet_valid;
            let selected = policy
                .only
                .as_ref()
                .is_none_or(|paths| paths.contains(&c.path));
            // Decided for every leaf, due or not: an operator learns a year ahead, not in
            // the window, that this host cannot renew it. Not a certificate a kubeconfig
            // names by path: its owner renews it (kubelet rotates its own), so it is only
            // reported once it is due and still not renewed, and `renew --force --all`
            // leaves it to its owner (named by PATH, it is tried and refused with why).
            // kubelet's own pairs, read where kubelet keeps them, are its too.
            // Another manager's (kops' etcd-manager, k3s, OpenShift's operators): said
            // always, as whose it is; due, as one this node cannot renew.
            let managed = crate::inventory::managed::manager(&c.path).is_some();
            let delegated = c.kubeconfig.as_ref().is_some_and(|k| k.external.is_some())
                || crate::inventory::kubelet::rotates(c)
                || managed;
            let forced = policy.force && (policy.only.is_some() || !delegated);
            // Another manager's is never wanted by a pass: due, it is said, not failed on.
            let wanted = selected && ((due && !managed) || forced);
            let blocker = match due || wanted || !delegated || managed {
                true => why_unrenewable(
                    inv,
                    c,
                    now,
                    window,
                    policy.validity_days_for(c.watch),
                    issuer_renewed,
                ),
                false => None,
            };
            let status = match (&blocker, due, expired) {
                (Some(_), false, _) if managed && !wanted => Status::Ok,
                (Some(_), _, _) => Status::Unrenewable,
                (None, false, _) => Status::Ok,
                (None, true, true) => Status::Expired,
                (None, true, false) => Status::Due,
            };
            let verdict = Verdict::of(wanted, blocker.is_none());
            let names_missing = (served.get(&i))
                .map(|uses| crate::served::missing(&c.facts.der, uses))
                .unwrap_or_default();
            let mut add_names: Vec<crate::served::Name> = match verdict == Verdict::Renews && policy.adds_names(c.watch)
            {
                true => names_missing.iter().map(|u| u.name.clone()).collect(),
                false => Vec::new(),
            };
            add_names.dedup();
            PlanItem {
                cert: i,
                status,
                verdict,
                renewable: blocker.is_none(),
                renews_on: None,
                reason: match (blocker, not_yet_valid) {
                    (None, true) => Some(format!(
                        "not valid until {}: dated ahead by a clock that ran fast, so every client refuses it until then; due now",
                        crate::timefmt::utc_minute(c.facts.not_before)
                    )),
                    (blocker, _) => blocker,
                },
                days_left,
                in_warning: due,
                expired,
                not_yet_valid,
                is_ca: false,
                lifetime: match &c.issuer {
                    _ if crate::inventory::kubelet::is_self_signed_serving(c) => Some(Lifetime {
                        span: Duration::days(crate::inventory::kubelet::SELF_SIGNED_DAYS),
                        source: LifetimeSource::Kubelet,
                    }),
                    IssuerLink::Found(ca) => Some(lifetime(
                        &c.facts,
                        &c.path,
                        &inv.certs[*ca].facts,
                        policy.validity_days_for(c.watch),
                    )),
                    _ => None,
                },
                copy_of: None,
                names_missing,
                add_names,
            }
        })
        .collect();
    let mut plan = Plan { items, now, served };
    plan.hold_back(inv, policy);
    plan
}

#[cfg(test)]
mod tests;
