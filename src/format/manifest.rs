//! Static pod manifests, as kubelet reads them from its manifest directory: each container's
//! command and arguments, the volumes it mounts and where, and which volumes are paths of the
//! host (`hostPath`). Read with the same YAML reader as kubeconfigs (JSON is YAML too);
//! nothing else of the pod is kept.

use super::kubeconfig::tree::{At, Tree};
use super::kubeconfig::{Document, ParseError};

/// What a static pod's manifest says about the processes it runs and the files they see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodManifest {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `spec.containers` (init containers run before and end: not kept).
    pub containers: Vec<Container>,
    /// `spec.volumes`.
    pub volumes: Vec<Volume>,
}

/// One entry of `spec.containers`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Container {
    /// `name`.
    pub name: String,
    /// `command` (empty: the image's entrypoint, which the manifest does not say).
    pub command: Vec<String>,
    /// `args`, after the command.
    pub args: Vec<String>,
    /// `volumeMounts`.
    pub mounts: Vec<Mount>,
    /// Its probes that name the address kubelet asks: where its process answers.
    pub probes: Vec<Probe>,
}

/// A `livenessProbe`, `readinessProbe` or `startupProbe` whose `httpGet` or `tcpSocket`
/// names both a `host` and a numeric `port` (kubeadm's name `127.0.0.1` or the advertised
/// address). One without a host asks the pod's address, one with a named port a port the
/// manifest maps elsewhere: neither is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `livenessProbe`, `readinessProbe` or `startupProbe`.
    pub kind: &'static str,
    /// `host`.
    pub host: String,
    /// `port`.
    pub port: u16,
}

/// One entry of a container's `volumeMounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The volume's name.
    pub volume: String,
    /// `mountPath`: where the container sees it.
    pub path: String,
    /// `subPath`: the part of the volume mounted there.
    pub sub_path: Option<String>,
}

/// One entry of `spec.volumes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Its name.
    pub name: String,
    /// `hostPath.path`; `None` for a volume that is not a path of the host (a ConfigMap,
    /// an emptyDir, ...).
    pub host_path: Option<String>,
}

impl PodManifest {
    /// Reads a manifest's text; an error for text that is not YAML or not a pod's mapping.
    pub fn parse(data: &[u8]) -> Result<PodManifest, ParseError> {
        let doc = Document::parse(data)?;
        let tree = Tree::new(&doc)?;
        let root = tree
            .root()
            .filter(|&r| tree.is_map(r))
            .ok_or_else(|| not_a_pod("the document is not a mapping"))?;
        let text = |map: At, key: &str| {
            tree.get(map, key)
                .and_then(|v| tree.scalar(v))
                .map(|s| s.text)
        };
        let list = |map: At, key: &str| {
            tree.get(map, key)
                .map(|v| tree.items(v))
                .unwrap_or_default()
        };
        let words = |map: At, key: &str| -> Vec<String> {
            list(map, key)
                .into_iter()
                .filter_map(|v| tree.scalar(v).map(|s| s.text))
                .collect()
        };
        if let Some(kind) = text(root, "kind")
            && kind != "Pod"
        {
            return Err(not_a_pod(&format!("its kind is {kind:?}")));
        }
        let spec = tree
            .get(root, "spec")
            .filter(|&s| tree.is_map(s))
            .ok_or_else(|| not_a_pod("it has no spec"))?;
        let containers = list(spec, "containers")
            .into_iter()
            .map(|c| Container {
                name: text(c, "name").unwrap_or_default(),
                command: words(c, "command"),
                args: words(c, "args"),
                mounts: list(c, "volumeMounts")
                    .into_iter()
                    .filter_map(|m| {
                        Some(Mount {
                            volume: text(m, "name")?,
                            path: text(m, "mountPath")?,
                            sub_path: text(m, "subPath").filter(|s| !s.is_empty()),
                        })
                    })
                    .collect(),
                probes: ["livenessProbe", "readinessProbe", "startupProbe"]
                    .into_iter()
                    .filter_map(|kind| {
                        let probe = tree.get(c, kind)?;
                        let at = (tree.get(probe, "httpGet"))
                            .or_else(|| tree.get(probe, "tcpSocket"))?;
                        Some(Probe {
                            kind,
                            host: text(at, "host").filter(|h| !h.is_empty())?,
                            port: text(at, "port")?.parse().ok()?,
                        })
                    })
                    .collect(),
            })
            .collect();
        let volumes = list(spec, "volumes")
            .into_iter()
            .filter_map(|v| {
                Some(Volume {
                    name: text(v, "name")?,
                    host_path: tree.get(v, "hostPath").and_then(|h| text(h, "path")),
                })
            })
            .collect();
        let name = tree.get(root, "metadata").and_then(|m| text(m, "name"));
        Ok(PodManifest {
            name,
            containers,
            volumes,
        })
    }
}

fn not_a_pod(why: &str) -> ParseError {
    ParseError {
        line: None,
        message: format!("not a pod manifest: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_mounts_and_host_paths_are_read_and_other_volumes_are_not_host_paths() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n\
            spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt\n\
            \x20   args: [\"--v=2\"]\n    name: kube-apiserver\n    volumeMounts:\n    - mountPath: /etc/kubernetes/pki\n      name: k8s-certs\n      readOnly: true\n\
            \x20   - mountPath: /etc/cfg/a.conf\n      name: cfg\n      subPath: a.conf\n\
            \x20 volumes:\n  - hostPath:\n      path: /etc/kubernetes/pki\n      type: DirectoryOrCreate\n    name: k8s-certs\n\
            \x20 - configMap:\n      name: x\n    name: cfg\n";
        let m = PodManifest::parse(text.as_bytes()).unwrap();
        assert_eq!(m.name.as_deref(), Some("kube-apiserver"));
        let c = &m.containers[0];
        assert_eq!(
            c.command,
            [
                "kube-apiserver",
                "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt"
            ]
        );
        assert_eq!(c.args, ["--v=2"]);
        assert_eq!(c.mounts.len(), 2);
        assert_eq!(c.mounts[1].sub_path.as_deref(), Some("a.conf"));
        assert_eq!(
            m.volumes,
            [
                Volume {
                    name: "k8s-certs".into(),
                    host_path: Some("/etc/kubernetes/pki".into())
                },
                Volume {
                    name: "cfg".into(),
                    host_path: None
                }
            ]
        );
    }

    #[test]
    fn probes_naming_host_and_port_are_kept_others_not() {
        let text = "kind: Pod\nspec:\n  containers:\n  - command: [kube-scheduler]\n    name: s\n\
            \x20   livenessProbe:\n      httpGet:\n        host: 127.0.0.1\n        path: /healthz\n        port: 10259\n        scheme: HTTPS\n\
            \x20   readinessProbe:\n      httpGet:\n        path: /readyz\n        port: 10259\n\
            \x20   startupProbe:\n      tcpSocket:\n        host: \"::1\"\n        port: http\n";
        let m = PodManifest::parse(text.as_bytes()).unwrap();
        let want = Probe {
            kind: "livenessProbe",
            host: "127.0.0.1".into(),
            port: 10259,
        };
        assert_eq!(m.containers[0].probes, [want]);
    }

    #[test]
    fn json_is_read_and_what_is_not_a_pod_is_an_error() {
        let json = br#"{"kind":"Pod","spec":{"containers":[{"name":"etcd","command":["etcd","--cert-file=/a"]}]}}"#;
        let m = PodManifest::parse(json).unwrap();
        assert_eq!(m.containers[0].command, ["etcd", "--cert-file=/a"]);
        for bad in [
            &b"- a\n- b\n"[..],
            b"kind: Deployment\nspec: {}\n",
            b"kind: Pod\n",
        ] {
            let e = PodManifest::parse(bad).unwrap_err();
            assert!(e.message.starts_with("not a pod manifest"), "{e}");
        }
    }
}
