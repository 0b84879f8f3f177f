//! Inventory: walk the watched directories, parse every certificate and key, pair each
//! certificate with its key (confirmed by public key), and link each certificate to the CA
//! that signed it (by name bytes and key identifiers, confirmed by the signature).

pub mod checked;
mod kubeconfig;
pub mod kubelet;
pub mod managed;
mod pairing;
mod read;
pub(crate) mod walk;

use std::path::{Path, PathBuf};

use rayon::prelude::*;

pub use crate::format::cert::CertFacts;
pub use crate::format::key::{Encoding, KeyAlg, KeyFormat, KeyInfo, PublicKey};
use crate::format::kubeconfig::{KubeconfigUser, Source as KubeconfigSource};
use crate::fsutil::Follow;
pub use checked::Checked;
pub(crate) use pairing::check_pair;
pub use pairing::key_candidates;
pub use walk::Root;

/// Files read and parsed side by side before they are added to the inventory.
const READ_CHUNK: usize = 1024;

/// Files larger than this are not read (no certificate or key is anywhere near it).
pub use crate::fsutil::MAX_FILE_SIZE;

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
    /// The kubeconfig files read (their `certificate-authority-data` may hold a copy of a
    /// CA that is renewed).
    pub kubeconfigs: Vec<PathBuf>,
    /// The (certificate, CA) pairs whose signature verified in this scan, for the record
    /// of signatures checked ([`checked::keep`]).
    pub verified: Vec<checked::Pair>,
}

/// A certificate on disk and what it is linked to.
#[derive(Debug)]
pub struct Cert {
    /// The file holding it.
    pub path: PathBuf,
    /// What `path` resolves to, when that is another path (see [`Cert::real`]).
    pub real_path: Option<PathBuf>,
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
    pub kubeconfig: Option<Box<KubeconfigUser>>,
}

impl Cert {
    /// What `path` resolves to (the file written when it is renewed).
    pub fn real(&self) -> &Path {
        self.real_path.as_deref().unwrap_or(&self.path)
    }

    /// How people see it: the file, and the user for a kubeconfig's certificate.
    pub fn label(&self) -> String {
        match &self.kubeconfig {
            None => self.path.display().to_string(),
            Some(k) => format!("{} (user {})", self.path.display(), k.user),
        }
    }

    /// [`label`](Self::label), and its place in the file (`#2`) when the file holds more
    /// than one: the rows of one bundle are told apart.
    pub fn row_label(&self) -> String {
        match self.place() {
            Some(n) => format!("{} #{n}", self.label()),
            None => self.label(),
        }
    }

    /// Its place in the file, from 1, when the file holds more than one certificate.
    pub fn place(&self) -> Option<usize> {
        // kubelet.crt's throwaway CA is part of its pair, not a row of its own.
        (self.certs_in_file > 1 && !kubelet::is_self_signed_serving(self)).then_some(self.index + 1)
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
    /// The key file of `c`, by one of its usual names, that is there but could not be read
    /// (permission denied, say): its key is then unknown here, not missing.
    pub fn unreadable_key(&self, c: &Cert) -> Option<&Skipped> {
        let candidates = key_candidates(&c.path);
        (self.errors.iter()).find(|e| candidates.contains(&e.path))
    }

    /// Scans the given watch roots (in config order), each required.
    pub fn scan(roots: &[PathBuf]) -> Inventory {
        let roots: Vec<Root> = roots.iter().map(Root::required).collect();
        Self::scan_with(&roots, &[], &Checked::none())
    }

    /// Scans the watches of a configuration: their directories and kubeconfig files.
    /// Signatures `checked` knows to verify are not checked again.
    pub fn scan_watches(watches: &[crate::config::Watch], checked: &Checked) -> Inventory {
        let roots: Vec<Root> = watches
            .iter()
            .map(|w| Root {
                path: w.path.clone(),
                optional: w.optional,
                only: w.named.clone(),
            })
            .collect();
        let kubeconfigs: Vec<KubeconfigSource> = watches
            .iter()
            .enumerate()
            .flat_map(|(i, w)| {
                w.kubeconfigs.iter().map(move |k| KubeconfigSource {
                    path: k.clone(),
                    watch: i,
                    required: !w.kubeconfigs_default,
                })
            })
            .collect();
        Self::scan_with(&roots, &kubeconfigs, checked)
    }

    /// Scans watch roots and kubeconfig files.
    pub fn scan_with(
        roots: &[Root],
        kubeconfigs: &[KubeconfigSource],
        checked: &Checked,
    ) -> Inventory {
        let mut found = walk::walk(roots);
        kubelet::arrange(&mut found);
        let mut inv = Inventory {
            skipped: found.skipped,
            errors: found.errors,
            roots: roots
                .iter()
                .filter_map(|r| std::fs::canonicalize(&r.path).ok())
                .collect(),
            ..Inventory::default()
        };
        // Read and parsed on all CPUs a chunk at a time, added in walk order: what a chunk
        // parsed is held only until it is added (all 20,010 files' at once were 4.7 MiB).
        let mut files = found.files.into_iter();
        loop {
            let chunk: Vec<walk::FoundFile> = files.by_ref().take(READ_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            let parsed: Vec<read::Content> = chunk
                .par_iter()
                .map(|f| read::read_file(&f.real, Follow::No))
                .collect();
            for (file, content) in chunk.into_iter().zip(parsed) {
                inv.add_file(file, content);
            }
        }
        for src in kubeconfigs {
            kubeconfig::scan_into(&mut inv, src);
        }
        inv.drop_bundled_copies();
        kubelet::drop_throwaway_cas(&mut inv.certs);
        inv.pair_keys();
        inv.link_issuers(checked);
        inv
    }

    /// A CA certificate that a chain file carries after its leaf (leaf, intermediate) and
    /// that is also a file of its own, byte for byte, is one certificate: listed, counted,
    /// linked and alarmed once, by its own file. One that only the chain holds stays,
    /// watched there; a trust bundle (CAs only) is a file of its own and stays whole.
    fn drop_bundled_copies(&mut self) {
        let alone: std::collections::HashSet<&[u8]> = self
            .certs
            .iter()
            .filter(|c| c.certs_in_file == 1 && c.kubeconfig.is_none())
            .map(|c| c.facts.der.as_slice())
            .collect();
        let chains: std::collections::HashSet<&Path> = self
            .certs
            .iter()
            .filter(|c| c.index == 0 && c.certs_in_file > 1 && !c.facts.is_ca)
            .map(|c| c.path.as_path())
            .collect();
        let copy: Vec<bool> = self
            .certs
            .iter()
            .map(|c| {
                c.index > 0
                    && c.facts.is_ca
                    && chains.contains(c.path.as_path())
                    && alone.contains(c.facts.der.as_slice())
            })
            .collect();
        if copy.iter().any(|c| *c) {
            let mut copy = copy.into_iter();
            self.certs.retain(|_| !copy.next().unwrap_or(false));
        }
    }

    /// Adds what one file holds.
    fn add_file(&mut self, file: walk::FoundFile, content: read::Content) {
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
            read::Content::Certs {
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
                // The names are cloned for all but the last certificate (most files hold one).
                let mut names = Some((path, real, aliases));
                for (index, facts) in certs.into_iter().enumerate() {
                    let (path, real, aliases) = match index + 1 == n {
                        true => names.take().unwrap_or_default(),
                        false => names.clone().unwrap_or_default(),
                    };
                    self.certs.push(Cert {
                        real_path: (real.as_os_str() != path.as_os_str()).then_some(real),
                        path,
                        aliases,
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
            read::Content::Key(info) => {
                // A key is found by any of the names that lead to it.
                for alias in aliases {
                    self.keys.push(KeyFile {
                        path: alias,
                        info: info.clone(),
                    });
                }
                self.keys.push(KeyFile { path, info });
            }
            read::Content::Ignored => {}
            read::Content::Skip(reason) => self.skipped.push(problem(reason)),
            read::Content::Bad(reason) => self.errors.push(problem(reason)),
        }
    }

    /// The private key files (and kubeconfigs holding a key) that every user of the node may
    /// read, with their mode: a key a renewal reuses keeps its mode, so this is said, not
    /// fixed.
    pub fn keys_readable_by_others(&self) -> Vec<(PathBuf, u32)> {
        use std::os::unix::fs::PermissionsExt;
        let mut open: Vec<(PathBuf, u32)> = self
            .keys
            .iter()
            .filter_map(|k| {
                let mode = std::fs::metadata(&k.path).ok()?.permissions().mode() & 0o7777;
                (mode & 0o004 != 0).then(|| (k.path.clone(), mode))
            })
            .collect();
        open.sort();
        open.dedup();
        open
    }

    /// Whether `c`'s file resolves outside every watched directory (it is then not written).
    pub fn outside_watches(&self, c: &Cert) -> bool {
        !self.roots.iter().any(|r| c.real().starts_with(r))
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

    /// What signs a renewal of `cert`, in words: `CA PATH`, or a root's own key.
    pub fn signer_words(&self, cert: &Cert) -> String {
        if kubelet::is_self_signed_serving(cert) {
            return "signed by a new throwaway CA, as kubelet makes it".into();
        }
        match (&cert.issuer, self.issuer_of(cert)) {
            (IssuerLink::SelfSigned, _) if cert.facts.is_ca => {
                "self-signed: re-issued with its own key".into()
            }
            (_, Some(ca)) => format!("CA {}", ca.path.display()),
            (_, None) => "its CA not found under the watches".into(),
        }
    }

    /// The certificate that signed `cert`, if found.
    pub fn issuer_of(&self, cert: &Cert) -> Option<&Cert> {
        match cert.issuer {
            IssuerLink::Found(i) => self.certs.get(i),
            _ => None,
        }
    }

    /// The certificate whose key signs a renewal of `cert`: its issuer, or a root CA itself.
    pub fn signer_of<'a>(&'a self, cert: &'a Cert) -> Option<&'a Cert> {
        match cert.issuer {
            IssuerLink::SelfSigned if cert.facts.is_ca => Some(cert),
            _ => self.issuer_of(cert),
        }
    }
}

#[cfg(test)]
mod tests;
