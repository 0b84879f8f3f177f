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
fn par_map_keeps_order() {
    let v: Vec<u32> = (0..1000).collect();
    assert_eq!(
        par_map(&v, |x| x * 2),
        v.iter().map(|x| x * 2).collect::<Vec<_>>()
    );
}
