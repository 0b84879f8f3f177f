//! This node's etcd member, a static pod that is down, is started without the restart lock
//! only when the container runtime reports no container of it that runs or is about to:
//! moving its manifest out and back stops a pod that runs. Asked of a real containerd over
//! its CRI socket, as kubelet's `--container-runtime-endpoint` names it, with the pod
//! started as kubelet starts it (its sandbox, then its container, with kubelet's labels).
//! Nothing listens where the manifest says etcd listens, so by its addresses alone the pod
//! is down every time.

use crate::common;

use std::path::Path;
use std::time::Duration;

use certrenewd::components::{NodeReading, UnitSettings};
use certrenewd::config::Settings;
use certrenewd::inventory::Inventory;
use certrenewd::restart::fake::FakeUnits;
use certrenewd::restart::owed::Owed;
use certrenewd::restart::step::Step;
use certrenewd::restart::{Gate, Hold, RestartOutcomes, restart};

use common::containerd::Containerd;

/// kubeadm's etcd manifest, as `kubeadm init` writes it (its host paths as on a node), for a
/// node on a loopback address nothing listens at (nor at 127.0.0.1:2379: the tests of this
/// binary keep that port free).
fn etcd_manifest() -> String {
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kubeadm-manifests/etcd.yaml"
    );
    (std::fs::read_to_string(template).expect("kubeadm's etcd manifest"))
        .replace("{{ROOT}}", "")
        .replace("{{IP}}", "127.0.0.31")
        .replace("{{NAME}}", "node1")
}

/// The restart gate of a node whose own member is down and may only be started.
struct StartOnly;

impl Gate for StartOnly {
    async fn before(&mut self, _: &Step) -> Result<(), Hold> {
        Ok(())
    }
    async fn after(&mut self, _: &Step, _: bool) -> Result<(), Hold> {
        Ok(())
    }
    async fn finish(&mut self) {}
    fn start_only(&self) -> bool {
        true
    }
}

/// One start of static pod etcd without the lock, on a node whose kubelet names `socket`.
async fn start_etcd(node_dir: &Path, socket: &Path) -> RestartOutcomes {
    let d = node_dir.display();
    let toml = format!(
        "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\nstatic_pod_wait_secs = 1\n\
         [[watch]]\npath = \"{d}/pki\"\nstatic_pods = [\"etcd\"]\n\
         [coordination]\nenabled = false\n"
    );
    let settings = Settings::from_toml(&toml, None).expect("config");
    let endpoint = format!("--container-runtime-endpoint=unix://{}", socket.display());
    let kubelet = UnitSettings {
        unit: "kubelet.service".into(),
        exec_start: vec![(
            "/usr/bin/kubelet".into(),
            vec!["/usr/bin/kubelet".into(), endpoint],
        )],
        environment: Vec::new(),
        environment_files: Vec::new(),
    };
    let node = NodeReading::read_with(&settings.manifests_dir, &[kubelet]);
    let owed = Owed {
        pods: vec!["etcd".into()],
        ..Owed::default()
    };
    let connect = async || Ok(FakeUnits::new());
    restart(
        &settings,
        &Inventory::default(),
        &node,
        &[],
        owed,
        connect,
        &mut StartOnly,
    )
    .await
    .expect("restart stage")
}

fn held(out: &RestartOutcomes) -> Vec<String> {
    (out.held.iter())
        .map(|(t, why)| format!("{t}: {why}"))
        .collect()
}

#[tokio::test]
async fn a_static_pod_is_started_without_the_lock_only_when_no_container_of_it_runs() {
    let Some(c) = Containerd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node");
    let manifest = node.join("manifests/etcd.yaml");
    std::fs::create_dir_all(node.join("manifests")).unwrap();
    std::fs::create_dir_all(node.join("pki")).unwrap();
    let etcd = etcd_manifest();
    std::fs::write(&manifest, &etcd).unwrap();

    // Running, as kubelet runs it: not down, whatever its addresses say.
    let (sandbox, id) = c.run_pod("etcd-node1", "kube-system", "etcd").await;
    let out = start_etcd(&node, &c.socket).await;
    let held_running = held(&out);
    eprintln!("etcd's container running: {held_running:?}");
    assert!(out.pods.is_empty(), "{:?}", out.pods);
    assert_eq!(held_running.len(), 1, "{held_running:?}");
    let short = &id[..13];
    assert!(
        held_running[0].starts_with("static pod etcd: the container runtime reports ")
            && held_running[0].contains(&format!("etcd of pod etcd-node1 ({short}, running)"))
            && held_running[0].contains("only a member the container runtime reports no running container of is started without the restart lock"),
        "{held_running:?}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), etcd);

    // Ended, and its next attempt created and not started yet (kubelet's restart of a
    // crashed container): about to run, so not down either.
    c.stop(&id).await;
    let config = c.sandbox_config("etcd-node1", "kube-system");
    let next = c.create(&sandbox, &config, "etcd", 1).await;
    let out = start_etcd(&node, &c.socket).await;
    let held_created = held(&out);
    eprintln!("etcd's next container created: {held_created:?}");
    assert!(
        held_created.len() == 1 && held_created[0].contains(&format!("({}, created)", &next[..13])),
        "{held_created:?}"
    );
    assert!(
        !held_created[0].contains(short),
        "an exited container was counted: {held_created:?}"
    );

    // Every container of it exited: down, and started (its manifest out and back).
    c.remove(&next).await;
    let out = start_etcd(&node, &c.socket).await;
    eprintln!(
        "etcd's containers all exited: held {:?}, pods {:?}",
        held(&out),
        out.pods
    );
    assert!(out.held.is_empty(), "{:?}", held(&out));
    assert_eq!(out.pods.len(), 1, "{:?}", out.pods);
    assert!(out.pods[0].ok, "{:?}", out.pods[0]);
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), etcd);

    // A runtime that does not answer holds the start: asked for 5 s, then held.
    drop(c);
    let gone = node.with_file_name("containerd.sock");
    let t0 = std::time::Instant::now();
    let out = start_etcd(&node, &gone).await;
    let held_gone = held(&out);
    eprintln!("no runtime: {held_gone:?}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(
        held_gone.len() == 1 && held_gone[0].contains("did not answer ListContainers"),
        "{held_gone:?}"
    );
}
