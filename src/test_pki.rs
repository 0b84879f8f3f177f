//! Small PKI trees for unit tests, made with rcgen (the integration tests use trees made by
//! the real openssl and cfssl CLIs).

use crate::inventory::Inventory;

/// A CA with its key, `a` (with its key) and `b` (no key), both ending 2030-01-01.
pub(crate) fn tree(dir: &std::path::Path) -> Inventory {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("ca.key"), ca_key.serialize_pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    for (name, with_key) in [("a", true), ("b", false)] {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![format!("{name}.test")]).unwrap();
        params.not_before = rcgen::date_time_ymd(2029, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
        if with_key {
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
    }
    Inventory::scan(&[dir.to_path_buf()])
}

/// kubeadm's four static pod manifests (`tests/fixtures/kubeadm-manifests`, as `kubeadm init`
/// writes them) in `root/manifests`, their host paths under `root`, and the kubeconfigs of the
/// controller manager and the scheduler in `root/etc/kubernetes`; returns the manifest directory.
pub(crate) fn kubeadm_manifests(root: &std::path::Path) -> std::path::PathBuf {
    let manifests = root.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, text) in [
        (
            "etcd",
            include_str!("../tests/fixtures/kubeadm-manifests/etcd.yaml"),
        ),
        (
            "kube-apiserver",
            include_str!("../tests/fixtures/kubeadm-manifests/kube-apiserver.yaml"),
        ),
        (
            "kube-controller-manager",
            include_str!("../tests/fixtures/kubeadm-manifests/kube-controller-manager.yaml"),
        ),
        (
            "kube-scheduler",
            include_str!("../tests/fixtures/kubeadm-manifests/kube-scheduler.yaml"),
        ),
    ] {
        let text = text
            .replace("{{ROOT}}", &root.display().to_string())
            .replace("{{IP}}", "127.0.206.2")
            .replace("{{NAME}}", "controller-0");
        std::fs::write(manifests.join(format!("{name}.yaml")), text).unwrap();
    }
    let etc = root.join("etc/kubernetes");
    std::fs::create_dir_all(etc.join("pki")).unwrap();
    for conf in ["controller-manager.conf", "scheduler.conf"] {
        std::fs::write(
            etc.join(conf),
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-certificate-data: AA==\n    client-key-data: AA==\n",
        )
        .unwrap();
    }
    manifests
}
