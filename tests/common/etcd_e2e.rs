//! Helpers for `tests/it/e2e_etcd.rs` (owned by it): a real 3-member etcd cluster in the sandbox,
//! the shipped daemon unit relaxed for `verify_endpoints`, and the outside views of what a
//! member serves (`openssl s_client`, `etcdctl`).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::e2e;
use super::sandbox::Sandbox;

/// The shipped unit as `e2e::daemon_unit` adapts it to the sandbox, unchanged in its network
/// lines: it may connect to loopback (the etcd members of the restart lock, `verify_endpoints`).
pub fn daemon_unit_with_verify(config: &Path, writable: &Path) -> String {
    let unit = e2e::daemon_unit(config, writable);
    for line in [
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "IPAddressDeny=any",
        "SocketBindDeny=any",
    ] {
        assert!(
            unit.lines().any(|l| l.trim() == line),
            "the shipped unit should have `{line}`"
        );
    }
    assert!(
        unit.lines()
            .any(|l| l.starts_with("IPAddressAllow=localhost "))
    );
    assert!(!unit.contains("PrivateNetwork=yes"));
    unit
}

/// Installs [`daemon_unit_with_verify`] as `certrenewd.service`.
pub fn install_daemon(sb: &Sandbox, config: &Path, writable: &Path) {
    e2e::prepare_host_like_run(sb);
    sb.install_unit(e2e::DAEMON, &daemon_unit_with_verify(config, writable))
        .expect("installing certrenewd.service");
}

/// The loopback ports of the sandbox's cluster for `SANDBOX_ETCD_PORT_BASE` = `base`: from
/// `base + 179` to `base + 380` (member N: `base + N*100 + 79` and `+ 80`). Test binaries run
/// side by side on one network, so each cluster's base is at least 500 from every other's;
/// and every base is below Linux's ephemeral range (32768 to 60999): there, a client
/// connection of another test may hold the port when a member binds it.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// `SANDBOX_ETCD_PORT_BASE`.
    pub base: u16,
}

impl Ports {
    /// The client port of member `n` (1..=3).
    pub fn client(self, n: u16) -> u16 {
        self.base + n * 100 + 79
    }

    /// The peer port of member `n` (1..=3).
    pub fn peer(self, n: u16) -> u16 {
        self.base + n * 100 + 80
    }

    /// `https://127.0.0.1:PORT` of the given members' client ports, comma-separated.
    pub fn endpoints(self, members: &[u16]) -> String {
        members
            .iter()
            .map(|n| format!("https://127.0.0.1:{}", self.client(*n)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Fails unless every port of the cluster is free on 127.0.0.1 (the sandbox shares the
    /// machine's network namespace).
    pub fn assert_free(self) {
        for n in 1..=3 {
            for port in [self.client(n), self.peer(n)] {
                if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
                    panic!("127.0.0.1:{port} is not free ({e}): another etcd still running?");
                }
            }
        }
    }
}

/// A certificate's serial (openssl's uppercase hex), notAfter, and subject and issuer with
/// the string type of each attribute, as `openssl x509` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertId {
    /// `serial=` value.
    pub serial: String,
    /// `notAfter=` value.
    pub not_after: String,
    /// `subject=` and `issuer=` values (RFC 2253 with types: `CN=PRINTABLESTRING:etcd-ca`).
    pub names: String,
}

/// The `openssl x509` options that print what [`CertId`] holds.
const X509_ARGS: &[&str] = &[
    "x509",
    "-noout",
    "-serial",
    "-enddate",
    "-subject",
    "-issuer",
    "-nameopt",
    "RFC2253,show_type",
];

fn parse_x509_text(text: &str) -> Option<CertId> {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    Some(CertId {
        serial: value("serial=")?,
        not_after: value("notAfter=")?,
        names: format!(
            "subject={} issuer={}",
            value("subject=")?,
            value("issuer=")?
        ),
    })
}

/// The [`CertId`] of the (first) certificate in a file.
pub fn cert_id(path: &Path) -> CertId {
    let o = Command::new("openssl")
        .args(X509_ARGS)
        .arg("-in")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl x509");
    assert!(
        o.status.success(),
        "openssl x509 {}: {}",
        path.display(),
        e2e::show(&o)
    );
    parse_x509_text(&String::from_utf8_lossy(&o.stdout))
        .unwrap_or_else(|| panic!("openssl x509 {}: {}", path.display(), e2e::show(&o)))
}

/// What `openssl s_client -connect 127.0.0.1:PORT -cert CERT -key KEY` is served, checked
/// against `ca` for the address 127.0.0.1 (the handshake must verify).
pub fn served_cert(port: u16, ca: &Path, cert: &Path, key: &Path) -> CertId {
    let o = Command::new("timeout")
        .arg("10")
        .args(["openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(ca)
        .args(["-verify_ip", "127.0.0.1", "-verify_return_error"])
        .arg("-cert")
        .arg(cert)
        .arg("-key")
        .arg(key)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl s_client");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("Verify return code: 0 (ok)"),
        "openssl s_client to 127.0.0.1:{port}: {}",
        e2e::show(&o)
    );
    let begin = stdout
        .find("-----BEGIN CERTIFICATE-----")
        .unwrap_or_else(|| panic!("no certificate from 127.0.0.1:{port}: {}", e2e::show(&o)));
    let end = stdout[begin..]
        .find("-----END CERTIFICATE-----")
        .map(|i| begin + i + "-----END CERTIFICATE-----".len())
        .expect("end of the served certificate");
    let pem = &stdout[begin..end];
    let mut child = Command::new("openssl")
        .args(X509_ARGS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running openssl x509");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), pem.as_bytes())
        .expect("writing to openssl x509");
    let x = child.wait_with_output().expect("openssl x509");
    assert!(x.status.success(), "openssl x509: {}", e2e::show(&x));
    parse_x509_text(&String::from_utf8_lossy(&x.stdout))
        .unwrap_or_else(|| panic!("openssl x509: {}", e2e::show(&x)))
}

/// A client identity for `etcdctl` and `openssl s_client`.
#[derive(Debug, Clone)]
pub struct Client {
    /// The CA that signed the members' certificates.
    pub ca: PathBuf,
    /// The client certificate (clientAuth).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl Client {
    /// `etcdctl` (v3 API) against `endpoints` with this identity, run outside the sandbox
    /// (loopback is shared). Returns the output whatever the exit status.
    pub fn etcdctl(&self, endpoints: &str, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(endpoints)
            .arg("--cacert")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.cert)
            .arg("--key")
            .arg(&self.key)
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running etcdctl")
    }

    /// Like [`Client::etcdctl`], but fails unless it exits 0; stdout and stderr together
    /// (etcdctl 3.4 prints `endpoint health` on stderr).
    pub fn etcdctl_ok(&self, endpoints: &str, args: &[&str]) -> String {
        let o = self.etcdctl(endpoints, args);
        assert!(
            o.status.success(),
            "etcdctl {args:?} on {endpoints} with {}: {}",
            self.cert.display(),
            e2e::show(&o)
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    /// What member port `port` serves to this identity.
    pub fn served(&self, port: u16) -> CertId {
        served_cert(port, &self.ca, &self.cert, &self.key)
    }
}

/// Copies `src` to `dst` with its mode (keys stay 0600).
pub fn copy_file(src: &Path, dst: &Path) {
    if let Some(dir) = dst.parent() {
        fs::create_dir_all(dir).expect("creating a directory");
    }
    fs::copy(src, dst)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", src.display(), dst.display()));
}

/// A monotonic timestamp property (µs) of a unit.
pub fn mono(sb: &Sandbox, unit: &str, property: &str) -> u64 {
    let v = e2e::prop(sb, unit, property);
    v.parse()
        .unwrap_or_else(|e| panic!("{unit} {property}={v:?}: {e}"))
}

/// Every journal entry of certrenewd (its logs and its alarm entries), oldest first.
pub fn certrenewd_entries(sb: &Sandbox) -> Vec<Value> {
    e2e::journal_sync(sb);
    sb.journal_json(["SYSLOG_IDENTIFIER=certrenewd"])
}

/// The last `n` lines of the sandbox journal, for failure messages.
pub fn journal_tail(sb: &Sandbox, n: usize) -> String {
    let o = Command::new("journalctl")
        .arg("-D")
        .arg(sb.journal_dir())
        .args(["--no-pager", "-o", "short-monotonic", "-n"])
        .arg(n.to_string())
        .output();
    match o {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("(journalctl: {e})"),
    }
}

/// The active alarms of `certrenewd alarms --output json` (the `alarms` array).
pub fn active_alarms(config: &Path) -> Vec<Value> {
    let v = e2e::alarms_json(config);
    v.get("alarms")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| panic!("alarms --output json has no `alarms` array: {v}"))
}

/// Fails if, within a few seconds, some process still names `dir` on its command line or a
/// mount of this namespace lies under it: what a test started must be gone once its sandbox
/// is stopped (the owner watcher of `sandbox.sh` may take a moment to exit after its TERM).
pub fn assert_nothing_left(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = leftovers(dir);
        if left.is_empty() {
            return;
        }
        if std::time::Instant::now() >= deadline {
            panic!("left behind:\n{}", left.join("\n"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut left = Vec::new();
    for entry in fs::read_dir("/proc").expect("reading /proc").flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&needle) {
                left.push(format!("{pid}: {cmd}"));
            }
        }
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains(&needle))
            .map(|l| format!("mount: {l}")),
    );
    left
}
