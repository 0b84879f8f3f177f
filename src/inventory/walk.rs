//! Walking watched directories and classifying each candidate file.

use std::collections::HashSet;
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::cert::CertFacts;
use super::key::{self, KeyInfo};
use super::{Encoding, MAX_FILE_SIZE, Skipped, pem};

/// File name endings that may hold certificates or keys.
const EXTENSIONS: &[&str] = &["crt", "pem", "cer", "der", "key"];

pub(super) struct Found {
    pub files: Vec<(PathBuf, usize)>,
    pub skipped: Vec<Skipped>,
    pub watch_errors: Vec<Skipped>,
}

fn interesting(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext))
}

pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "symlink loop".into(),
        _ if e.kind() == ErrorKind::PermissionDenied => "permission denied".into(),
        _ if e.kind() == ErrorKind::NotFound => "dangling symlink or vanished file".into(),
        _ => e.to_string(),
    }
}

/// Every candidate file under `roots`, each with the index of the most specific root it is under.
pub(super) fn walk(roots: &[PathBuf]) -> Found {
    let mut found = Found {
        files: Vec::new(),
        skipped: Vec::new(),
        watch_errors: Vec::new(),
    };
    let mut seen_dirs: HashSet<(u64, u64)> = HashSet::new();
    let mut seen_files: HashSet<PathBuf> = HashSet::new();
    // Deeper roots first, so a nested watch owns its files.
    let mut order: Vec<usize> = (0..roots.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(roots[i].components().count()));
    for i in order {
        let root = &roots[i];
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => {
                walk_dir(root, i, true, &mut seen_dirs, &mut seen_files, &mut found)
            }
            Ok(_) => found.watch_errors.push(Skipped {
                path: root.clone(),
                reason: "watched path is not a directory".into(),
            }),
            Err(e) => found.watch_errors.push(Skipped {
                path: root.clone(),
                reason: format!("watched path cannot be read: {}", io_reason(&e)),
            }),
        }
    }
    found.files.sort();
    found
        .skipped
        .sort_by(|a, b| a.path.cmp(&b.path).then(a.reason.cmp(&b.reason)));
    found
}

/// The sorted entries of `dir`, unless it was scanned already (a symlink loop, reported
/// below the root) or cannot be listed (reported).
fn entries_once(
    dir: &Path,
    is_root: bool,
    seen_dirs: &mut HashSet<(u64, u64)>,
    found: &mut Found,
) -> Option<Vec<PathBuf>> {
    let mut skip = |reason: String| {
        found.skipped.push(Skipped {
            path: dir.to_path_buf(),
            reason,
        })
    };
    let id = match fs::metadata(dir) {
        Ok(m) => (m.dev(), m.ino()),
        Err(e) => {
            skip(io_reason(&e));
            return None;
        }
    };
    if !seen_dirs.insert(id) {
        if !is_root && fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            skip("symlink loop: directory already scanned".into());
        }
        return None;
    }
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut paths: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            paths.sort();
            Some(paths)
        }
        Err(e) => {
            skip(format!("cannot list directory: {}", io_reason(&e)));
            None
        }
    }
}

/// Walks `dir` recursively: files named like certificates and keys, and what was skipped.
fn walk_dir(
    dir: &Path,
    watch: usize,
    is_root: bool,
    seen_dirs: &mut HashSet<(u64, u64)>,
    seen_files: &mut HashSet<PathBuf>,
    found: &mut Found,
) {
    let Some(entries) = entries_once(dir, is_root, seen_dirs, found) else {
        return;
    };
    for path in entries {
        // Lossy, so a name that is not UTF-8 is still looked at, never passed over silently.
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = name.as_str();
        match fs::metadata(&path) {
            Ok(m) if m.is_dir() => {
                if interesting(name) {
                    found.skipped.push(Skipped {
                        path: path.clone(),
                        reason: "is a directory, not a certificate file (its contents are scanned)"
                            .into(),
                    });
                }
                walk_dir(&path, watch, false, seen_dirs, seen_files, found);
            }
            Ok(m) if m.is_file() => {
                if interesting(name) && seen_files.insert(path.clone()) {
                    found.files.push((path, watch));
                }
            }
            Ok(_) => {
                if interesting(name) {
                    found.skipped.push(Skipped {
                        path,
                        reason: "not a regular file".into(),
                    });
                }
            }
            Err(e) => {
                if interesting(name) || fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink()) {
                    found.skipped.push(Skipped {
                        path,
                        reason: io_reason(&e),
                    });
                }
            }
        }
    }
}

/// What one file turned out to hold.
pub(super) enum Content {
    /// Certificates (and possibly a key in the same file), with blocks that failed.
    Certs {
        certs: Vec<CertFacts>,
        keys: Vec<KeyInfo>,
        errors: Vec<String>,
        encoding: Encoding,
    },
    /// A private key.
    Key(KeyInfo),
    /// Nothing of ours (a public key, a CSR in a `.pem`).
    Ignored,
    /// Unusable, with the reason.
    Skip(String),
}

/// Reads and classifies one file; never panics, never reads more than `MAX_FILE_SIZE`.
pub(super) fn read_file(path: &Path) -> Content {
    let data = match read_bounded(path) {
        Ok(d) => d,
        Err(reason) => return Content::Skip(reason),
    };
    if data.iter().all(|b| b.is_ascii_whitespace()) {
        return Content::Skip("empty file".into());
    }
    if pem::is_pem(&data) {
        classify_pem(&data)
    } else {
        classify_der(data)
    }
}

pub(super) fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let file = fs::File::open(path).map_err(|e| io_reason(&e))?;
    let len = file.metadata().map_err(|e| io_reason(&e))?.len();
    if len > MAX_FILE_SIZE {
        return Err(format!(
            "too large: {len} bytes (certificate and key files are read up to {MAX_FILE_SIZE} bytes)"
        ));
    }
    let mut data = Vec::with_capacity(len as usize);
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut data)
        .map_err(|e| io_reason(&e))?;
    if data.len() as u64 > MAX_FILE_SIZE {
        return Err(format!(
            "too large: more than {MAX_FILE_SIZE} bytes (it grew while being read)"
        ));
    }
    Ok(data)
}

fn classify_pem(data: &[u8]) -> Content {
    let mut certs = Vec::new();
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    let mut other_labels = Vec::new();
    for (n, block) in pem::blocks(data).into_iter().enumerate() {
        match block {
            Ok(b) if b.label == "CERTIFICATE" || b.label == "X509 CERTIFICATE" => {
                match CertFacts::parse(b.der) {
                    Ok(c) => certs.push(c),
                    Err(e) => errors.push(format!("PEM block {}: {e}", n + 1)),
                }
            }
            Ok(b) if key::is_private_key_label(&b.label) => {
                match key::from_pem(&b.label, &b.headers, &b.der) {
                    Ok(k) => keys.push(k),
                    Err(e) => errors.push(format!("PEM block {}: not a private key: {e}", n + 1)),
                }
            }
            Ok(b) => other_labels.push(b.label),
            Err(e) => errors.push(format!(
                "not a certificate: PEM block {}{}: {}",
                n + 1,
                if e.label.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", e.label)
                },
                e.reason
            )),
        }
    }
    if !certs.is_empty() {
        return Content::Certs {
            certs,
            keys,
            errors,
            encoding: Encoding::Pem,
        };
    }
    if let Some(k) = keys.into_iter().next() {
        return Content::Key(k);
    }
    if let Some(e) = errors.into_iter().next() {
        return Content::Skip(e);
    }
    if other_labels
        .iter()
        .all(|l| l == "PUBLIC KEY" || l == "RSA PUBLIC KEY" || l.contains("PARAMETERS"))
    {
        return Content::Ignored;
    }
    Content::Skip(format!(
        "not a certificate: holds only {}",
        other_labels.join(", ")
    ))
}

fn classify_der(data: Vec<u8>) -> Content {
    if let Some(k) = key::from_der(&data) {
        return Content::Key(k);
    }
    match CertFacts::parse(data) {
        Ok(c) => Content::Certs {
            certs: vec![c],
            keys: Vec::new(),
            errors: Vec::new(),
            encoding: Encoding::Der,
        },
        Err(_) => Content::Skip(
            "not a certificate: neither a PEM file nor a DER certificate or key".into(),
        ),
    }
}
