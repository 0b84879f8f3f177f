//! What each `verify_endpoints` entry should serve after the restarts: the serials now on
//! disk under its watch, the ones this pass replaced, and a client certificate to present.

use crate::config::Settings;
use crate::inventory::Inventory;
use crate::renew::{RenewOutcome, RenewResult};

use super::endpoints::Expectation;

/// One expectation per endpoint of every watch whose certificates were renewed, or whose
/// units were restarted, in this pass.
pub fn expectations(
    settings: &Settings,
    inv: &Inventory,
    renewals: &[RenewOutcome],
    restarted: &[String],
) -> Vec<Expectation> {
    let mut out = Vec::new();
    for (w, watch) in settings.watches.iter().enumerate() {
        let renewed_here = renewals.iter().any(|r| r.renewed() && r.watch == w);
        let restarted_here = watch.units.iter().any(|u| restarted.contains(u));
        if watch.verify_endpoints.is_empty() || !(renewed_here || restarted_here) {
            continue;
        }
        let (current, replaced) = serials(inv, renewals, w);
        let client = client_pair(inv, w);
        for endpoint in &watch.verify_endpoints {
            out.push(Expectation {
                watch: w,
                endpoint: endpoint.clone(),
                current: current.clone(),
                replaced: replaced.clone(),
                client: client.clone(),
            });
        }
    }
    out
}

type Serials = (Vec<String>, Vec<(String, std::path::PathBuf)>);

/// The serials under watch `w` now, and the serials (with paths) this pass replaced.
fn serials(inv: &Inventory, renewals: &[RenewOutcome], w: usize) -> Serials {
    let mut current = Vec::new();
    let mut replaced = Vec::new();
    for (i, c) in inv.certs.iter().enumerate().filter(|(_, c)| c.watch == w) {
        match renewals.iter().find(|r| r.cert == i).map(|r| &r.result) {
            Some(RenewResult::Renewed { serial, .. }) => {
                current.push(serial.clone());
                replaced.push((c.facts.serial.clone(), c.path.clone()));
            }
            _ => current.push(c.facts.serial.clone()),
        }
    }
    (current, replaced)
}

/// A client certificate and key of the watch for servers that require one, preferring a
/// file named like a client's.
fn client_pair(inv: &Inventory, w: usize) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    inv.certs
        .iter()
        .filter(|c| c.watch == w && !c.facts.is_ca && c.facts.client_auth && c.kubeconfig.is_none())
        .filter_map(|c| inv.matched_key(c).map(|k| (c, k)))
        .max_by_key(|(c, _)| c.path.to_string_lossy().contains("client"))
        .map(|(c, k)| (c.path.clone(), k.path.clone()))
}
