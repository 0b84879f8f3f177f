//! Which renewals wait for their step: a leaf whose watch says `on_renew = "reload"`, read
//! by one etcd member whose files are known, only through settings it reads again on every
//! handshake (`components::reload_rules`), is installed under the restart gate at that member's
//! step and proven in use there (with `rotate_keys`, installed with the member's unit
//! stopped), instead of installed before the stage and the member restarted
//! (`restart::at_step`).

use crate::components::reload_rules::{Proof, rule};
use crate::components::{Kind, NodeReading};
use crate::config::{OnRenew, Settings};
use crate::inventory::{Cert, Inventory};
use crate::plan::{Plan, PutOff};
use crate::restart::owed::{self, Owed};
use crate::restart::sequence::at_step::Deferred;
use crate::restart::step::Target;
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
    for item in plan.items.iter_mut().filter(|i| i.renews()) {
        let c = &inv.certs[item.cert];
        let Ok(Way {
            step: target,
            also: more,
        }) = way(settings, node, c)
        else {
            continue;
        };
        also.merge(more);
        item.put_off(PutOff::AtStep);
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

/// Why a renewal is installed before the restart stage and its readers restarted, rather
/// than installed at the step of the one reader that reads it again by itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAtStep {
    #[error("its watch says on_renew = \"restart\"")]
    Restarts,
    #[error("a CA certificate: what trusts it holds it in memory from its start")]
    Ca,
    #[error("a kubeconfig's credentials: read at its reader's start")]
    Kubeconfig,
    #[error("its watch runs a post_renew_command for it")]
    Command,
    #[error("no component whose files are known reads it")]
    NoReader,
    /// The readers, by name.
    #[error("more than one component reads it: {}", .0.join(", "))]
    Readers(Vec<String>),
    /// Its one reader's reload of it is not proven, and why.
    #[error("{target}: {why}")]
    NotProven { target: Target, why: String },
}

/// How a renewal of `c` reaches what reads it: installed at the step of the one etcd
/// member that reads it, only through settings it reads again on every handshake (that
/// step), or installed before the restart stage and its readers restarted (why).
pub fn way(settings: &Settings, node: &NodeReading, c: &Cert) -> Result<Way, NotAtStep> {
    if settings.watches[c.watch].on_renew != OnRenew::Reload {
        return Err(NotAtStep::Restarts);
    }
    if c.facts.is_ca {
        return Err(NotAtStep::Ca);
    }
    if c.kubeconfig.is_some() {
        return Err(NotAtStep::Kubeconfig);
    }
    let owed = targets::of_certs(settings, node, &[(c.watch, c.path.clone())]);
    if !owed.commands.is_empty() {
        return Err(NotAtStep::Command);
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
            true => NotAtStep::NoReader,
            false => NotAtStep::Readers(names),
        }
    })?;
    let not_proven = |why: &str| {
        Err(NotAtStep::NotProven {
            target: target.clone(),
            why: why.to_string(),
        })
    };
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
        None => {
            let (units, pods) = crate::restart::split_targets(&also);
            Ok(Way {
                step: target,
                also: Owed {
                    units,
                    pods,
                    ..Owed::default()
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubeadm's manifests and etcd PKI under a temp root, one watch on its `pki` naming
    /// the etcd pod and a unit this node does not run; `extra` is added to the settings.
    fn kubeadm(root: &std::path::Path, extra: &str) -> (Settings, NodeReading, Inventory) {
        let manifests = crate::test_pki::kubeadm_manifests(root);
        let pki = root.join("etc/kubernetes/pki");
        let etcd = pki.join("etcd");
        std::fs::create_dir_all(&etcd).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(etcd.join("ca.crt"), ca_cert.pem()).unwrap();
        std::fs::write(etcd.join("ca.key"), ca_key.serialize_pem()).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        for name in ["server", "peer"] {
            let key = rcgen::KeyPair::generate().unwrap();
            let params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
            let cert = params.signed_by(&key, &issuer).unwrap();
            std::fs::write(etcd.join(format!("{name}.crt")), cert.pem()).unwrap();
            std::fs::write(etcd.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        let toml = format!(
            "{extra}state_dir = \"{r}/state\"\nmanifests_dir = \"{m}\"\n\
             [[watch]]\npath = \"{p}\"\nunits = [\"kube-apiserver.service\"]\n\
             static_pods = [\"etcd\", \"kube-apiserver\"]\non_renew = \"reload\"\n",
            r = root.display(),
            m = manifests.display(),
            p = pki.display(),
        );
        let settings = Settings::from_toml(&toml, None).unwrap();
        let inv = Inventory::scan(std::slice::from_ref(&pki));
        (settings, NodeReading::read(&manifests), inv)
    }

    fn cert<'a>(inv: &'a Inventory, name: &str) -> &'a Cert {
        (inv.certs.iter())
            .find(|c| c.path.ends_with(name))
            .unwrap_or_else(|| panic!("{name} in {:?}", inv.certs))
    }

    #[test]
    fn kubeadms_etcd_certificates_wait_for_the_pods_turn_and_the_units_not_known_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (settings, node, inv) = kubeadm(dir.path(), "");
        for name in ["etcd/server.crt", "etcd/peer.crt"] {
            let way = way(&settings, &node, cert(&inv, name)).unwrap();
            assert_eq!(way.step, Target::Pod("etcd".into()), "{name}");
            assert_eq!(way.also.units, ["kube-apiserver.service"], "{name}");
            assert!(way.also.pods.is_empty(), "{name}: {:?}", way.also.pods);
        }
        let why = way(&settings, &node, cert(&inv, "etcd/ca.crt")).unwrap_err();
        assert_eq!(why, NotAtStep::Ca);

        let (settings, node, inv) = kubeadm(dir.path(), "rotate_keys = true\n");
        let why = way(&settings, &node, cert(&inv, "etcd/server.crt")).unwrap_err();
        assert_eq!(
            why.to_string(),
            "static pod etcd: rotate_keys: a static pod is restarted for its new key pairs"
        );
        assert!(matches!(why, NotAtStep::NotProven { target: Target::Pod(p), .. } if p == "etcd"));

        let (mut settings, node, inv) = kubeadm(dir.path(), "");
        settings.watches[0].on_renew = OnRenew::Restart;
        let why = way(&settings, &node, cert(&inv, "etcd/server.crt")).unwrap_err();
        assert_eq!(why, NotAtStep::Restarts);
        assert_eq!(why.to_string(), "its watch says on_renew = \"restart\"");
    }
}
