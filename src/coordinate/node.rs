//! What this node's own etcd configuration says about its cluster: the member's name, the
//! members of the cluster (`--initial-cluster`) and the client URLs it advertises
//! (`--advertise-client-urls`), read from where the seeds' controllers keep them: kubeadm's
//! static pod manifest, Debian's `/etc/default/etcd`, the `ETCD_*` environment file of
//! StarlingX and RHEL, etcd's YAML config file, and the flags of an `etcd.service` unit (the
//! hard way). Nothing is contacted: this is what `auto` decides from, and what tells a
//! cluster that is down (every member refuses connections) from one this node cannot reach.

use std::path::{Path, PathBuf};

pub use crate::format::flags::host_port;
use crate::format::flags::{setting, urls};
use crate::served::ETCD_FILES;

/// kubelet's manifest directory as kubeadm sets it up, when none is configured.
const MANIFESTS: &str = "/etc/kubernetes/manifests";

/// Where etcd's settings are looked for, in this order, each as a message names it and
/// where it is read under `root`; the first value found of each wins: the static pod
/// manifest `etcd.yaml` of `manifests` (the configured `manifests_dir`; kubeadm's when
/// `None`), then the files the served-names check reads too.
fn sources(root: &Path, manifests: Option<&Path>) -> Vec<(PathBuf, PathBuf)> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    let manifest = match manifests {
        Some(dir) => (dir.join("etcd.yaml"), dir.join("etcd.yaml")),
        None => {
            let named = Path::new(MANIFESTS).join("etcd.yaml");
            let read = under(&named.to_string_lossy());
            (named, read)
        }
    };
    std::iter::once(manifest)
        .chain(ETCD_FILES.iter().map(|f| (PathBuf::from(f), under(f))))
        .collect()
}

/// Where etcd's settings are looked for, for a message: the files, and the unit running
/// etcd as systemd runs it, when one does.
pub fn looked_in(manifests: Option<&Path>, unit: Option<&Unit>) -> String {
    let mut names: Vec<String> = (sources(Path::new("/"), manifests).into_iter())
        .map(|(named, _)| named.display().to_string())
        .collect();
    if let Some((name, _)) = unit {
        names.insert(1, as_run(name).display().to_string());
    }
    names.join(", ")
}

/// A unit running etcd: where its settings come from (the unit and its environment files),
/// and its settings as systemd runs it (command lines and `NAME=value` environment lines;
/// `NodeReading::etcd_unit`).
pub type Unit = (String, String);

/// How the unit's settings are named in messages: as the reading says where they come from.
fn as_run(from: &str) -> PathBuf {
    PathBuf::from(from)
}

/// One member of the cluster as `--initial-cluster` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub peer_url: String,
}

/// This node's etcd member, as its configuration says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeEtcd {
    /// The files the settings came from.
    pub sources: Vec<PathBuf>,
    /// `--name`.
    pub name: Option<String>,
    /// `--initial-cluster`: every member, by name and peer URL.
    pub peers: Vec<Peer>,
    /// `--advertise-client-urls` of this node's member.
    pub client_urls: Vec<String>,
}

impl NodeEtcd {
    /// The number of members `--initial-cluster` names.
    pub fn members(&self) -> usize {
        let mut names: Vec<&str> = self.peers.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    }

    /// The files, for a message.
    pub fn describe_sources(&self) -> String {
        let s: Vec<String> = self
            .sources
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        s.join(", ")
    }
}

/// The node's etcd settings under `root` (`/` on a node), etcd's manifest in `manifests`
/// (kubeadm's directory when `None`); `None` when no file names any.
pub fn read(root: &Path, manifests: Option<&Path>, unit: Option<&Unit>) -> Option<NodeEtcd> {
    let mut node = NodeEtcd::default();
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    for (i, (source, path)) in sources(root, manifests).into_iter().enumerate() {
        // What systemd runs comes right after the manifest: before files it may not use.
        if i == 1
            && let Some((name, text)) = unit
        {
            texts.push((as_run(name), text.clone()));
        }
        if let Ok(text) = crate::fsutil::read_to_string(&path) {
            texts.push((source, text));
        }
    }
    for (source, text) in texts {
        // `key: value` only in etcd's own YAML file: a manifest's `name:` is the pod's.
        let name = source.to_string_lossy();
        let yaml = name.ends_with(".yml") || name.ends_with(".conf.yaml");
        let setting = |key| setting(&text, key, yaml);
        let mut used = false;
        if node.name.is_none()
            && let Some(v) = setting("name")
        {
            node.name = Some(v);
            used = true;
        }
        if node.peers.is_empty()
            && let Some(v) = setting("initial-cluster")
        {
            node.peers = peers(&v);
            used = !node.peers.is_empty() || used;
        }
        if node.client_urls.is_empty()
            && let Some(v) = setting("advertise-client-urls")
        {
            node.client_urls = urls(&v);
            used = !node.client_urls.is_empty() || used;
        }
        if used {
            node.sources.push(source);
        }
    }
    (!node.sources.is_empty()).then_some(node)
}

fn peers(v: &str) -> Vec<Peer> {
    v.split(',')
        .filter_map(|p| p.split_once('='))
        .map(|(name, url)| Peer {
            name: name.trim().to_string(),
            peer_url: url.trim().to_string(),
        })
        .filter(|p| !p.name.is_empty() && p.peer_url.contains("://"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn the_hard_ways_unit_flags_name_the_cluster() {
        // As the seed's etcd.service is written (variables already expanded but one).
        let unit = "[Service]\nExecStart=/usr/local/bin/etcd \\\n  --name controller-0 \\\n  \
            --advertise-client-urls https://10.0.1.10:2379 \\\n  --initial-cluster-token etcd-cluster-0 \\\n  \
            --initial-cluster controller-0=https://10.0.1.10:2380,controller-1=https://10.0.1.11:2380,controller-2=https://10.0.1.12:2380 \\\n  \
            --initial-cluster-state new \\\n  --data-dir=/var/lib/etcd\n";
        let dir = tree(&[("/etc/systemd/system/etcd.service", unit)]);
        let n = read(dir.path(), None, None).unwrap();
        assert_eq!(n.name.as_deref(), Some("controller-0"));
        assert_eq!(n.members(), 3);
        assert_eq!(n.peers[1].peer_url, "https://10.0.1.11:2380");
        assert_eq!(n.client_urls, ["https://10.0.1.10:2379"]);
        assert_eq!(n.describe_sources(), "/etc/systemd/system/etcd.service");
    }

    #[test]
    fn debians_environment_file_and_kubeadms_manifest_are_read_and_comments_are_not() {
        let env = "#ETCD_NAME=\"old\"\nETCD_NAME=\"node1\"\nETCD_INITIAL_CLUSTER=\"node1=https://127.0.0.1:2380,node2=https://127.0.0.2:2380\"\n\
            ETCD_ADVERTISE_CLIENT_URLS=https://127.0.0.1:2379\n";
        let dir = tree(&[("/etc/default/etcd", env)]);
        let n = read(dir.path(), None, None).unwrap();
        assert_eq!(n.name.as_deref(), Some("node1"));
        assert_eq!(n.members(), 2);
        assert_eq!(n.client_urls, ["https://127.0.0.1:2379"]);

        let manifest = "metadata:\n  name: etcd\nspec:\n  containers:\n  - command:\n    - etcd\n    - --advertise-client-urls=https://192.168.1.5:2379\n    \
            - --initial-cluster=cp1=https://192.168.1.5:2380\n    - --initial-cluster-state=new\n    - --name=cp1\n";
        let dir = tree(&[("/etc/kubernetes/manifests/etcd.yaml", manifest)]);
        let n = read(dir.path(), None, None).unwrap();
        assert_eq!(n.name.as_deref(), Some("cp1"));
        assert_eq!(n.members(), 1);
        assert_eq!(n.client_urls, ["https://192.168.1.5:2379"]);
    }

    /// A kubelet given another manifest directory: etcd's manifest is read there, as the
    /// restarts move it, and not from kubeadm's default.
    #[test]
    fn etcds_manifest_is_read_in_the_configured_manifest_directory() {
        let manifest = |name: &str| {
            format!(
                "spec:\n  containers:\n  - command:\n    - etcd\n    - --name={name}\n    \
                 - --initial-cluster=a=https://127.0.0.1:2380,b=https://127.0.0.2:2380\n"
            )
        };
        let dir = tree(&[
            ("/etc/kubernetes/manifests/etcd.yaml", &manifest("default")),
            ("/srv/kubelet/manifests/etcd.yaml", &manifest("configured")),
        ]);
        let configured = dir.path().join("srv/kubelet/manifests");
        let n = read(dir.path(), Some(&configured), None).unwrap();
        assert_eq!(n.name.as_deref(), Some("configured"));
        assert_eq!(n.members(), 2);
        assert_eq!(n.sources, [configured.join("etcd.yaml")]);
        assert!(
            looked_in(Some(&configured), None)
                .starts_with(&format!("{}, ", configured.join("etcd.yaml").display()))
        );
        assert_eq!(
            read(dir.path(), None, None).unwrap().name.as_deref(),
            Some("default")
        );
        let empty = dir.path().join("nowhere");
        assert_eq!(read(dir.path(), Some(&empty), None), None);
    }

    #[test]
    fn a_yaml_config_a_shell_variable_and_nothing_at_all() {
        let yml =
            "name: 'a'\ninitial-cluster: a=https://h1:2380,b=https://h2:2380,c=https://h3:2380\n";
        let dir = tree(&[("/etc/etcd/etcd.conf.yml", yml)]);
        let n = read(dir.path(), None, None).unwrap();
        assert_eq!(n.members(), 3);
        assert!(n.client_urls.is_empty());
        let dir = tree(&[("/etc/default/etcd", "ETCD_INITIAL_CLUSTER=${CLUSTER}\n")]);
        assert_eq!(read(dir.path(), None, None), None);
        assert_eq!(read(tree(&[]).path(), None, None), None);
    }

    #[test]
    fn host_and_port_of_a_url() {
        assert_eq!(
            host_port("https://10.0.1.10:2380"),
            Some(("10.0.1.10".into(), 2380))
        );
        assert_eq!(
            host_port("https://[fd00::1]:2379/"),
            Some(("fd00::1".into(), 2379))
        );
        assert_eq!(
            host_port("https://etcd-0.local:2379"),
            Some(("etcd-0.local".into(), 2379))
        );
        assert_eq!(host_port("unix://x"), None);
    }
}
