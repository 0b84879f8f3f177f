//! One etcd member on loopback, outside the sandbox (`renew_go_etcd`, `served_names`):
//! Debian's etcd started with the flags a test gives, its log kept beside its data, killed
//! by its PID on drop; and etcdctl with a client identity.

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const ETCD: &str = "/usr/bin/etcd";
pub const ETCDCTL: &str = "/usr/bin/etcdctl";

/// A TLS identity: CA file, certificate, key.
#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A free TCP port on the loopback address `ip`.
pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A command's status and output, for messages.
pub use super::e2e::show as text;

/// `etcdctl` (API v3) at `endpoints` with the `tls` client identity (3 s to connect, 5 s
/// a command).
pub fn etcdctl(endpoints: &str, tls: &Tls, args: &[&str]) -> Output {
    Command::new(ETCDCTL)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg(format!("--cacert={}", tls.ca.display()))
        .arg(format!("--cert={}", tls.cert.display()))
        .arg(format!("--key={}", tls.key.display()))
        .args(["--dial-timeout=3s", "--command-timeout=5s"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running etcdctl")
}

/// A running etcd member.
pub struct Etcd {
    child: Child,
    data: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    /// Starts `etcd --name=NAME --data-dir=<temp> FLAGS...` (its output to its log) and
    /// waits up to 30 s for `ready` to succeed; fails with the last answer and the log if
    /// it does not, or if etcd exits.
    pub fn start(name: &str, flags: &[String], ready: impl Fn() -> Output) -> Etcd {
        let data = tempfile::Builder::new()
            .prefix("certrenewd-etcd.")
            .tempdir()
            .expect("temp dir");
        let log = fs::File::create(data.path().join("etcd.log")).expect("etcd log");
        let child = Command::new(ETCD)
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", data.path().join("data").display()))
            .args(flags)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {ETCD}: {e}"));
        let mut etcd = Etcd { child, data };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                panic!("etcd exited early ({status}):\n{}", etcd.log());
            }
            let out = ready();
            if out.status.success() {
                return etcd;
            }
            assert!(
                Instant::now() < deadline,
                "etcd not ready after 30 s: {}\n--- etcd log\n{}",
                text(&out),
                etcd.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// What etcd has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.data.path().join("etcd.log")).unwrap_or_default()
    }
}
