//! The restart lock and the quorum gate (`certrenewd::coordinate`) against a real 3-member
//! etcd cluster with mutual TLS (the sandbox's, StarlingX PKI made by openssl): taken in turn,
//! the holder named to a waiter, a dead holder's lock free after its lease TTL, the gate
//! naming a member that is down, and a cluster nobody answers restarted without the lock.
//! The same on booted controllers, with the daemon, is `tests/controllers/ha.rs`.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use certrenewd::components::NodeReading;
use certrenewd::config::{Coordination, Enabled};
use certrenewd::coordinate::EtcdGate;
use certrenewd::coordinate::identity;
use certrenewd::coordinate::members::{self, Member};
use certrenewd::coordinate::wal;
use certrenewd::restart::step::{Step, Target};
use certrenewd::restart::{Gate, Hold};
use certrenewd::restart::{RestartMode, Systemd, UnitControl};
use common::e2e::mkpki;
use common::etcd_e2e::Ports;
use common::sandbox::Sandbox;

const PORTS: Ports = Ports { base: 14000 };

/// The API server's etcd client (the tree's `etcd-client.crt` is expired on purpose).
fn etcdctl(sb: &Sandbox, pki: &Path, vars: &[(&str, &str)], args: &[&str]) -> String {
    sb.etcdctl(pki, vars, args).0
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

/// Asserts that `g` holds the restart of `unit` because nobody answers and etcd's member
/// list was never recorded on the node: refusing URLs then say nothing of the cluster.
async fn held_for_no_member_list(mut g: EtcdGate, unit: &str, what: &str) {
    let why = g
        .before(&step(unit))
        .await
        .expect_err("nobody answering and no member list on record must hold the restarts");
    let why = why.to_string();
    eprintln!("{what}, no member list on record: {why}");
    assert!(why.contains("member list was never recorded here"), "{why}");
    g.finish().await;
}

#[tokio::test]
async fn the_restart_lock_is_taken_in_turn_expires_with_its_holder_and_gates_on_health() {
    let Some(cl) = Cluster::start(PORTS) else {
        return;
    };
    let (sb, fixtures) = (&cl.sb, &cl.fixtures);
    let pki = fixtures.join("etc/etcd");
    let cert = fixtures
        .join("etc/kubernetes/pki/apiserver-etcd-client.crt")
        .display()
        .to_string();
    let vars: Vec<(&str, &str)> = cl.vars().collect();
    let c = conf(fixtures, PORTS.endpoints(&[1, 2, 3]));

    // node-a takes the lock; node-b waits, is told who holds it, and gives up at its timeout.
    let mut a = gate(&c, "node-a");
    a.before(&step("kube-scheduler.service"))
        .await
        .expect("node-a takes the lock");
    assert!(a.lock_wait.is_some());
    let mut b = gate(&c, "node-b");
    let t0 = Instant::now();
    // While it waits, the wait says itself (`renew`'s live line on a terminal): looked for
    // until the wait is over.
    let said = tokio::spawn(async {
        let holder =
            |w: &String| w.starts_with("the restart lock") && w.ends_with("(held by node-a)");
        let since = Instant::now();
        loop {
            let now = certrenewd::live::all();
            if now.iter().any(holder) || since.elapsed() > Duration::from_secs(10) {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let refused = b.before(&step("kube-scheduler.service")).await.unwrap_err();
    let said = said.await.unwrap();
    assert!(
        said.iter()
            .any(|w| w.starts_with("the restart lock") && w.ends_with("(held by node-a)")),
        "{said:?}"
    );
    assert!(matches!(refused, Hold::Refused(_)), "{refused:?}");
    eprintln!("node-b: {refused}");
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
    // Everything after a refusal is refused too, without asking etcd again.
    assert_eq!(b.before(&step("x.service")).await.unwrap_err(), refused);
    let refused = refused.to_string();
    assert!(refused.contains("held by node-a"), "{refused}");
    assert!(refused.contains("lock_timeout_secs (3s)"), "{refused}");
    b.finish().await;
    a.finish().await;
    let mut b = gate(&c, "node-b");
    b.before(&step("kube-scheduler.service"))
        .await
        .expect("free once released");
    b.finish().await;

    // A holder that dies (its runtime gone, no release; its lease's own thread stops
    // renewing once the runtime has not run for twice the TTL) loses the lock after the
    // lease TTL; the next one gets it and saw who held it.
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
        // Dropping the runtime stops its pulse: the lease's thread gives the lease up.
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
    // The TTL (5 s), and slack: etcd extends every lease by its TTL when a new leader takes
    // over, which a sandbox on a loaded machine sees now and then. Held for good, it would
    // still be held at `lock_timeout` (30 s).
    assert!(waited < Duration::from_secs(5 + 20), "{waited:?}");
    d.finish().await;

    // A holder dropped without `finish` (a path that forgot to release it) while this runtime
    // lives on stops renewing its lease: the lock is free after the TTL, not held for as long
    // as the process runs.
    let mut forgot = gate(&c, "node-forgot");
    forgot
        .before(&step("kube-scheduler.service"))
        .await
        .unwrap();
    drop(forgot);
    let mut e = gate(&patient, "node-e");
    let t0 = Instant::now();
    let had = e.before(&step("kube-scheduler.service")).await;
    let waited = t0.elapsed();
    eprintln!("a dropped holder's lock: {had:?} after {waited:?}");
    had.expect("a dropped holder's lock expires");
    assert!(waited < Duration::from_secs(5 + 20), "{waited:?}");
    e.finish().await;

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
    assert!(matches!(why, Hold::Unhealthy(_)), "{why:?}");
    let why = why.to_string();
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
    // node-b's key queued behind node-a's, shown, not hoped.
    let queued = || {
        etcdctl(
            sb,
            &pki,
            &vars,
            &["get", "--prefix", "--keys-only", "/certrenewd/test-lock/"],
        )
    };
    let since = Instant::now();
    while queued().lines().filter(|l| !l.trim().is_empty()).count() < 2 {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "node-b never queued: {}",
            queued()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
        sb,
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
    etcdctl(sb, &pki, &vars, &["role", "add", "certrenewd-lock"]);
    let grant: Vec<&str> = lock_role
        .iter()
        .copied()
        .chain(["/certrenewd/test-lock/", "--prefix=true"])
        .collect();
    etcdctl(sb, &pki, &vars, &grant);
    etcdctl(
        sb,
        &pki,
        &vars,
        &["user", "add", "root", "--new-user-password=rootpw"],
    );
    etcdctl(sb, &pki, &vars, &["user", "grant-role", "root", "root"]);
    etcdctl(
        sb,
        &pki,
        &vars,
        &["user", "add", &user, "--new-user-password=unused"],
    );
    etcdctl(sb, &pki, &vars, &["auth", "enable"]);
    let mut g = gate(&c, "etcd-1");
    let why = g.before(&step("etcd-1.service")).await.unwrap_err();
    assert!(matches!(why, Hold::Refused(_)), "{why:?}");
    let why = why.to_string();
    eprintln!("no grant: {why}");
    assert!(why.contains(&format!("as etcd user {user}")), "{why}");
    assert!(why.contains("permission denied"), "{why}");
    assert!(
        why.contains(
            "grant it read and write on the key prefixes /certrenewd/test-lock/, \
             /certrenewd/test-lock.ca-renewals/, /certrenewd/test-lock.nodes/ and \
             /certrenewd/test-lock.refused/"
        ),
        "{why}"
    );
    g.finish().await;
    let as_root = ["--user", "root:rootpw"];
    let grant_role: Vec<&str> = as_root
        .iter()
        .copied()
        .chain(["user", "grant-role", &user, "certrenewd-lock"])
        .collect();
    etcdctl(sb, &pki, &vars, &grant_role);
    let mut g = gate(&c, "etcd-1");
    g.before(&step("etcd-1.service"))
        .await
        .expect("the lock prefix is enough");
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("healthy");
    g.finish().await;
    let off: Vec<&str> = as_root.iter().copied().chain(["auth", "disable"]).collect();
    etcdctl(sb, &pki, &vars, &off);

    // Nobody answers at the configured endpoints, and etcd's member list was never
    // recorded: endpoints an operator set say where to ask, not that the cluster is down
    // (a load balancer that is down refuses too). Held.
    let down = conf(fixtures, "https://127.0.0.1:1,https://127.0.0.1:2".into());
    let g = gate(&down, "etcd-1");
    held_for_no_member_list(g, "kube-apiserver.service", "endpoints refusing").await;

    // The member list on record names two members, and every URL refuses: the cluster is
    // down. Restart without the lock, at once.
    let state = sb.dir().join("down-state");
    let member = |n: u16| certrenewd::coordinate::members::Member {
        id: u64::from(n),
        name: format!("etcd-{n}"),
        client_urls: vec![format!("https://127.0.0.1:{n}")],
        peer_urls: vec![format!("https://127.0.0.1:{}", n + 2)],
    };
    certrenewd::coordinate::roster::write(&state, &[member(1), member(2)], "https://127.0.0.1:1");
    let mut g = EtcdGate::new(&Coordination {
        member_name: Some("etcd-1".into()),
        ..down.clone()
    })
    .reading_in(&state);
    let t0 = Instant::now();
    g.before(&step("kube-apiserver.service"))
        .await
        .expect("no quorum to protect");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(g.lock_wait, None);
    g.finish().await;
}

/// The sandbox's 3-member cluster on `ports`, for a test of its own.
struct Cluster {
    sb: Sandbox,
    fixtures: std::path::PathBuf,
    vars: Vec<(String, String)>,
}

impl Cluster {
    fn start(ports: Ports) -> Option<Cluster> {
        Cluster::start_with(ports, None)
    }

    /// A cluster of its own on `ports`, its members' PKI `from`'s (or made anew): a second
    /// cluster of the same controllers (kubespray's etcd-events).
    fn start_with(ports: Ports, from: Option<&Cluster>) -> Option<Cluster> {
        let sb = Sandbox::start_or_skip()?;
        ports.assert_free();
        let fixtures = match from {
            Some(c) => c.fixtures.clone(),
            None => {
                let fixtures = sb.dir().join("pki");
                mkpki("starlingx", &fixtures);
                fixtures
            }
        };
        let client = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
        let vars = vec![
            ("SANDBOX_ETCD_PORT_BASE".into(), ports.base.to_string()),
            (
                "SANDBOX_ETCD_CLIENT_CERT".into(),
                format!("{}.crt", client.display()),
            ),
            (
                "SANDBOX_ETCD_CLIENT_KEY".into(),
                format!("{}.key", client.display()),
            ),
        ];
        let c = Cluster { sb, fixtures, vars };
        let vars: Vec<(&str, &str)> = c.vars().collect();
        c.sb.start_etcd(&c.fixtures.join("etc/etcd"), &vars)
            .expect("etcd cluster");
        Some(c)
    }

    /// A copy of the cluster's etcd directory at `to`: a node's own tree, for a pass.
    fn copy_etcd_dir(&self, to: &Path) {
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(self.fixtures.join("etc/etcd"))
            .arg(to)
            .status();
        assert!(copied.expect("cp").success());
    }

    fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn etcdctl(&self, args: &[&str]) -> String {
        let vars: Vec<(&str, &str)> = self.vars().collect();
        etcdctl(&self.sb, &self.fixtures.join("etc/etcd"), &vars, args)
    }

    /// The lease (hex, as etcdctl takes it) and key of each node in the lock's queue, the
    /// holder first (oldest create revision).
    fn queue(&self) -> Vec<(String, String)> {
        let out = self.etcdctl(&["get", "--prefix", "/certrenewd/test-lock/", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl's JSON");
        let mut kvs: Vec<&serde_json::Value> = v["kvs"].as_array().expect("kvs").iter().collect();
        kvs.sort_by_key(|kv| kv["create_revision"].as_i64());
        kvs.iter()
            .map(|kv| {
                let lease = kv["lease"].as_i64().expect("the key is on a lease");
                let key = base64_decode(kv["key"].as_str().expect("a key"));
                (format!("{lease:x}"), key)
            })
            .collect()
    }

    /// [`Self::queue`] once it holds `n` nodes: a waiter shown queued, not hoped to be.
    async fn queued(&self, n: usize) -> Vec<(String, String)> {
        let since = Instant::now();
        loop {
            let queue = self.queue();
            if queue.len() >= n || since.elapsed() > Duration::from_secs(10) {
                return queue;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn systemctl(&self, args: &[&str]) {
        self.sb.systemctl(args).expect("systemctl");
    }

    /// etcdctl against the one member at `url`, as the API server's etcd client, outside
    /// the sandbox (its own member answers at once, where one of several would be asked).
    fn etcdctl_at(&self, url: &str, args: &[&str]) -> std::process::Output {
        let pair = self
            .fixtures
            .join("etc/kubernetes/pki/apiserver-etcd-client");
        std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={url}"))
            .arg(format!(
                "--cacert={}",
                self.fixtures.join("etc/etcd/ca.crt").display()
            ))
            .arg(format!("--cert={}", pair.with_extension("crt").display()))
            .arg(format!("--key={}", pair.with_extension("key").display()))
            .args(args)
            .output()
            .unwrap()
    }

    /// A CA near its end and what it signs, made by `mkca-aging.sh` in the sandbox's `name`
    /// directory (its `pki/`).
    fn aging_cas(&self, name: &str) -> std::path::PathBuf {
        let dir = self.sb.dir().join(name);
        let made = std::process::Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/mkca-aging.sh"
            ))
            .arg(&dir)
            .status()
            .expect("mkca-aging.sh");
        assert!(made.success());
        dir
    }

    /// The member `name` removed from the cluster, its unit stopped, and the members left
    /// with a leader again (a write through `url` succeeds).
    async fn remove_member(&self, name: &str, url: &str) {
        let list = self.etcdctl(&["member", "list", "-w", "json"]);
        let list: serde_json::Value = serde_json::from_str(&list).unwrap();
        let id = (list["members"].as_array().unwrap().iter())
            .find(|m| m["name"] == name)
            .and_then(|m| m["ID"].as_u64())
            .unwrap_or_else(|| panic!("{list}"));
        self.change_members(&["member", "remove", &format!("{id:x}")])
            .await;
        self.systemctl(&["stop", &format!("{name}.service")]);
        let t0 = Instant::now();
        loop {
            let put = self.etcdctl_at(url, &["put", "/certrenewd-test/probe", "x"]);
            if put.status.success() {
                return;
            }
            let said = String::from_utf8_lossy(&put.stderr);
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "a write after {name}'s removal: {said}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A membership change by etcdctl (`member add`, `member remove`), asked again while
    /// etcd refuses it for an "unhealthy cluster" (it does until its peers have been
    /// connected for a few seconds) or its answer is lost: a removed leader steps down before
    /// it answers (the answer times out), and a removed member that etcdctl asked stops
    /// before it answers ("server stopped"); a removal asked again then finds the member gone.
    async fn change_members(&self, args: &[&str]) {
        let vars: Vec<(&str, &str)> = self.vars().collect();
        let pki = self.fixtures.join("etc/etcd");
        let t0 = Instant::now();
        let mut timed_out = false;
        loop {
            let mut etcdctl = self.sb.script("etcdctl");
            let out = etcdctl.arg(&pki).args(args).envs(vars.iter().copied());
            let out = out.output().unwrap();
            if out.status.success() {
                return;
            }
            let said = String::from_utf8_lossy(&out.stderr);
            if timed_out && args.get(1) == Some(&"remove") && said.contains("member not found") {
                return;
            }
            timed_out = said.contains("deadline exceeded") || said.contains("server stopped");
            assert!(
                said.contains("unhealthy cluster") || timed_out,
                "etcdctl {args:?}: {said}"
            );
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "etcdctl {args:?}: {said}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// A controller that agrees on its CAs' re-issues through the cluster, as configured.
struct Agreeing<'a> {
    member: &'a str,
    /// Comma-separated client URLs.
    endpoints: &'a str,
    /// The client pair's path without its `.crt`/`.key`.
    client: &'a Path,
    ca: &'a Path,
    lock_prefix: &'a str,
}

impl Agreeing<'_> {
    /// Its configuration, its state under `root`, watching `watches`.
    fn config(&self, root: &Path, watches: &[&Path]) -> String {
        let quoted: Vec<String> = (self.endpoints.split(','))
            .map(|e| format!("\"{e}\""))
            .collect();
        let mut text = format!(
            "state_dir = \"{}\"\n[coordination]\nenabled = true\nmember_name = \"{}\"\nendpoints = [{}]\ncert = \"{}.crt\"\nkey = \"{}.key\"\nca = \"{}\"\nlock_prefix = \"{}\"\ngate_timeout_secs = 10\n",
            root.join("state").display(),
            self.member,
            quoted.join(", "),
            self.client.display(),
            self.client.display(),
            self.ca.display(),
            self.lock_prefix,
        );
        for w in watches {
            text.push_str(&format!("[[watch]]\npath = \"{}\"\n", w.display()));
        }
        text
    }
}

fn base64_decode(s: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64");
    String::from_utf8(bytes).expect("UTF-8 key")
}

/// A member freezes (SIGSTOP) under the holder's keep-alive and a waiter's queue
/// for longer than the lease TTL. The holder keeps its lease through another member and
/// stays the only node that restarts: when the member comes back, the two do not both go
/// ahead with their etcd restarts.
#[tokio::test]
async fn a_frozen_member_does_not_let_two_nodes_restart_etcd_together() {
    let ports = Ports { base: 14500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = Coordination {
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(25),
        gate_timeout: Duration::from_secs(40),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]))
    };
    // etcd-2's node holds the lock; it talks to etcd-1 first (another node's member).
    let mut a = gate(&c, "etcd-2");
    a.before(&step("kube-scheduler.service"))
        .await
        .expect("etcd-2's node takes the lock");
    cl.systemctl(&["kill", "--signal=SIGSTOP", "etcd-1.service"]);
    let t0 = Instant::now();
    let b_conf = c.clone();
    let b = tokio::spawn(async move {
        let mut b = gate(&b_conf, "etcd-3");
        let r = b.before(&step("etcd-3.service")).await;
        let at = t0.elapsed();
        (b, r, at)
    });
    let a_etcd = tokio::spawn(async move {
        let r = a.before(&step("etcd-2.service")).await;
        let at = t0.elapsed();
        (a, r, at)
    });
    // Frozen for longer than the TTL: a lease kept only through etcd-1 would expire.
    tokio::time::sleep(Duration::from_secs(15)).await;
    cl.systemctl(&["kill", "--signal=SIGCONT", "etcd-1.service"]);
    let (mut a, a_r, a_at) = a_etcd.await.unwrap();
    let (mut b, b_r, b_at) = b.await.unwrap();
    eprintln!("etcd-2's node: {a_r:?} after {a_at:?}; etcd-3's node: {b_r:?} after {b_at:?}");
    assert!(
        a_r.is_err() || b_r.is_err(),
        "both nodes were let restart their etcd member: etcd-2's at {a_at:?}, etcd-3's at {b_at:?}"
    );
    // The holder kept its lease through etcd-3 and went on once etcd-1 was back.
    a_r.expect("the holder keeps the lock through another member");
    let refused = b_r.unwrap_err().to_string();
    assert!(refused.contains("held by etcd-2"), "{refused}");
    b.finish().await;
    a.finish().await;
}

/// Once a gate says it waits for the members' health before `unit` restarts (its live
/// line): a holder shown in that wait, not hoped to be. The line is the process's, shared by
/// the tests running beside this one, so it names the unit too.
async fn quorum_wait_said(unit: &str) {
    let since = Instant::now();
    let said = || {
        certrenewd::live::all().into_iter().any(|w| {
            w.starts_with("the etcd members (before ") && w.contains(&format!("{unit} restarts"))
        })
    };
    while !said() {
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "no gate said it waits before {unit} restarts: {:?}",
            certrenewd::live::all()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The lock fences. A holder whose lease is revoked while it waits in the quorum
/// gate restarts nothing once the wait is over; a holder whose key is gone (its lease still
/// alive) is refused right before its etcd restart; a waiter whose key is gone does not go
/// ahead on it when its turn comes, but queues again on a new lease.
#[tokio::test]
async fn a_holder_whose_lease_or_key_is_gone_restarts_nothing() {
    let ports = Ports { base: 15000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = Coordination {
        lease_ttl: Duration::from_secs(20),
        lock_timeout: Duration::from_secs(10),
        gate_timeout: Duration::from_secs(40),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]))
    };

    // The lease revoked while the holder waits for etcd-3 to be healthy.
    let mut a = gate(&c, "etcd-1");
    a.before(&step("kube-scheduler.service")).await.unwrap();
    cl.systemctl(&["stop", "etcd-3.service"]);
    let waiting = tokio::spawn(async move {
        let r = a.before(&step("etcd-1.service")).await;
        (a, r)
    });
    quorum_wait_said("etcd-1.service").await;
    let (lease, _) = cl.queue().remove(0);
    cl.etcdctl(&["lease", "revoke", &lease]);
    // The wait goes on a while with its lease gone, as a holder's would before it looks.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cl.systemctl(&["start", "etcd-3.service"]);
    let (mut a, r) = waiting.await.unwrap();
    eprintln!("lease revoked during the gate's wait: {r:?}");
    let why = r.expect_err("a holder whose lease is gone must not restart etcd");
    assert!(matches!(why, Hold::LockLost(_)), "{why:?}");
    let why = why.to_string();
    assert!(why.contains("lease") || why.contains("is gone"), "{why}");
    // Nothing after it either.
    assert!(a.before(&step("kube-apiserver.service")).await.is_err());
    a.finish().await;

    // The key deleted, the lease alive: refused right before the etcd restart.
    let mut a = gate(&c, "etcd-1");
    a.before(&step("kube-scheduler.service")).await.unwrap();
    let (_, key) = cl.queue().remove(0);
    cl.etcdctl(&["del", &key]);
    let why = a
        .before(&step("etcd-1.service"))
        .await
        .expect_err("a holder whose key is gone must not restart etcd");
    assert!(matches!(why, Hold::LockLost(_)), "{why:?}");
    let why = why.to_string();
    eprintln!("key deleted: {why}");
    assert!(why.contains(&format!("{key} is gone")), "{why}");
    a.finish().await;

    // A waiter's key deleted while it waits: when its turn comes it does not go ahead on
    // the key that is gone; it queues again on a new lease and takes the lock as its own.
    let mut a = gate(&c, "etcd-1");
    a.before(&step("kube-scheduler.service")).await.unwrap();
    let b_conf = c.clone();
    let waiter = tokio::spawn(async move {
        let mut b = gate(&b_conf, "etcd-2");
        let r = b.before(&step("etcd-2.service")).await;
        (b, r)
    });
    let queue = cl.queued(2).await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    let deleted = queue[1].1.clone();
    cl.etcdctl(&["del", &deleted]);
    a.finish().await;
    let (mut b, r) = waiter.await.unwrap();
    r.expect("the waiter queues again and takes the lock");
    let now = cl.queue();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0].1, deleted, "it went ahead on the key that is gone");
    assert_ne!(
        now[0].0, queue[1].0,
        "it went ahead on the lease of that key"
    );
    b.finish().await;

    // Nothing is left under the prefix, and the lock is free for the next node.
    let mut b = gate(&c, "etcd-2");
    b.before(&step("etcd-2.service")).await.expect("free again");
    b.finish().await;
}

/// A node's `/etc/default/etcd` (Debian's form) naming the sandbox cluster on `ports`, this
/// node being member `n`, its data directory at `/var/lib/etcd/etcd-N`; written under `root`.
fn debian_etcd_defaults(root: &Path, ports: Ports, n: u16) {
    let peers: Vec<String> = (1..=3)
        .map(|n| format!("etcd-{n}=https://127.0.0.1:{}", ports.peer(n)))
        .collect();
    let text = format!(
        "# Written as an operator would\nETCD_NAME=\"etcd-{n}\"\nETCD_INITIAL_CLUSTER=\"{}\"\nETCD_ADVERTISE_CLIENT_URLS=\"https://127.0.0.1:{}\"\nETCD_DATA_DIR=\"/var/lib/etcd/etcd-{n}\"\n",
        peers.join(","),
        ports.client(n)
    );
    std::fs::create_dir_all(root.join("etc/default")).unwrap();
    std::fs::write(root.join("etc/default/etcd"), text).unwrap();
}

/// `auto` with the default endpoints (`https://127.0.0.1:2379`, where nothing
/// listens) no longer takes "no answer" for "the cluster is down". It learns the members from
/// the node's own etcd settings and takes the lock; a client certificate the members reject,
/// members that accept connections but do not answer, or no identity on a node that runs
/// etcd hold the restarts with the reason; only a cluster whose every member refuses
/// connections is restarted without the lock.
#[tokio::test]
async fn auto_holds_restarts_unless_every_member_refuses_connections() {
    let ports = Ports { base: 13500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let root = cl.fixtures.clone();
    debian_etcd_defaults(&root, ports, 1);
    let client = root.join("etc/kubernetes/pki/apiserver-etcd-client");
    let auto = Coordination {
        enabled: Enabled::Auto,
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(10),
        gate_timeout: Duration::from_secs(10),
        cert: Some(client.with_extension("crt")),
        key: Some(client.with_extension("key")),
        ca: Some(root.join("etc/etcd/ca.crt")),
        ..Coordination::default()
    };
    assert_eq!(auto.endpoints, ["https://127.0.0.1:2379"]);

    // The members learnt from /etc/default/etcd: the lock is taken, as etcd-1 (ETCD_NAME);
    // the member list is recorded, as every pass does.
    let state = cl.sb.dir().join("state");
    let mut g = EtcdGate::under(&auto, &root).recording_in(&state);
    g.before(&step("etcd-1.service"))
        .await
        .expect("every member healthy");
    assert!(g.lock_wait.is_some(), "restarted without the lock");
    g.finish().await;

    // A client certificate the members reject (expired): held, with the reason.
    let rejected = Coordination {
        cert: Some(root.join("etc/etcd/etcd-client.crt")),
        key: Some(root.join("etc/etcd/etcd-client.key")),
        ..auto.clone()
    };
    let mut g = EtcdGate::under(&rejected, &root);
    let why = g
        .before(&step("etcd-1.service"))
        .await
        .expect_err("a rejected client must hold the restarts");
    let why = why.to_string();
    eprintln!("rejected client: {why}");
    assert!(why.contains("accept connections"), "{why}");
    // What the members said, in TLS terms, naming the certificate they refuse.
    assert!(
        why.contains("etc/etcd/etcd-client.crt in the TLS handshake: received fatal alert"),
        "{why}"
    );
    assert!(why.contains("restarts are held"), "{why}");
    g.finish().await;

    // No identity on a node whose etcd settings say it runs a member: held.
    let bare = cl.sb.dir().join("bare-node");
    debian_etcd_defaults(&bare, ports, 1);
    let none = Coordination {
        cert: None,
        key: None,
        ca: None,
        ..auto.clone()
    };
    let mut g = EtcdGate::under(&none, &bare);
    let why = g.before(&step("etcd-1.service")).await.unwrap_err();
    assert!(matches!(why, Hold::Refused(_)), "{why:?}");
    let why = why.to_string();
    eprintln!("no identity: {why}");
    assert!(why.contains("/etc/default/etcd"), "{why}");
    assert!(why.contains("set [coordination] cert, key and ca"), "{why}");
    g.finish().await;

    // Every member frozen: they accept connections but answer nothing. Held.
    for n in 1..=3 {
        cl.systemctl(&["kill", "--signal=SIGSTOP", &format!("etcd-{n}.service")]);
    }
    let mut g = EtcdGate::under(&auto, &root);
    let why = g.before(&step("etcd-1.service")).await;
    for n in 1..=3 {
        cl.systemctl(&["kill", "--signal=SIGCONT", &format!("etcd-{n}.service")]);
    }
    let why = why.expect_err("members that do not answer must hold the restarts");
    let why = why.to_string();
    eprintln!("frozen cluster: {why}");
    assert!(why.contains("restarts are held"), "{why}");
    g.finish().await;

    // Every member stopped: each refuses connections.
    for n in 1..=3 {
        cl.systemctl(&["stop", &format!("etcd-{n}.service")]);
    }
    // etcd's member list never recorded on this node: what its settings name is what it
    // knew at bootstrap, not the cluster. Held.
    let g = EtcdGate::under(&auto, &root);
    held_for_no_member_list(g, "kube-apiserver.service", "every URL refusing").await;
    // Its own member owed a restart and down: that start goes ahead alone, and nothing
    // after it before the others are joined (here never: held at gate_timeout_secs).
    let brief = Coordination {
        gate_timeout: Duration::from_secs(3),
        ..auto.clone()
    };
    let mut g = EtcdGate::under(&brief, &root);
    g.before(&step("etcd-1.service"))
        .await
        .expect("this node's own member is down: starting it takes nothing down");
    assert_eq!(g.lock_wait, None);
    // Said started (it is not here: the others stay down).
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("nothing to check without the lock");
    let why = g
        .before(&step("kube-apiserver.service"))
        .await
        .expect_err("nothing but the member's own start goes ahead without the others");
    let why = why.to_string();
    eprintln!("after the own start, the others not joined: {why}");
    assert!(
        why.contains("could not be joined within gate_timeout_secs (3s)"),
        "{why}"
    );
    g.finish().await;
    // etcd's member list on record (every pass and the daemon's watch keep it): the
    // cluster is down, there is no quorum to protect. Restarted without the lock, at once.
    let mut g = EtcdGate::under(&auto, &root).reading_in(&state);
    let t0 = Instant::now();
    g.before(&step("kube-apiserver.service"))
        .await
        .expect("a cluster that is down has no quorum to protect");
    assert_eq!(g.lock_wait, None);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    g.finish().await;
}

/// Where kubeadm's etcd manifest sits under `root`, as kubeadm writes it for member `n` of
/// the sandbox cluster on `ports` (flags sorted, one per line). `initial` is
/// `--initial-cluster`'s value: kubeadm's first control plane names itself alone there, and
/// after `kubeadm upgrade` every node does, whatever the cluster has become.
fn kubeadm_etcd_manifest(root: &Path, ports: Ports, n: u16, initial: &str) {
    let (client, peer) = (ports.client(n), ports.peer(n));
    let pki = root.join("etc/etcd").display().to_string();
    let flags = [
        format!("--advertise-client-urls=https://127.0.0.1:{client}"),
        format!("--cert-file={pki}/etcd-server.crt"),
        "--client-cert-auth=true".into(),
        "--data-dir=/var/lib/etcd".into(),
        format!("--initial-advertise-peer-urls=https://127.0.0.1:{peer}"),
        format!("--initial-cluster={initial}"),
        format!("--key-file={pki}/etcd-server.key"),
        format!("--listen-client-urls=https://127.0.0.1:{client}"),
        format!("--listen-peer-urls=https://127.0.0.1:{peer}"),
        format!("--name=etcd-{n}"),
        "--snapshot-count=10000".into(),
        format!("--trusted-ca-file={pki}/ca.crt"),
    ];
    let command: String = flags.iter().map(|f| format!("    - {f}\n")).collect();
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://127.0.0.1:{client}\n  \
         labels:\n    component: etcd\n    tier: control-plane\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - etcd\n{command}    \
         image: registry.k8s.io/etcd:3.5.15-0\n    name: etcd\n  hostNetwork: true\n"
    );
    let dir = root.join("etc/kubernetes/manifests");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("etcd.yaml"), text).unwrap();
}

/// `check`'s outlook, asked as `certrenewd check` asks it (on a thread of its own: it runs
/// its own runtime).
async fn outlook(
    c: &Coordination,
    root: &Path,
    state: &Path,
    node: &NodeReading,
) -> certrenewd::coordinate::Outlook {
    let (c, root, state, node) = (
        c.clone(),
        root.to_path_buf(),
        state.to_path_buf(),
        node.clone(),
    );
    tokio::task::spawn_blocking(move || certrenewd::coordinate::outlook(&c, &root, &state, &node))
        .await
        .unwrap()
}

/// kubeadm's own etcd manifest on its first control plane, and on every node after an
/// upgrade, names the node alone in `--initial-cluster`, although the cluster has three
/// members. Under `auto` only the cluster's member list decides: the gate takes the lock, a
/// CA is agreed through etcd, and `check` says "coordinated", member of 3, from what the
/// cluster said. The member list is kept in the state directory; `check` writes nothing.
#[tokio::test]
async fn kubeadms_manifest_naming_the_node_alone_is_not_a_cluster_of_one() {
    let ports = Ports { base: 9500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let root = cl.fixtures.clone();
    let alone = format!("etcd-1=https://127.0.0.1:{}", ports.peer(1));
    kubeadm_etcd_manifest(&root, ports, 1, &alone);
    // The node's reading finds etcd's static pod by what it runs, as every command reads it.
    let node = NodeReading::read(&root.join("etc/kubernetes/manifests"));
    let auto = Coordination {
        enabled: Enabled::Auto,
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(10),
        gate_timeout: Duration::from_secs(10),
        ..conf(&root, Coordination::default().endpoints.join(","))
    };
    let state = cl.sb.dir().join("state");
    let o = outlook(&auto, &root, &state, &node).await;
    eprintln!("check: restarts {}: {}", o.restarts, o.why);
    assert_eq!(o.restarts, "coordinated", "{}", o.why);
    assert!(o.why.starts_with("etcd member etcd-1 of 3 ("), "{}", o.why);
    assert!(o.why.contains("the cluster's member list"), "{}", o.why);
    assert!(!state.join("etcd-members.json").exists(), "check wrote");

    let mut g = EtcdGate::under(&auto, &root)
        .recording_in(&state)
        .knowing(&node);
    g.before(&step("etcd-1.service"))
        .await
        .expect("every member healthy");
    assert!(
        g.lock_wait.is_some(),
        "etcd restarted without the lock on a node whose manifest names it alone"
    );
    g.finish().await;
    let listed = certrenewd::coordinate::roster::read(&state).expect("the member list kept");
    let mut names: Vec<&str> = listed.members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["etcd-1", "etcd-2", "etcd-3"]);

    // The CA agreement asks the cluster too: a re-issue is published, not kept alone.
    let pem = std::fs::read(root.join("etc/etcd/ca.crt")).unwrap();
    let der = certrenewd::format::pem::blocks(&pem)
        .into_iter()
        .next()
        .expect("a PEM block")
        .expect("readable")
        .der;
    let ca = certrenewd::format::cert::CertFacts::parse(der).expect("a certificate");
    let mut g = EtcdGate::under(&auto, &root).knowing(&node);
    let agreed = g
        .agree_on_ca(
            &ca,
            b"not a certificate: only the agreement is shown".to_vec(),
        )
        .await
        .expect("agreed");
    eprintln!("CA: {}", agreed.how);
    assert!(
        agreed.how.contains("published for the cluster"),
        "{}",
        agreed.how
    );
}

/// An external etcd is named on a controller only in the API server's `--etcd-servers`
/// (kubeadm writes `etcd.external.endpoints` there): nothing of it on loopback, no etcd
/// settings on the node. The gate finds the cluster there, `[coordination]` left at its
/// defaults but for the client pair, and takes the lock.
#[tokio::test]
async fn an_external_etcd_is_found_at_the_api_servers_etcd_servers() {
    let ports = Ports { base: 18000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    // A controller's files: kubeadm's API server manifest, its etcd servers the cluster's.
    let node_root = cl.sb.dir().join("external-node");
    let manifests = node_root.join("etc/kubernetes/manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let kubeadms = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kubeadm-manifests/kube-apiserver.yaml"
    );
    let servers = ports.endpoints(&[1, 2, 3]);
    let text = std::fs::read_to_string(kubeadms)
        .unwrap()
        .replace("{{IP}}", "127.0.0.1")
        .replace("{{ROOT}}", node_root.to_str().unwrap())
        .replace(
            "--etcd-servers=https://127.0.0.1:2379",
            &format!("--etcd-servers={servers}"),
        );
    assert!(text.contains(&servers), "{text}");
    std::fs::write(manifests.join("kube-apiserver.yaml"), text).unwrap();
    let node = NodeReading::read(&manifests);
    let auto = Coordination {
        enabled: Enabled::Auto,
        member_name: Some("cp-1".into()),
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(10),
        gate_timeout: Duration::from_secs(10),
        ..conf(&cl.fixtures, Coordination::default().endpoints.join(","))
    };
    assert!(
        std::net::TcpStream::connect("127.0.0.1:2379").is_err(),
        "something listens at 127.0.0.1:2379 on this machine"
    );
    let mut g = EtcdGate::under(&auto, &node_root).knowing(&node);
    let r = g.before(&step("kube-apiserver.service")).await;
    eprintln!(
        "external etcd at {servers}: {r:?}, waited for the lock {:?}",
        g.lock_wait
    );
    r.expect("the external cluster found and the lock taken");
    assert!(
        g.lock_wait.is_some(),
        "restarted without the lock: the external etcd was not found"
    );
    g.finish().await;
}

/// The gate asks each member its health at the URLs it advertises, and only the member
/// itself may answer for it: through a URL that reaches another member (a VIP, a name
/// several share, loopback), a member that is down must not look healthy.
#[tokio::test]
async fn a_member_is_healthy_only_by_its_own_answer() {
    let ports = Ports { base: 10000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]));
    let tls = certrenewd::coordinate::identity::find(&c, Path::new("/"), &[])
        .expect("the identity")
        .tls()
        .expect("readable");
    let mut client = members::connect(&c.endpoints, tls.clone()).await.unwrap();
    let all = members::list(&mut client).await.unwrap();
    let two = all
        .iter()
        .find(|m| m.name == "etcd-2")
        .expect("etcd-2")
        .clone();
    let one = all.iter().find(|m| m.name == "etcd-1").expect("etcd-1");
    members::status(&two, tls.clone())
        .await
        .expect("etcd-2 answers as itself");
    // etcd-2 stopped, its URL in front of etcd-1's: what answers is etcd-1.
    cl.systemctl(&["stop", "etcd-2.service"]);
    // As a VIP or a name several members share would: etcd-2 advertised at a URL that
    // reaches etcd-1.
    let shared = Member {
        client_urls: one.client_urls.clone(),
        ..two.clone()
    };
    let why = members::status(&shared, tls)
        .await
        .expect_err("etcd-2 is down; etcd-1's answer is not its");
    eprintln!("etcd-2 through a shared URL: {why}");
    assert!(
        matches!(why, members::Unanswered::NotItself { .. }),
        "{why}"
    );
    assert!(
        why.to_string().starts_with("does not answer itself: "),
        "{why}"
    );
}

/// A node whose own member is down (crashed on an expired certificate, its start limit hit)
/// while the others are healthy: its endpoints refuse, so it finds the cluster through the
/// members last listed, takes the lock, and restarts its member at once, since starting
/// what is down takes nothing down. A holder that waits for such a member's health, while
/// that member's node waits for the lock, gives the lock up for it and queues again.
#[tokio::test]
async fn a_member_that_is_down_is_started_and_never_waits_behind_a_holder_that_waits_for_it() {
    let ports = Ports { base: 10500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let root = cl.fixtures.clone();
    debian_etcd_defaults(&root, ports, 1);
    let auto = Coordination {
        enabled: Enabled::Auto,
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(30),
        gate_timeout: Duration::from_secs(30),
        ..conf(&root, Coordination::default().endpoints.join(","))
    };
    let state = cl.sb.dir().join("state");
    // An earlier pass listed the members.
    let mut g = EtcdGate::under(&auto, &root).recording_in(&state);
    g.before(&step("kube-scheduler.service")).await.unwrap();
    g.finish().await;

    // etcd-1, this node's member, down: taken through the others, restarted at once.
    cl.systemctl(&["stop", "etcd-1.service"]);
    let mut g = EtcdGate::under(&auto, &root).recording_in(&state);
    let t0 = Instant::now();
    g.before(&step("etcd-1.service"))
        .await
        .expect("this node's member is down and the others are healthy");
    assert!(g.lock_wait.is_some(), "restarted without the lock");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    if let Err(e) = cl.sb.systemctl(["start", "etcd-1.service"]) {
        panic!("{e:#}\n{}", common::etcd_e2e::journal_tail(&cl.sb, 60));
    }
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("healthy again");
    g.finish().await;

    // etcd-3 down; etcd-2's node holds the lock and waits for etcd-3 before restarting its
    // own member, while etcd-3's node waits for the lock to restart etcd-3.
    cl.systemctl(&["stop", "etcd-3.service"]);
    let holder = Coordination {
        member_name: Some("etcd-2".into()),
        endpoints: ports
            .endpoints(&[1, 2, 3])
            .split(',')
            .map(str::to_string)
            .collect(),
        ..auto.clone()
    };
    let mut a = EtcdGate::under(&holder, &cl.sb.dir().join("node-2"));
    a.before(&step("kube-scheduler.service")).await.unwrap();
    let t0 = Instant::now();
    let a_turn = tokio::spawn(async move {
        let r = a.before(&step("etcd-2.service")).await;
        (a, r, t0.elapsed())
    });
    quorum_wait_said("etcd-2.service").await;
    let waiter = Coordination {
        member_name: Some("etcd-3".into()),
        ..holder.clone()
    };
    let mut b = EtcdGate::under(&waiter, &cl.sb.dir().join("node-3"));
    b.before(&step("etcd-3.service"))
        .await
        .expect("etcd-3's node gets the lock while the holder waits for etcd-3");
    let b_at = t0.elapsed();
    cl.systemctl(&["start", "etcd-3.service"]);
    b.after(&step("etcd-3.service"), true)
        .await
        .expect("etcd-3 healthy");
    b.finish().await;
    let (mut a, r, a_at) = a_turn.await.unwrap();
    eprintln!(
        "etcd-3's node had the lock after {b_at:?}; etcd-2's node went on after {a_at:?}: {r:?}"
    );
    r.expect("the holder goes on once etcd-3 is back");
    assert!(
        b_at < Duration::from_secs(20),
        "etcd-3 waited {b_at:?} behind a holder waiting for it"
    );
    a.finish().await;

    // After an outage: this node's member down, the others up but without a quorum to
    // answer with (frozen here: they accept connections and say nothing). Holding would
    // wait for a quorum that needs this member: it is started, without the lock.
    cl.systemctl(&["stop", "etcd-1.service"]);
    for n in [2, 3] {
        cl.systemctl(&["kill", "--signal=SIGSTOP", &format!("etcd-{n}.service")]);
    }
    let mut g = EtcdGate::under(&auto, &root).recording_in(&state);
    let r = g.before(&step("etcd-1.service")).await;
    for n in [2, 3] {
        cl.systemctl(&["kill", "--signal=SIGCONT", &format!("etcd-{n}.service")]);
    }
    eprintln!("own member down, no quorum answering: {r:?}");
    r.expect("this node's member is down: starting it takes nothing down");
    assert_eq!(g.lock_wait, None);
    // Only that start: what follows joins the others first, and takes the lock.
    cl.systemctl(&["start", "etcd-1.service"]);
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("nothing to check without the lock");
    let r = g.before(&step("kube-apiserver.service")).await;
    eprintln!("after the start without the lock: {r:?}");
    r.expect("the others joined once this node's member is back");
    assert!(
        g.lock_wait.is_some(),
        "the rest of the pass went on without the lock"
    );
    g.finish().await;
}

/// A majority down with one member up: after an outage two members failed at their start
/// limit, and the one up has no leader, so it grants no lease and no lock can be had. The
/// pass of a node whose member that is does not wait for the lock past `gate_timeout_secs`;
/// a node whose member failed starts it without the lock once a member that answers lists it
/// as a voter of the cluster its write-ahead log is of (not when the log is of another
/// cluster, as after a snapshot restored there), and then joins the others. Both are back
/// within seconds. A start without the lock starts only a unit that failed: one merely
/// inactive (kept down) stays so.
#[tokio::test]
async fn a_majority_down_with_one_member_up_starts_the_failed_members() {
    let ports = Ports { base: 18500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let state = cl.sb.dir().join("state");
    let node = |n: u16, gate_timeout: u64| {
        let root = cl.sb.dir().join(format!("node-{n}"));
        debian_etcd_defaults(&root, ports, n);
        let data = root.join("var/lib/etcd");
        std::fs::create_dir_all(&data).unwrap();
        let link = data.join(format!("etcd-{n}"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(cl.sb.dir().join(format!("etcd/etcd-{n}")), &link).unwrap();
        let c = Coordination {
            enabled: Enabled::Auto,
            member_name: Some(format!("etcd-{n}")),
            lease_ttl: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(120),
            gate_timeout: Duration::from_secs(gate_timeout),
            ..conf(&cl.fixtures, Coordination::default().endpoints.join(","))
        };
        (EtcdGate::under(&c, &root).recording_in(&state), root)
    };
    // The write-ahead log says what the member says of itself.
    let status = cl.etcdctl(&["endpoint", "status", "-w", "json"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let of = |n: u16| {
        let at = format!("127.0.0.1:{}", ports.client(n));
        let s = (status.as_array().unwrap().iter())
            .find(|s| s["Endpoint"].as_str().unwrap().ends_with(&at))
            .unwrap();
        let h = &s["Status"]["header"];
        (
            h["member_id"].as_u64().unwrap(),
            h["cluster_id"].as_u64().unwrap(),
        )
    };
    let logged = wal::logged(&cl.sb.dir().join("etcd/etcd-2")).unwrap();
    assert_eq!((logged.member_id, logged.cluster_id), of(2), "{status}");
    // An earlier pass listed the members.
    let (mut g, _) = node(1, 5);
    g.before(&step("kube-scheduler.service")).await.unwrap();
    g.finish().await;
    // A snapshot restored as a new cluster, never started: its log is of another cluster.
    let restored = cl.sb.dir().join("restored");
    let snap = cl.sb.dir().join("snap.db");
    let etcdctl = |args: &[&str]| {
        let out = cl.etcdctl_at(&format!("https://127.0.0.1:{}", ports.client(3)), args);
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
    };
    etcdctl(&["snapshot", "save", snap.to_str().unwrap()]);
    let peer = format!("etcd-3=https://127.0.0.1:{}", ports.peer(3));
    etcdctl(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--name=etcd-3",
        &format!("--initial-cluster={peer}"),
        "--initial-cluster-token=restored",
        &format!(
            "--initial-advertise-peer-urls=https://127.0.0.1:{}",
            ports.peer(3)
        ),
        &format!("--data-dir={}", restored.display()),
    ]);

    // etcd-2 and etcd-3 fail to start until systemd refuses to try again: failed, their
    // start limit hit (as a crash loop leaves them under Restart=).
    let user = cl.sb.dir().join("config/systemd/user");
    for n in [2, 3] {
        let d = user.join(format!("etcd-{n}.service.d"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("crash.conf"),
            "[Unit]\nStartLimitIntervalSec=60\nStartLimitBurst=2\n[Service]\nExecStartPre=/bin/false\nRestart=on-failure\nRestartSec=100ms\n",
        )
        .unwrap();
    }
    cl.systemctl(&["daemon-reload"]);
    let _ = cl
        .sb
        .systemctl(["restart", "etcd-2.service", "etcd-3.service"]);
    // systemd 252 keeps the result of the last failed start (exit-code) and says the limit
    // in its journal.
    let limit_hit = |n: u16| {
        let said = format!("etcd-{n}.service: Start request repeated too quickly");
        common::etcd_e2e::journal_tail(&cl.sb, 400).contains(&said)
    };
    let failed = |n: u16| {
        let show = ["show", "-p", "ActiveState", &format!("etcd-{n}.service")];
        cl.sb.systemctl(show).unwrap_or_default()
    };
    let t0 = Instant::now();
    while [2, 3].iter().any(|n| !limit_hit(*n)) {
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(60), "{took:?}: {}", failed(2));
        std::thread::sleep(Duration::from_millis(200));
    }
    for n in [2, 3] {
        std::fs::remove_dir_all(user.join(format!("etcd-{n}.service.d"))).unwrap();
        assert!(failed(n).contains("ActiveState=failed"), "{}", failed(n));
    }
    cl.systemctl(&["daemon-reload"]);

    // etcd-1's node: its member is up, without a leader; no lease, held at gate_timeout.
    let (mut g, _) = node(1, 4);
    let t0 = Instant::now();
    let why = g
        .before(&step("etcd-1.service"))
        .await
        .unwrap_err()
        .to_string();
    eprintln!("etcd-1's node, after {:?}: {why}", t0.elapsed());
    assert!(why.contains("granted no lease"), "{why}");
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    g.finish().await;
    // `check` says so before any pass.
    let seen = node(1, 4).0.outlook().await;
    eprintln!("check on etcd-1's node: {seen:?}");
    assert_eq!(seen.restarts, "held", "{seen:?}");
    assert!(seen.why.contains("etcd has no leader"), "{seen:?}");

    // etcd-3's log of the restored cluster: not started.
    let (mut g, root) = node(3, 10);
    let link = root.join("var/lib/etcd/etcd-3");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&restored, &link).unwrap();
    let why = g
        .before(&step("etcd-3.service"))
        .await
        .unwrap_err()
        .to_string();
    eprintln!("a member of another cluster: {why}");
    assert!(
        why.contains("etcd has no leader") && why.contains("is of cluster"),
        "{why}"
    );
    g.finish().await;

    // Both nodes at once, as their daemons would: each starts its own member.
    let sd = Systemd::connect_address(&cl.sb.bus_address())
        .await
        .unwrap();
    let t0 = Instant::now();
    let pass = async |n: u16| {
        let (mut g, _) = node(n, 10);
        let unit = format!("etcd-{n}.service");
        g.before(&step(&unit)).await.map_err(|e| e.to_string())?;
        let mode = match g.start_only() {
            true => RestartMode::StartFailed,
            false => RestartMode::Restart,
        };
        let r = sd.restart(&unit, mode, Duration::from_secs(30)).await;
        let started = (g.start_only(), r.clone());
        g.after(&step(&unit), r.ok)
            .await
            .map_err(|e| e.to_string())?;
        // The rest of the pass joins the others, under the lock.
        g.before(&step("kube-apiserver.service"))
            .await
            .map_err(|e| e.to_string())?;
        let locked = g.lock_wait.is_some();
        g.finish().await;
        Ok::<_, String>((started, locked, t0.elapsed()))
    };
    let (two, three) = tokio::join!(pass(2), pass(3));
    let mut unlocked = 0;
    for (n, r) in [(2, two), (3, three)] {
        eprintln!("etcd-{n}'s node: {r:?}");
        let ((only_start, restart), locked, took) = r.unwrap();
        unlocked += usize::from(only_start);
        assert!(restart.ok, "etcd-{n}: {restart:#?}");
        assert!(locked, "etcd-{n}'s node went on without the lock");
        assert!(
            took < Duration::from_secs(30),
            "etcd-{n} back after {took:?}"
        );
    }
    // The first to start needed no lock; the other may find the quorum back by then.
    assert!(unlocked >= 1, "no member was started without the lock");
    // etcdctl 3.4 says each member's health on stderr.
    let vars: Vec<(&str, &str)> = cl.vars().collect();
    let args = ["endpoint", "health", "--cluster"];
    let (_, health) = cl.sb.etcdctl(&cl.fixtures.join("etc/etcd"), &vars, &args);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");

    // A start without the lock starts only a unit that failed.
    cl.systemctl(&["stop", "etcd-3.service"]);
    let r = sd
        .restart(
            "etcd-3.service",
            RestartMode::StartFailed,
            Duration::from_secs(10),
        )
        .await;
    eprintln!("inactive: {}", r.detail);
    assert!(r.not_restarted && !r.ok, "{r:#?}");
    assert!(
        r.detail.contains("is inactive (dead), not failed"),
        "{}",
        r.detail
    );
    let show = ["show", "-p", "ActiveState", "etcd-3.service"];
    assert_eq!(
        cl.sb.systemctl(show).unwrap().trim(),
        "ActiveState=inactive"
    );
}

/// A cluster of two voting members loses its quorum whichever member restarts: etcd's
/// restart is held, saying why, unless `two_member_restarts` says otherwise. Then the
/// holder restarts its member while etcd serves nothing; its lease, unconfirmed for longer
/// than the margin meanwhile, is not counted lost, and its key is read back, intact, before
/// the next step. (Five members with one dead restart as usual: the rule's unit test.)
#[tokio::test]
async fn a_cluster_of_two_restarts_etcd_only_when_configured_and_keeps_its_fence() {
    let ports = Ports { base: 19000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    cl.remove_member("etcd-3", &ports.endpoints(&[1])).await;
    let held = Coordination {
        lease_ttl: Duration::from_secs(5),
        lock_timeout: Duration::from_secs(30),
        // A removal may cost an election: a lease is granted after it.
        gate_timeout: Duration::from_secs(20),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2]))
    };
    let mut g = gate(&held, "etcd-1");
    let why = g.before(&step("etcd-1.service")).await.unwrap_err();
    eprintln!("two members: {why}");
    assert!(matches!(why, Hold::Unhealthy(_)), "{why:?}");
    assert!(why.to_string().contains("two voting members"), "{why}");
    g.finish().await;

    let allowed = Coordination {
        two_member_restarts: true,
        ..held
    };
    let mut g = gate(&allowed, "etcd-1");
    g.before(&step("etcd-1.service"))
        .await
        .expect("two members, configured to restart");
    // A restart slower than the lease's margin (half its 5 s TTL).
    let t0 = Instant::now();
    cl.systemctl(&["stop", "etcd-1.service"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let sd = Systemd::connect_address(&cl.sb.bus_address())
        .await
        .unwrap();
    let r = sd
        .restart(
            "etcd-1.service",
            RestartMode::Restart,
            Duration::from_secs(60),
        )
        .await;
    assert!(r.ok, "{r:#?}");
    eprintln!("etcd-1 down and back in {:?}", t0.elapsed());
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("the lock's key read back, intact");
    g.before(&step("kube-apiserver.service"))
        .await
        .expect("still the holder");
    g.finish().await;
    let left = cl.etcdctl(&["get", "--prefix", "--keys-only", "/certrenewd/test-lock/"]);
    assert_eq!(left.trim(), "", "the lock released");
}

/// The restart lock's lease is kept alive on a thread of its own: a pass whose runtime's one
/// thread blocks while it holds the lock (an fsync on a loaded disk) for longer than half the
/// lease's TTL still holds it when it goes on.
#[tokio::test]
async fn a_runtime_blocked_past_the_margin_keeps_the_restart_lock() {
    let ports = Ports { base: 19500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = Coordination {
        lease_ttl: Duration::from_secs(5),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]))
    };
    let mut g = gate(&c, "etcd-1");
    g.before(&step("kube-scheduler.service"))
        .await
        .expect("the lock");
    std::thread::sleep(Duration::from_secs(4));
    g.before(&step("kube-apiserver.service"))
        .await
        .expect("still the holder after 4 s blocked (the margin is 2.5 s)");
    g.finish().await;
}

/// A learner answers Status but serves clients no member list (etcd 3.4 refuses with
/// Unavailable, "rpc not supported for learner", which reads as "asked too early"): a node
/// whose own member is a learner reads the member list at a voter, at once, instead of
/// asking its learner until `gate_timeout_secs`.
#[tokio::test]
async fn a_learners_node_reads_the_member_list_at_a_voter() {
    let ports = Ports { base: 21000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let (client, peer) = (ports.client(4), ports.peer(4));
    let peer_url = format!("https://127.0.0.1:{peer}");
    let peers = format!("--peer-urls={peer_url}");
    cl.change_members(&["member", "add", "etcd-4", "--learner", &peers])
        .await;
    let etc = cl.fixtures.join("etc/etcd");
    let f = |name: &str| etc.join(name).display().to_string();
    let initial: Vec<String> = (1..=4)
        .map(|n| format!("etcd-{n}=https://127.0.0.1:{}", ports.peer(n)))
        .collect();
    let client_url = format!("https://127.0.0.1:{client}");
    let flags: Vec<String> = [
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={}", initial.join(",")),
        "--initial-cluster-state=existing".into(),
        "--initial-cluster-token=certrenewd-sandbox".into(),
        "--client-cert-auth".into(),
        format!("--trusted-ca-file={}", f("ca.crt")),
        format!("--cert-file={}", f("etcd-server.crt")),
        format!("--key-file={}", f("etcd-server.key")),
        "--peer-client-cert-auth".into(),
        format!("--peer-trusted-ca-file={}", f("ca.crt")),
        format!("--peer-cert-file={}", f("etcd-server.crt")),
        format!("--peer-key-file={}", f("etcd-server.key")),
    ]
    .into();
    let status = || cl.etcdctl_at(&client_url, &["endpoint", "status"]);
    let _learner = common::etcd_one::Etcd::start("etcd-4", &flags, status);
    let c = Coordination {
        gate_timeout: Duration::from_secs(30),
        ..conf(
            &cl.fixtures,
            format!("{client_url},{}", ports.endpoints(&[1, 2, 3])),
        )
    };
    let mut g = gate(&c, "etcd-4");
    let t0 = Instant::now();
    let r = g.before(&step("kube-scheduler.service")).await;
    eprintln!("a learner's node, after {:?}: {r:?}", t0.elapsed());
    r.expect("the member list at a voter, and the lock");
    assert!(g.lock_wait.is_some(), "not coordinated");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    g.finish().await;
}

/// A pass that owes etcd a restart proves a member runs here, whatever was found of its
/// settings: with none found, no members ever listed and every URL it knows refusing, it
/// cannot tell a cluster that is down from one it cannot see, so it holds the restarts. So
/// does a node with an etcd client identity and no member list on record.
#[tokio::test]
async fn an_owed_etcd_restart_is_never_taken_for_no_member_here() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("node");
    let fixtures = dir.path().join("pki");
    mkpki("starlingx", &fixtures);
    // The default endpoint (loopback's 2379, where nothing listens here): nothing an
    // operator said of the cluster either.
    let auto = Coordination {
        enabled: Enabled::Auto,
        ..conf(&fixtures, Coordination::default().endpoints.join(","))
    };
    assert!(
        std::net::TcpStream::connect("127.0.0.1:2379").is_err(),
        "something listens at 127.0.0.1:2379 on this machine"
    );
    let mut g = EtcdGate::under(&auto, &root);
    let why = g
        .before(&step("etcd.service"))
        .await
        .expect_err("held: the other members may be up out of sight");
    let why = why.to_string();
    eprintln!("owed etcd restart, nothing known: {why}");
    assert!(why.contains("owes a restart of etcd.service"), "{why}");
    assert!(why.contains("/etc/default/etcd"), "{why}");
    g.finish().await;
    // A pass that owes nothing of etcd on such a node, an etcd client identity at hand:
    // that is how an external etcd looks from a controller (nothing of it on loopback), and
    // such controllers must not all restart their API servers at once. Held until etcd's
    // member list is had.
    let g = EtcdGate::under(&auto, &root);
    held_for_no_member_list(g, "kube-scheduler.service", "nothing owed of etcd").await;
}

/// Three controllers holding the same CAs (made by openssl under faketime,
/// inside their one-year window) and the same keys run `certrenewd renew` at the same moment
/// against the real 3-member cluster: each CA is re-issued once for the cluster (one key in
/// etcd per CA, published in a transaction), and every controller ends with identical CA
/// files. A controller that cannot reach etcd re-issues nothing and fails, saying why.
#[test]
fn a_ca_is_reissued_once_for_the_cluster_and_every_controller_installs_the_same_bytes() {
    let ports = Ports { base: 11000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let dir = cl.aging_cas("ca-agreement");
    let client = cl.fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let node = |name: &str, endpoints: &str| {
        let root = dir.join(name);
        std::fs::create_dir_all(&root).unwrap();
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(dir.join("pki"))
            .arg(root.join("pki"))
            .status();
        assert!(copied.expect("cp").success());
        let config = root.join("certrenewd.toml");
        let ca = cl.fixtures.join("etc/etcd/ca.crt");
        let agreeing = Agreeing {
            member: name,
            endpoints,
            client: &client,
            ca: &ca,
            lock_prefix: "/certrenewd/ca-test",
        };
        std::fs::write(&config, agreeing.config(&root, &[&root.join("pki")])).unwrap();
        (root, config)
    };
    let bin = env!("CARGO_BIN_EXE_certrenewd");
    let eps = ports.endpoints(&[1, 2, 3]);
    // Each controller runs one of the members, under the member's name.
    let nodes: Vec<_> = ["etcd-1", "etcd-2", "etcd-3"]
        .iter()
        .map(|n| node(n, &eps))
        .collect();
    // All at once, as at midnight.
    let children: Vec<_> = nodes
        .iter()
        .map(|(_, config)| {
            std::process::Command::new(bin)
                .arg("--config")
                .arg(config)
                .arg("renew")
                .env("CERTRENEWD_LOG", "certrenewd=info")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("certrenewd renew")
        })
        .collect();
    let (mut published, mut taken, mut removed) = (0, 0, 0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        published += stderr
            .matches("issued here and published for the cluster")
            .count();
        taken += stderr
            .matches("where another controller published it")
            .count();
        removed += stderr.matches("every member has adopted it").count();
        for l in stderr.lines().filter(|l| l.contains("etcd key")) {
            eprintln!("{l}");
        }
    }
    for ca in ["ca.crt", "inter-ca.crt"] {
        let old = std::fs::read(dir.join("pki").join(ca)).unwrap();
        let first = std::fs::read(nodes[0].0.join("pki").join(ca)).unwrap();
        assert_ne!(first, old, "{ca} was re-issued");
        for (root, _) in &nodes[1..] {
            assert_eq!(
                std::fs::read(root.join("pki").join(ca)).unwrap(),
                first,
                "{ca}: the same bytes on {}",
                root.display()
            );
        }
    }
    // One key per CA was published beside the lock's prefix, not in its queue; once every
    // member had installed it, it was removed: nothing is left behind.
    let keys = cl.etcdctl(&[
        "get",
        "--prefix",
        "/certrenewd/ca-test.ca-renewals/",
        "--keys-only",
    ]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert!(keys.is_empty(), "agreements left in etcd: {keys:?}");
    assert_eq!(
        removed, 2,
        "each CA's agreement removed once, by the last to adopt it"
    );
    assert!(
        cl.etcdctl(&["get", "--prefix", "/certrenewd/ca-test/", "--keys-only"])
            .trim()
            .is_empty()
    );
    assert_eq!(published, 2, "each CA published by one controller");
    assert_eq!(taken, 4, "and taken by the two others");

    // etcd-3 configured as an external member (no certrenewd runs beside it, so it never
    // adopts): etcd-1's and etcd-2's controllers, on fresh copies of the old CAs, agree
    // again, one after the other, and the second removes the agreement without waiting
    // for etcd-3.
    for n in ["etcd-1", "etcd-2"] {
        std::fs::remove_dir_all(dir.join(n)).unwrap();
        let (_, config) = node(n, &eps);
        let text = std::fs::read_to_string(&config).unwrap().replace(
            "[coordination]\n",
            "[coordination]\nexternal_members = [\"etcd-3\"]\n",
        );
        std::fs::write(&config, text).unwrap();
        let out = std::process::Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("renew")
            .env("CERTRENEWD_LOG", "certrenewd=info")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{n}: {stderr}");
        for l in stderr.lines().filter(|l| l.contains("etcd key")) {
            eprintln!("{n}, etcd-3 external: {l}");
        }
        if n == "etcd-1" {
            // Between the two, the re-issue rolls through: the watch of the others reads
            // the agreed bytes, whose digest is etcd-1's new ca.crt's.
            let der = std::process::Command::new("openssl")
                .args(["x509", "-outform", "DER", "-in"])
                .arg(dir.join("etcd-1/pki/ca.crt"))
                .output()
                .unwrap()
                .stdout;
            let c = Coordination {
                lock_prefix: "/certrenewd/ca-test".into(),
                ..conf(&cl.fixtures, eps.clone())
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let empty = tempfile::tempdir().unwrap();
            let seen = rt
                .block_on(certrenewd::coordinate::publish::read_cluster(
                    &c,
                    EtcdGate::under(&c, empty.path()),
                ))
                .expect("the cluster read");
            let sum = certrenewd::coordinate::record::sha256(&der);
            eprintln!("agreed while rolling through: {:?}", seen.agreed);
            assert!(seen.agreed.contains(&sum), "{sum} in {:?}", seen.agreed);
            // ca.crt's and inter-ca.crt's, and nothing else (the adoption marks beside them).
            assert_eq!(seen.agreed.len(), 2, "{:?}", seen.agreed);
        }
    }
    let keys = cl.etcdctl(&[
        "get",
        "--prefix",
        "/certrenewd/ca-test.ca-renewals/",
        "--keys-only",
    ]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert!(
        keys.is_empty(),
        "agreements left waiting for an external member: {keys:?}"
    );

    // A controller that cannot reach the cluster re-issues nothing and says why.
    let (root, config) = node("node-d", &ports.endpoints(&[7]));
    let before = std::fs::read(root.join("pki/ca.crt")).unwrap();
    let out = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // Its etcd is elsewhere (external etcd, or the members' URLs as configured): what is
    // wrong is that nothing answers there, not that a cluster is down with no quorum left.
    let refusal = stdout
        .lines()
        .find(|l| l.contains("cannot agree on it now"))
        .unwrap_or_else(|| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("no etcd reachable: {refusal}");
    assert!(refusal.contains("refuses connections"), "{refusal}");
    assert!(refusal.contains("waits until etcd answers"), "{refusal}");
    assert!(!refusal.contains("the cluster is down"), "{refusal}");
    assert!(!refusal.contains("quorum"), "{refusal}");
    assert_eq!(std::fs::read(root.join("pki/ca.crt")).unwrap(), before);

    // This node's own re-issue fails its check: it is never offered to the cluster, where
    // every other controller would take it.
    let (root, config) = node("node-v", &eps);
    let out = std::process::Command::new(common::failpoints::binary())
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .env("CERTRENEWD_FAILPOINT", "verify-reissue:error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("failed verification, nothing written"),
        "{stdout}"
    );
    let keys = cl.etcdctl(&[
        "get",
        "--prefix",
        "/certrenewd/ca-test.ca-renewals/",
        "--keys-only",
    ]);
    assert!(
        keys.trim().is_empty(),
        "a re-issue that failed its check was published: {keys}"
    );
    assert_eq!(std::fs::read(root.join("pki/ca.crt")).unwrap(), before);

    // A controller whose clock runs two days ahead publishes its re-issue (dated by its
    // clock); a controller on time refuses it, saying which clock is off, and installs
    // nothing.
    let (ahead, config) = node("node-ahead", &eps);
    let out = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .env("LD_PRELOAD", common::libfaketime())
        .env("FAKETIME", "+2d")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(std::fs::read(ahead.join("pki/ca.crt")).unwrap(), before);
    let (root, config) = node("node-on-time", &eps);
    let out = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let refusal = stdout
        .lines()
        .find(|l| l.contains("another controller published"))
        .unwrap_or_else(|| panic!("{stdout}"));
    eprintln!("a clock ahead: {refusal}");
    assert!(refusal.contains("not valid yet"), "{refusal}");
    assert!(refusal.contains("runs ahead of this one"), "{refusal}");
    assert_eq!(std::fs::read(root.join("pki/ca.crt")).unwrap(), before);
    cl.etcdctl(&["del", "--prefix", "/certrenewd/ca-test.ca-renewals/"]);

    // Asked to stop while etcd does not answer (every member frozen), `renew` ends its
    // agreement's waits at once and installs nothing; the CA stays owed.
    let (root, config) = node("node-t", &eps);
    for m in ["etcd-1", "etcd-2", "etcd-3"] {
        cl.systemctl(&["kill", "--signal=SIGSTOP", &format!("{m}.service")]);
    }
    let mut child = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("renew")
        .env("CERTRENEWD_LOG", "certrenewd=info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled once it says it asks for the agreement: its waits are what SIGTERM ends.
    let (said, asking) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr piped");
    let logs = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let line = line.unwrap_or_default();
            if line.contains("asking the controllers of this cluster to agree") {
                let _ = said.send(());
            }
            lines.push(line);
        }
        lines
    });
    if asking.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("renew never asked for the agreement: {:?}", logs.join());
    }
    let signalled = Instant::now();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a PID");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("signalled");
    let out = child.wait_with_output().unwrap();
    let took = signalled.elapsed();
    for m in ["etcd-1", "etcd-2", "etcd-3"] {
        cl.systemctl(&["kill", "--signal=SIGCONT", &format!("{m}.service")]);
    }
    eprintln!("renew's log: {:?}", logs.join().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "stopped during the agreement: exit {:?} {took:?} after SIGTERM",
        out.status.code()
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("certrenewd is stopping"), "{stdout}");
    assert!(
        took < Duration::from_secs(8),
        "the agreement's wait went on {took:?} after SIGTERM"
    );
    assert_eq!(std::fs::read(root.join("pki/ca.crt")).unwrap(), before);
}

/// Each controller's record is put beside the lock, on a lease kept alive while its daemon
/// runs; any member reads them all with the member list; a daemon that dies takes its
/// record with it within a TTL, one that stops at once; with coordination off nothing is
/// read and one line says why. Two worker threads: the test's own publishers keep their
/// 4 s leases alive from tasks while the test blocks on `etcdctl` and `certrenewd check`,
/// which on a loaded machine took longer than the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_records_are_published_on_a_kept_lease_and_read_from_any_controller() {
    use certrenewd::coordinate::publish::{Publisher, read_cluster};
    use certrenewd::coordinate::record::{NodeRecord, SCHEMA};

    let ports = Ports { base: 15500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = Coordination {
        lease_ttl: Duration::from_secs(4),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]))
    };
    let (empty, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let on = |me: &str| Coordination {
        member_name: Some(me.into()),
        ..c.clone()
    };
    let rec = |version: &str| NodeRecord {
        schema: SCHEMA,
        version: version.into(),
        interval_secs: 86_400,
        ..NodeRecord::default()
    };
    let mut one = Publisher::under(&on("etcd-1"), empty.path(), state.path());
    let mut two = Publisher::under(&on("etcd-2"), empty.path(), state.path());
    let key = one
        .publish(rec("a"))
        .await
        .expect("published")
        .expect("coordinated");
    assert_eq!(key, "/certrenewd/test-lock.nodes/etcd-1");
    two.publish(rec("b")).await.expect("published");
    // Written again after a pass: the same key, on the same lease.
    one.publish(rec("a2")).await.expect("published again");

    // As etcd-3 sees the cluster, from a node that runs none of it.
    let three = on("etcd-3");
    let seen = read_cluster(
        &three,
        EtcdGate::under(&three, empty.path()).reading_in(state.path()),
    )
    .await
    .expect("the cluster read");
    assert_eq!(seen.me, "etcd-3");
    assert_eq!(seen.members.len(), 3);
    let mut nodes: Vec<(String, String, Option<String>)> = seen
        .records
        .iter()
        .map(|(n, r)| {
            let r = r.as_ref().expect("a record");
            (n.clone(), r.version.clone(), r.member_id.clone())
        })
        .collect();
    nodes.sort();
    let id = |name: &str| {
        let m = seen.members.iter().find(|m| m.name == name).unwrap();
        Some(format!("{:x}", m.id))
    };
    eprintln!("records: {nodes:?}");
    assert_eq!(
        nodes,
        [
            ("etcd-1".into(), "a2".into(), id("etcd-1")),
            ("etcd-2".into(), "b".into(), id("etcd-2"))
        ]
    );
    // `check --cluster` from etcd-3, whose certrenewd is not running: all three members,
    // etcd-3 without a record; the same as JSON.
    let config = state.path().join("certrenewd.toml");
    let client = cl.fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let quoted: Vec<String> = ports
        .endpoints(&[1, 2, 3])
        .split(',')
        .map(|e| format!("\"{e}\""))
        .collect();
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[coordination]\nenabled = true\nmember_name = \"etcd-3\"\nendpoints = [{}]\ncert = \"{}.crt\"\nkey = \"{}.key\"\nca = \"{}\"\nlock_prefix = \"/certrenewd/test-lock\"\n[[watch]]\npath = \"{}\"\n",
            state.path().display(),
            quoted.join(", "),
            client.display(),
            client.display(),
            cl.fixtures.join("etc/etcd/ca.crt").display(),
            empty.path().display(),
        ),
    )
    .unwrap();
    let check = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
            .arg("--config")
            .arg(&config)
            .args(["check", "--cluster"])
            .args(args)
            .output()
            .expect("certrenewd check --cluster");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), text, err)
    };
    let (code, text, err) = check(&[]);
    eprintln!("check --cluster:\n{text}{err}");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.starts_with(
            "3 controllers: 2 reporting, 0 stale, 1 missing, 0 drifted (seen from etcd-3)"
        ),
        "{text}"
    );
    assert!(text.contains("etcd-1 (member "), "{text}");
    assert!(text.contains("certrenewd a2"), "{text}");
    assert!(
        text.contains(": missing: certrenewd not running or not reporting"),
        "{text}"
    );
    let (code, _, err) = check(&["--fail-due"]);
    assert_eq!(
        code,
        Some(1),
        "a controller missing fails --fail-due: {err}"
    );
    let (_, json, _) = check(&["--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["summary"]["reporting"], 2, "{json}");
    assert_eq!(v["controllers"].as_array().map(Vec::len), Some(3));
    let by = |n: &str| {
        v["controllers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["node"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by("etcd-3")["state"], "missing");
    assert_eq!(by("etcd-2")["record"]["version"], "b");
    eprintln!("one node as JSON: {:#}", by("etcd-1"));
    untrusted_records_are_bounded_escaped_and_counted_by_membership(&cl, &check);
    // The daemon itself, as etcd-3, its certrenewd started (no pass at start): its record
    // is there within seconds, with the node's certificates and the digests of what the
    // controllers share; `check --cluster` then has all three reporting. Stopped, it
    // takes its record away at once.
    let node3 = tempfile::tempdir().unwrap();
    let pki = node3.path().join("pki");
    cl.copy_etcd_dir(&pki);
    let daemon_conf = node3.path().join("certrenewd.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            &format!("state_dir = \"{}\"", state.path().display()),
            &format!(
                "state_dir = \"{}\"\nrun_on_start = false",
                node3.path().join("state").display()
            ),
        )
        .replace(
            &format!("[[watch]]\npath = \"{}\"\n", empty.path().display()),
            &format!(
                "[[watch]]\npath = \"{}\"\nunits = []\nstatic_pods = []\nkubeconfigs = []\n",
                pki.display()
            ),
        );
    assert!(text.contains("run_on_start"), "{text}");
    let text = text.replace("[coordination]\n", "[coordination]\nlease_ttl_secs = 5\n");
    let metrics = node3.path().join("metrics/certrenewd.prom");
    std::fs::create_dir_all(metrics.parent().unwrap()).unwrap();
    let text = text.replacen(
        "run_on_start = false",
        &format!(
            "run_on_start = false\nmetrics_file = \"{}\"",
            metrics.display()
        ),
        1,
    );
    std::fs::write(&daemon_conf, text).unwrap();
    /// The daemon, ended by its PID should the test fail while it runs.
    struct Daemon(Option<std::process::Child>);
    impl Drop for Daemon {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let daemon = std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
        .arg("--config")
        .arg(&daemon_conf)
        .arg("run")
        .env("CERTRENEWD_LOG", "certrenewd=debug")
        .stderr(std::fs::File::create(node3.path().join("daemon.log")).unwrap())
        .spawn()
        .expect("certrenewd run");
    let mut guard = Daemon(Some(daemon));
    let key3 = "/certrenewd/test-lock.nodes/etcd-3";
    let started = Instant::now();
    let value = loop {
        let v = cl.etcdctl(&["get", key3, "--print-value-only"]);
        if !v.trim().is_empty() {
            break v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "certrenewd run published no record"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let r: NodeRecord = serde_json::from_str(value.trim()).expect("a node record");
    eprintln!("etcd-3's record: {} bytes", value.trim().len());
    assert_eq!(r.node, "etcd-3");
    assert!(r.member_id.is_some());
    assert_eq!(r.last_pass, None, "no pass yet");
    assert!(r.next_pass.is_some());
    assert!(r.interval_secs > 0);
    assert!(
        r.certificates
            .iter()
            .any(|c| c.path.ends_with("/ca.crt") && c.role == "ca"),
        "{:?}",
        r.certificates
    );
    let ca = pki.join("ca.crt").display().to_string();
    let shared: Vec<(&str, &str)> = r
        .shared
        .iter()
        .map(|d| (d.path.as_str(), d.what.as_str()))
        .collect();
    assert!(shared.contains(&(ca.as_str(), "certificate")), "{shared:?}");
    assert!(
        shared
            .iter()
            .any(|(p, w)| p.ends_with("/ca.key") && *w == "public key"),
        "{shared:?}"
    );
    let (code, text, err) = check(&[]);
    eprintln!("check --cluster with etcd-3's daemon running:\n{text}{err}");
    assert_eq!(code, Some(0), "{err}");
    assert!(text.starts_with("3 controllers: 3 reporting"), "{text}");
    // Its lease lost (revoked here; etcd out of reach for half the TTL does the same): the
    // daemon publishes its record again on a new lease within a TTL or two, not at its
    // next pass.
    let lease_of = || {
        let out = cl.etcdctl(&["get", key3, "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl's JSON");
        v["kvs"][0]["lease"].as_i64()
    };
    let first = lease_of().expect("on a lease");
    cl.etcdctl(&["lease", "revoke", &format!("{first:x}")]);
    let revoked = Instant::now();
    let again = loop {
        if let Some(l) = lease_of() {
            break l;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(20),
            "the record was not published again after its lease was revoked: {}",
            std::fs::read_to_string(node3.path().join("daemon.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    eprintln!(
        "published again {:.1}s after its lease was revoked",
        revoked.elapsed().as_secs_f64()
    );
    assert_ne!(again, first);
    // Put again as it was written: its time is that of the pass (or start) it tells of, so
    // a daemon stuck in a pass still shows stale however often its lease is lost.
    let value = cl.etcdctl(&["get", key3, "--print-value-only"]);
    let put_again: NodeRecord = serde_json::from_str(value.trim()).expect("a node record");
    assert_eq!(put_again.written_at, r.written_at, "{value}");

    // The daemon watches the others between passes, every half TTL: all reporting and alike,
    // nothing is raised. etcd-2 holding another ca.crt: 500.250 on the file, naming both.
    // etcd-2's certrenewd stopped: 500.230 on it, the drift gone with its record, the gauge
    // counting it missing. Back: cleared.
    /// An active alarm: ID, entity, reason.
    type Alarm = (String, String, String);
    let alarms = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
            .arg("--config")
            .arg(&daemon_conf)
            .args(["alarms", "--output", "json"])
            .output()
            .expect("certrenewd alarms");
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let list = v
            .as_array()
            .cloned()
            .unwrap_or_else(|| v["alarms"].as_array().cloned().expect("a list of alarms"));
        list.iter()
            .map(|a| {
                let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
                (s("id"), s("entity"), s("reason"))
            })
            .collect::<Vec<_>>()
    };
    let wait_alarms = async |what: &str, want: &dyn Fn(&[Alarm]) -> bool| {
        let since = Instant::now();
        loop {
            let now = alarms();
            if want(&now) {
                eprintln!(
                    "{what}: after {:.1}s: {now:?}",
                    since.elapsed().as_secs_f64()
                );
                return now;
            }
            assert!(
                since.elapsed() < Duration::from_secs(2 * 5 + 5),
                "{what}: not within two lease TTLs; alarms: {now:?}; log: {}",
                std::fs::read_to_string(node3.path().join("daemon.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let peer = |a: &[Alarm], id: &str| -> Vec<String> {
        a.iter()
            .filter(|x| x.0 == id)
            .map(|x| x.1.clone())
            .collect()
    };
    // Each look of the watch writes the cluster's gauges right after its alarms: a look
    // waited for by its gauges is one whose alarms are there to be read, not raced.
    let cluster_file = node3.path().join("metrics/certrenewd-cluster.prom");
    let wait_look = async |what: &str, want: &dyn Fn(&str) -> bool| {
        let since = Instant::now();
        loop {
            let g = std::fs::read_to_string(&cluster_file).unwrap_or_default();
            if want(&g) {
                return g;
            }
            assert!(
                since.elapsed() < Duration::from_secs(4 * 5),
                "{what}: no such look of the watch within four lease TTLs: {g}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let controllers = |g: &str, state: &str, n: &str| {
        let series = format!("certrenewd_cluster_controllers{{state=\"{state}\"");
        (g.lines()).any(|l| l.starts_with(&series) && l.ends_with(&format!(" {n}")))
    };
    wait_look("all three reporting alike", &|g| {
        controllers(g, "reporting", "3") && controllers(g, "drifted", "0")
    })
    .await;
    assert_eq!(
        alarms(),
        vec![],
        "nothing raised while all three report alike"
    );
    // The watch recorded etcd's member list (no pass has run): with it, a later pass can
    // tell this cluster down from members out of its sight.
    let listed = certrenewd::coordinate::roster::read(&node3.path().join("state"))
        .expect("the member list recorded by the daemon's watch");
    assert_eq!(listed.members.len(), 3, "{listed:?}");
    let mut other = rec("b");
    other.shared = vec![certrenewd::coordinate::record::Digest {
        path: ca.clone(),
        what: "certificate".into(),
        sha256: "00".repeat(32),
    }];
    two.publish(other)
        .await
        .expect("published")
        .expect("coordinated");
    let raised = wait_alarms("drift raised", &|a| !peer(a, "500.250").is_empty()).await;
    let drift = raised.iter().find(|a| a.0 == "500.250").unwrap();
    assert_eq!(drift.1, format!("file={ca}"));
    assert!(
        drift.2.contains(&ca) && drift.2.contains("etcd-2") && drift.2.contains("etcd-3"),
        "{drift:?}"
    );
    two.retire().await;
    let quiet = wait_alarms("etcd-2 quiet", &|a| {
        peer(a, "500.230") == ["host=etcd-2"] && peer(a, "500.250").is_empty()
    })
    .await;
    assert!(quiet[0].2.contains("etcd-2 has no record"), "{quiet:?}");
    let gauges = wait_look("etcd-2 counted missing", &|g| {
        controllers(g, "missing", "1")
    })
    .await;
    for line in [
        "certrenewd_cluster_controllers{state=\"missing\",node=",
        "certrenewd_cluster_read_success{node=",
    ] {
        assert!(gauges.contains(line), "{line}: {gauges}");
    }
    // Prometheus' own reader takes the file as the textfile collector would.
    match std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&cluster_file).unwrap())
        .output()
    {
        Ok(out) => assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool check metrics: {out:?}\n{gauges}"
        ),
        Err(e) if std::env::var_os("CI").is_some() => panic!("promtool: {e}"),
        Err(e) => eprintln!("promtool not run ({e}): Debian's prometheus package has it"),
    }
    two.publish(rec("b"))
        .await
        .expect("published")
        .expect("coordinated");
    wait_alarms("etcd-2 back", &|a| a.is_empty()).await;
    let log = std::fs::read_to_string(node3.path().join("daemon.log")).unwrap_or_default();
    assert!(!log.contains("cannot read the other controllers"), "{log}");

    let mut daemon = guard.0.take().expect("the daemon");
    let pid = daemon.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.expect("kill").success());
    let log = node3.path().join("daemon.log");
    let out = tokio::task::spawn_blocking(move || {
        let status = daemon.wait().expect("wait");
        (status, std::fs::read_to_string(log).unwrap_or_default())
    })
    .await
    .unwrap();
    assert!(out.0.success(), "{}", out.1);
    assert!(!out.1.contains("not published"), "{}", out.1);
    let left = cl.etcdctl(&["get", key3, "--print-value-only"]);
    assert!(left.trim().is_empty(), "retired when it stopped: {left}");

    // Coordination off: one line why, exit 1.
    let off = std::fs::read_to_string(&config)
        .unwrap()
        .replace("enabled = true", "enabled = false");
    std::fs::write(&config, off).unwrap();
    let (code, text, err) = check(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("enabled = false"), "{err}");
    // No member answers: one line why, exit 1.
    let gone = std::fs::read_to_string(&config)
        .unwrap()
        .replace("enabled = false", "enabled = true")
        .replace(&quoted.join(", "), "\"https://127.0.0.1:9\"");
    std::fs::write(&config, gone).unwrap();
    let (code, text, err) = check(&[]);
    eprintln!("no member answering: {err}");
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = cl.etcdctl(&[
        "get",
        "--prefix",
        "/certrenewd/test-lock.nodes/",
        "-w",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl's JSON");
    for kv in v["kvs"].as_array().expect("kvs") {
        assert!(kv["lease"].as_i64().unwrap_or(0) != 0, "on a lease: {kv}");
    }

    // etcd-2's daemon dies (its keep-alive with it): its record is gone within a TTL and a
    // bit; etcd-1's, kept alive, stays.
    drop(two);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let seen = read_cluster(
        &three,
        EtcdGate::under(&three, empty.path()).reading_in(state.path()),
    )
    .await
    .unwrap();
    let names: Vec<&str> = seen.records.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["etcd-1"], "after two TTLs");

    // etcd-1's stops: gone at once.
    one.retire().await;
    let seen = read_cluster(
        &three,
        EtcdGate::under(&three, empty.path()).reading_in(state.path()),
    )
    .await
    .unwrap();
    assert!(seen.records.is_empty(), "{:?}", seen.records);

    // Coordination off: one line why, nothing asked.
    let off = Coordination {
        enabled: Enabled::Off,
        ..on("etcd-1")
    };
    let why = read_cluster(
        &off,
        EtcdGate::under(&off, empty.path()).reading_in(state.path()),
    )
    .await
    .expect_err("nothing to read with coordination off")
    .to_string();
    assert!(why.contains("enabled = false"), "{why}");
}

/// The record a daemon publishes after a pass tells of the node as the pass left it: the
/// certificates it renewed are `ok` with their new end, not `due` or `expired` as they were
/// when the pass scanned (so `check --cluster` no longer shows them due, and `--fail-due`
/// fails no more, until the next day).
#[tokio::test]
async fn the_record_after_a_pass_shows_what_the_pass_renewed() {
    use certrenewd::coordinate::record::NodeRecord;

    let ports = Ports { base: 16000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let node = tempfile::tempdir().unwrap();
    let pki = node.path().join("pki");
    cl.copy_etcd_dir(&pki);
    let client = cl.fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let endpoints: Vec<String> = (ports.endpoints(&[1, 2, 3]).split(','))
        .map(|e| format!("\"{e}\""))
        .collect();
    let config = node.path().join("certrenewd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[coordination]\nenabled = true\nmember_name = \"etcd-3\"\nendpoints = [{}]\ncert = \"{}.crt\"\nkey = \"{}.key\"\nca = \"{}\"\nlock_prefix = \"/certrenewd/test-lock\"\n[[watch]]\npath = \"{}\"\nunits = []\nstatic_pods = []\nkubeconfigs = []\n",
            node.path().join("state").display(),
            endpoints.join(", "),
            client.display(),
            client.display(),
            cl.fixtures.join("etc/etcd/ca.crt").display(),
            pki.display(),
        ),
    )
    .unwrap();
    struct Daemon(std::process::Child);
    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let log = node.path().join("daemon.log");
    let _daemon = Daemon(
        std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
            .arg("--config")
            .arg(&config)
            .arg("run")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("certrenewd run"),
    );
    let key = "/certrenewd/test-lock.nodes/etcd-3";
    let started = Instant::now();
    let record = loop {
        let v = cl.etcdctl(&["get", key, "--print-value-only"]);
        if let Ok(r) = serde_json::from_str::<NodeRecord>(v.trim())
            && r.last_pass.is_some()
        {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no record after a pass: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // What it renewed is ok in the record; what it could not is still said so, and the
    // record's certificates agree with its own count of what is still due.
    let last = record.last_pass.as_ref().unwrap();
    assert!(last.renewed >= 1, "the pass renewed a due leaf: {last:?}");
    let statuses: Vec<(String, String)> = (record.certificates.iter())
        .map(|c| (c.path.clone(), c.status.clone()))
        .collect();
    let not_ok = statuses.iter().filter(|(_, s)| s != "ok").count();
    assert_eq!(
        not_ok, last.due,
        "the record after the pass: {last:?}\n{statuses:#?}"
    );
}

/// A member added (and never started) while a node waits for the lock makes four voters, of
/// which three are a quorum: the waiter's etcd restart would leave two. The waiter read the
/// member list before its wait; the restart must be judged by the list as it is when it is
/// due, and held.
#[tokio::test]
async fn a_member_added_during_the_lock_wait_holds_the_etcd_restart() {
    let ports = Ports { base: 16500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let started = Instant::now();
    let c = Coordination {
        lease_ttl: Duration::from_secs(10),
        lock_timeout: Duration::from_secs(60),
        ..conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]))
    };
    let mut a = gate(&c, "node-a");
    a.before(&step("kube-scheduler.service"))
        .await
        .expect("node-a takes the lock");
    let b_conf = c.clone();
    let waiter = tokio::spawn(async move {
        let mut b = gate(&b_conf, "etcd-1");
        let r = b.before(&step("etcd-1.service")).await;
        b.finish().await;
        r
    });
    let t0 = Instant::now();
    while cl.queue().len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "etcd-1 never queued"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // etcd adds a member only once every member has been connected for five seconds.
    let settled = Duration::from_secs(6).saturating_sub(started.elapsed());
    tokio::time::sleep(settled).await;
    // Nothing listens at the new member's peer URL (on loopback, in no cluster's range).
    let peer = format!("--peer-urls=https://127.0.0.1:{}", ports.base + 480);
    let added = cl.etcdctl(&["member", "add", "etcd-4", &peer]);
    let id = added
        .split_whitespace()
        .nth(1)
        .expect("etcdctl names the member it added")
        .to_string();
    eprintln!("added: {id}");
    a.finish().await;
    let r = tokio::time::timeout(Duration::from_secs(60), waiter).await;
    let why = r.expect("etcd-1 is answered in time").unwrap().unwrap_err();
    assert!(matches!(why, Hold::Unhealthy(_)), "{why:?}");
    let why = why.to_string();
    eprintln!("held: {why}");
    assert!(
        why.starts_with(&format!("etcd member {id} (added, never started; peer URLs https://127.0.0.1:{}) does not answer", ports.base + 480)),
        "{why}"
    );
    assert!(
        why.contains("2 of 4 voting members would stay healthy while this node's member restarts, and 3 are a quorum"),
        "{why}"
    );
    // Once the member is removed, three voters again: the restart may go ahead.
    cl.etcdctl(&["member", "remove", &id]);
    let mut b = gate(&c, "etcd-1");
    b.before(&step("etcd-1.service"))
        .await
        .expect("three healthy voters again");
    b.finish().await;
}

/// The member that leads is restarted only once it has handed the leadership over: its
/// restart then costs no election. The gate's checks alone move nothing (a member whose
/// renewal it reads again by itself is not taken down, and stays leader).
#[tokio::test]
async fn a_leader_hands_its_leadership_over_before_its_restart() {
    let ports = Ports { base: 17000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]));
    let files = identity::find(&c, Path::new("/"), &[]).expect("the configured identity");
    let tls = files.tls().expect("the client identity");
    let leader = async || {
        let mut c = members::connect(&[ports.endpoints(&[1])], tls.clone())
            .await
            .expect("etcd-1 answers");
        let listed = members::list(&mut c).await.expect("the member list");
        let led = c.status().await.expect("etcd-1's status").leader();
        let name = listed.iter().find(|m| m.id == led).map(|m| m.name.clone());
        name.expect("a leader among the members")
    };
    let was = leader().await;
    let mut g = gate(&c, &was);
    let restarted = step(&format!("{was}.service"));
    g.before(&restarted).await.expect("every member healthy");
    assert_eq!(
        leader().await,
        was,
        "the checks before a step moved the leader"
    );
    g.restarting(&restarted).await;
    let now = leader().await;
    g.finish().await;
    eprintln!("the leader was {was}, and is {now} before {was} restarts");
    assert_ne!(now, was, "{was} still leads as its restart begins");
}

/// `check --cluster ARGS`: its exit status, stdout and stderr.
type Checked = (Option<i32>, String, String);

/// What other hands put under the records' prefix is untrusted input, read by `check
/// --cluster` (and the daemon's watch) without harm: at etcd-3's key a record on no lease,
/// dated ten years ahead, claiming to be etcd-1, with terminal escapes and a forged summary
/// line; sixty records of no member (more than a page of the listing); a key with a
/// newline; four records of 1.27 MB, together past the client's 4 MiB message. Only the
/// members count, every record is listed, the lease-less record is stale whatever its
/// date, the big ones are refused one by one, and nothing reaches the terminal unescaped.
/// The junk is taken away again.
fn untrusted_records_are_bounded_escaped_and_counted_by_membership(
    cl: &Cluster,
    check: &dyn Fn(&[&str]) -> Checked,
) {
    let prefix = "/certrenewd/test-lock.nodes/";
    let far = time::OffsetDateTime::now_utc().unix_timestamp() + 10 * 365 * 86_400;
    let forged = serde_json::json!({
        "schema": 1, "node": "etcd-1", "version": "\u{1b}]0;owned\u{7}\u{1b}[2J",
        "written_at": far, "interval_secs": 86_400,
        "certificates": [{
            "path": "/x\n3 controllers: 3 reporting, 0 stale, 0 missing, 0 drifted",
            "role": "leaf", "not_after": "2030-01-01T00:00:00Z", "status": "ok"
        }]
    })
    .to_string();
    let etcd3 = format!("{prefix}etcd-3");
    cl.etcdctl(&["put", &etcd3, &forged]);
    let ghost = serde_json::json!({"schema": 1, "node": "ghost", "version": "g",
        "written_at": far, "interval_secs": 60})
    .to_string();
    let mut junk = vec![etcd3.clone()];
    // More records than one page of the listing holds (50), put in one transaction: one
    // etcdctl each would hold this test's runtime past the publishers' 4 s leases.
    let ghosts: Vec<String> = (0..60).map(|i| format!("ghost-{i:02}")).collect();
    let vars: Vec<(&str, &str)> = cl.vars().collect();
    let pki = cl.fixtures.join("etc/etcd");
    let quoted = serde_json::to_string(&ghost).unwrap();
    let puts: String = (ghosts.iter())
        .map(|g| format!("put {prefix}{g} {quoted}\n"))
        .collect();
    let txn = format!("\n{puts}\n\n");
    cl.sb
        .etcdctl_with_input(&pki, &vars, &["txn"], txn.as_bytes());
    let newline = format!("{prefix}x\n3 controllers: 9 reporting");
    cl.etcdctl(&["put", &newline, "{}"]);
    junk.push(newline);
    let big = serde_json::json!({"schema": 1, "node": "big", "version": "a".repeat(1_270_000),
        "written_at": 0, "interval_secs": 60})
    .to_string();
    for i in 1..=4 {
        let key = format!("{prefix}big-{i}");
        cl.sb
            .etcdctl_with_input(&pki, &vars, &["put", &key], big.as_bytes());
        junk.push(key);
    }
    let (code, text, err) = check(&[]);
    eprintln!("check --cluster with junk under the prefix:\n{text}{err}");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.starts_with(
            "3 controllers: 2 reporting, 1 stale, 0 missing, 0 drifted (seen from etcd-3)"
        ),
        "{text}"
    );
    let summary =
        |l: &&str| (l.split_once(" controllers: ")).is_some_and(|(n, _)| n.parse::<u32>().is_ok());
    let summaries = text.lines().filter(summary).count();
    assert_eq!(summaries, 1, "a forged summary line: {text}");
    assert!(
        !text.contains(['\u{1b}', '\u{7}']),
        "a raw escape: {text:?}"
    );
    assert!(text.contains("\\u{1b}]0;owned"), "{text}");
    assert!(text.contains("over the 64 KiB"), "{text}");
    assert!(text.lines().count() < 400, "{} lines", text.lines().count());
    let (_, json, _) = check(&["--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["summary"]["controllers"], 3, "{json}");
    let listed = |n: &str| (v["controllers"].as_array().unwrap().iter()).any(|c| c["node"] == n);
    assert!(ghosts.iter().all(|g| listed(g)), "a page was lost: {json}");
    let three = (v["controllers"].as_array().unwrap().iter())
        .find(|c| c["node"] == "etcd-3")
        .cloned()
        .expect("etcd-3");
    assert_eq!(three["state"], "stale", "{three}");
    assert_eq!(three["record"]["node"], "etcd-3", "{three}");
    assert!(
        three["note"]
            .as_str()
            .is_some_and(|n| n.contains("on no lease")),
        "{three}"
    );
    for key in &junk {
        cl.etcdctl(&["del", key]);
    }
    cl.etcdctl(&["del", "--prefix", &format!("{prefix}ghost-")]);
}

/// A connection this host does not permit (EPERM: a firewall rule, or the shipped unit's own
/// `IPAddressDeny=` for a member outside it) is said as such, with the fix on this host:
/// never as members that accept connections and refuse this client, and never as a cluster
/// that is down. Made real with strace's fault injection on every `connect`.
#[test]
fn a_connection_this_host_does_not_permit_is_said_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("pki")).unwrap();
    common::sh(
        d,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
           -subj /CN=etcd-ca -days 3650 -out pki/ca.crt 2>/dev/null
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout pki/client.key \
           -subj /CN=certrenewd -out client.csr 2>/dev/null
         printf 'extendedKeyUsage=clientAuth\\n' > ext.cnf
         openssl x509 -req -in client.csr -CA pki/ca.crt -CAkey ca.key -days 365 \
           -extfile ext.cnf -out pki/client.crt 2>/dev/null",
    );
    let config = d.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n\n\
             [coordination]\nenabled = true\nendpoints = [\"https://127.0.0.1:9\"]\n\
             cert = \"{d}/pki/client.crt\"\nkey = \"{d}/pki/client.key\"\nca = \"{d}/pki/ca.crt\"\n\n\
             [[watch]]\npath = \"{d}/pki\"\nunits = []\nstatic_pods = []\nkubeconfigs = []\n",
            d = d.display()
        ),
    )
    .unwrap();
    let outlook = |strace: bool| {
        let mut cmd = match strace {
            true => {
                let mut c = std::process::Command::new("strace");
                c.args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=connect"])
                    .args(["-e", "inject=connect:error=EPERM"])
                    .arg(env!("CARGO_BIN_EXE_certrenewd"));
                c
            }
            false => std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd")),
        };
        cmd.arg("--config").arg(&config);
        let args = ["check", "--output", "json"];
        let r = common::pki::run_cmd(cmd.args(args), &args);
        let json: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", r.stdout, r.stderr));
        let c = &json["coordination"];
        (
            c["restarts"].as_str().unwrap_or_default().to_string(),
            c["why"].as_str().unwrap_or_default().to_string(),
        )
    };
    let (verdict, why) = outlook(true);
    eprintln!("connect not permitted: {verdict}: {why}");
    assert_eq!(verdict, "held", "{why}");
    assert!(
        why.contains(
            "this host does not let certrenewd connect to https://127.0.0.1:9 (Operation not permitted"
        ) && why.contains("IPAddressAllow="),
        "{why}"
    );
    assert!(!why.contains("accept connections"), "{why}");
    // The same without the fault: nothing listens there, and that is said instead.
    let (_, why) = outlook(false);
    assert!(!why.contains("does not let certrenewd connect"), "{why}");
}

/// A node's reading with kube-apiserver as kubeadm's static pod, advertised on
/// 127.0.0.1:`port`, in a tree of its own.
fn apiserver_node(port: u16) -> (tempfile::TempDir, NodeReading) {
    let root = tempfile::tempdir().unwrap();
    let manifests = root.path().join("etc/kubernetes/manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n\
         spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=127.0.0.1\n    \
         - --secure-port={port}\n    - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt\n    \
         - --tls-private-key-file=/etc/kubernetes/pki/apiserver.key\n    image: registry.k8s.io/kube-apiserver:v1.31.0\n    \
         name: kube-apiserver\n"
    );
    std::fs::write(manifests.join("kube-apiserver.yaml"), pod).unwrap();
    let node = NodeReading::read(&manifests);
    (root, node)
}

/// An API server stand-in: `openssl s_server -www` on 127.0.0.1:`port` (it answers every
/// GET, /readyz too, with 200), ended by its PID when dropped.
struct ApiServer(std::process::Child);

impl ApiServer {
    fn start(fixtures: &Path, port: u16) -> ApiServer {
        let pair = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
        let child = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(pair.with_extension("crt"))
            .arg("-key")
            .arg(pair.with_extension("key"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(10), "s_server listens");
            std::thread::sleep(Duration::from_millis(50));
        }
        ApiServer(child)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Node 2's API server is down in the middle of its restart: node 1, holding the lock, holds
/// its own API server's restart until node 2's answers `/readyz` again. Node 1 learns where
/// node 2's API server is from node 2's record, as node 2's reading of its manifest put it.
#[tokio::test]
async fn an_api_server_restart_waits_for_another_api_server_to_be_ready() {
    use certrenewd::coordinate::publish::Publisher;
    use certrenewd::coordinate::record::{NodeRecord, SCHEMA};

    let ports = Ports { base: 22000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]));
    let (_one_root, one) = apiserver_node(22444);
    let (two_root, two) = apiserver_node(22443);
    let state = tempfile::tempdir().unwrap();
    let on = |me: &str| Coordination {
        member_name: Some(me.into()),
        ..c.clone()
    };
    let mut publisher = Publisher::under(&on("etcd-2"), two_root.path(), state.path());
    publisher.knows(&two);
    let rec = NodeRecord {
        schema: SCHEMA,
        version: "test".into(),
        interval_secs: 86_400,
        ..NodeRecord::default()
    };
    publisher.publish(rec).await.expect("node 2's record");
    assert_eq!(
        publisher.last().map(|r| r.apiservers.clone()),
        Some(vec![]),
        "filled in when put, not in what was given"
    );

    // Node 2's API server is down (nothing listens at 127.0.0.1:22443).
    let mut g = gate(&c, "etcd-1").knowing(&one);
    let t0 = Instant::now();
    let why = g
        .before(&Step::new(Target::Pod("kube-apiserver".into())))
        .await
        .expect_err("no other API server ready");
    eprintln!("node 2's API server down, after {:?}: {why}", t0.elapsed());
    assert!(matches!(why, Hold::Unhealthy(_)), "{why:?}");
    let why = why.to_string();
    assert!(
        why.contains("no other API server is ready, so restarting static pod kube-apiserver would leave the cluster without one: 127.0.0.1:22443 (the record of etcd-2): "),
        "{why}"
    );
    assert!(why.contains("waited 4s, gate_timeout_secs"), "{why}");
    // Node 1's own API server (22444) was never asked as another's.
    assert!(!why.contains("22444"), "{why}");
    // The lock stays this node's for what follows.
    g.before(&step("kube-scheduler.service"))
        .await
        .expect("the steps after it go on under the lock");
    g.finish().await;

    // Node 2's API server back: node 1's restart goes ahead as soon as it answers.
    let _back = ApiServer::start(&cl.fixtures, 22443);
    let mut g = gate(&c, "etcd-1").knowing(&one);
    let t0 = Instant::now();
    g.before(&Step::new(Target::Pod("kube-apiserver".into())))
        .await
        .expect("node 2's API server ready");
    eprintln!(
        "node 2's API server ready: node 1 went ahead after {:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    g.finish().await;
}

/// After this node's etcd member restarts, this node's API server, ready before, must answer
/// `/readyz` again before anything else restarts here or the lock is given up: kubeadm's API
/// server talks to its own member only. One that does not holds what follows, and says so;
/// one down before the restart is not this restart's doing and is not waited for.
#[tokio::test]
async fn after_its_etcd_member_restarts_this_nodes_api_server_must_be_ready_again() {
    let ports = Ports { base: 26000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let c = conf(&cl.fixtures, ports.endpoints(&[1, 2, 3]));
    let (_root, node) = apiserver_node(26444);
    let api = ApiServer::start(&cl.fixtures, 26444);
    let etcd = step("etcd-1.service");

    let mut g = gate(&c, "etcd-1").knowing(&node);
    g.before(&etcd).await.expect("all healthy");
    g.after(&etcd, true)
        .await
        .expect("its API server ready again");
    g.finish().await;

    let mut g = gate(&c, "etcd-1").knowing(&node);
    g.before(&etcd).await.expect("all healthy");
    drop(api);
    let t0 = Instant::now();
    let why = g
        .after(&etcd, true)
        .await
        .expect_err("its API server, ready before, is gone");
    eprintln!("its API server gone, after {:?}: {why}", t0.elapsed());
    assert!(matches!(why, Hold::NotBack(_)), "{why:?}");
    assert!(
        why.to_string().contains(
            "after etcd-1.service restarted, this node's API server at 127.0.0.1:26444, ready before, did not answer /readyz within 4s (gate_timeout_secs): "
        ),
        "{why}"
    );
    assert!(t0.elapsed() >= Duration::from_secs(4), "{:?}", t0.elapsed());
    g.finish().await;

    let mut g = gate(&c, "etcd-1").knowing(&node);
    g.before(&etcd).await.expect("all healthy");
    let t0 = Instant::now();
    g.after(&etcd, true)
        .await
        .expect("an API server down before the restart is not waited for");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    g.finish().await;
}

/// StarlingX duplex: one etcd member, two API servers. With the other API server named in
/// `[coordination] apiservers`, an API server restart goes through the lock all the same
/// (held while the other is down), and the lock outlives the restart of etcd's one member.
/// Without, a cluster of one member is not coordinated.
#[tokio::test]
async fn one_etcd_member_and_two_api_servers_take_turns_through_the_lock() {
    let ports = Ports { base: 22500 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let one = ports.endpoints(&[1]);
    cl.remove_member("etcd-3", &one).await;
    cl.remove_member("etcd-2", &one).await;
    let alone = Coordination {
        enabled: Enabled::Auto,
        lock_timeout: Duration::from_secs(30),
        gate_timeout: Duration::from_secs(20),
        ..conf(&cl.fixtures, ports.endpoints(&[1]))
    };
    let t0 = Instant::now();
    let mut g = gate(&alone, "etcd-1");
    g.before(&Step::new(Target::Pod("kube-apiserver".into())))
        .await
        .expect("a cluster of one, nothing named: not coordinated");
    assert_eq!(g.lock_wait, None, "no lock taken");
    g.finish().await;
    eprintln!(
        "one member, no other API server named: went ahead after {:?}",
        t0.elapsed()
    );

    let duplex = Coordination {
        apiservers: vec!["https://127.0.0.1:22543".into()],
        gate_timeout: Duration::from_secs(4),
        ..alone
    };
    let foreseen = gate(&duplex, "etcd-1").outlook().await;
    eprintln!("check says: {foreseen:?}");
    assert_eq!(foreseen.restarts, "coordinated", "{foreseen:?}");
    let mut g = gate(&duplex, "etcd-1");
    let why = g
        .before(&Step::new(Target::Pod("kube-apiserver".into())))
        .await
        .expect_err("the other API server is down");
    eprintln!("one member, the other API server down: {why}");
    assert!(g.lock_wait.is_some(), "the lock was taken");
    assert!(
        why.to_string()
            .contains("127.0.0.1:22543 ([coordination] apiservers): "),
        "{why}"
    );
    g.finish().await;

    // etcd's one member restarts under the lock, slower than the lease's margin: etcd serves
    // nothing meanwhile, and the lock's key is read back once it is back.
    let _other = ApiServer::start(&cl.fixtures, 22543);
    let mut g = gate(&duplex, "etcd-1");
    g.before(&step("etcd-1.service"))
        .await
        .expect("the one member's restart");
    cl.systemctl(&["stop", "etcd-1.service"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cl.systemctl(&["start", "etcd-1.service"]);
    g.after(&step("etcd-1.service"), true)
        .await
        .expect("the lock's key read back, intact");
    g.before(&Step::new(Target::Pod("kube-apiserver".into())))
        .await
        .expect("the other API server answers");
    g.finish().await;
    let left = cl.etcdctl(&["get", "--prefix", "--keys-only", "/certrenewd/test-lock/"]);
    assert_eq!(left.trim(), "", "the lock released");
}

/// kubespray's second cluster for events: `etcd-events.service` runs a member of a cluster
/// of its own. Its restart is gated on that cluster's quorum, not on the lock's cluster
/// (healthy here): with one events member down, restarting this node's would leave one of
/// three.
#[tokio::test]
async fn an_etcd_of_another_cluster_is_gated_on_its_own_quorum() {
    let (main, events) = (Ports { base: 23000 }, Ports { base: 23500 });
    let Some(a) = Cluster::start(main) else {
        return;
    };
    let Some(b) = Cluster::start_with(events, Some(&a)) else {
        return;
    };
    b.systemctl(&["stop", "etcd-3.service"]);
    let unit = |name: &str, ports: Ports| certrenewd::components::UnitSettings {
        unit: name.into(),
        exec_start: vec![(
            "/usr/bin/etcd".into(),
            vec![
                "etcd".into(),
                "--name=etcd-1".into(),
                format!("--listen-client-urls={}", ports.endpoints(&[1])),
                format!("--advertise-client-urls={}", ports.endpoints(&[1])),
                "--cert-file=/etc/etcd/etcd-server.crt".into(),
            ],
        )],
        environment: Vec::new(),
        environment_files: Vec::new(),
    };
    let empty = tempfile::tempdir().unwrap();
    let node = NodeReading::read_with(
        empty.path(),
        &[
            unit("etcd.service", main),
            unit("etcd-events.service", events),
        ],
    );
    let c = conf(&a.fixtures, main.endpoints(&[1, 2, 3]));
    let mut g = gate(&c, "etcd-1").knowing(&node);
    let t0 = Instant::now();
    let why = g
        .before(&step("etcd-events.service"))
        .await
        .expect_err("its own cluster has a member down");
    eprintln!(
        "etcd-events, one of its members down, after {:?}: {why}",
        t0.elapsed()
    );
    assert!(matches!(why, Hold::Unhealthy(_)), "{why:?}");
    let why = why.to_string();
    assert!(
        why.contains(&format!(
            "(the cluster at {}, not the lock's)",
            events.endpoints(&[1])
        )),
        "{why}"
    );
    assert!(
        why.contains("1 of 3 voting members would stay healthy"),
        "{why}"
    );
    // The lock's own etcd is gated on the lock's cluster, healthy.
    g.before(&step("etcd.service"))
        .await
        .expect("the main cluster is healthy");
    g.finish().await;

    b.systemctl(&["start", "etcd-3.service"]);
    let mut g = gate(&c, "etcd-1").knowing(&node);
    let t0 = Instant::now();
    loop {
        match g.before(&step("etcd-events.service")).await {
            Ok(()) => break,
            Err(why) => {
                assert!(t0.elapsed() < Duration::from_secs(30), "{why}");
                g.finish().await;
                g = gate(&c, "etcd-1").knowing(&node);
            }
        }
    }
    eprintln!(
        "etcd-events, its cluster whole again: allowed after {:?}",
        t0.elapsed()
    );
    g.after(&step("etcd-events.service"), true)
        .await
        .expect("its member healthy in its own cluster");
    g.finish().await;
}

/// A CA due on a controller whose only etcd client certificate has expired: the pass
/// renews that certificate first and agrees on the CA's re-issue as the client it just
/// renewed (not installed yet), in the same pass. Before, the agreement went as the expired
/// client, etcd refused it, and the CA waited for the next pass.
#[test]
fn a_cas_agreement_goes_as_the_client_this_pass_renewed() {
    let ports = Ports { base: 24000 };
    let Some(cl) = Cluster::start(ports) else {
        return;
    };
    let dir = cl.aging_cas("fresh-identity");
    // The node's etcd directory: the cluster's CA with its key, and etcd-client.crt (CN=root)
    // expired, the only client identity configured.
    cl.copy_etcd_dir(&dir);
    let etcd = dir.join("etcd");
    let client = etcd.join("etcd-client");
    let expired = std::fs::read(client.with_extension("crt")).unwrap();
    let config = dir.join("certrenewd.toml");
    let agreeing = Agreeing {
        member: "etcd-1",
        endpoints: &ports.endpoints(&[1, 2, 3]),
        client: &client,
        ca: &etcd.join("ca.crt"),
        lock_prefix: "/certrenewd/fresh-test",
    };
    let text = agreeing.config(&dir, &[&etcd, &dir.join("pki")]);
    std::fs::write(&config, format!("validity_days = 365\n{text}")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "renew",
            "--no-restart",
        ])
        .env("CERTRENEWD_LOG", "certrenewd=info")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for l in stderr
        .lines()
        .filter(|l| l.contains("CA ") || l.contains("not re-issued"))
    {
        eprintln!("{l}");
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_ne!(
        std::fs::read(client.with_extension("crt")).unwrap(),
        expired,
        "the client certificate renewed"
    );
    assert!(
        stdout.contains(&format!(
            "renewed       {}",
            dir.join("pki/ca.crt").display()
        )),
        "the CA re-issued in the same pass:\n{stdout}"
    );
    assert!(
        stderr.contains("issued here and published for the cluster"),
        "{stderr}"
    );
}
