//! What a pass starts from, made from the settings: the planner's policy, the renewer's
//! options, and the scan of the watches with its plan.

use std::path::Path;

use time::OffsetDateTime;

use super::{PassOptions, records};
use crate::components::NodeReading;
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::inventory::checked::Checked;
use crate::plan::{Plan, Policy};
use crate::renew::RenewOptions;

/// The planner's policy for a pass.
pub fn policy(settings: &Settings, opts: &PassOptions) -> Policy {
    Policy {
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

/// The renewer's options from settings; a CA is agreed on through etcd as `node` (the
/// pass's reading) says this node reaches it.
pub fn renew_options(
    settings: &Settings,
    stop: &crate::coordinate::Stop,
    node: &NodeReading,
) -> RenewOptions {
    RenewOptions {
        rotate_keys: settings.rotate_keys,
        renew_before_days: settings.renew_before_days,
        state_dir: settings.state_dir.clone(),
        backup_dir: settings.backup_dir.clone(),
        roots: settings.watches.iter().map(|w| w.path.clone()).collect(),
        backup_keep: settings.backup_keep,
        backup_max_age_days: settings.backup_max_age_days,
        ca_agreement: Some(std::sync::Arc::new(crate::coordinate::EtcdCaAgreement {
            conf: settings.coordination.clone(),
            state_dir: settings.state_dir.clone(),
            stop: stop.clone(),
            node: node.clone(),
        })),
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
