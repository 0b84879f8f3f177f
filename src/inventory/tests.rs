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

/// A file the walk listed as regular and that was swapped before it was read: a FIFO in its
/// place (opening it would wait for a writer forever) or a symlink (to a real certificate
/// elsewhere) is an error of the scan naming why, at once; never a hang, never followed.
#[test]
fn a_file_swapped_after_the_walk_listed_it_is_an_error_naming_why() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere.crt");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-keyout",
            "/dev/null",
            "-subj",
            "/CN=elsewhere",
            "-days",
            "365",
        ])
        .arg("-out")
        .arg(&elsewhere)
        .status()
        .unwrap();
    assert!(made.success(), "openssl req -x509");
    let fifo = dir.path().join("apiserver.crt");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let link = dir.path().join("front-proxy-client.crt");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    for (path, want) in [
        (fifo, "not a regular file (a FIFO)"),
        (link, "not a regular file: a symlink now"),
    ] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let said = match read::read_file(&p, Follow::No) {
                read::Content::Bad(reason) => reason,
                read::Content::Certs { .. } => "read as certificates".into(),
                _ => "read as something else".into(),
            };
            let _ = tx.send(said);
        });
        let said = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("reading {} hung", path.display()));
        println!("{}: {said}", path.display());
        assert!(said.contains(want), "{}: {said}", path.display());
    }
}

/// A watch of the files a component's settings name reads those files and their keys, and
/// nothing else of their directory; it does not make a configuration whose every directory
/// is missing right: that is still an error.
#[test]
fn a_watch_of_named_files_reads_them_alone_and_leaves_a_mistyped_configuration_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let ssl = dir.path().join("ssl");
    std::fs::create_dir_all(&ssl).unwrap();
    for f in [
        "member-a.pem",
        "member-a-key.pem",
        "member-b.pem",
        "member-b-key.pem",
    ] {
        std::fs::write(ssl.join(f), "not PEM").unwrap();
    }
    let named = Root {
        path: ssl.clone(),
        optional: true,
        only: Some(vec![ssl.join("member-a.pem")]),
    };
    let mistyped = Root {
        path: dir.path().join("etc/etdc"),
        optional: true,
        only: None,
    };
    let found = walk::walk(&[mistyped, named.clone()]);
    let files: Vec<String> = (found.files.iter())
        .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["member-a-key.pem", "member-a.pem"]);
    assert_eq!(found.errors.len(), 1, "{:?}", found.errors);
    assert!(
        found.errors[0].reason.contains(
            "the configuration watches nothing on this node (only the files the components' settings name are)"
        ),
        "{:?}",
        found.errors
    );
    // Alone, nothing configured: no error of that kind.
    assert!(walk::walk(&[named]).errors.is_empty());
}
