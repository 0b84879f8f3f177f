//! Real systemd/D-Bus/journald sandbox for tests (owned by the sandbox helper).
//!
//! A thin wrapper over `tests/sandbox/sandbox.sh`: a real `systemd --user`, its D-Bus and a
//! real journald, private to one mount namespace, torn down on drop. Tests that need it call
//! [`Sandbox::start_or_skip`]: it returns `None` (after printing why) only when this machine
//! cannot host a sandbox (not root, no mount namespaces) and this is not CI; any other
//! failure panics, and so does that one under `CI=true`.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};

/// The harness script.
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sandbox/sandbox.sh");

/// Exit status of `sandbox.sh start` when this machine cannot host a sandbox.
const EXIT_UNAVAILABLE: i32 = 77;

/// Why a sandbox cannot run here (not root, no mount namespace); tests skip on it.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// A running sandbox; stopped (every process killed, its namespace gone) on drop.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// Starts journald and `systemd --user` in a new sandbox; `Unavailable` when impossible here.
    pub fn start() -> anyhow::Result<Sandbox> {
        let dir = tempfile::Builder::new()
            .prefix("certrenewd-sandbox.")
            .tempdir()
            .context("creating the sandbox directory")?;
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("start")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {SCRIPT} start"))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match out.status.code() {
            Some(0) => Ok(Sandbox { dir }),
            Some(EXIT_UNAVAILABLE) => Err(Unavailable(stderr).into()),
            _ => bail!("{SCRIPT} start failed ({}): {stderr}", out.status),
        }
    }

    /// Starts a sandbox, or prints why not and returns `None` when this machine cannot host one.
    ///
    /// Panics on any other failure: a sandbox that should work but does not is a test failure.
    /// Under CI (`CI=true`) a machine that cannot host one is a failure too (see `skip`).
    pub fn start_or_skip() -> Option<Sandbox> {
        match Sandbox::start() {
            Ok(sb) => Some(sb),
            Err(e) if e.downcast_ref::<Unavailable>().is_some() => {
                super::skip::skip(&e.to_string());
                None
            }
            Err(e) => panic!("{}: {e:#}", super::skip::test_name()),
        }
    }

    /// The sandbox directory (runtime/, config/, journal/, env, pids, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The D-Bus address of the sandbox's bus (session and "system" alike).
    pub fn bus_address(&self) -> String {
        format!("unix:path={}", self.dir().join("runtime/bus").display())
    }

    /// The journal directory to read with `journalctl -D`.
    pub fn journal_dir(&self) -> PathBuf {
        self.dir().join("journal")
    }

    /// A `sandbox.sh` command for this sandbox: `sandbox.sh SUBCOMMAND DIR`.
    pub fn script(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT).arg(subcommand).arg(self.dir());
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs `cmd args...` inside the sandbox (its mount namespace and environment).
    pub fn exec<I, S>(&self, cmd: &str, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.script("exec")
            .arg("--")
            .arg(cmd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {cmd} in the sandbox: {e}"))
    }

    /// Like [`Sandbox::exec`], but fails unless the command exits 0; returns its stdout.
    pub fn exec_ok<I, S>(&self, cmd: &str, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.exec(cmd, &args);
        if !out.status.success() {
            bail!(
                "{cmd} {args:?} in the sandbox: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `systemctl --user ARGS` inside the sandbox; fails unless it exits 0.
    pub fn systemctl<I, S>(&self, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut all = vec![OsStr::new("--user").to_owned()];
        all.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self.exec_ok("systemctl", all)
    }

    /// One property of a unit, as `systemctl --user show -P` prints it.
    pub fn unit_property(&self, unit: &str, property: &str) -> anyhow::Result<String> {
        Ok(self
            .systemctl(["show", "-P", property, unit])?
            .trim()
            .to_string())
    }

    /// Installs a user unit from its text and daemon-reloads.
    pub fn install_unit(&self, name: &str, text: &str) -> anyhow::Result<()> {
        let file = self.dir().join(format!("unit.{name}.tmp"));
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
        let out = self
            .script("unit")
            .arg(name)
            .arg(&file)
            .output()
            .with_context(|| format!("installing unit {name}"))?;
        let _ = std::fs::remove_file(&file);
        if !out.status.success() {
            bail!(
                "installing unit {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Journal entries as JSON objects: `journalctl -D DIR/journal -o json FILTER_ARGS...`.
    pub fn journal_json<I, S>(&self, filter_args: I) -> Vec<serde_json::Value>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = Command::new("journalctl")
            .arg("-D")
            .arg(self.journal_dir())
            .args(["-o", "json", "--no-pager"])
            .args(filter_args)
            .output()
            .unwrap_or_else(|e| panic!("running journalctl: {e}"));
        assert!(
            out.status.success() || out.stdout.is_empty(),
            "journalctl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("journal line {l:?}: {e}")))
            .collect()
    }

    /// Starts the 3-member mutual-TLS etcd cluster (etcd-1..3.service) from PKI_DIR.
    ///
    /// PKI file names follow `sandbox.sh` (ca.crt, etcd-server.{crt,key}, etcd-client.{crt,key}
    /// by default); `vars` overrides them (`SANDBOX_ETCD_*`).
    pub fn start_etcd(&self, pki_dir: &Path, vars: &[(&str, &str)]) -> anyhow::Result<String> {
        let out = self
            .script("etcd")
            .arg(pki_dir)
            .envs(vars.iter().copied())
            .output()
            .context("starting the etcd cluster")?;
        if !out.status.success() {
            bail!(
                "etcd cluster did not come up: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Another node holding the restart lock `/certrenewd/restart-lock` (`etcdctl lock`
    /// takes it as certrenewd does) until the returned guard is dropped: in a process group
    /// of its own, so the wrapper's etcdctl and its `sleep` end with it, by group.
    pub fn hold_restart_lock(&self, pki_dir: &Path, vars: &[(&str, &str)]) -> super::KillGroup {
        use std::os::unix::process::CommandExt;
        let holder = self
            .script("etcdctl")
            .arg(pki_dir)
            .args(["lock", "/certrenewd/restart-lock", "sleep", "600"])
            .envs(vars.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("etcdctl lock");
        super::KillGroup(holder)
    }

    /// `etcdctl ARGS` against the sandbox's cluster, with the PKI in `pki_dir` and `vars`
    /// (`SANDBOX_ETCD_*`); panics unless it succeeds. Its stdout and stderr (etcdctl 3.4
    /// prints some results, `endpoint health`'s, on stderr).
    pub fn etcdctl(
        &self,
        pki_dir: &Path,
        vars: &[(&str, &str)],
        args: &[&str],
    ) -> (String, String) {
        let out = self
            .script("etcdctl")
            .arg(pki_dir)
            .args(args)
            .envs(vars.iter().copied())
            .output()
            .expect("running etcdctl");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "etcdctl {args:?}: {stdout}{stderr}");
        (stdout, stderr)
    }

    /// [`Sandbox::etcdctl`] with `input` on its standard input: `put KEY` reads the value
    /// there, however large (an argument is bounded by the kernel at 128 KiB).
    pub fn etcdctl_with_input(
        &self,
        pki_dir: &Path,
        vars: &[(&str, &str)],
        args: &[&str],
        input: &[u8],
    ) -> String {
        use std::io::Write as _;
        let mut child = self
            .script("etcdctl")
            .arg(pki_dir)
            .args(args)
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running etcdctl");
        let mut stdin = child.stdin.take().expect("etcdctl's stdin");
        stdin.write_all(input).expect("writing to etcdctl");
        drop(stdin);
        let out = child.wait_with_output().expect("etcdctl");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "etcdctl {args:?}: {stdout}{stderr}");
        stdout
    }

    /// Stops the sandbox now (also done on drop).
    pub fn stop(&self) -> anyhow::Result<()> {
        let out = self
            .script("stop")
            .output()
            .context("stopping the sandbox")?;
        if !out.status.success() {
            bail!(
                "sandbox.sh stop: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("{e:#}");
        }
    }
}
