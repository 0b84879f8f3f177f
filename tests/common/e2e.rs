//! End-to-end helpers for the daemon and alarm tests (the `daemon_*` modules of tests/it and
//! tests/it/alarms_e2e.rs): PKI trees made by `tests/fixtures/mkpki.sh`, configs, the shipped
//! unit adapted to a sandbox user manager, polling, journal and openssl checks.

use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sandbox::Sandbox;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
/// The fixture generator.
pub const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");
/// The shipped unit file.
pub const SHIPPED_UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/certrenewd.service");
/// The shipped journald catalog.
pub const CATALOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/certrenewd.catalog");
/// The daemon's unit name in the sandbox.
pub const DAEMON: &str = "certrenewd.service";
/// The watchdog interval the test unit sets.
pub const WATCHDOG: Duration = Duration::from_secs(2);

/// A unit that runs until stopped.
pub const SLEEPER: &str =
    "[Unit]\nDescription=certrenewd test stand-in\n\n[Service]\nExecStart=/bin/sleep infinity\n";

/// A unit that runs while `flag` does not exist and fails to start once it does. Without a
/// start rate limit: back-to-back passes restart it more often than systemd's default 5 in 10 s.
pub fn flag_unit(flag: &Path) -> String {
    format!(
        "[Unit]\nDescription=certrenewd test stand-in that breaks on {flag}\nStartLimitIntervalSec=0\n\n[Service]\nExecStart=/bin/sh -c 'test ! -e {flag} && exec sleep infinity'\n",
        flag = flag.display()
    )
}

/// Builds the `layout` tree of `tests/fixtures/mkpki.sh` in `out` (which must not exist yet).
pub fn mkpki(layout: &str, out: &Path) {
    mkpki_with(layout, out, &[]);
}

/// [`mkpki`] with options, e.g. `--backdate` (due leaves of 365 days issued 355 days ago).
pub fn mkpki_with(layout: &str, out: &Path, options: &[&str]) {
    let o = Command::new("bash")
        .arg(MKPKI)
        .arg(layout)
        .arg(out)
        .args(options)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {MKPKI}: {e}"));
    assert!(
        o.status.success(),
        "mkpki.sh {layout} {}: {}",
        out.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One `[[watch]]`: a directory and its units.
pub struct WatchSpec<'a> {
    /// The directory watched.
    pub path: PathBuf,
    /// The units restarted when a certificate below it is renewed.
    pub units: &'a [&'a str],
}

/// A config for the sandbox: user bus, `state_dir`, 365-day renewals (the fixtures' due
/// leaves were issued for 10 days only), `extra` top-level lines, then the watches.
pub fn config_text(state_dir: &Path, extra: &str, watches: &[WatchSpec<'_>]) -> String {
    let mut s = format!(
        "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\n{extra}\n",
        state_dir.display()
    );
    for w in watches {
        let units: Vec<String> = w.units.iter().map(|u| format!("\"{u}\"")).collect();
        s.push_str(&format!(
            "\n[[watch]]\npath = \"{}\"\nunits = [{}]\n",
            w.path.display(),
            units.join(", ")
        ));
    }
    s
}

/// The `starlingx` tree made by mkpki in a temp dir (`pki`), and where a test's config file
/// (`c.toml`) and state dir (`state`) go beside it.
pub struct Starlingx {
    /// Holds everything; removed on drop.
    pub tmp: tempfile::TempDir,
    /// `pki/etc/etcd`.
    pub etcd: PathBuf,
    /// `pki/etc/kubernetes/pki`.
    pub k8s: PathBuf,
    /// The state dir.
    pub state: PathBuf,
    /// The config file.
    pub cfg: PathBuf,
}

impl Starlingx {
    /// Makes the tree.
    pub fn new() -> Starlingx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let pki = tmp.path().join("pki");
        mkpki("starlingx", &pki);
        Starlingx {
            etcd: pki.join("etc/etcd"),
            k8s: pki.join("etc/kubernetes/pki"),
            state: tmp.path().join("state"),
            cfg: tmp.path().join("c.toml"),
            tmp,
        }
    }

    /// `etcd` watched, restarting etcd.service.
    pub fn etcd_watch(&self) -> WatchSpec<'static> {
        WatchSpec {
            path: self.etcd.clone(),
            units: &["etcd.service"],
        }
    }

    /// `k8s` watched, restarting kubelet.service.
    pub fn k8s_watch(&self) -> WatchSpec<'static> {
        WatchSpec {
            path: self.k8s.clone(),
            units: &["kubelet.service"],
        }
    }

    /// Writes the config: [`config_text`] of the state dir, `extra` and `watches`.
    pub fn write_config(&self, extra: &str, watches: &[WatchSpec<'_>]) {
        self.write_config_text(&config_text(&self.state, extra, watches));
    }

    /// Writes `text` as the config.
    pub fn write_config_text(&self, text: &str) {
        fs::write(&self.cfg, super::single_node(text))
            .unwrap_or_else(|e| panic!("writing {}: {e}", self.cfg.display()));
    }
}

/// Makes the sandbox look like a host booted with systemd where the hardening of the shipped
/// unit depends on it; needed before starting a unit with ProtectHome=, ProtectProc= and the like.
///
/// - `/run/systemd/inaccessible/{dir,reg,fifo,chr,blk}`: PID 1 creates these on every host;
///   the sandbox's fresh tmpfs on /run/systemd lacks them, and a user manager mounts
///   `/run/systemd/inaccessible/dir` for ProtectHome= (without it: 226/NAMESPACE).
/// - `/run` a mount point: on a host it is a tmpfs. Where it is a plain directory,
///   MountAPIVFS= (implied by ProtectProc=/ProcSubset=) mounts an empty tmpfs on it in the
///   unit's namespace, hiding /run/systemd/journal/socket: the daemon's logs and alarms
///   would then miss journald. `mount --rbind /run /run` (in the sandbox's namespace only)
///   makes it one without changing what is visible there.
pub fn prepare_host_like_run(sb: &Sandbox) {
    const SCRIPT: &str = r#"set -e
d=/run/systemd/inaccessible
if [ ! -e "$d/dir" ]; then
  mkdir -p "$d"
  mkdir -m 0 "$d/dir"
  install -m 0 /dev/null "$d/reg"
  mkfifo -m 0 "$d/fifo"
  mknod -m 0 "$d/chr" c 0 0
  mknod -m 0 "$d/blk" b 0 0
fi
mountpoint -q /run || mount --rbind /run /run
"#;
    sb.exec_ok("sh", ["-c", SCRIPT])
        .expect("preparing /run in the sandbox");
}

/// The shipped `systemd/certrenewd.service`, changed only where a sandbox user manager or the
/// test's temp tree requires it; every change is a `# test:` comment in the returned text.
///
/// - `ExecStart=` runs the binary under test with `--config CONFIG`.
/// - `WatchdogSec=2s` (shipped: 5min) so a few watchdog periods fit in a test.
/// - `ReadWritePaths=` names `writable` (the test's temp tree: certificates and state dir)
///   instead of /etc/etcd and /etc/kubernetes/pki, which do not exist here (a missing
///   ReadWritePaths= path without `-` fails the unit with 226/NAMESPACE).
/// - `PrivateTmp=` is dropped: the temp tree, the config and the sandbox's D-Bus socket all
///   live under /tmp, which a private /tmp would hide.
///
/// Everything else is kept, hardening included (a root user manager applies it like PID 1).
/// `StateDirectory=` stays: a user manager creates it under `$XDG_CONFIG_HOME` (in the
/// sandbox) and the config's `state_dir` is in the temp tree anyway.
pub fn daemon_unit(config: &Path, writable: &Path) -> String {
    let shipped = fs::read_to_string(SHIPPED_UNIT).expect("reading the shipped unit");
    let mut out = String::new();
    let (mut exec, mut watchdog, mut rw, mut tmp) = (0, 0, 0, 0);
    for line in shipped.lines() {
        let key = line.split_once('=').map(|(k, _)| k.trim());
        match key {
            Some("ExecStart") => {
                exec += 1;
                out.push_str(&format!(
                    "# test: was {line}\nExecStart={BIN} --config {} run\n",
                    config.display()
                ));
            }
            Some("WatchdogSec") => {
                watchdog += 1;
                out.push_str(&format!(
                    "# test: was {line}\nWatchdogSec={}s\n",
                    WATCHDOG.as_secs()
                ));
            }
            Some("ReadWritePaths") => {
                rw += 1;
                out.push_str(&format!("# test: was {line}\n"));
                if rw == 1 {
                    out.push_str(&format!("ReadWritePaths={}\n", writable.display()));
                }
            }
            Some("PrivateTmp") => {
                tmp += 1;
                out.push_str(&format!(
                    "# test: dropped {line} (the test tree is in /tmp)\n"
                ));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    assert_eq!(
        (exec, watchdog, tmp),
        (1, 1, 1),
        "the shipped unit changed shape: ExecStart=, WatchdogSec=, PrivateTmp= expected once each"
    );
    assert!(rw >= 1, "the shipped unit has no ReadWritePaths=");
    out
}

/// Installs the adapted shipped unit as `certrenewd.service` (see [`daemon_unit`]).
pub fn install_daemon(sb: &Sandbox, config: &Path, writable: &Path) {
    prepare_host_like_run(sb);
    sb.install_unit(DAEMON, &daemon_unit(config, writable))
        .expect("installing certrenewd.service");
}

/// Polls `probe` every 100 ms until it returns `Ok`, or panics after `timeout` with the last `Err`.
pub fn wait_for<T, E: Debug>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {e:?}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// One property of a unit (`systemctl --user show -P`).
pub fn prop(sb: &Sandbox, unit: &str, property: &str) -> String {
    sb.unit_property(unit, property)
        .unwrap_or_else(|e| panic!("{unit} {property}: {e:#}"))
}

/// A unit's MainPID.
pub fn main_pid(sb: &Sandbox, unit: &str) -> u32 {
    prop(sb, unit, "MainPID").parse().expect("MainPID")
}

/// The daemon's STATUS= text as systemd shows it.
pub fn status_text(sb: &Sandbox) -> String {
    prop(sb, DAEMON, "StatusText")
}

/// Waits until the daemon's StatusText contains `needle`; returns it.
pub fn wait_status(sb: &Sandbox, needle: &str, timeout: Duration) -> String {
    wait_for(
        &format!("StatusText containing {needle:?}"),
        timeout,
        || {
            let s = status_text(sb);
            if s.contains(needle) { Ok(s) } else { Err(s) }
        },
    )
}

/// Makes journald write out what it has received (`journalctl --sync` in the sandbox).
pub fn journal_sync(sb: &Sandbox) {
    sb.exec_ok("journalctl", ["--sync"])
        .expect("journalctl --sync");
}

/// Every alarm entry in the sandbox journal (ALARM_ID 250.003, 500.200, 500.210), oldest first.
pub fn alarm_entries(sb: &Sandbox) -> Vec<Value> {
    journal_sync(sb);
    sb.journal_json(["ALARM_ID=250.003", "ALARM_ID=500.200", "ALARM_ID=500.210"])
}

/// The journal entries of the daemon (SYSLOG_IDENTIFIER=certrenewd without an ALARM_ID).
pub fn daemon_messages(sb: &Sandbox) -> Vec<String> {
    journal_sync(sb);
    sb.journal_json(["SYSLOG_IDENTIFIER=certrenewd"])
        .iter()
        .filter(|e| e.get("ALARM_ID").is_none())
        .map(|e| field(e, "MESSAGE"))
        .collect()
}

/// A field of a journal entry as a string ("" when absent).
pub fn field(entry: &Value, name: &str) -> String {
    match entry.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// `certrenewd --config CONFIG ARGS...` inside the sandbox (its journald and bus).
pub fn certrenewd_in(sb: &Sandbox, config: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config".to_string(), config.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    sb.exec(BIN, &all)
}

/// `certrenewd --config CONFIG alarms --output json`, parsed.
pub fn alarms_json(config: &Path) -> Value {
    let o = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(["alarms", "--output", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("running certrenewd alarms");
    assert!(o.status.success(), "certrenewd alarms: {}", show(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("alarms --output json is not JSON ({e}): {}", show(&o)))
}

/// stdout and stderr of a finished command, for messages.
pub fn show(o: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// This machine's hostname (the sandbox shares the UTS namespace).
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("reading the hostname")
        .trim()
        .to_string()
}

/// Whether `openssl verify -CAfile CA CERT` accepts the certificate.
pub fn openssl_verifies(ca: &Path, cert: &Path) -> bool {
    Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca)
        .arg(cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running openssl verify")
        .success()
}

/// Whether the certificate is still valid `days` from now (`openssl x509 -checkend`).
pub fn valid_for_days(cert: &Path, days: u64) -> bool {
    Command::new("openssl")
        .args(["x509", "-noout", "-checkend"])
        .arg((days * 86_400).to_string())
        .arg("-in")
        .arg(cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running openssl x509 -checkend")
        .success()
}

/// The serial number of a certificate (`openssl x509 -serial`).
pub fn serial(cert: &Path) -> String {
    let o = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(cert)
        .output()
        .expect("running openssl x509 -serial");
    assert!(o.status.success(), "openssl x509 -serial: {}", show(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}
