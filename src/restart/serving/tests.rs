//! A restarted kube-apiserver is back only once it serves: a TLS stand-in, started by the
//! test after a delay on the address and port its manifest's (or unit's) flags name, with a
//! scripted `/readyz`, and the whole restart stage (`restart::restart`) around one step.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::components::UnitSettings;
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::restart::Hold;
use crate::restart::fake::FakeUnits;
use crate::restart::owed::Owed;
use crate::restart::{RestartOutcomes, Ungated, restart};

/// A self-signed serving pair for 127.0.0.1: (certificate PEM, key PEM, serial as we write it).
fn pair() -> (String, String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let serial = CertFacts::parse(cert.der().to_vec()).unwrap().serial;
    (cert.pem(), key.serialize_pem(), serial)
}

/// A port free now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A TLS server config for the PEM pair `(cert, key)`.
fn tls(cert: &str, key: &str) -> tokio_rustls::TlsAcceptor {
    let der = |pem: &str| {
        crate::format::pem::blocks(pem.as_bytes())[0]
            .as_ref()
            .unwrap()
            .der
            .clone()
    };
    let chain = vec![rustls::pki_types::CertificateDer::from(der(cert))];
    let key = rustls::pki_types::PrivateKeyDer::try_from(der(key)).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// After `after`, serves `(cert, key)` on `port` and answers the n-th request with
/// `statuses[n]` (the last one from then on), as a starting API server would.
fn stand_in(port: u16, cert: &str, key: &str, after: Duration, statuses: Vec<u16>) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    drop(listener);
    let new = tls(cert, key);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        serve(&listener, &new, &statuses, None).await;
    });
}

/// What the kubelet in front of a [`pod`] does with its manifest moved out.
#[derive(Clone, Copy, PartialEq)]
enum Kubelet {
    /// Stops the pod (its port refuses) and starts it from the manifest put back.
    Obeys,
    /// Never notices: the process goes on, and takes up the renewed certificate by itself
    /// after `after`, as kube-apiserver and etcd do.
    Ignores,
}

/// kube-apiserver as a static pod on 127.0.0.1:`port`, serving `before` (ready) while
/// `manifest` is in place. Under a kubelet that obeys, it stops when the manifest leaves
/// and, `after` the manifest is back, serves `(cert, key)` and answers the n-th request
/// with `statuses[n]` (the last one from then on).
fn pod(
    port: u16,
    manifest: &Path,
    before: (&str, &str),
    (cert, key): (&str, &str),
    after: Duration,
    statuses: Vec<u16>,
    kubelet: Kubelet,
) {
    let (old, new) = (tls(before.0, before.1), tls(cert, key));
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let manifest = manifest.to_path_buf();
    tokio::spawn(async move {
        // Listening from the start: a probe made before this task first runs finds it.
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        if kubelet == Kubelet::Ignores {
            let reload = Instant::now() + after;
            serve(&listener, &old, &[200], Some((reload, new, statuses))).await;
            return;
        }
        tokio::select! {
            () = serve(&listener, &old, &[200], None) => {}
            () = async { while manifest.exists() { tokio::time::sleep(Duration::from_millis(5)).await } } => {}
        }
        drop(listener);
        while !manifest.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(after).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        serve(&listener, &new, &statuses, None).await;
    });
}

/// Answers on `listener` with `acceptor`, the n-th request with `statuses[n]` (the last
/// from then on); from `reload`'s instant on, with its acceptor and statuses instead.
async fn serve(
    listener: &tokio::net::TcpListener,
    acceptor: &tokio_rustls::TlsAcceptor,
    statuses: &[u16],
    reload: Option<(Instant, tokio_rustls::TlsAcceptor, Vec<u16>)>,
) {
    let mut n = 0;
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let (acceptor, statuses) = match &reload {
            Some((at, new, statuses)) if Instant::now() >= *at => {
                (new.clone(), statuses.as_slice())
            }
            _ => (acceptor.clone(), statuses),
        };
        n += 1;
        let status = statuses[(n - 1).min(statuses.len() - 1)];
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = tls.read(&mut buf).await;
            let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            let _ = tls.write_all(answer.as_bytes()).await;
            let _ = tls.shutdown().await;
        });
    }
}

/// A node whose kube-apiserver static pod listens on 127.0.0.1:`port` with the renewed
/// pair now in `pki/apiserver.crt`; `extra` is added to its watch.
fn node(dir: &Path, port: u16, renewed: &(String, String, String), extra: &str) -> Settings {
    let (manifests, pki) = (dir.join("manifests"), dir.join("pki"));
    fs::create_dir_all(&manifests).unwrap();
    fs::create_dir_all(&pki).unwrap();
    fs::write(pki.join("apiserver.crt"), &renewed.0).unwrap();
    fs::write(
        manifests.join("kube-apiserver.yaml"),
        format!(
            "spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=127.0.0.1\n    \
             - --secure-port={port}\n    - --tls-cert-file={}\n",
            pki.join("apiserver.crt").display()
        ),
    )
    .unwrap();
    let toml = format!(
        "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\nrestart_timeout_secs = 4\n\
         [[watch]]\npath = \"{d}/pki\"\nunits = []\nstatic_pods = [\"kube-apiserver\"]\n{extra}",
        d = dir.display()
    );
    let mut settings = Settings::from_toml(&toml, None).unwrap();
    // The bound on the wait for the old process to end; the whole wait where it cannot be seen.
    settings.static_pod_wait = Duration::from_secs(2);
    settings
}

/// The kube-apiserver manifest of [`node`].
fn manifest(settings: &Settings) -> std::path::PathBuf {
    settings.manifests_dir.join("kube-apiserver.yaml")
}

/// Restarts the kube-apiserver static pod; what happened and how long it took.
async fn restart_pod(settings: &Settings) -> (RestartOutcomes, Duration) {
    restart_named(settings, "kube-apiserver").await
}

/// Restarts the static pod `pod`; what happened and how long it took.
async fn restart_named(settings: &Settings, pod: &str) -> (RestartOutcomes, Duration) {
    let owed = Owed {
        pods: vec![pod.to_string()],
        ..Owed::default()
    };
    let start = Instant::now();
    let connect = async || Ok(FakeUnits::new());
    let node = crate::components::NodeReading::read(&settings.manifests_dir);
    let out = restart(
        settings,
        &Inventory::default(),
        &node,
        &[],
        owed,
        connect,
        &mut Ungated,
    )
    .await
    .unwrap();
    (out, start.elapsed())
}

#[tokio::test]
async fn the_step_returns_once_the_renewed_certificate_is_served_and_readyz_says_200() {
    let dir = tempfile::tempdir().unwrap();
    let (port, renewed, old) = (free_port(), pair(), pair());
    let settings = node(dir.path(), port, &renewed, "");
    // Running on the old certificate; on the new one 1.5 s after its manifest is back,
    // and not ready for its first two answers.
    pod(
        port,
        &manifest(&settings),
        (&old.0, &old.1),
        (&renewed.0, &renewed.1),
        Duration::from_millis(1500),
        vec![500, 500, 200],
        Kubelet::Obeys,
    );
    let (out, took) = restart_pod(&settings).await;
    let pod = &out.pods[0];
    println!("restart took {took:?}: {}", pod.detail);
    assert!(pod.ok, "{pod:?}");
    assert!(
        took >= Duration::from_millis(1500),
        "returned after {took:?}: {pod:?}"
    );
    let want = format!(
        "127.0.0.1:{port} serves serial {}; /readyz said 200",
        renewed.2
    );
    assert!(pod.detail.contains(&want), "{pod:?}");
    let ended = format!("the old process ended (127.0.0.1:{port} refused after");
    assert!(pod.detail.contains(&ended), "{pod:?}");
}

#[tokio::test]
async fn a_pod_whose_kubelet_ignored_the_move_is_not_restarted_owed_and_not_rolled_back() {
    // The process goes on through the move and takes up the renewed serving certificate by
    // itself: it serves the renewed serial, but runs on everything else it read before.
    let dir = tempfile::tempdir().unwrap();
    let (port, renewed, old) = (free_port(), pair(), pair());
    let settings = node(dir.path(), port, &renewed, "");
    pod(
        port,
        &manifest(&settings),
        (&old.0, &old.1),
        (&renewed.0, &renewed.1),
        Duration::from_millis(300),
        vec![200],
        Kubelet::Ignores,
    );
    let (out, took) = restart_pod(&settings).await;
    println!("restart took {took:?}: {:?}", out.held);
    assert!(out.pods.is_empty(), "{:?}", out.pods);
    let why = format!(
        "its process did not end: 127.0.0.1:{port} (--advertise-address in {}) still answered 2 s after the manifest left (kubelet did not stop the pod); its manifest is back in {}; nothing was restarted, so nothing is rolled back",
        manifest(&settings).display(),
        settings.manifests_dir.display()
    );
    assert_eq!(out.held.len(), 1, "{:?}", out.held);
    assert_eq!(out.held[0].0, Target::Pod("kube-apiserver".into()));
    let held = &out.held[0].1;
    assert!(matches!(held, Hold::NotRestarted(_)), "{held:?}");
    assert!(held.to_string().starts_with(&why), "{:?}", out.held);
    assert!(out.failures().iter().any(|f| f.contains(&why)));
    assert!(manifest(&settings).is_file());
    assert!(out.rolled_back.is_empty() && out.restored.is_empty());
    assert!(out.backoff.is_empty());
    let owed = crate::restart::owed::load(&settings.state_dir).unwrap();
    assert_eq!(owed.pods, ["kube-apiserver"]);
}

/// kubeadm's kube-scheduler, its flags naming no listener, its probes asking
/// 127.0.0.1:`port` (kubeadm's 10259), beside the API server of [`node`]; its manifest.
fn scheduler(settings: &Settings, port: u16) -> std::path::PathBuf {
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubeadm-manifests/kube-scheduler.yaml");
    let text = fs::read_to_string(template).unwrap();
    assert!(text.contains("port: 10259\n"), "{text}");
    let manifest = settings.manifests_dir.join("kube-scheduler.yaml");
    let text =
        (text.replace("{{ROOT}}", "/nonexistent")).replace("port: 10259", &format!("port: {port}"));
    fs::write(&manifest, text).unwrap();
    manifest
}

#[tokio::test]
async fn a_pod_whose_flags_name_no_listener_is_seen_to_end_where_its_probes_ask() {
    for kubelet in [Kubelet::Obeys, Kubelet::Ignores] {
        let dir = tempfile::tempdir().unwrap();
        let (port, renewed, old) = (free_port(), pair(), pair());
        let settings = node(dir.path(), free_port(), &renewed, "");
        let manifest = scheduler(&settings, port);
        let pair = (old.0.as_str(), old.1.as_str());
        pod(
            port,
            &manifest,
            pair,
            pair,
            Duration::ZERO,
            vec![200],
            kubelet,
        );
        let (out, took) = restart_named(&settings, "kube-scheduler").await;
        println!("restart took {took:?}: {:?} {:?}", out.pods, out.held);
        assert!(manifest.is_file());
        match kubelet {
            Kubelet::Obeys => {
                let ended = format!("the old process ended (127.0.0.1:{port} refused after");
                assert!(
                    out.pods[0].ok && out.pods[0].detail.contains(&ended),
                    "{out:?}"
                );
                assert!(out.held.is_empty(), "{out:?}");
            }
            Kubelet::Ignores => {
                assert!(out.pods.is_empty(), "{out:?}");
                let why = format!(
                    "its process did not end: 127.0.0.1:{port} (livenessProbe in {}) still answered 2 s after the manifest left",
                    manifest.display()
                );
                let held = &out.held[0].1;
                assert!(matches!(held, Hold::NotRestarted(_)), "{held:?}");
                assert!(held.to_string().starts_with(&why), "{out:?}");
                assert!(out.restored.is_empty() && out.backoff.is_empty());
            }
        }
    }
}

#[tokio::test]
async fn a_server_still_on_the_old_certificate_did_not_come_back_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (port, renewed, old) = (free_port(), pair(), pair());
    let settings = node(dir.path(), port, &renewed, "");
    let m = manifest(&settings);
    pod(
        port,
        &m,
        (&old.0, &old.1),
        (&old.0, &old.1),
        Duration::ZERO,
        vec![200],
        Kubelet::Obeys,
    );
    let (out, took) = restart_pod(&settings).await;
    let pod = &out.pods[0];
    println!("restart took {took:?}: {}", pod.detail);
    assert!(!pod.ok, "{pod:?}");
    let want = format!(
        "not serving within 4 s: 127.0.0.1:{port} (--advertise-address in {}): serves serial {}, not serial {}",
        settings.manifests_dir.join("kube-apiserver.yaml").display(),
        old.2,
        renewed.2
    );
    assert!(pod.detail.contains(&want), "{pod:?}");
    assert!(out.failures().iter().any(|f| f.contains(&want)));
}

/// A node whose kube-apiserver pod, once its manifest is back, serves the renewed pair and
/// answers `/readyz` 500 for ever; the wait for it bounded by `timeout`.
fn never_ready(dir: &Path, timeout: Duration) -> Settings {
    let (port, renewed, old) = (free_port(), pair(), pair());
    let mut settings = node(dir, port, &renewed, "");
    settings.restart_timeout = timeout;
    let new = (renewed.0.as_str(), renewed.1.as_str());
    pod(
        port,
        &manifest(&settings),
        (&old.0, &old.1),
        new,
        Duration::ZERO,
        vec![500],
        Kubelet::Obeys,
    );
    settings
}

#[tokio::test]
async fn readyz_never_200_is_not_back_and_says_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let settings = never_ready(dir.path(), Duration::from_secs(4));
    let (out, _) = restart_pod(&settings).await;
    assert!(!out.pods[0].ok, "{:?}", out.pods);
    assert!(
        out.pods[0].detail.contains("/readyz said 500"),
        "{:?}",
        out.pods
    );
}

#[tokio::test]
async fn with_wait_serving_false_back_is_the_manifest_back_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let mut settings = node(dir.path(), port, &renewed, "wait_serving = false\n");
    settings.static_pod_wait = Duration::from_millis(50);
    let (out, took) = restart_pod(&settings).await;
    println!("restart took {took:?}: {}", out.pods[0].detail);
    assert!(out.pods[0].ok, "{:?}", out.pods);
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_pod_that_was_not_running_is_not_waited_for() {
    // Nothing listens where its flags say before the restart (kubelet not running it): the
    // restart takes nothing down, and nothing could come back to wait for.
    let dir = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let mut settings = node(dir.path(), port, &renewed, "");
    settings.static_pod_wait = Duration::from_millis(50);
    let (out, took) = restart_pod(&settings).await;
    let pod = &out.pods[0];
    println!("restart took {took:?}: {}", pod.detail);
    assert!(pod.ok, "{pod:?}");
    assert!(
        pod.detail.contains(&format!(
            "not waited for to serve: nothing listened at 127.0.0.1:{port} before the restart"
        )),
        "{pod:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_unit_is_waited_for_on_the_address_its_unit_file_names() {
    let root = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let cert = root.path().join("apiserver.crt");
    fs::write(&cert, &renewed.0).unwrap();
    let units = root.path().join("etc/systemd/system");
    fs::create_dir_all(&units).unwrap();
    fs::write(
        units.join("kube-apiserver.service"),
        format!(
            "[Service]\nExecStart=/usr/local/bin/kube-apiserver \\\n  --advertise-address=127.0.0.1 \\\n  \
             --secure-port={port} --tls-cert-file={}\n",
            cert.display()
        ),
    )
    .unwrap();
    let serving = Serving {
        root: root.path().to_path_buf(),
        timeout: Duration::from_secs(4),
        off: Vec::new(),
        client: None,
        units: Vec::new(),
        node: Default::default(),
        stop: Default::default(),
    };
    let step = Step::new(Target::Unit("kube-apiserver.service".into()));
    // Anonymous requests refused: answering all the same.
    stand_in(
        port,
        &renewed.0,
        &renewed.1,
        Duration::from_millis(700),
        vec![401],
    );
    let shown = serving.wait(&step, root.path()).await.unwrap();
    assert!(
        shown.contains("/readyz said 401 (anonymous refused; no client pair the API server accepts was found on the node"),
        "{shown}"
    );
    // Nothing learnt (kube-scheduler, or no flags): nothing waited for.
    let other = Step::new(Target::Unit("kube-scheduler.service".into()));
    assert_eq!(serving.wait(&other, root.path()).await.unwrap(), "");
    fs::remove_file(units.join("kube-apiserver.service")).unwrap();
    assert_eq!(serving.wait(&step, root.path()).await.unwrap(), "");
}

/// A CA, and a client pair it signed for `cn` in organisation `o`: (CA PEM, cert PEM, key PEM).
fn client_of_ca(cn: &str, o: &str) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(Vec::new()).unwrap();
    leaf.distinguished_name.push(rcgen::DnType::CommonName, cn);
    leaf.distinguished_name
        .push(rcgen::DnType::OrganizationName, o);
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// kube-apiserver and kubelet as systemd units of a node under `root`: the API server on
/// 127.0.0.1:`port` serving `cert`, trusting clients of `client_ca`, with its own kubelet
/// client pair (`O=system:masters`); kubelet with a kubeconfig naming its own pair
/// (`kubelet-client-current.pem`, both in one file) of `kubelet_ca`.
fn apiserver_and_kubelet(
    root: &Path,
    port: u16,
    cert: &str,
    client_ca: &str,
    kubelet_ca: &str,
) -> NodeReading {
    let (ca, own_cert, own_key) = client_of_ca("kube-apiserver-kubelet-client", "system:masters");
    let (kca, kubelet_cert, kubelet_key) = client_of_ca("system:node:c1", "system:nodes");
    let file = |name: &str, text: &str| {
        let p = root.join(name);
        fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let served = file("apiserver.crt", cert);
    let cas = [("apiserver", &ca), ("kubelet", &kca)];
    let ca_of = |which: &str| cas.iter().find(|(n, _)| *n == which).unwrap().1.clone();
    let client_ca = file("client-ca.crt", &ca_of(client_ca));
    let _ = file("kubelet-ca.crt", &ca_of(kubelet_ca));
    let own_cert = file("apiserver-kubelet-client.crt", &own_cert);
    let own_key = file("apiserver-kubelet-client.key", &own_key);
    let current = file(
        "kubelet-client-current.pem",
        &format!("{kubelet_cert}{kubelet_key}"),
    );
    let kubeconfig = file(
        "kubelet.conf",
        &format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: default-auth\n  user:\n    client-certificate: {current}\n    client-key: {current}\n"
        ),
    );
    let api = UnitSettings {
        unit: "kube-apiserver.service".into(),
        exec_start: vec![(
            "/usr/local/bin/kube-apiserver".into(),
            [
                "kube-apiserver".to_string(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={served}"),
                format!("--client-ca-file={client_ca}"),
                format!("--kubelet-client-certificate={own_cert}"),
                format!("--kubelet-client-key={own_key}"),
            ]
            .to_vec(),
        )],
        ..UnitSettings::default()
    };
    let kubelet = UnitSettings {
        unit: "kubelet.service".into(),
        exec_start: vec![(
            "/usr/bin/kubelet".into(),
            vec!["kubelet".into(), format!("--kubeconfig={kubeconfig}")],
        )],
        ..UnitSettings::default()
    };
    NodeReading::read_with(&root.join("manifests"), &[api, kubelet])
}

#[tokio::test]
async fn readyz_is_asked_as_the_least_privileged_client_the_apiserver_accepts() {
    let step = Step::new(Target::Unit("kube-apiserver.service".into()));
    let serving_of = |root: &Path, node: &NodeReading| {
        Serving {
            root: root.to_path_buf(),
            timeout: Duration::from_secs(3),
            off: Vec::new(),
            client: None,
            units: Vec::new(),
            node: NodeReading::default(),
            stop: Default::default(),
        }
        .knowing(node)
    };
    // kubelet's pair is accepted: 401 is not ready, and the wait runs out on it.
    let root = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let node = apiserver_and_kubelet(root.path(), port, &renewed.0, "kubelet", "kubelet");
    stand_in(port, &renewed.0, &renewed.1, Duration::ZERO, vec![401]);
    let why = serving_of(root.path(), &node)
        .wait(&step, root.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("/readyz said 401 as user system:node:c1 (system:nodes): it does not authenticate that client (yet)"),
        "{why}"
    );
    // Ready once it says 200, asked as kubelet.
    let root = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let node = apiserver_and_kubelet(root.path(), port, &renewed.0, "kubelet", "kubelet");
    stand_in(
        port,
        &renewed.0,
        &renewed.1,
        Duration::ZERO,
        vec![401, 403, 200],
    );
    let shown = serving_of(root.path(), &node)
        .wait(&step, root.path())
        .await
        .unwrap();
    assert!(
        shown.contains("/readyz said 200 as user system:node:c1 (system:nodes)"),
        "{shown}"
    );
    // kubelet's pair from a CA the API server does not trust: its own client pair.
    let root = tempfile::tempdir().unwrap();
    let (port, renewed) = (free_port(), pair());
    let node = apiserver_and_kubelet(root.path(), port, &renewed.0, "apiserver", "kubelet");
    stand_in(port, &renewed.0, &renewed.1, Duration::ZERO, vec![200]);
    let shown = serving_of(root.path(), &node)
        .wait(&step, root.path())
        .await
        .unwrap();
    assert!(
        shown.contains("said 200 as user kube-apiserver-kubelet-client (system:masters)"),
        "{shown}"
    );
}

/// A gate that never refuses and hands the stage `stop`.
struct Stoppable(crate::stop::Stop);

impl crate::restart::Gate for Stoppable {
    async fn before(&mut self, _: &Step) -> Result<(), crate::restart::Hold> {
        Ok(())
    }
    async fn after(&mut self, _: &Step, _: bool) -> Result<(), crate::restart::Hold> {
        Ok(())
    }
    async fn finish(&mut self) {}
    fn stop(&self) -> crate::stop::Stop {
        self.0.clone()
    }
}

#[tokio::test]
async fn a_stop_ends_the_serving_wait_and_leaves_the_restart_owed_not_rolled_back() {
    // Never ready: without the stop the wait would last its whole minute.
    let dir = tempfile::tempdir().unwrap();
    let settings = never_ready(dir.path(), Duration::from_secs(60));
    let m = manifest(&settings);
    let (stop, stopped) = crate::stop::Stop::channel();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stop.request("SIGTERM");
    });
    let owed = Owed {
        pods: vec!["kube-apiserver".into()],
        ..Owed::default()
    };
    let start = Instant::now();
    let node = crate::components::NodeReading::read(&settings.manifests_dir);
    let connect = async || Ok(FakeUnits::new());
    let inv = Inventory::default();
    let mut gate = Stoppable(stopped);
    let out = restart(&settings, &inv, &node, &[], owed, connect, &mut gate)
        .await
        .unwrap();
    let took = start.elapsed();
    println!("took {took:?}: held {:?}", out.held);
    assert!(took < Duration::from_secs(30), "the wait went on: {took:?}");
    assert!(out.pods.is_empty(), "{:?}", out.pods);
    assert!(
        matches!(&out.held[..], [(Target::Pod(p), Hold::NotWaitedFor(why))]
            if p == "kube-apiserver" && why.contains("certrenewd is stopping")),
        "{:?}",
        out.held
    );
    assert!(out.restored.is_empty() && out.rolled_back.is_empty());
    assert!(m.exists(), "the manifest is back");
    let still = crate::restart::owed::load(&settings.state_dir).unwrap();
    assert_eq!(still.pods, ["kube-apiserver"], "{still:?}");
}
