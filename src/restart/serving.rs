//! "Back" means serving: a restarted etcd or kube-apiserver counts as back only once each
//! address its own flags name ([`crate::served::listen`]) completes a TLS handshake with the
//! certificate now on disk and answers its health path. A manifest put back, or a unit
//! systemd calls `active`, comes seconds before that; releasing the cluster's restart lock
//! then would let the next controller take its API server down while this one's still
//! starts. Bounded by `restart_timeout_secs`; a watch may turn it off (`wait_serving`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::endpoints::{Reply, ask, read_pem};
use super::step::{Component, Step, Target};
use crate::components::{Component as Program, Kind, NodeReading};
use crate::config::{Settings, Watch};
use crate::format::cert::CertFacts;
use crate::served::listen::{self, Listener, Port, Server};
use crate::stop::Stop;

/// How long one connection attempt or one answer may take.
const ATTEMPT: Duration = Duration::from_secs(3);
/// Between two attempts on an address that does not serve yet.
const POLL: Duration = Duration::from_millis(200);
/// Between two attempts on an address that still answers, its manifest out: a refusal is
/// only seen while the old process is gone and before the manifest is back, and a
/// connection attempt costs the server nothing but an accept.
const ENDED_POLL: Duration = Duration::from_millis(50);

/// Whether and how long the restart stage waits for what it restarted to serve.
#[derive(Debug, Clone)]
pub(crate) struct Serving {
    /// Where the units' settings files are (`/` on a node).
    pub root: PathBuf,
    /// The bound on the wait for one step.
    pub timeout: Duration,
    /// The targets a watch naming them set `wait_serving = false` for.
    pub off: Vec<Target>,
    /// A client certificate and key for etcd, which asks for one: without, each check
    /// would be logged by etcd as a rejected connection.
    pub client: Option<(PathBuf, PathBuf)>,
    /// etcd's and kube-apiserver's units as systemd runs them (the node's reading): where
    /// a unit listens is read there first.
    pub units: Vec<(Server, (String, String))>,
    /// The node's reading: where a static pod listens, and where its probes ask, are read
    /// there, before its manifest leaves.
    pub node: NodeReading,
    /// Ends the wait when the process is asked to stop (at shutdown etcd and kubelet
    /// stop too: a wait for them would hold the reboot for `restart_timeout_secs`).
    pub stop: Stop,
}

/// Why a wait for a step to serve ended without it serving.
#[derive(Debug)]
pub(crate) enum NotServing {
    /// It did not serve in time, as this says.
    Not(String),
    /// The wait was ended by a stop request: whether it serves is not known.
    Stopping,
}

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotServing::Not(why) => f.write_str(why),
            NotServing::Stopping => f.write_str("the wait was ended by a stop request"),
        }
    }
}

impl Serving {
    /// As `settings` say: an explicit `wait_serving = false` of any watch naming a target wins.
    pub fn of(settings: &Settings) -> Serving {
        let off = settings.watches.iter().filter(|w| !w.wait_serving);
        let off = off.flat_map(|w: &Watch| {
            let units = w.units.iter().cloned().map(Target::Unit);
            units.chain(w.static_pods.iter().cloned().map(Target::Pod))
        });
        Serving {
            root: PathBuf::from("/"),
            timeout: settings.restart_timeout,
            off: off.collect(),
            client: None,
            units: Vec::new(),
            node: NodeReading::default(),
            stop: Stop::default(),
        }
    }

    /// The same, knowing what the node's static pods and units run.
    pub fn knowing(mut self, node: &NodeReading) -> Serving {
        let kinds = [
            (Server::Etcd, Kind::Etcd),
            (Server::ApiServer, Kind::ApiServer),
        ];
        self.units = (kinds.into_iter())
            .filter_map(|(server, kind)| node.unit_running(kind).map(|u| (server, u)))
            .collect();
        self.node = node.clone();
        self
    }

    /// The static pod `pod` of `manifests_dir`, as the node's reading read it.
    fn pod(&self, manifests_dir: &Path, pod: &str) -> Option<&crate::components::Component> {
        self.node.pod(&Watch::manifest_path(manifests_dir, pod))
    }

    /// Where `step`'s server listens, by its flags; nothing for what is not waited for.
    /// Read before a static pod's manifest leaves: the addresses are in it.
    pub fn listeners(&self, step: &Step, manifests_dir: &Path) -> Vec<Listener> {
        if self.off.contains(&step.target) {
            return Vec::new();
        }
        let server = match step.component {
            Component::Etcd => Server::Etcd,
            Component::ApiServer => Server::ApiServer,
            Component::Other => return Vec::new(),
        };
        match &step.target {
            Target::Pod(p) => (self.pod(manifests_dir, p))
                .map(|pod| listen::of_pod(pod, server))
                .unwrap_or_default(),
            Target::Unit(_) => {
                let unit = self
                    .units
                    .iter()
                    .find(|(s, _)| *s == server)
                    .map(|(_, u)| u);
                listen::of_unit(&self.root, server, unit)
            }
        }
    }

    /// The API server that `step` restarts, as the node's reading has it.
    fn apiserver(&self, step: &Step, manifests_dir: &Path) -> Option<&Program> {
        (step.target.in_reading(&self.node, manifests_dir))
            .filter(|c| c.kind == Some(Kind::ApiServer))
    }

    /// A client pair the API server `api` accepts (its `--client-ca-file` signed the
    /// certificate), to ask `/readyz` as an authenticated client: an API server that
    /// refuses anonymous requests answers 401 from the moment it listens, ready or not.
    /// The least privileged first: kubelet's own (its kubeconfig's files), then the API
    /// server's own client to the kubelets. `None` when the node has none it accepts.
    fn apiserver_client(&self, api: &Program) -> Option<Client> {
        apiserver_client(&self.node, api)
    }

    /// Where `step`'s process can be seen to end: its server's listeners, else (a static
    /// pod whose flags name none) the addresses its probes ask; nothing for what is not
    /// waited for. Read before a static pod's manifest leaves.
    pub fn ports(&self, step: &Step, manifests_dir: &Path) -> Vec<Port> {
        let found: Vec<Port> = (self.listeners(step, manifests_dir).iter())
            .map(Listener::port)
            .collect();
        match &step.target {
            Target::Pod(p) if found.is_empty() && !self.off.contains(&step.target) => {
                (self.pod(manifests_dir, p)).map_or_else(Vec::new, listen::probes_of_pod)
            }
            _ => found,
        }
    }

    /// Whether a static pod's server is down before its restart: every address in `found`
    /// refuses connections. Then kubelet is not running it (kubelet stopped, say), so the
    /// restart takes nothing down, and nothing can be seen to end or waited for after it.
    pub async fn down_before(&self, found: &[Port]) -> Option<String> {
        if found.is_empty() {
            return None;
        }
        for l in found {
            if !refuses(&l.addr, ATTEMPT).await {
                return None;
            }
        }
        let addrs: Vec<&str> = found.iter().map(|l| l.addr.as_str()).collect();
        Some(format!(
            "not waited for to serve: nothing listened at {} before the restart (its pod was not running)",
            addrs.join(", ")
        ))
    }

    /// With a static pod's manifest out, waits until every address in `found` has refused
    /// a connection at least once: the process that served there has ended, so the one
    /// kubelet starts from the manifest put back reads the files on disk now. etcd and
    /// kube-apiserver take up a renewed serving certificate without a restart, so its
    /// serial alone cannot tell a restart from a kubelet that ignored the move. `Ok` says
    /// when each ended; `Err` names what still answered when `bound` passed.
    pub async fn until_ended(&self, found: &[Port], bound: Duration) -> Result<String, NotEnded> {
        let start = Instant::now();
        let deadline = start + bound;
        let mut ended = Vec::new();
        for l in found {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if refuses(&l.addr, left.min(ATTEMPT)).await {
                    ended.push(format!(
                        "{} refused after {:.1} s",
                        l.addr,
                        start.elapsed().as_secs_f32()
                    ));
                    break;
                }
                if Instant::now() + ENDED_POLL >= deadline {
                    return Err(NotEnded {
                        from: l.from.clone(),
                        secs: bound.as_secs(),
                    });
                }
                sleep(ENDED_POLL).await;
            }
        }
        Ok(format!("the old process ended ({})", ended.join(", ")))
    }

    /// Waits until `step` serves; `Ok` says how that was shown, or why nothing was waited
    /// for. `Err` says which address did not serve in time and what it last did.
    pub async fn wait(&self, step: &Step, manifests_dir: &Path) -> Result<String, NotServing> {
        if self.off.contains(&step.target) {
            return Ok("not waited for to serve (wait_serving = false)".into());
        }
        let found = self.listeners(step, manifests_dir);
        let target = &step.target;
        if found.is_empty() {
            tracing::info!(service = %target, "{target}: where it listens is not in its flags; not waited for to serve");
            return Ok(String::new());
        }
        let deadline = Instant::now() + self.timeout;
        let start = Instant::now();
        let mut shown = Vec::new();
        for l in &found {
            let Some(want) = serial_on_disk(&l.cert) else {
                tracing::info!(service = %target, "{}: cannot read the certificate {} its flags name; not waited for", l.addr, l.cert.display());
                continue;
            };
            tracing::info!(service = %target, endpoint = %l.addr, "waiting for {target} to serve serial {want} on {}", l.describe());
            let _live =
                crate::live::waiting(format!("{target} to serve serial {want} on {}", l.addr));
            let client = self.client_for(l, step, manifests_dir);
            let mut stop = self.stop.clone();
            let served = tokio::select! {
                served = until_serving(l, &want, &client, deadline) => served,
                _ = stop.wait() => return Err(NotServing::Stopping),
            };
            match served {
                Ok(how) => shown.push(format!("{} {how}", l.addr)),
                Err(seen) => {
                    let secs = self.timeout.as_secs();
                    return Err(NotServing::Not(format!(
                        "not serving within {secs} s: {}: {seen:#}",
                        l.describe()
                    )));
                }
            }
        }
        let took = start.elapsed().as_secs_f32();
        let how = format!("serving after {took:.1} s: {}", shown.join("; "));
        tracing::info!(service = %target, "{target} {how}");
        Ok(how)
    }
}

impl Serving {
    /// The client pair to ask `l`'s health path with: etcd's from the coordination
    /// identity, else one the API server accepts.
    fn client_for(&self, l: &Listener, step: &Step, manifests_dir: &Path) -> Option<Client> {
        match l.server {
            Server::Etcd => self.client.clone().map(|(cert, key)| Client {
                cert,
                key,
                who: String::new(),
            }),
            Server::ApiServer => {
                (self.apiserver(step, manifests_dir)).and_then(|api| self.apiserver_client(api))
            }
        }
    }

    /// Whether `step` serves every one of `certs` as it is on disk now, asked once and
    /// answering its health path: then a server that reads them again by itself runs on
    /// them. `None` when one of `certs` is not a file it serves (a client certificate, a
    /// CA), or is not served as on disk.
    pub async fn serves_now(
        &self,
        step: &Step,
        manifests_dir: &Path,
        certs: &[PathBuf],
    ) -> Option<String> {
        let listeners = self.listeners(step, manifests_dir);
        let mut shown = Vec::new();
        for cert in certs {
            let served = (listeners.iter()).filter(|l| &l.cert == cert);
            let mut any = false;
            for l in served {
                let want = serial_on_disk(&l.cert)?;
                let client = self.client_for(l, step, manifests_dir);
                shown.push(format!(
                    "{} {}",
                    l.addr,
                    probe(l, &want, &client).await.ok()?
                ));
                any = true;
            }
            if !any {
                return None;
            }
        }
        (!shown.is_empty()).then(|| shown.join("; "))
    }
}

/// A client certificate and key to ask a server's health path with, and whose they are.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `user system:node:c1 (system:nodes)`; empty for etcd's.
    pub who: String,
}

/// A client pair the API server `api` of `node` accepts (its `--client-ca-file` signed the
/// certificate), to ask `/readyz` as an authenticated client: an API server that refuses
/// anonymous requests answers 401 from the moment it listens, ready or not. The least
/// privileged first: kubelet's own (its kubeconfig's files), then the API server's own
/// client to the kubelets. `None` when the node has none it accepts.
pub(crate) fn apiserver_client(node: &NodeReading, api: &Program) -> Option<Client> {
    let ca = read_pem(&api.file("client-ca-file")?.to_path_buf(), false).ok()?;
    let ca = CertFacts::parse(ca).ok()?;
    let kubelet = (node.units.iter().chain(&node.pods))
        .filter(|c| c.kind == Some(Kind::Kubelet))
        .filter_map(|c| kubeconfig_pair(c.file("kubeconfig")?));
    let own = (api.file("kubelet-client-certificate"))
        .zip(api.file("kubelet-client-key"))
        .map(|(c, k)| (c.to_path_buf(), k.to_path_buf()));
    kubelet.chain(own).find_map(|(cert, key)| {
        let facts = CertFacts::parse(read_pem(&cert, false).ok()?).ok()?;
        facts.signed_by(&ca).ok()?;
        let fields = crate::format::cert::name_fields(facts.raw_subject());
        let who = match fields.organization.is_empty() {
            true => format!("user {}", fields.common_name),
            false => format!("user {} ({})", fields.common_name, fields.organization),
        };
        Some(Client { cert, key, who })
    })
}

/// A static pod whose process did not end while its manifest was out: where it still
/// answered (`--advertise-address in …`), and after how long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its process did not end: {from} still answered {secs} s after the manifest left (kubelet did not stop the pod)"
)]
pub struct NotEnded {
    pub from: String,
    pub secs: u64,
}

/// The client pair a kubeconfig names as files (kubelet's `kubelet-client-current.pem`).
fn kubeconfig_pair(kubeconfig: &Path) -> Option<(PathBuf, PathBuf)> {
    let data = crate::fsutil::read(kubeconfig).ok()?;
    let conf = crate::format::kubeconfig::Kubeconfig::parse(&data).ok()?;
    let dir = kubeconfig.parent().unwrap_or(Path::new("/"));
    conf.users.iter().find_map(|u| {
        let cert = dir.join(&u.cert_file.as_ref()?.text);
        let key = dir.join(&u.key_file.as_ref()?.text);
        Some((cert, key))
    })
}

/// Whether a connection to `addr` is refused within `within`: nothing listens there.
async fn refuses(addr: &str, within: Duration) -> bool {
    let connect = tokio::net::TcpStream::connect(addr);
    matches!(
        tokio::time::timeout(within, connect).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// The serial of the certificate `file` holds now.
fn serial_on_disk(file: &Path) -> Option<String> {
    let der = read_pem(&file.to_path_buf(), false).ok()?;
    CertFacts::parse(der).ok().map(|f| f.serial)
}

/// Tries `l` until it serves `want` and answers, or `deadline`: then what it did last.
async fn until_serving(
    l: &Listener,
    want: &str,
    client: &Option<Client>,
    deadline: Instant,
) -> anyhow::Result<String> {
    loop {
        let seen = match probe(l, want, client).await {
            Ok(how) => return Ok(how),
            Err(seen) => seen,
        };
        if Instant::now() + POLL >= deadline {
            return Err(seen);
        }
        sleep(POLL).await;
    }
}

/// One attempt: a handshake with the certificate on disk, then the health path's answer.
async fn probe(l: &Listener, want: &str, client: &Option<Client>) -> anyhow::Result<String> {
    let path = match l.server {
        Server::ApiServer => "/readyz",
        Server::Etcd => "/health",
    };
    let pair = client.as_ref().map(|c| (c.cert.clone(), c.key.clone()));
    let (serial, reply) = ask(&l.addr, path, &pair, ATTEMPT).await?;
    if serial != want {
        anyhow::bail!(
            "serves serial {serial}, not serial {want} of {}",
            l.cert.display()
        );
    }
    let serves = format!("serves serial {serial}; {path}");
    let asked = match client {
        Some(c) if l.server == Server::ApiServer => format!(" as {}", c.who),
        _ => String::new(),
    };
    match reply {
        Reply::Status(200) => Ok(format!("{serves} said 200{asked}")),
        // Asked as a client it accepts: not authenticated yet is not ready.
        Reply::Status(401) if client.is_some() && l.server == Server::ApiServer => Err(
            anyhow::anyhow!("{serves} said 401{asked}: it does not authenticate that client (yet)"),
        ),
        Reply::Status(403) if client.is_some() && l.server == Server::ApiServer => {
            Err(anyhow::anyhow!(
                "{serves} said 403{asked}: authenticated, but refused by its authorization (an RBAC rule taken from system:public-info-viewer?)"
            ))
        }
        // No client pair it accepts: an API server refusing anonymous requests answers
        // 401 from the moment it listens, so the answer says it listens, nothing more.
        Reply::Status(c @ (401 | 403)) if l.server == Server::ApiServer => Ok(format!(
            "{serves} said {c} (anonymous refused; no client pair the API server accepts was found on the node, so its readiness was not seen)"
        )),
        Reply::Status(c) => Err(anyhow::anyhow!("{serves} said {c}")),
        // It completed its handshake with the certificate on disk, then wants a client
        // certificate: it is up; its health is not ours to see (etcd's is the gate's).
        Reply::ClientCertWanted(e) => Ok(format!("{serves} needs a client certificate ({e})")),
        Reply::Nothing(e) => Err(anyhow::anyhow!("{serves}: {e}")),
    }
}

#[cfg(test)]
mod tests;
