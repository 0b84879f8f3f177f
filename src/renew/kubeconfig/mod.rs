//! Renewing the client certificates embedded in a kubeconfig file: the base64 value of each
//! user's `client-certificate-data` (and `client-key-data` when rotating keys) is replaced
//! where it stands; every other byte of the file stays as it was.

pub(super) mod edit;

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use time::OffsetDateTime;

use super::prepare::planned_lifetime;
use super::{Prepared, RenewOptions, first_cert_is, keys, replace_first_pem_cert, sign};
use crate::format::key::Encoding;
use crate::format::kubeconfig::{Document, Kubeconfig, User, decode_data};
use crate::format::{key, pem};
use crate::fsutil::FileMeta;
use crate::inventory::Inventory;
use crate::plan::Plan;
use edit::{encode_data, replaceable, same_but_edits, splice};

/// The new contents of the kubeconfig holding `certs` (all in the same file), every one of
/// them renewed, checked by reading the result back.
pub(super) fn prepare(
    inv: &Inventory,
    certs: &[usize],
    ca_keys: &HashMap<PathBuf, anyhow::Result<rcgen::KeyPair>>,
    opts: &RenewOptions,
    plan: &Plan,
) -> anyhow::Result<Prepared> {
    let path = &inv.certs[certs[0]].path;
    let target =
        std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let on_disk =
        crate::fsutil::read(&target).with_context(|| format!("reading {}", target.display()))?;
    let not_understood = |e| {
        anyhow!(
            "{} is no longer understood ({e}): not rewritten",
            path.display()
        )
    };
    let doc = Document::parse(&on_disk).map_err(not_understood)?;
    let config = Kubeconfig::from_document(&doc).map_err(not_understood)?;
    let mut file = FileEdits {
        bytes: &on_disk,
        config: &config,
        edits: Vec::new(),
        renewed: Vec::new(),
        new_keys: Vec::new(),
    };
    for &i in certs {
        file.renew_user(inv, i, ca_keys, opts, plan)?;
    }
    let FileEdits {
        edits,
        mut renewed,
        new_keys,
        ..
    } = file;
    let bytes = splice(&on_disk, &edits);
    read_back(&doc, &config, &bytes, &edits, inv, &renewed, &new_keys).map_err(|e| {
        anyhow!(
            "the rewritten {} failed its check, nothing written: {e}",
            path.display()
        )
    })?;
    let (cert, serial, not_before, not_after) = renewed.remove(0);
    Ok(Prepared {
        cert,
        cert_meta: FileMeta::of(&target)?,
        cert_target: target,
        cert_bytes: bytes,
        key: None,
        serial,
        not_before,
        not_after,
        rotated: !new_keys.is_empty(),
        also: renewed,
        link: None,
    })
}

/// The values of one kubeconfig file being replaced.
struct FileEdits<'a> {
    bytes: &'a [u8],
    config: &'a Kubeconfig,
    edits: Vec<(Range<usize>, String)>,
    /// (certificate, new serial, new notBefore, new notAfter)
    renewed: Vec<(usize, String, OffsetDateTime, OffsetDateTime)>,
    /// (user, new public key)
    new_keys: Vec<(String, Vec<u8>)>,
}

impl FileEdits<'_> {
    /// Signs the new certificate of inventory certificate `i` and records the edits of its
    /// user's values.
    fn renew_user(
        &mut self,
        inv: &Inventory,
        i: usize,
        ca_keys: &HashMap<PathBuf, anyhow::Result<rcgen::KeyPair>>,
        opts: &RenewOptions,
        plan: &Plan,
    ) -> anyhow::Result<()> {
        let c = &inv.certs[i];
        let name = &c
            .kubeconfig
            .as_ref()
            .context("not a kubeconfig certificate")?
            .user;
        let changed = || {
            anyhow!(
                "{} changed since it was scanned; it will be looked at again next pass",
                c.label()
            )
        };
        let user: &User = self
            .config
            .users
            .iter()
            .find(|u| &u.name == name)
            .ok_or_else(changed)?;
        let data = user.cert_data.as_ref().ok_or_else(changed)?;
        let old_pem = decode_data(&data.text).map_err(|_| changed())?;
        if !first_cert_is(&old_pem, Encoding::Pem, &c.facts.der) {
            return Err(changed());
        }
        let at = |value, field| {
            replaceable(self.bytes, value, field, &format!("user {name:?}"), &c.path)
                .map_err(|e| anyhow!(e))
        };
        let cert_span = at(data, "client-certificate-data")?;
        let key_span = match (opts.rotate_keys, &user.key_data) {
            (true, Some(k)) => Some(at(k, "client-key-data")?),
            (true, None) => return Err(changed()),
            (false, _) => None,
        };
        let lifetime = planned_lifetime(plan, i)?;
        let (new, new_key) = sign(inv, c, lifetime, &[], ca_keys, opts, plan)?;
        let new_pem = replace_first_pem_cert(&old_pem, &new.der);
        self.edits.push((cert_span, encode_data(&new_pem)));
        if let Some(kp) = new_key {
            let format = inv
                .matched_key(c)
                .map(|k| k.info.format)
                .context("key missing")?;
            let bytes = keys::encode(&kp, format, Encoding::Pem)?;
            self.edits
                .push((key_span.ok_or_else(changed)?, encode_data(&bytes)));
            self.new_keys
                .push((name.clone(), kp.public_key_raw().to_vec()));
        }
        self.renewed
            .push((i, new.serial, new.not_before, new.not_after));
        Ok(())
    }
}

/// The rewritten file must read as the same kubeconfig with the new certificates (and keys).
fn read_back(
    old_doc: &Document,
    old: &Kubeconfig,
    bytes: &[u8],
    edits: &[(Range<usize>, String)],
    inv: &Inventory,
    renewed: &[(usize, String, OffsetDateTime, OffsetDateTime)],
    new_keys: &[(String, Vec<u8>)],
) -> anyhow::Result<()> {
    let new_doc = Document::parse(bytes)?;
    same_but_edits(old_doc, &new_doc, edits)?;
    let new = Kubeconfig::from_document(&new_doc)?;
    let names = |k: &Kubeconfig| {
        (
            k.users.iter().map(|u| u.name.clone()).collect::<Vec<_>>(),
            k.clusters
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>(),
            k.contexts.clone(),
        )
    };
    if names(old) != names(&new) {
        anyhow::bail!("users, clusters or contexts differ");
    }
    for (i, serial, ..) in renewed {
        let name = inv.certs[*i]
            .kubeconfig
            .as_ref()
            .map(|k| k.user.as_str())
            .unwrap_or_default();
        let user = new
            .users
            .iter()
            .find(|u| u.name == name)
            .ok_or_else(|| anyhow!("user lost"))?;
        let data = user
            .cert_data
            .as_ref()
            .ok_or_else(|| anyhow!("certificate lost"))?;
        let pem_bytes = decode_data(&data.text)?;
        let cert = pem::blocks(&pem_bytes)
            .into_iter()
            .find_map(Result::ok)
            .ok_or_else(|| anyhow!("no certificate in the new data"))?;
        let facts = crate::format::cert::CertFacts::parse(cert.der)?;
        if &facts.serial != serial {
            anyhow::bail!("user {name:?} does not hold the new certificate");
        }
        let key_raw = match new_keys.iter().find(|(n, _)| n == name) {
            Some((_, raw)) => {
                let data = user.key_data.as_ref().ok_or_else(|| anyhow!("key lost"))?;
                let key_pem = decode_data(&data.text)?;
                let block = pem::blocks(&key_pem)
                    .into_iter()
                    .find_map(Result::ok)
                    .ok_or_else(|| anyhow!("no key in the new data"))?;
                let info = key::from_pem(&block.label, &block.headers, &block.der)?;
                if info.public.as_ref().map(|p| &p.raw) != Some(raw) {
                    anyhow::bail!("user {name:?}: the new key is not the one generated");
                }
                raw.clone()
            }
            None => inv.certs[*i].facts.public_key.raw.clone(),
        };
        if facts.public_key.raw != key_raw {
            anyhow::bail!("user {name:?}: certificate and key do not match");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::kubeconfig::Source;
    use crate::plan::{Policy, plan};

    fn leaf(ca: &rcgen::Issuer<'_, rcgen::KeyPair>, cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let cert = params.signed_by(&key, ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn only_the_client_data_of_renewed_users_changes() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        std::fs::create_dir(&pki).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        ca_params.not_after = rcgen::date_time_ymd(2035, 1, 1);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        std::fs::write(pki.join("ca.crt"), ca_cert.pem()).unwrap();
        std::fs::write(pki.join("ca.key"), ca_key.serialize_pem()).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let (a_cert, a_key) = leaf(&issuer, "a");
        let (b_cert, b_key) = leaf(&issuer, "b");
        let b64 = |s: &str| encode_data(s.as_bytes());
        let text = format!(
            "# two users\napiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://127.0.0.1:6443\n  name: k\ncontexts:\n- context: {{cluster: k, user: a}}\n  name: a@k\nkind: Config\nusers:\n- name: a\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n- name: b   # second\n  user:\n    client-certificate-data: \"{}\"\n    client-key-data: {}\n- name: t\n  user:\n    token: secret\n",
            b64(&ca_cert.pem()),
            b64(&a_cert),
            b64(&a_key),
            b64(&b_cert),
            b64(&b_key)
        );
        let conf = dir.path().join("admin.conf");
        std::fs::write(&conf, &text).unwrap();
        let scan = || {
            Inventory::scan_with(
                &[crate::inventory::Root::required(&pki)],
                &[Source {
                    path: conf.clone(),
                    watch: 0,
                    required: true,
                }],
                &crate::inventory::Checked::none(),
            )
        };
        let inv = scan();
        assert_eq!(inv.certs.len(), 3, "{:?}", inv.skipped);
        let now = OffsetDateTime::now_utc();
        for rotate_keys in [false, true] {
            let before = std::fs::read_to_string(&conf).unwrap();
            let policy = Policy {
                renew_before_days: 15,
                ca_warning_days: 180,
                force: true,
                only: Some(vec![conf.clone()]),
                validity_days: Some(365),
                ..Policy::default()
            };
            let inv = scan();
            let p = plan(&inv, Default::default(), &policy, now);
            let opts = RenewOptions {
                rotate_keys,
                renew_before_days: 15,
                pending: crate::renew::pending::Record::new(&dir.path().join("state"), None),
                backup_dir: dir.path().join("state/backup"),
                roots: vec![pki.clone()],
                backup_keep: 10,
                backup_max_age_days: 365,
                ca_agreement: None,
                fresh: Vec::new(),
            };
            let out = super::super::renew(&inv, &p, &opts);
            assert_eq!(out.len(), 2, "{out:?}");
            assert!(out.iter().all(|o| o.renewed()), "{out:?}");
            let after = std::fs::read_to_string(&conf).unwrap();
            let changed: Vec<(&str, &str)> = before
                .lines()
                .zip(after.lines())
                .filter(|(a, b)| a != b)
                .collect();
            assert_eq!(before.lines().count(), after.lines().count());
            let keys: Vec<&str> = changed
                .iter()
                .map(|(a, _)| a.trim().split(':').next().unwrap())
                .collect();
            if rotate_keys {
                assert_eq!(
                    keys,
                    [
                        "client-certificate-data",
                        "client-key-data",
                        "client-certificate-data",
                        "client-key-data"
                    ]
                );
            } else {
                assert_eq!(keys, ["client-certificate-data", "client-certificate-data"]);
            }
            // The quoted value stays quoted.
            assert!(after.contains("    client-certificate-data: \""));
            let again = Inventory::scan_with(
                &[crate::inventory::Root::required(&pki)],
                &[Source {
                    path: conf.clone(),
                    watch: 0,
                    required: true,
                }],
                &crate::inventory::Checked::none(),
            );
            assert_eq!(again.certs.len(), 3);
            for c in again.certs.iter().filter(|c| c.kubeconfig.is_some()) {
                assert!(matches!(c.key, crate::inventory::KeyLink::Matched(_)));
                assert!(matches!(c.issuer, crate::inventory::IssuerLink::Found(_)));
            }
        }
    }
}
