//! Walking watched directories: every file named like a certificate or key, each real file
//! once (symlinks merged), and what cannot be listed. Reading each file is `read.rs`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use memchr::memrchr;

use super::Skipped;

/// File name endings that may hold certificates or keys.
const EXTENSIONS: &[&str] = &["crt", "pem", "cer", "der", "key"];

pub(super) struct Found {
    /// Each file once, by the path it really is, with the other watched paths naming it.
    pub files: Vec<FoundFile>,
    pub skipped: Vec<Skipped>,
    /// Watched paths and files named like certificates that cannot be read.
    pub errors: Vec<Skipped>,
}

/// A candidate file.
pub(super) struct FoundFile {
    /// The path it is listed by: the file itself when it is under a watch, else the first
    /// symlink to it.
    pub path: PathBuf,
    /// What `path` resolves to.
    pub real: PathBuf,
    /// Other watched paths (symlinks) naming the same file.
    pub aliases: Vec<PathBuf>,
    /// The watch it is under.
    pub watch: usize,
}

/// A watched directory.
#[derive(Debug, Clone)]
pub struct Root {
    /// The directory.
    pub path: PathBuf,
    /// A missing directory is not an error (a default that a node may not have).
    pub optional: bool,
    /// Only these files of it are read, with their keys (a watch of the files a
    /// component's settings name); `None`: the directory, walked.
    pub only: Option<Vec<PathBuf>>,
}

impl Root {
    /// A directory that must exist.
    pub fn required(path: impl Into<PathBuf>) -> Root {
        Root {
            path: path.into(),
            optional: false,
            only: None,
        }
    }
}

fn interesting(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext))
}

/// Why `path` cannot be read, from the error that reading it gave. A dangling symlink
/// names where it points: that missing file is what the operator has to find or restore.
pub(super) fn io_reason(path: &Path, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "symlink loop".into(),
        _ if e.kind() == ErrorKind::PermissionDenied => "permission denied".into(),
        _ if e.kind() == ErrorKind::NotFound => match fs::read_link(path) {
            // A relative target is followed from the link's directory: named from there.
            Ok(target) => {
                let target = path.parent().map_or(target.clone(), |d| d.join(&target));
                format!("dangling symlink to {} (no such file)", target.display())
            }
            // Not a symlink: the file was listed, then removed before it was read.
            Err(_) => "vanished file (no such file)".into(),
        },
        _ => e.to_string(),
    }
}

/// Every candidate file under `roots`, each with the index of the most specific root it is under.
pub(super) fn walk(roots: &[Root]) -> Found {
    let mut found = Found {
        files: Vec::new(),
        skipped: Vec::new(),
        errors: Vec::new(),
    };
    let mut seen_dirs: HashSet<(u64, u64)> = HashSet::new();
    let mut listed: Vec<Listed> = Vec::new();
    // Deeper roots first, so a nested watch owns its files.
    let mut order: Vec<usize> = (0..roots.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(roots[i].path.components().count()));
    for i in order {
        // Only the files a component's settings name, and their keys: nothing else of a
        // directory that may hold other hosts' pairs, nor below it.
        if let Some(only) = &roots[i].only {
            for f in only {
                let keys = super::pairing::key_candidates(f);
                for p in std::iter::once(f.clone()).chain(keys) {
                    if p.is_file() && !listed.iter().any(|l| l.0 == p) {
                        listed.push((p, i, None));
                    }
                }
            }
            continue;
        }
        let root = &roots[i].path;
        let mut walker = Walker {
            watch: i,
            seen_dirs: &mut seen_dirs,
            listed: &mut listed,
            found: &mut found,
        };
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => walker.dir(root, true),
            Err(e) if e.kind() == ErrorKind::NotFound && roots[i].optional => {
                found.skipped.push(Skipped {
                    path: root.clone(),
                    reason: "optional watched directory not present on this node".into(),
                })
            }
            Ok(_) => found.errors.push(Skipped {
                path: root.clone(),
                reason: "watched path is not a directory".into(),
            }),
            Err(e) if e.kind() == ErrorKind::NotFound => found.errors.push(Skipped {
                path: root.clone(),
                reason: "watched directory does not exist (mistyped? set `optional = true` on a watch this node may lack)".into(),
            }),
            Err(e) => found.errors.push(Skipped {
                path: root.clone(),
                reason: format!("watched directory cannot be read: {}", io_reason(root, &e)),
            }),
        }
    }
    // The configured ones: what the settings of a component name is watched besides, and
    // does not make a mistyped configuration right.
    let configured: Vec<&Root> = roots.iter().filter(|r| r.only.is_none()).collect();
    if !configured.is_empty() && configured.iter().all(|r| r.optional && !r.path.exists()) {
        let all: Vec<String> = (configured.iter())
            .map(|r| r.path.display().to_string())
            .collect();
        let besides = match configured.len() < roots.len() {
            true => " (only the files the components' settings name are)",
            false => "",
        };
        found.errors.push(Skipped {
            path: configured[0].path.clone(),
            reason: format!(
                "none of the watched directories exists ({}): the configuration watches nothing on this node{besides}",
                all.join(", ")
            ),
        });
    }
    found.files = by_real_path(listed);
    found
        .skipped
        .sort_by(|a, b| a.path.cmp(&b.path).then(a.reason.cmp(&b.reason)));
    found
        .errors
        .sort_by(|a, b| a.path.cmp(&b.path).then(a.reason.cmp(&b.reason)));
    found
}

/// A candidate file as the walk lists it: its path, its watch, and what it resolves to when
/// that is known without asking the file system (a file that is not a symlink, in a
/// directory whose real path is known).
type Listed = (PathBuf, usize, Option<PathBuf>);

/// One entry per real file: a symlink and the file it names are one certificate, listed
/// by the file's own path when that is watched, the symlinks as aliases.
fn by_real_path(mut listed: Vec<Listed>) -> Vec<FoundFile> {
    listed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    // Files the listing resolved (no symlink, in a directory listed once) have real paths of
    // their own; only a symlink can share one.
    let all_resolved = listed.iter().all(|l| l.2.is_some());
    let reals: Vec<PathBuf> = listed
        .iter_mut()
        .map(|(path, _, real)| {
            real.take()
                .or_else(|| fs::canonicalize(&*path).ok())
                .unwrap_or_else(|| path.clone())
        })
        .collect();
    // For each file, the first one listed with the same real path (by its bytes: real
    // paths are canonical).
    let first: Vec<usize> = match all_resolved {
        true => (0..reals.len()).collect(),
        false => {
            let mut seen: HashMap<&OsStr, usize> = HashMap::with_capacity(reals.len());
            (reals.iter().enumerate())
                .map(|(i, r)| *seen.entry(r.as_os_str()).or_insert(i))
                .collect()
        }
    };
    let mut out: Vec<FoundFile> = Vec::with_capacity(listed.len());
    let mut slot = vec![0; listed.len()];
    let mut merged = false;
    for (i, ((path, watch, _), real)) in listed.into_iter().zip(reals).enumerate() {
        if first[i] == i {
            slot[i] = out.len();
            out.push(FoundFile {
                path,
                real,
                aliases: Vec::new(),
                watch,
            });
            continue;
        }
        let f = &mut out[slot[first[i]]];
        merged = true;
        if path == real {
            let link = std::mem::replace(&mut f.path, path);
            f.aliases.push(link);
            f.watch = watch;
        } else {
            f.aliases.push(path);
        }
        f.aliases.sort();
    }
    // A merge may have put a file's own path in place of a symlink's.
    if merged {
        out.sort_by(|a, b| a.path.cmp(&b.path));
    }
    out
}

/// The walk of one watched directory.
struct Walker<'a> {
    watch: usize,
    seen_dirs: &'a mut HashSet<(u64, u64)>,
    listed: &'a mut Vec<Listed>,
    found: &'a mut Found,
}

impl Walker<'_> {
    fn skip(&mut self, path: &Path, reason: String) {
        self.found.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason,
        });
    }

    fn error(&mut self, path: &Path, reason: String) {
        self.found.errors.push(Skipped {
            path: path.to_path_buf(),
            reason,
        });
    }

    /// The sorted entries of `dir` with their types (a symlink's is the link's own), unless
    /// it was scanned already (a symlink loop, reported below the root) or cannot be listed
    /// (an error: it may hide certificates).
    fn entries_once(
        &mut self,
        dir: &Path,
        is_root: bool,
    ) -> Option<Vec<(PathBuf, Option<fs::FileType>)>> {
        crate::progress::step();
        let id = match fs::metadata(dir) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) => {
                self.error(
                    dir,
                    format!("cannot read directory: {}", io_reason(dir, &e)),
                );
                return None;
            }
        };
        if !self.seen_dirs.insert(id) {
            if !is_root && fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
                self.skip(dir, "symlink loop: directory already scanned".into());
            }
            return None;
        }
        match fs::read_dir(dir) {
            Ok(entries) => {
                let mut paths: Vec<_> = entries
                    .filter_map(Result::ok)
                    .map(|e| {
                        // Held for the whole scan: without the slack `join` leaves (up to
                        // twice the length; 1.4 MiB of 20,010 paths).
                        let mut path = e.path().into_os_string();
                        path.shrink_to_fit();
                        (PathBuf::from(path), e.file_type().ok())
                    })
                    .collect();
                // By name, as bytes: within one directory that is the order of the paths.
                paths.sort_unstable_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
                Some(paths)
            }
            Err(e) => {
                self.error(
                    dir,
                    format!("cannot list directory: {}", io_reason(dir, &e)),
                );
                None
            }
        }
    }

    /// Walks `dir` recursively: files named like certificates and keys, and what was
    /// skipped or could not be read.
    fn dir(&mut self, dir: &Path, is_root: bool) {
        let Some(entries) = self.entries_once(dir, is_root) else {
            return;
        };
        // The directory's real path, found once: a file in it that is not a symlink
        // resolves to it joined with the file's name.
        let mut real_dir: Option<Option<PathBuf>> = None;
        for (path, kind) in entries {
            // The entry's name: what follows the last slash of a path the listing made.
            let bytes = path.as_os_str().as_bytes();
            let file_name = OsStr::from_bytes(&bytes[memrchr(b'/', bytes).map_or(0, |i| i + 1)..]);
            // Lossy, so a name that is not UTF-8 is still looked at, never passed over silently.
            let named_like_one = interesting(&file_name.to_string_lossy());
            // A regular file that is not a symlink needs no stat: the listing said what it is.
            // Each directory is listed once, so each path is listed once.
            if kind.is_some_and(|k| k.is_file()) {
                if named_like_one {
                    let real_dir = real_dir.get_or_insert_with(|| fs::canonicalize(dir).ok());
                    let real = real_dir.as_ref().map(|d| d.join(file_name));
                    self.listed.push((path, self.watch, real));
                }
                continue;
            }
            match fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    if named_like_one {
                        self.skip(
                            &path,
                            "is a directory, not a certificate file (its contents are scanned)"
                                .into(),
                        );
                    }
                    self.dir(&path, false);
                }
                Ok(m) if m.is_file() => {
                    if named_like_one {
                        self.listed.push((path, self.watch, None));
                    }
                }
                // A certificate's name on what holds none (a FIFO, a device): a file that
                // cannot be read, which fails the pass, never one passed over uncounted.
                Ok(m) if named_like_one => {
                    let why =
                        crate::fsutil::ReadError::NotRegular(crate::fsutil::kind_of(m.file_type()));
                    self.error(&path, why.to_string());
                }
                Ok(_) => {}
                // A certificate's name that cannot be followed may be a certificate lost.
                Err(e) if named_like_one => self.error(&path, io_reason(&path, &e)),
                Err(e) => {
                    if fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink()) {
                        self.skip(&path, io_reason(&path, &e));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dangling_symlink_names_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let pki = tmp.path().join("pki");
        fs::create_dir(&pki).unwrap();
        std::os::unix::fs::symlink(pki.join("old.crt"), pki.join("apiserver.crt")).unwrap();
        // A relative target is named by where it points, from the link's directory.
        std::os::unix::fs::symlink("gone/ca.crt", pki.join("ca.crt")).unwrap();
        let found = walk(&[Root::required(&pki)]);
        let reasons: Vec<(String, String)> = found
            .errors
            .iter()
            .map(|s| (s.path.display().to_string(), s.reason.clone()))
            .collect();
        for r in &reasons {
            println!("{}: {}", r.0, r.1);
        }
        let p = |name: &str| pki.join(name).display().to_string();
        assert_eq!(
            reasons,
            [
                (
                    p("apiserver.crt"),
                    format!("dangling symlink to {} (no such file)", p("old.crt"))
                ),
                (
                    p("ca.crt"),
                    format!("dangling symlink to {} (no such file)", p("gone/ca.crt"))
                ),
            ]
        );
    }

    #[test]
    fn a_file_gone_that_was_no_symlink_vanished() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("etcd-server.crt");
        let e = fs::File::open(&gone).unwrap_err();
        let reason = io_reason(&gone, &e);
        println!("{}: {reason}", gone.display());
        assert_eq!(reason, "vanished file (no such file)");
    }
}
