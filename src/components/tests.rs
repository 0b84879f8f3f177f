use super::*;
use crate::test_pki::kubeadm_manifests as kubeadm;

fn pki(root: &Path, name: &str) -> PathBuf {
    root.join("etc/kubernetes/pki").join(name)
}

#[test]
fn kubeadms_pods_read_their_own_files_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let node = NodeReading::read(&kubeadm(root));
    let kinds: Vec<Option<Kind>> = node.pods.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            Some(Kind::Etcd),
            Some(Kind::ApiServer),
            Some(Kind::ControllerManager),
            Some(Kind::Scheduler)
        ]
    );
    for p in &node.pods {
        assert!(p.known(), "{}: {:?}", p.name(), p.unknown);
    }
    let [etcd, apiserver, kcm, scheduler] = &node.pods[..] else {
        panic!("{node:?}");
    };
    let reads = |c: &Component, rel: &str| c.reads(&pki(root, rel));
    // Through the pod's mount of pki/etcd, not of pki.
    assert!(reads(etcd, "etcd/server.crt") && reads(etcd, "etcd/peer.key"));
    assert!(reads(etcd, "etcd/ca.crt"));
    assert!(!reads(etcd, "etcd/healthcheck-client.crt"));
    assert!(!reads(etcd, "front-proxy-client.crt") && !reads(etcd, "ca.crt"));
    for f in [
        "front-proxy-client.crt",
        "apiserver.crt",
        "apiserver-etcd-client.key",
        "apiserver-kubelet-client.crt",
        "ca.crt",
        "front-proxy-ca.crt",
        "etcd/ca.crt",
    ] {
        assert!(reads(apiserver, f), "kube-apiserver reads {f}");
    }
    assert!(!reads(apiserver, "etcd/server.crt"));
    assert!(reads(kcm, "ca.crt") && reads(kcm, "front-proxy-ca.crt"));
    assert!(kcm.reads(&root.join("etc/kubernetes/controller-manager.conf")));
    assert!(!reads(kcm, "front-proxy-client.crt"));
    assert!(scheduler.reads(&root.join("etc/kubernetes/scheduler.conf")));
    assert_eq!(
        scheduler.reads.len(),
        1,
        "the scheduler reads its kubeconfig alone: {:?}",
        scheduler.reads
    );
    // No file certrenewd does not have is read: nothing outside the root but the system's
    // CA directories, which the pods mount and no flag names.
    for p in &node.pods {
        assert!(p.reads.iter().all(|r| r.starts_with(root)), "{:?}", p.reads);
    }
}

#[test]
fn what_cannot_be_followed_makes_a_pods_files_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let manifests = kubeadm(root);
    let edit = |name: &str, from: &str, to: &str| {
        let p = manifests.join(name);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{name}: {from}");
        std::fs::write(&p, text.replace(from, to)).unwrap();
    };
    // The image's entrypoint runs; a config file holds settings; a flag names a path on no
    // volume; a kubeconfig that is not one.
    edit("etcd.yaml", "  - command:\n    - etcd\n", "  - args:\n");
    edit(
        "kube-apiserver.yaml",
        "    - --allow-privileged=true\n",
        "    - --allow-privileged=true\n    - --config=/etc/kubernetes/pki/apiserver.cfg\n",
    );
    edit(
        "kube-controller-manager.yaml",
        "    - --bind-address=127.0.0.1\n",
        "    - --bind-address=127.0.0.1\n    - --tls-cert-file=/srv/kcm.crt\n",
    );
    std::fs::write(
        root.join("etc/kubernetes/scheduler.conf"),
        "- not\n- a kubeconfig\n",
    )
    .unwrap();
    std::fs::write(manifests.join("broken.yaml"), "spec: [").unwrap();
    let node = NodeReading::read(&manifests);
    let why: Vec<String> = node
        .pods
        .iter()
        .map(|p| p.unknown.clone().unwrap_or_else(|| "known".into()))
        .collect();
    assert!(why[0].starts_with("its manifest cannot be read"), "{why:?}");
    assert!(why[1].contains("image's entrypoint"), "{why:?}");
    assert!(
        why[2].contains("--config=/etc/kubernetes/pki/apiserver.cfg"),
        "{why:?}"
    );
    assert!(
        why[3].contains("/srv/kcm.crt is on no volume the pod mounts"),
        "{why:?}"
    );
    assert!(
        why[4].contains("cannot read its kubeconfig /etc/kubernetes/scheduler.conf"),
        "{why:?}"
    );
    assert!(node.pods.iter().all(|p| !p.known()));
    assert_eq!(
        node.pods[1].kind, None,
        "no command: what runs is not known"
    );
    assert_eq!(node.pods[2].kind, Some(Kind::ApiServer));
}

#[test]
fn a_kubeconfig_naming_files_adds_them_and_sub_paths_and_non_host_volumes_map() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let manifests = root.join("m");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::create_dir_all(root.join("kubelet/pki")).unwrap();
    std::fs::write(
        root.join("kubelet/kubelet.conf"),
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-certificate: pki/current.pem\n    client-key: /var/lib/kubelet/pki/current.pem\n",
    )
    .unwrap();
    let pod = format!(
        "kind: Pod\nspec:\n  containers:\n  - name: vip\n    command: [\"/usr/local/bin/kube-vip\", \"--kubeconfig\", \"/var/lib/kubelet/kubelet.conf\", \"--cert=/cfg/x.crt\"]\n\
         \x20   volumeMounts:\n    - {{name: kl, mountPath: /var/lib/kubelet}}\n    - {{name: cfg, mountPath: /cfg}}\n\
         \x20 volumes:\n  - {{name: kl, hostPath: {{path: {r}/kubelet}}}}\n  - {{name: cfg, configMap: {{name: c}}}}\n",
        r = root.display()
    );
    std::fs::write(manifests.join("kube-vip.yaml"), pod).unwrap();
    let node = NodeReading::read(&manifests);
    let vip = &node.pods[0];
    assert_eq!(vip.kind, None, "kube-vip is no program certrenewd follows");
    assert_eq!(vip.unknown, None);
    let want: BTreeSet<PathBuf> = [
        root.join("kubelet/kubelet.conf"),
        root.join("kubelet/pki/current.pem"),
    ]
    .into();
    assert_eq!(vip.reads, want);
    assert_eq!(
        paths_in(&["--tls-sni-cert-key=/a.crt,/a.key:*.example.com,b".into()]),
        [
            ("tls-sni-cert-key".to_string(), "/a.crt".to_string()),
            ("tls-sni-cert-key".to_string(), "/a.key".to_string())
        ]
    );
}

#[test]
fn the_etcd_servers_are_the_api_servers_as_kubeadm_writes_them_for_external_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = kubeadm(dir.path());
    assert_eq!(
        NodeReading::read(&manifests).etcd_servers(),
        ["https://127.0.0.1:2379"]
    );
    // kubeadm's external etcd: the servers its ClusterConfiguration names, joined by commas;
    // its manifest is the stacked one's without the etcd pod.
    let apiserver = manifests.join("kube-apiserver.yaml");
    let text = std::fs::read_to_string(&apiserver).unwrap().replace(
        "--etcd-servers=https://127.0.0.1:2379",
        "--etcd-servers=https://127.0.0.11:2379,https://127.0.0.12:2379",
    );
    std::fs::write(&apiserver, text).unwrap();
    std::fs::remove_file(manifests.join("etcd.yaml")).unwrap();
    assert_eq!(
        NodeReading::read(&manifests).etcd_servers(),
        ["https://127.0.0.11:2379", "https://127.0.0.12:2379"]
    );
}

#[test]
fn the_etcd_clients_the_node_names_are_the_api_servers_then_etcds_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let node = NodeReading::read(&kubeadm(root));
    let clients = node.etcd_clients();
    let triple = |c: &str, k: &str, ca: &str| (pki(root, c), pki(root, k), pki(root, ca));
    assert_eq!(
        clients,
        [
            triple(
                "apiserver-etcd-client.crt",
                "apiserver-etcd-client.key",
                "etcd/ca.crt"
            ),
            triple("etcd/peer.crt", "etcd/peer.key", "etcd/ca.crt"),
            triple("etcd/server.crt", "etcd/server.key", "etcd/ca.crt"),
        ]
    );
}
