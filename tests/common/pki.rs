//! PKI fixture trees for integration tests (owned by the check/renew fixture tests).
//!
//! `tests/fixtures/mkpki.sh` builds each layout once per test binary into a master directory
//! (all wanted layouts side by side, on first use); every test then works on its own copy
//! (`cp -a`) in a temp dir, with a config file pointing at it and a private state dir.
//! Helpers to run the binary and ask openssl about certificates and keys.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::walk::{self, Snapshot};

/// The fixture generator.
pub const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");
/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");

/// Every layout but `bench`.
pub const ALL_LAYOUTS: &[&str] = &[
    "kubeadm",
    "starlingx",
    "hardway",
    "openshift",
    "keytypes",
    "names",
    "bad",
];

// ------------------------------------------------------------------ masters

/// The directory holding one freshly generated copy of each of `layouts`, each generated on
/// the first call that asks for it (in parallel with the others that call asks for). The
/// tests of one binary ask for different layouts; a caller waits while another generates.
pub fn masters(layouts: &[&str]) -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    static MADE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let base = BASE.get_or_init(fresh_base);
    // Held while generating: a layout is never generated twice or read half made.
    let mut made = MADE.lock().unwrap_or_else(PoisonError::into_inner);
    let missing: Vec<&str> = layouts
        .iter()
        .copied()
        .filter(|l| !made.contains(*l))
        .collect();
    if !missing.is_empty() {
        generate(base, &missing);
        made.extend(missing.iter().map(|l| l.to_string()));
    }
    base
}

/// This process's directory for the masters, under cargo's per-package temp dir; those of
/// processes that are gone (an earlier run) are removed first.
fn fresh_base() -> PathBuf {
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR")).join("certrenewd-pki");
    fs::create_dir_all(&parent).expect("creating the fixture directory");
    if let Ok(entries) = fs::read_dir(&parent) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.parse::<u32>().is_ok() && !Path::new("/proc").join(&name).exists() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let base = parent.join(std::process::id().to_string());
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).expect("creating the fixture directory");
    base
}

fn generate(base: &Path, layouts: &[&str]) {
    let started = std::time::Instant::now();
    let children: Vec<_> = layouts
        .iter()
        .map(|l| {
            let child = Command::new("bash")
                .arg(MKPKI)
                .arg(l)
                .arg(base.join(l))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {MKPKI}: {e}"));
            (l, child)
        })
        .collect();
    for (l, child) in children {
        let out = child.wait_with_output().expect("waiting for mkpki.sh");
        assert!(
            out.status.success(),
            "mkpki.sh {l} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "fixtures {} generated in {:.1}s under {}",
        layouts.join(","),
        started.elapsed().as_secs_f64(),
        base.display()
    );
}

// ------------------------------------------------------------------ manifest

/// The optional 5th column of `expected.tsv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Always.
    Always,
    /// Only when the test runs as root.
    Root,
    /// Only when it does not.
    NonRoot,
    /// The implementation may leave it out; if reported it must match.
    Optional,
}

/// One line of `expected.tsv`.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path relative to the layout directory.
    pub path: String,
    /// ok, due, expired, unrenewable; skipped (not a certificate) or error (named like one
    /// and unreadable, empty, truncated or corrupt).
    pub status: String,
    /// Substring of the reason, or `None` for "-".
    pub reason: Option<String>,
    /// The signing CA's path, or `None` for "-".
    pub ca: Option<String>,
    /// When the line applies.
    pub scope: Scope,
}

impl Entry {
    /// Whether the line applies to a run as root (`as_root`) or not.
    pub fn applies(&self, as_root: bool) -> bool {
        match self.scope {
            Scope::Always | Scope::Optional => true,
            Scope::Root => as_root,
            Scope::NonRoot => !as_root,
        }
    }

    /// A certificate line (not `skipped` or `error`).
    pub fn is_cert(&self) -> bool {
        self.status != "skipped" && self.status != "error"
    }
}

fn dash(s: &str) -> Option<String> {
    (s != "-").then(|| s.to_string())
}

/// Reads `expected.tsv`.
pub fn read_manifest(layout_dir: &Path) -> Vec<Entry> {
    let text = fs::read_to_string(layout_dir.join("expected.tsv")).expect("reading expected.tsv");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f.len() == 4 || f.len() == 5, "bad manifest line {l:?}");
            let scope = match f.get(4).copied().unwrap_or("") {
                "" => Scope::Always,
                "root" => Scope::Root,
                "nonroot" => Scope::NonRoot,
                "optional" => Scope::Optional,
                other => panic!("unknown scope {other:?} in {l:?}"),
            };
            Entry {
                path: f[0].to_string(),
                status: f[1].to_string(),
                reason: dash(f[2]),
                ca: dash(f[3]),
                scope,
            }
        })
        .collect()
}

/// Reads `watch.tsv`: (relative dir, unit).
pub fn read_watches(layout_dir: &Path) -> Vec<(String, String)> {
    let text = fs::read_to_string(layout_dir.join("watch.tsv")).expect("reading watch.tsv");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (p, u) = l.split_once('\t').expect("watch.tsv: path TAB unit");
            (p.to_string(), u.to_string())
        })
        .collect()
}

// ------------------------------------------------------------------ trees

/// Whether this process runs as root (judged by the owner of a file it creates).
pub fn running_as_root() -> bool {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    f.as_file().metadata().expect("metadata").uid() == 0
}

/// A private copy of one layout with its config file and state dir.
pub struct Tree {
    /// Holds everything; removed on drop.
    pub tmp: tempfile::TempDir,
    /// The layout name.
    pub layout: String,
    /// The copy of the layout directory (`etc/...`, `expected.tsv`, ...).
    pub root: PathBuf,
    /// The config file.
    pub config: PathBuf,
    /// The state dir named in the config.
    pub state: PathBuf,
    /// `expected.tsv`.
    pub manifest: Vec<Entry>,
    /// `watch.tsv`, made absolute: (dir, unit).
    pub watches: Vec<(PathBuf, String)>,
}

impl Tree {
    /// Copies the master of `layout` (generated with `layouts` on first use) and writes a
    /// config with `validity_days = 365` and one watch per line of `watch.tsv`.
    pub fn new(layouts: &[&str], layout: &str) -> Tree {
        Self::with_config(layouts, layout, "")
    }

    /// Like `new`, with extra top-level TOML lines in the config.
    pub fn with_config(layouts: &[&str], layout: &str, extra: &str) -> Tree {
        let Round {
            tmp,
            tree: root,
            config,
            state,
            ..
        } = Round::copy_of(
            &masters(layouts).join(layout),
            &format!("certrenewd-{layout}."),
            &std::env::temp_dir(),
        );
        let manifest = read_manifest(&root);
        let watches = read_watches(&root)
            .into_iter()
            .map(|(p, u)| (root.join(p), u))
            .collect();
        let tree = Tree {
            config,
            state,
            tmp,
            layout: layout.to_string(),
            root,
            manifest,
            watches,
        };
        tree.write_config(extra, &[]);
        tree
    }

    /// Rewrites the config: `extra` top-level lines, the layout's watches, then `more_watches`.
    pub fn write_config(&self, extra: &str, more_watches: &[(PathBuf, &str)]) {
        let mut s = format!(
            "state_dir = {}\nvalidity_days = 365\n{extra}\n",
            toml_str(&self.state)
        );
        let all = self
            .watches
            .iter()
            .map(|(p, u)| (p.clone(), u.as_str()))
            .chain(more_watches.iter().map(|(p, u)| (p.clone(), *u)));
        for (p, u) in all {
            s.push_str(&format!(
                "\n[[watch]]\npath = {}\nunits = [{}]\n",
                toml_str(&p),
                toml_str(Path::new(u))
            ));
        }
        fs::write(&self.config, super::single_node(&s)).expect("writing the config");
    }

    /// Absolute path of a manifest-relative path.
    pub fn abs(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The manifest line of `rel` that applies to this run.
    pub fn entry(&self, rel: &str) -> &Entry {
        let root = running_as_root();
        self.manifest
            .iter()
            .find(|e| e.path == rel && e.applies(root))
            .unwrap_or_else(|| panic!("{rel} not in the {} manifest", self.layout))
    }

    /// The unit of the most specific watch holding `path`.
    pub fn units_of(&self, path: &Path) -> Vec<String> {
        self.watches
            .iter()
            .filter(|(w, _)| path.starts_with(w))
            .max_by_key(|(w, _)| w.components().count())
            .map(|(_, u)| vec![u.clone()])
            .unwrap_or_default()
    }

    /// `certrenewd --config <config> ARGS`.
    pub fn run(&self, args: &[&str]) -> Run {
        run_bin(&self.config, args)
    }

    /// `check --output json`, which must exit 0, parsed.
    pub fn check_json(&self) -> serde_json::Value {
        let r = self.run(&["check", "--output", "json"]);
        assert_eq!(r.code, 0, "check --output json: {r}");
        r.json()
    }

    /// Every file, directory and symlink under the tree.
    pub fn snapshot(&self) -> Snapshot {
        walk::snapshot(&self.root)
    }
}

// ------------------------------------------------------------------ rounds

/// A private copy of a master tree, `tmp/tree`, and where its config file, state dir and
/// backup dir go beside it (`certrenewd.toml`, `state`, `backup`; made by the first run).
/// A test adds the runs it needs in an `impl Round` of its own.
pub struct Round {
    /// Holds everything; removed on drop.
    pub tmp: tempfile::TempDir,
    /// The copy of the master.
    pub tree: PathBuf,
    /// The config file.
    pub config: PathBuf,
    /// The state dir.
    pub state: PathBuf,
    /// The backup dir.
    pub backup: PathBuf,
}

impl Round {
    /// `cp -a master` into a new temp dir under `parent` whose name starts with `prefix`.
    pub fn copy_of(master: &Path, prefix: &str, parent: &Path) -> Round {
        let tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(parent)
            .expect("temp dir");
        let tree = tmp.path().join("tree");
        let out = Command::new("cp")
            .arg("-a")
            .arg(master)
            .arg(&tree)
            .output()
            .expect("running cp");
        assert!(
            out.status.success(),
            "cp -a {} failed: {}",
            master.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Round {
            config: tmp.path().join("certrenewd.toml"),
            state: tmp.path().join("state"),
            backup: tmp.path().join("backup"),
            tree,
            tmp,
        }
    }

    /// Writes the config: the state and backup dirs, `settings` (top-level TOML lines), then
    /// a `[[watch]]` of each `(dir relative to the tree, the table's other lines)`.
    pub fn write_config(&self, settings: &str, watches: &[(&str, String)]) {
        let mut cfg = format!(
            "state_dir = {}\nbackup_dir = {}\n{settings}\n",
            toml_str(&self.state),
            toml_str(&self.backup)
        );
        for (dir, table) in watches {
            cfg.push_str(&format!(
                "\n[[watch]]\npath = {}\n{table}\n",
                toml_str(&self.tree.join(dir))
            ));
        }
        fs::write(&self.config, super::single_node(&cfg)).expect("writing the config");
    }

    /// No temp file is left under the tree, state or backup dir, and no pending record.
    pub fn assert_settled(&self, what: &str) {
        for dir in [&self.tree, &self.state, &self.backup] {
            let left = walk::temps_under(dir);
            assert!(left.is_empty(), "{what}: temp files left: {left:?}");
        }
        let pending = self.state.join("pending.json");
        assert!(
            !pending.exists(),
            "{what}: pending.json left: {:?}",
            fs::read_to_string(&pending)
        );
    }
}

/// A string as a TOML basic string.
pub fn toml_str(p: &Path) -> String {
    serde_json::to_string(&p.to_string_lossy()).expect("json string")
}

/// The outcome of one run of the binary.
pub struct Run {
    /// What was run.
    pub args: Vec<String>,
    /// Exit status (-1 for a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// stdout as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout of {:?} is not JSON ({e}):\n{self}", self.args))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "certrenewd {:?} exited {}\n--- stdout\n{}\n--- stderr\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }
}

/// `cmd` (the binary, possibly wrapped) without this process's config, log filter, journal
/// stream or notify socket, nothing on stdin, and its alarms sent to a journald that is not
/// there: those of tests outside the sandbox never reach this machine's.
pub fn isolate(cmd: &mut Command) -> &mut Command {
    // The machine's own system bus is never asked, not even what a unit runs: a test that
    // wants a systemd names its sandbox's bus itself.
    if !cmd.get_envs().any(|(k, _)| k == "DBUS_SYSTEM_BUS_ADDRESS") {
        cmd.env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/certrenewd-test/system_bus_socket",
        );
    }
    cmd.env_remove("CERTRENEWD_CONFIG")
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET")
        .env(
            "CERTRENEWD_JOURNAL_SOCKET",
            "/nonexistent/certrenewd-test/journal.socket",
        )
        .stdin(Stdio::null())
}

/// Runs the binary with `--config config`.
pub fn run_bin(config: &Path, args: &[&str]) -> Run {
    run_cmd(
        Command::new(BIN).arg("--config").arg(config).args(args),
        args,
    )
}

/// [`run_bin`]'s exit code and its stdout then stderr as one text, for tests that read
/// what an operator sees on a terminal.
pub fn run_text(config: &Path, args: &[&str]) -> (i32, String) {
    let r = run_bin(config, args);
    (r.code, r.stdout + &r.stderr)
}

/// Runs a prepared command (the binary, possibly wrapped) and collects its output.
pub fn run_cmd(cmd: &mut Command, args: &[&str]) -> Run {
    let out = isolate(cmd).output().expect("running certrenewd");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

// ------------------------------------------------------------------ openssl

/// Runs openssl; panics with its stderr unless it succeeds; returns stdout.
pub fn openssl(args: &[&str]) -> String {
    let out = openssl_out(args);
    assert!(
        out.status.success(),
        "openssl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A new P-256 key (PKCS#8 PEM) in `out`, by openssl.
pub fn ec_key(out: &Path) {
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path_str(out),
    ]);
}

/// A self-signed CA certificate of `key` named `subj`, for 10 years, in `out`, by openssl.
pub fn self_signed_ca(key: &Path, subj: &str, out: &Path) {
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        path_str(key),
        "-subj",
        subj,
        "-days",
        "3650",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        path_str(out),
    ]);
}

/// Runs openssl and returns what happened.
pub fn openssl_out(args: &[&str]) -> Output {
    Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl")
}

/// Whether a file's bytes are PEM (possibly after text, as `openssl x509 -text` writes).
pub fn is_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// The first PEM label in the bytes.
pub fn pem_label(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let end = text[start..].find("-----")?;
    Some(text[start..start + end].to_string())
}

/// The `-inform` for a certificate or key file.
pub fn inform(bytes: &[u8]) -> &'static str {
    if is_pem(bytes) { "PEM" } else { "DER" }
}

/// A scratch directory for openssl inputs and outputs.
pub struct Scratch {
    dir: tempfile::TempDir,
    n: std::cell::Cell<u32>,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    /// A new scratch directory.
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("certrenewd-scratch.")
                .tempdir()
                .expect("temp dir"),
            n: std::cell::Cell::new(0),
        }
    }

    /// A new file holding `bytes`.
    pub fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        self.n.set(self.n.get() + 1);
        let p = self.dir.path().join(format!("{}-{name}", self.n.get()));
        fs::write(&p, bytes).expect("writing a scratch file");
        p
    }

    /// The first certificate of `bytes` (PEM with anything around it, or DER) as DER.
    pub fn cert_der(&self, bytes: &[u8]) -> Vec<u8> {
        first_cert_der(bytes)
    }

    /// The first certificate of `bytes` in a PEM file of its own.
    pub fn cert_pem_file(&self, bytes: &[u8]) -> PathBuf {
        let der = first_cert_der(bytes);
        self.file("cert.pem", pem_encode("CERTIFICATE", &der).as_bytes())
    }

    /// `openssl x509 -noout -text` of the first certificate in `bytes`.
    pub fn cert_text(&self, bytes: &[u8]) -> String {
        let f = self.cert_pem_file(bytes);
        openssl(&["x509", "-in", path_str(&f), "-noout", "-text"])
    }

    /// The public key (PEM SPKI) certified by the first certificate in `bytes`.
    pub fn cert_pubkey(&self, bytes: &[u8]) -> String {
        let f = self.cert_pem_file(bytes);
        openssl(&["x509", "-in", path_str(&f), "-noout", "-pubkey"])
    }

    /// The public half (PEM SPKI) of the private key in `bytes` (PEM or DER, unencrypted).
    pub fn key_pubkey(&self, bytes: &[u8]) -> String {
        let f = self.file("in.key", bytes);
        openssl(&[
            "pkey",
            "-inform",
            inform(bytes),
            "-in",
            path_str(&f),
            "-pubout",
        ])
    }

    /// The DER subject and issuer names of the first certificate in `bytes`, cut out of the
    /// certificate at the offsets `openssl asn1parse` reports.
    pub fn raw_names(&self, bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let der = self.cert_der(bytes);
        let f = self.file("names.der", &der);
        let listing = openssl(&["asn1parse", "-inform", "DER", "-in", path_str(&f)]);
        // Lines like "   13:d=2  hl=2 l=  20 prim: INTEGER ..."; the tbsCertificate fields are
        // the depth-2 elements: [0] version?, serial, signature, issuer, validity, subject, ...
        let mut fields: Vec<(usize, usize, bool)> = Vec::new();
        for line in listing.lines() {
            let Some((off, rest)) = line.split_once(':') else {
                continue;
            };
            let Ok(off) = off.trim().parse::<usize>() else {
                continue;
            };
            if !rest.starts_with("d=2 ") {
                continue;
            }
            let hl = number_after(rest, "hl=");
            let l = number_after(rest, " l=");
            fields.push((off, hl + l, rest.contains("cont [ 0 ]")));
        }
        let skip = usize::from(fields.first().is_some_and(|f| f.2));
        let cut = |i: usize| {
            let (off, len, _) = fields[skip + i];
            der[off..off + len].to_vec()
        };
        (cut(4), cut(2))
    }
}

/// The first certificate in a file's bytes, as DER: the first `CERTIFICATE` block of a PEM
/// file (text around it and CRLF line ends allowed), or the whole file when it is DER.
pub fn first_cert_der(bytes: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    if !is_pem(bytes) {
        return bytes.to_vec();
    }
    let text = String::from_utf8_lossy(bytes);
    let begin = "-----BEGIN CERTIFICATE-----";
    let start = text.find(begin).expect("a CERTIFICATE block") + begin.len();
    let end = start
        + text[start..]
            .find("-----END CERTIFICATE-----")
            .expect("an END line");
    let b64: String = text[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64 in a CERTIFICATE block")
}

/// PEM with 64-character lines.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

fn number_after(s: &str, tag: &str) -> usize {
    let i = s.find(tag).unwrap_or_else(|| panic!("no {tag} in {s:?}")) + tag.len();
    s[i..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {tag} in {s:?}"))
}

/// A path as &str (test paths are UTF-8).
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// `openssl x509 -text` output without the lines a renewal may change: the serial number,
/// the validity dates, the signature (its value, and its algorithm, which fits the CA key:
/// a P-384 CA signs with ecdsa-with-SHA384 even where openssl had used SHA-256), the
/// subject and authority key identifiers (each
/// header with the indented lines under it), and with `drop_public_key` the public key block.
pub fn normalise_text(text: &str, drop_public_key: bool) -> Vec<String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut dropping: Option<usize> = None;
    for line in text.lines() {
        if let Some(level) = dropping {
            if indent(line) > level {
                continue;
            }
            dropping = None;
        }
        let t = line.trim();
        if t.starts_with("Not Before:")
            || t.starts_with("Not After :")
            || t.starts_with("Signature Algorithm:")
        {
            continue;
        }
        let block = t.starts_with("Serial Number:")
            || t.starts_with("Signature Value:")
            || t.starts_with("X509v3 Subject Key Identifier:")
            || t.starts_with("X509v3 Authority Key Identifier:")
            || (drop_public_key && t.starts_with("Subject Public Key Info:"));
        if block {
            dropping = Some(indent(line));
            continue;
        }
        out.push(line.trim_end().to_string());
    }
    out
}

/// The lines of `a` and `b` that differ, for messages.
pub fn diff_lines(a: &[String], b: &[String]) -> String {
    let mut s = String::new();
    for l in a.iter().filter(|l| !b.contains(l)) {
        s.push_str(&format!("- {l}\n"));
    }
    for l in b.iter().filter(|l| !a.contains(l)) {
        s.push_str(&format!("+ {l}\n"));
    }
    if s.is_empty() {
        s.push_str("(same lines, different order or count)\n");
    }
    s
}

/// The certificate's fields certrenewd itself reads.
pub fn facts(der: Vec<u8>) -> certrenewd::format::cert::CertFacts {
    certrenewd::format::cert::CertFacts::parse(der).expect("CertFacts::parse")
}

/// Collects failures so a test reports all of them at once.
#[derive(Default)]
pub struct Failures(pub Vec<String>);

impl Failures {
    /// Records a failure unless `ok`.
    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }

    /// Records a failure.
    pub fn push(&mut self, msg: String) {
        self.0.push(msg);
    }

    /// Panics listing every failure.
    pub fn finish(self, what: &str) {
        if !self.0.is_empty() {
            panic!(
                "{what}: {} failure(s):\n  - {}",
                self.0.len(),
                self.0.join("\n  - ")
            );
        }
    }
}

/// What a file holding copies of renewed CAs must hold once they were renewed:
/// each `(old, new)` CA file's text replaced where it stands, as PEM or as a kubeconfig's
/// base64 `certificate-authority-data`, every other byte kept. `None` when it holds none.
pub fn with_ca_copies_replaced(bytes: &[u8], cas: &[(&[u8], &[u8])]) -> Option<Vec<u8>> {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut text = String::from_utf8(bytes.to_vec()).ok()?;
    let mut hit = false;
    for (old, new) in cas {
        let (Ok(old_pem), Ok(new_pem)) = (std::str::from_utf8(old), std::str::from_utf8(new))
        else {
            continue;
        };
        for (from, to) in [
            (old_pem.to_string(), new_pem.to_string()),
            (b64(old), b64(new)),
        ] {
            if text.contains(&from) {
                text = text.replace(&from, &to);
                hit = true;
            }
        }
    }
    hit.then(|| text.into_bytes())
}

/// `openssl s_server -www` on a free loopback port with `cert` and `key`, requiring client
/// certificates that verify against `ca` (`-Verify depth`), run by `openssl` (a command for
/// the openssl binary, e.g. under libfaketime); listening when returned, killed (by its
/// PID) when dropped.
pub struct SServer {
    child: std::process::Child,
    /// `127.0.0.1:PORT`.
    pub accept: String,
}

impl SServer {
    pub fn start(mut openssl: Command, cert: &str, key: &str, ca: &str, depth: &str) -> SServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let accept = format!("127.0.0.1:{port}");
        let child = openssl
            .args(["s_server", "-accept", &accept, "-www"])
            .args(["-cert", cert, "-key", key, "-CAfile", ca])
            .args(["-Verify", depth, "-verify_return_error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let server = SServer { child, accept };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(&server.accept).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "s_server did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        server
    }
}

impl Drop for SServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
