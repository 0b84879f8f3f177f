//! Crash safety of the install (STYLE.md practice 6): a real `certrenewd renew --no-restart`
//! is SIGKILLed at random moments, and aborted at each named failpoint of a `failpoints`
//! build, over a tree of a few hundred due certificates (mkpki `bench` plus the `keytypes`
//! and `starlingx` layouts: PEM and DER, PKCS#1/PKCS#8/SEC1/Ed25519 keys, a chain file, a
//! CA in another watched directory), with and without `rotate_keys`. After each crash:
//!
//! - right after the kill, every pair on disk is old, new, or a rotated key whose new
//!   certificate waits in a temp file named by the pending record (recovery rolls it
//!   forward); every temp file in the tree is named by the pending record;
//! - after ONE normal run: every renewed certificate is new, matches its key file (public
//!   key equal), verifies against its CA (in process for all, with openssl on a sample),
//!   keeps its owner, mode and chain; keys are the old bytes without rotation and a new key
//!   with it; the old files are in a backup set; no `*.certrenewd-tmp` is left anywhere;
//!   no `pending.json` is left (`--no-restart` clears the record after recovery); every
//!   other file is byte-identical; the exit status is the uninterrupted run's.
//!
//! `CRASH_SEED=<n>` replays a run's random kill moments (the seed is printed). The
//! failpoints binary is built by the test with `cargo build --features failpoints` into
//! `target/failpoints` (the first time, every dependency compiles again: minutes). Rounds run
//! on tmpfs (`/dev/shm`) when there is one. About 50 s on 2 CPUs, most of it key
//! generation of the debug build with `rotate_keys`.

use crate::common;

use common::pki::{Round, toml_str};
use common::walk::{Node, snapshot_relative, temps_beside, temps_under};
use common::{Rng, failpoints};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use certrenewd::format::cert::verify_signature;
use certrenewd::format::{key, pem};
use certrenewd::inventory::{CertFacts, Inventory, PublicKey};
use certrenewd::renew::pending::{self, Phase};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");
/// Layouts in the tree besides `bench`.
const LAYOUTS: &[&str] = &["keytypes", "starlingx"];
/// Leaves of the `bench` layout (half of them due).
const BENCH_COUNT: u32 = 400;
/// Wall time spent on random kills per key mode, after the baseline: rounds go on until
/// it is spent and `MIN_ROUNDS` are done, and past it (up to twice as long) until a kill
/// has landed inside the temps or renames.
const RANDOM_BUDGET: Duration = Duration::from_secs(15);
const MIN_ROUNDS: usize = 6;
/// The keytypes layout's watched directory, and its kubeconfig outside it, whose
/// certificate-authority-data is a copy of a CA the pass re-issues.
const KEYTYPES_PKI: &str = "keytypes/etc/kubernetes/pki";
const KEYTYPES_KUBECONFIG: &str = "keytypes/etc/kubernetes/expired-ca.conf";
const FAILPOINTS: &[&str] = &[
    "before-temp-write",
    "after-pending-record",
    "after-temps",
    "between-key-and-cert",
    "after-renames",
];

// ------------------------------------------------------------------ the master tree

/// The generated tree, its watches and what the scan says about it.
struct Master {
    /// Holds `<layout>/etc/...` for each layout.
    root: PathBuf,
    /// (relative watched dir, unit).
    watches: Vec<(String, String)>,
    /// Every file: bytes and (mode, uid, gid), by relative path.
    files: Files,
}

fn master() -> &'static Master {
    static M: OnceLock<Master> = OnceLock::new();
    M.get_or_init(|| {
        // One directory per test process; those of processes that are gone are removed.
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR")).join("crash-kill");
        for e in fs::read_dir(&parent).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.parse::<u32>().is_ok() && !Path::new("/proc").join(&name).exists() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let root = parent.join(std::process::id().to_string()).join("tree");
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.parent().expect("parent")).expect("mkdir");
        let started = Instant::now();
        let mut children = Vec::new();
        for l in LAYOUTS.iter().chain(&["bench"]) {
            let mut cmd = Command::new("bash");
            cmd.arg(MKPKI).arg(l).arg(root.join(l));
            if *l == "bench" {
                cmd.arg("--count").arg(BENCH_COUNT.to_string());
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("running mkpki.sh");
            children.push((l, child));
        }
        for (l, child) in children {
            let out = child.wait_with_output().expect("waiting for mkpki.sh");
            assert!(
                out.status.success(),
                "mkpki.sh {l}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut watches = Vec::new();
        for l in LAYOUTS.iter().chain(&["bench"]) {
            let text = fs::read_to_string(root.join(l).join("watch.tsv")).expect("watch.tsv");
            for line in text.lines().filter(|l| !l.is_empty()) {
                let (dir, unit) = line.split_once('\t').expect("dir TAB unit");
                watches.push((format!("{l}/{dir}"), unit.to_string()));
            }
        }
        // RSA-3072 key generation takes seconds in a debug build; rsa2048-pkcs8 keeps the
        // PKCS#8 RSA case.
        for ext in ["crt", "key"] {
            fs::remove_file(root.join(format!("keytypes/etc/kubernetes/pki/rsa3072-pkcs8.{ext}")))
                .expect("removing the RSA-3072 pair");
        }
        let files = read_tree(&root);
        eprintln!(
            "crash tree generated in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        Master {
            root,
            watches,
            files,
        }
    })
}

/// Mode, owner and group of a file.
type Meta = (u32, u32, u32);

/// Every regular file of a tree by relative path: its bytes and `Meta`.
type Files = BTreeMap<String, (Vec<u8>, Meta)>;

/// Every file under `root`.
fn read_tree(root: &Path) -> Files {
    snapshot_relative(root)
        .into_iter()
        .filter_map(|(rel, node)| match node {
            Node::File {
                bytes,
                mode,
                uid,
                gid,
            } => Some((
                rel.to_string_lossy().into_owned(),
                (bytes, (mode, uid, gid)),
            )),
            _ => None,
        })
        .collect()
}

fn rel_of(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or_else(|_| panic!("{} is not under {}", p.display(), root.display()))
        .to_string_lossy()
        .into_owned()
}

// ------------------------------------------------------------------ one round's copy

/// Where round copies go: tmpfs when there is one (a SIGKILL loses nothing that fsync
/// would have kept, so the crash semantics are the same, and rounds are faster).
fn scratch_parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if tempfile::tempdir_in(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl Round {
    /// A private copy of the master with its config (every watch of the master), state and
    /// backup dirs.
    /// Not `new`: `Round` is common's, and other modules of this binary add constructors.
    fn crash_round(rotate: bool) -> Round {
        let m = master();
        let r = Round::copy_of(&m.root, "crash-round.", &scratch_parent());
        let watches: Vec<(&str, String)> = m
            .watches
            .iter()
            .map(|(dir, unit)| {
                let mut table = format!("units = [{}]", toml_str(Path::new(unit)));
                // keytypes' kubeconfig holding a copy of its expired CA, which is re-issued.
                if dir == KEYTYPES_PKI {
                    let conf = r.tree.join(KEYTYPES_KUBECONFIG);
                    table.push_str(&format!("\nkubeconfigs = [{}]", toml_str(&conf)));
                }
                (dir.as_str(), table)
            })
            .collect();
        r.write_config(
            &format!("validity_days = 365\nrotate_keys = {rotate}\nlock_timeout_secs = 5"),
            &watches,
        );
        r
    }

    fn command(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin);
        c.arg("--config")
            .arg(&self.config)
            .args(["renew", "--no-restart"]);
        // Its alarms go to a journald that is not there, never to this machine's.
        common::pki::isolate(&mut c)
            .env_remove("CERTRENEWD_LOG")
            .env_remove("CERTRENEWD_FAILPOINT");
        c
    }

    /// A normal run to the end: (exit code, stdout, stderr).
    fn run(&self) -> (i32, String, String) {
        let out = self
            .command(Path::new(BIN))
            .output()
            .expect("running certrenewd");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

// ------------------------------------------------------------------ reading pairs

/// The first certificate of a file (PEM with anything around it, or DER).
fn cert_of(bytes: &[u8]) -> Result<CertFacts, String> {
    if pem::is_pem(bytes) {
        let der = pem::blocks(bytes)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| b.label == "CERTIFICATE")
            .ok_or("no certificate block")?
            .der;
        CertFacts::parse(der).map_err(|e| e.to_string())
    } else {
        CertFacts::parse(bytes.to_vec()).map_err(|e| e.to_string())
    }
}

/// The public half of a private key file (PEM or DER).
fn key_of(bytes: &[u8]) -> Result<PublicKey, String> {
    let info = if pem::is_pem(bytes) {
        let b = pem::blocks(bytes)
            .into_iter()
            .filter_map(Result::ok)
            .find(|b| key::is_private_key_label(&b.label))
            .ok_or("no private key block")?;
        key::from_pem(&b.label, &b.headers, &b.der).map_err(|e| e.to_string())?
    } else {
        key::from_der(bytes).ok_or("not a DER private key")?
    };
    info.public.ok_or_else(|| "encrypted key".to_string())
}

/// One certificate the uninterrupted run renews, with its key and CA.
#[derive(Debug, Clone)]
struct Pair {
    cert: String,
    key: String,
    ca: String,
    /// A CA re-issued with its own key: its key is never rotated.
    is_ca: bool,
}

/// What an uninterrupted run does, measured on a fresh copy.
struct Baseline {
    pairs: Vec<Pair>,
    /// Its exit status (1: the fixture has unrenewable certificates on purpose).
    code: i32,
    /// From spawn to exit.
    total: Duration,
    /// From the backup directory's appearance (the install starting) to exit.
    install: Duration,
    /// From the pending record's appearance to exit.
    recorded: Duration,
}

fn baseline(rotate: bool) -> &'static Baseline {
    static B: [OnceLock<Baseline>; 2] = [OnceLock::new(), OnceLock::new()];
    B[usize::from(rotate)].get_or_init(|| {
        let r = Round::crash_round(rotate);
        let start = Instant::now();
        let mut child = r
            .command(Path::new(BIN))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let (mut install_start, mut record_start) = (None, None);
        while child.try_wait().expect("try_wait").is_none() {
            if install_start.is_none() && r.backup.exists() {
                install_start = Some(start.elapsed());
            }
            if record_start.is_none() && r.state.join("pending.json").exists() {
                record_start = Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let total = start.elapsed();
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let code = out.status.code().unwrap_or(-1);
        // Pairs from a scan of the master, in the order of the renewed lines.
        let m = master();
        let roots: Vec<PathBuf> = m.watches.iter().map(|(d, _)| m.root.join(d)).collect();
        let inv = Inventory::scan(&roots);
        let mut pairs = Vec::new();
        for line in stdout.lines() {
            let Some(rest) = line.strip_prefix("renewed ") else {
                continue;
            };
            let abs = rest.trim_start().split(" serial ").next().expect("path");
            // A bundle's certificate is named with its place in the file (`#1`).
            let abs = match abs.rsplit_once(" #") {
                Some((p, n)) if n.bytes().all(|b| b.is_ascii_digit()) => p,
                _ => abs,
            };
            let rel = rel_of(&r.tree, Path::new(abs));
            let c = inv
                .certs
                .iter()
                .find(|c| c.index == 0 && rel_of(&m.root, &c.path) == rel)
                .unwrap_or_else(|| panic!("{rel} renewed but not in the scan"));
            let k = inv.matched_key(c).expect("a renewed certificate has a key");
            // A CA re-issued with its own key is its own signer.
            let ca = inv.signer_of(c).expect("a renewed certificate has a CA");
            pairs.push(Pair {
                is_ca: c.facts.is_ca,
                cert: rel,
                key: rel_of(&m.root, &k.path),
                ca: rel_of(&m.root, &ca.path),
            });
        }
        let due = pairs.len();
        assert!(
            due >= (BENCH_COUNT / 2) as usize,
            "the uninterrupted run renewed only {due}:\n{stdout}"
        );
        let install = total.saturating_sub(install_start.expect("no backup was made"));
        let recorded = total.saturating_sub(record_start.unwrap_or(total - install / 2));
        eprintln!(
            "baseline rotate_keys={rotate}: {due} renewed, exit {code}, {:.2}s ({:.2}s installing, {:.2}s recorded)",
            total.as_secs_f64(),
            install.as_secs_f64(),
            recorded.as_secs_f64()
        );
        Baseline {
            pairs,
            code,
            total,
            install,
            recorded,
        }
    })
}

// ------------------------------------------------------------------ checks

/// What the crash interrupted, judged from the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Moment {
    /// Scan, planning, signing: nothing written yet.
    BeforeInstall,
    /// Backups being made, no pending record yet.
    Backups,
    /// Pending record written, temps being written, nothing renamed.
    Temps,
    /// Some files renamed into place.
    Renames,
    /// Everything renamed; the record not updated or cleared yet.
    Installed,
    /// The run had finished before the kill.
    Finished,
}

/// Kills that landed between a CA's renewal and the replacement of its copies.
static AMONG_COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Checks the disk right after a crash, before anything recovers; returns what was hit.
fn check_after_crash(r: &Round, b: &Baseline, rotate: bool) -> Moment {
    let m = master();
    let pending = pending::load(&r.state).expect("the pending record must be readable");
    let mut named: BTreeSet<PathBuf> = BTreeSet::new();
    let mut roll_forward: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    if let Some(p) = &pending {
        for c in &p.changes {
            named.insert(c.cert_temp());
            if let (Some(k), Some(key_temp)) = (&c.key, c.key_temp()) {
                named.insert(key_temp);
                roll_forward.insert(k.clone(), c.cert_temp());
            }
        }
    }
    for t in temps_under(&r.tree) {
        assert!(
            named.contains(&t),
            "{} is not named by the pending record {pending:?}: recovery would not know it",
            t.display()
        );
    }
    let mut changed = 0;
    for pair in &b.pairs {
        let cert_now = fs::read(r.tree.join(&pair.cert)).expect("cert");
        let key_path = r.tree.join(&pair.key);
        let key_now = fs::read(&key_path).expect("key");
        let cert_old = &m.files[&pair.cert].0;
        let key_old = &m.files[&pair.key].0;
        let cert_new = cert_now != *cert_old;
        let key_new = key_now != *key_old;
        let rotate = rotate && !pair.is_ca;
        if !rotate {
            assert!(!key_new, "{}: key rewritten without rotate_keys", pair.key);
        }
        let cert = cert_of(&cert_now).unwrap_or_else(|e| panic!("{}: {e}", pair.cert));
        let public = key_of(&key_now).unwrap_or_else(|e| panic!("{}: {e}", pair.key));
        match (cert_new, key_new) {
            (false, false) => {}
            (true, _) => {
                changed += 1;
                assert_eq!(
                    cert.public_key, public,
                    "{}: a new certificate on disk whose key file does not match it",
                    pair.cert
                );
                assert_eq!(
                    key_new, rotate,
                    "{}: new certificate, key rewritten = {key_new}",
                    pair.cert
                );
            }
            (false, true) => {
                // Only between the two renames: the certificate must be waiting, named.
                changed += 1;
                let tmp = roll_forward.get(&key_path).unwrap_or_else(|| {
                    panic!(
                        "{}: new key beside the old certificate, and no pending change for it",
                        pair.key
                    )
                });
                let waiting = fs::read(tmp).unwrap_or_else(|e| {
                    panic!(
                        "{}: new key in place, the new certificate's temp {} is gone: {e}",
                        pair.key,
                        tmp.display()
                    )
                });
                let waiting = cert_of(&waiting).expect("the waiting certificate");
                assert_eq!(
                    waiting.public_key, public,
                    "{}: the certificate that would roll forward does not match the new key",
                    pair.cert
                );
            }
        }
    }
    if check_copies_after_crash(r, b) {
        AMONG_COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match &pending {
        None if changed == b.pairs.len() => Moment::Installed,
        None => {
            assert_eq!(changed, 0, "files changed without a pending record");
            if r.backup.exists() {
                Moment::Backups
            } else {
                Moment::BeforeInstall
            }
        }
        Some(p) if p.phase == Phase::Installed || changed == b.pairs.len() => Moment::Installed,
        Some(_) if changed > 0 => Moment::Renames,
        Some(_) => Moment::Temps,
    }
}

/// Right after a crash, every copy of a CA being re-issued holds the old CA or the new one
/// (the CA file's, in place or in its temp file): both verify every leaf the CA signed.
/// Whether the kill landed among them: the CA renewed, some copy still old.
fn check_copies_after_crash(r: &Round, b: &Baseline) -> bool {
    let m = master();
    let mut among = false;
    for ca in b.pairs.iter().filter(|p| p.is_ca) {
        let old_ca = &m.files[&ca.cert].0;
        let abs = r.tree.join(&ca.cert);
        let mut news: Vec<Vec<u8>> = vec![old_ca.clone()];
        news.extend(fs::read(&abs));
        news.extend(temps_beside(&abs).iter().filter_map(|t| fs::read(t).ok()));
        for (rel, (old, _)) in &m.files {
            if rel == &ca.cert
                || common::pki::with_ca_copies_replaced(old, &[(old_ca, old_ca)]).is_none()
            {
                continue;
            }
            let now = fs::read(r.tree.join(rel)).expect("a copy");
            let fits = news.iter().any(|new| {
                common::pki::with_ca_copies_replaced(old, &[(old_ca, new)]).as_ref() == Some(&now)
            });
            assert!(
                fits,
                "{rel}: holds neither {}'s old certificate nor its new one",
                ca.cert
            );
            among |= now == *old && fs::read(&abs).is_ok_and(|b| b != *old_ca);
        }
    }
    among
}

/// Checks the disk after the crash and one normal run.
fn check_after_recovery(r: &Round, b: &Baseline, rotate: bool, sample: &mut Rng) {
    let m = master();
    let now = time::OffsetDateTime::now_utc();
    r.assert_settled("after a --no-restart run");
    // The restarts the killed pass owed stay owed: a --no-restart run forgives only its
    // own. The record, when there is one, is whole and names only watched units.
    if let Ok(text) = fs::read_to_string(r.state.join("restarts.json")) {
        let owed: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("restarts.json is not whole ({e}): {text}"));
        for u in owed["units"].as_array().expect("units") {
            let u = u.as_str().unwrap_or("");
            assert!(
                m.watches.iter().any(|(_, unit)| unit == u),
                "an unwatched unit owed: {u}"
            );
        }
    }
    let after = read_tree(&r.tree);
    let before: BTreeSet<&String> = m.files.keys().collect();
    let now_there: BTreeSet<&String> = after.keys().collect();
    assert_eq!(before, now_there, "files appeared or vanished in the tree");
    let mut touched: BTreeSet<&str> = BTreeSet::new();
    for pair in &b.pairs {
        touched.insert(&pair.cert);
        touched.insert(&pair.key);
    }
    // Copies of a re-issued CA hold the new CA file's text, every other byte kept.
    let cas: Vec<(&[u8], &[u8])> = b
        .pairs
        .iter()
        .filter(|p| p.is_ca)
        .map(|p| (m.files[&p.cert].0.as_slice(), after[&p.cert].0.as_slice()))
        .collect();
    let mut copies = 0;
    for (rel, (bytes, meta)) in &after {
        let (old, old_meta) = &m.files[rel];
        assert_eq!(meta, old_meta, "{rel}: owner or mode changed");
        if touched.contains(rel.as_str()) {
            continue;
        }
        match common::pki::with_ca_copies_replaced(old, &cas) {
            Some(replaced) => {
                copies += 1;
                assert!(
                    *bytes == replaced,
                    "{rel}: a copy of a renewed CA, not replaced"
                );
            }
            None => assert!(bytes == old, "{rel} was never due but changed"),
        }
    }
    assert!(
        copies >= 2,
        "the tree's copies of a re-issued CA were not found"
    );
    let backups = backup_sets(&r.backup);
    for pair in &b.pairs {
        let (cert_bytes, _) = &after[&pair.cert];
        let (key_bytes, _) = &after[&pair.key];
        let old_cert = &m.files[&pair.cert].0;
        let old_key = &m.files[&pair.key].0;
        assert!(cert_bytes != old_cert, "{}: not renewed", pair.cert);
        let cert = cert_of(cert_bytes).unwrap_or_else(|e| panic!("{}: {e}", pair.cert));
        let old = cert_of(old_cert).expect("old cert");
        let public = key_of(key_bytes).unwrap_or_else(|e| panic!("{}: {e}", pair.key));
        assert_eq!(
            cert.public_key, public,
            "{}: does not match its key",
            pair.cert
        );
        assert_ne!(cert.serial, old.serial, "{}: same serial", pair.cert);
        assert!(
            cert.not_after - now > time::Duration::days(30),
            "{}: renewed but ends {}",
            pair.cert,
            cert.not_after
        );
        // A CA keeps its key whatever rotate_keys says (what it signed must keep verifying).
        if rotate && !pair.is_ca {
            assert!(key_bytes != old_key, "{}: key not rotated", pair.key);
            assert_ne!(public, old.public_key, "{}: same public key", pair.key);
        } else {
            assert!(key_bytes == old_key, "{}: key rewritten", pair.key);
        }
        let ca = cert_of(&after[&pair.ca].0).expect("CA");
        cert.signed_by(&ca)
            .unwrap_or_else(|e| panic!("{}: not signed by {}: {e}", pair.cert, pair.ca));
        verify_signature(&cert.der, &ca.public_key)
            .unwrap_or_else(|e| panic!("{}: signature: {e}", pair.cert));
        // A chain after the first certificate is kept as it was.
        if pem::is_pem(old_cert) {
            let rest = |b: &[u8]| -> Vec<Vec<u8>> {
                pem::blocks(b)
                    .into_iter()
                    .skip(1)
                    .map(|x| x.expect("block").der)
                    .collect()
            };
            assert_eq!(rest(cert_bytes), rest(old_cert), "{}: chain", pair.cert);
        }
        // The old files are in a backup set, and backups of keys are not world-readable.
        for (rel, old_bytes) in [(&pair.cert, old_cert), (&pair.key, old_key)] {
            let abs = r.tree.join(rel);
            let inner = abs.strip_prefix("/").expect("absolute");
            let found = backups
                .iter()
                .map(|s| s.join(inner))
                .find(|p| fs::read(p).is_ok_and(|b| b == *old_bytes));
            let found = found.unwrap_or_else(|| panic!("{rel}: no backup of the old file"));
            if rel == &pair.key {
                let mode = fs::metadata(&found).expect("backup").mode() & 0o7777;
                assert_eq!(mode & 0o007, 0, "{}: mode {mode:o}", found.display());
            }
        }
    }
    // openssl's opinion on a sample.
    for _ in 0..2 {
        let pair = &b.pairs[sample.below(b.pairs.len())];
        openssl_agrees(r, pair);
    }
}

fn backup_sets(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|e| e.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// `openssl verify` of the certificate against its CA, and the key's public half equal to
/// the certificate's, by openssl alone.
fn openssl_agrees(r: &Round, pair: &Pair) {
    let dir = r.tmp.path();
    let as_pem = |rel: &str, name: &str| -> PathBuf {
        let bytes = fs::read(r.tree.join(rel)).expect("read");
        let p = dir.join(name);
        fs::write(
            &p,
            pem::encode("CERTIFICATE", &cert_of(&bytes).expect("cert").der),
        )
        .expect("write");
        p
    };
    let leaf = as_pem(&pair.cert, "sample-leaf.pem");
    let ca = as_pem(&pair.ca, "sample-ca.pem");
    let ok = common::openssl(&[
        "verify".as_ref(),
        "-partial_chain".as_ref(),
        "-CAfile".as_ref(),
        ca.as_os_str(),
        leaf.as_os_str(),
    ]);
    assert!(ok.contains(": OK"), "openssl verify {}: {ok}", pair.cert);
    let from_cert = common::openssl(&[
        "x509".as_ref(),
        "-noout".as_ref(),
        "-pubkey".as_ref(),
        "-in".as_ref(),
        leaf.as_os_str(),
    ]);
    let key = r.tree.join(&pair.key);
    let form = if pem::is_pem(&fs::read(&key).expect("key")) {
        "PEM"
    } else {
        "DER"
    };
    let from_key = common::openssl(&[
        "pkey".as_ref(),
        "-pubout".as_ref(),
        "-inform".as_ref(),
        form.as_ref(),
        "-in".as_ref(),
        key.as_os_str(),
    ]);
    assert_eq!(
        from_cert, from_key,
        "openssl: {} does not match {}",
        pair.cert, pair.key
    );
}

// ------------------------------------------------------------------ random kills

fn random_kills(rotate: bool) {
    let b = baseline(rotate);
    let mut rng = Rng::from_env_or_clock("CRASH_SEED");
    let mut moments: BTreeMap<Moment, usize> = BTreeMap::new();
    let started = Instant::now();
    let mut round = 0;
    loop {
        let inside = moments.contains_key(&Moment::Temps) || moments.contains_key(&Moment::Renames);
        let spent = started.elapsed();
        if round >= MIN_ROUNDS && spent > RANDOM_BUDGET && (inside || spent > 2 * RANDOM_BUDGET) {
            break;
        }
        let r = Round::crash_round(rotate);
        let start = Instant::now();
        let mut child = r
            .command(Path::new(BIN))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        // A quarter of the rounds: anywhere in a pass. A quarter: anywhere in its install,
        // timed from the backup directory's appearance. Half: soon after the pending record
        // appears (temps and renames; the first half of that window, as noticing the record
        // and killing take time of their own).
        let pending = r.state.join("pending.json");
        let (cue, delay) = match round % 4 {
            0 => (None, rng.duration_below(b.total)),
            1 => (Some(&r.backup), rng.duration_below(b.install)),
            _ => (Some(&pending), rng.duration_below(b.recorded / 2)),
        };
        let mut exited = false;
        if let Some(cue) = cue {
            while !cue.exists() {
                if child.try_wait().expect("try_wait").is_some() {
                    exited = true;
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let deadline = Instant::now() + delay;
        while !exited && Instant::now() < deadline {
            if child.try_wait().expect("try_wait").is_some() {
                exited = true;
            }
            std::thread::sleep(Duration::from_micros(200).min(delay));
        }
        // SIGKILL (an error only if it is already gone), then reap it.
        let _ = child.kill();
        let status = child.wait().expect("wait");
        let moment = if exited || status.code().is_some() {
            // It finished before the kill.
            Moment::Finished
        } else {
            check_after_crash(&r, b, rotate)
        };
        let killed_at = start.elapsed();
        let (code, stdout, stderr) = r.run();
        assert_eq!(
            code, b.code,
            "round {round} (killed at {killed_at:?}, {moment:?}): exit status of the normal run\n{stdout}\n{stderr}"
        );
        check_after_recovery(&r, b, rotate, &mut rng);
        *moments.entry(moment).or_default() += 1;
        round += 1;
    }
    eprintln!(
        "rotate_keys={rotate}: {round} kills in {:.1}s, by moment: {moments:?}; {} so far between a CA and its copies",
        started.elapsed().as_secs_f64(),
        AMONG_COPIES.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Every phase is hit deterministically by `abort_at_every_failpoint`; random kills
    // must at least have landed after the install began.
    assert!(
        moments.keys().any(|m| matches!(
            m,
            Moment::Backups | Moment::Temps | Moment::Renames | Moment::Installed
        )),
        "no kill landed inside an install in {round} rounds: {moments:?}"
    );
}

#[test]
fn sigkill_at_random_moments_reusing_keys() {
    random_kills(false);
}

#[test]
fn sigkill_at_random_moments_rotating_keys() {
    random_kills(true);
}

// ------------------------------------------------------------------ failpoints

fn failpoint_round(bin: &Path, name: &str, rotate: bool) {
    let b = baseline(rotate);
    let r = Round::crash_round(rotate);
    let out = r
        .command(bin)
        .env("CERTRENEWD_FAILPOINT", name)
        .output()
        .expect("running the failpoints build");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("failpoint {name}, rotate_keys={rotate}");
    let hit = stderr.contains(&format!("failpoint {name} hit"));
    if name == "between-key-and-cert" && !rotate {
        // No key is written, so the point is never reached: a normal, complete run.
        assert!(!hit, "{what}: hit without a key to write");
        assert_eq!(out.status.code(), Some(b.code), "{what}: {stderr}");
        check_after_recovery(&r, b, rotate, &mut Rng(7));
        return;
    }
    assert!(hit, "{what}: not hit ({:?}):\n{stderr}", out.status);
    assert_eq!(
        out.status.code(),
        None,
        "{what}: the process must have aborted"
    );
    let moment = check_after_crash(&r, b, rotate);
    let pending = pending::load(&r.state).expect("record");
    let tree_temps = temps_under(&r.tree);
    match name {
        "before-temp-write" => {
            // The first temp file of the pass is a backup's: nothing recorded or touched yet.
            assert!(pending.is_none(), "{what}: {pending:?}");
            assert!(tree_temps.is_empty(), "{what}: {tree_temps:?}");
            assert!(matches!(moment, Moment::Backups), "{what}: {moment:?}");
        }
        "after-pending-record" => {
            let p = pending.expect("the record must be there before any temp");
            assert_eq!(p.phase, Phase::Writing);
            assert_eq!(
                p.changes.len(),
                b.pairs.len(),
                "{what}: one change per pair"
            );
            assert!(tree_temps.is_empty(), "{what}: {tree_temps:?}");
            assert_eq!(moment, Moment::Temps, "{what}");
        }
        "after-temps" => {
            let p = pending.expect("record");
            // A temp per certificate, and per rotated key (a CA keeps its key).
            let keys = b.pairs.iter().filter(|p| rotate && !p.is_ca).count();
            assert_eq!(tree_temps.len(), p.changes.len() + keys, "{what}");
            assert_eq!(moment, Moment::Temps, "{what}: nothing renamed yet");
        }
        "between-key-and-cert" => {
            assert!(pending.is_some(), "{what}");
            assert_eq!(moment, Moment::Renames, "{what}");
        }
        "after-renames" => {
            let p = pending.expect("record");
            assert_eq!(p.phase, Phase::Writing, "{what}: not yet marked installed");
            assert!(tree_temps.is_empty(), "{what}: {tree_temps:?}");
            assert_eq!(moment, Moment::Installed, "{what}");
        }
        other => panic!("unknown failpoint {other}"),
    }
    let (code, stdout, stderr) = r.run();
    assert_eq!(code, b.code, "{what}: the normal run\n{stdout}\n{stderr}");
    if name == "between-key-and-cert" {
        assert!(
            stderr.contains("an interrupted renewal was completed"),
            "{what}: the roll-forward is not reported:\n{stderr}"
        );
    }
    if name == "after-temps" {
        assert!(
            stderr.contains("an interrupted renewal was rolled back"),
            "{what}: the roll-back is not reported:\n{stderr}"
        );
    }
    check_after_recovery(&r, b, rotate, &mut Rng(11));
}

#[test]
fn abort_at_every_failpoint() {
    let bin = failpoints::binary();
    let started = Instant::now();
    for rotate in [false, true] {
        for name in FAILPOINTS {
            failpoint_round(bin, name, rotate);
        }
    }
    eprintln!(
        "{} failpoint rounds in {:.1}s",
        FAILPOINTS.len() * 2,
        started.elapsed().as_secs_f64()
    );
}
