//! The order of the restart stage and its gate: one component at a time on a node, etcd
//! first (units named `etcd*.service`, static pod `etcd`), then kube-apiserver, then the
//! rest in the configured order (units before static pods, as kubelet is a unit). Each step
//! is confirmed back before the next starts, and a [`Gate`] is asked before and after each
//! one: cluster-wide coordination implements it; [`Ungated`] is the single-node behaviour.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cri;
use super::serving::{NotServing, Serving};
use super::static_pods::{self, PodRestart};
use super::step::{Component, Step, Target};
use super::{Fence, RestartMode, UnitControl, UnitRestart, dedup};
use crate::components::{Kind, NodeReading};
use crate::config::{Program, Watch};
use crate::renew::RenewOutcome;
use crate::renew::pending::Change;
use at_step::{AtStep, Installed, Stopped};

pub mod at_step;

/// Why a gate holds a restart back: the kind for a caller to branch on, the text (each
/// variant's Display) for the operator, naming what was seen and what happens next.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    /// The cluster said no: the restart lock was not had in time, etcd refused, or the
    /// cluster cannot be agreed on now.
    #[error("{0}")]
    Refused(String),
    /// The restart lock is no longer known to be this node's: another node may hold it.
    #[error("{0}")]
    LockLost(String),
    /// An etcd member is not healthy enough for this restart, or not after it.
    #[error("{0}")]
    Unhealthy(String),
    /// The step restarted did not come back.
    #[error("{0}")]
    NotBack(String),
    /// The process is stopping: a wait was ended, and what is left stays owed
    /// ([`crate::stop::Stop::reason`]).
    #[error("{0}")]
    Stopping(String),
    /// Not restarted, as said (systemd not reached, a manifest that did not leave, a pod
    /// whose process did not end, a runtime that cannot clear a start): it runs as it did,
    /// so nothing is rolled back and the restart stays owed.
    #[error(
        "{0}; nothing was restarted, so nothing is rolled back: the renewed files stay and the restart is owed to the next pass"
    )]
    NotRestarted(String),
    /// Restarted, and the wait for it to serve was ended by a stop request (the stop's
    /// reason): whether it serves the new certificate is not known.
    #[error("restarted, but {0}: whether it serves the new certificate was not waited for")]
    NotWaitedFor(String),
    /// Not stopped for its new key pairs (the fence or systemd refused): nothing installed.
    #[error("{0}")]
    NotStopped(String),
    /// A renewal installed at an earlier step was refused as its clients would refuse it
    /// and rolled back: what follows waits for the next pass.
    #[error("{target}: a renewed certificate was refused and rolled back: {why}")]
    RenewalRefused { target: Target, why: String },
    /// A dry run's: the pass would hold it, for the cause said.
    #[error("would be held: {0}")]
    WouldBe(String),
    /// Owed by an earlier pass, and this pass was told not to restart.
    #[error(
        "owed by an earlier pass, and this pass was told not to restart (--no-restart); the next pass restarts it"
    )]
    NoRestart,
    /// The pass restarts nothing, for the cause said (what it records cannot be recorded).
    #[error("not restarted: {0}")]
    PassHeld(String),
}

/// One thing a roll-back did, said by the 250.003 in its words (the Display, made where the
/// alarm is): a renewed file put back or not, a service started again after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undone {
    /// The previous certificate (and key) is back.
    Restored(PathBuf),
    /// It could not be put back (why): the new pair stays.
    NotRestored(PathBuf, String),
    /// Not put back: the previous certificate expired then, so the new one stays.
    PreviousExpired(PathBuf, time::OffsetDateTime),
    /// A unit started again after the roll-back, and how it went.
    Unit(UnitRestart),
    /// A static pod restarted again after the roll-back, and how it went.
    Pod(PodRestart),
    /// Not started again after the roll-back: the gate held it back.
    Held(Target, Hold),
    /// The step's renewed certificate was refused as its clients would refuse it, and every
    /// file of the step put back (why it was refused).
    Refused(Target, String),
}

/// Why a file is not put back when its previous certificate ended `on`.
pub fn previous_expired(on: time::OffsetDateTime) -> String {
    let on = crate::timefmt::rfc3339(on);
    format!("not rolled back: the previous certificate expired on {on}, so the new one stays")
}

impl std::fmt::Display for Undone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undone::Restored(p) => {
                write!(f, "{} rolled back to the previous certificate", p.display())
            }
            Undone::NotRestored(p, why) => {
                write!(f, "{} could not be rolled back: {why}", p.display())
            }
            Undone::PreviousExpired(p, on) => {
                write!(f, "{} {}", p.display(), previous_expired(*on))
            }
            Undone::Unit(r) => {
                let how = if r.ok { "active again" } else { &r.detail };
                write!(f, "{} after rollback: {how}", r.unit)
            }
            Undone::Pod(r) => write!(f, "static pod {} after rollback: {}", r.pod, r.detail),
            Undone::Held(t, hold) => {
                write!(
                    f,
                    "{t} after rollback: not started again, held back: {hold}"
                )
            }
            Undone::Refused(t, why) => {
                write!(
                    f,
                    "{t}: the renewed certificate was refused, and rolled back: {why}"
                )
            }
        }
    }
}

/// What the restart stage asks before and after each step.
pub trait Gate: Send {
    /// Before `step` is restarted. Err: restart neither it nor anything after it.
    fn before(&mut self, step: &Step) -> impl Future<Output = Result<(), Hold>> + Send;
    /// After `step` was restarted; `ok` says whether it came back. Err: restart nothing
    /// after it.
    fn after(&mut self, step: &Step, ok: bool) -> impl Future<Output = Result<(), Hold>> + Send;
    /// The restart stage is over (after any roll-back): release what was taken.
    fn finish(&mut self) -> impl Future<Output = ()> + Send;
    /// Right before `step` is taken down (restarted, or stopped for its new key pairs),
    /// after `before`: never for a step whose renewals its component reads again by
    /// itself. Nothing by default.
    fn restarting(&mut self, _step: &Step) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Before `step` installs renewals at its turn (after `before`). Err: it installs none
    /// (another controller's clients refused such a renewal).
    fn may_install(&mut self, _step: &Step) -> impl Future<Output = Result<(), Hold>> + Send {
        async { Ok(()) }
    }
    /// A renewal installed at `step` was refused as its clients would refuse it, and rolled
    /// back: the other controllers hold theirs.
    fn refused(&mut self, _step: &Step, _why: &str) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// The node's reading, once the pass has it and before any step: what the node runs
    /// (a unit running etcd, say) is where the gate learns its cluster.
    fn knows(&mut self, _node: &crate::components::NodeReading) {}
    /// Whether the step `before` just let through may only be started, not restarted: this
    /// node's etcd member, down, started without the restart lock (a unit only when it
    /// failed, a static pod only when the container runtime reports no container of it that
    /// runs and nothing listens at its addresses).
    fn start_only(&self) -> bool {
        false
    }
    /// Asked right before each restart job is queued (after `before`).
    fn fence(&self) -> Fence {
        Fence::default()
    }
    /// A client certificate and key etcd accepts, for the check that a restarted member
    /// serves (etcd requiring client certificates logs every handshake without one as
    /// rejected); none without coordination.
    fn probe_client(&self) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        None
    }
    /// The peer URLs the cluster's other etcd members advertise, as listed under the lock:
    /// a renewed peer certificate is presented to them as their peer's client. None
    /// without coordination.
    fn peer_urls(&self) -> Vec<String> {
        Vec::new()
    }
    /// How long the stage waited for the cluster-wide restart lock, once it had it (the
    /// metric `certrenewd_restart_lock_wait_seconds`); none without coordination.
    fn lock_wait(&self) -> Option<Duration> {
        None
    }
    /// What ends the stage's own waits (a restarted server's serving check) when the
    /// process is asked to stop; never, by default.
    fn stop(&self) -> crate::stop::Stop {
        crate::stop::Stop::default()
    }
}

/// Today's behaviour: never refuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ungated;

impl Gate for Ungated {
    async fn before(&mut self, _step: &Step) -> Result<(), Hold> {
        Ok(())
    }

    async fn after(&mut self, _step: &Step, _ok: bool) -> Result<(), Hold> {
        Ok(())
    }

    async fn finish(&mut self) {}
}

/// The steps restarting `units` and `pods`: each once, etcd first, then kube-apiserver, then
/// the rest; within a component, units before static pods, each in the given order.
pub fn steps(units: &[String], pods: &[String]) -> Vec<Step> {
    in_order(given(units, pods))
}

/// Each of `units` and `pods` once, units first, in the given order.
fn given(units: &[String], pods: &[String]) -> Vec<Step> {
    let units = dedup(units).into_iter().map(|u| Target::Unit(u.into()));
    let pods = dedup(pods).into_iter().map(|p| Target::Pod(p.into()));
    units.chain(pods).map(Step::new).collect()
}

/// `steps` by component, stable: the given order within a component.
fn in_order(mut steps: Vec<Step>) -> Vec<Step> {
    steps.sort_by_key(|s| s.component);
    steps
}

/// [`steps`], each component also known from what it runs as the node's reading found it
/// (its command, under `manifests` for a pod), or as a watch says (`said`: a watch's
/// `components`, for what cannot be read): a unit or pod running etcd or kube-apiserver
/// under another name is gated and ordered as one. Each only adds to what the name says:
/// a unit named `etcd*` whose command is a wrapper stays etcd.
pub fn steps_knowing(
    units: &[String],
    pods: &[String],
    node: &NodeReading,
    manifests: &Path,
    said: &[(String, Program)],
) -> Vec<Step> {
    let mut steps = given(units, pods);
    for s in &mut steps {
        let (read, name) = match &s.target {
            Target::Unit(u) => (node.unit(u), u.as_str()),
            Target::Pod(p) => (node.pod(&Watch::manifest_path(manifests, p)), p.as_str()),
        };
        let runs = match read.and_then(|c| c.kind) {
            Some(Kind::Etcd) => Component::Etcd,
            Some(Kind::ApiServer) => Component::ApiServer,
            _ => Component::Other,
        };
        let told = said
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| match p {
                Program::Etcd => Component::Etcd,
                Program::ApiServer => Component::ApiServer,
            });
        s.component = told.fold(s.component.min(runs), Component::min);
    }
    in_order(steps)
}

/// Why the restart stage has no systemd connection to restart units with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoSystemd {
    /// Connecting failed: the causes, on one line.
    #[error("cannot reach systemd over D-Bus: {0}")]
    Unreached(String),
    /// None was made: no unit was to be restarted.
    #[error("no systemd connection")]
    NotConnected,
}

/// How each step is restarted.
pub(crate) struct Restarter<'a, C> {
    /// The systemd connection, or why there is none.
    pub ctrl: Result<&'a C, NoSystemd>,
    pub mode: RestartMode,
    pub timeout: Duration,
    pub state_dir: &'a Path,
    pub manifests_dir: &'a Path,
    pub pod_wait: Duration,
    /// How the step is shown serving before the next one.
    pub serving: Serving,
    /// What the watches say their units and static pods run (their `components`).
    pub said: &'a [(String, Program)],
    /// The renewals installed at their step instead of before the stage.
    pub at_step: Option<&'a AtStep<'a>>,
}

/// What running the steps did, in step order.
#[derive(Debug, Default)]
pub(crate) struct Ran {
    pub units: Vec<UnitRestart>,
    pub pods: Vec<PodRestart>,
    /// The steps the gate held back, with its reason; not restarted.
    pub held: Vec<(Step, Hold)>,
    /// The steps restarted after which the gate's check failed, with its reason.
    pub unmet: Vec<(Step, Hold)>,
    /// The renewals made at their steps, each outcome.
    pub renewed: Vec<RenewOutcome>,
    /// The changes installed at their steps and still in place.
    pub installed: Vec<Change>,
    /// The steps whose files were shown in use, nothing restarted, with how.
    pub reloaded: Vec<(Step, String)>,
    /// The certificates put back because their clients would refuse them, and why.
    pub restored: Vec<PathBuf>,
    pub refused_certs: Vec<(PathBuf, String)>,
    /// The steps whose files were put back so, and why.
    pub refused: Vec<(Step, String)>,
    /// The steps whose files were not shown in use, restarted instead, and why.
    pub fell_back: Vec<(Step, String)>,
    /// Those that could not be put back, and why.
    pub not_restored: Vec<(PathBuf, String)>,
    /// Per step whose files were put back, that it was.
    pub rolled_back: Vec<Undone>,
}

impl Ran {
    /// The units held back, by name.
    pub fn held_units(&self) -> impl Iterator<Item = &str> {
        self.held.iter().filter_map(|(s, _)| match &s.target {
            Target::Unit(u) => Some(u.as_str()),
            Target::Pod(_) => None,
        })
    }

    /// The static pods held back, by name.
    pub fn held_pods(&self) -> impl Iterator<Item = &str> {
        self.held.iter().filter_map(|(s, _)| match &s.target {
            Target::Pod(p) => Some(p.as_str()),
            Target::Unit(_) => None,
        })
    }
}

/// Restarts the steps one after the other, asking `gate` around each; once it refuses,
/// every later step is held back with its reason, except when it holds an etcd restart for
/// the members' health, or an API server's for the others': then that step alone.
pub(crate) async fn run<C: UnitControl>(
    how: &Restarter<'_, C>,
    steps: Vec<Step>,
    gate: &mut impl Gate,
) -> Ran {
    let mut ran = Ran::default();
    let mut refused: Option<Hold> = None;
    for step in steps {
        // Each step may take long: a pass waiting for the state lock waits while they move.
        crate::fsutil::mark_progress(how.state_dir);
        // Asked to stop (a wait ended by it, or between two steps): nothing more is
        // restarted, whichever gate this is.
        if refused.is_none() && how.serving.stop.requested() {
            refused = Some(Hold::Stopping(how.serving.stop.reason()));
        }
        if refused.is_none()
            && let Err(hold) = gate.before(&step).await
        {
            // Too few members healthy for etcd's restart, or no other API server ready for
            // this one's, holds that restart alone: what follows takes neither down, and
            // goes on under the lock.
            if step.component != Component::Other && matches!(hold, Hold::Unhealthy(_)) {
                if at_step::held(how.at_step, &step, &hold, &mut ran) {
                    tracing::warn!(service = %step.target, reason = %hold, "restart of {} held back, owed to the next pass: {hold}", step.target);
                    ran.held.push((step, hold));
                }
                continue;
            }
            refused = Some(hold);
        }
        if let Some(reason) = &refused {
            if !at_step::held(how.at_step, &step, reason, &mut ran) {
                continue;
            }
            // The cause is said with the first step it holds; the others point at it.
            match ran.held.iter().any(|(_, r)| r == reason) {
                true => {
                    tracing::warn!(service = %step.target, "restart of {} held back for the same cause, owed to the next pass", step.target)
                }
                false => {
                    tracing::warn!(service = %step.target, "restart of {} held back, owed to the next pass: {reason}", step.target)
                }
            }
            ran.held.push((step, reason.clone()));
            continue;
        }
        // Renewals installed at this turn, unless another controller's clients refused such
        // a renewal: then none, and the step restarts only if it owes that for other files.
        let mut at = how.at_step.filter(|a| at_step::has(a, &step.target));
        if at.is_some()
            && let Err(hold) = gate.may_install(&step).await
        {
            let restart_too = at_step::held(how.at_step, &step, &hold, &mut ran);
            if !restart_too {
                continue;
            }
            at = None;
        }
        // New key pairs for a reader on every handshake: installed with it stopped, then
        // it is started again, whatever the fence says by then.
        let mut call = match gate.start_only() {
            true => Call::StartFailed,
            false => Call::Restart,
        };
        if let Some(at) = at.filter(|a| a.stop_first) {
            gate.restarting(&step).await;
            match at_step::install_stopped(how, at, &step, gate.fence(), &mut ran).await {
                Stopped::No(why) => {
                    let hold = Hold::NotStopped(why);
                    if at_step::held(how.at_step, &step, &hold, &mut ran) {
                        ran.held.push((step.clone(), hold.clone()));
                    }
                    refused = Some(hold);
                    continue;
                }
                Stopped::Yes => call = Call::StartStopped,
            }
        }
        // Files its components read again by themselves are installed now, under the
        // gate, and shown in use instead of restarting them where they can be.
        if let Some(at) = at.filter(|a| !a.stop_first) {
            let restart_too = at_step::restarts_too(at, &step.target);
            let peers = gate.peer_urls();
            match at_step::install(how, at, &step, restart_too, &peers, &mut ran).await {
                Installed::Nothing if !restart_too => continue,
                Installed::Nothing => {}
                Installed::Proven(how) => {
                    ran.reloaded.push((step.clone(), how));
                    if let Err(hold) = gate.after(&step, true).await {
                        tracing::warn!(service = %step.target, "{} reloaded, but {hold}", step.target);
                        ran.unmet.push((step.clone(), hold.clone()));
                        refused = Some(hold);
                    }
                    continue;
                }
                Installed::Refused(why) => {
                    gate.refused(&step, &why).await;
                    ran.refused.push((step.clone(), why.clone()));
                    // Nothing was taken down; what follows waits for the next pass.
                    refused = Some(Hold::RenewalRefused {
                        target: step.target.clone(),
                        why,
                    });
                    continue;
                }
                Installed::Restart(why) => {
                    tracing::info!(service = %step.target, "{} restarts: {why}", step.target);
                    if !restart_too {
                        ran.fell_back.push((step.clone(), why));
                    }
                }
            }
        }
        let fence = match call {
            Call::StartStopped => Fence::default(),
            Call::StartFailed => gate.fence(),
            Call::Restart => {
                gate.restarting(&step).await;
                gate.fence()
            }
        };
        // Nothing restarted, nothing taken down: nothing for the gate to check after it.
        let Some(ok) = restart_one(how, &step, &mut ran, fence, call).await else {
            continue;
        };
        crate::fsutil::mark_progress(how.state_dir);
        if let Err(hold) = gate.after(&step, ok).await {
            // Said even when nothing follows: a member not healthy after its restart is
            // not a renewal done.
            if ok {
                tracing::warn!(service = %step.target, "{} restarted, but {hold}", step.target);
                ran.unmet.push((step.clone(), hold.clone()));
            }
            refused = Some(hold);
        }
    }
    ran
}

/// What a step's call to systemd or kubelet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// A restart, as `restart_mode` says.
    Restart,
    /// A start of a member that is down, made without the restart lock: only if it failed.
    StartFailed,
    /// A start of a unit this step stopped: always, the fence not asked.
    StartStopped,
}

/// Restarts one step and waits until it is back; whether it came back. None: nothing was
/// restarted, and the step is in `ran.held`.
async fn restart_one<C: UnitControl>(
    how: &Restarter<'_, C>,
    step: &Step,
    ran: &mut Ran,
    fence: Fence,
    call: Call,
) -> Option<bool> {
    let only_start = call == Call::StartFailed;
    match &step.target {
        Target::Unit(unit) => {
            let _live = crate::live::waiting(format!("{unit} to restart"));
            let mode = match call {
                Call::StartFailed => RestartMode::StartFailed,
                // Stopped by this step: a restart starts it (try-restart would not).
                Call::StartStopped => RestartMode::Restart,
                Call::Restart => how.mode,
            };
            let mut r = match &how.ctrl {
                Ok(ctrl) => ctrl.restart_fenced(unit, mode, how.timeout, fence).await,
                Err(e) => UnitRestart {
                    not_restarted: true,
                    ..UnitRestart::failed(unit, e.to_string())
                },
            };
            if r.not_restarted {
                return not_restarted(ran, step, &r.detail);
            }
            if call == Call::StartStopped {
                r.detail = format!(
                    "stopped to install its new key pairs with nothing reading them, then {}",
                    r.detail
                );
            }
            // try-restart leaves an inactive unit so: nothing to serve.
            if r.ok && r.active_state == "active" {
                (r.ok, r.detail) = match serving(how, step, &r.detail).await {
                    Some(done) => done,
                    None => return stopped_waiting(how, ran, step),
                };
            }
            if r.ok && r.job_result.is_none() {
                // Not on this node (try-restart): nothing was restarted, say so.
                tracing::info!(unit, detail = %r.detail, "{unit}: {}", r.detail);
            } else if r.ok {
                tracing::info!(unit, detail = %r.detail, "{} {unit}", mode.done());
            } else {
                tracing::warn!(unit, detail = %r.detail, "restart of {unit} failed: {}", r.detail);
            }
            let ok = r.ok;
            // Left as it was (try-restart, inactive): nothing for the gate to check after.
            let left = ok && r.active_state != "active";
            ran.units.push(r);
            (!left).then_some(ok)
        }
        Target::Pod(pod) => {
            let one = [(pod.clone(), Watch::manifest_path(how.manifests_dir, pod))];
            // Read before the manifest leaves: the addresses are in it.
            let found = how.serving.ports(step, how.manifests_dir);
            let down = how.serving.down_before(&found).await;
            let (node, root) = (&how.serving.node, &how.serving.root);
            if only_start
                && let Err(why) = cri::may_start_unlocked(node, root, how.manifests_dir, pod).await
            {
                return not_restarted(ran, step, &why.to_string());
            }
            if only_start && down.is_none() {
                let seen = match found.is_empty() {
                    true => "its addresses are not known".to_string(),
                    false => {
                        let a: Vec<&str> = found.iter().map(|p| p.addr.as_str()).collect();
                        format!("not all of {} refuse connections", a.join(", "))
                    }
                };
                let why = format!(
                    "static pod {pod} is not seen down ({seen}): only a member that is down is started without the restart lock"
                );
                return not_restarted(ran, step, &why);
            }
            let ended = async || match (&down, found.is_empty()) {
                (None, false) => how.serving.until_ended(&found, how.pod_wait).await,
                // Nothing of its own to see it end by: long enough for kubelet to notice.
                _ => {
                    tokio::time::sleep(how.pod_wait).await;
                    Ok(format!("held out for {:.1} s", how.pod_wait.as_secs_f32()))
                }
            };
            let live = crate::live::waiting(format!("static pod {pod}: its manifest held out"));
            let mut r = static_pods::restart(how.state_dir, &one, &fence, ended).await;
            drop(live);
            if let Some(p) = r.iter().find(|p| p.not_restarted) {
                return not_restarted(ran, step, &p.detail);
            }
            for p in r.iter_mut().filter(|p| p.ok) {
                (p.ok, p.detail) = match &down {
                    Some(why) => (true, format!("{}; {why}", p.detail)),
                    None => match serving(how, step, &p.detail).await {
                        Some(done) => done,
                        None => return stopped_waiting(how, ran, step),
                    },
                };
            }
            let ok = r.iter().all(|p| p.ok);
            ran.pods.extend(r);
            Some(ok)
        }
    }
}

/// `step` was not restarted, as `detail` says (systemd not reached, a manifest that did not
/// leave, a pod whose process did not end): it runs as it did, on what it read before, so
/// nothing is rolled back; the restart is owed, held like one the gate held.
fn not_restarted(ran: &mut Ran, step: &Step, detail: &str) -> Option<bool> {
    let why = Hold::NotRestarted(detail.to_string());
    tracing::warn!(service = %step.target, "restart of {} held back: {why}", step.target);
    ran.held.push((step.clone(), why));
    None
}

/// `step` was restarted and the wait for it to serve was ended by a stop request: whether
/// it serves the new certificate is not known, so nothing is rolled back and its restart
/// stays owed to the next pass, held like one the gate held.
fn stopped_waiting<C>(how: &Restarter<'_, C>, ran: &mut Ran, step: &Step) -> Option<bool> {
    let why = Hold::NotWaitedFor(how.serving.stop.reason());
    tracing::warn!(service = %step.target, "{}: {why}", step.target);
    ran.held.push((step.clone(), why));
    None
}

/// Whether `step`, back as `detail` says, serves; and the detail with how it was shown.
/// None: the wait was ended by a stop request.
async fn serving<C>(how: &Restarter<'_, C>, step: &Step, detail: &str) -> Option<(bool, String)> {
    Some(match how.serving.wait(step, how.manifests_dir).await {
        Ok(how) if how.is_empty() => (true, detail.to_string()),
        Ok(how) => (true, format!("{detail}; {how}")),
        Err(NotServing::Stopping) => return None,
        Err(NotServing::Not(why)) => {
            tracing::warn!(service = %step.target, "{} did not come back: {why}", step.target);
            (false, format!("{detail}, but {why}"))
        }
    })
}

#[cfg(test)]
mod tests;
