//! One renewal pass, the same for the daemon and `certrenewd renew`. Orchestration only:
//! lock -> recover -> scan -> plan -> renew -> restart -> alarms -> metrics, each stage in
//! its own module, data flowing one way.

mod closing;
mod held;
pub mod clock;
pub mod inhibit;
pub mod records;
pub mod reloads;
mod report;
mod scan;
pub mod state_lock;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use time::OffsetDateTime;

use crate::alarms::{self, AlarmSink, old_cas};
use crate::components::{NodeReading, UnitSettings};
use crate::config::Settings;
use crate::coordinate::{EtcdGate, Stop};
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};
use crate::renew::copies::{self, Copies};
use crate::renew::{self, RenewOutcome, pending};
use crate::restart::owed::{self, Owed};
use crate::restart::{self, Gate, Hold, RestartOutcomes, UnitControl, targets};
pub use closing::raise_could_not_run;
use closing::{apply_alarms, desired_alarms, scope, write_metrics};
use state_lock::StateLock;

pub use report::{PassReport, plural};
pub use scan::{policy, renew_options, scan_and_plan, watching_named};

/// What the caller asks of a pass.
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    /// Renew the selected certificates even if not due.
    pub force: bool,
    /// Only these certificate files.
    pub only: Option<Vec<PathBuf>>,
    /// What the pass may change.
    pub mode: Mode,
    /// Run even while an inhibit is set (the operator's `renew --ignore-inhibit`).
    pub ignore_inhibit: bool,
    /// The daemon's stop request: ends the coordination's waits.
    pub stop: crate::coordinate::Stop,
    /// The caller prints the dry run as a table, which lists every leaf this host cannot
    /// renew: the WARN of each would only repeat it.
    pub table_lists_unrenewable: bool,
}

/// What a pass may change: everything, nothing, or the files without their restarts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Renew, install, restart, record and alarm: the daemon's passes and `renew`.
    #[default]
    Run,
    /// Print the plan, touch nothing: no lock, no recovery, no record, no alarm.
    DryRun,
    /// Write certificates but restart no unit (and raise no alarm for it): this pass's
    /// restarts are forgiven, what earlier passes owe stays owed (`renew --no-restart`).
    NoRestart,
    /// Write certificates and leave their restarts owed (`restarts.json`) to the next pass:
    /// the daemon's renewal before READY=1, when the units ordered after it have not
    /// started yet and a restart job for one would wait on the daemon's own start.
    Deferred,
}

impl Mode {
    /// Whether the pass writes anything (every mode but a dry run).
    pub fn writes(self) -> bool {
        self != Mode::DryRun
    }
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

/// Waits for the sinks' background work (the alarm hook, each run within its timeout).
pub fn flush_sinks(sinks: &[Box<dyn AlarmSink>]) {
    for s in sinks {
        s.flush();
    }
}

/// The local half of a pass, done under the state lock on a blocking thread.
struct Local {
    /// Held until the pass is over.
    _lock: Option<StateLock>,
    inhibited: Option<inhibit::Active>,
    inventory: Inventory,
    plan: Plan,
    renewals: Vec<RenewOutcome>,
    /// The copies of renewed CAs replaced (a dry run: to replace) and those that failed.
    copies: Copies,
    /// The restarts this pass owes: its own renewals' and those carried over.
    owed: Owed,
    /// Of them, those carried over from earlier passes.
    carried: Owed,
    /// Which static pods read which files, read once: the restarts and the roll-back are
    /// chosen per file from it.
    node: NodeReading,
    /// Why the restarts owed could not be recorded (a full or failing state directory):
    /// then none is made, and the install's own record keeps them for the next pass.
    unrecorded: Option<String>,
    /// The records read once as the pass began, updated as it goes.
    records: records::State,
    /// The install's record (`pending.json`) as recovery left it, written by the renewals
    /// (here and at their steps) and the copies, released by the hand-over.
    pending: pending::Record,
    /// The renewals installed at their step, under the restart gate, by step.
    at_step: Vec<(
        restart::step::Target,
        Vec<restart::sequence::at_step::Deferred>,
    )>,
    /// The settings the pass scanned, planned and renewed with: the configured watches and
    /// one per directory of files the components name outside them (`watching_named`). A
    /// renewal installed at its step is written and restarted by the same.
    scanned: Settings,
}

/// A pass's ways into the cluster, handed in: the restart gate, and the agreement on a CA's
/// re-issue (and its adoption) for the node as the pass reads it. The daemon and `renew`
/// hand in etcd's ([`Seams::etcd`]); the unit tests their fakes.
pub struct Seams<G> {
    pub gate: G,
    pub cas: renew::CaAgreements,
}

impl Seams<EtcdGate> {
    /// Through etcd, under `settings`, every wait ended by `stop`: the cluster-wide restart
    /// lock and quorum gate, which contacts etcd only if a restart is due, and the CA
    /// agreement.
    pub fn etcd(settings: &Settings, stop: &Stop) -> Self {
        let gate = EtcdGate::new(&settings.coordination)
            .recording_in(&settings.state_dir)
            .stopped_by(stop.clone());
        let cas = crate::coordinate::EtcdCaAgreement::each_pass(settings, stop);
        Seams { gate, cas }
    }
}

/// Runs one pass. `connect` is called only when a unit has to be restarted.
pub async fn run<C, F, G>(
    settings: &Settings,
    opts: &PassOptions,
    connect: F,
    seams: Seams<G>,
    sinks: Arc<Vec<Box<dyn AlarmSink>>>,
) -> anyhow::Result<PassReport>
where
    C: UnitControl,
    F: AsyncFnOnce() -> anyhow::Result<C>,
    G: Gate,
{
    let Seams { mut gate, cas } = seams;
    let gate = &mut gate;
    // What the units run, as systemd tells it: their restarts are chosen per file from it,
    // as the static pods' are. The connection made for it is the one the restart stage
    // uses. Before READY=1 nothing is restarted, so nothing is asked.
    let units = units_to_read(settings);
    let conn = match opts.mode == Mode::Deferred {
        true => Conn::Later(connect),
        false => Conn::Made(connect().await),
    };
    let unit_settings = match &conn {
        Conn::Made(Ok(c)) => c.unit_settings(&units).await,
        Conn::Made(Err(_)) | Conn::Later(_) => Vec::new(),
    };
    let (owned_settings, owned_opts, owned_cas) = (settings.clone(), opts.clone(), cas.clone());
    let mut local = tokio::task::spawn_blocking(move || {
        let _busy = crate::progress::busy();
        local(&owned_settings, &owned_opts, &unit_settings, &owned_cas)
    })
    .await
    .context("the pass's worker thread failed")??;
    // Before the restarts, which may take the connection: one made since is seen next pass.
    if let (Conn::Made(made), Some(record)) = (&conn, &local.records.by_hand) {
        gate.knows(&local.node);
        settle_by_hand(settings, &local.node, record, made, gate.probe_client()).await;
    }
    let connect = async move || match conn {
        Conn::Made(made) => made,
        Conn::Later(connect) => connect().await,
    };
    let mut restarts = if local.inhibited.is_some() {
        RestartOutcomes::default()
    } else if opts.mode == Mode::DryRun {
        let mut out = RestartOutcomes::skipped(&local.owed, &Owed::default());
        let why = "its renewed files would be installed under the restart lock at its turn and \
                   shown served where its settings say, verified as its clients verify them, \
                   instead of a restart (to be proven)";
        let steps = local.at_step.iter().map(|(t, _)| t.clone());
        match settings.rotate_keys {
            // New key pairs: each stopped for its install, then started.
            true => {
                let steps: Vec<_> = steps.filter(|t| !out.not_restarted.contains(t)).collect();
                out.not_restarted.extend(steps);
            }
            false => out.reloaded = steps.map(|t| (t, why.to_string())).collect(),
        }
        match held_now(settings, &local).await {
            Now::Held { why, but } => {
                let (go, held): (Vec<_>, Vec<_>) = std::mem::take(&mut out.not_restarted)
                    .into_iter()
                    .partition(|t| Some(t) == but.as_ref());
                let mut held: Vec<_> = (held.into_iter())
                    .map(|t| (t, Hold::WouldBe(why.clone())))
                    .collect();
                // A static pod is started so only if the container runtime says none of it
                // runs, as the pass asks it.
                for t in go {
                    match own_start_held(settings, &local.node, &t).await {
                        Some(why) => held.push((t, Hold::WouldBe(why))),
                        None => out.not_restarted.push(t),
                    }
                }
                out.held = held;
            }
            Now::Unknown(why) => out.undecided = Some(why),
            Now::Go => {}
        }
        out
    } else if opts.mode == Mode::Deferred {
        RestartOutcomes::skipped(&local.owed, &Owed::default())
    } else if let Some(why) = &local.unrecorded {
        let mut out = RestartOutcomes::held_all(&local.owed, &Hold::PassHeld(why.clone()));
        // What waits for its step is not renewed either: it stays due for the next pass.
        for (_, deferred) in std::mem::take(&mut local.at_step) {
            out.renewed
                .extend(deferred.into_iter().map(|d| renew::RenewOutcome {
                    cert: d.cert,
                    path: d.path,
                    watch: d.watch,
                    result: renew::RenewResult::Failed {
                        reason: format!(
                            "not renewed: it is installed under the restart lock, and {why}"
                        ),
                    },
                }));
        }
        out
    } else if opts.mode == Mode::NoRestart {
        RestartOutcomes::skipped(&local.owed, &local.carried)
    } else {
        gate.knows(&local.node);
        let owed = local.owed.clone();
        let (inv, renewals, node) = (&local.inventory, &local.renewals, &local.node);
        let scanned = &local.scanned;
        let renewing = renew_options(scanned, &cas, node, &local.pending);
        let (plan, at_step) = (&local.plan, local.at_step.clone());
        let at_step = restart::sequence::at_step::AtStep {
            steps: at_step,
            restart_too: restart::owed::targets(&owed),
            renew: Box::new(move |certs: &[usize]| {
                renew::renew(inv, &plan.at_step(certs), &renewing)
            }),
            stop_first: settings.rotate_keys,
            pending: Some(local.pending.clone()),
        };
        let out =
            restart::restart_with(scanned, inv, node, renewals, owed, &at_step, connect, gate);
        out.await?
    };
    if !restarts.renewed.is_empty() {
        local.renewals.append(&mut restarts.renewed);
        local.renewals.sort_by_key(|o| o.cert);
    }
    if local.inhibited.is_none() && opts.mode.writes() {
        let (inv, plan) = (&local.inventory, &local.plan);
        let ledger = &mut local.records.ledger;
        restarts.backoff = held::settle(settings, inv, plan, ledger, &local.renewals, &restarts)?;
    }
    if local.inhibited.is_none() && opts.mode.writes() {
        let (changes, restored) = (&local.owed.changes, &restarts.restored);
        forget_old_cas(settings, &mut local.records.old_cas, changes, restored);
        adopt_cas(&local, &restarts.restored, &cas).await;
    }
    let mut stored = closing::Stored::new(settings);
    let mut desired = desired_alarms(settings, opts, &local, &restarts, &mut stored)?;
    let (alarm_events, active) = match opts.mode.writes() {
        false => (Vec::new(), Vec::new()),
        true => {
            let scoped = scope(opts, &desired, &mut stored)?;
            let applied = apply_alarms(stored, &scoped, sinks).await;
            if let Some(why) = applied.unsaved {
                closing::unsaved_alarms(settings, &mut desired, why);
            }
            (applied.events, applied.active)
        }
    };
    if opts.mode.writes() {
        let unread = old_cas::OldCas::default();
        let held = closing::Held {
            desired: &desired,
            active: &active,
            old_cas: local.records.old_cas.as_ref().unwrap_or(&unread),
        };
        write_metrics(settings, &local, &restarts, held, gate.lock_wait());
    }
    if opts.mode.writes() && !local.inhibited.as_ref().is_some_and(|i| i.clock) {
        // The latest time a pass saw, for the next one's clock check.
        if let Err(e) = clock::record(&settings.state_dir, local.records.clock, local.plan.now) {
            tracing::error!("{e:#}");
        }
    }
    Ok(PassReport {
        inhibited: local.inhibited,
        inventory: local.inventory,
        plan: local.plan,
        renewals: local.renewals,
        copies: local.copies,
        restarts,
        alarm_events,
        desired_alarms: desired,
        named: opts.only.clone(),
        node: local.node,
    })
}

/// What the units run (those the watches name and the usual ones), as systemd on
/// `settings.bus` tells it, for `check`:
/// nothing when it cannot be reached (then a watch's units count as reading all its files).
pub async fn unit_settings(settings: &Settings) -> Vec<UnitSettings> {
    let units = units_to_read(settings);
    match restart::Systemd::connect(settings.bus).await {
        Ok(systemd) => systemd.unit_settings(&units).await,
        Err(e) => {
            tracing::info!(
                "systemd cannot be reached, so the units of each watch are taken to read all its files: {}",
                crate::causes::Causes(&e)
            );
            Vec::new()
        }
    }
}

/// What the node runs, read as a pass reads it, for `check`: its static pods, and its units
/// as systemd tells them within 10 s (none when it does not answer).
pub async fn read_node(settings: &Settings) -> NodeReading {
    let ask = unit_settings(settings);
    let units = tokio::time::timeout(std::time::Duration::from_secs(10), ask).await;
    NodeReading::read_with(&settings.manifests_dir, &units.unwrap_or_default())
}

/// How the restarts a dry run would make stand now, as the cluster says.
enum Now {
    /// They would go ahead (or nothing is owed, or coordination is off).
    Go,
    /// Held, for a cause known now; `but` this node's etcd member's start, when it is down
    /// (the first step).
    Held {
        why: String,
        but: Option<crate::restart::step::Target>,
    },
    /// Not known now: the cluster gave no answer in time; the pass decides.
    Unknown(String),
}

/// How the restarts a dry run would make stand: the decision `check` shows, made as the
/// pass's gate makes it (nothing written, no lock taken), within `ASK_FOR`.
async fn held_now(settings: &Settings, local: &Local) -> Now {
    const ASK_FOR: std::time::Duration = std::time::Duration::from_secs(10);
    let owes = !local.owed.units.is_empty() || !local.owed.pods.is_empty();
    if !owes || settings.coordination.enabled == crate::config::Enabled::Off {
        return Now::Go;
    }
    let (units, pods) = (&local.owed.units, &local.owed.pods);
    let manifests = &settings.manifests_dir;
    let said = settings.components();
    let steps = crate::restart::sequence::steps_knowing(units, pods, &local.node, manifests, &said);
    let gate = EtcdGate::new(&settings.coordination)
        .reading_in(&settings.state_dir)
        .knowing(&local.node)
        .owing(&steps);
    match tokio::time::timeout(ASK_FOR, gate.outlook()).await {
        Ok(f) if f.restarts == "held" => Now::Held {
            but: (steps.first())
                .filter(|_| f.own_start)
                .map(|s| s.target.clone()),
            why: f.why,
        },
        Ok(_) => Now::Go,
        Err(_) => Now::Unknown(format!(
            "etcd gave no answer within {}s, so whether the restarts would go ahead or be held is decided by the pass",
            ASK_FOR.as_secs()
        )),
    }
}

/// Why the start of `target` without the restart lock would be held: a static pod the
/// container runtime reports a container of that runs, or cannot say of. None: it would go.
async fn own_start_held(
    settings: &Settings,
    node: &NodeReading,
    target: &crate::restart::step::Target,
) -> Option<String> {
    let crate::restart::step::Target::Pod(pod) = target else {
        return None;
    };
    let (root, dir) = (std::path::Path::new("/"), &settings.manifests_dir);
    crate::restart::cri::may_start_unlocked(node, root, dir, pod)
        .await
        .err()
        .map(|e| e.to_string())
}

/// A connection to systemd made, or the means to make one when it is first needed.
enum Conn<C, F> {
    Made(anyhow::Result<C>),
    Later(F),
}

/// The units whose settings are read: those the watches name, each once, in configuration
/// order, then the usual units of the control-plane programs, so that one no watch names
/// is still seen to read a renewed file (and reported, never restarted).
fn units_to_read(settings: &Settings) -> Vec<String> {
    let mut units: Vec<String> = Vec::new();
    let usual = crate::components::USUAL_UNITS.iter().map(|u| u.to_string());
    for u in settings
        .watches
        .iter()
        .flat_map(|w| w.units.clone())
        .chain(usual)
    {
        if !units.contains(&u) {
            units.push(u);
        }
    }
    units
}

/// Lock, recovery, scan, plan, renewals; then the restarts owed are handed from the
/// renewer's record to the restart stage's. `units`: what systemd said the watched units
/// run with.
fn local(
    settings: &Settings,
    opts: &PassOptions,
    units: &[UnitSettings],
    cas: &renew::CaAgreements,
) -> anyhow::Result<Local> {
    crate::failpoint!("pass-local");
    let lock = match opts.mode.writes() {
        false => None,
        true => Some(
            StateLock::acquire_unless(&settings.state_dir, settings.lock_timeout, &opts.stop)?
                .with_tree(&settings.written_paths(), settings.lock_timeout)?,
        ),
    };
    if lock.is_some() {
        // Before the pass writes anything else: a disk that fills up still takes its alarms.
        crate::alarms::keep_room(&settings.state_dir, crate::alarms::Room::AsItIs);
    }
    // Before recovery, which records in it the CAs it finds re-issued.
    let mut old_cas = old_cas::OldCas::load(&settings.state_dir);
    let state = &settings.state_dir;
    let (carried, pending) = match opts.mode.writes() {
        false => (Owed::default(), pending::Record::new(state, None)),
        true => recover(settings, records::Left::read(state)?, &mut old_cas)?,
    };
    let records = records::State::read(settings, opts.mode, old_cas)?;
    let inhibited = match opts.ignore_inhibit {
        true => None,
        false => inhibit::active(
            &settings.state_dir,
            &settings.inhibit_paths,
            OffsetDateTime::now_utc(),
        )?,
    };
    stop_point(opts, "the scan")?;
    // Which static pods and units read which files, and where etcd and kube-apiserver
    // serve: the restarts are chosen per file from it, and the served names checked.
    let node = NodeReading::read_with(&settings.manifests_dir, units);
    // From here on, with a watch of what the components' settings name outside the watches.
    let named = watching_named(settings, &node);
    let settings = &named;
    // The planner puts off what the back-off holds (a dry run too: it shows what the real
    // pass would hold).
    let policy = policy(settings, opts, records.ledger.clone());
    let (inventory, plan) = scan_and_plan(settings, &policy, &node);
    if lock.is_some() {
        // As big as the alarms of every certificate watched need, kept each pass.
        let room = crate::alarms::Room::Watching(inventory.certs.len());
        crate::alarms::keep_room(&settings.state_dir, room);
    }
    // Before anything is dated by it: the clock, against the latest a pass saw here.
    let inhibited = match clock::refused(
        &settings.state_dir,
        records.clock,
        &inventory,
        plan.now,
        opts.force,
    ) {
        Some(reason) => {
            tracing::error!("{reason}");
            Some(inhibit::Active {
                source: clock::path(&settings.state_dir).display().to_string(),
                reason,
                since: plan.now,
                until: None,
                clock: true,
            })
        }
        None => inhibited,
    };
    log_problems(&inventory, &plan, opts);
    stop_point(opts, "the renewals")?;
    let mut local = Local {
        scanned: settings.clone(),
        _lock: lock,
        inhibited,
        inventory,
        plan,
        renewals: Vec::new(),
        copies: Copies::default(),
        owed: Owed::default(),
        carried: Owed::default(),
        node,
        unrecorded: None,
        records,
        pending,
        at_step: Vec::new(),
    };
    if let Some(i) = &local.inhibited {
        // Nothing is renewed or restarted; what is owed stays recorded for a later pass.
        tracing::info!("pass deferred: {}", i.describe());
        return Ok(local);
    }
    let held = held::held_back(&local.inventory, &local.plan, &local.records.ledger);
    // The renewals put off to their steps are still reported as this pass's.
    let mut free = local.plan.clone();
    let node = &local.node;
    local.owed = match opts.mode.writes() {
        true => {
            let mut also = Owed::default();
            if opts.mode == Mode::Run {
                (local.at_step, also) = reloads::defer(settings, node, &local.inventory, &mut free);
            }
            let opts = renew_options(settings, cas, node, &local.pending);
            local.renewals = renew::renew(&local.inventory, &free, &opts);
            local.renewals.extend(held);
            local.renewals.sort_by_key(|o| o.cert);
            // Then every copy of a CA older than its own file, on this node.
            let now = local.plan.now;
            local.copies = copies::refresh(&local.inventory, &opts, now, &local.renewals);
            renew::prune_backups(&opts, now);
            let mut owed = targets::of_renewals(settings, node, &local.renewals);
            owed.merge(targets::of_changes(settings, node, &local.copies.changes()));
            owed.merge(also);
            owed
        }
        // What the real pass would restart, by the same rules as what it renewed.
        false => {
            let also;
            (local.at_step, also) = reloads::defer(settings, node, &local.inventory, &mut free);
            let certs: Vec<(usize, PathBuf)> = free
                .renewals()
                .map(|i| &local.inventory.certs[i.cert])
                .map(|c| (c.watch, c.path.clone()))
                .collect();
            local.renewals = held;
            let cas: Vec<usize> = free
                .renewals()
                .filter(|i| i.is_ca)
                .map(|i| i.cert)
                .collect();
            local.copies = copies::would_replace(&local.inventory, &cas);
            let mut owed = targets::of_certs(settings, node, &certs);
            let files = local.copies.replaced.iter().map(|r| r.path.clone());
            owed.merge(targets::of_files(settings, node, files));
            owed.merge(also);
            owed
        }
    };
    local.carried = carried.clone();
    local.owed.merge(carried);
    if opts.mode.writes() {
        // Before the restarts, which may take long: a CA installed is recorded now.
        let installed = local.renewals.iter().filter_map(|o| match &o.result {
            renew::RenewResult::Renewed { change, .. } => Some(change),
            _ => None,
        });
        record_old_cas(settings, &mut local.records.old_cas, installed)?;
        let (node, owed, carried) = (&local.node, &local.owed, &local.carried);
        let by_hand = match (opts.mode, &mut local.records.by_hand) {
            (Mode::NoRestart, Some(record)) => owe_by_hand(settings, node, owed, carried, record),
            _ => Ok(()),
        };
        let record = &local.pending;
        match by_hand.and_then(|()| hand_over(settings, opts, owed, carried, record)) {
            // After the records a crash must find: this one is a cache.
            Ok(()) => {
                crate::inventory::checked::keep(&settings.state_dir, &local.inventory.verified)
            }
            // What was installed stays, and its pending record with it: a restart made
            // without the debt recorded could be lost to a crash. The pass goes on to its
            // report and alarms; the next pass finishes the hand-over from that record.
            Err(e) => {
                let why = format!(
                    "{e:#}; the restarts owed are made once they can be recorded (the record \
                     of the install, {}, keeps them meanwhile)",
                    settings.state_dir.join("pending.json").display()
                );
                tracing::error!("{why}");
                local.unrecorded = Some(why);
            }
        }
    }
    Ok(local)
}

/// Ends the pass before `next` when SIGTERM asked the daemon to stop: each step before it
/// is whole (an install is a transaction; recovery and the restarts owed are recorded), so
/// the next start takes over from here.
fn stop_point(opts: &PassOptions, next: &str) -> anyhow::Result<()> {
    match opts.stop.requested() {
        true => anyhow::bail!(
            "stopping ({}): the pass ended before {next}; the next pass runs one again",
            opts.stop.by()
        ),
        false => Ok(()),
    }
}

/// Records each CA re-issued by `changes` (installed) whose old certificate copies outside
/// this node may still hold ([`old_cas`]) in `old` (the record as the pass read it) and
/// writes it, once however often it is called: the pass does as soon as the files are
/// installed, recovery for an install a crash interrupted. An error fails the pass before
/// its pending record is handed over, so the next pass (its recovery) records them: a record
/// lost would leave the old CA's end unshown and unalarmed.
fn record_old_cas<'a>(
    settings: &Settings,
    old: &mut anyhow::Result<old_cas::OldCas>,
    changes: impl Iterator<Item = &'a pending::Change>,
) -> anyhow::Result<()> {
    let cas: Vec<old_cas::OldCa> = changes
        .filter_map(|c| c.reissued_ca.as_ref())
        .map(|r| old_cas::OldCa {
            ca: r.ca.clone(),
            old_serial: r.old_serial.clone(),
            old_not_after: r.old_not_after,
            new_serial: r.new_serial.clone(),
            renewed_at: r.renewed_at,
            acknowledged: false,
        })
        .collect();
    if cas.is_empty() {
        return Ok(());
    }
    let now = OffsetDateTime::now_utc();
    let recorded = || -> anyhow::Result<old_cas::OldCas> {
        crate::failpoint::io("record-old-cas")?;
        let mut all = old.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?.clone();
        all.record(cas, now);
        all.save(&settings.state_dir)?;
        Ok(all)
    };
    *old = Ok(recorded().context(
        "recording the re-issued CAs (state_dir/old-cas.json); the next pass records them again",
    )?);
    Ok(())
}

/// A CA put back by a roll-back (`restored`) is not re-issued after all: its record goes,
/// in `old` and on disk; `old` stays as the file is when it cannot be written (said in the
/// journal).
fn forget_old_cas(
    settings: &Settings,
    old: &mut anyhow::Result<old_cas::OldCas>,
    changes: &[pending::Change],
    restored: &[PathBuf],
) {
    let undone: Vec<(PathBuf, String)> = changes
        .iter()
        .filter(|c| renew::rolled_back(&c.cert, restored))
        .filter_map(|c| c.reissued_ca.as_ref())
        .map(|r| (r.ca.clone(), r.new_serial.clone()))
        .collect();
    let all = match old {
        Ok(all) => all,
        Err(e) => return tracing::error!("updating the record of re-issued CAs: {e:#}"),
    };
    let mut left = all.clone();
    if !left.forget(&undone) {
        return;
    }
    match left.save(&settings.state_dir) {
        Ok(()) => *all = left,
        Err(e) => tracing::error!("updating the record of re-issued CAs: {e:#}"),
    }
}

/// Each re-issued CA that stayed installed is recorded as adopted by this node under the
/// cluster's agreement, which is removed once every member has adopted it. Logged, never
/// failing the pass: the agreement only answers a later ask the same way.
async fn adopt_cas(local: &Local, restored: &[PathBuf], cas: &renew::CaAgreements) {
    let renewed = local.renewals.iter().filter(|o| o.stayed(restored));
    let agreement = cas(&local.node);
    for o in renewed.filter(|o| local.inventory.certs[o.cert].facts.is_ca) {
        let c = &local.inventory.certs[o.cert];
        match agreement.adopted(&c.facts).await {
            Ok(how) => tracing::info!(path = %c.path.display(), "CA {}: {how}", c.path.display()),
            Err(why) => tracing::warn!(
                path = %c.path.display(),
                "CA {}: cannot record its adoption in etcd ({why:#}); the agreement stays",
                c.path.display()
            ),
        }
    }
}

/// Once per pass, what would otherwise go unwatched: each leaf this host cannot renew (due
/// or not) and each file or directory that could not be read. A pass limited to `only`
/// (`renew PATH...`) speaks of those certificates only. A dry run leaves to its output what
/// that lists (its JSON the leaves it would fail on and the files, its table every leaf
/// too): the operator reading it would read each reason twice, and no journal keeps it.
fn log_problems(inventory: &Inventory, plan: &Plan, opts: &PassOptions) {
    let only = opts.only.as_deref();
    let named = |p: &PathBuf| only.is_none_or(|o| o.contains(p));
    let listed = |i: &crate::plan::PlanItem| {
        !opts.mode.writes() && (i.wanted() || opts.table_lists_unrenewable)
    };
    for item in plan
        .items
        .iter()
        .filter(|i| i.status == Status::Unrenewable && !i.is_ca && !listed(i))
        .filter(|i| named(&inventory.certs[i.cert].path))
    {
        let c = &inventory.certs[item.cert];
        let reason = item.reason.as_deref().unwrap_or("");
        tracing::warn!(path = %c.path.display(), "{}: cannot be renewed on this host: {reason}", c.label());
    }
    for e in inventory
        .errors
        .iter()
        .filter(|_| only.is_none() && opts.mode.writes())
    {
        tracing::warn!(path = %e.path.display(), "{}: {}", e.path.display(), e.reason);
    }
    for (key, mode) in inventory
        .keys_readable_by_others()
        .into_iter()
        .filter(|_| opts.mode.writes())
        .filter(|(k, _)| {
            only.is_none()
                || inventory.certs.iter().any(|c| {
                    named(&c.path) && inventory.matched_key(c).is_some_and(|m| &m.path == k)
                })
        })
    {
        tracing::warn!(path = %key.display(), "{}: a private key every user of this node can read (mode {mode:04o}); a renewal that keeps the key keeps its mode: chmod 600 it (0640 with the group of the service that reads it)", key.display());
    }
}

/// Finishes or rolls back an interrupted install and puts back held static pod manifests,
/// from what earlier passes `left`; returns the restarts still owed by earlier passes, and
/// the install's record as recovery leaves it (owing what it installed until the
/// hand-over). The caller holds the state lock.
fn recover(
    settings: &Settings,
    left: records::Left,
    old: &mut anyhow::Result<old_cas::OldCas>,
) -> anyhow::Result<(Owed, pending::Record)> {
    let state = &settings.state_dir;
    let recovered = pending::recover(state, left.pending).context(records::RECOVERING)?;
    for p in &recovered.rolled_back {
        tracing::warn!(path = %p.display(), "an interrupted renewal was rolled back: the previous certificate and key are in place");
    }
    for p in &recovered.rolled_forward {
        tracing::warn!(path = %p.display(), "an interrupted renewal was completed: the new certificate and key are in place");
    }
    for p in &recovered.chained_undone {
        tracing::warn!(path = %p.display(), "{}: the interrupted replacement of its copy of a CA was undone: it keeps the certificate renewed before it in the same pass, and this pass replaces the copy", p.display());
    }
    // A CA whose new certificate is in place is recorded, even when the crash came before
    // the pass that installed it could.
    record_old_cas(settings, old, recovered.installed.iter())?;
    recover_static_pods(state, left.held_pods)?;
    let mut owed = left.owed;
    // Read once the held manifests are back in their directory.
    let node = NodeReading::read(&settings.manifests_dir);
    owed.merge(targets::of_changes(settings, &node, &recovered.installed));
    owed.merge(Owed {
        units: recovered.units,
        pods: recovered.pods,
        ..Owed::default()
    });
    Ok((owed, pending::Record::new(state, recovered.left)))
}

/// The renewer's work is done: what its record names is now owed by the restart stage.
/// The debt is recorded before the pending record goes, so a crash in between restarts a
/// service twice, never zero times. `--no-restart` forgives this pass's own debt, not what
/// earlier passes owe (`carried`).
fn hand_over(
    settings: &Settings,
    opts: &PassOptions,
    owed: &Owed,
    carried: &Owed,
    record: &pending::Record,
) -> anyhow::Result<()> {
    let debt = match opts.mode {
        Mode::NoRestart => carried.clone(),
        _ => owed.clone(),
    };
    crate::failpoint::io("restarts-record")
        .map_err(anyhow::Error::from)
        .and_then(|()| owed::save(&settings.state_dir, &debt))
        .with_context(|| {
            let record = settings.state_dir.join("restarts.json");
            format!("recording the restarts owed in {}", record.display())
        })?;
    // A pair left half-done by an error stays recorded until a pass completes it.
    record.release_settled()
}

/// `--no-restart` keeps its promise and restarts nothing, but what this pass's own
/// installs call for is recorded as owed by hand in `record` (as the pass read it), and
/// written, before the pending record goes, so that a crash leaves it owed by one record or
/// the other: `check` shows it until each one has started again. What earlier passes owe
/// stays theirs.
fn owe_by_hand(
    settings: &Settings,
    node: &NodeReading,
    owed: &Owed,
    carried: &Owed,
    record: &mut anyhow::Result<restart::by_hand::Record>,
) -> anyhow::Result<()> {
    let earlier = owed::targets(carried);
    let own: Vec<_> = (owed::targets(owed).into_iter())
        .filter(|t| !earlier.contains(t))
        .collect();
    if own.is_empty() {
        return Ok(());
    }
    // Which of the installed files each one is owed for, by the rules that chose it.
    let changes = owed.changes.iter().filter(|c| !carried.changes.contains(c));
    let mut certs = Vec::new();
    for c in changes {
        let of = targets::of_changes(settings, node, std::slice::from_ref(c));
        certs.extend(owed::targets(&of).into_iter().map(|t| (t, c.cert.clone())));
    }
    let state = &settings.state_dir;
    let mut added = record
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?
        .clone();
    let now = OffsetDateTime::now_utc();
    for t in &own {
        let of_t: Vec<PathBuf> = (certs.iter())
            .filter(|(ct, _)| ct == t)
            .map(|(_, p)| p.clone())
            .collect();
        added.add(t, &of_t, now);
    }
    restart::by_hand::save(state, &added).with_context(|| {
        let path = restart::by_hand::path(state);
        format!("recording the restarts owed by hand in {}", path.display())
    })?;
    *record = Ok(added);
    Ok(())
}

/// Forgets the restarts owed by hand (`record`, as the pass read and updated it) that were
/// made since (by the operator, a reboot, or an earlier pass), as `systemd` and the node's
/// processes tell. The caller holds the state lock; a record that cannot be read or written
/// is logged and left as it is (`check` says so too).
async fn settle_by_hand(
    settings: &Settings,
    node: &NodeReading,
    record: &anyhow::Result<restart::by_hand::Record>,
    systemd: &anyhow::Result<impl UnitControl>,
    etcd_client: Option<(PathBuf, PathBuf)>,
) {
    use restart::by_hand;
    let record = match record {
        Ok(r) if r.is_empty() => return,
        Ok(r) => r,
        Err(e) => return tracing::error!("{e:#}"),
    };
    let looked = by_hand::look(record, settings, node, etcd_client, systemd).await;
    let (left, done) = by_hand::settle(looked);
    if left == *record {
        return;
    }
    for line in done {
        tracing::info!("{line}");
    }
    if let Err(e) = by_hand::save(&settings.state_dir, &left) {
        tracing::error!("{e:#}");
    }
}

/// At daemon start, before READY=1 and whatever the schedule: finishes or rolls back the
/// install a crash interrupted, and puts back the static pod manifests it left out, so that
/// no service started after the daemon (the shipped unit is ordered before them) reads a
/// mismatched pair. The restarts that install owes are recorded for the next pass; returns
/// whether any restarts are owed (by it, or by an earlier pass), so that a pass runs now.
pub fn recover_at_start(settings: &Settings) -> anyhow::Result<bool> {
    let state = &settings.state_dir;
    if !pending::exists(state) && !restart::static_pods::pending(state) {
        // Nothing to repair; restarts an earlier pass still owes (its unit did not come
        // back, it was held back, or the pass was killed after installing) are done now.
        let owed = records::or_set_aside(state, "restarts.json", owed::load(state))?;
        return Ok(!owed.is_empty());
    }
    let _lock = StateLock::acquire(state, settings.lock_timeout)?
        .with_tree(&settings.written_paths(), settings.lock_timeout)?;
    let left = records::Left::read(state)?;
    let (owed, record) = recover(settings, left, &mut old_cas::OldCas::load(state))?;
    hand_over(settings, &PassOptions::default(), &owed, &owed, &record)?;
    Ok(!owed.is_empty())
}

/// Puts back the static pod manifests that a pass no longer running left out (`by`: a
/// `renew` killed while a pod restarted, or this process's own that panicked): only when
/// the state lock is free at once, since a holder may be restarting that pod right now.
/// Whether any was put back.
pub fn put_back_orphans(state_dir: &std::path::Path, by: &str) -> bool {
    if !restart::static_pods::pending(state_dir) {
        return false;
    }
    let Ok(_lock) = StateLock::acquire(state_dir, std::time::Duration::ZERO) else {
        return false;
    };
    // Looked at again under the lock: the holder may have just put it back itself.
    if !restart::static_pods::pending(state_dir) {
        return false;
    }
    tracing::warn!(
        "a static pod manifest is held out of the manifest directory by {by} (the state lock is free): putting it back"
    );
    let held = restart::static_pods::load(state_dir).context("putting static pod manifests back");
    if let Err(e) = held.and_then(|held| recover_static_pods(state_dir, held)) {
        tracing::error!("{e:#}");
    }
    true
}

/// Puts back static pod manifests a crashed pass left out of the manifest directory
/// (`held`, as its record was read). The caller holds the state lock.
fn recover_static_pods(
    state_dir: &std::path::Path,
    held: Vec<restart::static_pods::Held>,
) -> anyhow::Result<()> {
    let put_back = restart::static_pods::recover(state_dir, held);
    for line in put_back.context("putting static pod manifests back")? {
        tracing::warn!("{line}");
    }
    Ok(())
}
