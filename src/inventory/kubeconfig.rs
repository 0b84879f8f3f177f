//! Reading a kubeconfig into the inventory: one certificate per user with a client
//! certificate, embedded (`client-certificate-data`, renewable) or named by path
//! (`client-certificate`, reported only).

use std::path::Path;

use crate::format::cert::CertFacts;
use crate::format::kubeconfig::{Kubeconfig, KubeconfigUser, Scalar, Source, User, decode_data};
use crate::format::{key, pem};
use crate::fsutil::Follow;
use crate::inventory::{
    Cert, Encoding, Inventory, IssuerLink, KeyFile, KeyLink, Skipped, check_pair, read, walk,
};

/// Reads one kubeconfig into the inventory: one certificate per user with a client
/// certificate, embedded (renewable) or named by path (reported only).
pub(crate) fn scan_into(inv: &mut Inventory, src: &Source) {
    let Some(data) = read(inv, src) else {
        return;
    };
    let path = &src.path;
    let config = match Kubeconfig::parse(&data) {
        Ok(c) => c,
        Err(e) => {
            inv.errors.push(Skipped {
                path: path.clone(),
                reason: format!("kubeconfig not understood ({e}): not read, never rewritten"),
            });
            return;
        }
    };
    inv.kubeconfigs.push(path.clone());
    for user in &config.users {
        match user_cert(inv, src, &config, user) {
            Some(Ok(cert)) => inv.certs.push(cert),
            Some(Err(reason)) => inv.errors.push(Skipped {
                path: path.clone(),
                reason: format!("{reason:#}"),
            }),
            None => {}
        }
    }
}

/// The file's bytes; a file that cannot be read is an error of the watch (a missing one
/// only when it was listed explicitly).
fn read(inv: &mut Inventory, src: &Source) -> Option<Vec<u8>> {
    let path = &src.path;
    // Named by the configuration (or kubeadm's default list): a symlink to it is followed.
    let read = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !src.required => return None,
        Err(e) => Err(walk::io_reason(path, &e)),
        Ok(_) => read::read_bounded(path, Follow::Yes).map_err(|e| read::unreadable(path, &e)),
    };
    match read {
        Ok(data) => Some(data),
        Err(reason) => {
            inv.errors.push(Skipped {
                path: path.clone(),
                reason: format!("kubeconfig cannot be read: {reason}"),
            });
            None
        }
    }
}

/// The client certificate of `user` as an inventory entry, an error for `skipped`, or
/// `None` when the user has no certificate here (a token, an exec plugin, or a file
/// already listed under a watched directory).
fn user_cert(
    inv: &mut Inventory,
    src: &Source,
    config: &Kubeconfig,
    user: &User,
) -> Option<anyhow::Result<Cert>> {
    let path = &src.path;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let who = format!("user {:?}", user.name);
    let found = if let Some(data) = &user.cert_data {
        embedded(inv, path, user, data)
            .map_err(|e| anyhow::anyhow!("{who}: client-certificate-data: {e}"))
            .map(|(facts, key)| (facts, key, None))
    } else if let Some(file) = &user.cert_file {
        let file = dir.join(&file.text);
        if already_listed(inv, &file) {
            return None; // under a watched directory: reported (and renewed) as itself
        }
        external(inv, &file, user, dir)
            .map_err(|e| anyhow::anyhow!("{who}: client-certificate {}: {e}", file.display()))
            .map(|(facts, key)| (facts, key, Some(file)))
    } else {
        return None;
    };
    Some(found.map(|(facts, key, external)| Cert {
        kubeconfig: Some(Box::new(KubeconfigUser {
            user: user.name.clone(),
            shared: user.cert_data.as_ref().and_then(|d| d.shared),
            external,
            signed_by_cluster_ca: signed_by_cluster_ca(config, user, &facts),
        })),
        real_path: std::fs::canonicalize(path).ok().filter(|real| real != path),
        aliases: Vec::new(),
        path: path.clone(),
        index: 0,
        certs_in_file: 1,
        encoding: Encoding::Pem,
        watch: src.watch,
        facts,
        key,
        issuer: IssuerLink::NotFound(String::new()),
    }))
}

/// The subject of the `certificate-authority-data` of a cluster of `user` that signed it.
fn signed_by_cluster_ca(config: &Kubeconfig, user: &User, facts: &CertFacts) -> Option<String> {
    config
        .clusters_of(&user.name)
        .iter()
        .filter_map(|c| c.ca_data.as_ref())
        .filter_map(|d| CertFacts::first_in_pem(&decode_data(&d.text).ok()?).ok())
        .find(|ca| facts.signed_by(ca).is_ok())
        .map(|ca| ca.subject)
}

fn already_listed(inv: &Inventory, file: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(file) else {
        return false;
    };
    inv.certs
        .iter()
        .any(|c| c.kubeconfig.is_none() && c.real() == real)
}

fn embedded(
    inv: &mut Inventory,
    path: &Path,
    user: &User,
    data: &Scalar,
) -> anyhow::Result<(CertFacts, KeyLink)> {
    let pem = decode_data(&data.text)?;
    let facts = CertFacts::first_in_pem(&pem)?;
    let Some(key_data) = &user.key_data else {
        return Ok((facts, KeyLink::Missing));
    };
    let key_pem =
        decode_data(&key_data.text).map_err(|e| anyhow::anyhow!("client-key-data: {e}"))?;
    let block = pem::blocks(&key_pem)
        .into_iter()
        .filter_map(Result::ok)
        .find(|b| key::is_private_key_label(&b.label))
        .ok_or_else(|| anyhow::anyhow!("client-key-data: no PEM private key in it"))?;
    let info = key::from_pem(&block.label, &block.headers, &block.der)
        .map_err(|e| anyhow::anyhow!("client-key-data: {e}"))?;
    inv.keys.push(KeyFile {
        path: path.to_path_buf(),
        info,
    });
    let k = inv.keys.len() - 1;
    let link = check_pair(&facts, k, &inv.keys[k], KeyLink::Matched(k));
    Ok((facts, link))
}

fn external(
    inv: &mut Inventory,
    file: &Path,
    user: &User,
    dir: &Path,
) -> anyhow::Result<(CertFacts, KeyLink)> {
    let (facts, same_file_key) = match read::read_file(file, Follow::Yes) {
        read::Content::Certs { certs, keys, .. } => {
            let facts = certs
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("no certificate in it"))?;
            (facts, keys.into_iter().next())
        }
        read::Content::Skip(reason) | read::Content::Bad(reason) => anyhow::bail!(reason),
        read::Content::Key(_) | read::Content::Ignored => {
            anyhow::bail!("no certificate in it");
        }
    };
    let key_path = user.key_file.as_ref().map(|k| dir.join(&k.text));
    let info = match (&key_path, same_file_key) {
        (Some(k), held) if k == file => held.map(|i| (k.clone(), i, true)),
        (Some(k), _) => match read::read_file(k, Follow::Yes) {
            read::Content::Key(i) => Some((k.clone(), i, false)),
            read::Content::Certs { keys, .. } => {
                keys.into_iter().next().map(|i| (k.clone(), i, false))
            }
            _ => None,
        },
        (None, held) => held.map(|i| (file.to_path_buf(), i, true)),
    };
    let Some((key_path, info, same)) = info else {
        return Ok((facts, KeyLink::Missing));
    };
    inv.keys.push(KeyFile {
        path: key_path,
        info,
    });
    let k = inv.keys.len() - 1;
    let ok = if same {
        KeyLink::SameFile(k)
    } else {
        KeyLink::Matched(k)
    };
    let link = check_pair(&facts, k, &inv.keys[k], ok);
    Ok((facts, link))
}
