//! Renewed client pairs presented to the servers on this node that check them. A client
//! certificate is taken in by its reader (kube-apiserver's `--etcd-certfile` and
//! `--kubelet-client-certificate`, etcd's health check client) at its next connection,
//! restarted or not, so a renewal the server would refuse breaks that reader either way.
//! Each renewed certificate that allows clientAuth and whose issuer a local etcd member
//! trusts (`--trusted-ca-file`) is presented to that member's client listener, and one
//! whose issuer kubelet trusts (`clientCAFile`) to kubelet's API, with a real request,
//! before anything restarts on it: refused,
//! it is put back and the renewal failed; not answered (the member down), it is presented
//! again at the end of the stage, once what the stage starts has started; still not
//! answered, it stays installed and its proof is owed: said, alarmed, and presented again
//! by the next pass.

use std::path::{Path, PathBuf};

use super::owed::Owed;
use super::reload_proof::{self, Checker, NotProven, Taken};
use crate::components::reload_rules::rule;
use crate::components::{Component, Kind, NodeReading};
use crate::format::cert::CertFacts;
use crate::inventory::{Inventory, KeyLink};
use crate::renew::pending::{self, Change};
use crate::renew::{RenewOutcome, RenewResult};
use crate::served::shown::by_address;

/// What presenting the renewed client pairs showed.
#[derive(Debug, Default)]
pub struct Presented {
    /// How each pair accepted was shown (cert, how).
    pub accepted: Vec<(PathBuf, String)>,
    /// Each certificate refused, and why.
    pub refused: Vec<(PathBuf, String)>,
    /// The certificates refused and put back.
    pub restored: Vec<PathBuf>,
    /// The certificates refused and not put back, and why (the new pair stays).
    pub not_restored: Vec<(PathBuf, String)>,
    /// Each pair its server could not be asked about, and why.
    pub unproven: Vec<(PathBuf, String)>,
    /// Each pair whose server is not running here (nothing listens where it serves), and
    /// why: not presented, and not owed (a member kept down, as on StarlingX's standby
    /// controller, would otherwise hold an alarm until it runs again).
    pub not_listening: Vec<(PathBuf, String)>,
    /// Each pair an earlier pass left owed that nothing on this node can be asked about any
    /// more (its file gone, no member trusting its issuer), and why: no longer owed.
    pub released: Vec<(PathBuf, String)>,
}

impl Presented {
    /// Takes in what presenting the unproven pairs `again` showed later in the stage.
    pub fn merge_later(&mut self, again: Presented) {
        self.unproven = again.unproven;
        self.not_listening = again.not_listening;
        self.accepted.extend(again.accepted);
        self.refused.extend(again.refused);
        self.restored.extend(again.restored);
        self.not_restored.extend(again.not_restored);
        self.released.extend(again.released);
    }

    /// The pairs whose proof is owed to the next pass: not shown accepted, and in place.
    pub fn owed(&self) -> Vec<PathBuf> {
        let refused = self.refused.iter().map(|(p, _)| p);
        (self.unproven.iter().map(|(p, _)| p))
            .chain(refused.filter(|p| !self.restored.contains(p)))
            .cloned()
            .collect()
    }
}

/// The servers on this node that check a client certificate signed by an issuer of their
/// client CA file, each where it is asked: the local etcd members (`--trusted-ca-file`),
/// where each serves its clients, with `GET /version`; and kubelet
/// (`authentication.x509.clientCAFile`), where it serves its API, with `GET /healthz`,
/// verified as kube-apiserver verifies it (against `--kubelet-certificate-authority` for
/// the node's name, or not at all).
fn checkers<'a>(node: &'a NodeReading, facts: &CertFacts) -> Vec<(&'a Component, Vec<Checker>)> {
    let trusts = |c: &Component, setting: &str| {
        let Some(trust) = c.file(setting) else {
            return false;
        };
        let Ok(data) = crate::fsutil::read(trust) else {
            return false;
        };
        (crate::format::pem::blocks(&data).into_iter().flatten())
            .filter(|b| b.label == "CERTIFICATE")
            .filter_map(|b| CertFacts::parse(b.der).ok())
            .any(|ca| facts.signed_by(&ca).is_ok())
    };
    let all = || node.units.iter().chain(&node.pods);
    let mut out = Vec::new();
    if let Some(serving) = rule(Kind::Etcd, "cert-file") {
        let members = all().filter(|c| c.kind == Some(Kind::Etcd) && trusts(c, "trusted-ca-file"));
        out.extend(members.map(|c| {
            let at = by_address(c, serving).into_iter().map(Checker::etcd);
            (c, at.collect())
        }));
    }
    let kubelets = all().filter(|c| c.kind == Some(Kind::Kubelet) && trusts(c, "clientCAFile"));
    for c in kubelets {
        let (addr, host) = match crate::served::shown::kubelet(c) {
            Ok(dial) => dial,
            Err(why) => {
                tracing::info!(service = %c.name(), "kubelet not asked about client pairs: {why}");
                continue;
            }
        };
        let trust = (all().find(|a| a.kind == Some(Kind::ApiServer)))
            .and_then(|a| a.file("kubelet-certificate-authority"))
            .map(Path::to_path_buf);
        let name = match &trust {
            Some(_) => rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
            None => host,
        };
        let at = Checker {
            addr,
            name,
            trust,
            path: "/healthz",
            taken: Taken::Authenticated,
        };
        out.push((c, vec![at]));
    }
    out
}

/// A renewed certificate to present.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub cert: PathBuf,
    /// The change that puts it back (none for one an earlier pass renewed whose record is
    /// gone).
    pub change: Option<Change>,
    /// Owed by an earlier pass: one that can no longer be presented is released, and said.
    pub owed: bool,
}

/// The certificates renewed in `renewals`, and those an earlier pass left unproven
/// (`owed`, whose `changes` put them back): each to present if it is a client pair.
pub fn candidates(renewals: &[RenewOutcome], owed: &Owed) -> Vec<Candidate> {
    let renewed = renewals.iter().filter_map(|r| match &r.result {
        RenewResult::Renewed { change, .. } => Some(Candidate {
            cert: r.path.clone(),
            change: Some(change.clone()),
            owed: false,
        }),
        _ => None,
    });
    let earlier = (owed.pairs.iter())
        .filter(|p| !renewals.iter().any(|r| r.path == **p))
        .map(|p| Candidate {
            cert: p.clone(),
            change: owed.changes.iter().find(|c| c.cert == *p).cloned(),
            owed: true,
        });
    renewed.chain(earlier).collect()
}

/// Presents each of `candidates` that is a client pair a local etcd member checks to that
/// member (see the module documentation), putting back each one refused.
pub async fn present(node: &NodeReading, inv: &Inventory, candidates: &[Candidate]) -> Presented {
    let mut out = Presented::default();
    for candidate in candidates {
        let (cert, change) = (candidate.cert.as_path(), candidate.change.as_ref());
        let release = |out: &mut Presented, why: &str| release(out, candidate, why);
        let Some(c) = inv.certs.iter().find(|c| c.path == cert) else {
            release(
                &mut out,
                "its file is no longer among the certificates watched",
            );
            continue;
        };
        let key = match c.key {
            KeyLink::Matched(k) | KeyLink::SameFile(k) => &inv.keys[k].path,
            _ => {
                release(&mut out, "no key that matches it is found beside it");
                continue;
            }
        };
        if c.facts.is_ca || c.kubeconfig.is_some() {
            release(&mut out, "it is no longer a client pair of its own files");
            continue;
        }
        let Some(facts) = (crate::fsutil::read(cert).ok())
            .and_then(|d| CertFacts::first_in_pem(&d).ok())
            .filter(|f| f.client_auth)
        else {
            release(&mut out, "it no longer allows client authentication");
            continue;
        };
        let (mut not_shown, mut not_listening, mut asked) = (None, None, false);
        for (member, at) in checkers(node, &facts) {
            // A member's own files are proven by its restart or its reload.
            if member.files.iter().any(|(_, p)| p == cert) {
                continue;
            }
            asked |= !at.is_empty();
            for s in &at {
                let shown = match reload_proof::pair_of(cert, key) {
                    Ok(pair) => reload_proof::accepts_at(s, cert, pair).await,
                    Err(e) => Err(e),
                };
                match shown {
                    Ok(how) => {
                        tracing::info!(
                            service = %member.name(),
                            "renewed client pair {} accepted: {how}",
                            cert.display()
                        );
                        out.accepted.push((cert.to_path_buf(), how));
                    }
                    Err(e @ NotProven::PairRefused { .. }) => {
                        put_back(&mut out, cert, change, e.to_string());
                    }
                    Err(e @ NotProven::NotListening { .. }) => {
                        not_listening.get_or_insert(format!("{}: {e}", member.name()));
                    }
                    // The member could not be asked (down, or serving what its clients
                    // refuse, which its own checks report): not proven, not refused.
                    Err(e) => {
                        not_shown.get_or_insert(format!("{}: {e}", member.name()));
                    }
                }
            }
        }
        if !asked {
            release(
                &mut out,
                "no etcd member on this node checks it (none trusts its issuer, or none names where it serves)",
            );
            continue;
        }
        let refused = out.refused.iter().any(|(p, _)| p == cert);
        let accepted = out.accepted.iter().any(|(p, _)| p == cert);
        if let Some(why) = not_listening.filter(|_| !refused && !accepted && not_shown.is_none()) {
            let why = format!(
                "renewed client pair {} not presented: the server that checks it is not running here ({why})",
                cert.display()
            );
            out.not_listening.push((cert.to_path_buf(), why));
        }
        if let Some(why) = not_shown.filter(|_| !refused && !accepted) {
            let why = format!(
                "renewed client pair {} not shown accepted by the server that checks it ({why}); \
                 it stays installed, and the next pass presents it again",
                cert.display()
            );
            out.unproven.push((cert.to_path_buf(), why));
        }
    }
    out
}

/// The pair `candidate`, owed by an earlier pass, cannot be presented here any more, for
/// `why`: it is no longer owed, which is said (a renewal of this pass that is no client pair
/// of a local member's is simply not presented).
fn release(out: &mut Presented, candidate: &Candidate, why: &str) {
    if !candidate.owed {
        return;
    }
    let why = format!(
        "client pair {}, whose proof an earlier pass left owed, is no longer owed: {why}, so nothing on this node can be asked about it",
        candidate.cert.display()
    );
    tracing::warn!(path = %candidate.cert.display(), "{why}");
    out.released.push((candidate.cert.clone(), why));
}

/// The renewed pair `cert` was refused by the server that checks it: its files are put
/// back by its `change`; without one (renewed by an earlier pass whose record is gone), it
/// stays, owed.
fn put_back(out: &mut Presented, cert: &Path, change: Option<&Change>, why: String) {
    if out.refused.iter().any(|(p, _)| p == cert) {
        return;
    }
    tracing::error!(
        "renewed client pair {} refused, put back: {why}",
        cert.display()
    );
    out.refused.push((cert.to_path_buf(), why));
    let Some(change) = change else {
        let gone = "no record of its previous certificate is left to put back".to_string();
        out.not_restored.push((cert.to_path_buf(), gone));
        return;
    };
    for (cert, result) in pending::roll_back(std::slice::from_ref(change)) {
        match result {
            Ok(()) => out.restored.push(cert),
            Err(e) => out.not_restored.push((cert, format!("{e:#}"))),
        }
    }
}
