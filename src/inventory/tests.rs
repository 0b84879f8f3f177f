use std::path::Path;

use super::*;

#[test]
fn key_names_follow_controller_conventions() {
    use std::os::unix::ffi::OsStrExt;
    let c = key_candidates(Path::new("/etc/etcd/kubernetes.pem"));
    assert_eq!(c[0], Path::new("/etc/etcd/kubernetes.key"));
    assert_eq!(c[1], Path::new("/etc/etcd/kubernetes-key.pem"));
    let c = key_candidates(Path::new("/etc/etcd/etcd-server.crt"));
    assert_eq!(c[0], Path::new("/etc/etcd/etcd-server.key"));
    let odd = std::ffi::OsStr::from_bytes(b"/p/caf\xe9.crt");
    assert_eq!(
        key_candidates(Path::new(odd))[0],
        Path::new(std::ffi::OsStr::from_bytes(b"/p/caf\xe9.key"))
    );
}

#[test]
fn the_parallel_scan_keeps_path_order() {
    // More files than threads, written in reverse, each leaf named by its file: the
    // parallel reading and signature checks must give every file its own facts, in path order.
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.path().join("0-ca.crt"), ca.pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    for i in (0..300).rev() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("leaf-{i:03}"));
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.path().join(format!("leaf-{i:03}.crt")), cert.pem()).unwrap();
    }
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    assert_eq!(inv.certs.len(), 301);
    assert!(inv.certs[0].path.ends_with("0-ca.crt"));
    assert_eq!(inv.certs[0].issuer, IssuerLink::SelfSigned);
    for (i, c) in inv.certs[1..].iter().enumerate() {
        assert!(
            c.path.ends_with(format!("leaf-{i:03}.crt")),
            "{}",
            c.path.display()
        );
        assert_eq!(c.facts.subject, format!("CN=leaf-{i:03}"));
        assert_eq!(c.issuer, IssuerLink::Found(0));
    }
}
