//! Which renewals wait for their step: a leaf whose watch says `on_renew = "reload"`, with
//! its key kept, read only by one etcd member and only through settings it reads again on
//! every handshake (`components::reload`), is installed under the restart gate at that
//! member's step and proven in use there, instead of installed before the stage and the
//! member restarted (`restart::at_step`).

use crate::components::reload::{Proof, rule};
use crate::components::{Kind, NodeReading};
use crate::config::{OnRenew, Settings};
use crate::inventory::Inventory;
use crate::plan::Plan;
use crate::restart::at_step::Deferred;
use crate::restart::owed;
use crate::restart::sequence::Target;
use crate::restart::targets;

/// Takes out of `plan` the renewals that wait for their step, by step.
pub(super) fn defer(
    settings: &Settings,
    node: &NodeReading,
    inv: &Inventory,
    plan: &mut Plan,
) -> Vec<(Target, Vec<Deferred>)> {
    let mut steps: Vec<(Target, Vec<Deferred>)> = Vec::new();
    if settings.rotate_keys {
        return steps;
    }
    for item in plan.items.iter_mut().filter(|i| i.renew && !i.is_ca) {
        let c = &inv.certs[item.cert];
        if settings.watches[c.watch].on_renew != OnRenew::Reload || c.kubeconfig.is_some() {
            continue;
        }
        let Some(target) = reader(settings, node, c.watch, &c.path) else {
            continue;
        };
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
    steps
}

/// The one step that renewing `path` restarts, when it is an etcd member reading the file
/// only through settings it reads again on every handshake; else none.
fn reader(
    settings: &Settings,
    node: &NodeReading,
    watch: usize,
    path: &std::path::Path,
) -> Option<Target> {
    let owed = targets::of_certs(settings, node, &[(watch, path.to_path_buf())]);
    let [target] = owed::targets(&owed).try_into().ok()?;
    if !owed.commands.is_empty() {
        return None;
    }
    let component = target.in_reading(node, &settings.manifests_dir)?;
    if component.kind != Some(Kind::Etcd) || component.unknown.is_some() {
        return None;
    }
    let mut settings_naming = (component.files.iter())
        .filter(|(_, p)| p == path)
        .peekable();
    settings_naming.peek()?;
    settings_naming
        .all(|(s, _)| rule(Kind::Etcd, s).is_some_and(|r| matches!(r.proof, Proof::Serves { .. })))
        .then_some(target)
}
