//! Crash safety of a CA renewal: the aging PKI of `tests/fixtures/mkca-aging.sh --copies
//! --due-leaves` (a root and an intermediate in their renewal window, made by openssl under
//! faketime; the root's copies in a trust bundle, under another name, in a chain file and in
//! kubeadm's admin.conf, whose client certificate and the chain file's leaf are due too),
//! renewed with `rotate_keys`, is killed:
//!
//! - by the failpoints build at every abort point of the pass, each time it is reached
//!   (`NAME:abort@N` for N = 1, 2, ... until the pass no longer reaches it): every file
//!   written (before it, between its write and its fsync, after), every rename, every
//!   directory fsync, the steps between;
//! - by SIGKILL after a random delay within an uninterrupted pass's duration;
//! - by strace's fault injection (`--inject=SET:signal=KILL:when=N`) on entering each
//!   rename, unlink, mkdir, fsync and write of the pass in turn, and every fourth open
//!   (strace is one of `.ci/packages`; without it the test fails under CI).
//!
//! Right after each kill, every certificate matches its key (or its new key's certificate
//! waits in a temp file that the pending record names) and verifies against every copy of
//! its CA on the node, whatever mix of old and new they hold. After one normal run: exit 0,
//! every due certificate renewed and matching its key, every copy holding the new root, no
//! temp file and no pending record left, the bytes from before the pass of every file it
//! changed in a backup set, and the old root's and intermediate's record in `old-cas.json`.
//!
//! Printed: the rounds (at abort points, at random, at system calls by kind), the states
//! seen mixed after a kill (some files new, some old), the states left wrong after the next
//! run (must be 0) and the records of re-issued CAs lost (must be 0). `CRASH_SEED=<n>`
//! replays the random delays.
//!
//! Also: two configurations with different state directories renewing the same tree at
//! once never leave a certificate without its key, nor say "renewed" falsely.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use certrenewd::format::kubeconfig::decode_data;
use certrenewd::format::{key, pem};
use certrenewd::inventory::{CertFacts, PublicKey};
use common::walk::{Node, snapshot_relative, temps_under};
use common::{Rng, failpoints};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
const MKCA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkca-aging.sh");

/// Every abort point a CA renewal with copies reaches (`crate::failpoint!` and the error
/// points of `crate::failpoint::io`, which abort too when asked).
const POINTS: &[&str] = &[
    "before-temp-write",
    "write-temp",
    "fsync-temp",
    "after-pending-record",
    "write-key-temp",
    "fsync-key-temp",
    "write-cert-temp",
    "fsync-cert-temp",
    "after-temps",
    "rename-key",
    "between-key-and-cert",
    "rename-cert",
    "fsync-cert-dir",
    "fsync-key-dir",
    "after-renames",
    "write-copy-temp",
    "fsync-copy-temp",
    "after-copy-temp",
    "rename-copy",
];
/// Rounds killed after a random delay.
const RANDOM_ROUNDS: usize = 20;
/// The system calls strace kills the pass at (SIGKILL on entering the call, so the state
/// left is the one after the calls before it), by kind: each call of the kind in turn,
/// every `step`-th for the kinds too frequent to take each (opens: most read the tree).
/// Together they stop the pass before and after every change it makes to a file or
/// directory (an open creating a temp file is followed by its write).
const SYSCALLS: &[(&str, &str, u32)] = &[
    ("rename", "rename,renameat,renameat2", 1),
    ("unlink", "unlink,unlinkat,rmdir", 1),
    ("mkdir", "mkdir,mkdirat", 1),
    ("fsync", "fsync,fdatasync", 1),
    ("write", "write,writev,pwrite64", 1),
    ("openat", "open,openat,creat", 4),
];

/// The root CA and the files holding a copy of it, relative to a round's directory.
const ROOT: &str = "pki/ca.crt";
const INTER: &str = "pki/inter-ca.crt";
const ADMIN: &str = "admin.conf";
/// Due leaves, with their key files (admin.conf holds its own).
const LEAVES: &[(&str, &str)] = &[
    ("pki/etcd-server.crt", "pki/etcd-server.key"),
    ("pki/etcd-client.crt", "pki/etcd-client.key"),
    ("pki/etcd-server-chain.pem", "pki/etcd-server-chain-key.pem"),
    (ADMIN, ADMIN),
];

/// The fixture as made: its directory and every file's bytes.
struct Template {
    dir: tempfile::TempDir,
    files: BTreeMap<String, Vec<u8>>,
}

impl Template {
    fn new() -> Template {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("bash")
            .arg(MKCA)
            .arg(dir.path())
            .args(["--copies", "--due-leaves"])
            .output()
            .expect("running mkca-aging.sh");
        assert!(
            out.status.success(),
            "mkca-aging.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let files = files_of(dir.path());
        Template { dir, files }
    }

    fn old(&self, rel: &str) -> &[u8] {
        &self.files[rel]
    }
}

/// Every regular file under `root` by relative path, but the state directory's.
fn files_of(root: &Path) -> BTreeMap<String, Vec<u8>> {
    snapshot_relative(root)
        .into_iter()
        .filter_map(|(rel, node)| match node {
            Node::File { bytes, .. } => Some((rel.to_string_lossy().into_owned(), bytes)),
            _ => None,
        })
        .filter(|(rel, _)| !rel.starts_with("state/") && rel != "certrenewd.toml")
        .collect()
}

/// One round's copy of the fixture, with its config.
struct Round {
    tmp: tempfile::TempDir,
}

impl Round {
    fn new(t: &Template) -> Round {
        let tmp = tempfile::tempdir().expect("temp dir");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", t.dir.path().display()))
            .arg(tmp.path())
            .status()
            .expect("cp");
        assert!(copied.success());
        let p = |rel: &str| common::pki::toml_str(&tmp.path().join(rel));
        fs::write(
            tmp.path().join("certrenewd.toml"),
            format!(
                "rotate_keys = true\nstate_dir = {}\n[[watch]]\npath = {}\nkubeconfigs = [{}]\n",
                p("state"),
                p("pki"),
                p(ADMIN)
            ),
        )
        .expect("config");
        Round { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn command(&self, bin: &Path) -> Command {
        self.command_via(bin, &[])
    }

    /// [`Round::command`] run by `strace` with the arguments `strace`.
    fn traced(&self, strace: &[String]) -> Command {
        self.command_via(Path::new("strace"), strace)
    }

    /// `bin args renew`, isolated, its output piped.
    fn command_via(&self, bin: &Path, args: &[String]) -> Command {
        let mut c = Command::new(bin);
        if !args.is_empty() {
            c.args(args).arg("--").arg(BIN);
        }
        c.arg("--config")
            .arg(self.path("certrenewd.toml"))
            .arg("renew");
        common::pki::isolate(&mut c)
            .env_remove("CERTRENEWD_LOG")
            .env_remove("CERTRENEWD_FAILPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

// ------------------------------------------------------------------ reading the files

/// The certificate blocks of PEM text, parsed.
fn certs_in(bytes: &[u8]) -> Vec<CertFacts> {
    pem::blocks(bytes)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|b| b.label == "CERTIFICATE")
        .filter_map(|b| CertFacts::parse(b.der).ok())
        .collect()
}

/// The public half of the first private key in PEM text.
fn key_in(bytes: &[u8]) -> Option<PublicKey> {
    let b = pem::blocks(bytes)
        .into_iter()
        .filter_map(Result::ok)
        .find(|b| key::is_private_key_label(&b.label))?;
    key::from_pem(&b.label, &b.headers, &b.der).ok()?.public
}

/// A value of admin.conf (`client-certificate-data`, ...), the first one, decoded.
fn conf_value(conf: &[u8], name: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(conf);
    let prefix = format!("{name}: ");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .and_then(|v| decode_data(v).ok())
        .unwrap_or_default()
}

/// A leaf's certificate and the public key of its key, from the bytes of their files.
fn pair(cert_rel: &str, cert: &[u8], key: &[u8]) -> (Option<CertFacts>, Option<PublicKey>) {
    if cert_rel == ADMIN {
        let c = certs_in(&conf_value(cert, "client-certificate-data"));
        (
            c.into_iter().next(),
            key_in(&conf_value(cert, "client-key-data")),
        )
    } else {
        (certs_in(cert).into_iter().next(), key_in(key))
    }
}

/// Every copy of the root CA in the round, by where it is; an error names a file holding none.
fn root_copies(r: &Round) -> Result<Vec<(String, CertFacts)>, String> {
    let read = |rel: &str| fs::read(r.path(rel)).unwrap_or_default();
    let mut out = Vec::new();
    for (rel, nth) in [
        (ROOT, 0),
        ("pki/etcd/ca.crt", 0),
        ("pki/trust/ca-bundle.pem", 1),
        ("pki/etcd-server-chain.pem", 1),
    ] {
        match certs_in(&read(rel)).into_iter().nth(nth) {
            Some(c) => out.push((rel.to_string(), c)),
            None => {
                return Err(format!(
                    "{rel}: no certificate {nth} (it has {} bytes)",
                    read(rel).len()
                ));
            }
        }
    }
    let conf = certs_in(&conf_value(&read(ADMIN), "certificate-authority-data"));
    match conf.into_iter().next() {
        Some(c) => out.push((ADMIN.to_string(), c)),
        None => return Err(format!("{ADMIN}: no certificate-authority-data")),
    }
    Ok(out)
}

// ------------------------------------------------------------------ checks

/// Right after a kill: every leaf matches its key, or its new key waits for its new
/// certificate in a temp file named by the pending record; every leaf and the intermediate
/// verify against every copy of the root. Whether the state is a mix of old and new files.
fn check_after_kill(r: &Round, t: &Template, what: &str) -> bool {
    let pending = certrenewd::renew::pending::load(&r.path("state"))
        .unwrap_or_else(|e| panic!("{what}: the pending record is not whole: {e:#}"));
    let named: BTreeSet<PathBuf> = pending
        .iter()
        .flat_map(|p| &p.changes)
        .flat_map(|c| [Some(c.cert_temp()), c.key_temp()])
        .flatten()
        .collect();
    for tmp in temps_under(r.tmp.path()) {
        let in_state = tmp.starts_with(r.path("state"));
        assert!(
            in_state || named.contains(&tmp),
            "{what}: {} is named by no pending change",
            tmp.display()
        );
    }
    let roots = root_copies(r).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (cert_rel, key_rel) in LEAVES {
        let cert_bytes = fs::read(r.path(cert_rel)).expect("cert");
        let key_bytes = fs::read(r.path(key_rel)).expect("key");
        let (cert, public) = pair(cert_rel, &cert_bytes, &key_bytes);
        let cert = cert.unwrap_or_else(|| panic!("{what}: {cert_rel}: no certificate"));
        let public = public.unwrap_or_else(|| panic!("{what}: {key_rel}: no key"));
        if cert.public_key != public {
            // Only between the key's rename and the certificate's.
            let tmp = pending
                .iter()
                .flat_map(|p| &p.changes)
                .find(|c| c.cert == r.path(cert_rel))
                .map(|c| c.cert_temp())
                .unwrap_or_default();
            let waiting = fs::read(&tmp)
                .ok()
                .and_then(|b| certs_in(&b).into_iter().next());
            assert!(
                named.contains(&tmp) && waiting.is_some_and(|w| w.public_key == public),
                "{what}: {cert_rel} does not match {key_rel}, and no certificate for its key waits"
            );
        }
        for (copy, root) in &roots {
            cert.signed_by(root).unwrap_or_else(|e| {
                panic!("{what}: {cert_rel} does not verify against the root in {copy}: {e}")
            });
        }
    }
    let inter = certs_in(&fs::read(r.path(INTER)).expect("inter"));
    for (copy, root) in &roots {
        inter[0]
            .signed_by(root)
            .unwrap_or_else(|e| panic!("{what}: {INTER} vs the root in {copy}: {e}"));
    }
    let now = files_of(r.tmp.path());
    let changed = t
        .files
        .iter()
        .filter(|(rel, b)| now.get(*rel) != Some(b))
        .count();
    changed > 0 && !(changed_by_a_pass(t, &now))
}

/// Whether every file a whole pass changes is changed.
fn changed_by_a_pass(t: &Template, now: &BTreeMap<String, Vec<u8>>) -> bool {
    let mut files: Vec<&str> = vec![ROOT, INTER, "pki/etcd/ca.crt", "pki/trust/ca-bundle.pem"];
    for (c, k) in LEAVES {
        files.extend([*c, *k]);
    }
    files
        .iter()
        .all(|rel| now.get(*rel).map(Vec::as_slice) != Some(t.old(rel)))
}

/// After the next normal run: what is wrong (nothing, when the pass was completed).
fn wrongs_after_run(r: &Round, t: &Template) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut check = |ok: bool, why: String| {
        if !ok {
            wrong.push(why);
        }
    };
    let now = files_of(r.tmp.path());
    let roots = match root_copies(r) {
        Ok(roots) => roots,
        Err(e) => return vec![e],
    };
    let old_root = &certs_in(t.old(ROOT))[0];
    let new_root = &roots[0].1;
    check(
        new_root.serial != old_root.serial,
        format!("{ROOT} not re-issued"),
    );
    check(
        new_root.public_key == old_root.public_key,
        format!("{ROOT}: another key"),
    );
    let new_inter = &certs_in(&now[INTER])[0];
    check(
        new_inter.serial != certs_in(t.old(INTER))[0].serial,
        format!("{INTER} not re-issued"),
    );
    check(
        new_inter.signed_by(new_root).is_ok(),
        format!("{INTER} vs the new root"),
    );
    for (cert_rel, key_rel) in LEAVES {
        let (cert, public) = pair(cert_rel, &now[*cert_rel], &now[*key_rel]);
        let (old, old_public) = pair(cert_rel, t.old(cert_rel), t.old(key_rel));
        let (Some(cert), Some(public)) = (cert, public) else {
            check(false, format!("{cert_rel}: unreadable"));
            continue;
        };
        check(
            Some(&cert.serial) != old.as_ref().map(|o| &o.serial),
            format!("{cert_rel}: not renewed"),
        );
        check(
            cert.public_key == public,
            format!("{cert_rel} does not match {key_rel}"),
        );
        check(
            Some(public) != old_public,
            format!("{key_rel}: key not rotated"),
        );
        check(
            cert.signed_by(new_root).is_ok(),
            format!("{cert_rel} vs the new root"),
        );
    }
    for (copy, root) in &roots[1..] {
        check(
            root.der == new_root.der,
            format!("{copy}: holds the old root"),
        );
    }
    check(
        now["pki/etcd-peer.crt"] == t.old("pki/etcd-peer.crt"),
        "pki/etcd-peer.crt changed".into(),
    );
    // Certificates, keys and backups. (A state record's temp file a kill left is never
    // read, and the next write of that record removes it first, whoever's it is.)
    let temps: Vec<PathBuf> = temps_under(r.tmp.path())
        .into_iter()
        .filter(|p| p.parent() != Some(r.path("state").as_path()))
        .collect();
    check(temps.is_empty(), format!("temp files left: {temps:?}"));
    check(
        !r.path("state/pending.json").exists(),
        "pending.json left".into(),
    );
    // The bytes from before the pass of every file it changed are in a backup set.
    let backups: Vec<Vec<u8>> = snapshot_relative(&r.path("state/backup"))
        .into_values()
        .filter_map(|n| match n {
            Node::File { bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect();
    for (rel, old) in &t.files {
        if now.get(rel) != Some(old) && !backups.contains(old) {
            wrong.push(format!(
                "{rel}: its bytes from before the pass are in no backup"
            ));
        }
    }
    wrong
}

/// Whether `old-cas.json` lacks the re-issue of the root or of the intermediate.
fn record_lost(r: &Round, t: &Template) -> Option<String> {
    let text = fs::read_to_string(r.path("state/old-cas.json")).unwrap_or_default();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let cas = doc["cas"].as_array().cloned().unwrap_or_default();
    for rel in [ROOT, INTER] {
        let old = &certs_in(t.old(rel))[0];
        let path = r.path(rel).display().to_string();
        let there = cas
            .iter()
            .any(|o| o["ca"] == path.as_str() && o["old_serial"] == old.serial.as_str());
        if !there {
            return Some(format!("{rel}: no record of its re-issue in {text:?}"));
        }
    }
    None
}

// ------------------------------------------------------------------ the test

#[derive(Default)]
struct Counts {
    rounds: usize,
    finished: usize,
    mixed: usize,
    wrong: Vec<String>,
    lost: Vec<String>,
}

impl Counts {
    /// The next run after a kill (`what`), and what it left.
    fn after(&mut self, r: &Round, t: &Template, what: &str, killed: bool, mixed: bool) {
        self.rounds += 1;
        self.finished += usize::from(!killed);
        self.mixed += usize::from(mixed);
        let out = r
            .command(Path::new(BIN))
            .output()
            .expect("running certrenewd");
        let mut wrong = wrongs_after_run(r, t);
        if out.status.code() != Some(0) {
            wrong.push(format!(
                "exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !wrong.is_empty() {
            self.wrong.push(format!("{what}: {}", wrong.join("; ")));
        }
        if let Some(lost) = record_lost(r, t) {
            self.lost.push(format!("{what}: {lost}"));
        }
    }
}

#[test]
fn a_ca_renewal_killed_at_every_step_and_at_random_is_completed_by_the_next_run() {
    let bin = failpoints::binary();
    let started = Instant::now();
    let t = Template::new();
    let mut counts = Counts::default();
    // The uninterrupted pass: its duration, and that it leaves nothing wrong.
    let r = Round::new(&t);
    let begun = Instant::now();
    let out = r.command(Path::new(BIN)).output().expect("certrenewd");
    let mut whole = begun.elapsed();
    // The shortest of three: the first run of a binary is the slowest.
    for _ in 0..2 {
        let r = Round::new(&t);
        let begun = Instant::now();
        let _ = r.command(Path::new(BIN)).output().expect("certrenewd");
        whole = whole.min(begun.elapsed());
    }
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrong = wrongs_after_run(&r, &t);
    assert!(wrong.is_empty(), "the uninterrupted pass: {wrong:?}");
    assert_eq!(record_lost(&r, &t), None, "the uninterrupted pass");

    // Every abort point, each time the pass reaches it.
    let mut reached: BTreeMap<&str, u32> = BTreeMap::new();
    for point in POINTS {
        for n in 1.. {
            let r = Round::new(&t);
            let out = r
                .command(bin)
                .env("CERTRENEWD_FAILPOINT", format!("{point}:abort@{n}"))
                .output()
                .expect("running the failpoints build");
            let what = format!("{point}:abort@{n}");
            let hit =
                String::from_utf8_lossy(&out.stderr).contains(&format!("failpoint {point} hit"));
            if !hit {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{what}: not reached, yet {out:?}"
                );
                break;
            }
            assert_eq!(out.status.code(), None, "{what}: must have aborted");
            *reached.entry(point).or_default() += 1;
            let mixed = check_after_kill(&r, &t, &what);
            counts.after(&r, &t, &what, true, mixed);
        }
    }
    for point in POINTS {
        assert!(
            reached.contains_key(point),
            "{point} was never reached: {reached:?}"
        );
    }

    // SIGKILL after a random delay: half the rounds anywhere in the pass, half soon after
    // its pending record appears (the install: temps, renames, copies).
    let mut rng = Rng::from_env_or_clock("CRASH_SEED");
    for round in 0..RANDOM_ROUNDS {
        let r = Round::new(&t);
        let cue = (round % 2 == 1).then(|| r.path("state/pending.json"));
        let delay = match cue {
            None => rng.duration_below(whole),
            Some(_) => rng.duration_below(whole / 4),
        };
        let mut child = r
            .command(Path::new(BIN))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut exited = false;
        if let Some(cue) = &cue {
            while !cue.exists() {
                if child.try_wait().expect("try_wait").is_some() {
                    exited = true;
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let deadline = Instant::now() + delay;
        while !exited && Instant::now() < deadline {
            exited = child.try_wait().expect("try_wait").is_some();
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let killed = !exited && status.code().is_none();
        let what = format!("random round {round}, killed after {delay:?}");
        let mixed = killed && check_after_kill(&r, &t, &what);
        counts.after(&r, &t, &what, killed, mixed);
    }

    // strace kills the pass on entering each system call of a kind in turn (`when=N`,
    // counted per system call and per thread), until a pass ends without reaching it.
    let mut syscalls: BTreeMap<&str, u32> = BTreeMap::new();
    let strace = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !strace {
        common::skip::skip("strace not installed: the pass is not killed at its system calls");
    }
    for &(kind, set, step) in SYSCALLS.iter().filter(|_| strace) {
        let mut n = 1;
        loop {
            let r = Round::new(&t);
            // Not `--seccomp-bpf`: strace 6.1 injects nothing with it.
            let args = [
                "-f",
                "-qq",
                "-o",
                "/dev/null",
                "-e",
                &format!("trace={set}"),
                &format!("--inject={set}:signal=KILL:when={n}"),
            ]
            .map(String::from);
            let out = r.traced(&args).output().expect("running strace");
            let what = format!("{kind} #{n} ({set}) killed by strace");
            if out.status.code().is_some() {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{what}: not reached, yet {out:?}"
                );
                break;
            }
            *syscalls.entry(kind).or_default() += 1;
            let mixed = check_after_kill(&r, &t, &what);
            counts.after(&r, &t, &what, true, mixed);
            n += step;
            assert!(
                n < 10_000,
                "{what}: the pass never ends without reaching it"
            );
        }
        assert!(
            syscalls.contains_key(kind),
            "no {kind} call of the pass ({set}) was killed: is strace able to inject?"
        );
    }

    // Straight to stderr, so that the counts are in every log (libtest captures eprintln!).
    let _ = writeln!(
        std::io::stderr(),
        "CA renewal kill test: {} rounds ({} at abort points: {reached:?}; {} at random, {} of them finished first; {} at system calls: {syscalls:?}); {} states seen mixed after a kill; {} states left wrong after the next run; {} records lost; {:.1}s",
        counts.rounds,
        reached.values().sum::<u32>(),
        RANDOM_ROUNDS,
        counts.finished,
        syscalls.values().sum::<u32>(),
        counts.mixed,
        counts.wrong.len(),
        counts.lost.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(counts.mixed > 0, "no kill left a mix of old and new files");
    assert!(
        counts.wrong.is_empty(),
        "left wrong after the next run:\n{}",
        counts.wrong.join("\n")
    );
    assert!(
        counts.lost.is_empty(),
        "records lost:\n{}",
        counts.lost.join("\n")
    );
}

/// The serial each `renewed <path> [...] serial <hex> ...` line of a `renew` run's output names,
/// by path.
fn reported_renewed(out: &str) -> BTreeMap<PathBuf, String> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "renewed").then_some(())?;
            let path = PathBuf::from(w.next()?);
            // (`#1`, `(user ...)` may come between.)
            w.find(|&x| x == "serial")?;
            Some((path, w.next()?.to_string()))
        })
        .collect()
}

/// Two configurations over one tree with different state directories (a misconfiguration),
/// renewing with `rotate_keys` at the same time: the tree's lock lets one renew and makes
/// the other fail saying so, so no certificate is left without its key and no run says
/// "renewed" of a file that does not hold what it renewed.
#[test]
fn two_state_directories_over_one_tree_never_leave_a_certificate_without_its_key() {
    let t = Template::new();
    for round in 0..3 {
        let r = Round::new(&t);
        let p = |rel: &str| common::pki::toml_str(&r.path(rel));
        // The hook holds the winner's pass (and its locks) long enough for the other to
        // give up waiting.
        for (name, state) in [("a.toml", "state"), ("b.toml", "state-b")] {
            fs::write(
                r.path(name),
                format!(
                    "rotate_keys = true\nlock_timeout_secs = 1\nstate_dir = {}\n[[watch]]\npath = {}\nkubeconfigs = [{}]\npost_renew_command = [\"/bin/sleep\", \"3\"]\n",
                    p(state),
                    p("pki"),
                    p(ADMIN)
                ),
            )
            .expect("config");
        }
        let spawn = |name: &str| {
            let mut c2 = Command::new(BIN);
            c2.arg("--config").arg(r.path(name)).arg("renew");
            common::pki::isolate(&mut c2)
                .env_remove("CERTRENEWD_LOG")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c2.spawn().expect("spawn certrenewd")
        };
        let order = match round % 2 {
            0 => ["a.toml", "b.toml"],
            _ => ["b.toml", "a.toml"],
        };
        let first = spawn(order[0]);
        let second = spawn(order[1]);
        let outs: Vec<(String, std::process::Output)> = [(order[0], first), (order[1], second)]
            .into_iter()
            .map(|(n, c)| (n.to_string(), c.wait_with_output().expect("wait")))
            .collect();
        let what = |n: &str, o: &std::process::Output| {
            format!(
                "round {round}, {n}: exit {:?}\n{}{}",
                o.status.code(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        let (won, lost): (Vec<_>, Vec<_>) =
            outs.iter().partition(|(_, o)| o.status.code() == Some(0));
        assert_eq!(
            (won.len(), lost.len()),
            (1, 1),
            "one renews, the other fails:\n{}",
            outs.iter()
                .map(|(n, o)| what(n, o))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let (n, o) = lost[0];
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // The loser stops at the first shared directory in the order of their inodes: the
        // tree's root (the kubeconfig's) or its `pki`, whichever the file system numbered
        // first.
        let names_a_shared_dir = [r.tmp.path().to_path_buf(), r.path("pki")]
            .iter()
            .any(|d| text.contains(&format!("{} is held", d.display())));
        assert!(
            text.contains("with another state directory") && names_a_shared_dir,
            "the loser says why, naming the tree: {}",
            what(n, o)
        );
        assert!(
            reported_renewed(&text).is_empty(),
            "the loser renewed nothing: {}",
            what(n, o)
        );
        let (n, o) = won[0];
        let said = reported_renewed(&String::from_utf8_lossy(&o.stdout));
        // Every due leaf renewed, matching its key, holding the serial it was reported with.
        for (cert_rel, key_rel) in LEAVES {
            let now = |rel: &str| fs::read(r.path(rel)).expect("read");
            let (cert, public) = pair(cert_rel, &now(cert_rel), &now(key_rel));
            let cert = cert.unwrap_or_else(|| panic!("{cert_rel}: no certificate"));
            assert!(
                public.as_ref() == Some(&cert.public_key),
                "round {round}: {cert_rel} does not match {key_rel}"
            );
            let serial = said.get(&r.path(cert_rel)).unwrap_or_else(|| {
                panic!(
                    "round {round}: {cert_rel} not reported renewed: {}",
                    what(n, o)
                )
            });
            assert!(
                serial.eq_ignore_ascii_case(&cert.serial),
                "round {round}: {cert_rel} holds serial {}, reported renewed with {serial}",
                cert.serial
            );
        }
        let temps = temps_under(r.tmp.path());
        assert!(
            temps.is_empty(),
            "round {round}: temp files left: {temps:?}"
        );
    }
}
