//! Restarting static pods the way kubelet understands: each manifest is moved out of the
//! manifest directory to a holding place in `state_dir` (kubelet stops the pod), left there
//! until the pod's process is seen to end (or long enough for kubelet to notice, where
//! that cannot be seen), then moved back byte for byte (kubelet starts the pod again with
//! the renewed certificates).
//!
//! The restart stage moves one manifest at a time (`sequence.rs`): never is every static pod
//! of the node down together.
//!
//! `state_dir/static-pods.json` names every manifest held before the first one moves (and
//! keeps naming one that could not be put back), so a crash in between is repaired by
//! [`recover`] on the next start: nothing stays out.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Fence;
use super::serving::NotEnded;
use crate::config::Watch;
use crate::fsutil::{self, FileMeta, StateFile};

/// The outcome of restarting one static pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRestart {
    /// The static pod's name as configured (`kube-apiserver`).
    pub pod: String,
    /// Its manifest.
    pub manifest: PathBuf,
    /// The manifest went out and came back unchanged.
    pub ok: bool,
    /// A sentence for people and alarms.
    pub detail: String,
    /// Nothing was restarted: the manifest never left, or left and came back while the
    /// pod's process went on (kubelet did not stop it). The pod runs as before, on what it
    /// read before the renewal: nothing to roll back, and the restart is owed.
    pub not_restarted: bool,
}

/// One manifest out of the manifest directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Held {
    /// Where it belongs.
    manifest: PathBuf,
    /// Where it is kept meanwhile.
    holding: PathBuf,
}

fn record(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "static-pods.json")
}

fn holding_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("static-pods")
}

/// The static pods of `watch` with their manifests in `dir`. Of the kubeadm defaults, only
/// those whose manifest exists.
pub fn of_watch(dir: &Path, watch: &Watch) -> Vec<(String, PathBuf)> {
    watch
        .static_pods
        .iter()
        .map(|p| (p.clone(), Watch::manifest_path(dir, p)))
        .filter(|(_, m)| !watch.static_pods_default || m.is_file())
        .collect()
}

/// The manifests held out of the manifest directory, as the record says (none: no record).
pub fn load(state_dir: &Path) -> anyhow::Result<Vec<Held>> {
    let corrupt = format!(
        ": put the manifests it names back from {} by hand, then remove it",
        holding_dir(state_dir).display()
    );
    Ok(record(state_dir).read(&corrupt)?.unwrap_or_default())
}

fn save(state_dir: &Path, held: &[Held]) -> anyhow::Result<()> {
    record(state_dir).write_or_remove(&held, held.is_empty())
}

/// Moves `from` to `to` (a file that must not exist yet), byte for byte with its mode and
/// owner: a rename on the same filesystem, else a durable copy and then the removal.
fn move_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    if to.exists() {
        anyhow::bail!("{} already exists: not overwritten", to.display());
    }
    let renamed = crate::failpoint::io("static-pod-move").and_then(|()| fs::rename(from, to));
    match renamed {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let bytes =
                crate::fsutil::read(from).with_context(|| format!("reading {}", from.display()))?;
            let meta = FileMeta::of(from)?;
            fsutil::replace(to, &bytes, &meta)?;
            fs::remove_file(from).with_context(|| format!("removing {}", from.display()))?;
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("moving {} to {}", from.display(), to.display()));
        }
    }
    crate::failpoint::io("static-pod-move-sync")
        .with_context(|| format!("syncing the directories of {}", to.display()))?;
    for dir in [from.parent(), to.parent()].into_iter().flatten() {
        fsutil::sync_dir(dir)?;
    }
    Ok(())
}

/// Where a manifest is after a move from `from` to `to` returned `error`: an error after the
/// rename (a directory's fsync) leaves it moved, one before leaves it where it was. Judged
/// from the file system, never from the error alone.
fn moved_despite(from: &Path, to: &Path, error: &anyhow::Error) -> bool {
    let moved = !from.exists() && to.is_file();
    if moved {
        tracing::warn!(
            "{} moved to {}, but {error:#}; taken as moved",
            from.display(),
            to.display()
        );
    }
    moved
}

fn put_back(h: &Held) -> anyhow::Result<()> {
    if h.manifest.exists() {
        let here = crate::fsutil::read(&h.manifest).unwrap_or_default();
        let held = crate::fsutil::read(&h.holding).unwrap_or_default();
        if here == held {
            fs::remove_file(&h.holding)
                .with_context(|| format!("removing {}", h.holding.display()))?;
            return Ok(());
        }
        anyhow::bail!(
            "{} was put there meanwhile and differs from the one certrenewd held; the held copy stays in {}",
            h.manifest.display(),
            h.holding.display()
        );
    }
    match move_file(&h.holding, &h.manifest) {
        Err(e) if !moved_despite(&h.holding, &h.manifest, &e) => Err(e),
        _ => Ok(()),
    }
}

/// Whether a restart was interrupted (a record of held manifests exists).
pub fn pending(state_dir: &Path) -> bool {
    record(state_dir).path().exists()
}

/// Puts back every manifest a crashed pass left in the holding place (`held`, as the record
/// was read). Returns what was done, one sentence per manifest.
pub fn recover(state_dir: &Path, held: Vec<Held>) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stuck = Vec::new();
    for h in held {
        if !h.holding.exists() {
            if !h.manifest.exists() {
                out.push(format!(
                    "{}: neither in place nor held in {}; restore it by hand",
                    h.manifest.display(),
                    h.holding.display()
                ));
            }
            continue; // it never left, or it is already back
        }
        match put_back(&h) {
            Ok(()) => out.push(format!(
                "{} put back after an interrupted static pod restart",
                h.manifest.display()
            )),
            Err(e) => {
                out.push(format!("{}: {e:#}", h.manifest.display()));
                stuck.push(h);
            }
        }
    }
    save(state_dir, &stuck)?;
    Ok(out)
}

/// Restarts the static pods given together: every manifest out (in order), one wait for
/// `ended` (`Ok`: how their processes were seen to end; `Err`: why they were not), every
/// manifest back (same order). A manifest that cannot leave, or whose pod did not end, is
/// reported not restarted, and so is every manifest once `fence`, asked right before each
/// one moves, refuses. A manifest an earlier call could not put back stays in the record.
pub async fn restart(
    state_dir: &Path,
    pods: &[(String, PathBuf)],
    fence: &Fence,
    ended: impl AsyncFnOnce() -> Result<String, NotEnded>,
) -> Vec<PodRestart> {
    let mut results: Vec<PodRestart> = Vec::new();
    let plan = holds(state_dir, pods, &mut results);
    if plan.is_empty() {
        return results;
    }
    // Intent first: after a crash from here on, recover() puts every manifest back.
    let earlier = load(state_dir);
    let record = earlier.as_ref().map(|earlier| {
        let new = plan.iter().map(|(_, h)| h.clone());
        earlier.iter().cloned().chain(new).collect::<Vec<Held>>()
    });
    let saved = match record {
        Ok(record) => {
            fsutil::private_dir(&holding_dir(state_dir)).and_then(|()| save(state_dir, &record))
        }
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    let earlier = earlier.unwrap_or_default();
    if let Err(e) = saved {
        let why = format!("cannot record the restart, manifest left in place: {e:#}");
        results.extend(
            plan.iter()
                .map(|(pod, h)| not_restarted(pod, &h.manifest, &why)),
        );
        return results;
    }
    let mut out: Vec<(&str, Held)> = Vec::new();
    for (pod, h) in plan {
        if let Err(why) = fence.check() {
            let why = format!("not restarted: {why}; its manifest stayed in place");
            results.push(not_restarted(pod, &h.manifest, &why));
            continue;
        }
        match move_file(&h.manifest, &h.holding) {
            Ok(()) => {
                tracing::info!(pod, manifest = %h.manifest.display(), "static pod manifest moved out");
                out.push((pod, h));
            }
            Err(e) if moved_despite(&h.manifest, &h.holding, &e) => out.push((pod, h)),
            Err(e) => {
                // A copy across filesystems may have been made before the error: the
                // manifest is still in place, so the copy is not ours to keep.
                if h.holding.is_file()
                    && fsutil::read(&h.holding).ok() == fsutil::read(&h.manifest).ok()
                {
                    let _ = fs::remove_file(&h.holding);
                }
                results.push(not_restarted(
                    pod,
                    &h.manifest,
                    &format!("cannot move the manifest out, so it stayed in place: {e:#}"),
                ));
            }
        }
    }
    crate::failpoint!("static-pods-out");
    let ended = match out.is_empty() {
        true => Ok(String::new()),
        false => ended().await,
    };
    results.extend(put_all_back(state_dir, earlier, out, &ended));
    // Report in the configured order.
    results.sort_by_key(|r| pods.iter().position(|(_, m)| *m == r.manifest));
    results
}

fn failed(pod: &str, manifest: &Path, detail: &str) -> PodRestart {
    PodRestart {
        pod: pod.to_string(),
        manifest: manifest.to_path_buf(),
        ok: false,
        detail: detail.to_string(),
        not_restarted: false,
    }
}

fn not_restarted(pod: &str, manifest: &Path, detail: &str) -> PodRestart {
    PodRestart {
        not_restarted: true,
        ..failed(pod, manifest, detail)
    }
}

/// Where each distinct manifest will be held; a missing manifest is reported in `results`.
fn holds<'a>(
    state_dir: &Path,
    pods: &'a [(String, PathBuf)],
    results: &mut Vec<PodRestart>,
) -> Vec<(&'a str, Held)> {
    let mut plan: Vec<(&str, Held)> = Vec::new();
    for (pod, manifest) in pods {
        if plan.iter().any(|(_, h)| h.manifest == *manifest)
            || results.iter().any(|r| r.manifest == *manifest)
        {
            continue;
        }
        if !manifest.is_file() {
            let why = format!("manifest {} not found", manifest.display());
            results.push(failed(pod, manifest, &why));
            continue;
        }
        let name = manifest.file_name().unwrap_or_default();
        let holding = holding_dir(state_dir).join(name);
        plan.push((
            pod,
            Held {
                manifest: manifest.clone(),
                holding,
            },
        ));
    }
    plan
}

/// Puts every held manifest back; what cannot go back stays recorded for the next start,
/// with what an earlier call could not put back. `ended` says whether their pods ended
/// while out.
fn put_all_back(
    state_dir: &Path,
    mut stuck: Vec<Held>,
    out: Vec<(&str, Held)>,
    ended: &Result<String, NotEnded>,
) -> Vec<PodRestart> {
    let mut results = Vec::new();
    for (pod, h) in out {
        match put_back(&h) {
            Ok(()) => {
                tracing::info!(pod, manifest = %h.manifest.display(), "static pod manifest back in place");
                let dir = h.manifest.parent().unwrap_or(Path::new("")).display();
                results.push(match ended {
                    Ok(how) => PodRestart {
                        ok: true,
                        ..failed(
                            pod,
                            &h.manifest,
                            &format!("manifest out of {dir} and back: {how}"),
                        )
                    },
                    Err(why) => not_restarted(
                        pod,
                        &h.manifest,
                        &format!("{why}; its manifest is back in {dir}"),
                    ),
                });
            }
            Err(e) => {
                tracing::error!(pod, manifest = %h.manifest.display(), "static pod manifest not put back: {e:#}");
                let why = format!("manifest not put back (retried at the next start): {e:#}");
                results.push(failed(pod, &h.manifest, &why));
                stuck.push(h);
            }
        }
    }
    if let Err(e) = save(state_dir, &stuck) {
        tracing::error!("updating {}: {e:#}", record(state_dir).path().display());
    }
    results
}

#[cfg(test)]
mod tests;
