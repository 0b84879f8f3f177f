//! The install's error paths (nothing lost when a step fails): a `failpoints` build of
//! `certrenewd renew --no-restart` is made to *return an error* (not to die) at each step
//! of the install: the temp file's write and fsync, each rename (key first, then
//! certificate), the directories' fsync, and putting an old key back, with and without
//! `rotate_keys`. The tree: a CA and four due pairs made as they occur in life (issued 355
//! days ago for 365 days, by `faketime` and the openssl CLI): RSA PKCS#8, EC SEC1, Ed25519,
//! and a DER certificate, in two watched directories, plus a pair that is not due.
//!
//! After each injection, and again after the next normal run, on disk:
//! - every pair matches (openssl: the certificate's public key is the key file's) and
//!   verifies against its CA (`openssl verify`), and the pair that is not due is untouched;
//! - no temp file is left, and no stale pending record;
//! - the backup sets hold only the files that were replaced: a pair that was left as it
//!   was has no backup, and a pass that replaced nothing leaves no backup set;
//! - the report says what is on disk: a pair left old is `FAILED` with the injected error,
//!   a pair installed despite a failed directory fsync is `renewed`.
//!
//! The double fault (the certificate's rename and putting the old key back both fail)
//! leaves the new key beside the old certificate, the certificate waiting in its temp file
//! and named by the pending record; the next run completes it.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use common::failpoints;
use common::pki::{Round, Run, Scratch, openssl_out, path_str, run_cmd};
use common::sh;
use common::walk::files_under;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
/// The due pairs (certificate, key), relative to the tree.
const DUE: &[(&str, &str)] = &[
    ("a/rsa.crt", "a/rsa.key"),
    ("a/ec.crt", "a/ec.key"),
    ("b/ed.crt", "b/ed.key"),
    ("b/der.crt", "b/der.key"),
];
/// A pair that is not due: never touched.
const NOT_DUE: (&str, &str) = ("b/fresh.crt", "b/fresh.key");
const CA: &str = "ca/ca.crt";

// ------------------------------------------------------------------ the PKI

/// The master tree, generated once per test binary.
fn master() -> &'static Path {
    static M: OnceLock<tempfile::TempDir> = OnceLock::new();
    M.get_or_init(|| {
        let tmp = tempfile::Builder::new()
            .prefix("install-errors-master.")
            .tempdir()
            .expect("temp dir");
        let d = tmp.path();
        for sub in ["a", "b", "ca"] {
            fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        // The CA: 10 years, made 2 years ago.
        sh(
            d,
            "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca/ca.key 2>/dev/null
             faketime -f -730d openssl req -x509 -new -key ca/ca.key -subj /O=errors/CN=errors-ca \
               -days 3650 -addext basicConstraints=critical,CA:TRUE \
               -addext keyUsage=critical,keyCertSign,cRLSign -out ca/ca.crt
             openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out a/rsa.key 2>/dev/null
             openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null | openssl ec -out a/ec.key 2>/dev/null
             openssl genpkey -algorithm ED25519 -out b/ed.key
             openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out b/der.key 2>/dev/null
             openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out b/fresh.key 2>/dev/null
             printf 'basicConstraints=critical,CA:FALSE\\nkeyUsage=critical,digitalSignature\\nextendedKeyUsage=serverAuth,clientAuth\\nsubjectAltName=DNS:node-0,IP:127.0.0.1\\n' > ext.cnf
             leaf() { # NAME KEY DAYS-AGO FORM
               openssl req -new -key $2 -subj /O=errors/CN=$1 -out $1.csr
               faketime -f -${3}d openssl x509 -req -in $1.csr -CA ca/ca.crt -CAkey ca/ca.key \
                 -days 365 -extfile ext.cnf -outform $4 -out $5
               rm $1.csr
             }
             leaf rsa a/rsa.key 355 PEM a/rsa.crt
             leaf ec a/ec.key 355 PEM a/ec.crt
             leaf ed b/ed.key 355 PEM b/ed.crt
             leaf der b/der.key 355 DER b/der.crt
             leaf fresh b/fresh.key 10 PEM b/fresh.crt
             rm ext.cnf
             chmod 600 a/*.key b/*.key ca/ca.key",
        );
        assert!(
            fs::read_to_string(d.join("a/ec.key"))
                .expect("ec.key")
                .contains("BEGIN EC PRIVATE KEY"),
            "a/ec.key should be SEC1"
        );
        tmp
    })
    .path()
}

// ------------------------------------------------------------------ one round

impl Round {
    /// A private copy of the master with its config (the three directories watched, nothing
    /// to restart), state and backup dirs.
    /// Not `new`: `Round` is common's, and other modules of this binary add constructors.
    fn install_round(rotate: bool) -> Round {
        let r = Round::copy_of(master(), "install-errors.", &std::env::temp_dir());
        let table = "units = []\nstatic_pods = []\nkubeconfigs = []";
        r.write_config(
            &format!("rotate_keys = {rotate}\nlock_timeout_secs = 5"),
            &["a", "b", "ca"].map(|dir| (dir, table.to_string())),
        );
        r
    }

    /// `renew --no-restart` with `bin`, and `failpoints` in the environment when given.
    fn renew(&self, bin: &Path, failpoints: Option<&str>) -> Run {
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(&self.config)
            .args(["renew", "--no-restart"]);
        cmd.env_remove("CERTRENEWD_FAILPOINT");
        if let Some(f) = failpoints {
            cmd.env("CERTRENEWD_FAILPOINT", f);
        }
        run_cmd(&mut cmd, &["renew", "--no-restart"])
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        fs::read(self.tree.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

// ------------------------------------------------------------------ checks

/// `openssl verify` of `cert` (PEM or DER) against the CA, and the key's public half equal
/// to the certificate's, by openssl alone.
fn pair_verifies(r: &Round, scratch: &Scratch, cert: &str, key: &str) -> Result<(), String> {
    let cert_bytes = r.read(cert);
    let leaf = scratch.cert_pem_file(&cert_bytes);
    let out = openssl_out(&[
        "verify",
        "-CAfile",
        path_str(&r.tree.join(CA)),
        path_str(&leaf),
    ]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !said.contains(": OK") {
        return Err(format!(
            "{cert} does not verify against {CA}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if scratch.cert_pubkey(&cert_bytes) != scratch.key_pubkey(&r.read(key)) {
        return Err(format!("{cert} does not match {key}"));
    }
    Ok(())
}

/// What is on disk for the due pairs: the certificate is new, the key is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    Old,
    New,
    /// The new key beside the old certificate (only the double fault may leave this).
    NewKeyOldCert,
}

fn pairs_now(r: &Round) -> BTreeMap<&'static str, Pair> {
    DUE.iter()
        .map(|&(cert, key)| {
            let cert_new = r.read(cert) != fs::read(master().join(cert)).expect("master");
            let key_new = r.read(key) != fs::read(master().join(key)).expect("master");
            let state = match (cert_new, key_new) {
                (false, false) => Pair::Old,
                (true, _) => Pair::New,
                (false, true) => Pair::NewKeyOldCert,
            };
            (cert, state)
        })
        .collect()
}

/// The checks that hold after any run: every pair matches and verifies, the fresh pair and
/// the CA are untouched, no temp, no pending record, backups only of what was replaced.
fn check_settled(what: &str, r: &Round, rotate: bool) -> BTreeMap<&'static str, Pair> {
    let scratch = Scratch::new();
    let pairs = pairs_now(r);
    for &(cert, key) in DUE.iter().chain([&NOT_DUE]) {
        if let Err(e) = pair_verifies(r, &scratch, cert, key) {
            panic!("{what}: {e}");
        }
    }
    for f in [NOT_DUE.0, NOT_DUE.1, CA, "ca/ca.key"] {
        assert!(
            r.read(f) == fs::read(master().join(f)).expect("master"),
            "{what}: {f} changed"
        );
    }
    for &(cert, key) in DUE {
        let state = &pairs[cert];
        let key_new = r.read(key) != fs::read(master().join(key)).expect("master");
        assert!(
            *state != Pair::NewKeyOldCert,
            "{what}: {cert} is old beside a new key"
        );
        assert_eq!(
            key_new,
            rotate && *state == Pair::New,
            "{what}: {key} rewritten = {key_new}"
        );
    }
    r.assert_settled(what);
    check_backups(what, r, &pairs);
    pairs
}

/// The backup sets hold the old certificate and key of every replaced pair, and nothing
/// else; with nothing replaced there is no backup set at all.
fn check_backups(what: &str, r: &Round, pairs: &BTreeMap<&'static str, Pair>) {
    let mut expected: Vec<Vec<u8>> = Vec::new();
    for &(cert, key) in DUE {
        if pairs[cert] != Pair::Old {
            expected.push(fs::read(master().join(cert)).expect("master"));
            expected.push(fs::read(master().join(key)).expect("master"));
        }
    }
    let mut found: Vec<Vec<u8>> = files_under(&r.backup)
        .iter()
        .map(|p| fs::read(p).expect("backup"))
        .collect();
    expected.sort();
    found.sort();
    assert!(
        found == expected,
        "{what}: the backups are not exactly the replaced files: {:?}",
        files_under(&r.backup)
    );
    if expected.is_empty() {
        let sets: Vec<_> = fs::read_dir(&r.backup).into_iter().flatten().collect();
        assert!(sets.is_empty(), "{what}: an empty backup set is left");
    }
}

// ------------------------------------------------------------------ the injections

/// What an injection must leave.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Every due pair as it was; the pass failed.
    AllOld,
    /// Exactly one due pair as it was (the Nth hit failed), the others new; the pass failed.
    OneOld,
    /// Every due pair new (the error came after the pair was installed); the pass succeeded.
    AllNew,
}

fn inject(bin: &Path, spec: &str, rotate: bool, expect: Expect) {
    let what = format!("CERTRENEWD_FAILPOINT={spec}, rotate_keys={rotate}");
    let r = Round::install_round(rotate);
    let run = r.renew(bin, Some(spec));
    eprintln!("--- {what}: exit {}\n{}", run.code, run.stdout);
    let first = spec.split([',', ':']).next().expect("name");
    assert!(
        run.stderr.contains(&format!("failpoint {first} hit")),
        "{what}: not hit\n{run}"
    );
    let pairs = check_settled(&what, &r, rotate);
    let old = pairs.values().filter(|p| **p == Pair::Old).count();
    let (want_old, want_code) = match expect {
        Expect::AllOld => (DUE.len(), 1),
        Expect::OneOld => (1, 1),
        Expect::AllNew => (0, 0),
    };
    assert_eq!(old, want_old, "{what}: {pairs:?}\n{run}");
    assert_eq!(run.code, want_code, "{what}: exit status\n{run}");
    // The report says what is on disk, with the injected error.
    for (cert, state) in &pairs {
        let path = r.tree.join(cert).display().to_string();
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(&path) && (l.contains("renewed") || l.contains("FAILED")))
            .unwrap_or_else(|| panic!("{what}: no report line for {path}\n{run}"));
        match state {
            Pair::Old => assert!(
                line.contains("FAILED") && line.contains("injected error"),
                "{what}: {line}"
            ),
            _ => assert!(line.contains("renewed"), "{what}: {line}"),
        }
    }
    // The next normal run renews what is left, and everything holds again.
    let next = r.renew(Path::new(BIN), None);
    assert_eq!(next.code, 0, "{what}: the next run\n{next}");
    let pairs = check_settled(&format!("{what}, after the next run"), &r, rotate);
    assert!(
        pairs.values().all(|p| *p == Pair::New),
        "{what}, after the next run: {pairs:?}\n{next}"
    );
}

#[test]
fn an_error_at_each_install_step_reusing_keys() {
    let bin = failpoints::binary();
    for (spec, expect) in [
        ("write-cert-temp:error", Expect::AllOld),
        ("fsync-cert-temp:error", Expect::AllOld),
        ("rename-cert:error", Expect::AllOld),
        ("rename-cert:error@2", Expect::OneOld),
        ("fsync-cert-dir:error", Expect::AllNew),
    ] {
        inject(bin, spec, false, expect);
    }
}

#[test]
fn an_error_at_each_install_step_rotating_keys() {
    let bin = failpoints::binary();
    for (spec, expect) in [
        ("write-key-temp:error", Expect::AllOld),
        ("fsync-key-temp:error", Expect::AllOld),
        ("write-cert-temp:error", Expect::AllOld),
        ("fsync-cert-temp:error", Expect::AllOld),
        ("rename-key:error", Expect::AllOld),
        ("rename-key:error@2", Expect::OneOld),
        // The key is in place: the old one is put back from the backup.
        ("rename-cert:error", Expect::AllOld),
        ("rename-cert:error@3,rename-cert:error@4", Expect::OneOld),
        // Only the first try fails: the second completes the pair.
        ("rename-cert:error@1", Expect::AllNew),
        ("fsync-cert-dir:error,fsync-key-dir:error", Expect::AllNew),
    ] {
        inject(bin, spec, true, expect);
    }
}

/// The certificate's rename fails and so does putting the old key back: the new key stays
/// beside the old certificate, its certificate waiting in the temp file the pending record
/// names; the report says so, and the next run completes the pair.
#[test]
fn a_double_fault_is_completed_by_the_next_run() {
    let bin = failpoints::binary();
    let r = Round::install_round(true);
    let run = r.renew(bin, Some("rename-cert:error,restore-key:error"));
    assert_eq!(run.code, 1, "{run}");
    let pending = certrenewd::renew::pending::load(&r.state)
        .expect("readable record")
        .unwrap_or_else(|| panic!("no pending record is kept\n{run}"));
    assert_eq!(pending.changes.len(), DUE.len(), "{pending:?}");
    let pairs = pairs_now(&r);
    for &(cert, _) in DUE {
        assert_eq!(pairs[cert], Pair::NewKeyOldCert, "{cert}: {pairs:?}");
        let tmp = pending
            .changes
            .iter()
            .find(|c| c.cert == r.tree.join(cert))
            .map(|c| c.cert_temp())
            .unwrap_or_else(|| panic!("{cert} is not in the record"));
        assert!(
            tmp.exists(),
            "{}: the new certificate is gone",
            tmp.display()
        );
        assert!(
            pending.changes.iter().any(|c| c.cert == r.tree.join(cert)),
            "{cert} is not in the record"
        );
        let path = r.tree.join(cert).display().to_string();
        assert!(
            run.stdout.lines().any(|l| l.contains(&path)
                && l.contains("FAILED")
                && l.contains("beside the old certificate")),
            "{cert}: the report does not say what is on disk\n{run}"
        );
    }
    let next = r.renew(Path::new(BIN), None);
    assert_eq!(next.code, 0, "{next}");
    assert!(
        next.stderr.contains("an interrupted renewal was completed"),
        "{next}"
    );
    let pairs = check_settled("after the double fault and the next run", &r, true);
    assert!(pairs.values().all(|p| *p == Pair::New), "{pairs:?}");
}
