//! Inventory: walk the watched directories, parse every certificate and key, pair each
//! certificate with its key (confirmed by public key), and link each certificate to the CA
//! that signed it (by name bytes and key identifiers, confirmed by the signature).

pub mod cert;
pub mod key;
pub mod kubeconfig;
pub mod pem;
pub(crate) mod walk;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use cert::CertFacts;
pub use key::{Encoding, KeyAlg, KeyFormat, KeyInfo, PublicKey};
pub use walk::Root;

/// Files larger than this are not read (no certificate or key is anywhere near it).
pub const MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// Everything found under the watched paths.
#[derive(Debug, Default)]
pub struct Inventory {
    /// Every certificate, in path order (then order within the file).
    pub certs: Vec<Cert>,
    /// Every private key file.
    pub keys: Vec<KeyFile>,
    /// Files passed over that are not certificates (a CSR, a directory named `x.crt`).
    pub skipped: Vec<Skipped>,
    /// What should have been read and could not be: a watched directory that is missing or
    /// unreadable, a file named like a certificate or key that is unreadable, empty,
    /// truncated or corrupt, a kubeconfig that cannot be read or understood. Each is an
    /// error of the pass: it may hide the certificate that expires.
    pub errors: Vec<Skipped>,
    /// The watched directories as they resolve (those that exist).
    pub roots: Vec<PathBuf>,
}

/// A certificate on disk and what it is linked to.
#[derive(Debug)]
pub struct Cert {
    /// The file holding it.
    pub path: PathBuf,
    /// What `path` resolves to (the file written when it is renewed).
    pub real: PathBuf,
    /// Other watched paths naming the same file (symlinks to it).
    pub aliases: Vec<PathBuf>,
    /// Its position in the file (0 for the first or only one).
    pub index: usize,
    /// How many certificates the file holds.
    pub certs_in_file: usize,
    /// PEM or DER.
    pub encoding: Encoding,
    /// Index of the watch it was found under.
    pub watch: usize,
    /// What the certificate says.
    pub facts: CertFacts,
    /// Its private key, if one is paired.
    pub key: KeyLink,
    /// Who signed it.
    pub issuer: IssuerLink,
    /// Set when it was found through a kubeconfig file (`path` is that file).
    pub kubeconfig: Option<kubeconfig::KubeconfigUser>,
}

impl Cert {
    /// How people see it: the file, and the user for a kubeconfig's certificate.
    pub fn label(&self) -> String {
        match &self.kubeconfig {
            None => self.path.display().to_string(),
            Some(k) => format!("{} (user {})", self.path.display(), k.user),
        }
    }
}

/// A private key file.
#[derive(Debug)]
pub struct KeyFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its format and public half.
    pub info: KeyInfo,
}

/// The result of looking for a certificate's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLink {
    /// No key file by any of the usual names.
    Missing,
    /// The key (index into `Inventory::keys`) matches the certificate.
    Matched(usize),
    /// A key by name was found but its public key is different.
    Mismatch(usize),
    /// A key by name was found but is encrypted, so it cannot be confirmed or used.
    Encrypted(usize),
    /// The key is in the same file as the certificate, and matches it (kubelet's
    /// `kubelet-client-current.pem`, haproxy-style bundles): renewed in place together.
    SameFile(usize),
}

/// The result of looking for a certificate's signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssuerLink {
    /// Self-signed: a root.
    SelfSigned,
    /// Signed by this certificate (index into `Inventory::certs`).
    Found(usize),
    /// No certificate found under the watches signed it; says what was tried.
    NotFound(String),
}

/// A file that was passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file or directory.
    pub path: PathBuf,
    /// Why it was not used.
    pub reason: String,
}

impl Inventory {
    /// Scans the given watch roots (in config order), each required.
    pub fn scan(roots: &[PathBuf]) -> Inventory {
        let roots: Vec<Root> = roots.iter().map(Root::required).collect();
        Self::scan_with(&roots, &[])
    }

    /// Scans the watches of a configuration: their directories and kubeconfig files.
    pub fn scan_watches(watches: &[crate::config::Watch]) -> Inventory {
        let roots: Vec<Root> = watches
            .iter()
            .map(|w| Root {
                path: w.path.clone(),
                optional: w.optional,
            })
            .collect();
        let kubeconfigs: Vec<kubeconfig::Source> = watches
            .iter()
            .enumerate()
            .flat_map(|(i, w)| {
                w.kubeconfigs.iter().map(move |k| kubeconfig::Source {
                    path: k.clone(),
                    watch: i,
                    required: !w.kubeconfigs_default,
                })
            })
            .collect();
        Self::scan_with(&roots, &kubeconfigs)
    }

    /// Scans watch roots and kubeconfig files.
    pub fn scan_with(roots: &[Root], kubeconfigs: &[kubeconfig::Source]) -> Inventory {
        let found = walk::walk(roots);
        let mut inv = Inventory {
            skipped: found.skipped,
            errors: found.errors,
            roots: roots
                .iter()
                .filter_map(|r| std::fs::canonicalize(&r.path).ok())
                .collect(),
            ..Inventory::default()
        };
        let parsed = par_map(&found.files, |f| walk::read_file(&f.real));
        for (file, content) in found.files.into_iter().zip(parsed) {
            inv.add_file(file, content);
        }
        for src in kubeconfigs {
            kubeconfig::scan_into(&mut inv, src);
        }
        inv.pair_keys();
        inv.link_issuers();
        inv
    }

    /// Adds what one file holds.
    fn add_file(&mut self, file: walk::FoundFile, content: walk::Content) {
        let walk::FoundFile {
            path,
            real,
            aliases,
            watch,
        } = file;
        let problem = |reason| Skipped {
            path: path.clone(),
            reason,
        };
        match content {
            walk::Content::Certs {
                certs,
                keys,
                errors,
                encoding,
            } => {
                self.errors.extend(errors.into_iter().map(problem));
                let n = certs.len();
                let same_file_key = keys.into_iter().next().map(|info| {
                    self.keys.push(KeyFile {
                        path: path.clone(),
                        info,
                    });
                    self.keys.len() - 1
                });
                for (index, facts) in certs.into_iter().enumerate() {
                    self.certs.push(Cert {
                        path: path.clone(),
                        real: real.clone(),
                        aliases: aliases.clone(),
                        index,
                        certs_in_file: n,
                        encoding,
                        watch,
                        facts,
                        key: same_file_key.map_or(KeyLink::Missing, KeyLink::SameFile),
                        issuer: IssuerLink::NotFound(String::new()),
                        kubeconfig: None,
                    });
                }
            }
            walk::Content::Key(info) => {
                // A key is found by any of the names that lead to it.
                for alias in aliases {
                    self.keys.push(KeyFile {
                        path: alias,
                        info: info.clone(),
                    });
                }
                self.keys.push(KeyFile { path, info });
            }
            walk::Content::Ignored => {}
            walk::Content::Skip(reason) => self.skipped.push(problem(reason)),
            walk::Content::Bad(reason) => self.errors.push(problem(reason)),
        }
    }

    /// Whether `c`'s file resolves outside every watched directory (it is then not written).
    pub fn outside_watches(&self, c: &Cert) -> bool {
        !self.roots.iter().any(|r| c.real.starts_with(r))
    }

    /// The certificate's key file, when it has a usable, matching one (beside it, or in
    /// the same file).
    pub fn matched_key(&self, cert: &Cert) -> Option<&KeyFile> {
        match cert.key {
            KeyLink::Matched(k) | KeyLink::SameFile(k) => self.keys.get(k),
            _ => None,
        }
    }

    /// The path of the CA certificate that signed `cert`, or "" when none was found.
    pub fn ca_path_of(&self, cert: &Cert) -> String {
        self.issuer_of(cert)
            .map(|ca| ca.path.display().to_string())
            .unwrap_or_default()
    }

    /// The certificate that signed `cert`, if found.
    pub fn issuer_of(&self, cert: &Cert) -> Option<&Cert> {
        match cert.issuer {
            IssuerLink::Found(i) => self.certs.get(i),
            _ => None,
        }
    }

    fn pair_keys(&mut self) {
        let by_path: HashMap<&Path, usize> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.path.as_path(), i))
            .collect();
        let links: Vec<KeyLink> = self
            .certs
            .iter()
            .map(|c| {
                if c.kubeconfig.is_some() {
                    return c.key.clone(); // paired when its kubeconfig was read
                }
                if c.index > 0 {
                    return KeyLink::Missing; // only a file's first certificate has a key beside it
                }
                if let KeyLink::SameFile(k) = c.key {
                    return check_pair(&c.facts, k, &self.keys[k], KeyLink::SameFile(k));
                }
                key_candidates(&c.path)
                    .iter()
                    .find_map(|p| by_path.get(p.as_path()).copied())
                    .map_or(KeyLink::Missing, |k| {
                        check_pair(&c.facts, k, &self.keys[k], KeyLink::Matched(k))
                    })
            })
            .collect();
        for (c, link) in self.certs.iter_mut().zip(links) {
            c.key = link;
        }
    }

    fn link_issuers(&mut self) {
        // Candidate signers by the exact bytes of their subject name.
        let mut by_subject: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (i, c) in self.certs.iter().enumerate() {
            if c.facts.is_ca {
                by_subject.entry(&c.facts.raw_subject).or_default().push(i);
            }
        }
        let links = par_map(&self.certs, |c| {
            if c.facts.raw_subject == c.facts.raw_issuer && c.facts.signed_by(&c.facts).is_ok() {
                return IssuerLink::SelfSigned;
            }
            let Some(candidates) = by_subject.get(c.facts.raw_issuer.as_slice()) else {
                return IssuerLink::NotFound(format!(
                    "no CA certificate with subject \"{}\" under the watched paths",
                    c.facts.issuer
                ));
            };
            let mut verified: Vec<usize> = Vec::new();
            let mut why = String::new();
            for &i in candidates {
                match c.facts.signed_by(&self.certs[i].facts) {
                    Ok(()) => verified.push(i),
                    Err(e) => {
                        why = format!("{}: {e}", self.certs[i].path.display());
                    }
                }
            }
            // Of several copies of the same CA, prefer the one whose key is here.
            verified
                .iter()
                .copied()
                .find(|&i| matches!(self.certs[i].key, KeyLink::Matched(_)))
                .or(verified.first().copied())
                .map_or_else(
                    || {
                        IssuerLink::NotFound(format!(
                            "CA \"{}\" found but it did not sign this certificate ({why})",
                            c.facts.issuer
                        ))
                    },
                    IssuerLink::Found,
                )
        });
        for (c, link) in self.certs.iter_mut().zip(links) {
            c.issuer = link;
        }
    }
}

fn check_pair(c: &CertFacts, k: usize, key: &KeyFile, ok: KeyLink) -> KeyLink {
    if key.info.encrypted() {
        return KeyLink::Encrypted(k);
    }
    match &key.info.public {
        Some(p) if *p == c.public_key => ok,
        _ => KeyLink::Mismatch(k),
    }
}

/// Key file names controllers use for a certificate file, most usual first.
pub fn key_candidates(cert_path: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    // Bytes, not UTF-8: a certificate with any file name gets its key looked for.
    let Some(name) = cert_path.file_name().map(|n| n.as_bytes()) else {
        return Vec::new();
    };
    let stem = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => &name[..dot],
        None => name,
    };
    let dir = cert_path.parent().unwrap_or(Path::new(""));
    let mut out: Vec<PathBuf> = [".key", "-key.pem", "-key.der", ".key.der", ".key.pem"]
        .into_iter()
        .map(|suffix| {
            let file = std::ffi::OsString::from_vec([stem, suffix.as_bytes()].concat());
            dir.join(file)
        })
        .filter(|p| p != cert_path)
        .collect();
    out.dedup();
    out
}

/// Maps `f` over `items` on all cores, keeping order.
pub(crate) fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads <= 1 || items.len() < 64 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_follow_controller_conventions() {
        use std::os::unix::ffi::OsStrExt;
        let c = key_candidates(Path::new("/etc/etcd/kubernetes.pem"));
        assert_eq!(c[0], Path::new("/etc/etcd/kubernetes.key"));
        assert_eq!(c[1], Path::new("/etc/etcd/kubernetes-key.pem"));
        let c = key_candidates(Path::new("/etc/etcd/etcd-server.crt"));
        assert_eq!(c[0], Path::new("/etc/etcd/etcd-server.key"));
        let odd = std::ffi::OsStr::from_bytes(b"/p/caf\xe9.crt");
        assert_eq!(
            key_candidates(Path::new(odd))[0],
            Path::new(std::ffi::OsStr::from_bytes(b"/p/caf\xe9.key"))
        );
    }

    #[test]
    fn par_map_keeps_order() {
        let v: Vec<u32> = (0..1000).collect();
        assert_eq!(
            par_map(&v, |x| x * 2),
            v.iter().map(|x| x * 2).collect::<Vec<_>>()
        );
    }
}
