//! `restart::Systemd` restarting a real 3-member etcd cluster (Type=notify, mutual TLS) in the
//! sandbox, with the openssl-made StarlingX PKI of `tests/fixtures/mkpki.sh`.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use certrenewd::restart::{RestartMode, Systemd, UnitControl};
use common::e2e::mkpki;
use common::sandbox::Sandbox;

/// Ports 41379/41380, 42379/42380, 43379/43380: apart from the smoke script's 2x379.
const PORT_BASE: &str = "13000";

fn etcdctl(sb: &Sandbox, pki: &Path, vars: &[(&str, String)], args: &[&str]) -> String {
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (stdout, stderr) = sb.etcdctl(pki, &vars, args);
    format!("{stdout}{stderr}")
}

#[tokio::test]
async fn rolling_restart_of_etcd_members_and_a_member_with_a_broken_certificate() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let fixtures = sb.dir().join("pki");
    mkpki("starlingx", &fixtures);
    // One server/peer certificate per member (copies), so one member can be broken alone.
    let pki = fixtures.join("etc/etcd");
    for n in 1..=3 {
        for ext in ["crt", "key"] {
            std::fs::copy(
                pki.join(format!("etcd-server.{ext}")),
                pki.join(format!("etcd-server-{n}.{ext}")),
            )
            .unwrap();
        }
    }
    let client = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let vars = vec![
        ("SANDBOX_ETCD_PORT_BASE", PORT_BASE.to_string()),
        (
            "SANDBOX_ETCD_SERVER_CERT",
            "etcd-server-{N}.crt".to_string(),
        ),
        ("SANDBOX_ETCD_SERVER_KEY", "etcd-server-{N}.key".to_string()),
        (
            "SANDBOX_ETCD_CLIENT_CERT",
            format!("{}.crt", client.display()),
        ),
        (
            "SANDBOX_ETCD_CLIENT_KEY",
            format!("{}.key", client.display()),
        ),
    ];
    let t0 = Instant::now();
    let borrowed: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    sb.start_etcd(&pki, &borrowed).expect("etcd cluster");
    eprintln!("etcd cluster healthy in {:?}", t0.elapsed());
    etcdctl(&sb, &pki, &vars, &["put", "/certrenewd/k", "v1"]);

    let sd = Systemd::connect_address(&sb.bus_address()).await.unwrap();
    let members: Vec<String> = (1..=3).map(|n| format!("etcd-{n}.service")).collect();
    let t0 = Instant::now();
    // One member after the other, each back before the next, as the restart stage does.
    let mut out = Vec::new();
    for m in &members {
        out.push(
            sd.restart(m, RestartMode::TryRestart, Duration::from_secs(60))
                .await,
        );
    }
    eprintln!("rolling restart of 3 members in {:?}", t0.elapsed());
    for r in &out {
        assert!(r.ok, "{r:#?}");
        assert_eq!(r.job_result.as_deref(), Some("done"));
        assert_ne!(r.main_pid_after, r.main_pid_before);
    }
    let health = etcdctl(&sb, &pki, &vars, &["endpoint", "health", "--cluster"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    let got = etcdctl(
        &sb,
        &pki,
        &vars,
        &["get", "--print-value-only", "/certrenewd/k"],
    );
    assert_eq!(got.trim(), "v1");

    // A "renewed" certificate that does not match the member's key: etcd exits before READY.
    std::fs::copy(
        format!("{}.crt", client.display()),
        pki.join("etcd-server-2.crt"),
    )
    .unwrap();
    let r = sd
        .restart(
            "etcd-2.service",
            RestartMode::TryRestart,
            Duration::from_secs(30),
        )
        .await;
    eprintln!("broken member: {}", r.detail);
    assert!(!r.ok, "{r:#?}");
    assert_eq!(r.job_result.as_deref(), Some("failed"), "{r:#?}");
    assert!(r.detail.starts_with("job failed; unit is "), "{}", r.detail);
    assert!(r.detail.contains("result: exit-code"), "{}", r.detail);
    // The two others keep the quorum.
    let got = etcdctl(
        &sb,
        &pki,
        &vars,
        &["get", "--print-value-only", "/certrenewd/k"],
    );
    assert_eq!(got.trim(), "v1");
}
