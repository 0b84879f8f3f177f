//! Certificates another manager renews on its own, by where it keeps them: kops'
//! etcd-manager, k3s and RKE2 with their embedded etcd, OpenShift's operators. certrenewd
//! lists them and says whose they are; it neither renews them nor restarts what uses them
//! (a renewal there would fight the manager, which rewrites them by its own rules). One due
//! and still not renewed is reported, as a certificate this node cannot renew.

use std::path::Path;

/// Where each manager keeps its certificates (a part of the path, so that a tree under a
/// test root is recognised as the node's), and who it is.
const MANAGED: &[(&str, &str)] = &[
    (
        "/kubernetes/pki/etcd-manager-",
        "kops' etcd-manager (etcd-manager-main, etcd-manager-events)",
    ),
    (
        "/rancher/k3s/server/tls/",
        "k3s, which renews its certificates at its start",
    ),
    (
        "/rancher/rke2/server/tls/",
        "RKE2, which renews its certificates at its start",
    ),
    (
        "/kubernetes/static-pod-resources/",
        "OpenShift's control-plane operators (cluster-etcd-operator, cluster-kube-apiserver-operator)",
    ),
    (
        "/kubernetes/static-pod-certs/",
        "OpenShift's control-plane operators (cluster-etcd-operator, cluster-kube-apiserver-operator)",
    ),
];

/// Who renews the certificate at `path`, when another manager does.
pub fn manager(path: &Path) -> Option<&'static str> {
    let path = path.to_string_lossy();
    (MANAGED.iter())
        .find(|(part, _)| path.contains(part))
        .map(|(_, who)| *who)
}

/// What is said of a certificate at `path` another manager renews.
pub fn reason(path: &Path) -> Option<String> {
    manager(path).map(|who| {
        format!("managed by {who}: certrenewd neither renews it nor restarts what uses it")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managers_are_known_by_where_they_keep_their_certificates() {
        let of = |p: &str| manager(Path::new(p)).map(|w| w.split(' ').next().unwrap());
        assert_eq!(
            of("/etc/kubernetes/pki/etcd-manager-main/etcd-clients-ca.crt"),
            Some("kops'")
        );
        assert_eq!(
            of("/var/lib/rancher/k3s/server/tls/etcd/server-client.crt"),
            Some("k3s,")
        );
        assert_eq!(
            of("/var/lib/rancher/rke2/server/tls/etcd/peer-ca.crt"),
            Some("RKE2,")
        );
        assert_eq!(
            of(
                "/etc/kubernetes/static-pod-resources/etcd-certs/secrets/etcd-all-certs/etcd-peer-m1.crt"
            ),
            Some("OpenShift's")
        );
        assert_eq!(
            of("/tmp/t/etc/kubernetes/pki/etcd-manager-events/etcd-peers-ca.crt"),
            Some("kops'")
        );
        assert_eq!(of("/etc/kubernetes/pki/etcd/server.crt"), None);
        assert_eq!(of("/etc/kubernetes/pki/etcd-manager.crt"), None);
    }
}
