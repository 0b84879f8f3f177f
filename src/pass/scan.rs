//! What a pass starts from, made from the settings: the planner's policy, the renewer's
//! options, and the scan of the watches with its plan.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::{PassOptions, records};
use crate::components::NodeReading;
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::inventory::checked::Checked;
use crate::plan::backoff::Ledger;
use crate::plan::{Plan, Policy};
use crate::renew::RenewOptions;

/// The planner's policy for a pass, whose back-off is `back_off`.
pub fn policy(settings: &Settings, opts: &PassOptions, back_off: Ledger) -> Policy {
    Policy {
        back_off,
        renew_before_days: settings.renew_before_days,
        ca_warning_days: settings.ca_warning_days,
        force: opts.force,
        only: opts.only.clone(),
        validity_days: settings.validity_days,
        watch_validity_days: settings.watches.iter().map(|w| w.validity_days).collect(),
        ca_renew_before_days: settings.renew_cas.then_some(settings.ca_renew_before_days),
        watch_ca_renew_before_days: (settings.watches.iter())
            .map(|w| w.ca_renew_before_days)
            .collect(),
        add_missing_names: settings.add_missing_names,
        watch_add_missing_names: settings
            .watches
            .iter()
            .map(|w| w.add_missing_names)
            .collect(),
    }
}

/// The renewer's options from settings; a CA is agreed on through `cas`, as `node` (the
/// pass's reading) says this node reaches the cluster; the renewals write `pending`, the
/// record the pass holds.
pub fn renew_options(
    settings: &Settings,
    cas: &crate::renew::CaAgreements,
    node: &NodeReading,
    pending: &crate::renew::pending::Record,
) -> RenewOptions {
    RenewOptions {
        rotate_keys: settings.rotate_keys,
        renew_before_days: settings.renew_before_days,
        pending: pending.clone(),
        backup_dir: settings.backup_dir.clone(),
        roots: settings.watches.iter().map(|w| w.path.clone()).collect(),
        backup_keep: settings.backup_keep,
        backup_max_age_days: settings.backup_max_age_days,
        ca_agreement: Some(cas(node)),
        fresh: Vec::new(),
    }
}

/// Scans the watches and plans (no lock; changes nothing: a pass that writes records the
/// signatures that verified); the names each certificate is served on come from the node's
/// files and its reading `node`.
pub fn scan_and_plan(
    settings: &Settings,
    policy: &Policy,
    node: &NodeReading,
) -> (Inventory, Plan) {
    let checked = Checked::open(&settings.state_dir);
    let mut inventory = Inventory::scan_watches(&settings.watches, &checked);
    // The pass's own records that were corrupt and set aside: errors until handled.
    inventory
        .errors
        .extend(records::set_aside(&settings.state_dir));
    let served = crate::served::read(&inventory, Path::new("/"), node);
    let plan = crate::plan::plan(&inventory, served, policy, OffsetDateTime::now_utc());
    (inventory, plan)
}

/// `settings` with a watch for the certificate files the node's components' settings name
/// outside every watch, one per directory: what etcd or an API server reads is never left
/// unwatched for want of a watch of its directory (kubespray's `/etc/ssl/etcd/ssl`, named
/// by `/etc/etcd.env`). Each is optional, watches only the files named (with their keys:
/// the directory may hold other hosts' pairs), and restarts the units and static pods that
/// read them.
pub fn watching_named(settings: &Settings, node: &NodeReading) -> Settings {
    use crate::components::Runs;
    use std::collections::BTreeMap;
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    let watched = |f: &Path| {
        let f_real = real(f);
        settings.watches.iter().any(|w| {
            f.starts_with(&w.path)
                || (f_real.as_ref())
                    .is_some_and(|r| real(&w.path).is_some_and(|w| r.starts_with(w)))
        })
    };
    let certificate = |f: &Path| {
        f.extension()
            .is_some_and(|e| ["crt", "pem", "cer", "key"].iter().any(|x| e == *x))
    };
    type Readers = (Vec<PathBuf>, Vec<String>, Vec<String>);
    let mut by_dir: BTreeMap<PathBuf, Readers> = BTreeMap::new();
    let all = node.pods.iter().chain(&node.units);
    for c in all.filter(|c| c.kind.is_some()) {
        let named = c.reads.iter().filter(|f| certificate(f) && f.is_file());
        for f in named.filter(|f| !watched(f)) {
            let Some(dir) = f.parent() else {
                continue;
            };
            let (files, units, pods) = by_dir.entry(dir.to_path_buf()).or_default();
            push_new(files, f.clone());
            match &c.runs {
                Runs::Unit(u) => push_new(units, u.clone()),
                Runs::Pod(_) => push_new(pods, c.name()),
            }
        }
    }
    let mut out = settings.clone();
    for (dir, (files, units, pods)) in by_dir {
        let mut w = crate::config::Watch::new(dir, &[]);
        w.units = units;
        w.static_pods = pods;
        w.static_pods_default = false;
        w.kubeconfigs = Vec::new();
        w.kubeconfigs_default = false;
        w.optional = true;
        w.named = Some(files);
        out.watches.push(w);
    }
    out
}

fn push_new<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}
