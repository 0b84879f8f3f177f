//! What this node's own etcd configuration says about its cluster: the member's name, the
//! members of the cluster (`--initial-cluster`) and the client URLs it advertises
//! (`--advertise-client-urls`), read from where the seeds' controllers keep them: the
//! static pod or the unit the node's reading found running etcd (kubeadm's manifest, the
//! hard way's `etcd.service`, kubespray's `/etc/etcd.env`), then Debian's
//! `/etc/default/etcd`, the `ETCD_*` environment file of StarlingX and RHEL, etcd's YAML
//! config file and the unit files. Nothing is contacted: this is where `auto` asks, and
//! where it looks for this node's own member when no member answers.

use std::path::{Path, PathBuf};

use crate::components::{Kind, NodeReading};
pub use crate::format::flags::host_port;
use crate::format::flags::{setting, urls};
use crate::served::ETCD_FILES;

/// kubelet's manifest directory as kubeadm sets it up, for messages when none is
/// configured.
const MANIFESTS: &str = "/etc/kubernetes/manifests";

/// etcd's settings files under `root` (`/` on a node), each as a message names it and
/// where it is read, in the order they are read (after what the node's reading says runs).
fn files(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    (ETCD_FILES.iter())
        .map(|f| (PathBuf::from(f), under(f)))
        .collect()
}

/// Where a component's settings come from (a manifest; a unit as systemd runs it, with its
/// environment files) and its settings as text (command lines, then `NAME=value`
/// environment lines), as the node's reading gives them.
pub type Unit = (String, String);

/// What runs etcd on this node, as the node's reading found it by its command: a static
/// pod and a unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    pub pod: Option<Unit>,
    pub unit: Option<Unit>,
}

impl Runs {
    /// What `node` says runs etcd.
    pub fn of(node: &NodeReading) -> Runs {
        Runs {
            pod: node.pod_running(Kind::Etcd),
            unit: node.unit_running(Kind::Etcd),
        }
    }

    /// The pod, then the unit: what systemd or kubelet runs comes before files it may not
    /// use.
    fn all(&self) -> impl Iterator<Item = &Unit> {
        self.pod.iter().chain(&self.unit)
    }
}

/// Where etcd's settings are looked for, for a message: the static pod running etcd (by
/// its manifest; the static pods of `manifests` when none does), the unit running it, the
/// files.
pub fn looked_in(manifests: Option<&Path>, runs: &Runs) -> String {
    let pods = match &runs.pod {
        Some((manifest, _)) => manifest.clone(),
        None => format!(
            "the static pods of {}",
            manifests.unwrap_or(Path::new(MANIFESTS)).display()
        ),
    };
    let rest = (runs.unit.iter().map(|(from, _)| from.clone()))
        .chain(ETCD_FILES.iter().map(|f| f.to_string()));
    std::iter::once(pods)
        .chain(rest)
        .collect::<Vec<_>>()
        .join(", ")
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
    /// `--data-dir`: where its write-ahead log says which cluster it is of.
    pub data_dir: Option<PathBuf>,
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

/// The node's etcd settings: what runs etcd as the node's reading says (`runs`), then
/// the files under `root` (`/` on a node); `None` when none names any.
pub fn read(root: &Path, runs: &Runs) -> Option<NodeEtcd> {
    let mut node = NodeEtcd::default();
    let mut texts: Vec<(PathBuf, String)> = (runs.all())
        .map(|(from, text)| (PathBuf::from(from), text.clone()))
        .collect();
    for (source, path) in files(root) {
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
        if node.data_dir.is_none()
            && let Some(v) = setting("data-dir")
        {
            node.data_dir = Some(PathBuf::from(v));
            used = true;
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
        let n = read(dir.path(), &Runs::default()).unwrap();
        assert_eq!(n.name.as_deref(), Some("controller-0"));
        assert_eq!(n.members(), 3);
        assert_eq!(n.peers[1].peer_url, "https://10.0.1.11:2380");
        assert_eq!(n.client_urls, ["https://10.0.1.10:2379"]);
        assert_eq!(n.data_dir, Some(PathBuf::from("/var/lib/etcd")));
        assert_eq!(n.describe_sources(), "/etc/systemd/system/etcd.service");
    }

    #[test]
    fn debians_environment_file_and_kubeadms_manifest_are_read_and_comments_are_not() {
        let env = "#ETCD_NAME=\"old\"\nETCD_NAME=\"node1\"\nETCD_INITIAL_CLUSTER=\"node1=https://127.0.0.1:2380,node2=https://127.0.0.2:2380\"\n\
            ETCD_ADVERTISE_CLIENT_URLS=https://127.0.0.1:2379\n";
        let dir = tree(&[("/etc/default/etcd", env)]);
        let n = read(dir.path(), &Runs::default()).unwrap();
        assert_eq!(n.name.as_deref(), Some("node1"));
        assert_eq!(n.members(), 2);
        assert_eq!(n.client_urls, ["https://127.0.0.1:2379"]);

        let manifest = "metadata:\n  name: etcd\nspec:\n  containers:\n  - command:\n    - etcd\n    - --advertise-client-urls=https://192.168.1.5:2379\n    \
            - --initial-cluster=cp1=https://192.168.1.5:2380\n    - --initial-cluster-state=new\n    - --name=cp1\n";
        let dir = tree(&[("/etc/kubernetes/manifests/etcd.yaml", manifest)]);
        let pods = NodeReading::read(&dir.path().join("etc/kubernetes/manifests"));
        let n = read(dir.path(), &Runs::of(&pods)).unwrap();
        assert_eq!(n.name.as_deref(), Some("cp1"));
        assert_eq!(n.members(), 1);
        assert_eq!(n.client_urls, ["https://192.168.1.5:2379"]);
    }

    /// etcd is known by what a static pod runs, in whichever manifest of the configured
    /// directory: another directory's `etcd.yaml`, and a manifest of that name running
    /// something else, say nothing of it.
    #[test]
    fn etcd_is_the_static_pod_whose_command_runs_it_whatever_its_manifests_name() {
        let pod = |command: &str, name: &str| {
            format!(
                "spec:\n  containers:\n  - command:\n    - {command}\n    - --name={name}\n    \
                 - --initial-cluster=a=https://127.0.0.1:2380,b=https://127.0.0.2:2380\n"
            )
        };
        let dir = tree(&[
            (
                "/etc/kubernetes/manifests/etcd.yaml",
                &pod("etcd", "default"),
            ),
            (
                "/srv/kubelet/manifests/etcd.yaml",
                &pod("/usr/local/bin/kube-vip", "vip"),
            ),
            (
                "/srv/kubelet/manifests/store.yaml",
                &pod("/usr/local/bin/etcd", "configured"),
            ),
        ]);
        let configured = dir.path().join("srv/kubelet/manifests");
        let runs = Runs::of(&NodeReading::read(&configured));
        let n = read(dir.path(), &runs).unwrap();
        assert_eq!(n.name.as_deref(), Some("configured"));
        assert_eq!(n.members(), 2);
        assert_eq!(n.sources, [configured.join("store.yaml")]);
        assert!(
            looked_in(Some(&configured), &runs)
                .starts_with(&format!("{}, ", configured.join("store.yaml").display()))
        );
        let empty = dir.path().join("nowhere");
        let none = Runs::of(&NodeReading::read(&empty));
        assert_eq!(read(dir.path(), &none), None);
        assert!(
            looked_in(Some(&empty), &none)
                .starts_with(&format!("the static pods of {}, ", empty.display()))
        );
    }

    #[test]
    fn a_yaml_config_a_shell_variable_and_nothing_at_all() {
        let yml =
            "name: 'a'\ninitial-cluster: a=https://h1:2380,b=https://h2:2380,c=https://h3:2380\n";
        let dir = tree(&[("/etc/etcd/etcd.conf.yml", yml)]);
        let n = read(dir.path(), &Runs::default()).unwrap();
        assert_eq!(n.members(), 3);
        assert!(n.client_urls.is_empty());
        let dir = tree(&[("/etc/default/etcd", "ETCD_INITIAL_CLUSTER=${CLUSTER}\n")]);
        assert_eq!(read(dir.path(), &Runs::default()), None);
        assert_eq!(read(tree(&[]).path(), &Runs::default()), None);
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
