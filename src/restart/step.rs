//! What one step of the restart stage restarts, and which control-plane component that is:
//! the vocabulary the sequence, the serving check, the gate and the reports share.

use std::fmt;
use std::path::Path;

use crate::components::NodeReading;
use crate::config::Watch;

/// What one step restarts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A systemd unit, e.g. `etcd.service`.
    Unit(String),
    /// A static pod by manifest name, e.g. `kube-apiserver`.
    Pod(String),
}

impl Target {
    /// What it runs, as the node's reading `node` has it (a static pod by its manifest in
    /// `manifests_dir`).
    pub fn in_reading<'n>(
        &self,
        node: &'n NodeReading,
        manifests_dir: &Path,
    ) -> Option<&'n crate::components::Component> {
        match self {
            Target::Unit(u) => node.unit(u),
            Target::Pod(p) => node.pod(&Watch::manifest_path(manifests_dir, p)),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unit(u) => f.write_str(u),
            Target::Pod(p) => write!(f, "static pod {p}"),
        }
    }
}

/// The control-plane component a step belongs to, in restart order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    /// etcd: a unit named `etcd*.service` or the static pod `etcd`.
    Etcd,
    /// kube-apiserver: a unit named `kube-apiserver*.service` or the static pod `kube-apiserver`.
    ApiServer,
    /// Everything else.
    Other,
}

impl Component {
    /// The component of `target`, from its name.
    pub fn of(target: &Target) -> Component {
        let (name, exact) = match target {
            Target::Unit(u) => (u.strip_suffix(".service").unwrap_or(""), false),
            Target::Pod(p) => (p.as_str(), true),
        };
        let is = |c: &str| match exact {
            true => name == c,
            false => name.starts_with(c),
        };
        match () {
            () if is("etcd") => Component::Etcd,
            () if is("kube-apiserver") => Component::ApiServer,
            () => Component::Other,
        }
    }
}

/// One restart of the stage.
#[derive(Clone, Debug)]
pub struct Step {
    /// What is restarted.
    pub target: Target,
    /// Which component it is.
    pub component: Component,
}

impl Step {
    /// The step restarting `target`.
    pub fn new(target: Target) -> Step {
        let component = Component::of(&target);
        Step { target, component }
    }
}
