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
        "kube-scheduler.service",
        &[
            "/usr/bin/kube-scheduler",
            "--config=/etc/kubernetes/scheduler.yaml",
        ],
        &[],
        &[],
    ));
    let why =
        "--config=/etc/kubernetes/scheduler.yaml: certrenewd does not read that file's settings";
    assert!(
        config.unknown.as_deref().unwrap().contains(why),
        "{config:?}"
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

/// kubelet as kubeadm installs it: `10-kubeadm.conf`'s variables in a bare `ExecStart`,
/// `--config` a KubeletConfiguration naming the client CA, the kubeconfig naming its
/// rotated client pair, the bootstrap kubeconfig gone after the join, and the serving
/// pair kubelet makes itself in its certificate directory.
#[test]
fn kubeadms_kubelet_reads_its_config_kubeconfig_and_certificate_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let put = |rel: &str, text: &str| {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    };
    let config = put(
        "var/lib/kubelet/config.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nauthentication:\n  anonymous:\n    enabled: false\n  webhook:\n    cacheTTL: 0s\n    enabled: true\n  x509:\n    clientCAFile: {d}/etc/kubernetes/pki/ca.crt\nauthorization:\n  mode: Webhook\ncgroupDriver: systemd\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\nkind: KubeletConfiguration\nrotateCertificates: true\nstaticPodPath: /etc/kubernetes/manifests\n",
            d = d.display()
        ),
    );
    let kubeconfig = put(
        "etc/kubernetes/kubelet.conf",
        &format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: default-auth\n  user:\n    client-certificate: {d}/var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: {d}/var/lib/kubelet/pki/kubelet-client-current.pem\n",
            d = d.display()
        ),
    );
    let flags = put(
        "var/lib/kubelet/kubeadm-flags.env",
        "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10\"\n",
    );
    let kubeconfig_args = format!(
        "KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig={d}/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig={}",
        kubeconfig.display(),
        d = d.display()
    );
    let config_args = format!("KUBELET_CONFIG_ARGS=--config={}", config.display());
    let defaults = d.join("etc/default/kubelet");
    let c = read(&unit(
        "kubelet.service",
        &[
            "/usr/bin/kubelet",
            "$KUBELET_KUBECONFIG_ARGS",
            "$KUBELET_CONFIG_ARGS",
            "$KUBELET_KUBEADM_ARGS",
            "$KUBELET_EXTRA_ARGS",
        ],
        &[&kubeconfig_args, &config_args],
        &[(&flags, true), (&defaults, true)],
    ));
    assert_eq!(c.kind, Some(Kind::Kubelet));
    assert!(c.known(), "{:?}", c.unknown);
    let want: std::collections::BTreeSet<PathBuf> = [
        config,
        kubeconfig,
        d.join("etc/kubernetes/pki/ca.crt"),
        d.join("var/lib/kubelet/pki/kubelet-client-current.pem"),
        PathBuf::from("/var/lib/kubelet/pki/kubelet.crt"),
        PathBuf::from("/var/lib/kubelet/pki/kubelet.key"),
    ]
    .into();
    assert_eq!(c.reads, want);
}
