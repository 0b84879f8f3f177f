//! A hostile filesystem under a real `certrenewd renew --no-restart`: a full disk (ENOSPC on
//! a 64 KiB tmpfs), a read-only watched directory, a read-only backup dir, a read-only
//! state dir (each mounted in a private mount namespace made with `unshare -m`, so nothing
//! outside the test's temp dirs is touched), a file owned by another user, symlinks leading
//! out of the watched directories. Where the renewal cannot be done: nothing in the watched
//! tree changes, the reason names the file and the errno text, the exit status is 1 and
//! alarm 250.003 is active. And a private key is never world-readable: the temp file of a
//! rotated key is created 0600 (seen with strace when it is installed), a 0640 key stays
//! 0640 with its owner, and key backups are not world-readable.
//!
//! The mount tests need root (they skip, saying so, without it; under CI=true that fails).

use crate::common;

use common::skip;
use common::walk::{Snapshot, changed, files_under, snapshot_relative};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

// ------------------------------------------------------------------ a small PKI

/// A test's directories: `pki` (watched, the due pair `leaf.crt`/`leaf.key`), `ca` (watched,
/// the CA pair), state and backup dirs, a config, and room for anything else.
struct Setup {
    tmp: tempfile::TempDir,
    pki: PathBuf,
    ca: PathBuf,
    state: PathBuf,
    backup: PathBuf,
    config: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    common::openssl_in(dir, args);
}

/// A CA (10 years) and one leaf due in 10 days, P-256, PKCS#8 keys mode 0600.
fn new_pki(dir: &Path, ca_dir: &Path) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::create_dir_all(ca_dir).expect("mkdir");
    let ca_key = ca_dir.join("ca.key");
    let ca_crt = ca_dir.join("ca.crt");
    common::pki::ec_key(&ca_key);
    common::pki::self_signed_ca(&ca_key, "/O=hostile/CN=hostile-ca", &ca_crt);
    let s = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    let (ca_key, ca_crt) = (s(&ca_key), s(&ca_crt));
    common::pki::ec_key(&dir.join("leaf.key"));
    openssl(
        &[
            "req",
            "-new",
            "-key",
            "leaf.key",
            "-subj",
            "/O=hostile/CN=leaf",
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-days",
            "10",
            "-addext",
            "subjectAltName=DNS:leaf,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-out",
            "leaf.crt",
        ],
        dir,
    );
    for (f, mode) in [
        (dir.join("leaf.key"), 0o600),
        (dir.join("leaf.crt"), 0o644),
        (PathBuf::from(&ca_key), 0o600),
        (PathBuf::from(&ca_crt), 0o644),
    ] {
        fs::set_permissions(f, fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

impl Setup {
    fn new(extra_config: &str) -> Setup {
        let tmp = tempfile::Builder::new()
            .prefix("hostile-fs.")
            .tempdir()
            .expect("temp dir");
        let s = Setup {
            pki: tmp.path().join("pki"),
            ca: tmp.path().join("ca"),
            state: tmp.path().join("state"),
            backup: tmp.path().join("backup"),
            config: tmp.path().join("certrenewd.toml"),
            tmp,
        };
        new_pki(&s.pki, &s.ca);
        s.write_config(extra_config);
        s
    }

    fn write_config(&self, extra: &str) {
        let q = |p: &Path| serde_json::to_string(&p.to_string_lossy()).expect("json");
        let cfg = format!(
            "state_dir = {}\nbackup_dir = {}\nvalidity_days = 365\nlock_timeout_secs = 5\n{extra}\n\
             [[watch]]\npath = {}\nunits = [\"leaf.service\"]\n\n\
             [[watch]]\npath = {}\nunits = [\"ca.service\"]\n",
            q(&self.state),
            q(&self.backup),
            q(&self.pki),
            q(&self.ca),
        );
        fs::write(&self.config, common::single_node(&cfg)).expect("writing the config");
    }

    fn dir(&self, name: &str) -> PathBuf {
        let p = self.tmp.path().join(name);
        fs::create_dir_all(&p).expect("mkdir");
        p
    }

    /// `certrenewd --config .. ARGS`, environment cleaned, journald pointed nowhere.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env_remove("CERTRENEWD_CONFIG")
            .env_remove("CERTRENEWD_LOG")
            .env_remove("CERTRENEWD_FAILPOINT")
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env(
                "CERTRENEWD_JOURNAL_SOCKET",
                self.tmp.path().join("no-journal.socket"),
            )
            .stdin(Stdio::null());
        c
    }

    fn renew(&self) -> Run {
        Run::of(
            self.command(BIN, &["--config"])
                .arg(&self.config)
                .args(["renew", "--no-restart"])
                .output(),
        )
    }

    /// `renew --no-restart` inside a private mount namespace, after `setup` (sh) ran there;
    /// `$W`, `$BIN`, `$CFG`, `$OUT` are set for the script. What the binary printed and its
    /// status are returned; `after` (sh) runs in the namespace after it.
    fn renew_in_namespace(&self, env: &[(&str, &Path)], setup: &str, after: &str) -> Run {
        let out = self.dir("ns-out");
        let script = format!(
            "set -e\n{setup}\nset +e\n\"$BIN\" --config \"$CFG\" renew --no-restart >\"$OUT/stdout\" 2>\"$OUT/stderr\"\n\
             echo $? >\"$OUT/rc\"\nset -e\n{after}\n"
        );
        let mut c = self.command("unshare", &["-m", "--propagation", "private", "sh", "-c"]);
        c.arg(&script)
            .env("BIN", BIN)
            .env("CFG", &self.config)
            .env("OUT", &out);
        for (k, v) in env {
            c.env(k, v);
        }
        let status = c.output().expect("running unshare");
        assert!(
            status.status.success(),
            "the namespace script failed ({}):\n{script}\n{}",
            status.status,
            String::from_utf8_lossy(&status.stderr)
        );
        let read = |n: &str| fs::read_to_string(out.join(n)).unwrap_or_default();
        Run {
            code: read("rc").trim().parse().unwrap_or(-1),
            stdout: read("stdout"),
            stderr: read("stderr"),
        }
    }

    /// The active alarms' ids and reasons (`alarms --output json`).
    fn alarms(&self) -> Vec<(String, String)> {
        let r = Run::of(
            self.command(BIN, &["--config"])
                .arg(&self.config)
                .args(["alarms", "--output", "json"])
                .output(),
        );
        assert_eq!(r.code, 0, "alarms --output json: {r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("alarms JSON");
        v["alarms"]
            .as_array()
            .expect("alarms array")
            .iter()
            .map(|a| {
                (
                    a["id"].as_str().unwrap_or_default().to_string(),
                    a["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: std::io::Result<Output>) -> Run {
        let out = out.expect("running certrenewd");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

// ------------------------------------------------------------------ snapshots

fn assert_unchanged(what: &str, before: &Snapshot, after: &Snapshot) {
    let changed = changed(before, after);
    assert!(
        changed.is_empty(),
        "{what}: the watched tree changed: {changed:?}"
    );
}

/// Exit status 1, the reason names `file` and `errno`, and 250.003 is active naming `file`.
fn assert_failed(s: &Setup, r: &Run, file: &Path, errno: &str) {
    eprintln!("{}", r.all());
    assert_eq!(r.code, 1, "exit status: {r:?}");
    let all = r.all();
    let file = file.to_string_lossy();
    assert!(
        all.lines().any(|l| l.contains(&*file) && l.contains(errno)),
        "no line names {file} and {errno:?}:\n{all}"
    );
    let alarms = s.alarms();
    assert!(
        alarms
            .iter()
            .any(|(id, reason)| id == "250.003" && reason.contains(&*file)),
        "alarm 250.003 naming {file} is not active: {alarms:?}"
    );
}

fn running_as_root() -> bool {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    f.as_file().metadata().expect("metadata").uid() == 0
}

/// Mount namespaces need root; say so and skip without it.
fn can_mount() -> bool {
    if !running_as_root() {
        skip::skip("mount namespaces need root");
        return false;
    }
    true
}

// ------------------------------------------------------------------ ENOSPC

/// The due pair on a 64 KiB tmpfs (mounted over `$W` in the namespace) filled up: the temp
/// cannot be written. With `rotate_keys` and exactly one page left, the key's temp fits and
/// the certificate's does not: the pair is dropped whole.
fn enospc(rotate: bool, pages_left: u32) {
    if !can_mount() {
        return;
    }
    let s = Setup::new(if rotate { "rotate_keys = true" } else { "" });
    // The pair moves to the tmpfs; its directory on disk becomes the (empty) mount point.
    let src = s.dir("src");
    for f in ["leaf.crt", "leaf.key"] {
        fs::rename(s.pki.join(f), src.join(f)).expect("mv");
    }
    let snaps = s.dir("snaps");
    let setup = format!(
        "mount -t tmpfs -o size=64k,mode=0755 certrenewd-test \"$W\"\n\
         cp -a \"$SRC\"/. \"$W\"/\n\
         i=0; while [ $i -lt {pages_left} ]; do dd if=/dev/zero of=\"$W/hole.$i\" bs=4096 count=1 2>/dev/null; i=$((i+1)); done\n\
         dd if=/dev/zero of=\"$W/filler\" bs=4096 2>/dev/null || true\n\
         rm -f \"$W\"/hole.*\n\
         cp -a \"$W\" \"$SNAPS/before\""
    );
    let r = s.renew_in_namespace(
        &[("W", &s.pki), ("SRC", &src), ("SNAPS", &snaps)],
        &setup,
        "cp -a \"$W\" \"$SNAPS/after\"",
    );
    let before = snapshot_relative(&snaps.join("before"));
    assert!(before.contains_key(Path::new("filler")), "{before:?}");
    assert_unchanged("ENOSPC", &before, &snapshot_relative(&snaps.join("after")));
    assert_failed(&s, &r, &s.pki.join("leaf.crt"), "No space left on device");
    // The failing temp, `.<name>.<the process's mark>.certrenewd-tmp`.
    let temp_of = if rotate && pages_left > 0 {
        ".leaf.crt."
    } else if rotate {
        ".leaf.key."
    } else {
        ".leaf.crt."
    };
    let all = r.all();
    assert!(
        all.split(['/', ' ', ':'])
            .any(|w| w.starts_with(temp_of) && w.ends_with(".certrenewd-tmp")),
        "the failing temp should be {temp_of}*.certrenewd-tmp: {r:?}"
    );
    assert!(!s.state.join("pending.json").exists(), "pending.json left");
    assert_no_backup_set(&s);
}

#[test]
fn enospc_on_the_watched_dir_changes_nothing() {
    enospc(false, 0);
}

#[test]
fn enospc_after_the_new_key_drops_the_pair_whole() {
    enospc(true, 1);
}

// ------------------------------------------------------------------ read-only mounts

/// The state directory on the same filesystem as the watched one, and that filesystem
/// full: the renewal fails (ENOSPC), and its alarm is still stored, in the room kept for
/// the alarms by the pass before.
#[test]
fn a_full_disk_under_the_state_directory_still_stores_the_alarm() {
    if !can_mount() {
        return;
    }
    let s = Setup::new("");
    let vol = s.dir("vol");
    let src = s.dir("src");
    for f in ["leaf.crt", "leaf.key"] {
        fs::copy(s.pki.join(f), src.join(f)).expect("cp");
    }
    let q = |p: &Path| serde_json::to_string(&p.to_string_lossy()).expect("json");
    let cfg = format!(
        "state_dir = {}\nbackup_dir = {}\nvalidity_days = 365\n\n[[watch]]\npath = {}\nunits = [\"leaf.service\"]\n\n[[watch]]\npath = {}\nunits = [\"ca.service\"]\n",
        q(&vol.join("state")),
        q(&s.backup),
        q(&vol.join("pki")),
        q(&s.ca),
    );
    fs::write(&s.config, common::single_node(&cfg)).expect("config");
    let out = s.dir("out");
    // A first pass renews the due leaf and stores its (empty) alarms; the old, due
    // certificate is put back (same key), and the disk is filled to the last block.
    let setup = "mount -t tmpfs -o size=256k,mode=0755 certrenewd-test \"$V\"\n\
         mkdir \"$V/pki\" && cp -a \"$SRC\"/. \"$V/pki\"/\n\
         \"$BIN\" --config \"$CFG\" renew --no-restart >\"$O/first\" 2>&1\n\
         cp \"$SRC/leaf.crt\" \"$V/pki/leaf.crt\"\n\
         dd if=/dev/zero of=\"$V/filler\" bs=4096 2>/dev/null || true\n\
         df -k \"$V\" | tail -1 >\"$O/df\"";
    let after =
        "\"$BIN\" --config \"$CFG\" alarms --output json >\"$O/alarms.json\" 2>\"$O/alarms.err\"";
    let r = s.renew_in_namespace(&[("V", &vol), ("SRC", &src), ("O", &out)], setup, after);
    let read = |n: &str| fs::read_to_string(out.join(n)).unwrap_or_default();
    println!("first pass:\n{}df: {}", read("first"), read("df"));
    assert!(read("first").contains("renewed"), "{}", read("first"));
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.all().contains("No space left on device"), "{}", r.all());
    let alarms: serde_json::Value =
        serde_json::from_str(&read("alarms.json")).unwrap_or_else(|e| {
            panic!(
                "alarms JSON: {e}: {}{}",
                read("alarms.json"),
                read("alarms.err")
            )
        });
    let failed: Vec<&serde_json::Value> = alarms["alarms"]
        .as_array()
        .expect("alarms")
        .iter()
        .filter(|a| a["id"] == "250.003")
        .collect();
    println!("stored: {failed:?}");
    assert_eq!(
        failed.len(),
        1,
        "no 250.003 stored on the full disk:\n{}",
        r.all()
    );
    assert!(
        r.stderr
            .contains("the alarms were saved in the room kept for them"),
        "{}",
        r.all()
    );
}

fn read_only(what: &str, dir_of: impl Fn(&Setup) -> PathBuf) -> (Setup, Run) {
    let s = Setup::new("");
    let dir = dir_of(&s);
    fs::create_dir_all(&dir).expect("mkdir");
    let before = snapshot_relative(&s.pki);
    let r = s.renew_in_namespace(
        &[("RO", &dir)],
        "mount --bind \"$RO\" \"$RO\"\nmount -o remount,bind,ro \"$RO\"",
        "",
    );
    assert_unchanged(what, &before, &snapshot_relative(&s.pki));
    (s, r)
}

#[test]
fn a_read_only_watched_dir_changes_nothing() {
    if !can_mount() {
        return;
    }
    let (s, r) = read_only("read-only watch", |s| s.pki.clone());
    assert_failed(&s, &r, &s.pki.join("leaf.crt"), "Read-only file system");
    // And how to let the service write there (its unit's sandbox is the usual cause).
    let hint = format!("ReadWritePaths=-{} under [Service]", s.pki.display());
    assert_failed(&s, &r, &s.pki.join("leaf.crt"), &hint);
    assert_no_backup_set(&s);
}

/// A pass that replaced nothing leaves no backup (failed passes must not use up
/// `backup_keep`): no file, no empty set.
fn assert_no_backup_set(s: &Setup) {
    let sets: Vec<PathBuf> = fs::read_dir(&s.backup)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        sets.is_empty(),
        "a backup set was left: {sets:?} holding {:?}",
        files_under(&s.backup)
    );
}

#[test]
fn a_read_only_backup_dir_changes_nothing() {
    if !can_mount() {
        return;
    }
    let (s, r) = read_only("read-only backup dir", |s| s.backup.clone());
    assert_failed(&s, &r, &s.pki.join("leaf.crt"), "Read-only file system");
    assert!(
        r.all().contains(&*s.backup.to_string_lossy()),
        "the backup dir is not named: {r:?}"
    );
    assert!(!s.state.join("pending.json").exists(), "pending.json left");
}

#[test]
fn a_read_only_state_dir_is_a_clear_error() {
    if !can_mount() {
        return;
    }
    let (s, r) = read_only("read-only state dir", |s| s.state.clone());
    assert_eq!(r.code, 1, "{r:?}");
    let state = s.state.to_string_lossy();
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains(&*state) && l.contains("Read-only file system")),
        "the error does not name {state} and the errno text: {r:?}"
    );
    // Nothing could be recorded, and nothing was.
    assert!(s.alarms().is_empty(), "{:?}", s.alarms());
}

// ------------------------------------------------------------------ owners, modes, symlinks

/// The `openat` of each temp file and every mode it was given, from an strace log.
fn temp_modes(trace: &str) -> BTreeMap<String, Vec<(String, String)>> {
    // pid -> fd -> temp path
    let mut open: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for line in trace.lines() {
        let (pid, call) = line.split_once(' ').unwrap_or(("", line));
        let call = call.trim_start();
        if call.starts_with("openat(") && call.contains(".certrenewd-tmp\"") {
            let path = call.split('"').nth(1).unwrap_or_default().to_string();
            let args = call.rsplit_once(')').map_or("", |(a, _)| a);
            let flags_mode = args.split(", ").skip(2).collect::<Vec<_>>().join(", ");
            let fd = call
                .rsplit_once("= ")
                .map_or("", |(_, f)| f)
                .trim()
                .to_string();
            out.entry(path.clone())
                .or_default()
                .push(("openat".into(), flags_mode));
            open.entry(pid.to_string()).or_default().insert(fd, path);
        } else if let Some(rest) = call.strip_prefix("fchmod(") {
            let (fd, mode) = rest.split_once(", ").unwrap_or(("", ""));
            let mode = mode.split(')').next().unwrap_or_default().to_string();
            if let Some(path) = open.get(pid).and_then(|m| m.get(fd)) {
                out.entry(path.clone())
                    .or_default()
                    .push(("fchmod".into(), mode));
            }
        }
    }
    out
}

/// A key every user can read (0644): its mode is the operator's (a renewal that reuses the key
/// keeps it), but `check` (its notes and JSON) and the pass's log say so, naming the file.
#[test]
fn a_key_every_user_can_read_is_said_by_check_and_the_pass() {
    let s = Setup::new("");
    let key = s.pki.join("leaf.key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
    let check = |args: &[&str]| {
        Run::of(
            s.command(BIN, &["--config"])
                .arg(&s.config)
                .args(args)
                .output(),
        )
    };
    let table = check(&["check"]);
    let said = format!(
        "Every user of this node can read these private keys: {} (0644).",
        key.display()
    );
    println!(
        "{}",
        table
            .stdout
            .lines()
            .find(|l| l.contains("Every user"))
            .unwrap_or("")
    );
    assert!(
        table.stdout.replace('\n', " ").contains(&said),
        "{}",
        table.all()
    );
    let json = check(&["check", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("check's JSON");
    assert_eq!(
        doc["keys_readable_by_others"],
        serde_json::json!([{ "path": key.display().to_string(), "mode": "0644" }]),
    );
    let r = s.renew();
    assert_eq!(r.code, 0, "{}", r.all());
    let warned = r
        .stderr
        .lines()
        .find(|l| l.contains("a private key every user of this node can read"))
        .unwrap_or_else(|| panic!("no warning:\n{}", r.all()));
    println!("{warned}");
    assert!(warned.contains(&key.display().to_string()), "{warned}");
    assert_eq!(fs::metadata(&key).expect("stat").mode() & 0o7777, 0o644);

    // With rotate_keys the old key is backed up: for its owner alone, not 0644.
    let s = Setup::new("rotate_keys = true");
    let key = s.pki.join("leaf.key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
    let r = s.renew();
    assert_eq!(r.code, 0, "{}", r.all());
    let backups: Vec<PathBuf> = files_under(&s.backup)
        .into_iter()
        .filter(|p| p.ends_with("leaf.key"))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}\n{}", r.all());
    let mode = fs::metadata(&backups[0]).expect("stat").mode() & 0o7777;
    println!("the 0644 key's backup: {mode:04o}");
    assert_eq!(mode, 0o600, "{}", backups[0].display());
}

#[test]
fn another_owner_and_a_group_readable_key_are_kept_and_keys_are_never_world_readable() {
    let s = Setup::new("rotate_keys = true");
    let (crt, key) = (s.pki.join("leaf.crt"), s.pki.join("leaf.key"));
    let root = running_as_root();
    if root {
        for f in [&crt, &key] {
            std::os::unix::fs::chown(f, Some(65534), Some(65534)).expect("chown");
        }
    }
    fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).expect("chmod");
    let meta = |p: &Path| {
        let m = fs::metadata(p).expect("stat");
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };
    let (crt_meta, key_meta) = (meta(&crt), meta(&key));
    let (old_crt, old_key) = (fs::read(&crt).expect("read"), fs::read(&key).expect("read"));
    let strace = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    let trace = s.tmp.path().join("strace.log");
    let r = if strace {
        Run::of(
            s.command(
                "strace",
                &[
                    "-f",
                    "-qq",
                    "-e",
                    "trace=openat,fchmod,fchmodat,chmod",
                    "-o",
                ],
            )
            .arg(&trace)
            .arg(BIN)
            .arg("--config")
            .arg(&s.config)
            .args(["renew", "--no-restart"])
            .output(),
        )
    } else {
        skip::skip("strace not installed: the temp file's creation mode is not observed");
        s.renew()
    };
    assert_eq!(r.code, 0, "{r:?}");
    assert_ne!(fs::read(&crt).expect("read"), old_crt, "not renewed");
    assert_ne!(fs::read(&key).expect("read"), old_key, "key not rotated");
    assert_eq!(meta(&crt), crt_meta, "certificate owner/group/mode");
    assert_eq!(
        meta(&key),
        key_meta,
        "key owner/group/mode (0640 must stay 0640)"
    );
    if strace {
        let modes = temp_modes(&fs::read_to_string(&trace).expect("strace log"));
        // `.leaf.key.<the process's mark>.certrenewd-tmp`, beside the key.
        let key_tmp = s.pki.join(".leaf.key.").to_string_lossy().into_owned();
        let seen = modes
            .iter()
            .find(|(p, _)| p.starts_with(&key_tmp))
            .map(|(_, calls)| calls)
            .unwrap_or_else(|| panic!("no temp for the key in the trace: {modes:?}"));
        // Every temp of a key (in place, and its backup) is created exclusively, never
        // through a symlink, 0600; later modes are never world-readable.
        for (path, calls) in modes.iter().filter(|(p, _)| p.contains(".leaf.key.")) {
            let (first, rest) = calls.split_first().expect("calls");
            assert_eq!(first.0, "openat", "{path}: {calls:?}");
            for flag in ["O_CREAT", "O_EXCL", "O_NOFOLLOW"] {
                assert!(first.1.contains(flag), "{path}: {flag} missing: {calls:?}");
            }
            assert!(first.1.ends_with(", 0600"), "{path}: created {}", first.1);
            for (_, mode) in rest {
                let m = u32::from_str_radix(mode.trim_start_matches('0'), 8).unwrap_or(0o777);
                assert_eq!(m & 0o007, 0, "{path}: chmod {mode}");
            }
        }
        assert!(seen.len() >= 2, "{seen:?}");
    }
    // The old key's backup: not world-readable, in directories only root can enter.
    let backups: Vec<PathBuf> = files_under(&s.backup)
        .into_iter()
        .filter(|p| p.ends_with("leaf.key"))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(fs::read(&backups[0]).expect("read"), old_key);
    let mode = fs::metadata(&backups[0]).expect("stat").mode() & 0o7777;
    assert_eq!(mode & 0o007, 0, "key backup mode {mode:o}");
    let mut d = backups[0].parent();
    while let Some(dir) = d.filter(|d| d.starts_with(&s.backup)) {
        let mode = fs::metadata(dir).expect("stat").mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", dir.display());
        d = dir.parent();
    }
}

/// The pair's `file` is replaced by a symlink to a copy outside every watched directory.
fn symlinked_outside(file: &str, rotate: bool) {
    let s = Setup::new(if rotate { "rotate_keys = true" } else { "" });
    let outside = s.dir("outside");
    let target = outside.join(file);
    fs::rename(s.pki.join(file), &target).expect("mv");
    std::os::unix::fs::symlink(&target, s.pki.join(file)).expect("symlink");
    let (before, before_outside) = (snapshot_relative(&s.pki), snapshot_relative(&outside));
    let r = s.renew();
    assert_unchanged("symlink", &before, &snapshot_relative(&s.pki));
    assert_unchanged("outside", &before_outside, &snapshot_relative(&outside));
    assert_failed(&s, &r, &s.pki.join(file), "outside the watched directories");
    assert!(
        r.all().contains(&*target.to_string_lossy()),
        "the target is not named: {r:?}"
    );
}

#[test]
fn a_certificate_symlinked_out_of_the_watches_is_never_written() {
    symlinked_outside("leaf.crt", false);
}

#[test]
fn a_key_symlinked_out_of_the_watches_is_never_rotated() {
    symlinked_outside("leaf.key", true);
}

/// A node watching many certificates (41 leaves of a CA whose key is kept off the node,
/// each due in 20 days) on a state directory that then fills up to the last block; time
/// passes (libfaketime: 30 and 31 days) and every leaf expires. The room kept for the
/// alarms was sized by the first pass for all of them, so both later passes store their 42
/// alarms (41 × 500.210 and the 250.003 of leaves that cannot be renewed here) and print
/// their report, though the disk stays full.
#[test]
fn a_full_state_directory_stores_the_alarms_of_every_certificate_watched() {
    if !can_mount() {
        return;
    }
    const LEAVES: usize = 41;
    let s = Setup::new("");
    let many = s.dir("many");
    let ca_key = s.ca.join("ca.key");
    let ca_crt = s.ca.join("ca.crt");
    common::pki::ec_key(&many.join("leaf-00.key"));
    for i in 0..LEAVES {
        let key = many.join(format!("leaf-{i:02}.key"));
        if i > 0 {
            fs::copy(many.join("leaf-00.key"), &key).expect("cp");
        }
        let crt = many.join(format!("leaf-{i:02}.crt"));
        openssl(
            &[
                "req",
                "-new",
                "-key",
                &key.to_string_lossy(),
                "-subj",
                &format!("/O=hostile/CN=leaf-{i:02}"),
                "-CA",
                &ca_crt.to_string_lossy(),
                "-CAkey",
                &ca_key.to_string_lossy(),
                "-days",
                "20",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-out",
                &crt.to_string_lossy(),
            ],
            &many,
        );
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    // The CA's key is kept off the node: nothing here can be renewed.
    fs::remove_file(&ca_key).expect("rm ca.key");
    let vol = s.dir("vol");
    let q = |p: &Path| serde_json::to_string(&p.to_string_lossy()).expect("json");
    let cfg = format!(
        "state_dir = {}\nbackup_dir = {}\n\n[[watch]]\npath = {}\nunits = []\n\n[[watch]]\npath = {}\nunits = []\n",
        q(&vol.join("state")),
        q(&s.backup),
        q(&many),
        q(&s.ca),
    );
    fs::write(&s.config, common::single_node(&cfg)).expect("config");
    let out = s.dir("out");
    let script = "set -e\n\
         mount -t tmpfs -o size=1m,mode=0755 certrenewd-test \"$V\"\n\
         \"$BIN\" --config \"$CFG\" renew --no-restart >\"$O/first\" 2>&1\n\
         ls -l \"$V/state\" >\"$O/room\"\n\
         dd if=/dev/zero of=\"$V/filler\" bs=1024 2>/dev/null || true\n\
         df -k \"$V\" | tail -1 >\"$O/df\"\n\
         set +e\n\
         for days in 30 31; do\n\
           FAKETIME=+${days}d LD_PRELOAD=\"$LIBFT\" \"$BIN\" --config \"$CFG\" renew --no-restart \
             >\"$O/$days.out\" 2>\"$O/$days.err\"; echo $? >\"$O/$days.rc\"\n\
           FAKETIME=+${days}d LD_PRELOAD=\"$LIBFT\" \"$BIN\" --config \"$CFG\" alarms --output json \
             >\"$O/$days.alarms\" 2>&1\n\
         done\n\
         df -k \"$V\" | tail -1 >>\"$O/df\"\n\
         mount -t tmpfs -o size=64k,mode=0755 certrenewd-test \"$W\"\n\
         mkdir \"$W/state\" && dd if=/dev/zero of=\"$W/filler\" bs=1024 2>/dev/null\n\
         FAKETIME=+30d LD_PRELOAD=\"$LIBFT\" \"$BIN\" --config \"$CFG2\" renew --no-restart \
           >\"$O/noroom.out\" 2>\"$O/noroom.err\"; echo $? >\"$O/noroom.rc\"\n";
    // The same node on a state directory full before any room could be kept.
    let (noroom, cfg2) = (s.dir("noroom"), s.dir("cfg2").join("c.toml"));
    let state2 = format!("state_dir = {}", q(&noroom.join("state")));
    let text2 = cfg.replacen(
        &format!("state_dir = {}", q(&vol.join("state"))),
        &state2,
        1,
    );
    fs::write(&cfg2, common::single_node(&text2)).expect("config");
    let mut c = s.command("unshare", &["-m", "--propagation", "private", "sh", "-c"]);
    c.arg(script)
        .env("BIN", BIN)
        .env("CFG", &s.config)
        .env("CFG2", &cfg2)
        .env("W", &noroom)
        .env("V", &vol)
        .env("O", &out)
        .env("LIBFT", common::libfaketime());
    let ran = c.output().expect("running unshare");
    let read = |n: &str| fs::read_to_string(out.join(n)).unwrap_or_default();
    assert!(
        ran.status.success(),
        "the namespace script failed ({}): {}\nfirst pass:\n{}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr),
        read("first")
    );
    println!(
        "first pass:\n{}state dir:\n{}df:\n{}",
        read("first"),
        read("room"),
        read("df")
    );
    for days in ["30", "31"] {
        let (stdout, stderr) = (read(&format!("{days}.out")), read(&format!("{days}.err")));
        println!(
            "+{days} days: exit {}\n{stdout}{stderr}",
            read(&format!("{days}.rc"))
        );
        assert_eq!(
            read(&format!("{days}.rc")).trim(),
            "1",
            "+{days}d:\n{stdout}{stderr}"
        );
        assert!(
            stdout.contains(&format!("certificates: {LEAVES} failed")),
            "+{days}d: no report:\n{stdout}{stderr}"
        );
        assert!(
            !stderr.contains("saving them failed"),
            "+{days}d:\n{stderr}"
        );
        let alarms: serde_json::Value = serde_json::from_str(&read(&format!("{days}.alarms")))
            .unwrap_or_else(|e| {
                panic!("+{days}d alarms: {e}: {}", read(&format!("{days}.alarms")))
            });
        let ids: Vec<&str> = (alarms["alarms"].as_array().expect("alarms").iter())
            .filter_map(|a| a["id"].as_str())
            .collect();
        let expired = ids.iter().filter(|id| **id == "500.210").count();
        assert_eq!(expired, LEAVES, "+{days}d: {ids:?}\n{stdout}{stderr}");
        assert!(ids.contains(&"250.003"), "+{days}d: {ids:?}");
    }
    // No room at all: every alarm is emitted all the same, the report printed, the failed
    // save said, and the pass fails.
    let (stdout, stderr) = (read("noroom.out"), read("noroom.err"));
    println!("no room:\n{stdout}{stderr}");
    assert_eq!(read("noroom.rc").trim(), "1", "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("certificates: {LEAVES} failed")),
        "{stdout}{stderr}"
    );
    let emitted = stderr.matches("alarm 500.210 set critical").count();
    assert_eq!(emitted, LEAVES, "{stderr}");
    assert!(
        stderr.contains("were emitted, but saving them failed")
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
}
