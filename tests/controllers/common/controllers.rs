//! Booted Debian controllers for end-to-end tests (used by the modules of tests/controllers).
//!
//! Debian bookworm with systemd as PID 1 in `systemd-nspawn`: the real system bus and
//! journald, Debian's own `etcd.service`, and certrenewd installed from the project's `.deb`
//! with `dpkg -i`, running under its shipped unit with all its hardening.
//!
//! - [`host_or_skip`]: the base root (`tests/controllers/base.sh`: debootstrap once per
//!   machine, cached under /var/tmp, built under a lock) and the `.deb` under test
//!   (`$CERTRENEWD_DEB`, else `.ci/build-deb` once per test process, under a lock).
//! - [`Controller::boot`]: one controller from that base with `--volatile=overlay` (a
//!   throwaway writable layer; the base is never written), host directories bound in, a
//!   private loopback-only network. [`Cluster::boot`]: N of them sharing one network
//!   namespace the harness creates and deletes (member n on 127.0.0.n).
//! - Each is halted by its nspawn PID on drop, even on panic; should the test process die
//!   first, nspawn gets SIGTERM from the kernel (parent-death signal) and halts it too.
//!
//! Cost, measured on this project's 2-CPU machines: the base root 87 s once (250 MB); boot to
//! `running` 1.2 s idle, 3-6 s while other builds run; `dpkg -i` 1 s; halt 1.6 s.
//!
//! When this machine cannot host controllers (not root, no debootstrap/systemd-nspawn), a test
//! prints `SKIP` and the reason, except under `CI=true`, where that is a failure.

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};

/// Builds (once per machine) and prints the base root.
pub const BASE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/controllers/base.sh");
/// Builds the `.deb` of this checkout and prints its path.
pub const BUILD_DEB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/build-deb");
/// `base.sh`'s exit status when this machine cannot host controllers.
const EXIT_UNAVAILABLE: i32 = 77;
/// Boot to `running`/`degraded`: 1-6 s here; generous for a loaded CI machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// A clean halt takes under 2 s; after this the container is killed.
const HALT_TIMEOUT: Duration = Duration::from_secs(30);
/// The environment of every command run inside (nothing of the test process leaks in).
const INSIDE_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("LANG", "C.UTF-8"),
    ("TERM", "dumb"),
    ("SYSTEMD_PAGER", ""),
    ("SYSTEMD_COLORS", "0"),
];

/// How much of the machine booted controllers may take at once in this process, in slots: a
/// single controller takes one, a cluster (two or three nodes) both.
///
/// All booted-controller tests are one binary, whose tests run in libtest's threads (as many
/// as CPUs): without this, a three-node cluster, with its etcd elections and probes timed,
/// would share a 2-CPU machine with other controllers and measure the load instead of
/// certrenewd. Two single controllers side by side is what their tests always did.
const SLOTS: usize = 2;
static SLOTS_TAKEN: Mutex<usize> = Mutex::new(0);
static SLOT_FREED: Condvar = Condvar::new();
thread_local! {
    /// The slots held by the test running on this thread (libtest: one thread per test).
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// A test's share of the machine while its controllers run; given back on drop.
pub struct Turn {
    slots: usize,
}

impl Turn {
    /// Waits until `slots` (at most [`SLOTS`]) are free and takes them. A test that holds a
    /// turn already takes nothing more: a cluster's nodes boot on their cluster's turn.
    /// A panicking test gives its turn back as it unwinds (poison ignored).
    pub fn take(slots: usize) -> Turn {
        let slots = slots.min(SLOTS);
        let held = HELD.get();
        if held > 0 {
            // Waiting for more while holding some could wait for ever on another test that
            // does the same.
            assert!(
                held >= slots,
                "{}: holds {held} slot(s) and asks for {slots}: take the larger turn first",
                super::skip::test_name()
            );
            return Turn { slots: 0 };
        }
        let mut taken = SLOTS_TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
        while *taken + slots > SLOTS {
            taken = SLOT_FREED
                .wait(taken)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *taken += slots;
        HELD.set(slots);
        Turn { slots }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.slots == 0 {
            return;
        }
        *SLOTS_TAKEN.lock().unwrap_or_else(PoisonError::into_inner) -= self.slots;
        HELD.set(0);
        SLOT_FREED.notify_all();
    }
}

/// What every controller is made from: the base root and the package under test.
pub struct Host {
    /// The debootstrapped root, booted read-only under an overlay.
    pub base: PathBuf,
    /// The certrenewd `.deb` of this checkout.
    pub deb: PathBuf,
}

enum Prepared {
    Ready(Host),
    /// This machine cannot host controllers; why.
    Unavailable(String),
    /// It should, and something failed.
    Broken(String),
}

static HOST: OnceLock<Prepared> = OnceLock::new();

/// The base root and the `.deb`, or `None` after printing why this machine cannot boot
/// controllers. Panics when it should and cannot, and under `CI=true` when it cannot.
pub fn host_or_skip() -> Option<&'static Host> {
    let test = super::skip::test_name();
    match HOST.get_or_init(prepare) {
        Prepared::Ready(host) => Some(host),
        Prepared::Unavailable(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test}: CI=true and booted controllers are unavailable: {why}")
        }
        Prepared::Unavailable(why) => {
            // Straight to stderr: libtest captures eprintln! of passing tests.
            let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
            None
        }
        Prepared::Broken(e) => panic!("{test}: {e}"),
    }
}

fn prepare() -> Prepared {
    if !rustix::process::geteuid().is_root() {
        return Prepared::Unavailable("not root (systemd-nspawn needs root)".into());
    }
    let base = match run_script(BASE_SCRIPT, "the controllers' base root") {
        Ok(path) => PathBuf::from(path),
        Err(p) => return p,
    };
    let deb = match std::env::var_os("CERTRENEWD_DEB") {
        Some(deb) if Path::new(&deb).is_file() => PathBuf::from(deb),
        Some(deb) => {
            return Prepared::Broken(format!("CERTRENEWD_DEB={deb:?} is not a file"));
        }
        None => match run_script(BUILD_DEB, "the .deb (release build)") {
            Ok(path) => PathBuf::from(path),
            Err(p) => return p,
        },
    };
    Prepared::Ready(Host { base, deb })
}

/// Runs a script that prints a path as its last line (77: unavailable here).
fn run_script(script: &str, what: &str) -> Result<String, Prepared> {
    let started = Instant::now();
    // The release build goes to this test build's target directory, wherever that is.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp");
    let out = Command::new("bash")
        .arg(script)
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Prepared::Broken(format!("running {script}: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status.code() {
        Some(0) => {}
        Some(EXIT_UNAVAILABLE) => return Err(Prepared::Unavailable(stderr)),
        _ => {
            return Err(Prepared::Broken(format!(
                "{script} ({what}): {}: {stderr}",
                out.status
            )));
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().unwrap_or("").trim().to_string();
    if !Path::new(&path).exists() {
        return Err(Prepared::Broken(format!(
            "{script} printed no path: {stdout}{stderr}"
        )));
    }
    let _ = writeln!(
        std::io::stderr(),
        "controllers: {what}: {path} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}

/// How to boot one controller: its name and the host directories bound into it.
#[derive(Clone, Debug)]
pub struct Spec {
    hostname: String,
    binds: Vec<String>,
}

impl Spec {
    /// A controller whose hostname is `hostname` (it names the alarms' `host=`).
    pub fn new(hostname: &str) -> Spec {
        Spec {
            hostname: hostname.to_string(),
            binds: Vec::new(),
        }
    }

    /// Binds the host directory or file `host` at `inside`, writable.
    pub fn bind(mut self, host: &Path, inside: &str) -> Spec {
        self.binds
            .push(format!("--bind={}:{inside}", host.display()));
        self
    }

    /// Binds the host directory or file `host` at `inside`, read-only.
    pub fn bind_ro(mut self, host: &Path, inside: &str) -> Spec {
        self.binds
            .push(format!("--bind-ro={}:{inside}", host.display()));
        self
    }
}

/// Debian's etcd.service as the one member of its cluster: clients on https://127.0.0.1:2379
/// served `cert` and `key`, and authenticated by `ca` (paths inside the controller).
pub fn one_member_etcd<'a>(
    ca: &'a str,
    cert: &'a str,
    key: &'a str,
) -> [(&'static str, &'a str); 11] {
    [
        ("ETCD_NAME", "controller-0"),
        ("ETCD_DATA_DIR", "/var/lib/etcd/default"),
        ("ETCD_LISTEN_CLIENT_URLS", "https://127.0.0.1:2379"),
        ("ETCD_ADVERTISE_CLIENT_URLS", "https://127.0.0.1:2379"),
        ("ETCD_LISTEN_PEER_URLS", "http://127.0.0.1:2380"),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "http://127.0.0.1:2380"),
        ("ETCD_INITIAL_CLUSTER", "controller-0=http://127.0.0.1:2380"),
        ("ETCD_CERT_FILE", cert),
        ("ETCD_KEY_FILE", key),
        ("ETCD_TRUSTED_CA_FILE", ca),
        ("ETCD_CLIENT_CERT_AUTH", "true"),
    ]
}

/// The text of `/etc/default/etcd` setting `vars`.
pub fn etcd_defaults_text(vars: &[(&str, &str)]) -> String {
    vars.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// A unique name per booted container of this process (machine names must not collide).
fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A network namespace shared by the controllers of a [`Cluster`]; deleted on drop.
pub struct Network {
    name: String,
}

impl Network {
    /// `ip netns add` with its loopback up: the whole 127/8 is theirs, nothing else.
    pub fn create() -> anyhow::Result<Network> {
        let net = Network {
            name: unique("certrenewd-ctl"),
        };
        run_host("ip", ["netns", "add", net.name.as_str()])?;
        run_host("ip", ["-n", net.name.as_str(), "link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// Its path, for `--network-namespace-path=`.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = run_host("ip", ["netns", "del", self.name.as_str()]) {
            eprintln!("{e:#}");
        }
    }
}

/// Runs a command on the host; its stdout, or an error with its stderr.
fn run_host<I, S>(program: &str, args: I) -> anyhow::Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Several controllers on one network namespace; all halted, then the namespace deleted, on drop.
pub struct Cluster {
    /// The controllers, in the order of their specs.
    pub nodes: Vec<Controller>,
    // Dropped after the nodes (fields drop in declaration order).
    net: Network,
    _turn: Turn,
}

impl Cluster {
    /// Boots one controller per spec, side by side, on one new network namespace.
    pub fn boot(host: &Host, specs: Vec<Spec>) -> anyhow::Result<Cluster> {
        let turn = Turn::take(specs.len());
        let net = Network::create()?;
        let netarg = format!("--network-namespace-path={}", net.path().display());
        let mut nodes = Vec::new();
        for spec in specs {
            nodes.push(Controller::spawn(host, spec, &netarg)?);
        }
        for node in &mut nodes {
            node.wait_running()?;
        }
        Ok(Cluster {
            nodes,
            net,
            _turn: turn,
        })
    }

    /// The network namespace's name (`ip -n NAME ...`).
    pub fn network(&self) -> &str {
        &self.net.name
    }

    /// `ip -n NAME ARGS` on the cluster's network namespace; its stdout.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        run_host("ip", ["-n", self.net.name.as_str()].iter().chain(args))
    }
}

/// One booted controller; halted (by its nspawn PID) on drop.
pub struct Controller {
    hostname: String,
    nspawn: Child,
    /// The container's PID 1 as seen from the host.
    leader: Option<Pid>,
    log: PathBuf,
    /// Removed after the halt (fields drop in declaration order; `drop` halts first).
    _cgroup: OwnCgroup,
    _dir: tempfile::TempDir,
    /// Given back last, once the controller is gone.
    _turn: Turn,
}

impl Controller {
    /// Boots one controller with a private loopback-only network and waits until it runs.
    pub fn boot(host: &Host, spec: Spec) -> anyhow::Result<Controller> {
        let mut ctl = Controller::spawn(host, spec, "--private-network")?;
        ctl.wait_running()?;
        Ok(ctl)
    }

    /// Starts `systemd-nspawn` (not waiting for the boot).
    fn spawn(host: &Host, spec: Spec, network: &str) -> anyhow::Result<Controller> {
        let turn = Turn::take(1);
        let dir = tempfile::Builder::new()
            .prefix("certrenewd-ctl.")
            .tempdir()
            .context("creating the controller's directory")?;
        let log = dir.path().join("console.log");
        let console =
            fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let cgroup = OwnCgroup::create(&unique("certrenewd-ctl"));
        let mut cmd = cgroup.command("systemd-nspawn");
        cmd.arg("--directory")
            .arg(&host.base)
            .args([
                "--volatile=overlay",
                "--boot",
                "--register=no",
                "--keep-unit",
            ])
            .arg(format!("--machine={}", unique("ctl")))
            .arg(format!("--hostname={}", spec.hostname))
            .args(["--console=passive", network])
            .args(&spec.binds)
            .stdin(Stdio::null())
            .stdout(console.try_clone().context("duplicating the console log")?)
            .stderr(console);
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent. Should the
        // test thread die without dropping us (a killed test run), nspawn gets SIGTERM and
        // halts the container instead of leaving it running.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
                    .map_err(std::io::Error::from)
            });
        }
        let nspawn = cmd.spawn().context("starting systemd-nspawn")?;
        Ok(Controller {
            hostname: spec.hostname,
            nspawn,
            leader: None,
            log,
            _cgroup: cgroup,
            _dir: dir,
            _turn: turn,
        })
    }

    /// Waits for `systemctl is-system-running` to say running (or degraded).
    fn wait_running(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let deadline = started + BOOT_TIMEOUT;
        let mut state = String::from("(no PID 1 yet)");
        loop {
            if let Some(status) = self
                .nspawn
                .try_wait()
                .context("waiting for systemd-nspawn")?
            {
                bail!(
                    "systemd-nspawn exited ({status}) during boot:\n{}",
                    self.console()
                );
            }
            if self.leader.is_none() {
                self.leader = find_leader(self.nspawn.id());
            }
            if self.leader.is_some() {
                let out = self.exec(["systemctl", "is-system-running"]);
                state = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if state == "running" || state == "degraded" {
                    let _ = writeln!(
                        std::io::stderr(),
                        "controllers: {} {state} after {:.1} s",
                        self.hostname,
                        started.elapsed().as_secs_f64()
                    );
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                let failed = self.exec(["systemctl", "--failed", "--no-pager"]);
                bail!(
                    "{} not running after {BOOT_TIMEOUT:?} (state: {state}); failed units:\n{}\nconsole:\n{}",
                    self.hostname,
                    String::from_utf8_lossy(&failed.stdout),
                    self.console()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Its hostname.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// The container's PID 1 as seen from the host.
    pub fn leader(&self) -> u32 {
        self.leader
            .expect("the controller has booted")
            .as_raw_nonzero()
            .get() as u32
    }

    /// A path inside the controller, reached from the host through its PID 1's root.
    pub fn path(&self, inside: &str) -> PathBuf {
        Path::new("/proc")
            .join(self.leader().to_string())
            .join("root")
            .join(inside.trim_start_matches('/'))
    }

    /// The last lines of the nspawn console (boot messages, halt).
    pub fn console(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Runs a command inside (every namespace of its PID 1, a clean environment).
    pub fn exec<I, S>(&self, argv: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Command::new("nsenter")
            .arg("--target")
            .arg(self.leader().to_string())
            .args(["--all", "--"])
            .args(argv)
            .env_clear()
            .envs(INSIDE_ENV.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running nsenter: {e}"))
    }

    /// Like [`Controller::exec`], but fails unless the command exits 0; returns its stdout.
    pub fn run<I, S>(&self, argv: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let argv: Vec<_> = argv.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.exec(&argv);
        if !out.status.success() {
            bail!(
                "{argv:?} on {}: {}\n{}{}",
                self.hostname,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `sh -c SCRIPT` inside; its stdout.
    pub fn sh(&self, script: &str) -> anyhow::Result<String> {
        self.run(["sh", "-c", script])
    }

    /// Writes a file inside (in its overlay, or in a bound host directory), with `mode`.
    pub fn write_file(&self, inside: &str, contents: &[u8], mode: u32) -> anyhow::Result<()> {
        let path = self.path(inside);
        fs::write(&path, contents)
            .with_context(|| format!("writing {inside} on {}", self.hostname))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {inside} on {}", self.hostname))
    }

    /// Reads a file inside.
    pub fn read_file(&self, inside: &str) -> anyhow::Result<Vec<u8>> {
        fs::read(self.path(inside))
            .with_context(|| format!("reading {inside} on {}", self.hostname))
    }

    /// The uid and gid of a user of the controller (its /etc/passwd), e.g. `etcd`.
    pub fn ids(&self, user: &str) -> anyhow::Result<(u32, u32)> {
        let passwd = String::from_utf8(self.read_file("/etc/passwd")?)?;
        let line = passwd
            .lines()
            .find(|l| l.split(':').next() == Some(user))
            .with_context(|| format!("no user {user} on {}", self.hostname))?;
        let f: Vec<&str> = line.split(':').collect();
        Ok((f[2].parse()?, f[3].parse()?))
    }

    /// `systemctl ARGS` inside (the system manager); fails unless it exits 0.
    pub fn systemctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut argv = vec!["systemctl", "--no-pager"];
        argv.extend_from_slice(args);
        self.run(argv)
    }

    /// Sends SIG`sig` (`STOP`, `KILL`, ...) to the main process of `unit`, by its PID: that
    /// process, not whatever else the unit runs.
    pub fn kill_main(&self, unit: &str, sig: &str) -> anyhow::Result<String> {
        self.sh(&format!("kill -{sig} $(systemctl show -P MainPID {unit})"))
    }

    /// One property of a unit, as `systemctl show -P` prints it.
    pub fn unit_property(&self, unit: &str, property: &str) -> anyhow::Result<String> {
        Ok(self
            .systemctl(&["show", "-P", property, unit])?
            .trim()
            .to_string())
    }

    /// `journalctl --no-pager ARGS` inside (after a sync), as text.
    pub fn journal(&self, args: &[&str]) -> String {
        let _ = self.exec(["journalctl", "--sync"]);
        let mut argv = vec!["journalctl", "--no-pager"];
        argv.extend_from_slice(args);
        String::from_utf8_lossy(&self.exec(argv).stdout).into_owned()
    }

    /// Journal entries as JSON objects: `journalctl -o json ARGS` inside, oldest first.
    pub fn journal_json(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut argv = vec!["-o", "json"];
        argv.extend_from_slice(args);
        self.journal(&argv)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("journal line {l:?}: {e}")))
            .collect()
    }

    /// Installs a `.deb` with `dpkg -i` (copied into the controller's /root first).
    pub fn install_deb(&self, deb: &Path) -> anyhow::Result<()> {
        let name = deb.file_name().context("a .deb path without a file name")?;
        let inside = format!("/root/{}", name.to_string_lossy());
        fs::copy(deb, self.path(&inside))
            .with_context(|| format!("copying {} into {}", deb.display(), self.hostname))?;
        self.run(["dpkg", "-i", inside.as_str()])?;
        Ok(())
    }

    /// Writes /etc/default/etcd, the configuration of Debian's `etcd.service` (`KEY=value`
    /// lines). It runs as user `etcd`: its key files must be readable by that user.
    pub fn etcd_defaults(&self, vars: &[(&str, &str)]) -> anyhow::Result<()> {
        self.write_file(
            "/etc/default/etcd",
            etcd_defaults_text(vars).as_bytes(),
            0o644,
        )
    }

    /// [`Controller::etcd_defaults`], then (re)starts `etcd.service` and waits until it is
    /// ready (Type=notify). A member of a new multi-member cluster is ready only once the
    /// others are up: start those with `systemctl restart --no-block` and [`Controller::wait_active`].
    pub fn configure_etcd(&self, vars: &[(&str, &str)]) -> anyhow::Result<()> {
        self.etcd_defaults(vars)?;
        if let Err(e) = self.systemctl(&["restart", "etcd.service"]) {
            bail!(
                "{e:#}\n{}",
                self.journal(&["-u", "etcd.service", "-n", "40"])
            );
        }
        Ok(())
    }

    /// Waits for the end of the first pass of a run of `certrenewd.service` other than
    /// `before` (an InvocationID; "" before its first start): its STATUS= shows a last pass.
    /// Returns that status. A failed daemon ends the wait at once.
    pub fn wait_daemon_pass(&self, before: &str, deadline: Instant) -> String {
        const DAEMON: &str = "certrenewd.service";
        let host = self.hostname().to_string();
        loop {
            let id = self
                .unit_property(DAEMON, "InvocationID")
                .unwrap_or_default();
            let status = self.unit_property(DAEMON, "StatusText").unwrap_or_default();
            let state = self
                .unit_property(DAEMON, "ActiveState")
                .unwrap_or_default();
            let journal = || self.journal(&["-u", DAEMON, "-n", "80"]);
            assert!(state != "failed", "{host}: {DAEMON} failed\n{}", journal());
            if !id.is_empty()
                && id != before
                && status.contains("last pass: ")
                && !status.contains("last pass: none yet")
            {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{host}: no pass of {DAEMON} ended; status {status:?}\n{}",
                journal()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until `unit` is active; on timeout, the error has its journal.
    pub fn wait_active(&self, unit: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.exec(["systemctl", "is-active", unit]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "active" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{unit} on {} is {state} after {timeout:?}:\n{}",
                    self.hostname,
                    self.journal(&["-u", unit, "-n", "40"])
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Halts the controller: SIGTERM to nspawn (a clean shutdown of its systemd), and after
    /// [`HALT_TIMEOUT`] SIGKILL to its PID 1 and to nspawn.
    pub fn halt(&mut self) -> anyhow::Result<()> {
        if self.nspawn.try_wait()?.is_some() {
            return Ok(());
        }
        let nspawn = Pid::from_raw(self.nspawn.id() as i32).context("nspawn PID")?;
        kill_process(nspawn, Signal::TERM).context("SIGTERM to systemd-nspawn")?;
        let deadline = Instant::now() + HALT_TIMEOUT;
        while Instant::now() < deadline {
            if self.nspawn.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(leader) = self.leader {
            let _ = kill_process(leader, Signal::KILL);
        }
        let _ = kill_process(nspawn, Signal::KILL);
        self.nspawn.wait()?;
        bail!(
            "{} did not halt within {HALT_TIMEOUT:?}; killed:\n{}",
            self.hostname,
            self.console()
        )
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Err(e) = self.halt() {
            eprintln!("{e:#}");
        }
    }
}

/// A cgroup of its own for one controller, in each hierarchy systemd-nspawn puts its
/// container in (the unified one, and name=systemd on a hybrid host), below the test's own.
/// Without it every controller's systemd works in the same tree (`payload/system.slice/...`
/// for all of them): `systemctl kill` fails on the unit's cgroup, and a unit stopped on one
/// node and started on another at the same moment races on it (status 219/CGROUP). Where a
/// directory cannot be made (no such hierarchy, no permission) the controller shares as
/// before.
struct OwnCgroup {
    dirs: Vec<PathBuf>,
}

impl OwnCgroup {
    fn create(name: &str) -> OwnCgroup {
        let unified = match Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
            true => "/sys/fs/cgroup/unified",
            false => "/sys/fs/cgroup",
        };
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let dirs = own
            .lines()
            .filter_map(|line| {
                let mut f = line.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                let mount = match controllers {
                    "" => unified,
                    "name=systemd" => "/sys/fs/cgroup/systemd",
                    _ => return None,
                };
                let dir = Path::new(mount)
                    .join(path.trim_start_matches('/'))
                    .join(name);
                fs::create_dir(&dir).ok().map(|()| dir)
            })
            .collect();
        OwnCgroup { dirs }
    }

    /// `program`, started by a shell that first moves itself into the cgroups.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"p=$1; shift; for d in $CGROUP_DIRS; do echo $$ > "$d/cgroup.procs" || exit 125; done; exec "$p" "$@""#)
            .arg("sh")
            .arg(program)
            .env(
                "CGROUP_DIRS",
                self.dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        cmd
    }
}

impl Drop for OwnCgroup {
    /// Removes the cgroups, innermost first (the container's own are empty once it halted).
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            if let Ok(entries) = fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        remove(&e.path());
                    }
                }
            }
            let _ = fs::remove_dir(dir);
        }
        for d in &self.dirs {
            remove(d);
        }
    }
}

/// The child of `parent` named `systemd`: the container's PID 1.
fn find_leader(parent: u32) -> Option<Pid> {
    let entries = fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(e.path().join("stat")).ok()?;
        // pid (comm) state ppid ...: comm may hold spaces and parentheses; split at the last ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && comm == "systemd")
            .then(|| Pid::from_raw(pid))
            .flatten()
    })
}
