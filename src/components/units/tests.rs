use super::*;

fn unit(name: &str, exec: &[&str], env: &[&str], files: &[(&Path, bool)]) -> UnitSettings {
    UnitSettings {
        unit: name.into(),
        exec_start: vec![(exec[0].into(), exec.iter().map(|s| s.to_string()).collect())],
        environment: env.iter().map(|s| s.to_string()).collect(),
        environment_files: files.iter().map(|(p, o)| (p.to_path_buf(), *o)).collect(),
    }
}

/// kubespray's etcd: a bare `ExecStart=/usr/local/bin/etcd` and every setting in
/// `/etc/etcd.env`, as its template writes it.
#[test]
fn kubesprays_etcd_reads_the_files_its_environment_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("etcd.env");
    let ssl = dir.path().join("ssl");
    let s = ssl.display();
    std::fs::write(
        &env,
        format!(
            "# Environment file for etcd v3.5.16\nETCD_DATA_DIR=/var/lib/etcd\n\
             ETCD_ADVERTISE_CLIENT_URLS=https://127.0.0.1:2379\nETCD_NAME=etcd1\n\
             ETCD_INITIAL_CLUSTER_TOKEN=k8s_etcd\n\n# TLS settings\n\
             ETCD_TRUSTED_CA_FILE={s}/ca.pem\nETCD_CERT_FILE={s}/member-node1.pem\n\
             ETCD_KEY_FILE={s}/member-node1-key.pem\nETCD_CLIENT_CERT_AUTH=true\n\n\
             ETCD_PEER_TRUSTED_CA_FILE={s}/ca.pem\nETCD_PEER_CERT_FILE={s}/member-node1.pem\n\
             ETCD_PEER_KEY_FILE={s}/member-node1-key.pem\nETCD_PEER_CLIENT_CERT_AUTH=True\n"
        ),
    )
    .unwrap();
    let c = read(&unit(
        "etcd.service",
        &["/usr/local/bin/etcd"],
        &[],
        &[(&env, false)],
    ));
    assert_eq!(c.kind, Some(Kind::Etcd));
    assert!(c.known(), "{:?}", c.unknown);
    let want: std::collections::BTreeSet<PathBuf> =
        ["ca.pem", "member-node1.pem", "member-node1-key.pem"]
            .iter()
            .map(|f| ssl.join(f))
            .collect();
    assert_eq!(c.reads, want);
    assert_eq!(c.name(), "etcd.service");
}

#[test]
fn flags_with_variables_are_read_as_systemd_puts_them_in() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("apiserver.env");
    std::fs::write(
        &env,
        "; a comment\nexport KUBE_TLS=\"--tls-cert-file=/pki/apiserver.crt --tls-private-key-file=/pki/apiserver.key\"\nCA='/pki/ca.crt'\n",
    )
    .unwrap();
    let missing = dir.path().join("not-there.env");
    let c = read(&unit(
        "kube-apiserver.service",
        &[
            "/usr/bin/kube-apiserver",
            "$KUBE_TLS",
            "--client-ca-file=${CA}",
            "--etcd-cafile",
            "${ETCD_CA}",
        ],
        &["ETCD_CA=/pki/etcd/ca.crt"],
        &[(&env, false), (&missing, true)],
    ));
    assert!(c.known(), "{:?}", c.unknown);
    let want: std::collections::BTreeSet<PathBuf> = [
        "/pki/apiserver.crt",
        "/pki/apiserver.key",
        "/pki/ca.crt",
        "/pki/etcd/ca.crt",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    assert_eq!(c.reads, want);
}

/// What cannot be followed: a wrapper script, a config file of settings, an environment
/// file that is not there and not optional. The files stay unknown, never "none".
#[test]
fn a_wrapper_a_config_file_or_a_missing_environment_file_leaves_the_files_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = read(&unit(
        "etcd.service",
        &["/usr/local/bin/start-etcd.sh"],
        &[],
        &[],
    ));
    assert_eq!(wrapper.kind, None);
    assert!(
        wrapper
            .unknown
            .as_deref()
            .unwrap()
            .contains("runs /usr/local/bin/start-etcd.sh")
    );
    let config = read(&unit(
        "kubelet.service",
        &["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"],
        &[],
        &[],
    ));
    assert!(
        config
            .unknown
            .as_deref()
            .unwrap()
            .contains("--config=/var/lib/kubelet/config.yaml")
    );
    let gone = dir.path().join("etcd.env");
    let missing = read(&unit(
        "etcd.service",
        &["/usr/bin/etcd"],
        &[],
        &[(&gone, false)],
    ));
    assert!(
        missing
            .unknown
            .as_deref()
            .unwrap()
            .contains("cannot read its EnvironmentFile")
    );
    assert!(!wrapper.known() && !config.known() && !missing.known());
}

/// etcd's `--config-file` is etcd's own YAML: its `*-file` settings are what it reads.
#[test]
fn etcds_config_file_names_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("etcd.conf.yml");
    std::fs::write(
        &conf,
        "name: etcd1\nclient-transport-security:\n  cert-file: /etc/etcd/server.crt\n  key-file: '/etc/etcd/server.key'\n  trusted-ca-file: /etc/etcd/ca.crt\npeer-transport-security:\n  cert-file: /etc/etcd/peer.crt\n",
    )
    .unwrap();
    let arg = format!("--config-file={}", conf.display());
    let c = read(&unit("etcd.service", &["/usr/bin/etcd", &arg], &[], &[]));
    assert!(c.known(), "{:?}", c.unknown);
    for f in [
        "/etc/etcd/server.crt",
        "/etc/etcd/server.key",
        "/etc/etcd/ca.crt",
        "/etc/etcd/peer.crt",
    ] {
        assert!(c.reads(Path::new(f)), "{f}: {:?}", c.reads);
    }
}
