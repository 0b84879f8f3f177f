//! The `.deb` with its shipped config, installed on Debian
//! booted with systemd as PID 1 (tests/controllers/common/controllers.rs), on each controller shape
//! of the seeds, with due certificates issued long ago (`mkpki.sh --backdate`):
//!
//! - kubeadm: /etc/kubernetes (pki, kubeconfigs, static pod manifests), no /etc/etcd;
//! - StarlingX: /etc/etcd + /etc/kubernetes/pki, Debian's etcd.service on the tree's certificates;
//! - the hard way, etcd-only: /etc/etcd only, etcd.service running;
//! - OpenShift: /etc/etcd/tls.
//!
//! Each controller renews what is due (new notAfter, same subject and SANs, the key matches,
//! it verifies against its CA), restarts what runs or shows it took the renewal in by itself
//! (etcd.service keeps its invocation and serves the new certificate), raises no alarm, and its `certrenewd check` is printed (and
//! kept in `$CARGO_TARGET_TMPDIR/controllers/`). Then one broken thing (a watch path the
//! operator mistyped, a truncated PEM) raises exactly one alarm naming it, cleared by the
//! pass after it is fixed.
//!
//! And `renew --no-restart` on the hard-way controller: etcd reads its renewed serving
//! certificate again by itself, which the pass proves, so nothing is left owed by hand.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::controllers::{Controller, Host, Spec, host_or_skip, one_member_etcd};
use common::e2e::mkpki_with;
use common::{openssl, x509};
use serde_json::Value;

const SHIPPED_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/certrenewd.toml");
const CONFIG: &str = "/etc/certrenewd/certrenewd.toml";
const DAEMON: &str = "certrenewd.service";
const ETCD: &str = "etcd.service";
/// A pass with static pods waits `static_pod_wait_secs` (20 s shipped) with the manifests out.
const PASS_TIMEOUT: Duration = Duration::from_secs(180);

// ------------------------------------------------------------------ the PKI tree

/// A certificate of the tree that the pass must renew, as it was before.
struct Due {
    /// Where the test reads it on the host (the bound directory).
    host: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    subject: String,
    san: String,
    not_after: String,
}

/// The due and expired certificates of `expected.tsv`, their paths passed through `relocate`.
fn due_certificates(tree: &Path, relocate: impl Fn(&str) -> String) -> Vec<Due> {
    let manifest = fs::read_to_string(tree.join("expected.tsv")).expect("expected.tsv");
    manifest
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f[1] == "due" || f[1] == "expired")
        .map(|f| {
            let host = tree.join(relocate(f[0]));
            let ca = tree.join(relocate(f[3]));
            let key = key_of(&host);
            Due {
                subject: x509(&host, &["-subject"]),
                san: x509(&host, &["-ext", "subjectAltName"]),
                not_after: x509(&host, &["-enddate"]),
                host,
                key,
                ca,
            }
        })
        .collect()
}

/// The key beside a certificate, by the names controllers use (x.crt/x.key, x.pem/x-key.pem).
fn key_of(cert: &Path) -> PathBuf {
    let s = cert.display().to_string();
    match s.strip_suffix(".crt") {
        Some(stem) => PathBuf::from(format!("{stem}.key")),
        None => PathBuf::from(format!(
            "{}-key.pem",
            s.strip_suffix(".pem").expect("a .crt or .pem")
        )),
    }
}

/// Renewed: a new notAfter at least 300 days ahead, the same subject and SANs, its key
/// matches, and it verifies against its CA.
fn assert_renewed(d: &Due) {
    let name = d.host.display();
    let not_after = x509(&d.host, &["-enddate"]);
    assert_ne!(not_after, d.not_after, "{name} was not renewed");
    assert!(
        Command::new("openssl")
            .args([
                "x509",
                "-noout",
                "-checkend",
                &(300 * 86_400).to_string(),
                "-in"
            ])
            .arg(&d.host)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap()
            .success(),
        "{name}: renewed, but {not_after} is not 300 days ahead"
    );
    assert_eq!(
        x509(&d.host, &["-subject"]),
        d.subject,
        "{name}: subject changed"
    );
    assert_eq!(
        x509(&d.host, &["-ext", "subjectAltName"]),
        d.san,
        "{name}: SANs changed"
    );
    let key = openssl(&["pkey", "-pubout", "-in", &d.key.display().to_string()]);
    assert_eq!(
        x509(&d.host, &["-pubkey"]),
        key,
        "{name}: does not match {}",
        d.key.display()
    );
    let ca = d.ca.display().to_string();
    openssl(&["verify", "-CAfile", &ca, &name.to_string()]);
}

// ------------------------------------------------------------------ the controller

/// Boots a controller, checks the packaged config is the shipped one, installs the `.deb`.
fn boot(host: &Host, spec: Spec) -> Controller {
    let ctl = Controller::boot(host, spec).unwrap_or_else(|e| panic!("{e:#}"));
    ctl.install_deb(&host.deb)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let packaged = ctl.read_file(CONFIG).expect("the packaged config");
    let shipped = fs::read(SHIPPED_CONFIG).expect("config/certrenewd.toml");
    assert_eq!(packaged, shipped, "{CONFIG} is not config/certrenewd.toml");
    ctl
}

/// `systemctl VERB certrenewd.service` and waits for the end of the pass its start runs
/// (`run_on_start = true`, shipped): its STATUS= shows a last pass. Returns that status.
fn daemon_pass(ctl: &Controller, verb: &str) -> String {
    let before = ctl
        .unit_property(DAEMON, "InvocationID")
        .unwrap_or_default();
    if let Err(e) = ctl.systemctl(&[verb, DAEMON]) {
        panic!("{e:#}\n{}", ctl.journal(&["-u", DAEMON, "-n", "60"]));
    }
    ctl.wait_daemon_pass(&before, Instant::now() + PASS_TIMEOUT)
}

/// `certrenewd ARGS` inside (as an operator runs it), stdout; stderr appended on failure.
fn certrenewd(ctl: &Controller, args: &[&str]) -> String {
    let out = ctl.exec([&["certrenewd"], args].concat());
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        text.push_str(&format!(
            "[{}] {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    text
}

/// The active alarms (`certrenewd alarms --output json`).
fn alarms(ctl: &Controller) -> Vec<Value> {
    let text = ctl
        .run(["certrenewd", "alarms", "--output", "json"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["alarms"].as_array().cloned().unwrap_or_default()
}

/// Prints `certrenewd check` and keeps it in `$CARGO_TARGET_TMPDIR/controllers/SHAPE-WHEN.txt`.
fn show_check(ctl: &Controller, shape: &str, when: &str) {
    let text = certrenewd(ctl, &["check"]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("controllers");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{shape}-{when}.txt"));
    fs::write(&file, &text).unwrap();
    println!(
        "=== certrenewd check on the {shape} controller, {when} ({})\n{text}",
        file.display()
    );
}

/// etcd.service's invocation, and the SHA-256 fingerprint of the certificate it serves on
/// 127.0.0.1:2379 (`openssl s_client` inside, with a client certificate of the tree).
fn etcd_serving(ctl: &Controller, ca: &str, cert: &str, key: &str) -> (String, String) {
    let id = ctl.unit_property(ETCD, "InvocationID").unwrap();
    let served = ctl
        .sh(&format!(
            "openssl s_client -connect 127.0.0.1:2379 -CAfile {ca} -cert {cert} -key {key} </dev/null 2>/dev/null \
             | openssl x509 -noout -fingerprint -sha256"
        ))
        .unwrap_or_else(|e| panic!("{e:#}"));
    (id, served.trim().to_string())
}

/// The ETCDCTL health of the local member, with a client certificate of the tree.
fn etcd_healthy(ctl: &Controller, ca: &str, cert: &str, key: &str) {
    ctl.run([
        "etcdctl",
        "--endpoints=https://127.0.0.1:2379",
        &format!("--cacert={ca}"),
        &format!("--cert={cert}"),
        &format!("--key={key}"),
        "endpoint",
        "health",
    ])
    .unwrap_or_else(|e| panic!("etcd is not healthy after the pass: {e:#}"));
}

/// Debian's etcd.service on the tree's certificates, clients on https://127.0.0.1:2379.
fn run_etcd(ctl: &Controller, host_key: &Path, ca: &str, cert: &str, key: &str) {
    let (uid, gid) = ctl.ids("etcd").unwrap();
    std::os::unix::fs::chown(host_key, Some(uid), Some(gid)).expect("chown the etcd key");
    ctl.configure_etcd(&one_member_etcd(ca, cert, key))
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// The first pass: every due certificate renewed, no alarm, `check` shown before and after.
fn first_pass(ctl: &Controller, shape: &str, due: &[Due]) {
    assert!(!due.is_empty(), "{shape}: the tree has no due certificate");
    show_check(ctl, shape, "before");
    let status = daemon_pass(ctl, "start");
    println!("{shape}: {DAEMON} status after its first pass: {status}");
    assert!(
        status.contains("last pass: ok"),
        "{shape}: the first pass failed: {status}"
    );
    for d in due {
        assert_renewed(d);
    }
    show_check(ctl, shape, "after");
    let active = alarms(ctl);
    assert!(
        active.is_empty(),
        "{shape}: the shipped config raised alarms on a healthy controller: {active:#?}\n{}",
        ctl.journal(&["-u", DAEMON, "-n", "60"])
    );
}

/// [`first_pass`] on a controller running etcd.service on `cert` (inside; `tree` is bound at
/// `/`): etcd reads the renewed `cert` again by itself (the shipped `on_renew = "reload"`),
/// so it keeps its run, serves it and is healthy, asked as the client `client`
/// (certificate, key) with the CA `ca`.
fn first_pass_reloading_etcd(
    ctl: &Controller,
    shape: &str,
    due: &[Due],
    tree: &Path,
    ca: &str,
    cert: &str,
    client: (&str, &str),
) {
    let (id_before, served_before) = etcd_serving(ctl, ca, client.0, client.1);
    first_pass(ctl, shape, due);
    let (id_after, served_after) = etcd_serving(ctl, ca, client.0, client.1);
    assert_eq!(id_after, id_before, "etcd.service was restarted");
    assert_serves_renewed(&served_before, &served_after, tree, cert);
    etcd_healthy(ctl, ca, client.0, client.1);
    let said = ctl.journal(&["-u", DAEMON, "--grep", "reloaded", "-o", "cat"]);
    assert!(
        said.contains("etcd.service reloaded: read again, no restart"),
        "{shape}: {said}"
    );
}

/// etcd served `before` and serves `after` now: the certificate `cert` (inside; `tree` is
/// bound at `/`) holds, renewed.
fn assert_serves_renewed(before: &str, after: &str, tree: &Path, cert: &str) {
    assert_ne!(after, before, "etcd serves the old certificate");
    let file = x509(
        &tree.join(cert.trim_start_matches('/')),
        &["-fingerprint", "-sha256"],
    );
    assert_eq!(after, file, "etcd does not serve the renewed {cert}");
}

/// One broken thing: `break_it`, a pass raises exactly one alarm (250.003) naming `named`;
/// `fix_it`, the next pass clears it.
fn one_alarm_then_cleared(
    ctl: &Controller,
    shape: &str,
    named: &str,
    break_it: impl FnOnce(),
    fix_it: impl FnOnce(),
) {
    break_it();
    let status = daemon_pass(ctl, "restart");
    assert!(
        status.contains("last pass: FAILED"),
        "{shape}: {named} broken, the pass did not fail: {status}"
    );
    let active = alarms(ctl);
    println!("{shape}, {named} broken: active alarms {active:#?}");
    assert_eq!(
        active.len(),
        1,
        "{shape}: {named} broken: not exactly one alarm: {active:#?}"
    );
    assert_eq!(active[0]["id"], "250.003", "{shape}: {active:#?}");
    let entity = format!("host={}", ctl.hostname());
    assert_eq!(active[0]["entity"], entity.as_str(), "{shape}: {active:#?}");
    let reason = active[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(named),
        "{shape}: the alarm does not name {named}: {reason}"
    );
    fix_it();
    let status = daemon_pass(ctl, "restart");
    assert!(
        status.contains("last pass: ok"),
        "{shape}: {named} fixed, the pass failed: {status}"
    );
    let active = alarms(ctl);
    assert!(
        active.is_empty(),
        "{shape}: {named} fixed, alarms still active: {active:#?}"
    );
    let cleared = ctl.journal_json(&["ALARM_ID=250.003", "ALARM_STATE=clear"]);
    assert!(
        !cleared.is_empty(),
        "{shape}: no clear of 250.003 in the journal"
    );
}

/// The packaged config with `from` replaced by `to` (an operator's edit).
fn edit_config(ctl: &Controller, from: &str, to: &str) {
    let text = String::from_utf8(ctl.read_file(CONFIG).unwrap()).unwrap();
    assert!(text.contains(from), "{CONFIG} has no {from:?}");
    ctl.write_file(CONFIG, text.replacen(from, to, 1).as_bytes(), 0o644)
        .unwrap();
}

fn restore_config(ctl: &Controller) {
    ctl.write_file(CONFIG, &fs::read(SHIPPED_CONFIG).unwrap(), 0o644)
        .unwrap();
}

/// [`one_alarm_then_cleared`] by the file `inside` cut to half its length, as a bad copy
/// leaves it, then put back (on the host, in `tree`, which is bound at `/` inside).
fn one_alarm_for_a_truncated_file(ctl: &Controller, shape: &str, tree: &Path, inside: &str) {
    let on_host = tree.join(inside.trim_start_matches('/'));
    let original = std::cell::RefCell::new(Vec::new());
    one_alarm_then_cleared(
        ctl,
        shape,
        inside,
        || {
            let bytes = fs::read(&on_host).unwrap();
            fs::write(&on_host, &bytes[..bytes.len() / 2]).unwrap();
            *original.borrow_mut() = bytes;
        },
        || fs::write(&on_host, &*original.borrow()).unwrap(),
    );
}

/// The mkpki tree of `layout` made with `--backdate` (due leaves issued 355 days ago for
/// 365), in a temp dir.
fn backdated_tree(layout: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join(layout);
    mkpki_with(layout, &tree, &["--backdate"]);
    (tmp, tree)
}

// ------------------------------------------------------------------ the shapes

#[test]
fn starlingx_controller() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (_tmp, tree) = backdated_tree("starlingx");
    let due = due_certificates(&tree, str::to_string);
    let spec = Spec::new("controller-0")
        .bind(&tree.join("etc/etcd"), "/etc/etcd")
        .bind(&tree.join("etc/kubernetes"), "/etc/kubernetes");
    let ctl = boot(host, spec);
    let (ca, cert, key) = (
        "/etc/etcd/ca.crt",
        "/etc/etcd/etcd-server.crt",
        "/etc/etcd/etcd-server.key",
    );
    run_etcd(&ctl, &tree.join("etc/etcd/etcd-server.key"), ca, cert, key);
    // kube-apiserver's etcd client certificate (etcd-client.crt, CN=root, has expired).
    let client = (
        "/etc/kubernetes/pki/apiserver-etcd-client.crt",
        "/etc/kubernetes/pki/apiserver-etcd-client.key",
    );
    first_pass_reloading_etcd(&ctl, "starlingx", &due, &tree, ca, cert, client);

    one_alarm_for_a_truncated_file(
        &ctl,
        "starlingx",
        &tree,
        "/etc/kubernetes/pki/apiserver.crt",
    );
}

/// The hard way's etcd CA, and the certificate and key etcd serves (and is asked with).
const HARDWAY_ETCD: (&str, &str, &str) = (
    "/etc/etcd/ca.pem",
    "/etc/etcd/kubernetes.pem",
    "/etc/etcd/kubernetes-key.pem",
);

/// A hard-way etcd-only controller, booted with the `.deb`, Debian's etcd.service running
/// on the backdated tree: the tree's temp dir, its path, its due certificates, the node.
fn hardway_controller(host: &Host) -> (tempfile::TempDir, PathBuf, Vec<Due>, Controller) {
    let (tmp, tree) = backdated_tree("hardway-etcd");
    let due = due_certificates(&tree, str::to_string);
    let ctl = boot(
        host,
        Spec::new("controller-0").bind(&tree.join("etc/etcd"), "/etc/etcd"),
    );
    let (ca, cert, key) = HARDWAY_ETCD;
    run_etcd(
        &ctl,
        &tree.join("etc/etcd/kubernetes-key.pem"),
        ca,
        cert,
        key,
    );
    (tmp, tree, due, ctl)
}

#[test]
fn hardway_etcd_only_controller() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (_tmp, tree, due, ctl) = hardway_controller(host);
    let (ca, cert, key) = HARDWAY_ETCD;
    first_pass_reloading_etcd(&ctl, "hardway-etcd", &due, &tree, ca, cert, (cert, key));

    // The operator mistypes the one watch of this node: nothing would be watched.
    one_alarm_then_cleared(
        &ctl,
        "hardway-etcd",
        "/etc/etdc",
        || edit_config(&ctl, "path = \"/etc/etcd\"", "path = \"/etc/etdc\""),
        || restore_config(&ctl),
    );
}

/// A hard-way controller whose etcd also listens on the node's address and on a floating
/// address beside it (keepalived's way: a second address of the subnet, `secondary`), in
/// the controller's private network: the reload is proven on loopback and the node's own
/// address, never where the floating address could be answered by another node.
#[test]
fn a_reload_is_proven_only_where_the_node_itself_listens() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (_tmp, tree) = backdated_tree("hardway-etcd");
    let due = due_certificates(&tree, str::to_string);
    let ctl = boot(
        host,
        Spec::new("controller-0").bind(&tree.join("etc/etcd"), "/etc/etcd"),
    );
    let leader = ctl.leader().to_string();
    // Two addresses kubernetes.pem names, in one subnet: the second is `secondary`.
    for a in ["10.0.1.10/8", "10.32.0.1/8"] {
        let add = ["-t", &leader, "-n", "ip", "addr", "add", a, "dev", "lo"];
        let o = std::process::Command::new("nsenter")
            .args(add)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (ca, cert, key) = HARDWAY_ETCD;
    let (uid, gid) = ctl.ids("etcd").unwrap();
    let host_key = tree.join("etc/etcd/kubernetes-key.pem");
    std::os::unix::fs::chown(host_key, Some(uid), Some(gid)).expect("chown the etcd key");
    let mut vars = one_member_etcd(ca, cert, key);
    vars[2].1 = "https://127.0.0.1:2379,https://10.0.1.10:2379,https://10.32.0.1:2379";
    ctl.configure_etcd(&vars)
        .unwrap_or_else(|e| panic!("{e:#}"));
    first_pass_reloading_etcd(&ctl, "hardway-floating", &due, &tree, ca, cert, (cert, key));
    let said = ctl.journal(&["-u", DAEMON, "-o", "cat"]);
    println!("{said}");
    assert!(said.contains("10.0.1.10:2379 serves serial"), "{said}");
    assert!(said.contains("127.0.0.1:2379 serves serial"), "{said}");
    assert!(!said.contains("10.32.0.1:2379 serves"), "{said}");
}

/// kubeadm's static pods: their manifests, held out of and put back into the manifest
/// directory by a pass that renews /etc/kubernetes/pki.
const STATIC_PODS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// etcd's flags as `kubeadm init` writes them for this controller (advertised on loopback:
/// its network has nothing else), sorted by name: the member alone in `--initial-cluster`.
const KUBEADM_ETCD_FLAGS: &str = "\x20   command:\n    - etcd\n\
    \x20   - --advertise-client-urls=https://127.0.0.1:2379\n\
    \x20   - --cert-file=/etc/kubernetes/pki/etcd/server.crt\n    - --client-cert-auth=true\n\
    \x20   - --data-dir=/var/lib/etcd\n    - --initial-advertise-peer-urls=https://127.0.0.1:2380\n\
    \x20   - --initial-cluster=controller-0=https://127.0.0.1:2380\n\
    \x20   - --key-file=/etc/kubernetes/pki/etcd/server.key\n\
    \x20   - --listen-client-urls=https://127.0.0.1:2379\n\
    \x20   - --listen-metrics-urls=http://127.0.0.1:2381\n\
    \x20   - --listen-peer-urls=https://127.0.0.1:2380\n    - --name=controller-0\n\
    \x20   - --peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt\n    - --peer-client-cert-auth=true\n\
    \x20   - --peer-key-file=/etc/kubernetes/pki/etcd/peer.key\n\
    \x20   - --peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt\n    - --snapshot-count=10000\n\
    \x20   - --trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt\n";

fn write_manifests(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    for pod in STATIC_PODS {
        let command = match pod {
            "etcd" => KUBEADM_ETCD_FLAGS,
            _ => "",
        };
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: kube-system\n\
             spec:\n  hostNetwork: true\n  containers:\n  - name: {pod}\n{command}    image: registry.k8s.io/{pod}:v1.31.0\n\
             \x20   volumeMounts:\n    - mountPath: /etc/kubernetes/pki\n      name: k8s-certs\n\
             \x20 volumes:\n  - hostPath:\n      path: /etc/kubernetes/pki\n    name: k8s-certs\n"
        );
        fs::write(dir.join(format!("{pod}.yaml")), text).unwrap();
    }
}

/// The client certificate embedded in a kubeconfig, written out as PEM beside it.
fn kubeconfig_cert(conf: &Path, field: &str, out: &Path) {
    use base64::Engine;
    let text = fs::read_to_string(conf).unwrap();
    let b64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}: ")))
        .unwrap_or_else(|| panic!("{}: no {field}", conf.display()));
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .unwrap();
    fs::write(out, pem).unwrap();
}

/// The kubeconfigs' due client certificates, extracted into `dir` (as the test sees them).
fn kubeconfig_due(tree: &Path, dir: &Path) -> Vec<Due> {
    fs::create_dir_all(dir).unwrap();
    ["admin", "controller-manager", "scheduler"]
        .iter()
        .map(|name| {
            let conf = tree.join(format!("etc/kubernetes/{name}.conf"));
            let (host, key) = (
                dir.join(format!("{name}.crt")),
                dir.join(format!("{name}.key")),
            );
            kubeconfig_cert(&conf, "client-certificate-data", &host);
            kubeconfig_cert(&conf, "client-key-data", &key);
            Due {
                subject: x509(&host, &["-subject"]),
                san: x509(&host, &["-ext", "subjectAltName"]),
                not_after: x509(&host, &["-enddate"]),
                host,
                key,
                ca: tree.join("etc/kubernetes/pki/ca.crt"),
            }
        })
        .collect()
}

#[test]
fn kubeadm_controller() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (tmp, tree) = backdated_tree("kubeadm");
    let manifests = tree.join("etc/kubernetes/manifests");
    write_manifests(&manifests);
    let snapshot: Vec<Vec<u8>> = STATIC_PODS
        .iter()
        .map(|p| fs::read(manifests.join(format!("{p}.yaml"))).unwrap())
        .collect();
    let due = due_certificates(&tree, str::to_string);
    let confs_before = kubeconfig_due(&tree, &tmp.path().join("kubeconfigs-before"));
    let ctl = boot(
        host,
        Spec::new("controller-0").bind(&tree.join("etc/kubernetes"), "/etc/kubernetes"),
    );
    // No etcd runs here (kubelet's stand-in runs no container). A controller whose daemon
    // ran before has etcd's member list on record, as a pass or the watch wrote it: this
    // node's member alone, a cluster of one. Without it, nothing answering could be a
    // cluster out of sight, and the pass would rightly hold its restarts.
    let listed = "/var/lib/certrenewd/etcd-members.json";
    fs::create_dir_all(ctl.path("/var/lib/certrenewd")).unwrap();
    let one = r#"{"members":[{"id":1,"name":"controller-0","client_urls":["https://127.0.0.1:2379"],"peer_urls":["https://127.0.0.1:2380"]}],"from":"https://127.0.0.1:2379","listed_at":1764460800}"#;
    ctl.write_file(listed, one.as_bytes(), 0o600).unwrap();

    first_pass(&ctl, "kubeadm", &due);
    // Each embedded client certificate: renewed in place, checked like a file.
    let confs_after = kubeconfig_due(&tree, &tmp.path().join("kubeconfigs-after"));
    for (before, after) in confs_before.iter().zip(&confs_after) {
        assert_renewed(&Due {
            host: after.host.clone(),
            key: after.key.clone(),
            ca: after.ca.clone(),
            subject: before.subject.clone(),
            san: before.san.clone(),
            not_after: before.not_after.clone(),
        });
    }
    // Every static pod restarted the way kubelet understands, its manifest back byte for byte.
    for (pod, bytes) in STATIC_PODS.iter().zip(&snapshot) {
        let now = fs::read(manifests.join(format!("{pod}.yaml"))).unwrap();
        assert_eq!(&now, bytes, "{pod}.yaml is not back as it was");
    }
    let back = ctl.journal_json(&["-u", DAEMON, "MESSAGE=static pod manifest back in place"]);
    assert_eq!(
        back.len(),
        STATIC_PODS.len(),
        "static pods put back: {back:#?}"
    );

    one_alarm_for_a_truncated_file(
        &ctl,
        "kubeadm",
        &tree,
        "/etc/kubernetes/pki/etcd/healthcheck-client.key",
    );
}

#[test]
fn openshift_controller() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (_tmp, tree) = backdated_tree("openshift");
    // The OpenShift tree under /etc/etcd/tls: the signers and their bootstrap clients
    // (opt/openshift/tls) at its top, the node's etcd-certs (serving, peer, metrics, CA
    // bundles) in etcd-certs/.
    let tls = tree.join("etc/etcd/tls");
    fs::create_dir_all(tree.join("etc/etcd")).unwrap();
    fs::rename(tree.join("opt/openshift/tls"), &tls).unwrap();
    let certs = "etc/kubernetes/static-pod-resources/etcd-certs";
    fs::rename(tree.join(certs), tls.join("etcd-certs")).unwrap();
    let relocate = |p: &str| {
        p.replacen("opt/openshift/tls", "etc/etcd/tls", 1).replacen(
            certs,
            "etc/etcd/tls/etcd-certs",
            1,
        )
    };
    let due = due_certificates(&tree, relocate);
    let ctl = boot(
        host,
        Spec::new("master-0").bind(&tree.join("etc/etcd"), "/etc/etcd"),
    );

    first_pass(&ctl, "openshift", &due);

    // The operator adds a watch for a directory it mistyped.
    let watch = "\n[[watch]]\npath = \"/etc/etcd/tsl\"\nunits = [\"etcd.service\"]\n";
    one_alarm_then_cleared(
        &ctl,
        "openshift",
        "/etc/etcd/tsl",
        || {
            let mut text = fs::read(SHIPPED_CONFIG).unwrap();
            text.extend_from_slice(watch.as_bytes());
            ctl.write_file(CONFIG, &text, 0o644).unwrap();
        },
        || restore_config(&ctl),
    );
}

/// `renew --no-restart` on a hard-way controller, as an operator runs it with the shipped
/// configuration: etcd.service (Debian's) is not restarted, yet it reads its renewed serving
/// certificate again by itself, and that is proven end to end (the served serial is the one
/// on disk, `/health` answers etcd's client): nothing is left owed by hand, `check
/// --fail-due` passes, and etcd's run is the one from before.
#[test]
fn no_restart_on_etcd_that_reloads_leaves_nothing_owed_by_hand() {
    let Some(host) = host_or_skip() else {
        return;
    };
    let (_tmp, tree, due, ctl) = hardway_controller(host);
    let (ca, cert, key) = HARDWAY_ETCD;
    let (id_before, served_before) = etcd_serving(&ctl, ca, cert, key);
    let out = ctl.exec(["certrenewd", "-v", "renew", "--no-restart"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("=== renew --no-restart on the hard-way controller\n{stdout}{stderr}");
    assert!(out.status.success(), "{stdout}{stderr}");
    for d in &due {
        assert_renewed(d);
    }
    assert!(
        stderr.contains(
            "etcd.service: no restart owed by hand any more (serves the new certificate: "
        ),
        "{stderr}"
    );
    let (id_after, served_after) = etcd_serving(&ctl, ca, cert, key);
    assert_eq!(id_after, id_before, "etcd.service was restarted");
    assert_serves_renewed(&served_before, &served_after, &tree, cert);
    let check = ctl.exec(["certrenewd", "check", "--fail-due", "--output", "json"]);
    let json: Value = serde_json::from_slice(&check.stdout).expect("check's JSON");
    assert!(json.get("restarts_by_hand").is_none(), "{json:#}");
    assert_eq!(check.status.code(), Some(0), "{json:#}");
    let record = "/var/lib/certrenewd/restarts-by-hand.json";
    let left = ctl.exec(["test", "-e", record]);
    assert!(!left.status.success(), "{record} is left");
    etcd_healthy(&ctl, ca, cert, key);
}
