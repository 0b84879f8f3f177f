//! The restart gate the unit tests of the pipeline use: it says yes, or holds where told,
//! and records every question it was asked.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::step::{Component, Step};
use super::{Fence, Gate, Hold};

/// A gate that records every call and refuses where told; at each call it also notes which
/// of kubeadm's manifests are out of the manifest directory, when given it.
#[derive(Clone, Default)]
pub struct RecordingGate {
    pub log: Arc<Mutex<Vec<String>>>,
    /// Every step held with this, before anything else is looked at.
    pub refuse_every: Option<Hold>,
    pub refuse_before: Option<String>,
    /// Every step of this component held as unhealthy: etcd's for a member not healthy
    /// enough for it, the API server's for no other API server ready.
    pub unhealthy: Option<Component>,
    pub refuse_after: Option<String>,
    pub manifests: Option<PathBuf>,
    /// The lock lost after `before` said yes, before the job is queued.
    pub fence_lost: bool,
    /// Every step let through is only a start of what is down, made without the lock.
    pub start_only: bool,
}

impl RecordingGate {
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn note(&self, line: String) {
        let out = match &self.manifests {
            Some(dir) => missing(dir),
            None => Vec::new(),
        };
        let line = match out.is_empty() {
            true => line,
            false => format!("{line} (out: {})", out.join(", ")),
        };
        self.log.lock().unwrap().push(line);
    }
}

/// Which of kubeadm's three control-plane manifests are out of `dir`.
pub fn missing(dir: &Path) -> Vec<String> {
    ["etcd", "kube-apiserver", "kube-scheduler"]
        .into_iter()
        .filter(|p| !dir.join(format!("{p}.yaml")).exists())
        .map(String::from)
        .collect()
}

impl Gate for RecordingGate {
    async fn before(&mut self, step: &Step) -> Result<(), Hold> {
        self.note(format!("before {}", step.target));
        if let Some(hold) = &self.refuse_every {
            return Err(hold.clone());
        }
        match self.unhealthy {
            Some(c @ Component::Etcd) if step.component == c => {
                return Err(Hold::Unhealthy("member m2 is not healthy".into()));
            }
            Some(c) if step.component == c => {
                return Err(Hold::Unhealthy("no other API server is ready".into()));
            }
            _ => {}
        }
        match self.refuse_before.as_deref() == Some(&step.target.to_string()) {
            true => Err(Hold::Refused("the restart lock was not had in time".into())),
            false => Ok(()),
        }
    }

    async fn after(&mut self, step: &Step, ok: bool) -> Result<(), Hold> {
        self.note(format!("after {} ok={ok}", step.target));
        match self.refuse_after.as_deref() == Some(&step.target.to_string()) {
            true => Err(Hold::Unhealthy("the local member did not catch up".into())),
            false => Ok(()),
        }
    }

    async fn finish(&mut self) {
        self.note("finish".into());
    }

    fn start_only(&self) -> bool {
        self.start_only
    }

    fn fence(&self) -> Fence {
        match self.fence_lost {
            true => Fence::new(|| {
                Err(Hold::LockLost(
                    "the restart lock's lease was not confirmed".into(),
                ))
            }),
            false => Fence::default(),
        }
    }
}
