//! `renew --no-restart` on a real systemd user manager: it restarts nothing, but what it
//! installed is owed a restart by hand. `check` shows that and `--fail-due` fails for it; a
//! later pass does not restart it (the operator chose the window), and once the unit and
//! the static pod's process have started again after the install, `check` passes and the
//! next pass forgets the record.
//!
//! The static pod's process is a unit of its own running the manifest's command line, as
//! kubelet would run its container: what certrenewd looks for is a process with that
//! command line that started after the install. The certificate is due as in life: issued
//! 355 days ago for 365 days (faketime, openssl).

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::due_ec_leaf;
use common::sandbox::Sandbox;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

fn run(sb: &Sandbox, config: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    sb.exec(BIN, all)
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn check_json(sb: &Sandbox, config: &Path) -> (Option<i32>, serde_json::Value) {
    let o = run(sb, config, &["check", "--fail-due", "--output", "json"]);
    let json = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    (o.status.code(), json)
}

#[test]
fn no_restart_leaves_restarts_owed_by_hand_until_each_has_started_again() {
    // Under CI a machine that cannot host the sandbox fails here.
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    fs::create_dir_all(d.join("manifests")).expect("mkdir");
    let ext = "subjectAltName=DNS:localhost\\nextendedKeyUsage=serverAuth\\n";
    due_ec_leaf(d, "pki", "pki-ca", "server", ext);
    // The command line kubelet would run for the pod: unique to this test's temp dir.
    let marker = format!(": pod of {}", d.display());
    fs::write(
        d.join("manifests/sched.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sched\nspec:\n  containers:\n  - name: sched\n    image: x\n    command: [\"/bin/sh\", \"-c\", \"sleep 3600; {marker}\"]\n"
        ),
    )
    .expect("manifest");
    sb.install_unit(
        "pod-sched.service",
        &format!("[Service]\nExecStart=/bin/sh -c 'sleep 3600; {marker}'\n"),
    )
    .expect("unit");
    sb.install_unit(
        "reader.service",
        "[Service]\nExecStart=/bin/sleep infinity\n",
    )
    .expect("unit");
    sb.systemctl(["start", "reader.service", "pod-sched.service"])
        .expect("start");
    let config = d.join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n\n\
             [[watch]]\npath = \"{d}/pki\"\nunits = [\"reader.service\"]\nstatic_pods = [\"sched\"]\nkubeconfigs = []\n",
            d = d.display()
        ),
    )
    .expect("config");
    let pid = |unit: &str| sb.unit_property(unit, "MainPID").expect("MainPID");
    let (reader, pod) = (pid("reader.service"), pid("pod-sched.service"));

    let r = run(&sb, &config, &["renew", "--no-restart"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        text(&r).contains("shows it owed until it has started again or serves them"),
        "{}",
        text(&r)
    );
    let record = d.join("state/restarts-by-hand.json");
    assert!(record.exists(), "no record of the restarts owed by hand");

    // check fails for them, and names each with why.
    let (code, json) = check_json(&sb, &config);
    assert_eq!(code, Some(1), "{json:#}");
    let owed = &json["restarts_by_hand"];
    assert_eq!(owed["units"][0]["name"], "reader.service", "{json:#}");
    assert_eq!(owed["static_pods"][0]["name"], "sched", "{json:#}");
    for e in [&owed["units"][0], &owed["static_pods"][0]] {
        let why = e["why"].as_str().expect("why");
        assert!(why.ends_with("before the install"), "{why}");
    }
    let table = run(&sb, &config, &["check"]);
    let said = text(&table);
    assert!(said.contains("Owed a restart by hand"), "{said}");
    assert!(
        said.contains("2 certificates: 2 ok; restarts owed by hand — "),
        "{said}"
    );

    // A later pass, nothing due, restarts neither: the operator chose the window.
    let r = run(&sb, &config, &["renew"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(
        pid("reader.service"),
        reader,
        "the pass restarted reader.service"
    );
    assert_eq!(
        pid("pod-sched.service"),
        pod,
        "the pass restarted the pod's process"
    );
    assert!(
        record.exists(),
        "the record was dropped though nothing started again"
    );

    // The unit restarted by hand: the pod is still owed.
    sb.systemctl(["restart", "reader.service"])
        .expect("restart");
    let (code, json) = check_json(&sb, &config);
    assert_eq!(code, Some(1), "{json:#}");
    assert_eq!(
        json["restarts_by_hand"]["units"],
        serde_json::json!([]),
        "{json:#}"
    );
    assert_eq!(json["restarts_by_hand"]["static_pods"][0]["name"], "sched");

    // The pod's process started again (kubelet restarted it): nothing is owed.
    sb.systemctl(["restart", "pod-sched.service"])
        .expect("restart");
    let (code, json) = check_json(&sb, &config);
    assert_eq!(code, Some(0), "{json:#}");
    assert!(json.get("restarts_by_hand").is_none(), "{json:#}");

    // The next pass forgets the record, and says why (at -v: the daemon's journal has it).
    let r = run(&sb, &config, &["-v", "renew"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(!record.exists(), "the record stayed:\n{}", text(&r));
    assert!(
        text(&r).contains("static pod sched: no restart owed by hand any more (started again at"),
        "{}",
        text(&r)
    );
}

/// Loopback ports of the etcd below (client, then peer).
const PORT_BASE: &str = "17500";

/// etcd reads its serving certificate again at every handshake: after `--no-restart` it
/// serves the new one without a restart, and that is shown end to end (the served serial is
/// the one on disk, `/health` answers), so nothing is owed by hand and nothing is restarted.
#[test]
fn a_static_pod_serving_the_new_certificate_is_owed_nothing_by_hand() {
    // Under CI a machine that cannot host the sandbox fails here.
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    for dir in ["manifests", "data"] {
        fs::create_dir_all(d.join(dir)).expect("mkdir");
    }
    let ext =
        "subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n";
    due_ec_leaf(d, "pki", "etcd-ca", "etcd-server", ext);
    let client: u32 = PORT_BASE.parse().expect("port");
    let (pki, data) = (d.join("pki"), d.join("data"));
    let args = [
        "etcd".to_string(),
        "--name=by-hand".into(),
        format!("--data-dir={}", data.display()),
        format!("--listen-client-urls=https://127.0.0.1:{client}"),
        format!("--advertise-client-urls=https://127.0.0.1:{client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{}", client + 1),
        format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{}",
            client + 1
        ),
        format!("--initial-cluster=by-hand=http://127.0.0.1:{}", client + 1),
        format!("--cert-file={}", pki.join("server.crt").display()),
        format!("--key-file={}", pki.join("server.key").display()),
        format!("--trusted-ca-file={}", pki.join("ca.crt").display()),
    ];
    let quoted: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    fs::write(
        d.join("manifests/etcd.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\nspec:\n  containers:\n  - name: etcd\n    image: x\n    command: [{}]\n    volumeMounts:\n    - {{mountPath: {p}, name: pki}}\n    - {{mountPath: {dd}, name: data}}\n  volumes:\n  - {{hostPath: {{path: {p}}}, name: pki}}\n  - {{hostPath: {{path: {dd}}}, name: data}}\n",
            quoted.join(", "),
            p = pki.display(),
            dd = data.display()
        ),
    )
    .expect("manifest");
    // The pod's process, with the manifest's command line as kubelet would run it.
    sb.install_unit(
        "pod-etcd.service",
        &format!("[Service]\nExecStart=@/usr/bin/etcd {}\n", args.join(" ")),
    )
    .expect("unit");
    sb.systemctl(["start", "pod-etcd.service"]).expect("start");
    let config = d.join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n\n\
             [coordination]\nenabled = false\n\n\
             [[watch]]\npath = \"{d}/pki\"\nunits = []\nstatic_pods = [\"etcd\"]\nkubeconfigs = []\n",
            d = d.display()
        ),
    )
    .expect("config");
    // Listening is enough here: certrenewd asks its /health itself.
    let up = || std::net::TcpStream::connect(("127.0.0.1", client as u16)).is_ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !up() {
        assert!(std::time::Instant::now() < deadline, "etcd did not come up");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let pid = sb
        .unit_property("pod-etcd.service", "MainPID")
        .expect("pid");

    let r = run(&sb, &config, &["-v", "renew", "--no-restart"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        text(&r).contains("static pod etcd: no restart owed by hand any more (serves the new certificate: 127.0.0.1:17500 serves serial"),
        "{}",
        text(&r)
    );
    assert!(!d.join("state/restarts-by-hand.json").exists());
    let (code, json) = check_json(&sb, &config);
    assert_eq!(code, Some(0), "{json:#}");
    assert!(json.get("restarts_by_hand").is_none(), "{json:#}");
    assert_eq!(
        sb.unit_property("pod-etcd.service", "MainPID")
            .expect("pid"),
        pid,
        "etcd was restarted"
    );
}
