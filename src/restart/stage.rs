//! The restart stage of a pass: every unit and static pod owed a restart, one after the
//! other; the served certificates checked; a roll-back where a service did not come back;
//! what is still owed recorded for the next pass.

use std::path::PathBuf;

use super::commands::{self, CommandRun};
use super::endpoints::{self, EndpointCheck};
use super::owed::{self, Owed, targets};
use super::sequence::at_step::AtStep;
use super::sequence::{self, Gate, Hold, NoSystemd, Restarter};
use super::serving::Serving;
use super::static_pods::{self, PodRestart};
use super::step::{Step, Target};
use super::{RestartMode, UnitControl, UnitRestart, expect, pairs, rollback};
use crate::causes::Causes;
use crate::components::NodeReading;
use crate::config::{RestartPolicy, Settings};
use crate::inventory::Inventory;
use crate::renew::RenewOutcome;

/// What the restart stage did.
#[derive(Debug, Default)]
pub struct RestartOutcomes {
    /// One per unit restarted.
    pub units: Vec<UnitRestart>,
    /// One per static pod restarted.
    pub pods: Vec<PodRestart>,
    /// One per `verify_endpoints` entry checked after the restarts.
    pub endpoints: Vec<EndpointCheck>,
    /// Units and static pods owed a restart that this pass did not restart (`--no-restart`,
    /// dry run).
    pub not_restarted: Vec<Target>,
    /// What `rollback_on_failure` restored, and how the services did afterwards.
    pub rolled_back: Vec<sequence::Undone>,
    /// The certificates `rollback_on_failure` put back to their previous version.
    pub restored: Vec<PathBuf>,
    /// Per certificate put back, the components it was put back for: those that read it
    /// and did not come back.
    pub restored_for: Vec<(PathBuf, Vec<Target>)>,
    /// Units and static pods the restart gate held back (target, reason): not restarted,
    /// owed to the next pass.
    pub held: Vec<(Target, Hold)>,
    /// Steps restarted and back, after which the gate's check failed (this node's etcd
    /// member not healthy in time, the lock lost): not owed again, but not done either.
    pub unmet: Vec<(Target, Hold)>,
    /// The certificates the roll-back could not put back, and why (the new pair stays).
    pub not_restored: Vec<(PathBuf, String)>,
    /// The units that did not come back, started again after the roll-back.
    pub units_again: Vec<UnitRestart>,
    /// The static pods that did not come back, restarted again after the roll-back.
    pub pods_again: Vec<PodRestart>,
    /// Per certificate rolled back: the back-off's attempts and next attempt.
    pub backoff: Vec<crate::plan::backoff::RolledBack>,
    /// The watches' `post_renew_command`s run, after the restarts.
    pub commands: Vec<CommandRun>,
    /// The watches whose `post_renew_command` was owed and not run (`--no-restart`, dry run).
    pub commands_not_run: Vec<PathBuf>,
    /// A dry run's restarts that the cluster could not be asked about now, and why: the
    /// pass decides whether they go ahead or are held.
    pub undecided: Option<String>,
    /// The renewals made at their steps, under the restart gate (their files are read
    /// again by their components): each outcome, for the pass's report.
    pub renewed: Vec<RenewOutcome>,
    /// The steps whose renewed files were shown in use, nothing restarted, with how.
    pub reloaded: Vec<(Target, String)>,
    /// The steps whose renewed files were shown and refused as their clients would refuse
    /// them: put back, nothing restarted (target, why).
    pub refused: Vec<(Target, String)>,
    /// Each certificate so put back, and why it was refused.
    pub refused_certs: Vec<(PathBuf, String)>,
    /// The steps whose renewed files were installed at their turn and not shown in use,
    /// restarted instead (target, why).
    pub fell_back: Vec<(Target, String)>,
    /// The renewed client pairs a server on this node checks, shown accepted by it (cert,
    /// how).
    pub pairs_accepted: Vec<(PathBuf, String)>,
    /// The renewed client pairs the server that checks them refused: put back, unless
    /// `not_restored` names them (cert, why).
    pub pairs_refused: Vec<(PathBuf, String)>,
    /// The renewed client pairs the server that checks them could not be asked about:
    /// installed, their proof owed to the next pass (cert, why).
    pub pairs_unproven: Vec<(PathBuf, String)>,
    /// The client pairs not presented, and not owed: their server is not running here, or
    /// (owed by an earlier pass) nothing here checks them any more (cert, why).
    pub pairs_not_presented: Vec<(PathBuf, String)>,
}

impl RestartOutcomes {
    /// Outcomes of a pass that restarts nothing: the owed services are listed as not
    /// restarted. Those in `earlier` were owed by an earlier pass (not by what this one
    /// renewed): still owed, they stay held back, and their alarm stays raised.
    pub fn skipped(owed: &Owed, earlier: &Owed) -> RestartOutcomes {
        let earlier = targets(earlier);
        RestartOutcomes {
            not_restarted: targets(owed)
                .into_iter()
                .filter(|t| !earlier.contains(t))
                .collect(),
            held: earlier.into_iter().map(|t| (t, Hold::NoRestart)).collect(),
            commands_not_run: owed.commands.iter().map(|c| c.watch.clone()).collect(),
            ..RestartOutcomes::default()
        }
    }

    /// Outcomes of a pass that may restart nothing it owes, for one cause `why`: every
    /// restart owed is held for it, and every command is left unrun.
    pub fn held_all(owed: &Owed, why: &Hold) -> RestartOutcomes {
        RestartOutcomes {
            held: (targets(owed).into_iter())
                .map(|t| (t, why.clone()))
                .collect(),
            commands_not_run: owed.commands.iter().map(|c| c.watch.clone()).collect(),
            ..RestartOutcomes::default()
        }
    }

    /// Every unit, static pod and endpoint that did not come back, in a sentence each.
    pub fn failures(&self) -> Vec<String> {
        let units = self.units.iter().filter(|r| !r.ok);
        let pods = self.pods.iter().filter(|p| !p.ok);
        let endpoints = self.endpoints.iter().filter(|e| !e.ok);
        units
            .map(|r| format!("{}: {}", r.unit, r.detail))
            .chain(pods.map(|p| format!("static pod {}: {}", p.pod, p.detail)))
            .chain(endpoints.map(|e| e.detail.clone()))
            .chain(held_by_cause(&self.held))
            .chain(
                self.unmet
                    .iter()
                    .map(|(t, r)| format!("{t}: restarted, but {r}")),
            )
            .chain(self.refused.iter().map(|(t, r)| {
                format!("{t}: not reloaded: its renewed certificate was refused and put back: {r}")
            }))
            .chain(
                (self.pairs_refused.iter()).map(|(p, r)| match self.restored.contains(p) {
                    true => format!("{r}; it was put back"),
                    false => {
                        format!("{r}; it could not be put back, and stays owed to the next pass")
                    }
                }),
            )
            .chain(self.pairs_unproven.iter().map(|(_, r)| r.clone()))
            .chain(
                (self.commands.iter().filter(|c| !c.ok))
                    .map(|c| format!("{}: {}", c.label(), c.detail)),
            )
            .collect()
    }
}

/// The restarts held back, one sentence per cause: `etcd.service: not restarted: …` for a
/// cause of its own, `3 restarts held (a, b, c): …` for one several share, said once.
fn held_by_cause(held: &[(Target, Hold)]) -> Vec<String> {
    let mut causes: Vec<(&Hold, Vec<String>)> = Vec::new();
    for (t, r) in held {
        match causes.iter_mut().find(|(c, _)| *c == r) {
            Some((_, targets)) => targets.push(t.to_string()),
            None => causes.push((r, vec![t.to_string()])),
        }
    }
    causes
        .into_iter()
        .map(|(cause, targets)| match targets.as_slice() {
            [one] => format!("{one}: not restarted: {cause}"),
            all => format!("{} restarts held ({}): {cause}", all.len(), all.join(", ")),
        })
        .collect()
}

/// Restarts what `owed` names, one step at a time through `gate` (see `sequence.rs`), and
/// settles the debt: cleared when every service came back, else recorded for the next pass.
/// `connect` is called only when a unit is to be restarted. `gate.finish()` is called once
/// at the end, whatever happened.
pub async fn restart<C, F>(
    settings: &Settings,
    inv: &Inventory,
    node: &NodeReading,
    renewals: &[RenewOutcome],
    owed: Owed,
    connect: F,
    gate: &mut impl Gate,
) -> anyhow::Result<RestartOutcomes>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
{
    let none = AtStep::none();
    restart_with(settings, inv, node, renewals, owed, &none, connect, gate).await
}

/// [`restart`], with the renewals `at_step` installs at their steps.
#[allow(clippy::too_many_arguments)]
pub async fn restart_with<C, F>(
    settings: &Settings,
    inv: &Inventory,
    node: &NodeReading,
    renewals: &[RenewOutcome],
    owed: Owed,
    at_step: &AtStep<'_>,
    connect: F,
    gate: &mut impl Gate,
) -> anyhow::Result<RestartOutcomes>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
{
    let out = stage(settings, inv, node, renewals, owed, at_step, connect, gate).await;
    gate.finish().await;
    out
}

#[allow(clippy::too_many_arguments)]
async fn stage<C, F>(
    settings: &Settings,
    inv: &Inventory,
    node: &NodeReading,
    renewals: &[RenewOutcome],
    mut owed: Owed,
    at_step: &AtStep<'_>,
    connect: F,
    gate: &mut impl Gate,
) -> anyhow::Result<RestartOutcomes>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
{
    let mut out = RestartOutcomes::default();
    // Before anything restarts on them: a client pair its server refuses is put back.
    // One whose server did not answer (its member down) is presented again at the end,
    // once the stage has started what it restarts.
    let to_present = pairs::candidates(renewals, &owed);
    let mut presented = pairs::present(node, inv, &to_present).await;
    out.restored.extend(presented.restored.iter().cloned());
    out.not_restored
        .extend(presented.not_restored.iter().cloned());
    let at_targets: Vec<Target> = at_step.steps.iter().map(|(t, _)| t.clone()).collect();
    let (at_units, at_pods) = split_targets(&at_targets);
    // With nothing to restart, a watch's endpoints that should serve what was renewed are
    // still checked: a renewal nothing takes up is not done.
    if owed.is_empty()
        && presented.owed().is_empty()
        && at_units.is_empty()
        && at_pods.is_empty()
        && expect::expectations(settings, inv, renewals, &[]).is_empty()
    {
        pairs_shown(&mut out, presented);
        return Ok(out);
    }
    let owed_commands = std::mem::take(&mut owed.commands);
    let ctrl = match owed.units.is_empty() && at_units.is_empty() {
        true => None,
        false => Some(connect().await),
    };
    let said = settings.components();
    let how = Restarter {
        ctrl: match &ctrl {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(NoSystemd::Unreached(Causes(e).to_string())),
            None => Err(NoSystemd::NotConnected),
        },
        mode: match settings.restart_mode {
            RestartPolicy::TryRestart => RestartMode::TryRestart,
            RestartPolicy::Restart => RestartMode::Restart,
        },
        timeout: settings.restart_timeout,
        state_dir: &settings.state_dir,
        manifests_dir: &settings.manifests_dir,
        pod_wait: settings.static_pod_wait,
        serving: Serving {
            client: gate.probe_client(),
            stop: gate.stop(),
            ..Serving::of(settings).knowing(node)
        },
        said: &said,
        at_step: Some(at_step),
    };
    let (mut units, mut pods) = (owed.units.clone(), owed.pods.clone());
    units.extend(at_units.into_iter().filter(|u| !owed.units.contains(u)));
    pods.extend(at_pods.into_iter().filter(|p| !owed.pods.contains(p)));
    let steps = sequence::steps_knowing(&units, &pods, node, &settings.manifests_dir, how.said);
    let mut ran = sequence::run(&how, steps, gate).await;
    // What was installed at its step is owed as what was installed before the stage: a
    // roll-back restores it, and the record keeps it until its step is done.
    let at_renewed = std::mem::take(&mut ran.renewed);
    owed.changes.extend(std::mem::take(&mut ran.installed));
    let with_at_step: Vec<RenewOutcome> = (renewals.iter().cloned())
        .chain(at_renewed.iter().cloned())
        .collect();
    let renewals = with_at_step.as_slice();
    out.reloaded = (ran.reloaded.iter())
        .map(|(s, how)| (s.target.clone(), how.clone()))
        .collect();
    out.rolled_back.append(&mut ran.rolled_back);
    out.restored.append(&mut ran.restored);
    out.refused = (ran.refused.iter())
        .map(|(s, why)| (s.target.clone(), why.clone()))
        .collect();
    out.refused_certs.append(&mut ran.refused_certs);
    out.fell_back = (ran.fell_back.iter())
        .map(|(s, why)| (s.target.clone(), why.clone()))
        .collect();
    out.not_restored.append(&mut ran.not_restored);
    out.renewed = at_renewed;
    let (held_units, held_pods) = held_names(&ran.held);
    (out.units, out.pods) = (ran.units, ran.pods);
    out.held.extend(held_lines(&ran.held));
    out.unmet.extend(held_lines(&ran.unmet));
    let restarted: Vec<String> = out.units.iter().map(|r| r.unit.clone()).collect();
    let mut expectations = expect::expectations(settings, inv, renewals, &restarted);
    // A watch with a service held back serves its old certificate until the next pass: not
    // a failure to roll back.
    expectations.retain(|e| {
        let w = &settings.watches[e.watch];
        !w.units.iter().any(|u| held_units.contains(u))
            && !w.static_pods.iter().any(|p| held_pods.contains(p))
    });
    out.endpoints = endpoints::check_all(&expectations, settings.restart_timeout).await;
    let (mut units_down, mut pods_down) = down(settings, &out, &expectations);
    let to_restore = match settings.rollback_on_failure {
        true => rollback::to_restore(
            settings,
            node,
            &owed.changes,
            renewals,
            &units_down,
            &pods_down,
        ),
        false => Vec::new(),
    };
    let (to_restore, causes): (Vec<_>, Vec<_>) = to_restore
        .into_iter()
        .map(|(c, why)| {
            let cert = c.cert.clone();
            (c, (cert, why))
        })
        .unzip();
    if !to_restore.is_empty() {
        // What did not come back from its restart is down; the rest runs on the wrong pair.
        let not_back: Vec<Target> = (out.units.iter().filter(|r| !r.ok))
            .map(|r| Target::Unit(r.unit.clone()))
            .chain(
                out.pods
                    .iter()
                    .filter(|r| !r.ok)
                    .map(|r| Target::Pod(r.pod.clone())),
            )
            .collect();
        let (units, pods) = (&units_down, &pods_down);
        let r = rollback::roll_back(&how, gate, to_restore, units, pods, &not_back).await?;
        out.rolled_back.extend(r.undone);
        out.restored.extend(r.restored);
        out.not_restored.extend(r.not_restored);
        out.restored_for.extend(causes);
        (out.units_again, out.pods_again) = (r.units_again, r.pods_again);
        (units_down, pods_down) = (r.units_down, r.pods_down);
        out.held.extend(held_lines(&r.held));
    }
    if !presented.unproven.is_empty() || !presented.not_listening.is_empty() {
        for (cert, _) in presented.unproven.iter().chain(&presented.not_listening) {
            let cert = cert.display();
            tracing::info!(
                "the server that checks the renewed client pair {cert} did not answer: it is presented again at the end of the restart stage"
            );
        }
        let again: Vec<pairs::Candidate> = (to_present.iter())
            .filter(|c| {
                let mut later = presented.unproven.iter().chain(&presented.not_listening);
                later.any(|(u, _)| *u == c.cert)
            })
            .cloned()
            .collect();
        let later = pairs::present(node, inv, &again).await;
        out.restored.extend(later.restored.iter().cloned());
        out.not_restored.extend(later.not_restored.iter().cloned());
        presented.merge_later(later);
        for (_, why) in presented.unproven.iter().chain(&presented.not_listening) {
            tracing::warn!("{why}");
        }
    }
    // What a later pass presents again, and puts back should the server refuse it then.
    let pairs = presented.owed();
    let owed_pairs = Owed {
        changes: (to_present.into_iter())
            .filter(|c| pairs.contains(&c.cert))
            .filter_map(|c| c.change)
            .collect(),
        pairs,
        ..Owed::default()
    };
    pairs_shown(&mut out, presented);
    // Last, once the services run on what is installed now: each watch's own command.
    out.commands = commands::run_all(settings, &owed_commands).await;
    let failed_commands = owed_commands
        .into_iter()
        .filter(|o| out.commands.iter().any(|c| c.watch == o.watch && !c.ok));
    let mut still_owed = Owed {
        units: units_down,
        pods: pods_down,
        changes: owed.changes,
        commands: failed_commands.collect(),
        pairs: Vec::new(),
    };
    still_owed.merge(Owed {
        units: held_units,
        pods: held_pods,
        ..Owed::default()
    });
    still_owed.merge(owed_pairs);
    owed::save(&settings.state_dir, &still_owed)?;
    if let (false, Some(record)) = (out.renewed.is_empty(), &at_step.pending) {
        // Owed by the record just written: the install's own record may go.
        record.release_settled()?;
    }
    Ok(out)
}

/// What presenting the renewed client pairs showed, in the stage's outcomes.
fn pairs_shown(out: &mut RestartOutcomes, presented: pairs::Presented) {
    out.pairs_accepted = presented.accepted;
    out.pairs_refused = presented.refused;
    out.pairs_unproven = presented.unproven;
    out.pairs_not_presented = (presented.not_listening.into_iter())
        .chain(presented.released)
        .collect();
}

/// The units and the static pods among `targets`, by name.
pub(crate) fn split_targets(targets: &[Target]) -> (Vec<String>, Vec<String>) {
    let (mut units, mut pods) = (Vec::new(), Vec::new());
    for t in targets {
        match t {
            Target::Unit(u) => units.push(u.clone()),
            Target::Pod(p) => pods.push(p.clone()),
        }
    }
    (units, pods)
}

/// The units and the static pods held back, by name.
fn held_names(held: &[(Step, Hold)]) -> (Vec<String>, Vec<String>) {
    let mut units = Vec::new();
    let mut pods = Vec::new();
    for (step, _) in held {
        match &step.target {
            Target::Unit(u) => units.push(u.clone()),
            Target::Pod(p) => pods.push(p.clone()),
        }
    }
    (units, pods)
}

/// The held steps as (target, reason) for the report and the alarm.
fn held_lines(held: &[(Step, Hold)]) -> impl Iterator<Item = (Target, Hold)> + '_ {
    held.iter().map(|(s, r)| (s.target.clone(), r.clone()))
}

/// The units and static pods that did not come back, or whose watch's endpoint serves an old
/// certificate: the next pass restarts them again.
fn down(
    settings: &Settings,
    out: &RestartOutcomes,
    expectations: &[endpoints::Expectation],
) -> (Vec<String>, Vec<String>) {
    let mut units: Vec<String> = out
        .units
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.unit.clone())
        .collect();
    let mut pods: Vec<String> = out
        .pods
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.pod.clone())
        .collect();
    for (e, check) in expectations.iter().zip(&out.endpoints) {
        if check.ok {
            continue;
        }
        let watch = &settings.watches[e.watch];
        for u in &watch.units {
            if !units.contains(u) {
                units.push(u.clone());
            }
        }
        for (p, _) in static_pods::of_watch(&settings.manifests_dir, watch) {
            if !pods.contains(&p) {
                pods.push(p);
            }
        }
    }
    (units, pods)
}
