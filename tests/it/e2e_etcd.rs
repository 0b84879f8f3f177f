//! End to end against a real etcd: a 3-member cluster with mutual TLS on loopback,
//! run as user units of the sandbox's systemd manager, and certrenewd running as the shipped
//! Type=notify unit (its network lines unchanged: it may connect to loopback). Its first pass renews the members' certificates
//! (10 days from expiry), restarts the members one at a time and checks that each client and
//! peer port serves the renewed certificate; etcdctl (Go's TLS stack) and `openssl s_client`
//! then confirm it from outside. Then a member that does not take the renewed certificate:
//! the 250.003 alarm names it, and is cleared once the member is fixed.
//!
//! - `cfssl_pki_...`: a cfssl-made PKI (Go encoding: PrintableString names, PKCS#1 keys) with
//!   separate server, peer and client certificates per member (kubeadm's etcd directory, one
//!   copy per member as on three control-plane nodes; CA key on each), one watch per member
//!   with its client and peer ports; the broken member serves a stale copy of its old
//!   certificate, so the check fails and `rollback_on_failure` (default) restores the pair.
//! - `openssl_starlingx_...`: the openssl-made StarlingX layout (etcd CA in etc/etcd, the
//!   kube-apiserver etcd client certificate signed by it in etc/kubernetes/pki), one watch for
//!   the three members' shared certificates; the broken member cannot start at all, with
//!   `rollback_on_failure = false`, and the next plain pass restarts it.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::e2e::{self, DAEMON};
use common::etcd_e2e::{self, CertId, Client, Ports};
use common::sandbox::Sandbox;
use serde_json::Value;

const MEMBERS: [u16; 3] = [1, 2, 3];
/// How long a restarted member may take to serve again (also each endpoint check's limit).
const RESTART_TIMEOUT_SECS: u64 = 10;
/// The 250.003 text.
const NOT_UPDATED: &str = "renewed but not all services have been updated";

fn unit(n: u16) -> String {
    format!("etcd-{n}.service")
}

fn elapsed(t0: Instant) -> String {
    format!("{:.1}s", t0.elapsed().as_secs_f64())
}

/// The config the daemon and the CLI share. `watches`: (path, units, endpoints).
fn write_config(
    path: &Path,
    state_dir: &Path,
    extra: &str,
    watches: &[(PathBuf, Vec<String>, Vec<String>)],
) {
    let mut text = format!(
        "bus = \"user\"\nstate_dir = \"{}\"\n# The fixtures' due leaves were issued for 10 days only.\nvalidity_days = 365\nrun_on_start = true\n# Only the start pass and the passes the test asks for.\nschedule = \"0 0 0 1 1 *\"\nrestart_timeout_secs = {RESTART_TIMEOUT_SECS}\n{extra}",
        state_dir.display()
    );
    for (dir, units, endpoints) in watches {
        let q = |v: &[String]| {
            v.iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // These members are restarted for their renewals, the path a CA change and a
        // failed proof still take (reload_proof.rs shows them read again instead).
        text.push_str(&format!(
            "\n[[watch]]\npath = \"{}\"\nunits = [{}]\non_renew = \"restart\"\n",
            dir.display(),
            q(units)
        ));
        if !endpoints.is_empty() {
            text.push_str(&format!("verify_endpoints = [{}]\n", q(endpoints)));
        }
    }
    fs::write(path, common::single_node(&text)).expect("writing the config");
}

/// Starts the daemon unit and waits for the result of its start pass; fails on a failed pass.
fn start_daemon_and_wait_for_first_pass(sb: &Sandbox, config: &Path, work: &Path) -> String {
    etcd_e2e::install_daemon(sb, config, work);
    sb.systemctl(["start", DAEMON])
        .unwrap_or_else(|e| panic!("{e:#}\n{}", etcd_e2e::journal_tail(sb, 60)));
    let status = e2e::wait_for(
        "the result of the daemon's start pass",
        Duration::from_secs(90),
        || {
            let s = e2e::status_text(sb);
            if s.contains("last pass: ") && !s.contains("last pass: none yet") {
                Ok(s)
            } else {
                Err(s)
            }
        },
    );
    assert!(
        status.contains("last pass: ok"),
        "{status}\n{}",
        etcd_e2e::journal_tail(sb, 80)
    );
    status
}

/// Each unit got a new main process and is active; no two were down at the same time (each
/// was stopped, or when it had no process started, only after the one restarted before it
/// was active again). Returns the units in the order they were restarted.
fn assert_restarted_one_at_a_time(
    sb: &Sandbox,
    units: &[String],
    pids_before: &[u32],
) -> Vec<String> {
    let mut spans = Vec::new();
    for (u, before) in units.iter().zip(pids_before) {
        let after = e2e::main_pid(sb, u);
        assert!(
            after != 0 && after != *before,
            "{u}: MainPID {before} -> {after}"
        );
        assert_eq!(e2e::prop(sb, u, "ActiveState"), "active", "{u}");
        let left = if *before != 0 {
            etcd_e2e::mono(sb, u, "ActiveExitTimestampMonotonic")
        } else {
            etcd_e2e::mono(sb, u, "InactiveExitTimestampMonotonic")
        };
        let back = etcd_e2e::mono(sb, u, "ActiveEnterTimestampMonotonic");
        assert!(
            back > left,
            "{u}: active again ({back}) before it left ({left})"
        );
        spans.push((left, back, u.clone()));
    }
    spans.sort();
    for w in spans.windows(2) {
        let ((_, back, first), (left, _, next)) = (&w[0], &w[1]);
        assert!(
            left > back,
            "{next} went down ({left}) before {first} was active again ({back})\n{}",
            etcd_e2e::journal_tail(sb, 120)
        );
    }
    spans.into_iter().map(|(_, _, u)| u).collect()
}

/// The daemon logged "serves the current certificate" for each endpoint.
fn assert_endpoints_verified(sb: &Sandbox, endpoints: &[String]) {
    let entries = etcd_e2e::certrenewd_entries(sb);
    for ep in endpoints {
        assert!(
            entries.iter().any(|e| {
                e2e::field(e, "MESSAGE").contains("serves the current certificate")
                    && e2e::field(e, "CERTRENEWD_ENDPOINT") == *ep
            }),
            "no successful check of {ep} in the journal:\n{}",
            etcd_e2e::journal_tail(sb, 80)
        );
    }
}

/// No alarm entry in the journal and none active.
fn assert_no_alarms(sb: &Sandbox, config: &Path) {
    let with_alarm: Vec<Value> = etcd_e2e::certrenewd_entries(sb)
        .into_iter()
        .filter(|e| e.get("ALARM_ID").is_some())
        .collect();
    assert!(with_alarm.is_empty(), "alarm entries: {with_alarm:#?}");
    let active = etcd_e2e::active_alarms(config);
    assert!(active.is_empty(), "active alarms: {active:#?}");
}

/// The 250.003 entries with ALARM_STATE=`state`.
fn not_updated_entries(sb: &Sandbox, state: &str) -> Vec<Value> {
    e2e::alarm_entries(sb)
        .into_iter()
        .filter(|e| e2e::field(e, "ALARM_ID") == "250.003" && e2e::field(e, "ALARM_STATE") == state)
        .collect()
}

/// etcd-3.service replaced by `edit` of its unit, which must change it (else it `unchanged`);
/// the unit as it was, to put back.
fn replace_etcd3_unit(sb: &Sandbox, unchanged: &str, edit: impl FnOnce(&str) -> String) -> String {
    let unit_file = sb.dir().join("config/systemd/user/etcd-3.service");
    let good_unit = fs::read_to_string(&unit_file).expect("reading etcd-3.service");
    let bad_unit = edit(&good_unit);
    assert_ne!(bad_unit, good_unit, "etcd-3.service {unchanged}");
    sb.install_unit("etcd-3.service", &bad_unit)
        .expect("installing the changed etcd-3.service");
    good_unit
}

/// `renew --force cert`, a pass that fails (status 1) raising 250.003 "not updated": one set
/// entry in the journal and one active alarm, whose reason and record are returned.
fn failed_forced_renewal(sb: &Sandbox, config: &Path, cert: &Path, t0: Instant) -> (String, Value) {
    let t1 = Instant::now();
    let out = e2e::certrenewd_in(
        sb,
        config,
        &["renew", "--force", &cert.display().to_string()],
    );
    eprintln!("[{}] failing pass took {}", elapsed(t0), elapsed(t1));
    assert_eq!(out.status.code(), Some(1), "{}", e2e::show(&out));
    let set = not_updated_entries(sb, "set");
    assert_eq!(set.len(), 1, "{set:#?}");
    let msg = e2e::field(&set[0], "MESSAGE");
    assert!(msg.contains(NOT_UPDATED), "{msg}");
    let active = etcd_e2e::active_alarms(config);
    assert_eq!(active.len(), 1, "{active:#?}");
    assert_eq!(active[0]["id"], "250.003");
    (e2e::field(&set[0], "ALARM_REASON"), active[0].clone())
}

/// 250.003 "not updated" cleared: one clear entry in the journal, no alarm active.
fn assert_cleared_once(sb: &Sandbox, config: &Path) {
    let clear = not_updated_entries(sb, "clear");
    assert_eq!(clear.len(), 1, "{clear:#?}");
    assert!(
        etcd_e2e::active_alarms(config).is_empty(),
        "alarm still active"
    );
}

/// A renewed certificate: new serial, a year of validity, the same subject and issuer down to
/// the string types (Go matches issuers by their bytes), verifies against the CA.
fn assert_renewed(ca: &Path, cert: &Path, before: &CertId) -> CertId {
    let now = etcd_e2e::cert_id(cert);
    assert_ne!(now.serial, before.serial, "{} not renewed", cert.display());
    assert_eq!(now.names, before.names, "{}", cert.display());
    assert!(
        e2e::valid_for_days(cert, 300),
        "{} expires {}",
        cert.display(),
        now.not_after
    );
    assert!(
        e2e::openssl_verifies(ca, cert),
        "openssl verify {}",
        cert.display()
    );
    now
}

/// `etcdctl endpoint health --cluster` sees all three members healthy.
fn assert_cluster_healthy(client: &Client, ports: Ports) {
    let out = client.etcdctl_ok(
        &ports.endpoints(&MEMBERS),
        &["endpoint", "health", "--cluster"],
    );
    assert_eq!(out.matches("is healthy").count(), 3, "{out}");
}

/// A put through member `via_put` is read back through member `via_get`.
fn assert_put_get(client: &Client, ports: Ports, via_put: u16, via_get: u16, key: &str, val: &str) {
    let out = client.etcdctl_ok(&ports.endpoints(&[via_put]), &["put", key, val]);
    assert_eq!(out.trim(), "OK", "{out}");
    let out = client.etcdctl_ok(
        &ports.endpoints(&[via_get]),
        &["get", "--print-value-only", key],
    );
    assert_eq!(out.trim(), val, "{out}");
}

#[test]
fn cfssl_pki_separate_server_peer_client_certificates_renewed_restarted_and_verified() {
    const NAME: &str =
        "cfssl_pki_separate_server_peer_client_certificates_renewed_restarted_and_verified";
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t0 = Instant::now();
    let ports = Ports { base: 11500 };
    ports.assert_free();
    let work = sb.dir().join("work");
    let fixtures = work.join("kubeadm");
    e2e::mkpki("kubeadm", &fixtures);
    // kubeadm's etcd directory, one copy per member (three control-plane nodes).
    let src = fixtures.join("etc/kubernetes/pki/etcd");
    let pki = work.join("pki");
    let member = |n: u16| pki.join(format!("member-{n}"));
    for n in MEMBERS {
        for name in ["ca", "server", "peer", "healthcheck-client"] {
            for ext in ["crt", "key"] {
                let f = format!("{name}.{ext}");
                etcd_e2e::copy_file(&src.join(&f), &member(n).join(&f));
            }
        }
    }
    sb.start_etcd(
        &pki,
        &[
            ("SANDBOX_ETCD_PORT_BASE", &ports.base.to_string()),
            ("SANDBOX_ETCD_CA", "member-{N}/ca.crt"),
            ("SANDBOX_ETCD_SERVER_CERT", "member-{N}/server.crt"),
            ("SANDBOX_ETCD_SERVER_KEY", "member-{N}/server.key"),
            ("SANDBOX_ETCD_PEER_CERT", "member-{N}/peer.crt"),
            ("SANDBOX_ETCD_PEER_KEY", "member-{N}/peer.key"),
            (
                "SANDBOX_ETCD_CLIENT_CERT",
                "member-{N}/healthcheck-client.crt",
            ),
            (
                "SANDBOX_ETCD_CLIENT_KEY",
                "member-{N}/healthcheck-client.key",
            ),
        ],
    )
    .expect("etcd cluster");
    eprintln!("[{}] etcd cluster healthy", elapsed(t0));

    let leaves = ["server.crt", "peer.crt", "healthcheck-client.crt"];
    let before: Vec<Vec<CertId>> = MEMBERS
        .iter()
        .map(|n| {
            leaves
                .map(|f| etcd_e2e::cert_id(&member(*n).join(f)))
                .to_vec()
        })
        .collect();
    let units: Vec<String> = MEMBERS.iter().map(|n| unit(*n)).collect();
    let pids: Vec<u32> = units.iter().map(|u| e2e::main_pid(&sb, u)).collect();

    let config = work.join("certrenewd.toml");
    let mut endpoints = Vec::new();
    let watches: Vec<_> = MEMBERS
        .iter()
        .map(|n| {
            let eps = vec![
                format!("127.0.0.1:{}", ports.client(*n)),
                format!("127.0.0.1:{}", ports.peer(*n)),
            ];
            endpoints.extend(eps.clone());
            (member(*n), vec![unit(*n)], eps)
        })
        .collect();
    write_config(&config, &work.join("state"), "", &watches);
    let status = start_daemon_and_wait_for_first_pass(&sb, &config, &work);
    eprintln!("[{}] daemon start pass: {status}", elapsed(t0));

    // Renewed, restarted one member at a time, each port checked by the daemon, no alarm.
    let mut renewed = Vec::new();
    for (i, n) in MEMBERS.iter().enumerate() {
        let ca = member(*n).join("ca.crt");
        let ids: Vec<CertId> = leaves
            .iter()
            .zip(&before[i])
            .map(|(f, b)| assert_renewed(&ca, &member(*n).join(f), b))
            .collect();
        // Still the Go encoding cfssl wrote: PrintableString names, PKCS#1 keys.
        for (f, id) in leaves.iter().zip(&ids) {
            assert!(
                id.names.contains("PRINTABLESTRING") && !id.names.contains("UTF8STRING"),
                "member {n} {f}: {}",
                id.names
            );
            let key = fs::read_to_string(member(*n).join(f).with_extension("key")).unwrap();
            assert!(
                key.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
                "member {n} {f} key"
            );
        }
        renewed.push(ids);
    }
    let order = assert_restarted_one_at_a_time(&sb, &units, &pids);
    assert_eq!(order, units, "restart order: the order of the watches");
    assert_endpoints_verified(&sb, &endpoints);
    assert_no_alarms(&sb, &config);

    // From outside, with the renewed client certificates: etcd (Go) accepts them and serves
    // the renewed server and peer certificates.
    let client = |n: u16| Client {
        ca: member(n).join("ca.crt"),
        cert: member(n).join("healthcheck-client.crt"),
        key: member(n).join("healthcheck-client.key"),
    };
    assert_cluster_healthy(&client(1), ports);
    assert_put_get(&client(1), ports, 1, 3, "/certrenewd/e2e", "renewed");
    for (i, n) in MEMBERS.iter().enumerate() {
        assert_eq!(
            client(*n).served(ports.client(*n)),
            renewed[i][0],
            "member {n} client port"
        );
        assert_eq!(
            client(*n).served(ports.peer(*n)),
            renewed[i][1],
            "member {n} peer port"
        );
    }
    eprintln!("[{}] renewed certificates served and accepted", elapsed(t0));

    // Member 3 comes back from its restart serving a stale copy of its certificate.
    let m3 = member(3);
    let server3 = m3.join("server.crt");
    let stale = work.join("stale");
    for f in ["server.crt", "server.key"] {
        etcd_e2e::copy_file(&m3.join(f), &stale.join(f));
    }
    // Run through a wrapper certrenewd does not follow (`env`): what it reads is not known,
    // so its watch's renewals restart it, as for any unit whose settings cannot be read.
    let good_unit = replace_etcd3_unit(&sb, "names no --cert-file", |unit| {
        unit.replacen(
            "ExecStart=/usr/bin/etcd ",
            "ExecStart=/usr/bin/env /usr/bin/etcd ",
            1,
        )
        .replace(
            &format!("--cert-file {}", server3.display()),
            &format!("--cert-file {}", stale.join("server.crt").display()),
        )
        .replace(
            &format!("--key-file {}", m3.join("server.key").display()),
            &format!("--key-file {}", stale.join("server.key").display()),
        )
    });
    let previous = etcd_e2e::cert_id(&server3);
    let (reason, active) = failed_forced_renewal(&sb, &config, &server3, t0);
    let client3 = format!("127.0.0.1:{}", ports.client(3));
    assert!(
        reason.contains(&format!("endpoint {client3}"))
            && reason.contains("still serves the replaced certificate")
            && reason.contains(previous.serial.to_lowercase().trim_start_matches('0')),
        "{reason}"
    );
    assert!(reason.contains("rolled back"), "{reason}");
    assert!(
        active["reason"].as_str().unwrap_or("").contains(&client3),
        "{active:#?}"
    );
    // rollback_on_failure: the pair the member serves is back in place, and it is up.
    assert_eq!(etcd_e2e::cert_id(&server3), previous);
    assert_eq!(e2e::prop(&sb, "etcd-3.service", "ActiveState"), "active");
    assert_eq!(client(3).served(ports.client(3)), previous);
    assert_cluster_healthy(&client(1), ports);

    // Fixed unit, another pass: the member takes the new certificate, the alarm clears.
    sb.install_unit("etcd-3.service", &good_unit)
        .expect("restoring etcd-3.service");
    let out = e2e::certrenewd_in(
        &sb,
        &config,
        &["renew", "--force", &server3.display().to_string()],
    );
    assert!(out.status.success(), "{}", e2e::show(&out));
    let fixed = assert_renewed(&m3.join("ca.crt"), &server3, &previous);
    assert_eq!(client(3).served(ports.client(3)), fixed);
    assert_cleared_once(&sb, &config);
    assert_cluster_healthy(&client(3), ports);
    assert_put_get(&client(3), ports, 3, 2, "/certrenewd/e2e", "fixed");
    eprintln!("[{}] failure path done", elapsed(t0));

    sb.stop().expect("stopping the sandbox");
    etcd_e2e::assert_nothing_left(sb.dir());
    eprintln!("[{}] {NAME} done", elapsed(t0));
}

#[test]
fn openssl_starlingx_pki_renewed_restarted_and_verified() {
    const NAME: &str = "openssl_starlingx_pki_renewed_restarted_and_verified";
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let t0 = Instant::now();
    let ports = Ports { base: 12000 };
    ports.assert_free();
    let work = sb.dir().join("work");
    let root = work.join("starlingx");
    e2e::mkpki("starlingx", &root);
    let etcd_dir = root.join("etc/etcd");
    let k8s_dir = root.join("etc/kubernetes/pki");
    let ca = etcd_dir.join("ca.crt");
    let server = etcd_dir.join("etcd-server.crt");
    let etcd_client = etcd_dir.join("etcd-client.crt");
    let apiserver_client = k8s_dir.join("apiserver-etcd-client.crt");
    let with_key = |crt: &Path| crt.with_extension("key");
    // etcd-client.crt (CN=root) has expired: the sandbox waits with kube-apiserver's.
    sb.start_etcd(
        &etcd_dir,
        &[
            ("SANDBOX_ETCD_PORT_BASE", &ports.base.to_string()),
            (
                "SANDBOX_ETCD_CLIENT_CERT",
                &apiserver_client.display().to_string(),
            ),
            (
                "SANDBOX_ETCD_CLIENT_KEY",
                &with_key(&apiserver_client).display().to_string(),
            ),
        ],
    )
    .expect("etcd cluster");
    sb.install_unit("kube-apiserver.service", e2e::SLEEPER)
        .expect("installing kube-apiserver.service");
    sb.systemctl(["start", "kube-apiserver.service"])
        .expect("starting kube-apiserver.service");
    eprintln!("[{}] etcd cluster healthy", elapsed(t0));

    let due = [&server, &etcd_client, &apiserver_client];
    let before: Vec<CertId> = due.iter().map(|c| etcd_e2e::cert_id(c)).collect();
    let mut units: Vec<String> = MEMBERS.iter().map(|n| unit(*n)).collect();
    units.push("kube-apiserver.service".into());
    let pids: Vec<u32> = units.iter().map(|u| e2e::main_pid(&sb, u)).collect();

    let config = work.join("certrenewd.toml");
    let endpoints: Vec<String> = MEMBERS
        .iter()
        .map(|n| format!("127.0.0.1:{}", ports.client(*n)))
        .collect();
    write_config(
        &config,
        &work.join("state"),
        "rollback_on_failure = false\n",
        &[
            (etcd_dir.clone(), units[..3].to_vec(), endpoints.clone()),
            (
                k8s_dir.clone(),
                vec!["kube-apiserver.service".into()],
                vec![],
            ),
        ],
    );
    let status = start_daemon_and_wait_for_first_pass(&sb, &config, &work);
    eprintln!("[{}] daemon start pass: {status}", elapsed(t0));

    let renewed: Vec<CertId> = due
        .iter()
        .zip(&before)
        .map(|(c, b)| assert_renewed(&ca, c, b))
        .collect();
    let order = assert_restarted_one_at_a_time(&sb, &units, &pids);
    assert_eq!(order, units, "restart order: the order of the watches");
    assert_endpoints_verified(&sb, &endpoints);
    assert_no_alarms(&sb, &config);

    // kube-apiserver's renewed etcd client certificate, and the once expired etcd-client.
    let apiserver = Client {
        ca: ca.clone(),
        cert: apiserver_client.clone(),
        key: with_key(&apiserver_client),
    };
    let root_client = Client {
        ca: ca.clone(),
        cert: etcd_client.clone(),
        key: with_key(&etcd_client),
    };
    assert_cluster_healthy(&apiserver, ports);
    assert_cluster_healthy(&root_client, ports);
    assert_put_get(&apiserver, ports, 2, 1, "/registry/e2e", "renewed");
    for n in MEMBERS {
        assert_eq!(
            apiserver.served(ports.client(n)),
            renewed[0],
            "member {n} client port"
        );
        assert_eq!(
            apiserver.served(ports.peer(n)),
            renewed[0],
            "member {n} peer port"
        );
    }
    eprintln!("[{}] renewed certificates served and accepted", elapsed(t0));

    // etcd-3 cannot start any more; the next renewal restarts the members one by one.
    let good_unit = replace_etcd3_unit(&sb, "changed shape", |unit| {
        unit.replace("ExecStart=/usr/bin/etcd ", "ExecStart=/bin/false ")
            .replace("Restart=on-failure", "Restart=no")
    });
    let previous = etcd_e2e::cert_id(&server);
    let (reason, _) = failed_forced_renewal(&sb, &config, &server, t0);
    let client3 = format!("127.0.0.1:{}", ports.client(3));
    assert!(
        reason.contains("etcd-3.service") && reason.contains(&format!("endpoint {client3}")),
        "{reason}"
    );
    assert!(!reason.contains("rolled back"), "{reason}");
    assert!(
        !reason.contains("etcd-1.service") && !reason.contains("etcd-2.service"),
        "{reason}"
    );
    // No rollback: the new certificate stays, served by the two members that came back.
    let second = assert_renewed(&ca, &server, &previous);
    assert_ne!(e2e::prop(&sb, "etcd-3.service", "ActiveState"), "active");
    for n in [1, 2] {
        assert_eq!(apiserver.served(ports.client(n)), second, "member {n}");
    }
    assert_put_get(&apiserver, ports, 1, 2, "/registry/e2e", "quorum of two");

    // The unit fixed, a plain pass restarts what the failed one left and clears the alarm.
    sb.install_unit("etcd-3.service", &good_unit)
        .expect("restoring etcd-3.service");
    let pids: Vec<u32> = units[..3].iter().map(|u| e2e::main_pid(&sb, u)).collect();
    let out = e2e::certrenewd_in(&sb, &config, &["renew"]);
    assert!(out.status.success(), "{}", e2e::show(&out));
    let order = assert_restarted_one_at_a_time(&sb, &units[..3], &pids);
    eprintln!("[{}] restarted again: {order:?}", elapsed(t0));
    assert_eq!(etcd_e2e::cert_id(&server), second, "renewed again");
    assert_cleared_once(&sb, &config);
    for n in MEMBERS {
        assert_eq!(
            apiserver.served(ports.client(n)),
            second,
            "member {n} client port"
        );
        assert_eq!(
            apiserver.served(ports.peer(n)),
            second,
            "member {n} peer port"
        );
    }
    assert_cluster_healthy(&apiserver, ports);
    assert_put_get(&apiserver, ports, 3, 1, "/registry/e2e", "all three");
    eprintln!("[{}] failure path done", elapsed(t0));

    sb.stop().expect("stopping the sandbox");
    etcd_e2e::assert_nothing_left(sb.dir());
    eprintln!("[{}] {NAME} done", elapsed(t0));
}

/// SIGTERM while the daemon's pass waits for the restart lock (another node holds
/// it: `etcdctl lock` on the same prefix) stops the daemon at once, not after
/// `lock_timeout_secs` or the unit's 10-minute stop timeout: at shutdown etcd and kubelet stop
/// first and the reboot must not hang. The renewed files stay installed and the restarts
/// stay owed in `restarts.json`, for the next start. Then `renew` by hand against the same
/// held lock: renewed, nothing restarted, the holder named, the restarts still owed.
#[test]
fn sigterm_ends_the_wait_for_the_restart_lock_and_leaves_the_restarts_owed() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let ports = Ports { base: 12500 };
    ports.assert_free();
    let work = sb.dir().join("work");
    let root = work.join("starlingx");
    e2e::mkpki("starlingx", &root);
    let etcd_dir = root.join("etc/etcd");
    let client = root.join("etc/kubernetes/pki/apiserver-etcd-client");
    let (cert, key) = (client.with_extension("crt"), client.with_extension("key"));
    let vars = [
        ("SANDBOX_ETCD_PORT_BASE", ports.base.to_string()),
        ("SANDBOX_ETCD_CLIENT_CERT", cert.display().to_string()),
        ("SANDBOX_ETCD_CLIENT_KEY", key.display().to_string()),
    ];
    let vars_ref: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    sb.start_etcd(&etcd_dir, &vars_ref).expect("etcd cluster");
    // Another node holds the restart lock.
    let holder = sb.hold_restart_lock(&etcd_dir, &vars_ref);
    let config = work.join("certrenewd.toml");
    let state = work.join("state");
    let endpoints: Vec<String> = MEMBERS
        .iter()
        .map(|n| format!("\"https://127.0.0.1:{}\"", ports.client(*n)))
        .collect();
    let coordination = format!(
        "rollback_on_failure = false\n[coordination]\nenabled = true\nendpoints = [{}]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\nlock_timeout_secs = 120\n",
        endpoints.join(", "),
        cert.display(),
        key.display(),
        etcd_dir.join("ca.crt").display()
    );
    // [coordination] ends the top-level keys: the watch tables follow it.
    let units: Vec<String> = MEMBERS.iter().map(|n| unit(*n)).collect();
    write_config(
        &config,
        &state,
        &coordination,
        &[(etcd_dir.clone(), units.clone(), vec![])],
    );
    etcd_e2e::install_daemon(&sb, &config, &work);
    sb.systemctl(["start", DAEMON])
        .expect("starting the daemon");
    let st = e2e::wait_status(&sb, "waiting for the restart lock", Duration::from_secs(60));
    eprintln!("waiting: {st}");

    let t0 = Instant::now();
    sb.systemctl(["stop", DAEMON]).expect("systemctl stop");
    let took = t0.elapsed();
    let result = e2e::prop(&sb, DAEMON, "Result");
    eprintln!("stopped in {took:?}, Result={result}");
    assert_eq!(result, "success", "{}", etcd_e2e::journal_tail(&sb, 40));
    // Not the lock's 120 s, nor the unit's 10-minute stop timeout.
    assert!(took < Duration::from_secs(60), "stopping took {took:?}");
    let journal = etcd_e2e::journal_tail(&sb, 60);
    assert!(
        journal.contains("certrenewd is stopping (SIGTERM)"),
        "{journal}"
    );
    // The files were renewed, the restarts are owed to the next start.
    let owed = fs::read_to_string(state.join("restarts.json")).expect("restarts.json");
    for u in &units {
        assert!(owed.contains(u.as_str()), "{u} not owed: {owed}");
    }

    // `renew` by hand, while the other node still holds the lock: the same lock and gate as
    // the daemon's pass. It renews the file, waits its lock_timeout_secs, restarts nothing,
    // says who holds the lock, and leaves every restart owed.
    let by_hand = work.join("by-hand.toml");
    let short = coordination.replace("lock_timeout_secs = 120", "lock_timeout_secs = 3");
    write_config(
        &by_hand,
        &state,
        &short,
        &[(etcd_dir.clone(), units.clone(), vec![])],
    );
    let server = etcd_dir.join("etcd-server.crt").display().to_string();
    let out = sb.exec(
        e2e::BIN,
        [
            "--config",
            by_hand.to_str().unwrap(),
            "renew",
            "--force",
            &server,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("renew by hand:\n{stdout}");
    drop(holder);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("renewed       {server} serial ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("HELD BACK")
            && stdout.contains("was held by an unnamed holder of /certrenewd/restart-lock/"),
        "{stdout}"
    );
    let owed = fs::read_to_string(state.join("restarts.json")).expect("restarts.json");
    for u in &units {
        assert!(
            owed.contains(u.as_str()),
            "{u} not owed after renew: {owed}"
        );
    }
}
