//! Error returns, not only kills: a real `certrenewd renew` under strace's fault injection
//! (`-e inject=SYSCALL:error=ERRNO:when=N`), the Nth call of rename, fsync, write (ENOSPC),
//! unlink or openat failing in each thread that makes that many, over a kubeadm pass that
//! restarts its static pods and over a pass that re-issues a CA. The Ns are spread over
//! the calls an uninjected run makes (counted with strace first, per thread).
//!
//! After each injected run the tree is judged as it is ("broken right after"), then once
//! more after the next normal run ("left broken"), which must be nothing: every
//! certificate matches its key (openssl's public keys), every static pod manifest is in
//! its directory byte for byte and none is held aside, no temp file or pending record is
//! left, and a CA that is re-issued has its old certificate recorded (`old-cas.json`). The
//! counts are written to stderr past the harness's capture, so CI's log shows them.

use crate::ca_renewal::Aging;
use crate::common;
use crate::static_pods;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::pki::{self, openssl_out};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

/// The calls failed, how, and in how many rounds at most (the Ns spread evenly over the
/// calls a thread makes): every rename and unlink (the install's and the manifests' moves),
/// a sample of the rest, most of whose calls read.
const FAULTS: &[(&str, &str, usize)] = &[
    ("rename", "EIO", 30),
    ("fsync", "EIO", 8),
    ("write", "ENOSPC", 6),
    ("unlink", "EIO", 10),
    ("openat", "EIO", 6),
];

/// What a sweep found.
#[derive(Default, Debug)]
struct Counts {
    rounds: usize,
    /// Runs killed after [`HUNG_AFTER`].
    hung: usize,
    broken_after: usize,
    left_broken: Vec<String>,
}

/// The most calls of each of `FAULTS` one thread of `cmd` makes, as strace counts them.
fn calls_per_thread(cmd: Command, dir: &Path) -> BTreeMap<String, usize> {
    let trace = dir.join("calls.trace");
    let names: Vec<&str> = FAULTS.iter().map(|(s, ..)| *s).collect();
    let mut strace = Command::new("strace");
    strace.args(["-f", "-qq", "-o"]).arg(&trace).arg("-e");
    strace.arg(format!("trace={}", names.join(",")));
    let traced = under(strace, &cmd)
        .output()
        .expect("strace (Debian package strace)");
    assert!(
        trace.exists(),
        "strace wrote nothing: {}",
        String::from_utf8_lossy(&traced.stderr)
    );
    let text = fs::read_to_string(&trace).expect("the trace");
    let mut by_thread: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let name = rest.trim_start().split('(').next().unwrap_or_default();
        if names.contains(&name) {
            *by_thread.entry((name.into(), pid.into())).or_default() += 1;
        }
    }
    let mut most: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, _), n) in by_thread {
        let m = most.entry(name).or_default();
        *m = (*m).max(n);
    }
    most
}

/// Up to `rounds` Ns spread over 1..=calls.
fn spread(calls: usize, rounds: usize) -> Vec<usize> {
    match calls <= rounds {
        true => (1..=calls).collect(),
        false => (0..rounds)
            .map(|i| 1 + i * (calls - 1) / (rounds - 1))
            .collect(),
    }
}

/// How long an injected run may take before it is called hung.
const HUNG_AFTER: Duration = Duration::from_secs(20);

/// `cmd` under strace, the `when`th call of `call` failing with `errno` in each thread;
/// whether it ended by itself within [`HUNG_AFTER`]. One that did not is SIGKILLed: a
/// failed write can land on the async runtime's own wake-up (an eventfd, which no disk
/// error reaches), and a wake-up lost waits for good; the node is then judged as after a
/// crash, which it must survive too.
fn injected(cmd: &Command, call: &str, errno: &str, when: usize) -> bool {
    let mut strace = Command::new("strace");
    strace.args(["-f", "-qq", "-o", "/dev/null", "-e"]);
    strace.arg(format!("inject={call}:error={errno}:when={when}"));
    let mut child = under(strace, cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace");
    let start = Instant::now();
    while start.elapsed() < HUNG_AFTER {
        if child.try_wait().expect("waiting for strace").is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The traced certrenewd first (strace would only let it go), then strace.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    for pid in fs::read_to_string(children)
        .unwrap_or_default()
        .split_whitespace()
    {
        if let Some(pid) = pid.parse().ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// `cmd` run by `strace`, with `cmd`'s environment (what it sets and what it removes).
fn under(mut strace: Command, cmd: &Command) -> Command {
    strace.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => strace.env(k, v),
            None => strace.env_remove(k),
        };
    }
    strace
}

/// The public key of a certificate or key file, as openssl prints it; None when openssl
/// cannot read it.
fn public_key(args: &[&str]) -> Option<String> {
    let out = openssl_out(args);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match p.is_dir() {
            true => out.extend(files(&p)),
            false => out.push(p),
        }
    }
    out
}

/// Each certificate under `dir` whose key beside it (`X.crt`/`X.key`, `X.pem`/`X-key.pem`)
/// is not its key, and each temp file left.
fn pair_and_temp_problems(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(dir) {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.contains("certrenewd-tmp") {
            out.push(format!("{}: a temp file left", f.display()));
            continue;
        }
        let key = match (name.strip_suffix(".crt"), name.strip_suffix(".pem")) {
            (Some(stem), _) => f.with_file_name(format!("{stem}.key")),
            (_, Some(stem)) if !stem.ends_with("-key") => {
                f.with_file_name(format!("{stem}-key.pem"))
            }
            _ => continue,
        };
        if !key.exists() {
            continue;
        }
        let (crt_s, key_s) = (f.display().to_string(), key.display().to_string());
        let cert_pub = public_key(&["x509", "-noout", "-pubkey", "-in", &crt_s]);
        let key_pub = public_key(&["pkey", "-pubout", "-in", &key_s]);
        if cert_pub.is_none() || cert_pub != key_pub {
            out.push(format!("{crt_s}: not the certificate of {key_s}"));
        }
    }
    out
}

/// The manifests of a kubeadm round, by name: bytes and mode.
type Manifests = BTreeMap<String, (Vec<u8>, u32)>;

fn manifests(dir: &Path) -> Manifests {
    use std::os::unix::fs::PermissionsExt;
    (fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| {
            let mode = e.metadata().map_or(0, |m| m.permissions().mode() & 0o7777);
            let bytes = fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), (bytes, mode))
        })
        .collect()
}

/// What is wrong with the kubeadm round's node now, against its manifests as they were.
/// Right after an injected run a record may rightly wait for the next one (`settled`
/// false); a manifest out of its directory may not.
fn kubeadm_problems(s: &static_pods::Setup, before: &Manifests, settled: bool) -> Vec<String> {
    let mut out = pair_and_temp_problems(&s.tree.abs("etc/kubernetes/pki"));
    out.extend(pair_and_temp_problems(&s.tree.state));
    out.extend(pair_and_temp_problems(&s.manifests));
    let now = manifests(&s.manifests);
    for (name, was) in before {
        match now.get(name) {
            None => out.push(format!("{name}: out of the manifest directory")),
            Some(is) if is != was => out.push(format!("{name}: not as it was")),
            Some(_) => {}
        }
    }
    if settled {
        for record in ["pending.json", "static-pods.json", "restarts.json"] {
            if s.tree.state.join(record).exists() {
                out.push(format!("{record} is left"));
            }
        }
        let held = files(&s.tree.state.join("static-pods"));
        if !held.is_empty() {
            out.push(format!("manifests held aside: {held:?}"));
        }
    }
    out
}

/// What is wrong with the CA round's node now: pairs, temps, and the record of a CA that
/// was re-issued.
fn ca_problems(a: &Aging, settled: bool) -> Vec<String> {
    let mut out = pair_and_temp_problems(&a.tmp.path().join("pki"));
    let state = a.tmp.path().join("state");
    out.extend(pair_and_temp_problems(&state));
    if settled && state.join("pending.json").exists() {
        out.push("pending.json is left".into());
    }
    let reissued = fs::read(a.pki("ca.crt")).ok() != fs::read(a.old("ca.crt")).ok();
    if settled && reissued {
        let old = openssl_out(&["x509", "-noout", "-serial", "-in", &a.old("ca.crt")]);
        let serial = String::from_utf8_lossy(&old.stdout).trim().to_lowercase();
        let serial = serial
            .split_once('=')
            .map(|(_, s)| s.to_owned())
            .unwrap_or(serial);
        let record = fs::read_to_string(state.join("old-cas.json")).unwrap_or_default();
        if !record.to_lowercase().contains(&serial) {
            out.push(format!(
                "the re-issued CA's old certificate ({serial}) is not recorded"
            ));
        }
    }
    out
}

/// One sweep: `round(call, errno, when)` judges one injected run and the next; returns
/// (whether the injected run ended by itself, broken right after, left broken).
fn sweep(
    what: &str,
    calls: &BTreeMap<String, usize>,
    round: impl Fn(&str, &str, usize) -> (bool, Vec<String>, Vec<String>),
) -> Counts {
    let mut c = Counts::default();
    for (call, errno, rounds) in FAULTS {
        let n = calls.get(*call).copied().unwrap_or(0);
        assert!(
            n > 0,
            "{what}: an uninjected run makes no {call} call: {calls:?}"
        );
        for when in spread(n, *rounds) {
            let (ended, after, left) = round(call, errno, when);
            c.rounds += 1;
            c.hung += usize::from(!ended);
            c.broken_after += usize::from(!after.is_empty());
            if !left.is_empty() {
                c.left_broken
                    .push(format!("{call}:{errno}:when={when}: {left:?}"));
            }
        }
    }
    // Past the test harness's capture: CI's log shows the counts of a passing sweep.
    let _ = writeln!(
        std::io::stderr(),
        "{what}: {} rounds ({calls:?} calls per thread at most), {} hung and killed, {} broken right after, {} left broken after the next run",
        c.rounds,
        c.hung,
        c.broken_after,
        c.left_broken.len()
    );
    c
}

/// A kubeadm pass that renews six leaves and restarts etcd's and kube-apiserver's static
/// pods, each of its calls failing in turn.
#[test]
fn injected_errors_in_a_kubeadm_pass_leave_nothing_broken_after_the_next_run() {
    let probe = static_pods::setup();
    probe.config(1, true);
    let calls = calls_per_thread(probe.command("renew"), probe.tree.tmp.path());
    let c = sweep("kubeadm pass", &calls, |call, errno, when| {
        let s = static_pods::setup();
        s.config(1, true);
        let before = manifests(&s.manifests);
        let ended = injected(&s.command("renew"), call, errno, when);
        let after = kubeadm_problems(&s, &before, false);
        let next = pki::run_cmd(&mut s.command("renew"), &["renew"]);
        let mut left = kubeadm_problems(&s, &before, true);
        if next.code != 0 && next.code != 1 {
            left.push(format!("the next run ended {}: {next}", next.code));
        }
        (ended, after, left)
    });
    assert!(c.left_broken.is_empty(), "{:#?}", c.left_broken);
}

/// A pass that re-issues a CA (and renews what it signs), each of its calls failing in
/// turn.
#[test]
fn injected_errors_in_a_ca_pass_leave_nothing_broken_after_the_next_run() {
    let probe = Aging::new(&[]);
    let mut cmd = Command::new(BIN);
    cmd.arg("--config").arg(&probe.config).arg("renew");
    pki::isolate(&mut cmd);
    let calls = calls_per_thread(cmd, probe.tmp.path());
    let c = sweep("CA pass", &calls, |call, errno, when| {
        let a = Aging::new(&[]);
        let mut cmd = Command::new(BIN);
        cmd.arg("--config").arg(&a.config).arg("renew");
        pki::isolate(&mut cmd);
        let ended = injected(&cmd, call, errno, when);
        let after = ca_problems(&a, false);
        let next = a.run(&["renew"]);
        let mut left = ca_problems(&a, true);
        if next.code != 0 && next.code != 1 {
            left.push(format!("the next run ended {}: {next}", next.code));
        }
        (ended, after, left)
    });
    assert!(c.left_broken.is_empty(), "{:#?}", c.left_broken);
}
