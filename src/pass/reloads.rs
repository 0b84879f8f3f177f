//! Which renewals wait for their step: a leaf whose watch says `on_renew = "reload"`, read
//! by one etcd member whose files are known, only through settings it reads again on every
//! handshake (`components::reload`), is installed under the restart gate at that member's
//! step and proven in use there (with `rotate_keys`, installed with the member's unit
//! stopped), instead of installed before the stage and the member restarted
//! (`restart::at_step`).

use crate::components::reload::{Proof, rule};
use crate::components::{Kind, NodeReading};
use crate::config::{OnRenew, Settings};
use crate::inventory::{Cert, Inventory};
use crate::plan::Plan;
use crate::restart::at_step::Deferred;
use crate::restart::owed::{self, Owed};
use crate::restart::sequence::Target;
use crate::restart::targets;

/// Takes out of `plan` the renewals that wait for their step, by step; and the restarts
/// they call for besides (units whose files are not known, restarted for every renewal of
/// their watch as without reloads).
pub(super) fn defer(
    settings: &Settings,
    node: &NodeReading,
    inv: &Inventory,
    plan: &mut Plan,
) -> (Vec<(Target, Vec<Deferred>)>, Owed) {
    let mut steps: Vec<(Target, Vec<Deferred>)> = Vec::new();
    let mut also = Owed::default();
    for item in plan.items.iter_mut().filter(|i| i.renew) {
        let c = &inv.certs[item.cert];
        let Ok(Way {
            step: target,
            also: more,
        }) = way(settings, node, c)
        else {
            continue;
        };
        also.merge(more);
        item.renew = false;
        let d = Deferred {
            cert: item.cert,
            path: c.path.clone(),
            watch: c.watch,
        };
        match steps.iter_mut().find(|(t, _)| *t == target) {
            Some((_, list)) => list.push(d),
            None => steps.push((target, vec![d])),
        }
    }
    (steps, also)
}

/// A renewal installed at its reader's step.
#[derive(Debug)]
pub struct Way {
    /// The step of the one component that reads it.
    pub step: Target,
    /// The units restarted for it besides: their files are not known (systemd did not
    /// say what they run), so every renewal of their watch restarts them.
    pub also: Owed,
}

/// How a renewal of `c` reaches what reads it: installed at the step of the one etcd
/// member that reads it, only through settings it reads again on every handshake (that
/// step), or installed before the restart stage and its readers restarted (why).
pub fn way(settings: &Settings, node: &NodeReading, c: &Cert) -> Result<Way, String> {
    if settings.watches[c.watch].on_renew != OnRenew::Reload {
        return Err("its watch says on_renew = \"restart\" (the default)".into());
    }
    if c.facts.is_ca {
        return Err("a CA certificate: what trusts it holds it in memory from its start".into());
    }
    if c.kubeconfig.is_some() {
        return Err("a kubeconfig's credentials: read at its reader's start".into());
    }
    let owed = targets::of_certs(settings, node, &[(c.watch, c.path.clone())]);
    if !owed.commands.is_empty() {
        return Err("its watch runs a post_renew_command for it".into());
    }
    // Those whose files are known read it; the others are restarted for every renewal of
    // their watch, whatever the way.
    let (readers, also): (Vec<Target>, Vec<Target>) =
        owed::targets(&owed).into_iter().partition(|t| {
            t.in_reading(node, &settings.manifests_dir)
                .is_some_and(|c| c.unknown.is_none())
        });
    let [target] = <[Target; 1]>::try_from(readers.clone()).map_err(|_| {
        let names: Vec<String> = readers.iter().map(ToString::to_string).collect();
        match names.is_empty() {
            true => "no component whose files are known reads it".to_string(),
            false => format!("more than one component reads it: {}", names.join(", ")),
        }
    })?;
    let not_proven = |why: &str| Err(format!("{target}: {why}"));
    let Some(component) = target.in_reading(node, &settings.manifests_dir) else {
        return not_proven("the node's reading has no such component");
    };
    if component.kind != Some(Kind::Etcd) {
        return not_proven("certrenewd proves the reload of etcd's certificates only");
    }
    if settings.rotate_keys && matches!(target, Target::Pod(_)) {
        return not_proven("rotate_keys: a static pod is restarted for its new key pairs");
    }
    let settings_naming: Vec<&str> = (component.files.iter())
        .filter(|(_, p)| *p == c.path)
        .map(|(s, _)| s.as_str())
        .collect();
    if settings_naming.is_empty() {
        return not_proven("no setting of it names the file");
    }
    match (settings_naming.iter())
        .find(|s| !rule(Kind::Etcd, s).is_some_and(|r| matches!(r.proof, Proof::Serves { .. })))
    {
        Some(s) => not_proven(&format!(
            "--{s} is not a certificate it serves and reads again on every handshake"
        )),
        None => Ok(Way {
            step: target,
            also: Owed {
                units: (also.iter())
                    .filter_map(|t| match t {
                        Target::Unit(u) => Some(u.clone()),
                        Target::Pod(_) => None,
                    })
                    .collect(),
                pods: (also.iter())
                    .filter_map(|t| match t {
                        Target::Pod(p) => Some(p.clone()),
                        Target::Unit(_) => None,
                    })
                    .collect(),
                ..Owed::default()
            },
        }),
    }
}
