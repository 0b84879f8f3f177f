//! A real containerd (Debian's `containerd` and `runc`) with its CRI plugin, private to a
//! temp dir and one mount namespace (a tmpfs on `/run`, where containerd keeps its shims'
//! sockets and runc its state), for the tests of what certrenewd asks the container runtime.
//!
//! Its one image is made here from busybox-static (no registry is reached): `sleep` as the
//! pod sandbox's program and as every container's. Pods run in the host's network
//! namespace, as static pods of the control plane do, so no CNI plugin is needed.
//!
//! The calls kubelet makes to start a static pod are made here over CRI itself, with the
//! labels kubelet puts on its containers (`io.kubernetes.pod.name`, …), so the runtime
//! reports them as it reports kubelet's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The image containerd is given, tagged so that nothing pulls it.
pub const IMAGE: &str = "certrenewd.test/busybox:1";

/// A running containerd; every process it started, and itself, killed on drop.
pub struct Containerd {
    dir: tempfile::TempDir,
    child: Child,
    pub socket: PathBuf,
}

impl Containerd {
    /// Starts one, or says why it cannot run here and returns `None` (a failure under CI).
    pub fn start_or_skip() -> Option<Containerd> {
        if !rustix::process::geteuid().is_root() {
            super::skip::skip("containerd needs root (mount namespaces, runc)");
            return None;
        }
        for tool in [
            "containerd",
            "ctr",
            "runc",
            "containerd-shim-runc-v2",
            "busybox",
        ] {
            if which(tool).is_none() {
                super::skip::skip(&format!(
                    "{tool} is not installed (Debian packages containerd, runc, busybox-static)"
                ));
                return None;
            }
        }
        Some(Containerd::start().unwrap_or_else(|e| panic!("starting containerd: {e:#}")))
    }

    fn start() -> anyhow::Result<Containerd> {
        // Short: the socket's path must fit in a sockaddr_un.
        let dir = tempfile::Builder::new().prefix("crd.").tempdir_in("/tmp")?;
        let d = dir.path();
        let socket = d.join("containerd.sock");
        let config = d.join("config.toml");
        std::fs::write(
            &config,
            format!(
                r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  disable_cgroup = true
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/net.d"
"#,
                d = d.display()
            ),
        )?;
        image(d)?;
        let log = std::fs::File::create(d.join("containerd.log"))?;
        // unshare execs sh, sh execs containerd: the child's PID is containerd's.
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount -t tmpfs -o mode=0755 tmpfs /run && exec containerd --config \"$1\"")
            .arg("sh")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning containerd")?;
        let c = Containerd { dir, child, socket };
        let t0 = Instant::now();
        while !c.socket.exists() {
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("containerd made no socket in 30 s: {}", c.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&c.socket)
            .args([
                "-n",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
            ])
            .arg(c.dir.path().join("image.tar"))
            .output()?;
        if !out.status.success() {
            bail!(
                "ctr images import: {}; containerd: {}",
                String::from_utf8_lossy(&out.stderr),
                c.log()
            );
        }
        Ok(c)
    }

    /// What containerd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// Where a test may put its files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts a static pod as kubelet does: its sandbox in the host's network namespace,
    /// then `container` in it, with kubelet's labels. Returns the pod sandbox's ID and the
    /// container's.
    pub async fn run_pod(&self, pod: &str, namespace: &str, container: &str) -> (String, String) {
        let sandbox = self.sandbox_config(pod, namespace);
        let run: RunPodSandboxResponse = self
            .call(
                "RunPodSandbox",
                RunPodSandboxRequest {
                    config: Some(sandbox.clone()),
                },
            )
            .await;
        let id = self
            .create(&run.pod_sandbox_id, &sandbox, container, 0)
            .await;
        self.on_container("StartContainer", &id).await;
        (run.pod_sandbox_id, id)
    }

    /// The sandbox configuration kubelet gives static pod `pod`: in the host's network
    /// namespace, with kubelet's labels.
    pub fn sandbox_config(&self, pod: &str, namespace: &str) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.into(),
                uid: format!("{pod}-uid"),
                namespace: namespace.into(),
                attempt: 0,
            }),
            log_directory: self.dir().join("pods").join(pod).display().to_string(),
            labels: kubelets_labels(pod, namespace, None),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption { network: NODE }),
                }),
            }),
        }
    }

    /// Creates attempt `attempt` of `container` in the pod sandbox `sandbox_id`, not started.
    pub async fn create(
        &self,
        sandbox_id: &str,
        sandbox: &PodSandboxConfig,
        container: &str,
        attempt: u32,
    ) -> String {
        let meta = sandbox.metadata.as_ref().unwrap();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: container.into(),
                attempt,
            }),
            image: Some(ImageSpec {
                image: IMAGE.into(),
            }),
            command: vec!["/bin/busybox".into(), "sleep".into(), "3600".into()],
            labels: kubelets_labels(&meta.name, &meta.namespace, Some(container)),
            log_path: format!("{container}/{attempt}.log"),
        };
        let created: CreateContainerResponse = self
            .call(
                "CreateContainer",
                CreateContainerRequest {
                    pod_sandbox_id: sandbox_id.into(),
                    config: Some(config),
                    sandbox_config: Some(sandbox.clone()),
                },
            )
            .await;
        created.container_id
    }

    /// Stops the container `id` at once (SIGKILL): it is then `exited`.
    pub async fn stop(&self, id: &str) {
        let _: Empty = self
            .call(
                "StopContainer",
                StopContainerRequest {
                    container_id: id.into(),
                    timeout: 0,
                },
            )
            .await;
    }

    /// Removes the container `id`.
    pub async fn remove(&self, id: &str) {
        self.on_container("RemoveContainer", id).await;
    }

    /// A call that names one container and answers nothing (`StartContainer`,
    /// `RemoveContainer`).
    async fn on_container(&self, method: &str, id: &str) {
        let request = ContainerIdRequest {
            container_id: id.into(),
        };
        let _: Empty = self.call(method, request).await;
    }

    /// One call of `runtime.v1.RuntimeService`; a failure panics with containerd's log.
    async fn call<Q, A>(&self, method: &str, request: Q) -> A
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = certrenewd::restart::cri::channel(&self.socket)
            .await
            .unwrap_or_else(|e| panic!("connecting to containerd: {e:#}"));
        let codec = tonic_prost::ProstCodec::<Q, A>::default();
        let path = format!("/runtime.v1.RuntimeService/{method}");
        let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).unwrap();
        match grpc.unary(tonic::Request::new(request), path, codec).await {
            Ok(a) => a.into_inner(),
            Err(s) => panic!("{method}: {s:?}\ncontainerd: {}", self.log()),
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Every process under containerd, and its shims (which leave it to live on their
        // own, naming its socket), and what runs under them: all started by this one.
        let socket = self.socket.to_string_lossy().into_owned();
        let mut ours = vec![self.child.id()];
        let procs = processes();
        for (pid, _, cmdline) in &procs {
            if cmdline.contains(&socket) && !ours.contains(pid) {
                ours.push(*pid);
            }
        }
        let mut i = 0;
        while i < ours.len() {
            let parent = ours[i];
            for (pid, ppid, _) in &procs {
                if *ppid == parent && !ours.contains(pid) {
                    ours.push(*pid);
                }
            }
            i += 1;
        }
        for pid in ours.iter().rev() {
            if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = self.child.wait();
    }
}

/// Every process: its PID, its parent's, and its command line with spaces.
fn processes() -> Vec<(u32, u32, String)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command's name is in parentheses and may hold anything: the fields after
            // the last `)` are the state, then the parent's PID.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((pid, ppid, cmdline))
        })
        .collect()
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]);
    dirs.map(|d| d.join(tool)).find(|p| p.is_file())
}

/// A Docker-archive image (what `ctr images import` reads) of one layer holding
/// busybox-static, written to `dir/image.tar`.
fn image(dir: &Path) -> anyhow::Result<()> {
    let busybox = which("busybox").context("busybox")?;
    let build = dir.join("image");
    let layer = build.join("layer");
    std::fs::create_dir_all(layer.join("bin"))?;
    std::fs::copy(&busybox, layer.join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", layer.join("bin/sh"))?;
    tar(&layer, &build.join("layer.tar"), &["."])?;
    let digest = Command::new("sha256sum")
        .arg(build.join("layer.tar"))
        .output()?;
    let digest = String::from_utf8_lossy(&digest.stdout);
    let digest = digest.split_whitespace().next().context("sha256sum")?;
    std::fs::write(
        build.join("config.json"),
        format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Cmd":["/bin/busybox","sleep","3600"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{digest}"]}}}}"#
        ),
    )?;
    std::fs::write(
        build.join("manifest.json"),
        format!(r#"[{{"Config":"config.json","RepoTags":["{IMAGE}"],"Layers":["layer.tar"]}}]"#),
    )?;
    tar(
        &build,
        &dir.join("image.tar"),
        &["config.json", "manifest.json", "layer.tar"],
    )
}

fn tar(dir: &Path, out: &Path, what: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-cf")
        .arg(out)
        .args(what)
        .status()?;
    match status.success() {
        true => Ok(()),
        false => bail!("tar -cf {}: {status}", out.display()),
    }
}

/// The labels kubelet puts on a pod's sandbox, and with the container's name on each of its
/// containers.
fn kubelets_labels(pod: &str, namespace: &str, container: Option<&str>) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), pod.to_string()),
        (
            "io.kubernetes.pod.namespace".to_string(),
            namespace.to_string(),
        ),
        ("io.kubernetes.pod.uid".to_string(), format!("{pod}-uid")),
    ]);
    if let Some(c) = container {
        labels.insert("io.kubernetes.container.name".into(), c.into());
    }
    labels
}

// The fields of `k8s.io/cri-api`'s `api.proto` these calls set (protobuf leaves the rest
// at their defaults).

/// `NamespaceMode.NODE`: the host's namespace.
const NODE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    #[prost(map = "string, string", tag = "9")]
    pub labels: HashMap<String, String>,
    #[prost(string, tag = "11")]
    pub log_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

/// `StartContainerRequest` and `RemoveContainerRequest`: the container's ID alone.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerIdRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

/// The calls' empty answers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}
