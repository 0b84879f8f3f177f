//! Short names for tables: where a certificate is listed (the watch that holds it, or the
//! directory of its kubeconfig) and its name there; each CA by the shortest name that tells
//! it apart from every other CA.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Component, Path};

/// Where a certificate is listed in a table: a group heading, and its name under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place<'a> {
    /// The group heading (the watched directory, or a kubeconfig's directory).
    pub group: Cow<'a, str>,
    /// Whether the group is a kubeconfig directory outside its watch.
    pub kubeconfigs: bool,
    /// The path relative to the group.
    pub name: Cow<'a, str>,
}

/// The place of `path` found under the watched directory `watch`.
pub fn place<'a>(path: &'a Path, watch: Option<&'a Path>) -> Place<'a> {
    if let Some(w) = watch
        && let Ok(rel) = path.strip_prefix(w)
        && !rel.as_os_str().is_empty()
    {
        return Place {
            group: w.to_string_lossy(),
            kubeconfigs: false,
            name: rel.to_string_lossy(),
        };
    }
    // A kubeconfig outside its watch (kubeadm's /etc/kubernetes/admin.conf): its directory.
    let dir = path.parent().unwrap_or(Path::new("/"));
    Place {
        group: dir.to_string_lossy(),
        kubeconfigs: true,
        name: path
            .file_name()
            .map_or_else(|| path.to_string_lossy(), |n| n.to_string_lossy()),
    }
}

/// A CA to name: its file, the watched directory holding it, and its position in the file.
#[derive(Debug, Clone)]
pub struct CaFile<'a> {
    /// The certificate file.
    pub path: &'a Path,
    /// The watched directory it was found under.
    pub watch: Option<&'a Path>,
    /// Its position in the file (0 for the first).
    pub index: usize,
    /// How many certificates the file holds.
    pub certs_in_file: usize,
}

/// A name for each CA, in order: its path relative to its watch without the extension
/// (`ca`, `etcd/ca`), with `#2`... for the later CAs of a bundle; where two CAs would have
/// the same name, parent directories are added to both (`etcd/ca`, `pki/ca`) until they
/// differ, and at worst the whole path is used.
pub fn ca_names(cas: &[CaFile<'_>]) -> Vec<String> {
    let candidates: Vec<Vec<String>> = cas.iter().map(candidates).collect();
    let mut level = vec![0usize; cas.len()];
    let name = |i: usize, level: &[usize]| candidates[i][level[i]].clone();
    loop {
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for i in 0..cas.len() {
            by_name.entry(name(i, &level)).or_default().push(i);
        }
        let mut grew = false;
        for same in by_name.values().filter(|v| v.len() > 1) {
            for &i in same {
                if level[i] + 1 < candidates[i].len() {
                    level[i] += 1;
                    grew = true;
                }
            }
        }
        if !grew {
            return (0..cas.len()).map(|i| name(i, &level)).collect();
        }
    }
}

/// The names of one CA, shortest first; the last is its whole path.
fn candidates(ca: &CaFile<'_>) -> Vec<String> {
    let suffix = match ca.certs_in_file > 1 && ca.index > 0 {
        true => format!("#{}", ca.index + 1),
        false => String::new(),
    };
    let parts: Vec<String> = ca
        .path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let own = ca
        .watch
        .and_then(|w| ca.path.strip_prefix(w).ok())
        .map_or(1, |rel| rel.components().count().max(1));
    let stem = ca
        .path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let mut out: Vec<String> = (own.min(parts.len())..=parts.len())
        .map(|n| {
            let mut tail = parts[parts.len() - n..].to_vec();
            if let Some(last) = tail.last_mut() {
                *last = stem.clone();
            }
            format!("{}{suffix}", tail.join("/"))
        })
        .collect();
    out.push(format!("{}{suffix}", ca.path.display()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca<'a>(path: &'a str, watch: &'a str) -> CaFile<'a> {
        CaFile {
            path: Path::new(path),
            watch: Some(Path::new(watch)),
            index: 0,
            certs_in_file: 1,
        }
    }

    #[test]
    fn cas_are_named_relative_to_their_watch_without_extension() {
        let pki = "/etc/kubernetes/pki";
        let names = ca_names(&[
            ca("/etc/kubernetes/pki/ca.crt", pki),
            ca("/etc/kubernetes/pki/etcd/ca.crt", pki),
            ca("/etc/kubernetes/pki/front-proxy-ca.crt", pki),
        ]);
        assert_eq!(names, ["ca", "etcd/ca", "front-proxy-ca"]);
    }

    #[test]
    fn the_same_name_in_two_watches_gets_parent_directories() {
        let names = ca_names(&[
            ca("/etc/etcd/ca.crt", "/etc/etcd"),
            ca("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki"),
            ca(
                "/etc/kubernetes/pki/front-proxy-ca.crt",
                "/etc/kubernetes/pki",
            ),
        ]);
        assert_eq!(names, ["etcd/ca", "pki/ca", "front-proxy-ca"]);
    }

    #[test]
    fn bundles_and_same_stems_stay_apart() {
        let w = "/p";
        let mut second = ca("/p/ca-bundle.crt", w);
        second.index = 1;
        second.certs_in_file = 2;
        let mut first = ca("/p/ca-bundle.crt", w);
        first.certs_in_file = 2;
        let names = ca_names(&[first, second, ca("/p/ca.crt", w), ca("/p/ca.pem", w)]);
        assert_eq!(
            names,
            ["ca-bundle", "ca-bundle#2", "/p/ca.crt", "/p/ca.pem"]
        );
    }

    #[test]
    fn kubeconfigs_outside_their_watch_are_listed_by_directory() {
        let pki = Path::new("/etc/kubernetes/pki");
        let p = place(Path::new("/etc/kubernetes/pki/etcd/peer.crt"), Some(pki));
        assert_eq!(
            (&*p.group, &*p.name),
            ("/etc/kubernetes/pki", "etcd/peer.crt")
        );
        assert!(!p.kubeconfigs);
        let p = place(Path::new("/etc/kubernetes/admin.conf"), Some(pki));
        assert_eq!((&*p.group, &*p.name), ("/etc/kubernetes", "admin.conf"));
        assert!(p.kubeconfigs);
    }
}
