//! The restart lock and the quorum gate (`certrenewd::coordinate`) against a real 3-member
//! etcd cluster with mutual TLS (the sandbox's, StarlingX PKI made by openssl): taken in turn,
//! the holder named to a waiter, a dead holder's lock free after its lease TTL, the gate
//! naming a member that is down, and a cluster nobody answers restarted without the lock.
//! The same on booted controllers, with the daemon, is `tests/controllers_ha.rs`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use certrenewd::config::{Coordination, Enabled};
use certrenewd::coordinate::EtcdGate;
use certrenewd::restart::sequence::{Gate, Step, Target};
use common::e2e::mkpki;
use common::etcd_e2e::Ports;
use common::sandbox::Sandbox;

const PORTS: Ports = Ports { base: 50000 };

/// The API server's etcd client (the tree's `etcd-client.crt` is expired on purpose).
fn etcdctl(sb: &Sandbox, pki: &Path, vars: &[(&str, &str)], args: &[&str]) -> String {
    let out = sb
        .script("etcdctl")
        .arg(pki)
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .expect("running etcdctl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "etcdctl {args:?}: {text}{err}");
    text
}

/// The subject CN of a PEM certificate, by openssl.
fn cn(cert: &str) -> String {
    let out = std::process::Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-subject",
            "-nameopt",
            "multiline",
            "-in",
            cert,
        ])
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("commonName"))
        .expect("a CN");
    line.split('=').nth(1).unwrap().trim().to_string()
}

fn conf(root: &Path, endpoints: String) -> Coordination {
    let client = root.join("etc/kubernetes/pki/apiserver-etcd-client");
    Coordination {
        enabled: Enabled::On,
        endpoints: endpoints.split(',').map(str::to_string).collect(),
        cert: Some(client.with_extension("crt")),
        key: Some(client.with_extension("key")),
        ca: Some(root.join("etc/etcd/ca.crt")),
        lock_prefix: "/certrenewd/test-lock".into(),
        lease_ttl: Duration::from_secs(5),
        lock_timeout: Duration::from_secs(3),
        gate_timeout: Duration::from_secs(4),
        ..Coordination::default()
    }
}

fn gate(c: &Coordination, me: &str) -> EtcdGate {
    EtcdGate::new(&Coordination {
        member_name: Some(me.into()),
        ..c.clone()
    })
}

fn step(unit: &str) -> Step {
    Step::new(Target::Unit(unit.into()))
}

#[tokio::test]
async fn the_restart_lock_is_taken_in_turn_expires_with_its_holder_and_gates_on_health() {
    let Some(sb) = Sandbox::start_or_skip(
        "the_restart_lock_is_taken_in_turn_expires_with_its_holder_and_gates_on_health",
    ) else {
        return;
    };
    PORTS.assert_free();
    let fixtures = sb.dir().join("pki");
    mkpki("starlingx", &fixtures);
    let pki = fixtures.join("etc/etcd");
    let base = PORTS.base.to_string();
    let client = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let (cert, key) = (
        format!("{}.crt", client.display()),
        format!("{}.key", client.display()),
    );
    let vars = [
        ("SANDBOX_ETCD_PORT_BASE", base.as_str()),
        ("SANDBOX_ETCD_CLIENT_CERT", &cert),
        ("SANDBOX_ETCD_CLIENT_KEY", &key),
    ];
    sb.start_etcd(&pki, &vars).expect("etcd cluster");
    let c = conf(&fixtures, PORTS.endpoints(&[1, 2, 3]));

    // node-a takes the lock; node-b waits, is told who holds it, and gives up at its timeout.
    let mut a = gate(&c, "node-a");
    a.before(&step("kube-scheduler.service"))
        .await
        .expect("node-a takes the lock");
    assert!(a.lock_wait.is_some());
    let mut b = gate(&c, "node-b");
    let t0 = Instant::now();
    let refused = b.before(&step("kube-scheduler.service")).await.unwrap_err();
    eprintln!("node-b: {refused}");
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(refused.contains("held by node-a"), "{refused}");
    assert!(refused.contains("lock_timeout_secs (3s)"), "{refused}");
    // Everything after a refusal is refused too, without asking etcd again.
    assert_eq!(b.before(&step("x.service")).await.unwrap_err(), refused);
    b.finish().await;
    a.finish().await;
    let mut b = gate(&c, "node-b");
    b.before(&step("kube-scheduler.service"))
        .await
        .expect("free once released");
    b.finish().await;

    // A holder that dies (its runtime gone: no keep-alive, no release) loses the lock after
    // the lease TTL; the next one gets it and saw who held it.
    let c2 = c.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut dead = gate(&c2, "node-dead");
            dead.before(&step("kube-scheduler.service")).await.unwrap();
            std::mem::forget(dead);
        });
        // Dropping the runtime stops the keep-alive task.
    })
    .join()
    .unwrap();
    let patient = Coordination {
        lock_timeout: Duration::from_secs(30),
        ..c.clone()
    };
    let mut d = gate(&patient, "node-d");
    let t0 = Instant::now();
    d.before(&step("kube-scheduler.service"))
        .await
        .expect("the dead holder's lock expires");
    let waited = t0.elapsed();
    eprintln!("the dead holder's lock was free after {waited:?}");
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    assert!(waited < Duration::from_secs(5 + 10), "{waited:?}");
    d.finish().await;

    // The quorum gate: with every member healthy, etcd-1's restart may go ahead, and after it
    // its member must be healthy again.
    let mut g = gate(&c, "etcd-1");
    g.before(&step("etcd-1.service"))
        .await
        .expect("all healthy");
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("etcd-1 healthy");
    g.finish().await;
    // A member down: no etcd restart; the refusal names it, and says what happens next.
    sb.systemctl(["stop", "etcd-3.service"]).unwrap();
    let mut g = gate(&c, "etcd-1");
    let t0 = Instant::now();
    let why = g.before(&step("etcd-1.service")).await.unwrap_err();
    eprintln!("gate: {why}");
    assert!(t0.elapsed() >= Duration::from_secs(4));
    assert!(
        why.starts_with("etcd member etcd-3 does not answer"),
        "{why}"
    );
    assert!(why.contains("the next pass retries"), "{why}");
    // Something that is not etcd restarts under the lock regardless.
    assert!(g.before(&step("kube-scheduler.service")).await.is_ok());
    g.finish().await;
    sb.systemctl(["start", "etcd-3.service"]).unwrap();

    // A waiter keeps its place while the members it talks to restart one after the other
    // (as the holder's own etcd does): it connects again through another, and gets the lock.
    let steady = Coordination {
        lease_ttl: Duration::from_secs(60),
        lock_timeout: Duration::from_secs(60),
        ..c.clone()
    };
    let mut a = gate(&steady, "node-a");
    a.before(&step("kube-scheduler.service")).await.unwrap();
    let b_conf = steady.clone();
    let waiter = tokio::spawn(async move {
        let mut b = gate(&b_conf, "node-b");
        let r = b.before(&step("kube-scheduler.service")).await;
        b.finish().await;
        r
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in 1..=3 {
        sb.systemctl(["restart", &format!("etcd-{n}.service")])
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    a.finish().await;
    let r = tokio::time::timeout(Duration::from_secs(60), waiter).await;
    r.expect("node-b waits no longer than its timeout")
        .unwrap()
        .expect("node-b gets the lock");

    // Nothing is left under the prefix once every holder is gone.
    let left = etcdctl(
        &sb,
        &pki,
        &vars,
        &["get", "--prefix", "--keys-only", "/certrenewd/"],
    );
    assert_eq!(left.trim(), "", "keys left under the lock prefix");

    // etcd RBAC with certificate-CN users (as CKE runs it): the node's identity without a role
    // is refused with a sentence saying what to grant; with a role limited to the lock prefix,
    // it takes the lock and gates (member list, status and leases need no grant).
    let user = cn(&cert);
    let lock_role = ["role", "grant-permission", "certrenewd-lock", "readwrite"];
    etcdctl(&sb, &pki, &vars, &["role", "add", "certrenewd-lock"]);
    let grant: Vec<&str> = lock_role
        .iter()
        .copied()
        .chain(["/certrenewd/test-lock/", "--prefix=true"])
        .collect();
    etcdctl(&sb, &pki, &vars, &grant);
    etcdctl(
        &sb,
        &pki,
        &vars,
        &["user", "add", "root", "--new-user-password=rootpw"],
    );
    etcdctl(&sb, &pki, &vars, &["user", "grant-role", "root", "root"]);
    etcdctl(
        &sb,
        &pki,
        &vars,
        &["user", "add", &user, "--new-user-password=unused"],
    );
    etcdctl(&sb, &pki, &vars, &["auth", "enable"]);
    let mut g = gate(&c, "etcd-1");
    let why = g.before(&step("etcd-1.service")).await.unwrap_err();
    eprintln!("no grant: {why}");
    assert!(why.contains(&format!("as etcd user {user}")), "{why}");
    assert!(why.contains("permission denied"), "{why}");
    assert!(
        why.contains("grant it read and write on the key prefix /certrenewd/test-lock/"),
        "{why}"
    );
    g.finish().await;
    let as_root = ["--user", "root:rootpw"];
    let grant_role: Vec<&str> = as_root
        .iter()
        .copied()
        .chain(["user", "grant-role", &user, "certrenewd-lock"])
        .collect();
    etcdctl(&sb, &pki, &vars, &grant_role);
    let mut g = gate(&c, "etcd-1");
    g.before(&step("etcd-1.service"))
        .await
        .expect("the lock prefix is enough");
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("healthy");
    g.finish().await;
    let off: Vec<&str> = as_root.iter().copied().chain(["auth", "disable"]).collect();
    etcdctl(&sb, &pki, &vars, &off);

    // Nobody answers (the cluster is down): restart without the lock, at once.
    let down = conf(&fixtures, "https://127.0.0.1:1,https://127.0.0.1:2".into());
    let mut g = gate(&down, "etcd-1");
    let t0 = Instant::now();
    g.before(&step("etcd-1.service"))
        .await
        .expect("no quorum to protect");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(g.lock_wait, None);
    g.finish().await;
}
