//! Coming back after a long outage, kubeadm-shaped, on Debian booted with systemd
//! as PID 1 (tests/controllers/common/controllers.rs): a kubeadm controller that was off while
//! every leaf expired (`mkpki.sh kubeadm --expired`: 365-day lifetimes issued 368 days ago by cfssl
//! with its `backdate`; kubelet's store from `mkkubelet.sh --cluster-ca --expired`, openssl under
//! libfaketime) boots with certrenewd enabled (the `.deb`'s binary, shipped unit and shipped
//! config: `run_on_start = true`) and a stand-in kubelet.service enabled beside it, ordered
//! after certrenewd only by the shipped unit's `Before=kubelet.service`.
//!
//! The stand-in (tests/controllers/common/kubelet.rs) does with certificates what kubelet does on a
//! controller: it authenticates to the API server with `kubelet-client-current.pem`, and runs the
//! static pods of /etc/kubernetes/manifests while their manifests are there (kube-apiserver and
//! etcd as `openssl s_server` requiring client certificates of their CA, controller-manager and
//! scheduler as clients of the API server with their kubeconfig's certificate). Each logs, as
//! it starts, whether the certificates it reads are valid at that moment.
//!
//! Shown: kubelet starts after certrenewd's READY=1, and at that moment (and at every static
//! pod's first start) the certificates are already renewed, so its first handshake succeeds;
//! every expired leaf is renewed (same subject, SANs, usages; verifies against its CA), the
//! four kubeconfigs too, kubelet's pair kubelet's way; the API server serves the renewed
//! apiserver.crt; kubelet.crt made anew as kubelet makes it (a new throwaway CA); no alarm
//! at all. Printed: the
//! time from the container's start to kubelet's first authentication (`BENCH`).

use crate::common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::controllers::{Controller, Host, Spec, host_or_skip};
use common::e2e::mkpki_with;
use common::ha::say;
use common::kubelet::{KUBELET, KUBELET_SERVICE, UNIT as KUBELET_UNIT};
use common::pki::{Failures, openssl_out};
use common::{openssl, x509};
use serde_json::Value;

const MKKUBELET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkkubelet.sh");
const DAEMON: &str = "certrenewd.service";
/// The first pass holds each static pod's manifest out for `static_pod_wait_secs` (20 s shipped).
const TIMEOUT: Duration = Duration::from_secs(240);
const KUBELET_PKI: &str = "/var/lib/kubelet/pki";
const STATIC_PODS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// One leaf of the controller, as the test reads it on the host: (name, certificate, key, CA).
type Leaf = (String, PathBuf, PathBuf, PathBuf);

/// Every leaf: the 7 of `expected.tsv` (all `expired`), the client pairs of the 4 kubeconfigs
/// (written out into `dir`), kubelet's pair in use.
fn leaves(tree: &Path, dir: &Path) -> Vec<Leaf> {
    let expected = fs::read_to_string(tree.join("expected.tsv")).unwrap();
    let mut all: Vec<Leaf> = expected
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f[3] != "-")
        .map(|f| {
            assert_eq!(f[1], "expired", "not every leaf expired: {expected}");
            let cert = tree.join(f[0]);
            (
                f[0].to_string(),
                cert.clone(),
                cert.with_extension("key"),
                tree.join(f[3]),
            )
        })
        .collect();
    let ca = tree.join("etc/kubernetes/pki/ca.crt");
    fs::create_dir_all(dir).unwrap();
    for name in ["admin", "super-admin", "controller-manager", "scheduler"] {
        use base64::Engine;
        let text = fs::read_to_string(tree.join(format!("etc/kubernetes/{name}.conf"))).unwrap();
        let out = |field: &str, ext: &str| {
            let b64 = text
                .lines()
                .find_map(|l| l.trim().strip_prefix(field))
                .unwrap();
            let pem = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap();
            let path = dir.join(format!("{name}.{ext}"));
            fs::write(&path, pem).unwrap();
            path
        };
        let (cert, key) = (
            out("client-certificate-data: ", "crt"),
            out("client-key-data: ", "key"),
        );
        all.push((format!("{name}.conf"), cert, key, ca.clone()));
    }
    let pair = kubelet_pair(tree);
    all.push(("kubelet-client-current.pem".into(), pair.clone(), pair, ca));
    all
}

/// The dated file kubelet-client-current.pem names, on the host.
fn kubelet_pair(tree: &Path) -> PathBuf {
    let dir = tree.join("var/lib/kubelet/pki");
    let target = fs::read_link(dir.join("kubelet-client-current.pem")).unwrap();
    dir.join(target.file_name().unwrap())
}

/// What a renewal keeps (subject, SANs, usages), and its notAfter.
fn facts(cert: &Path) -> (String, String) {
    let kept = [
        "-subject",
        "-ext",
        "subjectAltName,keyUsage,extendedKeyUsage",
    ];
    (x509(cert, &kept), x509(cert, &["-enddate"]))
}

/// Whether `cert` is valid `secs` from now (`openssl x509 -checkend`).
fn valid_in(cert: &Path, secs: u64) -> bool {
    let (cert, secs) = (cert.display().to_string(), secs.to_string());
    openssl_out(&["x509", "-noout", "-checkend", &secs, "-in", &cert])
        .status
        .success()
}

/// Renewed: the same subject, SANs and usages, a new notAfter 300 days ahead, its key
/// matches, and openssl verifies it against its CA.
fn check_renewed(f: &mut Failures, before: &(String, String), (name, cert, key, ca): &Leaf) {
    let now = facts(cert);
    f.check(now.0 == before.0, || {
        format!("{name}: {:?} was {:?}", now.0, before.0)
    });
    f.check(now.1 != before.1 && valid_in(cert, 300 * 86_400), || {
        format!("{name}: not renewed: {}", now.1)
    });
    let of_key = openssl(&["pkey", "-pubout", "-in", &key.display().to_string()]);
    f.check(x509(cert, &["-pubkey"]) == of_key, || {
        format!("{name}: not its key's")
    });
    let [ca, cert] = [ca, cert].map(|p| p.display().to_string());
    let v = openssl_out(&["verify", "-CAfile", &ca, &cert]);
    f.check(v.status.success(), || {
        format!("{name}: does not verify: {v:?}")
    });
}

/// kubeadm's manifest of `pod`, with the flags that name certificates (and etcd's own).
fn manifest(pod: &str) -> String {
    let flags = match pod {
        "etcd" => {
            "advertise-client-urls=https://127.0.0.1:2379 cert-file=PKI/etcd/server.crt \
            client-cert-auth=true data-dir=/var/lib/etcd \
            initial-advertise-peer-urls=https://127.0.0.1:2380 \
            initial-cluster=controller-0=https://127.0.0.1:2380 key-file=PKI/etcd/server.key \
            listen-client-urls=https://127.0.0.1:2379 listen-peer-urls=https://127.0.0.1:2380 \
            name=controller-0 peer-cert-file=PKI/etcd/peer.crt peer-client-cert-auth=true \
            peer-key-file=PKI/etcd/peer.key peer-trusted-ca-file=PKI/etcd/ca.crt \
            trusted-ca-file=PKI/etcd/ca.crt"
        }
        "kube-apiserver" => {
            "client-ca-file=PKI/ca.crt etcd-cafile=PKI/etcd/ca.crt \
            etcd-certfile=PKI/apiserver-etcd-client.crt etcd-keyfile=PKI/apiserver-etcd-client.key \
            etcd-servers=https://127.0.0.1:2379 \
            kubelet-client-certificate=PKI/apiserver-kubelet-client.crt \
            kubelet-client-key=PKI/apiserver-kubelet-client.key \
            proxy-client-cert-file=PKI/front-proxy-client.crt \
            proxy-client-key-file=PKI/front-proxy-client.key secure-port=6443 \
            tls-cert-file=PKI/apiserver.crt tls-private-key-file=PKI/apiserver.key"
        }
        "kube-controller-manager" => "kubeconfig=/etc/kubernetes/controller-manager.conf",
        _ => "kubeconfig=/etc/kubernetes/scheduler.conf",
    };
    let flags: String = flags
        .split_whitespace()
        .map(|f| format!("    - --{}\n", f.replace("PKI/", "/etc/kubernetes/pki/")))
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: kube-system\nspec:\n  \
         containers:\n  - command:\n    - {pod}\n{flags}    image: registry.k8s.io/{pod}:v1.31.0\n    \
         name: {pod}\n  hostNetwork: true\n"
    )
}

/// The controller's files on the host: its tree (kubeadm's /etc/kubernetes with the static pod
/// manifests, kubelet's store) and what is bound in to enable both services at boot.
fn files(host: &Host, tmp: &Path) -> (PathBuf, Spec) {
    let tree = tmp.join("kubeadm");
    mkpki_with("kubeadm", &tree, &["--expired"]);
    let out = Command::new("bash")
        .arg(MKKUBELET)
        .arg(&tree)
        .args(["--cluster-ca", "--expired"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkkubelet.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // kubelet wrote the symlink on the node, by the path it has there.
    let link = tree.join("var/lib/kubelet/pki/kubelet-client-current.pem");
    let dated = fs::read_link(&link).unwrap();
    fs::remove_file(&link).unwrap();
    symlink(
        Path::new(KUBELET_PKI).join(dated.file_name().unwrap()),
        &link,
    )
    .unwrap();
    let manifests = tree.join("etc/kubernetes/manifests");
    fs::create_dir_all(&manifests).unwrap();
    for pod in STATIC_PODS {
        fs::write(manifests.join(format!("{pod}.yaml")), manifest(pod)).unwrap();
    }
    etcd_data(&tree.join("var/lib/etcd"));
    let package = tmp.join("package");
    let x = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&host.deb)
        .arg(&package)
        .status();
    assert!(x.unwrap().success(), "dpkg-deb -x {}", host.deb.display());
    let unit = ["lib", "usr/lib"]
        .iter()
        .map(|d| package.join(d).join("systemd/system/certrenewd.service"))
        .find(|p| p.is_file())
        .expect("the package's certrenewd.service");
    let standin = tmp.join("kubelet-standin");
    fs::write(&standin, KUBELET).unwrap();
    fs::set_permissions(&standin, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(tmp.join(KUBELET_UNIT), KUBELET_SERVICE).unwrap();
    // The base root's multi-user.target.wants, and what `systemctl enable` adds: both services.
    let wants = tmp.join("multi-user.target.wants");
    fs::create_dir(&wants).unwrap();
    let there = host.base.join("etc/systemd/system/multi-user.target.wants");
    for entry in fs::read_dir(&there).unwrap().flatten() {
        let to = fs::read_link(entry.path()).unwrap();
        symlink(to, wants.join(entry.file_name())).unwrap();
    }
    for unit in [DAEMON, KUBELET_UNIT] {
        symlink(format!("/etc/systemd/system/{unit}"), wants.join(unit)).unwrap();
    }
    let spec = Spec::new("controller-0")
        .bind(&tree.join("etc/kubernetes"), "/etc/kubernetes")
        .bind(&tree.join("var/lib/kubelet/pki"), KUBELET_PKI)
        .bind(&tree.join("var/lib/etcd"), "/var/lib/etcd")
        .bind_ro(&package.join("usr/bin/certrenewd"), "/usr/bin/certrenewd")
        .bind_ro(&unit, "/etc/systemd/system/certrenewd.service")
        .bind_ro(&package.join("etc/certrenewd"), "/etc/certrenewd")
        .bind_ro(&standin, "/usr/local/sbin/kubelet-standin")
        .bind_ro(
            &tmp.join(KUBELET_UNIT),
            "/etc/systemd/system/kubelet.service",
        )
        .bind_ro(&wants, "/etc/systemd/system/multi-user.target.wants");
    (tree, spec)
}

/// etcd's data as the controller had it before the outage: its one-member cluster
/// bootstrapped with the manifest's names (by the host's etcd, in a network namespace of its
/// own, on plain HTTP: the certificates have expired), in `dir`.
fn etcd_data(dir: &Path) {
    let script = format!(
        "ip link set lo up; etcd --name controller-0 --data-dir {} \
         --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \
         --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls https://127.0.0.1:2380 \
         --initial-cluster controller-0=https://127.0.0.1:2380 >/dev/null 2>&1 & \
         until ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:2379 endpoint health >/dev/null 2>&1; \
         do sleep 0.2; done; kill $!; wait",
        dir.display()
    );
    let out = Command::new("timeout")
        .args(["60", "unshare", "-n", "sh", "-c", &script])
        .status();
    assert!(
        out.unwrap().success(),
        "bootstrapping etcd's data in {}",
        dir.display()
    );
}

/// The journal of `unit` in this boot: (wall clock µs, message), oldest first.
fn entries(ctl: &Controller, unit: &str) -> Vec<(u64, String)> {
    ctl.journal_json(&["-b", "-u", unit])
        .iter()
        .map(|e| {
            let t = e["__REALTIME_TIMESTAMP"].as_str().unwrap_or("0");
            let m = e["MESSAGE"].as_str().unwrap_or_default();
            (t.parse().unwrap_or(0), m.to_string())
        })
        .collect()
}

fn first<'a>(entries: &'a [(u64, String)], needle: &str) -> Option<&'a (u64, String)> {
    entries.iter().find(|(_, m)| m.contains(needle))
}

/// Waits until the last kubelet line with `started` (or none) is followed by one with `done`;
/// the first line with `done`.
fn wait_after(
    ctl: &Controller,
    started: Option<&str>,
    done: &str,
    deadline: Instant,
) -> (u64, String) {
    loop {
        let lines = entries(ctl, KUBELET_UNIT);
        let last = |n: &str| lines.iter().rposition(|(_, m)| m.contains(n));
        if last(done) > started.and_then(last) {
            return first(&lines, done).unwrap().clone();
        }
        let journal = |u| ctl.journal(&["-b", "-u", u, "-o", "short-precise"]);
        let (k, d) = (journal(KUBELET_UNIT), journal(DAEMON));
        assert!(
            Instant::now() < deadline,
            "no {done:?} after {started:?}:\n{k}\n{d}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// SHA-256 fingerprint of what the API server stand-in serves (inside, with kubelet's pair).
fn served(ctl: &Controller) -> String {
    let k = format!("{KUBELET_PKI}/kubelet-client-current.pem");
    let out = ctl.sh(&format!(
        "openssl s_client -connect 127.0.0.1:6443 -cert {k} -key {k} </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256"
    ));
    out.map(|s| s.trim().to_string()).unwrap_or_default()
}

#[test]
fn kubeadm_controller_back_after_a_long_outage() {
    const NAME: &str = "kubeadm_controller_back_after_a_long_outage";
    let Some(host) = host_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (tree, spec) = files(host, tmp.path());
    let before = leaves(&tree, &tmp.path().join("before"));
    for (name, cert, ..) in &before {
        assert!(!valid_in(cert, 0), "{name} has not expired");
    }
    let facts_before: Vec<_> = before.iter().map(|l| facts(&l.1)).collect();
    let old_pair = kubelet_pair(&tree);
    let old_bytes = fs::read(&old_pair).unwrap();
    let serving_issuer = x509(&tree.join("var/lib/kubelet/pki/kubelet.crt"), &["-issuer"]);

    // The boot: both services enabled, nothing started by hand.
    let booted = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let ctl = Controller::boot(host, spec).unwrap_or_else(|e| panic!("{e:#}"));
    let deadline = Instant::now() + TIMEOUT;
    let (healthy, _) = wait_after(&ctl, None, "kubelet authenticated", deadline);
    let status = ctl.wait_daemon_pass("", deadline);
    // After the pass the static pods are back (each manifest held out for 20 s), kubelet's
    // last run (certrenewd restarts it) and each client pod authenticated.
    let apiserver = x509(
        &tree.join("etc/kubernetes/pki/apiserver.crt"),
        &["-fingerprint", "-sha256"],
    );
    while served(&ctl) != apiserver && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
    for who in [
        "kubelet",
        "static pod kube-controller-manager",
        "static pod kube-scheduler",
    ] {
        wait_after(
            &ctl,
            Some(&format!("{who} started")),
            &format!("{who} authenticated"),
            deadline,
        );
    }

    let (daemon, kubelet) = (entries(&ctl, DAEMON), entries(&ctl, KUBELET_UNIT));
    let at = |t: &u64| format!("{:7.2} s", t.saturating_sub(booted) as f64 / 1e6);
    let mut timeline: Vec<String> = daemon
        .iter()
        .map(|(t, m)| format!("{} certrenewd | {m}", at(t)))
        .chain(
            kubelet
                .iter()
                .map(|(t, m)| format!("{} kubelet    | {m}", at(t))),
        )
        .collect();
    timeline.sort();
    say(&format!(
        "boot timeline (from the container's start):\n{}",
        timeline.join("\n")
    ));
    say(&format!("{DAEMON} status after its first pass: {status}"));
    let ms = healthy.saturating_sub(booted) / 1000;
    say(&format!(
        "BENCH outage_boot_to_kubelet_authenticated_ms={ms}"
    ));

    let mut f = Failures(Vec::new());
    // The ordering: kubelet started after READY=1, on certificates already renewed, and
    // authenticated without a failed handshake.
    let show = |e: Option<&(u64, String)>| e.map(|(t, m)| format!("at {}: {m}", at(t)));
    let ready = first(&daemon, "Started certrenewd.service");
    let start = first(&kubelet, "kubelet started");
    f.check(
        ready.is_some() && start.is_some_and(|s| Some(s.0) > ready.map(|r| r.0)),
        || {
            format!(
                "kubelet {:?}, before certrenewd {:?}",
                show(start),
                show(ready)
            )
        },
    );
    f.check(
        start.is_some_and(|s| s.1.contains("client pair valid")),
        || {
            format!(
                "kubelet's first start read an expired pair: {:?}",
                show(start)
            )
        },
    );
    for pod in STATIC_PODS {
        let line = first(&kubelet, &format!("static pod {pod} started"));
        f.check(
            line.is_some_and(|l| l.1.ends_with("started: valid")),
            || {
                format!(
                    "static pod {pod}'s first start read expired certificates: {:?}",
                    show(line)
                )
            },
        );
    }
    let failed: Vec<_> = kubelet
        .iter()
        .filter(|(_, m)| m.contains("handshake with the API server failed"))
        .collect();
    f.check(failed.is_empty(), || {
        format!("kubelet retried: {failed:#?}")
    });

    // Every leaf renewed; kubelet's kubelet's way, its old pair kept.
    let after = leaves(&tree, &tmp.path().join("after"));
    for (was, leaf) in facts_before.iter().zip(&after) {
        check_renewed(&mut f, was, leaf);
    }
    let new_pair = kubelet_pair(&tree);
    f.check(new_pair != old_pair, || {
        format!("the symlink still names {old_pair:?}")
    });
    let kept = fs::read(&old_pair).ok() == Some(old_bytes);
    f.check(kept, || format!("{old_pair:?} was changed"));

    // The node serves the renewed apiserver.crt; kubelet's last run authenticated with the
    // renewed pair.
    f.check(served(&ctl) == apiserver, || {
        "the API server serves another certificate".into()
    });
    let serial = x509(&new_pair, &["-serial"]);
    let last = kubelet
        .iter()
        .rev()
        .find(|(_, m)| m.starts_with("kubelet authenticated"));
    f.check(last.is_some_and(|(_, m)| m.ends_with(&serial)), || {
        format!("kubelet's last authentication {last:?} was not with the renewed pair ({serial})")
    });

    // kubelet.crt, its self-signed serving pair, made anew as kubelet makes it: a new
    // throwaway CA signed it.
    let serving = tree.join("var/lib/kubelet/pki/kubelet.crt");
    let issuer = x509(&serving, &["-issuer"]);
    f.check(issuer != serving_issuer, || {
        format!("kubelet.crt was not renewed: its issuer is still {issuer}")
    });
    // No alarm at all.
    let text = ctl.run(["certrenewd", "alarms", "--output", "json"]);
    let alarms: Value = serde_json::from_str(&text.unwrap_or_else(|e| panic!("{e:#}"))).unwrap();
    say(&format!("active alarms: {:#}", alarms["alarms"]));
    let active: Vec<&Value> = alarms["alarms"].as_array().into_iter().flatten().collect();
    f.check(active.is_empty(), || format!("alarms: {active:#?}"));
    say(&String::from_utf8_lossy(
        &ctl.exec(["certrenewd", "check"]).stdout,
    ));
    f.finish(NAME);
}
