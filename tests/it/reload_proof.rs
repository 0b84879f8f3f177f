//! The proof a reload rests on, against a real 3-member etcd cluster (Debian's etcd, mutual
//! TLS) with openssl's certificates: a member given a renewed certificate by a rename serves
//! it on its next handshake with no restart, and the proof sees that; a certificate its
//! clients would refuse (another CA, not yet valid, without the name they dial) is told
//! apart from one not read yet; a renewed client pair is accepted with a real request, or
//! refused.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use certrenewd::components::Kind;
use certrenewd::components::NodeReading;
use certrenewd::components::reload_rules::{Restart, Version, decide};
use certrenewd::restart::reload_proof::{
    NotProven, Served, Unproven, etcd_accepts, prove_file, served, served_once,
};
use certrenewd::restart::{Systemd, UnitControl};
use common::e2e::mkpki;
use common::etcd_e2e::Ports;
use common::pki::{ec_key, openssl, self_signed_ca};
use common::sandbox::Sandbox;

const PORTS: Ports = Ports { base: 25000 };

/// Three members of a cluster in the sandbox, each with its own serving and peer
/// certificate in `work/m{N}` issued by openssl (those of `due` 355 days ago for 365 days,
/// as one is due in life), and the configuration of member `node`'s controller, its
/// certificate watched with the default `on_renew = "reload"`.
struct Members {
    work: PathBuf,
    ca_dir: PathBuf,
    ca: PathBuf,
    client: (PathBuf, PathBuf),
    vars: Vec<(&'static str, String)>,
    config: PathBuf,
}

impl Members {
    fn start(sb: &Sandbox, ports: Ports, due: &[u16], node: u16) -> Members {
        ports.assert_free();
        let fixtures = sb.dir().join("pki");
        mkpki("starlingx", &fixtures);
        let etc = fixtures.join("etc/etcd");
        let work = sb.dir().join("work");
        let ca_dir = work.join("ca");
        fs::create_dir_all(&ca_dir).unwrap();
        for f in ["ca.crt", "ca.key"] {
            fs::copy(etc.join(f), ca_dir.join(f)).unwrap();
        }
        let (ca, ca_key) = (ca_dir.join("ca.crt"), ca_dir.join("ca.key"));
        for n in 1..=3 {
            let dir = work.join(format!("m{n}"));
            fs::create_dir_all(&dir).unwrap();
            fs::copy(etc.join("etcd-server.key"), dir.join("etcd-server.key")).unwrap();
            issue(
                &dir.join("etcd-server.key"),
                (&ca, &ca_key),
                "DNS:localhost,IP:127.0.0.1",
                due.contains(&n).then_some("-355d"),
                &dir.join("etcd-server.crt"),
            );
        }
        let client = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
        let client = (client.with_extension("crt"), client.with_extension("key"));
        let s = |p: &Path| p.display().to_string();
        let vars = vec![
            ("SANDBOX_ETCD_PORT_BASE", ports.base.to_string()),
            (
                "SANDBOX_ETCD_SERVER_CERT",
                format!("{}/m{{N}}/etcd-server.crt", s(&work)),
            ),
            (
                "SANDBOX_ETCD_SERVER_KEY",
                format!("{}/m{{N}}/etcd-server.key", s(&work)),
            ),
            ("SANDBOX_ETCD_CLIENT_CERT", s(&client.0)),
            ("SANDBOX_ETCD_CLIENT_KEY", s(&client.1)),
        ];
        fs::copy(&ca, etc.join("ca.crt")).unwrap();
        let m = Members {
            config: work.join("certrenewd.toml"),
            work,
            ca_dir,
            ca,
            client,
            vars,
        };
        sb.start_etcd(&m.ca_dir, &m.vars()).expect("etcd cluster");
        let endpoints: Vec<String> = (1..=3)
            .map(|n| format!("\"https://127.0.0.1:{}\"", ports.client(n)))
            .collect();
        fs::write(
            &m.config,
            format!(
                "bus = \"user\"\nstate_dir = \"{state}\"\nbackup_dir = \"{state}/backup\"\n\
                 metrics_file = \"{state}/metrics.prom\"\n\
                 restart_timeout_secs = 30\n\
                 [coordination]\nenabled = true\nendpoints = [{endpoints}]\ncert = \"{cert}\"\n\
                 key = \"{key}\"\nca = \"{ca}\"\nmember_name = \"etcd-{node}\"\nlock_timeout_secs = 60\n\
                 [[watch]]\npath = \"{cadir}\"\n\
                 [[watch]]\npath = \"{dir}\"\nunits = [\"etcd-{node}.service\"]\n",
                state = m.work.join("state").display(),
                endpoints = endpoints.join(", "),
                cert = m.client.0.display(),
                key = m.client.1.display(),
                ca = m.ca.display(),
                cadir = m.ca_dir.display(),
                dir = m.work.join(format!("m{node}")).display(),
            ),
        )
        .unwrap();
        m
    }

    /// The `SANDBOX_ETCD_*` variables of this cluster.
    fn vars(&self) -> Vec<(&str, &str)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}

/// A certificate for `key` signed by `ca`, issued by openssl at `when` (a faketime offset,
/// `+2d`) or now, with `sans`, written to `out` by a rename as an installer does.
fn issue(key: &Path, ca: (&Path, &Path), sans: &str, when: Option<&str>, out: &Path) {
    let dir = out.parent().unwrap();
    let (csr, ext, tmp) = (dir.join("t.csr"), dir.join("t.ext"), dir.join("t.crt.tmp"));
    let s = |p: &Path| p.display().to_string();
    openssl(&[
        "req",
        "-new",
        "-key",
        &s(key),
        "-subj",
        "/CN=etcd-server",
        "-out",
        &s(&csr),
    ]);
    fs::write(
        &ext,
        format!(
            "subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        ),
    )
    .unwrap();
    let args = [
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(ca.0),
        "-CAkey",
        &s(ca.1),
        "-set_serial",
        &format!("0x{:x}", rand_serial()),
        "-days",
        "365",
        "-extfile",
        &s(&ext),
        "-out",
        &s(&tmp),
    ];
    match when {
        Some(offset) => {
            // libfaketime preloaded, not Debian's `faketime` wrapper: the wrapper names its
            // semaphore by its PID, which a wrapper in a sandbox's PID namespace may share
            // ("sem_open: File exists").
            let o = std::process::Command::new("openssl")
                .args(args)
                .env("LD_PRELOAD", common::libfaketime())
                .env("FAKETIME", offset)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        None => {
            openssl(&args);
        }
    }
    fs::rename(&tmp, out).unwrap();
}

/// `cmd ARGS` in the sandbox: its output, and its stdout and stderr together (printed).
fn run<const N: usize>(sb: &Sandbox, cmd: &str, args: [&str; N]) -> (std::process::Output, String) {
    let o = sb.exec(cmd, args);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    println!("{out}");
    (o, out)
}

/// The value of the series of gauge `family` whose `outcome` label is `outcome`.
fn gauge(metrics: &str, family: &str, outcome: &str) -> Option<String> {
    let series = metrics.lines().find(|l| {
        l.starts_with(&format!("{family}{{")) && l.contains(&format!("outcome=\"{outcome}\""))
    });
    series
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}

/// `renew --force CERT` by the failpoints build, with `CERTRENEWD_FAILPOINT=failpoint`.
fn renew_with_failpoint(
    sb: &Sandbox,
    failpoint: &str,
    config: &Path,
    cert: &Path,
) -> (std::process::Output, String) {
    let failing = common::failpoints::binary();
    run(
        sb,
        "env",
        [
            &format!("CERTRENEWD_FAILPOINT={failpoint}"),
            failing.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "renew",
            "--force",
            cert.to_str().unwrap(),
        ],
    )
}

fn rand_serial() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.as_nanos() as u64 | 1 << 62
}

/// `renew --output json` with `config` in the sandbox: its exit code and its report.
fn renew_json(sb: &Sandbox, config: &Path) -> (Option<i32>, serde_json::Value) {
    let bin = env!("CARGO_BIN_EXE_certrenewd");
    let o = sb.exec(
        bin,
        [
            "--config",
            config.to_str().unwrap(),
            "renew",
            "--output",
            "json",
        ],
    );
    let report = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), report)
}

/// The entry of `cert` among a report's certificates.
fn entry<'a>(report: &'a serde_json::Value, cert: &Path) -> &'a serde_json::Value {
    (report["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"] == cert.display().to_string())
        .unwrap_or_else(|| panic!("no {} in {report:#}", cert.display()))
}

fn serial(cert: &Path) -> String {
    let out = openssl(&[
        "x509",
        "-in",
        &cert.display().to_string(),
        "-noout",
        "-serial",
    ]);
    out.trim().trim_start_matches("serial=").to_lowercase()
}

fn main_pid(sb: &Sandbox, unit: &str) -> String {
    sb.unit_property(unit, "MainPID").unwrap()
}

#[tokio::test]
async fn a_member_serves_a_renamed_certificate_without_a_restart_and_the_proof_tells_good_from_bad()
{
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    PORTS.assert_free();
    let fixtures = sb.dir().join("pki");
    mkpki("starlingx", &fixtures);
    let pki = fixtures.join("etc/etcd");
    for n in 1..=3 {
        for ext in ["crt", "key"] {
            fs::copy(
                pki.join(format!("etcd-server.{ext}")),
                pki.join(format!("etcd-server-{n}.{ext}")),
            )
            .unwrap();
        }
    }
    let client = fixtures.join("etc/kubernetes/pki/apiserver-etcd-client");
    let (client_crt, client_key) = (client.with_extension("crt"), client.with_extension("key"));
    let base = PORTS.base.to_string();
    let vars = [
        ("SANDBOX_ETCD_PORT_BASE", base.as_str()),
        ("SANDBOX_ETCD_SERVER_CERT", "etcd-server-{N}.crt"),
        ("SANDBOX_ETCD_SERVER_KEY", "etcd-server-{N}.key"),
        ("SANDBOX_ETCD_CLIENT_CERT", client_crt.to_str().unwrap()),
        ("SANDBOX_ETCD_CLIENT_KEY", client_key.to_str().unwrap()),
    ];
    sb.start_etcd(&pki, &vars).expect("etcd cluster");
    let (ca, ca_key) = (pki.join("ca.crt"), pki.join("ca.key"));
    let (cert, key) = (pki.join("etcd-server-2.crt"), pki.join("etcd-server-2.key"));
    let pid = main_pid(&sb, "etcd-2.service");
    let on = |port: u16, cert: &Path| Served {
        endpoint: format!("127.0.0.1:{port}"),
        name: "127.0.0.1".into(),
        trust: ca.clone(),
        cert: cert.to_path_buf(),
        client: Some((client_crt.clone(), client_key.clone())),
    };
    let urls: Vec<String> = (1..=3)
        .map(|n| format!("https://127.0.0.1:{}", PORTS.client(n)))
        .collect();

    // The server's own answer names its version; its client pair is accepted.
    let version = etcd_accepts(&urls, &ca, &client_crt, &client_key)
        .await
        .expect("the client pair is accepted");
    let version = version.expect("etcd answers its version");
    println!("etcd answers version {version}");
    assert!(decide(Kind::Etcd, "cert-file", Some(version), false).is_ok());
    if version < Version(3, 5, 0) {
        assert!(matches!(
            decide(Kind::Etcd, "client-cert-file", Some(version), false),
            Err(Restart::TooOld { .. })
        ));
    }

    // Renewed by a rename, same key: served on the next handshake, client and peer URL.
    let good_sans = "DNS:localhost,IP:127.0.0.1";
    issue(&key, (&ca, &ca_key), good_sans, None, &cert);
    let new = serial(&cert);
    for port in [PORTS.client(2), PORTS.peer(2)] {
        let got = served(&on(port, &cert), Duration::from_secs(10)).await;
        assert_eq!(got, Ok(new.clone()), "port {port}");
    }
    println!("etcd-2 serves serial {new} on its client and peer URLs, MainPID {pid} kept");

    // What the member has not read is stale, never proven: member 3 was given nothing.
    let elsewhere = sb.dir().join("not-read.crt");
    issue(&key, (&ca, &ca_key), good_sans, None, &elsewhere);
    match served_once(&on(PORTS.client(3), &elsewhere), Duration::from_secs(5)).await {
        Err(e @ NotProven::Stale { .. }) => assert!(e.may_pass_later(), "{e}"),
        other => panic!("a certificate not read is stale: {other:?}"),
    }

    // Served, and refused as its clients would: each a final verdict, with the reason.
    let other = sb.dir().join("other-ca");
    fs::create_dir_all(&other).unwrap();
    let (other_key, other_ca) = (other.join("ca.key"), other.join("ca.crt"));
    ec_key(&other_key);
    self_signed_ca(&other_key, "/CN=another-etcd-ca", &other_ca);
    let (named_key, named_ca) = (other.join("named.key"), other.join("named.crt"));
    ec_key(&named_key);
    let subject = openssl(&[
        "x509",
        "-in",
        ca.to_str().unwrap(),
        "-noout",
        "-subject",
        "-nameopt",
        "compat",
    ]);
    self_signed_ca(
        &named_key,
        subject.trim().trim_start_matches("subject="),
        &named_ca,
    );
    let bad = [
        (
            "another CA",
            (&other_ca, &other_key),
            good_sans,
            None,
            "does not chain to a CA in",
        ),
        (
            "another CA of the same name",
            (&named_ca, &named_key),
            good_sans,
            None,
            "signature does not verify",
        ),
        (
            "not yet valid",
            (&ca, &ca_key),
            good_sans,
            Some("+2d"),
            "not valid before",
        ),
        (
            "without the name dialed",
            (&ca, &ca_key),
            "DNS:localhost",
            None,
            "not valid for 127.0.0.1",
        ),
    ];
    for (what, signer, sans, when, why) in bad {
        issue(&key, (signer.0, signer.1), sans, when, &cert);
        match served(&on(PORTS.client(2), &cert), Duration::from_secs(10)).await {
            Err(e @ NotProven::Refused { .. }) => {
                assert!(!e.may_pass_later(), "{what}: {e}");
                assert!(e.to_string().contains(why), "{what}: {e}");
                println!("{what}: {e}");
            }
            other => panic!("{what}: served and refused expected, got {other:?}"),
        }
    }
    issue(&key, (&ca, &ca_key), good_sans, None, &cert);
    assert!(
        served(&on(PORTS.client(2), &cert), Duration::from_secs(10))
            .await
            .is_ok()
    );

    // A client pair of another CA is refused by the member, with etcd's reason.
    let stranger: PathBuf = other.join("client.crt");
    issue(&key, (&other_ca, &other_key), good_sans, None, &stranger);
    match etcd_accepts(&urls[1..2], &ca, &stranger, &key).await {
        Err(e @ NotProven::PairRefused { .. }) => println!("a pair of another CA: {e}"),
        other => panic!("a pair of another CA must be refused: {other:?}"),
    }

    // The same, from the node's reading of etcd-2.service as systemd runs it: every place
    // its settings say it serves the file (client and peer URLs), or why it restarts.
    let sd = Systemd::connect_address(&sb.bus_address()).await.unwrap();
    let units = sd.unit_settings(&["etcd-2.service".to_string()]).await;
    let node = NodeReading::read_with(&sb.dir().join("no-manifests"), &units);
    let member = &node.units[0];
    let pair = Some((client_crt.clone(), client_key.clone()));
    let bound = Duration::from_secs(10);
    issue(&key, (&ca, &ca_key), good_sans, None, &cert);
    let proven = prove_file(member, &cert, Some(version), false, pair.clone(), bound)
        .await
        .expect("proven where it serves the file");
    println!("proven: {}", proven.join("; "));
    assert_eq!(proven.len(), 2, "its client and peer URLs: {proven:?}");
    let why = prove_file(member, &cert, None, false, pair.clone(), bound).await;
    assert!(
        matches!(why, Err(Unproven::Restart(ref w)) if w.contains("not known")),
        "{why:?}"
    );
    let why = prove_file(member, &cert, Some(version), true, pair.clone(), bound).await;
    assert!(
        matches!(why, Err(Unproven::Restart(ref w)) if w.contains("half-installed")),
        "{why:?}"
    );
    issue(&key, (&ca, &ca_key), "DNS:localhost", None, &cert);
    let why = prove_file(member, &cert, Some(version), false, pair.clone(), bound).await;
    assert!(matches!(why, Err(Unproven::Refused(_))), "{why:?}");
    issue(&key, (&ca, &ca_key), good_sans, None, &cert);

    assert_eq!(
        main_pid(&sb, "etcd-2.service"),
        pid,
        "etcd-2 never restarted"
    );
    let (_, health) = sb.etcdctl(&pki, &vars, &["endpoint", "health", "--cluster"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
}

/// `certrenewd renew` on the node of member etcd-2 of a real 3-member cluster, its serving
/// and peer certificate due (issued 355 days ago for 365 days, by openssl) and its watch
/// saying `on_renew = "reload"` (by default): the certificate is renewed under the restart lock, the
/// member serves it on its client and peer URLs at once, and it is never restarted.
#[test]
fn a_members_due_certificate_is_reloaded_under_the_lock_and_never_restarted() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let ports = Ports { base: 27000 };
    let m = Members::start(&sb, ports, &[2, 3], 2);
    let vars = m.vars();
    let (work, ca_dir, ca, config) = (&m.work, &m.ca_dir, &m.ca, &m.config);
    let (client_crt, client_key) = (&m.client.0, &m.client.1);
    let due = work.join("m2/etcd-server.crt");
    let old = serial(&due);
    let pid = main_pid(&sb, "etcd-2.service");
    let bin = env!("CARGO_BIN_EXE_certrenewd");
    let renew = || run(&sb, bin, ["--config", config.to_str().unwrap(), "renew"]);

    // The dry run says what the pass does.
    let o = sb.exec(
        bin,
        ["--config", config.to_str().unwrap(), "renew", "--dry-run"],
    );
    let dry = String::from_utf8_lossy(&o.stdout).into_owned();
    println!("{dry}");
    assert!(dry.contains("would reload  etcd-2.service: its renewed files would be installed under the restart lock"), "{dry}");
    assert!(dry.contains("1 unit: 1 would be reloaded"), "{dry}");
    // And `check`, per component: the due certificate reloaded (to be proven); the CA,
    // whose watch names no unit, reaches none; with the watch's default, a restart.
    let check = |config: &Path| {
        let o = sb.exec(bin, ["--config", config.to_str().unwrap(), "check"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let text = check(config);
    println!("{text}");
    assert!(
        text.contains(&format!(
            "etcd-2.service: would reload {} (to be proven)",
            due.display()
        )),
        "{text}"
    );
    let renewals = |config: &Path| {
        let args = [
            "--config",
            config.to_str().unwrap(),
            "check",
            "--output",
            "json",
        ];
        let json: serde_json::Value = serde_json::from_slice(&sb.exec(bin, args).stdout).unwrap();
        let etcd2 = (json["components"].as_array().unwrap().iter())
            .find(|c| c["name"] == "etcd-2.service")
            .cloned()
            .unwrap();
        (etcd2["renewals"].as_array().unwrap().iter())
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap().to_string();
                (s("path"), s("way"), s("why"))
            })
            .collect::<Vec<_>>()
    };
    let [(path, way, _)] = &renewals(config)[..] else {
        panic!("{text}");
    };
    assert_eq!(
        (path.as_str(), way.as_str()),
        (due.to_str().unwrap(), "reload")
    );
    let restarting = work.join("restart.toml");
    let text = fs::read_to_string(config).unwrap();
    let unit = "units = [\"etcd-2.service\"]\n";
    assert!(text.contains(unit), "{text}");
    let text = text.replace(unit, &format!("{unit}on_renew = \"restart\"\n"));
    fs::write(&restarting, &text).unwrap();
    let [(_, way, why)] = &renewals(&restarting)[..] else {
        panic!("{text}");
    };
    assert_eq!(
        (way.as_str(), why.as_str()),
        ("restart", "its watch says on_renew = \"restart\"")
    );

    // Another controller holds the restart lock: installing is restarting, so nothing is
    // installed; the certificate stays due, and the pass says why.
    let holder = sb.hold_restart_lock(ca_dir, &vars);
    std::thread::sleep(Duration::from_secs(2));
    let edit = |from: &str, to: &str| {
        let text = fs::read_to_string(config).unwrap();
        fs::write(config, text.replace(from, to)).unwrap();
    };
    edit("lock_timeout_secs = 60", "lock_timeout_secs = 3");
    let (o, out) = renew();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(
        serial(&due),
        old,
        "nothing installed while the lock is another's: {out}"
    );
    assert!(out.contains("is installed under the restart lock"), "{out}");
    drop(holder);
    edit("lock_timeout_secs = 3", "lock_timeout_secs = 60");

    let (o, out) = renew();
    assert_eq!(o.status.code(), Some(0), "{out}");
    let new = serial(&due);
    assert_ne!(new, old, "renewed: {out}");
    assert!(
        out.contains("etcd-2.service: read again, no restart: "),
        "{out}"
    );
    // The peer certificate is also the member's client to its peers: presented as such to
    // another member's peer URL, which checks it.
    let as_peer = |n: u16| {
        format!(
            "{} as a peer's client: 127.0.0.1:{} accepted it (GET /version said 200)",
            due.display(),
            ports.peer(n)
        )
    };
    assert!(
        out.contains(&as_peer(1)) || out.contains(&as_peer(3)),
        "{out}"
    );
    assert_eq!(
        main_pid(&sb, "etcd-2.service"),
        pid,
        "etcd-2 never restarted: {out}"
    );
    let metrics = fs::read_to_string(work.join("state/metrics.prom")).unwrap();
    let reloads = |outcome: &str| gauge(&metrics, "certrenewd_last_pass_reloads", outcome);
    assert_eq!(reloads("proven").as_deref(), Some("1"), "{metrics}");
    assert_eq!(reloads("restarted").as_deref(), Some("0"), "{metrics}");
    let served = |port: u16| Served {
        endpoint: format!("127.0.0.1:{port}"),
        name: "127.0.0.1".into(),
        trust: ca.clone(),
        cert: due.clone(),
        client: Some((client_crt.clone(), client_key.clone())),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for port in [ports.client(2), ports.peer(2)] {
        let got = rt.block_on(served_once(&served(port), Duration::from_secs(5)));
        assert_eq!(got, Ok(new.clone()), "port {port}");
    }
    // A renewal the member's clients would refuse, past the checks before the install (a
    // fault injected where the proof is made): put back at once, the member never
    // restarted, the pass failed.
    let before = serial(&due);
    let failing = common::failpoints::binary();
    let (o, out) = renew_with_failpoint(&sb, "reload-proof:error@1", config, &due);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(serial(&due), before, "put back: {out}");
    assert!(out.contains("rolled back"), "{out}");
    assert_eq!(
        main_pid(&sb, "etcd-2.service"),
        pid,
        "etcd-2 never restarted: {out}"
    );
    let got = rt.block_on(served_once(
        &served(ports.client(2)),
        Duration::from_secs(5),
    ));
    assert_eq!(
        got,
        Ok(before.clone()),
        "the member serves the old one again"
    );

    // And goes no further: etcd-3's controller, its certificate due too, installs nothing
    // at its turn while etcd-2's refusal stands; once a pass on etcd-2 refuses nothing, it
    // does.
    let due3 = work.join("m3/etcd-server.crt");
    let old3 = serial(&due3);
    let config3 = work.join("etcd-3.toml");
    let text = fs::read_to_string(config).unwrap();
    let text3 = text
        .replace(
            &*work.join("m2").to_string_lossy(),
            &work.join("m3").to_string_lossy(),
        )
        .replace("etcd-2", "etcd-3");
    fs::write(&config3, &text3).unwrap();
    let (o, out) = run(&sb, bin, ["--config", config3.to_str().unwrap(), "renew"]);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(serial(&due3), old3, "nothing installed: {out}");
    assert!(
        out.contains("a renewal at its turn was refused on etcd-2 (etcd-2.service at "),
        "{out}"
    );
    let o = sb.exec(
        bin,
        [
            "--config",
            config.to_str().unwrap(),
            "renew",
            "--force",
            due.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // etcd-3's node, with `rotate_keys`: a new key and its certificate are two renames a
    // reader on every handshake could fall between, so the member is stopped for them and
    // started after, under the lock. The moment between the renames is held open for 3 s
    // while a client shakes hands with the member again and again: never does one meet
    // the new key beside the old certificate (refused connections while it is down are
    // what a restart is).
    let pid3 = main_pid(&sb, "etcd-3.service");
    fs::write(&config3, format!("rotate_keys = true\n{text3}")).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shaking = {
        let done = done.clone();
        let at = Served {
            endpoint: format!("127.0.0.1:{}", ports.client(3)),
            ..served(0)
        };
        let at = Served {
            cert: due3.clone(),
            ..at
        };
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (mut shaken, mut down, mut failed) = (0, 0, Vec::new());
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                match rt.block_on(served_once(&at, Duration::from_secs(2))) {
                    Ok(_) | Err(NotProven::Stale { .. }) => shaken += 1,
                    // A pair that does not match is refused by the server with an alert
                    // (InternalError); a connection the stopping member closed, or one
                    // refused while it is down, is what a restart is.
                    Err(NotProven::Unreachable { why, .. }) if !why.contains("alert") => down += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (shaken, down, failed)
        })
    };
    let (o, out) = run(
        &sb,
        "env",
        [
            "CERTRENEWD_FAILPOINT=between-key-and-cert:sleep(3000)",
            failing.to_str().unwrap(),
            "--config",
            config3.to_str().unwrap(),
            "renew",
        ],
    );
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (shaken, down, failed) = shaking.join().unwrap();
    println!("handshakes: {shaken} made, {down} refused while down, failed: {failed:?}");
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_ne!(serial(&due3), old3, "renewed: {out}");
    assert_ne!(main_pid(&sb, "etcd-3.service"), pid3, "restarted: {out}");
    assert!(out.contains("restarted     etcd-3.service"), "{out}");
    assert!(
        out.contains("etcd-3.service: stopped to install its new key pairs with nothing reading them, then restarted; active (running)"),
        "{out}"
    );
    assert!(
        failed.is_empty(),
        "a handshake met a pair half installed: {failed:?}"
    );
    assert!(
        shaken > 10 && down > 10,
        "the handshakes ran beside the install: {shaken}, {down}"
    );

    let (_, health) = sb.etcdctl(ca_dir, &vars, &["endpoint", "health", "--cluster"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
}

/// A member that does not read its certificate again (etcd itself, started in a mount
/// namespace of its own where its certificates' directory is a copy made at its start, as
/// a container's mount of a single file pins that file: the rename that installs a renewal
/// is never seen by it):
/// the renewal is installed at its step, is not shown in use within the bound, and the
/// member is restarted there, under the lock, with the reason; then it serves the new one.
#[test]
fn a_member_that_does_not_read_its_certificate_again_is_restarted_at_its_step_with_the_reason() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let ports = Ports { base: 28000 };
    let m = Members::start(&sb, ports, &[1], 1);
    let vars = m.vars();
    let due = m.work.join("m1/etcd-server.crt");
    let old = serial(&due);
    let standin = m.work.join("standin/etcd");
    fs::create_dir_all(standin.parent().unwrap()).unwrap();
    fs::write(
        &standin,
        format!(
            "#!/bin/sh\nrm -rf {copy} && cp -a {dir} {copy} && \
             exec unshare -m --propagation private sh -c 'mount --bind {copy} {dir} && exec /usr/bin/etcd \"$@\"' etcd \"$@\"\n",
            dir = m.work.join("m1").display(),
            copy = m.work.join("standin/m1").display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&standin, fs::Permissions::from_mode(0o755)).unwrap();
    let unit = sb.dir().join("config/systemd/user/etcd-1.service");
    let text = fs::read_to_string(&unit).unwrap();
    let pinned = text.replace(
        "ExecStart=/usr/bin/etcd ",
        &format!("ExecStart={} ", standin.display()),
    );
    assert_ne!(pinned, text, "{text}");
    fs::write(&unit, pinned).unwrap();
    for args in [
        &["--user", "daemon-reload"][..],
        &["--user", "restart", "etcd-1.service"],
    ] {
        let o = sb.exec("systemctl", args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let pid = main_pid(&sb, "etcd-1.service");
    let at = Served {
        endpoint: format!("127.0.0.1:{}", ports.client(1)),
        name: "127.0.0.1".into(),
        trust: m.ca.clone(),
        cert: due.clone(),
        client: Some(m.client.clone()),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(served(&at, Duration::from_secs(20))),
        Ok(old.clone())
    );

    let bin = env!("CARGO_BIN_EXE_certrenewd");
    let (o, out) = run(&sb, bin, ["--config", m.config.to_str().unwrap(), "renew"]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let new = serial(&due);
    assert_ne!(new, old, "renewed: {out}");
    assert!(
        out.contains(&format!("restarted, not reloaded: {}", due.display()))
            && out.contains(&format!("still serves serial {old}, not the new {new}")),
        "{out}"
    );
    assert_ne!(main_pid(&sb, "etcd-1.service"), pid, "restarted: {out}");
    let got = rt.block_on(served_once(&at, Duration::from_secs(5)));
    assert_eq!(got, Ok(new), "the restarted member serves the renewal");
    let metrics = fs::read_to_string(m.work.join("state/metrics.prom")).unwrap();
    let restarted = gauge(&metrics, "certrenewd_last_pass_reloads", "restarted");
    assert_eq!(restarted.as_deref(), Some("1"), "{metrics}");
    let (_, health) = sb.etcdctl(&m.ca_dir, &vars, &["endpoint", "health", "--cluster"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
}

/// A client pair due on member etcd-2's node (issued 355 days ago for 365 days by the
/// cluster's CA, which etcd-2's `--trusted-ca-file` holds), read by nothing certrenewd
/// restarts: renewed, then presented to etcd-2's client listener with a real request
/// before the pass ends, and accepted. Renewed again with the renewal refused by the
/// member (a fault that presents a pair of another CA in its place): put back at once, the
/// pass failed with 250.003, the old certificate in place, the member never restarted.
#[test]
fn a_renewed_client_pair_is_presented_to_the_member_that_checks_it() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let ports = Ports { base: 29000 };
    let m = Members::start(&sb, ports, &[], 2);
    let (work, ca, ca_key, config) = (&m.work, &m.ca, &m.ca_dir.join("ca.key"), &m.config);
    let pair = work.join("m2/healthcheck-client.crt");
    let key = pair.with_extension("key");
    ec_key(&key);
    issue(&key, (ca, ca_key), "DNS:healthcheck", Some("-355d"), &pair);
    let old = serial(&pair);
    let pid = main_pid(&sb, "etcd-2.service");
    let bin = env!("CARGO_BIN_EXE_certrenewd");

    let (o, out) = run(&sb, bin, ["--config", config.to_str().unwrap(), "renew"]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let new = serial(&pair);
    assert_ne!(new, old, "renewed: {out}");
    assert!(
        out.contains(&format!(
            "client pair presented: 127.0.0.1:{} accepted it (GET /version said 200), verified against {}",
            ports.client(2),
            ca.display()
        )),
        "{out}"
    );

    let (o, out) = renew_with_failpoint(&sb, "pair-proof:error", config, &pair);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(serial(&pair), new, "put back: {out}");
    assert!(
        out.contains(&format!(
            "presented to the server that checks it and refused (127.0.0.1:{} refused the renewed client pair {}: it answered with the TLS alert",
            ports.client(2),
            pair.display()
        )),
        "{out}"
    );
    let (o, alarms) = run(&sb, bin, ["--config", config.to_str().unwrap(), "alarms"]);
    assert!(o.status.success(), "{alarms}");
    assert!(alarms.contains("250.003"), "{alarms}");
    assert_eq!(
        main_pid(&sb, "etcd-2.service"),
        pid,
        "etcd-2 never restarted"
    );

    // The member that checks it hung (listening, answering nothing): the pair stays, and
    // its proof is owed, alarmed and made by the next pass, never read as fine.
    let signal = |sig: &str| {
        let o = sb.exec("systemctl", ["--user", "kill", "-s", sig, "etcd-2.service"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    signal("STOP");
    let force = ["--config", config.to_str().unwrap(), "renew", "--force"];
    let (o, out) = run(
        &sb,
        bin,
        [
            force[0],
            force[1],
            force[2],
            force[3],
            pair.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
    let (o, again) = run(&sb, bin, ["--config", config.to_str().unwrap(), "renew"]);
    signal("CONT");
    assert_eq!(o.status.code(), Some(1), "still owed: {again}");
    assert!(
        again.contains(
            "1 client pair: presented again (owed by an earlier pass), 1 not accepted — failed"
        ),
        "{again}"
    );
    let unproven = serial(&pair);
    assert_ne!(unproven, new, "installed: {out}");
    let owed = format!(
        "renewed client pair {} not shown accepted by the server that checks it (etcd-2.service: cannot reach 127.0.0.1:{}: no answer within 5 s",
        pair.display(),
        ports.client(2)
    );
    assert!(out.contains(&owed), "{out}");
    let json = [
        "--config",
        config.to_str().unwrap(),
        "alarms",
        "--output",
        "json",
    ];
    let (_, alarms) = run(&sb, bin, json);
    assert!(alarms.contains(&owed), "{alarms}");
    let pairs = |outcome: &str| {
        let metrics = fs::read_to_string(work.join("state/metrics.prom")).unwrap();
        gauge(&metrics, "certrenewd_last_pass_client_pairs", outcome)
    };
    assert_eq!(pairs("unproven").as_deref(), Some("1"));
    let check_json = [
        "--config",
        config.to_str().unwrap(),
        "check",
        "--output",
        "json",
    ];
    let check: serde_json::Value =
        serde_json::from_slice(&sb.exec(bin, check_json).stdout).unwrap();
    assert_eq!(
        check["restarts_owed"]["client_pairs"],
        serde_json::json!([pair.display().to_string()]),
        "{check:#}"
    );

    let (o, out) = run(&sb, bin, ["--config", config.to_str().unwrap(), "renew"]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains(
            "1 client pair: presented again (owed by an earlier pass), 1 accepted — nothing renewed"
        ),
        "{out}"
    );
    assert_eq!(serial(&pair), unproven, "nothing renewed again: {out}");
    assert_eq!(pairs("accepted").as_deref(), Some("1"));
    assert_eq!(pairs("unproven").as_deref(), Some("0"));
    let (_, alarms) = run(&sb, bin, ["--config", config.to_str().unwrap(), "alarms"]);
    assert!(!alarms.contains("250.003"), "cleared: {alarms}");
    let check: serde_json::Value =
        serde_json::from_slice(&sb.exec(bin, check_json).stdout).unwrap();
    assert!(check.get("restarts_owed").is_none(), "{check:#}");

    // Owed again, and then its files removed: nothing is left to present, and the pair is
    // released in so many words, never dropped in silence.
    signal("STOP");
    let o = sb.exec(bin, force.iter().copied().chain([pair.to_str().unwrap()]));
    signal("CONT");
    assert_eq!(o.status.code(), Some(1), "owed");
    fs::remove_file(&pair).unwrap();
    fs::remove_file(&key).unwrap();
    let (o, out) = run(&sb, bin, ["--config", config.to_str().unwrap(), "renew"]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("1 client pair: owed by an earlier pass, not presented, no longer owed"),
        "{out}"
    );
    let released = format!(
        "client pair {}, whose proof an earlier pass left owed, is no longer owed: its file is no longer among the certificates watched",
        pair.display()
    );
    assert!(out.contains(&released), "said in the log: {out}");
    assert_eq!(pairs("not_presented").as_deref(), Some("1"));
    let check: serde_json::Value =
        serde_json::from_slice(&sb.exec(bin, check_json).stdout).unwrap();
    assert!(check.get("restarts_owed").is_none(), "{check:#}");

    // A renewal whose checking member is not running here at all: not owed, and its
    // certificate's reason says it was not presented, and why.
    ec_key(&key);
    issue(&key, (ca, ca_key), "DNS:healthcheck", Some("-355d"), &pair);
    let o = sb.exec("systemctl", ["--user", "stop", "etcd-2.service"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, report) = renew_json(&sb, config);
    assert_eq!(code, Some(0), "{report:#}");
    let cert = entry(&report, &pair);
    assert_eq!(cert["state"], "renewed", "{report:#}");
    let why = format!(
        "renewed client pair {} not presented: the server that checks it is not running here (etcd-2.service: nothing listens at 127.0.0.1:{}",
        pair.display(),
        ports.client(2)
    );
    assert!(
        cert["reason"].as_str().is_some_and(|r| r.starts_with(&why)),
        "{report:#}"
    );
    assert_eq!(pairs("not_presented").as_deref(), Some("1"));
    assert_eq!(pairs("unproven").as_deref(), Some("0"));
}

/// kube-apiserver's client pair to kubelet (`apiserver-kubelet-client`, kubeadm's as cfssl
/// made it, due) renewed, and presented to kubelet, which checks it: kubelet.service in the
/// sandbox's systemd is a stand-in serving kubelet's API on the `address` and `port` of its
/// `--config` file (a KubeletConfiguration) with openssl s_server, requiring a client
/// certificate of that file's `clientCAFile` as kubelet's x509 authentication does, with its
/// own self-signed pair, as kubelet serves by default (kube-apiserver verifies it only
/// with `--kubelet-certificate-authority`, which kubeadm does not set). Accepted: said in
/// the certificate's reason. A renewal kubelet refuses (the failpoint presents a throwaway
/// pair instead): put back, the pass failed.
#[test]
fn a_renewed_kubelet_client_pair_is_presented_to_kubelet() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let port = 30250;
    let tree = sb.dir().join("kubeadm");
    common::e2e::mkpki_with("kubeadm", &tree, &["--backdate"]);
    let pki = tree.join("etc/kubernetes/pki");
    let pair = pki.join("apiserver-kubelet-client.crt");
    let kubelet = sb.dir().join("kubelet");
    fs::create_dir_all(kubelet.join("pki")).unwrap();
    let s = |p: &Path| p.display().to_string();
    let (serving, serving_key) = (
        kubelet.join("pki/kubelet.crt"),
        kubelet.join("pki/kubelet.key"),
    );
    // As kubelet makes its own when no tlsCertFile is given: self-signed, its CA in it.
    ec_key(&serving_key);
    self_signed_ca(&serving_key, "/CN=sandbox-ca@1764547200", &serving);
    let config = kubelet.join("config.yaml");
    fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             address: 127.0.0.1\nport: {port}\nauthentication:\n  x509:\n    clientCAFile: {}\n\
             tlsCertFile: {}\ntlsPrivateKeyFile: {}\n",
            s(&pki.join("ca.crt")),
            s(&serving),
            s(&serving_key)
        ),
    )
    .unwrap();
    let bin = kubelet.join("kubelet");
    fs::write(
        &bin,
        "#!/bin/sh\n\
         # kubelet's API as far as client pairs go: its --config file's address and port,\n\
         # its serving pair, a client certificate of its clientCAFile required.\n\
         for a in \"$@\"; do case $a in --config=*) c=${a#--config=};; esac; done\n\
         v() { sed -n \"s/^ *$1: *//p\" \"$c\"; }\n\
         exec openssl s_server -accept \"$(v address):$(v port)\" -www -cert \"$(v tlsCertFile)\" \\\n\
           -key \"$(v tlsPrivateKeyFile)\" -CAfile \"$(v clientCAFile)\" -Verify 1 -verify_return_error\n",
    )
    .unwrap();
    fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let unit = format!("[Service]\nExecStart={} --config={}\n", s(&bin), s(&config));
    sb.install_unit("kubelet.service", &unit).unwrap();
    sb.systemctl(["start", "kubelet.service"]).unwrap();
    let state = sb.dir().join("state");
    let conf = sb.dir().join("certrenewd.toml");
    fs::write(
        &conf,
        format!(
            "bus = \"user\"\nstate_dir = \"{state}\"\nbackup_dir = \"{state}/backup\"\n\
             manifests_dir = \"{manifests}\"\n\
             [coordination]\nenabled = false\n\
             [[watch]]\npath = \"{pki}\"\n",
            state = s(&state),
            manifests = s(&tree.join("etc/kubernetes/manifests")),
            pki = s(&pki),
        ),
    )
    .unwrap();
    let old = serial(&pair);
    let (code, report) = renew_json(&sb, &conf);
    assert_eq!(code, Some(0), "{report:#}");
    let new = serial(&pair);
    assert_ne!(new, old, "renewed: {report:#}");
    assert_eq!(
        entry(&report, &pair)["reason"].as_str().unwrap_or(""),
        format!(
            "client pair presented: 127.0.0.1:{port} authenticated it (GET /healthz said 200), not verified, as its reader does not verify it"
        ),
        "{report:#}"
    );

    let (o, out) = renew_with_failpoint(&sb, "pair-proof:error", &conf, &pair);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(serial(&pair), new, "put back: {out}");
    assert!(
        out.contains(&format!(
            "presented to the server that checks it and refused (127.0.0.1:{port} refused the renewed client pair {}: it answered with the TLS alert",
            pair.display()
        )),
        "{out}"
    );
}
