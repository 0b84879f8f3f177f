//! One renewal pass, the same for the daemon and `certrenewd renew`:
//! lock -> recover -> scan -> plan -> renew -> restart -> alarms.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use time::OffsetDateTime;

use crate::alarms::{self, AlarmKind, AlarmSink, AlarmSpec};
use crate::config::{RestartPolicy, Settings, Watch};
use crate::inhibit;
use crate::inventory::Inventory;
use crate::lock::StateLock;
use crate::plan::{Plan, Policy, Status};
use crate::renew::{self, RenewOptions, RenewOutcome, RenewResult, txn};
use crate::restart::static_pods::{self, PodRestart};
use crate::restart::{self, RestartMode, UnitControl, UnitRestart};
use crate::verify::{self, EndpointCheck, Expectation};

/// What the caller asks of a pass.
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    /// Renew the selected certificates even if not due.
    pub force: bool,
    /// Only these certificate files.
    pub only: Option<Vec<PathBuf>>,
    /// Print the plan, touch nothing.
    pub dry_run: bool,
    /// Write certificates but restart no unit (and raise no alarm for it).
    pub no_restart: bool,
}

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
    /// One per unit restarted.
    pub restarts: Vec<UnitRestart>,
    /// One per static pod restarted.
    pub pod_restarts: Vec<PodRestart>,
    /// Units that would have been restarted but were not (`--no-restart`, dry run).
    pub not_restarted: Vec<String>,
    /// One per `verify_endpoints` entry checked after the restarts.
    pub endpoints: Vec<EndpointCheck>,
    /// What `rollback_on_failure` restored, and how the units did afterwards.
    pub rolled_back: Vec<String>,
    /// The certificates `rollback_on_failure` put back to their previous version.
    pub restored: Vec<PathBuf>,
    /// Alarm raises, clears and updates.
    pub alarm_events: Vec<alarms::AlarmEvent>,
    /// The alarms that should be active after this pass.
    pub desired_alarms: Vec<AlarmSpec>,
}

impl PassReport {
    /// Every due certificate renewed and every affected unit restarted and active.
    pub fn success(&self) -> bool {
        !self.desired_alarms.iter().any(|a| {
            matches!(
                a.kind,
                AlarmKind::RenewalFailed | AlarmKind::ServicesNotUpdated
            )
        })
    }

    /// How many certificates are due, expired or unrenewable-and-due.
    pub fn due_count(&self) -> usize {
        self.plan.due_count()
    }

    /// How many certificates were renewed.
    pub fn renewed_count(&self) -> usize {
        self.renewals.iter().filter(|r| r.renewed()).count()
    }

    /// How many due certificates are still due after the pass: not renewed, or renewed and
    /// then rolled back.
    pub fn still_due_count(&self) -> usize {
        let kept = self
            .renewals
            .iter()
            .filter(|r| {
                r.renewed()
                    && !std::fs::canonicalize(&r.path).is_ok_and(|p| self.restored.contains(&p))
            })
            .count();
        self.due_count().saturating_sub(kept)
    }
}

/// The planner's policy for a pass.
pub fn policy(settings: &Settings, opts: &PassOptions) -> Policy {
    Policy {
        renew_before_days: settings.renew_before_days,
        ca_warning_days: settings.ca_warning_days,
        force: opts.force,
        only: opts.only.clone(),
        validity_days: settings.validity_days,
    }
}

/// Scans the watches and plans (no lock; changes nothing).
pub fn scan_and_plan(settings: &Settings, policy: &Policy) -> (Inventory, Plan) {
    let inventory = Inventory::scan_watches(&settings.watches);
    let plan = crate::plan::plan(&inventory, policy, OffsetDateTime::now_utc());
    (inventory, plan)
}

/// The alarm sinks configured: journald (stderr without it) and the optional hook.
pub fn sinks(settings: &Settings) -> Arc<Vec<Box<dyn AlarmSink>>> {
    let mut out: Vec<Box<dyn AlarmSink>> = vec![Box::new(alarms::JournalSink::new(
        // Tests point this elsewhere so nothing reaches the host's journal.
        std::env::var_os("CERTRENEWD_JOURNAL_SOCKET").map_or_else(
            || alarms::DEFAULT_JOURNAL_SOCKET.into(),
            std::path::PathBuf::from,
        ),
    ))];
    if let Some(argv) = &settings.alarm_command {
        match alarms::AlarmHook::new(argv.clone(), settings.alarm_command_timeout) {
            Ok(h) => out.push(Box::new(h)),
            Err(e) => tracing::warn!("alarm_command unusable: {e:#}"),
        }
    }
    Arc::new(out)
}

/// Runs one pass. `connect` is called only when a unit has to be restarted.
pub async fn run<C, F>(
    settings: &Settings,
    opts: &PassOptions,
    connect: F,
    sinks: Arc<Vec<Box<dyn AlarmSink>>>,
) -> anyhow::Result<PassReport>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
{
    let s = settings.clone();
    let o = opts.clone();
    let (inventory, plan, renewals, units, pods, inhibited, _lock) = tokio::task::spawn_blocking(move || {
        let lock = if o.dry_run {
            None
        } else {
            Some(StateLock::acquire(&s.state_dir, s.lock_timeout)?)
        };
        let recovered = if o.dry_run {
            txn::Recovered::default()
        } else {
            txn::recover(&s.state_dir).context("finishing the pass a crash interrupted")?
        };
        for p in &recovered.rolled_back {
            tracing::warn!(path = %p.display(), "an interrupted renewal was rolled back: the previous certificate and key are in place");
        }
        for p in &recovered.rolled_forward {
            tracing::warn!(path = %p.display(), "an interrupted renewal was completed: the new certificate and key are in place");
        }
        if !o.dry_run {
            recover_static_pods(&s.state_dir)?;
        }
        let inhibited = inhibit::active(&s.state_dir, &s.inhibit_paths, OffsetDateTime::now_utc())?;
        let (inventory, plan) = scan_and_plan(&s, &policy(&s, &o));
        if let Some(i) = &inhibited {
            tracing::info!("pass deferred: {}", i.describe());
            return anyhow::Ok((inventory, plan, Vec::new(), Vec::new(), Vec::new(), inhibited, lock));
        }
        let renewals = if o.dry_run {
            Vec::new()
        } else {
            renew::renew(&inventory, &plan, &renew_options(&s))
        };
        let units = units_to_restart(&s, &renewals, &recovered.units);
        let pods = pods_to_restart(&s, &renewals, &recovered.pods);
        anyhow::Ok((inventory, plan, renewals, units, pods, inhibited, lock))
    })
    .await
    .context("the pass's worker thread failed")??;

    let mut restarts = Vec::new();
    let mut pod_restarts = Vec::new();
    let mut not_restarted = Vec::new();
    let mut endpoints = Vec::new();
    let mut rolled_back: Vec<String> = Vec::new();
    let mut restored_paths: Vec<PathBuf> = Vec::new();
    if opts.dry_run || opts.no_restart {
        not_restarted = units;
        not_restarted.extend(pods.iter().map(|(p, _)| format!("static pod {p}")));
        if opts.no_restart {
            txn::clear(&settings.state_dir)?;
        }
    } else if !units.is_empty() || !pods.is_empty() {
        let ctrl = if units.is_empty() {
            Err(anyhow::anyhow!("no unit to restart"))
        } else {
            connect().await
        };
        restarts = match &ctrl {
            _ if units.is_empty() => Vec::new(),
            Ok(ctrl) => {
                restart::restart_units(
                    ctrl,
                    &units,
                    restart_mode(settings.restart_mode),
                    settings.restart_timeout,
                )
                .await
            }
            Err(e) => units
                .iter()
                .map(|u| UnitRestart::failed(u, format!("cannot reach systemd over D-Bus: {e:#}")))
                .collect(),
        };
        // Static pods after the units: kubelet (a unit) must be running to see the manifests.
        pod_restarts =
            static_pods::restart(&settings.state_dir, &pods, settings.static_pod_wait).await;
        let restarted: Vec<String> = restarts.iter().map(|r| r.unit.clone()).collect();
        let expectations = expectations(settings, &inventory, &renewals, &restarted);
        endpoints = verify::check_all(&expectations, settings.restart_timeout).await;
        // Units that did not come back (or whose endpoint serves an old certificate) are
        // restarted again by the next pass.
        let mut failed: Vec<String> = restarts
            .iter()
            .filter(|r| !r.ok)
            .map(|r| r.unit.clone())
            .collect();
        let mut failed_pods: Vec<String> = pod_restarts
            .iter()
            .filter(|r| !r.ok)
            .map(|r| r.pod.clone())
            .collect();
        for (w, c) in expectations.iter().zip(&endpoints) {
            if !c.ok {
                for u in &settings.watches[w.watch].units {
                    if !failed.contains(u) {
                        failed.push(u.clone());
                    }
                }
                for (p, _) in
                    static_pods::of_watch(&settings.manifests_dir, &settings.watches[w.watch])
                {
                    if !failed_pods.contains(&p) {
                        failed_pods.push(p);
                    }
                }
            }
        }
        if (!failed.is_empty() || !failed_pods.is_empty()) && settings.rollback_on_failure {
            // The old certificate is still valid for days; a dead service is worse.
            let record = txn::load(&settings.state_dir)?;
            let changes: Vec<txn::Change> = record
                .map(|p| p.changes)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| {
                    settings
                        .watch_for(&c.cert)
                        .or_else(|| {
                            renewals
                                .iter()
                                .find(|r| std::fs::canonicalize(&r.path).is_ok_and(|p| p == c.cert))
                                .and_then(|r| settings.watches.get(r.watch))
                        })
                        .is_some_and(|w| {
                            w.units.iter().any(|u| failed.contains(u))
                                || w.static_pods.iter().any(|p| failed_pods.contains(p))
                        })
                })
                .collect();
            if !changes.is_empty() {
                let s2 = settings.state_dir.clone();
                let ch = changes.clone();
                let restored = tokio::task::spawn_blocking(move || txn::roll_back(&s2, &ch))
                    .await
                    .context("the rollback worker thread failed")?;
                for (path, r) in &restored {
                    match r {
                        Ok(()) => {
                            tracing::warn!(path = %path.display(), "rolled back to the previous certificate")
                        }
                        Err(e) => tracing::error!(path = %path.display(), "rollback failed: {e:#}"),
                    }
                }
                let again = match &ctrl {
                    _ if failed.is_empty() => Vec::new(),
                    Ok(ctrl) => {
                        // The unit we broke must run again: start it even though it failed.
                        restart::restart_units(
                            ctrl,
                            &failed,
                            RestartMode::Restart,
                            settings.restart_timeout,
                        )
                        .await
                    }
                    Err(_) => Vec::new(),
                };
                restored_paths = restored
                    .iter()
                    .filter(|(_, r)| r.is_ok())
                    .map(|(p, _)| p.clone())
                    .collect();
                rolled_back = restored
                    .into_iter()
                    .map(|(p, r)| match r {
                        Ok(()) => {
                            format!("{} rolled back to the previous certificate", p.display())
                        }
                        Err(e) => format!("{} could not be rolled back: {e:#}", p.display()),
                    })
                    .collect();
                for r in &again {
                    rolled_back.push(format!(
                        "{} after rollback: {}",
                        r.unit,
                        if r.ok {
                            "active again".to_string()
                        } else {
                            r.detail.clone()
                        }
                    ));
                }
                let again_pods = static_pods::restart(
                    &settings.state_dir,
                    &resolve_pods(settings, &failed_pods),
                    settings.static_pod_wait,
                )
                .await;
                for r in &again_pods {
                    rolled_back.push(format!("static pod {} after rollback: {}", r.pod, r.detail));
                }
                // What is on disk is the old pair again: nothing to carry over unless the
                // unit is still down.
                failed.retain(|u| again.iter().any(|r| r.unit == *u && !r.ok));
                failed_pods.retain(|p| again_pods.iter().any(|r| r.pod == *p && !r.ok));
            }
        }
        if failed.is_empty() && failed_pods.is_empty() {
            txn::clear(&settings.state_dir)?;
        } else if let Some(mut p) = txn::load(&settings.state_dir)? {
            p.units = failed;
            p.pods = failed_pods;
            p.phase = txn::Phase::Installed;
            txn::save(&settings.state_dir, &p)?;
        } else {
            txn::save(
                &settings.state_dir,
                &txn::Pending {
                    phase: txn::Phase::Installed,
                    changes: Vec::new(),
                    units: failed,
                    pods: failed_pods,
                },
            )?;
        }
    } else if inhibited.is_none() {
        // Renewed with nothing to restart (or nothing renewed): the record is done with.
        txn::clear(&settings.state_dir)?;
    }

    let host = alarms::hostname().unwrap_or_else(|_| "localhost".into());
    let mut desired = match &inhibited {
        // Deferred: nothing new is raised or cleared, except that an expired certificate
        // is alarmed all the same.
        Some(_) => deferred_alarms(&host, &inventory, &plan, &settings.state_dir)?,
        None => desired_alarms(
            &host,
            &inventory,
            &plan,
            opts,
            &renewals,
            &Restarted {
                units: &restarts,
                pods: &pod_restarts,
                endpoints: &endpoints,
            },
        ),
    };
    if !rolled_back.is_empty() {
        for a in desired
            .iter_mut()
            .filter(|a| a.kind == AlarmKind::ServicesNotUpdated)
        {
            a.reason = format!("{}; {}", a.reason, rolled_back.join("; "));
        }
    }
    let alarm_events = if opts.dry_run {
        Vec::new()
    } else {
        let store = alarms::AlarmStore::new(&settings.state_dir);
        let d = desired.clone();
        tokio::task::spawn_blocking(move || {
            let sink_refs: Vec<&dyn AlarmSink> = sinks.iter().map(|s| s.as_ref()).collect();
            alarms::apply(&store, &d, &sink_refs, OffsetDateTime::now_utc())
        })
        .await
        .context("the alarm worker thread failed")?
        .context("updating alarms")?
    };
    if let (Some(path), false) = (&settings.metrics_file, opts.dry_run) {
        let success = inhibited.is_some()
            || !desired.iter().any(|a| {
                matches!(
                    a.kind,
                    AlarmKind::RenewalFailed | AlarmKind::ServicesNotUpdated
                )
            });
        let active = alarms::AlarmStore::new(&settings.state_dir)
            .load()
            .unwrap_or_default();
        let snapshot = crate::metrics::Snapshot {
            inventory: &inventory,
            plan: &plan,
            finished_at: OffsetDateTime::now_utc().unix_timestamp(),
            success,
            renewals: &renewals,
            alarms: &active,
        };
        if let Err(e) = crate::metrics::write(path, &settings.state_dir, &snapshot) {
            tracing::warn!("{e:#}");
        }
    }
    Ok(PassReport {
        inhibited,
        inventory,
        plan,
        renewals,
        restarts,
        pod_restarts,
        not_restarted,
        endpoints,
        rolled_back: rolled_back.clone(),
        restored: restored_paths,
        alarm_events,
        desired_alarms: desired,
    })
}

fn restart_mode(p: RestartPolicy) -> RestartMode {
    match p {
        RestartPolicy::TryRestart => RestartMode::TryRestart,
        RestartPolicy::Restart => RestartMode::Restart,
    }
}

/// The renewer's options from settings.
pub fn renew_options(s: &Settings) -> RenewOptions {
    RenewOptions {
        rotate_keys: s.rotate_keys,
        validity_days: s.validity_days,
        renew_before_days: s.renew_before_days,
        state_dir: s.state_dir.clone(),
        backup_dir: s.backup_dir.clone(),
        roots: s.watches.iter().map(|w| w.path.clone()).collect(),
        units: s.watches.iter().map(|w| w.units.clone()).collect(),
        pods: s
            .watches
            .iter()
            .map(|w| {
                static_pods::of_watch(&s.manifests_dir, w)
                    .into_iter()
                    .map(|(p, _)| p)
                    .collect()
            })
            .collect(),
        backup_keep: s.backup_keep,
        backup_max_age_days: s.backup_max_age_days,
    }
}

/// Units of the watches with renewed certificates, in config order, then any carried over
/// from an interrupted or failed earlier pass; each once.
pub fn units_to_restart(
    s: &Settings,
    renewals: &[RenewOutcome],
    carried: &[String],
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, w) in s.watches.iter().enumerate() {
        if renewals.iter().any(|r| r.renewed() && r.watch == i) {
            for u in &w.units {
                if !out.contains(u) {
                    out.push(u.clone());
                }
            }
        }
    }
    for u in carried {
        if !out.contains(u) {
            out.push(u.clone());
        }
    }
    out
}

/// While inhibited: the active alarms stay as they are, and expired certificates are alarmed.
fn deferred_alarms(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    state_dir: &std::path::Path,
) -> anyhow::Result<Vec<AlarmSpec>> {
    let mut out: Vec<AlarmSpec> = alarms::AlarmStore::new(state_dir)
        .load()?
        .into_iter()
        .map(|a| AlarmSpec {
            kind: a.kind,
            entity: a.entity,
            reason: a.reason,
        })
        .collect();
    for item in plan.items.iter().filter(|i| i.expired) {
        let c = &inv.certs[item.cert];
        let entity = alarms::cert_entity(host, &c.path);
        if !out
            .iter()
            .any(|a| a.kind == AlarmKind::Expired && a.entity == entity)
        {
            out.push(AlarmSpec {
                kind: AlarmKind::Expired,
                entity,
                reason: format!(
                    "{} expired on {}; renewal is deferred by a maintenance inhibit",
                    c.path.display(),
                    crate::timefmt::rfc3339(c.facts.not_after)
                ),
            });
        }
    }
    Ok(out)
}

/// Static pods of the watches with renewed certificates, in config order, then any carried
/// over from an interrupted or failed earlier pass; each once, with its manifest.
pub fn pods_to_restart(
    s: &Settings,
    renewals: &[RenewOutcome],
    carried: &[String],
) -> Vec<(String, PathBuf)> {
    let mut names: Vec<String> = Vec::new();
    for (i, w) in s.watches.iter().enumerate() {
        if renewals.iter().any(|r| r.renewed() && r.watch == i) {
            for (p, _) in static_pods::of_watch(&s.manifests_dir, w) {
                if !names.contains(&p) {
                    names.push(p);
                }
            }
        }
    }
    for p in carried {
        if !names.contains(p) {
            names.push(p.clone());
        }
    }
    resolve_pods(s, &names)
}

fn resolve_pods(s: &Settings, names: &[String]) -> Vec<(String, PathBuf)> {
    names
        .iter()
        .map(|p| (p.clone(), Watch::manifest_path(&s.manifests_dir, p)))
        .collect()
}

/// At daemon start, whatever the schedule: puts back static pod manifests a crash left out
/// of the manifest directory (a control plane must not wait for the next pass).
pub fn recover_at_start(settings: &Settings) -> anyhow::Result<()> {
    if !static_pods::pending(&settings.state_dir) {
        return Ok(());
    }
    let _lock = StateLock::acquire(&settings.state_dir, settings.lock_timeout)?;
    recover_static_pods(&settings.state_dir)
}

/// Puts back static pod manifests a crashed pass left out of the manifest directory. The
/// caller holds the state lock.
pub fn recover_static_pods(state_dir: &std::path::Path) -> anyhow::Result<()> {
    for line in static_pods::recover(state_dir).context("putting static pod manifests back")? {
        tracing::warn!("{line}");
    }
    Ok(())
}

/// How the services of a pass came back: units, static pods, served certificates.
pub struct Restarted<'a> {
    /// One per unit restarted.
    pub units: &'a [UnitRestart],
    /// One per static pod restarted.
    pub pods: &'a [PodRestart],
    /// One per endpoint checked.
    pub endpoints: &'a [EndpointCheck],
}

/// The alarms that should be active after this pass. Pure.
pub fn desired_alarms(
    host: &str,
    inv: &Inventory,
    plan: &Plan,
    opts: &PassOptions,
    renewals: &[RenewOutcome],
    restarted: &Restarted<'_>,
) -> Vec<AlarmSpec> {
    let Restarted {
        units: restarts,
        pods,
        endpoints,
    } = *restarted;
    let mut out: Vec<AlarmSpec> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for item in &plan.items {
        let c = &inv.certs[item.cert];
        let outcome = renewals.iter().find(|r| r.cert == item.cert);
        let renewed = outcome.is_some_and(RenewOutcome::renewed);
        if let Some(RenewOutcome {
            result: RenewResult::Failed { reason },
            ..
        }) = outcome
        {
            failures.push(format!("{}: {reason}", c.label()));
        } else if !c.facts.is_ca && !item.renew && item.reason.is_some() {
            // Due here and unrenewable, or forced by the operator and impossible.
            failures.push(format!(
                "{}: {}",
                c.label(),
                item.reason.as_deref().unwrap_or("cannot be renewed here")
            ));
        }
        // Per-certificate warnings for what this pass left as it was; a due certificate
        // that a limited pass did not select is left to the next full pass.
        let selected = opts.only.as_ref().is_none_or(|o| o.contains(&c.path));
        let left_alone = item.status == Status::Unrenewable || (selected && !renewed);
        if !item.in_warning || renewed || !left_alone {
            continue;
        }
        let reason = item
            .reason
            .clone()
            .or_else(|| {
                outcome.and_then(|o| match &o.result {
                    RenewResult::Failed { reason } => Some(reason.clone()),
                    RenewResult::Renewed { .. } => None,
                })
            })
            .unwrap_or_else(|| "not renewed".into());
        let (kind, when) = if item.expired {
            (AlarmKind::Expired, "expired on")
        } else {
            (AlarmKind::ExpiringSoon, "expires on")
        };
        let entity = alarms::cert_entity(host, &c.path);
        let reason = format!(
            "{} {when} {}: {reason}",
            c.label(),
            crate::timefmt::rfc3339(c.facts.not_after)
        );
        // Several users of one kubeconfig share its entity: one alarm naming each.
        match out
            .iter_mut()
            .find(|a| a.kind == kind && a.entity == entity)
        {
            Some(a) => a.reason = format!("{}; {reason}", a.reason),
            None => out.push(AlarmSpec {
                kind,
                entity,
                reason,
            }),
        }
    }
    if !failures.is_empty() {
        out.insert(
            0,
            AlarmSpec {
                kind: AlarmKind::RenewalFailed,
                entity: alarms::host_entity(host),
                reason: failures.join("; "),
            },
        );
    }
    let bad_units: Vec<String> = restarts
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("{}: {}", r.unit, r.detail))
        .chain(
            pods.iter()
                .filter(|p| !p.ok)
                .map(|p| format!("static pod {}: {}", p.pod, p.detail)),
        )
        .chain(endpoints.iter().filter(|e| !e.ok).map(|e| e.detail.clone()))
        .collect();
    if !bad_units.is_empty() {
        let renewed: Vec<String> = renewals
            .iter()
            .filter(|r| r.renewed())
            .map(|r| r.path.display().to_string())
            .collect();
        let what = if renewed.is_empty() {
            String::new()
        } else {
            format!(" (renewed: {})", renewed.join(", "))
        };
        out.push(AlarmSpec {
            kind: AlarmKind::ServicesNotUpdated,
            entity: alarms::host_entity(host),
            reason: format!("{}{what}", bad_units.join("; ")),
        });
    }
    out
}

/// An endpoint to check, with the watch it belongs to.
pub struct WatchExpectation {
    /// Index of the watch.
    pub watch: usize,
    /// What it should serve.
    pub expectation: Expectation,
}

impl std::ops::Deref for WatchExpectation {
    type Target = Expectation;
    fn deref(&self) -> &Expectation {
        &self.expectation
    }
}

/// What each `verify_endpoints` entry should serve: for every watch with endpoints whose
/// certificates were renewed, or whose units were restarted, in this pass.
pub fn expectations(
    s: &Settings,
    inv: &Inventory,
    renewals: &[RenewOutcome],
    restarted: &[String],
) -> Vec<WatchExpectation> {
    let mut out = Vec::new();
    for (w, watch) in s.watches.iter().enumerate() {
        let renewed_here = renewals.iter().any(|r| r.renewed() && r.watch == w);
        let restarted_here = watch.units.iter().any(|u| restarted.contains(u));
        if watch.verify_endpoints.is_empty() || !(renewed_here || restarted_here) {
            continue;
        }
        let mut current = Vec::new();
        let mut replaced = Vec::new();
        for (i, c) in inv.certs.iter().enumerate().filter(|(_, c)| c.watch == w) {
            match renewals.iter().find(|r| r.cert == i).map(|r| &r.result) {
                Some(RenewResult::Renewed { serial, .. }) => {
                    current.push(serial.clone());
                    replaced.push((c.facts.serial.clone(), c.path.clone()));
                }
                _ => current.push(c.facts.serial.clone()),
            }
        }
        let client = inv
            .certs
            .iter()
            .filter(|c| {
                c.watch == w && !c.facts.is_ca && c.facts.client_auth && c.kubeconfig.is_none()
            })
            .filter_map(|c| inv.matched_key(c).map(|k| (c, k)))
            .max_by_key(|(c, _)| c.path.to_string_lossy().contains("client"))
            .map(|(c, k)| (c.path.clone(), k.path.clone()));
        for endpoint in &watch.verify_endpoints {
            out.push(WatchExpectation {
                watch: w,
                expectation: Expectation {
                    endpoint: endpoint.clone(),
                    current: current.clone(),
                    replaced: replaced.clone(),
                    client: client.clone(),
                },
            });
        }
    }
    out
}

/// A short summary of a pass for logs and STATUS=.
pub fn summary(r: &PassReport) -> String {
    let failed = r.renewals.iter().filter(|o| !o.renewed()).count();
    let bad_units = r.restarts.iter().filter(|u| !u.ok).count()
        + r.pod_restarts.iter().filter(|p| !p.ok).count();
    format!(
        "{} certificates, {} due, {} renewed, {} failed, {} units restarted, {} not active",
        r.plan.items.len(),
        r.due_count(),
        r.renewed_count(),
        failed,
        r.restarts.len() + r.pod_restarts.len() - bad_units,
        bad_units
    )
}
