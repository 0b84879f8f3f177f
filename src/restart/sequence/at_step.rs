//! Renewals installed at their step, under the restart gate: a file that its components
//! read again by themselves (etcd's serving and peer certificates, on every handshake) is
//! in use the moment it is installed, so installing it is restarting them. It is renewed
//! and installed when the gate lets its step go (the quorum checked before it, the
//! member's health after it, one controller at a time), then proven in use where the
//! component serves it (`reload_proof::prove_file`) instead of restarting it. Not shown in use:
//! the step restarts after all. Shown and refused as its clients would refuse it: the
//! file is rolled back, which the component takes in the same way, and the renewal failed.
//! With new keys (`rotate_keys`) the key and the certificate are two renames a handshake
//! could fall between, so the step's unit is stopped for the install and started after it
//! (`install_stopped`).

use std::path::PathBuf;
use std::time::Duration;

use super::{Hold, Ran, Restarter};
use crate::components::Kind;
use crate::components::reload_rules::{Version, rule};
use crate::renew::pending::{self, Change};
use crate::renew::{RenewOutcome, RenewResult};
use crate::restart::reload_proof::{self, NotProven, Unproven};
use crate::restart::step::{Step, Target};
use crate::restart::{Fence, StopFailed, UnitControl};

/// How long a file read on every handshake may take to be shown in use: the next
/// handshake shows it, so this only rides out a member that is slow to answer.
const BOUND: Duration = Duration::from_secs(10);

/// A certificate whose install waits for its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferred {
    /// Index into `Inventory::certs`.
    pub cert: usize,
    /// The certificate file.
    pub path: PathBuf,
    /// Its watch.
    pub watch: usize,
}

/// Renews and installs the certificates given (inventory indexes), now: their outcomes.
pub type Renewer<'a> = Box<dyn Fn(&[usize]) -> Vec<RenewOutcome> + Send + Sync + 'a>;

/// The renewals installed at their steps, and the renewer that installs them.
pub struct AtStep<'a> {
    /// Per step, the certificates installed at it.
    pub steps: Vec<(Target, Vec<Deferred>)>,
    /// The steps that restart besides, for other files they read: installed, then
    /// restarted.
    pub restart_too: Vec<Target>,
    /// Renews and installs the certificates given (inventory indexes), now.
    pub renew: Renewer<'a>,
    /// The renewals come with new keys (`rotate_keys`): a key and its certificate are two
    /// renames, and a reader on every handshake between them would load a pair that does
    /// not match, so each step's unit is stopped for its install and started after it.
    pub stop_first: bool,
    /// The install's record `renew` writes, as the pass holds it: once the stage has
    /// recorded what it still owes, the changes settled leave it (`None`: nothing renews).
    pub pending: Option<crate::renew::pending::Record>,
}

impl AtStep<'_> {
    /// Nothing installed at any step.
    pub fn none() -> AtStep<'static> {
        AtStep {
            steps: Vec::new(),
            restart_too: Vec::new(),
            renew: Box::new(|_| Vec::new()),
            stop_first: false,
            pending: None,
        }
    }

    /// The certificates installed at `target`'s step.
    pub fn of(&self, target: &Target) -> Vec<Deferred> {
        (self.steps.iter())
            .find(|(t, _)| t == target)
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    }
}

/// How a step's installs went.
pub(crate) enum Installed {
    /// Nothing was installed (each renewal failed, said in `ran.renewed`).
    Nothing,
    /// Every file installed is shown in use: nothing to restart.
    Proven(String),
    /// A file was shown and refused as its clients would refuse it: the files were rolled
    /// back. The step failed.
    Refused(String),
    /// Installed, and not shown in use (or not provable): restart the step.
    Restart(String),
}

/// `step` was held: the certificates installed at it are not renewed, and stay due for
/// the next pass. Whether the step owes a restart besides (then it is held as one).
pub(crate) fn held(at: Option<&AtStep<'_>>, step: &Step, why: &Hold, ran: &mut Ran) -> bool {
    let Some(at) = at else {
        return true;
    };
    let deferred = at.of(&step.target);
    if deferred.is_empty() {
        return true;
    }
    let why = why.to_string();
    // The cause alone: what the gate says follows (the new files stay installed, the
    // restart is owed) is not so for a file never installed.
    let cause = [
        "; the new files stay installed",
        "; nothing more is restarted",
    ]
    .iter()
    .filter_map(|tail| why.find(tail))
    .min()
    .map_or(why.as_str(), |end| &why[..end]);
    for d in deferred {
        tracing::warn!(path = %d.path.display(), service = %step.target, "{} not renewed: it is installed under the restart lock, at {}, which was held: {cause}", d.path.display(), step.target);
        ran.renewed.push(RenewOutcome {
            cert: d.cert,
            path: d.path.clone(),
            watch: d.watch,
            result: RenewResult::Failed {
                reason: format!(
                    "not renewed: it is installed under the restart lock, at {}, which was held: {cause}; it stays due, and the next pass renews it",
                    step.target
                ),
            },
        });
    }
    at.restart_too.contains(&step.target)
}

/// Whether `step`'s unit was stopped for its install.
pub(crate) enum Stopped {
    /// Not stopped (the fence or systemd refused): it runs as it did, nothing installed.
    No(String),
    /// Stopped, or perhaps on its way down (the stop did not end as asked, then nothing was
    /// installed): it is started again whatever follows.
    Yes,
}

/// Stops `step`'s unit, then renews and installs its certificates with nothing reading
/// them, so no handshake meets a key beside the certificate of another. The caller starts
/// it again.
pub(crate) async fn install_stopped<C: UnitControl>(
    how: &Restarter<'_, C>,
    at: &AtStep<'_>,
    step: &Step,
    fence: Fence,
    ran: &mut Ran,
) -> Stopped {
    let (Target::Unit(unit), Ok(ctrl)) = (&step.target, &how.ctrl) else {
        let why = match &how.ctrl {
            Err(e) => e.to_string(),
            Ok(_) => "a static pod is not stopped for a new key: it restarts".into(),
        };
        return Stopped::No(why);
    };
    let live = crate::live::waiting(format!("{unit} to stop for its new key pair"));
    let stopped = ctrl.stop_fenced(unit, how.timeout, fence).await;
    drop(live);
    match stopped {
        Err(StopFailed::NotStopped(why)) => return Stopped::No(why),
        Err(StopFailed::Unfinished(why)) => {
            tracing::warn!(service = %unit, "{unit} did not stop as asked ({why}): nothing installed, it is started again");
            return Stopped::Yes;
        }
        Ok(()) => tracing::info!(service = %unit, "{unit} stopped to install its new key pairs"),
    }
    renew_now(at, &at.of(&step.target), ran);
    Stopped::Yes
}

/// Renews and installs `deferred` now, each outcome and install in `ran`: what was
/// installed.
fn renew_now(at: &AtStep<'_>, deferred: &[Deferred], ran: &mut Ran) -> Vec<Change> {
    let certs: Vec<usize> = deferred.iter().map(|d| d.cert).collect();
    let outcomes = (at.renew)(&certs);
    let changes: Vec<Change> = (outcomes.iter())
        .filter_map(|o| match &o.result {
            RenewResult::Renewed { change, .. } => Some(change.clone()),
            _ => None,
        })
        .collect();
    ran.renewed.extend(outcomes);
    ran.installed.extend(changes.iter().cloned());
    changes
}

/// Renews and installs `step`'s certificates now; unless `restart` (the step restarts
/// anyway), proves each one in use; a renewed peer certificate is presented to `peers`,
/// the other members' peer URLs.
pub(crate) async fn install<C>(
    how: &Restarter<'_, C>,
    at: &AtStep<'_>,
    step: &Step,
    restart: bool,
    peers: &[String],
    ran: &mut Ran,
) -> Installed {
    let target = &step.target;
    let deferred = at.of(target);
    let component = target.in_reading(&how.serving.node, how.manifests_dir);
    let client = how.serving.client.clone();
    // Proven against the certificate in use first: a proof its old certificate fails
    // (clients that trust another file than the one its settings name, an old certificate
    // already expired) would refuse a good renewal, so the step restarts instead.
    let mut ready = match (restart, component) {
        (true, _) => Err("it is restarted for other files it reads".to_string()),
        (false, None) => Err("the node's reading has no such component".to_string()),
        (false, Some(c)) => Ok((c, etcd_version(c, &client).await)),
    };
    if let Ok((c, version)) = ready {
        for d in &deferred {
            let before =
                reload_proof::prove_file(c, &d.path, version, false, client.clone(), BOUND);
            if let Err(e) = before.await {
                ready = Err(format!(
                    "its certificate in use is not shown as its clients take it, so the renewed one cannot be ({e})"
                ));
                break;
            }
        }
    }
    let changes = renew_now(at, &deferred, ran);
    if changes.is_empty() {
        return Installed::Nothing;
    }
    let (component, version) = match ready {
        Ok(ready) => ready,
        Err(why) => return Installed::Restart(why),
    };
    // A renewal its clients would refuse that the checks before the install let through (a
    // fault of the renewer's own): the tests' way to one.
    if let Err(e) = crate::failpoint::io("reload-proof") {
        return refuse(step, &changes, e.to_string(), ran);
    }
    let mut shown = Vec::new();
    for c in &changes {
        match reload_proof::prove_file(component, &c.cert, version, false, client.clone(), BOUND)
            .await
        {
            Ok(lines) => shown.extend(lines),
            Err(Unproven::Refused(e)) => return refuse(step, &changes, e.to_string(), ran),
            Err(e) => {
                return Installed::Restart(format!("{}: {e}", c.cert.display()));
            }
        }
    }
    match peers_accept(component, &changes, peers).await {
        Ok(lines) => shown.extend(lines),
        Err(e @ reload_proof::NotProven::PairRefused { .. }) => {
            return refuse(step, &changes, e.to_string(), ran);
        }
        Err(e) => return Installed::Restart(e.to_string()),
    }
    let done = format!(
        "read again, no restart: {} (etcd {})",
        shown.join("; "),
        version.map_or_else(|| "?".into(), |v| v.to_string())
    );
    tracing::info!(service = %target, "{target} reloaded: {done}");
    Installed::Proven(done)
}

/// The renewed peer certificate of the etcd member `c`, when it is also the member's
/// client certificate to its peers (it allows clientAuth), presented as such to the first
/// of the other members at `peers` (their peer URLs) that answers, verified against
/// `--peer-trusted-ca-file`; with none answering (or none listed: a cluster of one, or no
/// coordination), to the member's own peer listener, which checks it as its peers do. A
/// renewal its peers refuse would cut the member off from them at its next connection.
/// How it was accepted, or why not.
async fn peers_accept(
    c: &crate::components::Component,
    changes: &[Change],
    peers: &[String],
) -> Result<Vec<String>, reload_proof::NotProven> {
    let (Some(cert), Some(key)) = (c.file("peer-cert-file"), c.file("peer-key-file")) else {
        return Ok(Vec::new());
    };
    if !changes.iter().any(|ch| ch.cert == cert) {
        return Ok(Vec::new());
    }
    let unreadable =
        |e: String| reload_proof::NotProven::Unreadable(format!("{}: {e}", cert.display()));
    let data = crate::fsutil::read(cert).map_err(|e| unreadable(format!("{e:#}")))?;
    let facts = crate::format::cert::CertFacts::first_in_pem(&data)
        .map_err(|e| unreadable(e.to_string()))?;
    if !facts.client_auth {
        return Ok(Vec::new());
    }
    let said = |how: String| vec![format!("{} as a peer's client: {how}", cert.display())];
    if let Some(trust) = c.file("peer-trusted-ca-file") {
        let others = (peers.iter()).filter_map(|u| crate::format::flags::host_port(u));
        for (host, port) in others {
            let at = crate::served::shown::Shown {
                cert: cert.to_path_buf(),
                addr: match host.contains(':') {
                    true => format!("[{host}]:{port}"),
                    false => format!("{host}:{port}"),
                },
                name: host,
                trust: trust.to_path_buf(),
                from: "the member list".into(),
            };
            let at = reload_proof::Checker::etcd(at);
            match reload_proof::accepts_at(&at, cert, reload_proof::pair_of(cert, key)?).await {
                Err(
                    NotProven::Unreachable { endpoint, why }
                    | NotProven::NotListening { endpoint, why },
                ) => {
                    tracing::info!("peer {endpoint} not asked about {}: {why}", cert.display());
                }
                shown => return shown.map(said),
            }
        }
    }
    let Some(rule) = rule(Kind::Etcd, "peer-cert-file") else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    for at in crate::served::shown::by_address(c, rule) {
        let at = reload_proof::Checker::etcd(at);
        let how = reload_proof::accepts_at(&at, cert, reload_proof::pair_of(cert, key)?).await?;
        lines.extend(said(how));
    }
    Ok(lines)
}

/// The version the etcd member `c` answers, asked where it serves its client certificate
/// with `client`; none when it does not answer (then its files restart it).
async fn etcd_version(
    c: &crate::components::Component,
    client: &Option<(PathBuf, PathBuf)>,
) -> Option<Version> {
    let (cert, key) = client.as_ref()?;
    if c.kind != Some(Kind::Etcd) {
        return None;
    }
    let at = crate::served::shown::shown(c, rule(Kind::Etcd, "cert-file")?).ok()?;
    let first = at.first()?;
    let url = format!("https://{}", first.addr);
    reload_proof::etcd_accepts(&[url], &first.trust, cert, key)
        .await
        .ok()
        .flatten()
}

/// A file was refused as its clients would refuse it: every file of the step is put back
/// (the component takes the old one in as it took the new one), and the step failed.
fn refuse(step: &Step, changes: &[Change], why: String, ran: &mut Ran) -> Installed {
    for (cert, result) in pending::roll_back(changes) {
        match result {
            Ok(()) => {
                ran.refused_certs.push((cert.clone(), why.clone()));
                ran.restored.push(cert);
            }
            Err(e) => ran.not_restored.push((cert, format!("{e:#}"))),
        }
    }
    ran.installed.retain(|c| !changes.contains(c));
    let undone = super::Undone::Refused(step.target.clone(), why.clone());
    tracing::error!(service = %step.target, "{undone}");
    ran.rolled_back.push(undone);
    Installed::Refused(why)
}

/// Whether `target`'s step installs certificates.
pub(crate) fn has(at: &AtStep<'_>, target: &Target) -> bool {
    !at.of(target).is_empty()
}

/// Whether `target`'s step restarts besides.
pub(crate) fn restarts_too(at: &AtStep<'_>, target: &Target) -> bool {
    at.restart_too.contains(target)
}
