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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::renew::pending::Change;
    use time::OffsetDateTime;

    fn settings(dir: &std::path::Path) -> Settings {
        let toml = format!(
            "[[watch]]\npath = \"{}\"\nunits = [\"etcd.service\"]\nstatic_pods = []\nverify_endpoints = [\"127.0.0.1:2379\"]\n",
            dir.display()
        );
        Settings::from_toml(&toml, None).unwrap()
    }

    /// Certificate `i` of `inv` renewed under watch 0 with serial `4e4557`.
    fn renewed(inv: &Inventory, i: usize) -> RenewOutcome {
        RenewOutcome {
            cert: i,
            path: inv.certs[i].path.clone(),
            watch: 0,
            result: RenewResult::Renewed {
                serial: "4e4557".into(),
                not_before: OffsetDateTime::UNIX_EPOCH,
                not_after: OffsetDateTime::UNIX_EPOCH,
                rotated: false,
                change: Change {
                    cert: inv.certs[i].path.clone(),
                    cert_backup: "/backup".into(),
                    ..Change::default()
                },
            },
        }
    }

    #[test]
    fn an_endpoint_is_checked_only_after_its_watch_renewed_or_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let inv = crate::test_pki::tree(dir.path());
        let settings = settings(dir.path());
        assert!(expectations(&settings, &inv, &[], &[]).is_empty());
        let restarted = expectations(&settings, &inv, &[], &["etcd.service".to_string()]);
        assert_eq!(restarted.len(), 1);
        assert!(restarted[0].replaced.is_empty());
        assert_eq!(restarted[0].current.len(), inv.certs.len());
    }

    #[test]
    fn a_renewed_certificate_is_expected_by_its_new_serial_and_its_old_one_is_known() {
        let dir = tempfile::tempdir().unwrap();
        let inv = crate::test_pki::tree(dir.path());
        let settings = settings(dir.path());
        let a = inv
            .certs
            .iter()
            .position(|c| c.path.ends_with("a.crt"))
            .unwrap();
        let e = expectations(&settings, &inv, &[renewed(&inv, a)], &[]);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].endpoint, "127.0.0.1:2379");
        assert!(e[0].current.contains(&"4e4557".to_string()));
        assert!(!e[0].current.contains(&inv.certs[a].facts.serial));
        assert_eq!(
            e[0].replaced,
            [(inv.certs[a].facts.serial.clone(), inv.certs[a].path.clone())]
        );
    }

    /// A renewal that restarts nothing (no component reads the file) is still not done
    /// until its watch's endpoints serve what is on disk: the restart stage checks them.
    #[tokio::test]
    async fn with_nothing_to_restart_a_renewed_watchs_endpoints_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let inv = crate::test_pki::tree(dir.path());
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let toml = format!(
            "state_dir = \"{d}/state\"\nrestart_timeout_secs = 1\n[[watch]]\npath = \"{d}\"\nunits = []\nstatic_pods = []\nverify_endpoints = [\"127.0.0.1:{port}\"]\n",
            d = dir.path().display()
        );
        let settings = Settings::from_toml(&toml, None).unwrap();
        let renewal = renewed(&inv, 0);
        let connect = async || -> anyhow::Result<crate::restart::fake::FakeUnits> {
            panic!("nothing to restart, nothing to connect for")
        };
        let node = crate::components::NodeReading::default();
        let owed = crate::restart::owed::Owed::default();
        let mut gate = crate::restart::Ungated;
        let out =
            crate::restart::restart(&settings, &inv, &node, &[renewal], owed, connect, &mut gate)
                .await
                .unwrap();
        assert_eq!(out.endpoints.len(), 1, "{out:?}");
        assert!(!out.endpoints[0].ok, "nothing serves there: {out:?}");
        assert!(out.units.is_empty() && out.pods.is_empty());
    }
}
