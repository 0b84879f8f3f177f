//! Whether the container runtime runs a static pod, asked as kubelet asks it: the CRI's
//! `ListContainers` (`runtime.v1.RuntimeService`) over the runtime's Unix socket
//! (containerd's, CRI-O's, cri-dockerd's).
//!
//! Asked before this node's etcd member, a static pod, is started without the restart lock:
//! moving its manifest out and back stops a pod that runs, so that start is made only when
//! the runtime reports no container of it that runs or is about to. A container that runs
//! and does not listen yet (starting, or between two crashes) is not down, whatever its
//! addresses say.
//!
//! The messages are the fields of `k8s.io/cri-api`'s `api.proto` this reads (protobuf
//! ignores the rest): a generated client would compile a 2,400-line file for one call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::components::{Kind, NodeReading};

/// Where kubelet finds a runtime when told none, in its order (crictl's too).
pub const USUAL_SOCKETS: [&str; 3] = [
    "/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/cri-dockerd.sock",
];

/// The call's full name.
const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";

/// The labels kubelet sets on every container it creates.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";

/// `ContainerState.CONTAINER_EXITED`: the only state that is not running or about to.
const EXITED: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
struct ListContainersRequest {
    #[prost(message, optional, tag = "1")]
    filter: Option<ContainerFilter>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerFilter {
    #[prost(map = "string, string", tag = "4")]
    label_selector: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    containers: Vec<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Container {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(message, optional, tag = "3")]
    metadata: Option<ContainerMetadata>,
    #[prost(int32, tag = "6")]
    state: i32,
    #[prost(map = "string, string", tag = "8")]
    labels: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerMetadata {
    #[prost(string, tag = "1")]
    name: String,
}

/// Why the runtime's answer is not had.
#[derive(Debug, thiserror::Error)]
pub enum Unasked {
    /// kubelet is told a runtime this cannot dial (`npipe://`, `tcp://`).
    #[error("kubelet's container runtime endpoint {0} is not a Unix socket")]
    NotUnix(String),
    /// None named, and none where kubelet looks by default.
    #[error(
        "no container runtime socket was found: kubelet names none (--container-runtime-endpoint, containerRuntimeEndpoint) and none of {} is a socket",
        USUAL_SOCKETS.join(", ")
    )]
    NoSocket,
    /// The socket is there and did not answer, or answered with an error.
    #[error("the container runtime at {} did not answer ListContainers: {why}", socket.display())]
    NoAnswer { socket: PathBuf, why: String },
}

/// A container of a pod, as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its pod's name (`etcd-node1`: a static pod's manifest name and the node's).
    pub pod: String,
    /// The container's name in the pod spec.
    pub name: String,
    /// The runtime's ID, shortened as crictl shows it.
    pub id: String,
    /// `created`, `running` or `unknown`: never `exited`.
    pub state: &'static str,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.id.get(..13).unwrap_or(&self.id);
        write!(
            f,
            "{} of pod {} ({id}, {})",
            self.name, self.pod, self.state
        )
    }
}

/// The runtime's socket on this node: kubelet's `--container-runtime-endpoint`, or
/// `containerRuntimeEndpoint` of its `--config` file, or the first of [`USUAL_SOCKETS`] that
/// is a socket; each under `root` (`/` on a node).
pub fn socket(node: &NodeReading, root: &Path) -> Result<PathBuf, Unasked> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    if let Some(endpoint) = kubelets_endpoint(node) {
        return match endpoint.strip_prefix("unix://") {
            Some(path) => Ok(under(path)),
            None if endpoint.starts_with('/') => Ok(under(&endpoint)),
            None => Err(Unasked::NotUnix(endpoint)),
        };
    }
    use std::os::unix::fs::FileTypeExt;
    let is_socket = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket());
    (USUAL_SOCKETS.iter().map(|s| under(s)))
        .find(|p| is_socket(p))
        .ok_or(Unasked::NoSocket)
}

/// The endpoint kubelet is told, by flag first (it wins over the config file).
fn kubelets_endpoint(node: &NodeReading) -> Option<String> {
    use crate::format::flags::setting;
    let kubelets = (node.units.iter().chain(&node.pods)).filter(|c| c.kind == Some(Kind::Kubelet));
    for c in kubelets {
        if let Some(v) = setting(&c.settings_text(), "container-runtime-endpoint", false) {
            return Some(v);
        }
        let text = (c.file("config"))
            .and_then(|f| crate::fsutil::read_regular(f, 1 << 20, crate::fsutil::Follow::Yes).ok())
            .map(|d| String::from_utf8_lossy(&d).into_owned());
        if let Some(v) = text.and_then(|t| setting(&t, "containerRuntimeEndpoint", true)) {
            return Some(v);
        }
    }
    None
}

/// The containers of the static pod whose manifest is named `name` (its mirror pod is
/// `<name>-<node name>`) that are not `exited`, asked of the runtime at `socket` within
/// `within`. A pod of another manifest whose name begins the same way (`etcd-events-…` for
/// `etcd`) is counted too: what is counted only holds a start back, never makes one.
pub async fn not_exited(socket: &Path, name: &str, within: Duration) -> Result<Vec<Seen>, Unasked> {
    let no_answer = |why: String| Unasked::NoAnswer {
        socket: socket.to_path_buf(),
        why,
    };
    let answer = tokio::time::timeout(within, list(socket)).await;
    let containers = match answer {
        Ok(Ok(c)) => c,
        // With its causes: tonic's transport error says little alone.
        Ok(Err(why)) => return Err(no_answer(crate::causes::Causes(&why).to_string())),
        Err(_) => return Err(no_answer(format!("no answer within {}s", within.as_secs()))),
    };
    let prefix = format!("{name}-");
    let seen = containers.into_iter().filter_map(|c| {
        let pod = c.labels.get(POD_NAME)?;
        let state = match c.state {
            EXITED => return None,
            0 => "created",
            1 => "running",
            _ => "unknown",
        };
        (pod == name || pod.starts_with(&prefix)).then(|| Seen {
            pod: pod.clone(),
            name: c.metadata.map(|m| m.name).unwrap_or_default(),
            id: c.id,
            state,
        })
    });
    Ok(seen.collect())
}

/// Why a static pod is not taken for down.
#[derive(Debug, thiserror::Error)]
pub enum NotDown {
    /// The runtime reports these containers of it, none exited.
    #[error("the container runtime reports {}", listed(.0))]
    Runs(Vec<Seen>),
    /// The runtime was not asked, or did not answer.
    #[error(transparent)]
    Unasked(#[from] Unasked),
}

fn listed(seen: &[Seen]) -> String {
    let seen: Vec<String> = seen.iter().map(Seen::to_string).collect();
    seen.join(", ")
}

/// Whether the container runtime of this node (`node`'s kubelet says where, under `root`)
/// reports no container of the static pod of `manifest` that runs or is about to: moving
/// its manifest out and back stops a pod that runs, so only then is it started without
/// the restart lock.
pub async fn none_running(node: &NodeReading, root: &Path, manifest: &Path) -> Result<(), NotDown> {
    const ASK_FOR: Duration = Duration::from_secs(5);
    // The mirror pod is named after the manifest's own name, which is the file's as a rule.
    let read = crate::fsutil::read_regular(manifest, 1 << 20, crate::fsutil::Follow::Yes);
    let parsed = read
        .ok()
        .and_then(|d| crate::format::manifest::PodManifest::parse(&d).ok());
    let stem = manifest.file_stem().unwrap_or_default().to_string_lossy();
    let name = parsed
        .and_then(|m| m.name)
        .unwrap_or_else(|| stem.into_owned());
    let seen = not_exited(&socket(node, root)?, &name, ASK_FOR).await?;
    match seen.is_empty() {
        true => Ok(()),
        false => Err(NotDown::Runs(seen)),
    }
}

/// A start without the restart lock held: why the pod is not taken for down, with the rule.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0}: only a member the container runtime reports no running container of is started without the restart lock"
)]
pub struct StartHeld(pub NotDown);

/// Whether static pod `pod` of `manifests_dir` may be started without the restart lock, as
/// the runtime says ([`none_running`]); Err: why that start is held. The restart stage and
/// the dry run ask this one question.
pub async fn may_start_unlocked(
    node: &NodeReading,
    root: &Path,
    manifests_dir: &Path,
    pod: &str,
) -> Result<(), StartHeld> {
    let manifest = crate::config::Watch::manifest_path(manifests_dir, pod);
    none_running(node, root, &manifest).await.map_err(StartHeld)
}

/// Every container the runtime knows, as `ListContainers` without a filter returns them.
async fn list(socket: &Path) -> anyhow::Result<Vec<Container>> {
    let mut grpc = channel(socket).await?;
    let request = ListContainersRequest {
        filter: Some(ContainerFilter::default()),
    };
    let codec = tonic_prost::ProstCodec::<ListContainersRequest, ListContainersResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(LIST_CONTAINERS);
    let answer = grpc
        .unary(tonic::Request::new(request), path, codec)
        .await
        .map_err(|s| anyhow::anyhow!("{:?}: {}", s.code(), s.message()))?;
    Ok(answer.into_inner().containers)
}

/// A gRPC client of the runtime at `socket`, connected and ready for a call.
pub async fn channel(
    socket: &Path,
) -> anyhow::Result<tonic::client::Grpc<tonic::transport::Channel>> {
    let path = socket.to_path_buf();
    let connector = tower::service_fn(move |_: tonic::transport::Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    // The URI is not dialled: the connector above is.
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    Ok(grpc)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The node's reading of a kubelet unit started as `argv`, as systemd would tell it.
    pub(crate) fn kubelet(argv: &[&str]) -> NodeReading {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let unit = crate::components::UnitSettings {
            unit: "kubelet.service".into(),
            exec_start: vec![(argv[0].clone(), argv)],
            environment: Vec::new(),
            environment_files: Vec::new(),
        };
        NodeReading::read_with(Path::new("/nonexistent"), &[unit])
    }

    #[test]
    fn the_socket_is_kubelets_flag_under_the_root_and_only_a_unix_one() {
        let root = Path::new("/tmp/node");
        let node = kubelet(&[
            "/usr/bin/kubelet",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
        ]);
        assert_eq!(
            socket(&node, root).unwrap(),
            Path::new("/tmp/node/var/run/containerd/containerd.sock")
        );
        let node = kubelet(&[
            "kubelet",
            "--container-runtime-endpoint",
            "unix:///run/crio/crio.sock",
        ]);
        assert_eq!(
            socket(&node, root).unwrap(),
            Path::new("/tmp/node/run/crio/crio.sock")
        );
        let node = kubelet(&[
            "kubelet",
            "--container-runtime-endpoint=tcp://127.0.0.1:1234",
        ]);
        let e = socket(&node, root).unwrap_err();
        assert!(matches!(e, Unasked::NotUnix(_)), "{e}");
    }

    #[test]
    fn without_a_flag_the_config_file_then_the_first_usual_socket_that_is_one() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config.yaml");
        std::fs::write(
            &config,
            "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: \"unix:///run/k3s/containerd/containerd.sock\"\n",
        )
        .unwrap();
        let mut node = kubelet(&["kubelet", "--config", "x"]);
        node.units[0].files.push(("config".into(), config.clone()));
        assert_eq!(
            socket(&node, d.path()).unwrap(),
            d.path().join("run/k3s/containerd/containerd.sock")
        );
        // None named: a plain file where containerd's socket goes is not one; CRI-O's is.
        std::fs::write(&config, "kind: KubeletConfiguration\n").unwrap();
        let e = socket(&node, d.path()).unwrap_err();
        assert!(matches!(e, Unasked::NoSocket), "{e}");
        std::fs::create_dir_all(d.path().join("run/containerd")).unwrap();
        std::fs::write(d.path().join("run/containerd/containerd.sock"), "").unwrap();
        std::fs::create_dir_all(d.path().join("run/crio")).unwrap();
        let crio = d.path().join("run/crio/crio.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&crio).unwrap();
        assert_eq!(socket(&node, d.path()).unwrap(), crio);
    }

    #[tokio::test]
    async fn a_socket_nothing_answers_on_is_no_answer_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("containerd.sock");
        // Bound and never accepted from: the call waits, and the bound ends it.
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = not_exited(&sock, "etcd", Duration::from_millis(300))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&*sock.to_string_lossy()), "{text}");
        assert!(matches!(e, Unasked::NoAnswer { .. }), "{text}");
        let gone = d.path().join("gone.sock");
        let e = not_exited(&gone, "etcd", Duration::from_secs(3))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("gone.sock"), "{e}");
    }
}
