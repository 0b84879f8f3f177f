//! Hostile input to the parsers: the files of `tests/fixtures/hostile/` (see its README),
//! large and deep inputs made at run time, every truncation and length rewrite of real
//! openssl certificates and keys, and thousands of fixed-seed random mutations of them go
//! through every parsing entry point (`pem::blocks`, `key::from_der`, `key::from_pem`,
//! `key::spki`, `CertFacts::parse`, `cert::signed_parts`, the signature check) and through
//! `Inventory::scan` of directories of such files. Nothing may panic, every call and scan
//! must end in bounded time, and the scan must list each unusable file under `errors` (named
//! like a certificate or key and unreadable, empty, truncated or corrupt: an error of the
//! pass) or `skipped` (not a certificate at all: a FIFO, a directory named `x.crt`).
//!
//! The file classifier itself (`inventory::walk::read_file`) is private: it is reached
//! through `Inventory::scan`.

use crate::common;

use common::Rng;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use certrenewd::format::cert::{self, CertFacts};
use certrenewd::format::{key, pem};
use certrenewd::inventory::Inventory;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hostile");
/// The most CPU time one input may take through every entry point (a debug build): the work
/// is bounded, not the wall clock of a shared machine.
const PER_INPUT: Duration = Duration::from_secs(10);
/// The longest a scan of a hostile directory may take.
const PER_SCAN: Duration = Duration::from_secs(120);
/// Random mutations of real certificates and keys.
const MUTATIONS: usize = 50_000;

// ------------------------------------------------------------------ feeding

/// What the classifier would make of `data`, by the public entry points.
#[derive(Debug, Default)]
struct Fed {
    certs: usize,
    keys: usize,
}

/// Every parsing entry point on `data`, the way the inventory's classifier uses them.
fn feed(data: &[u8]) -> Fed {
    let mut fed = Fed::default();
    for block in pem::blocks(data).into_iter().flatten() {
        if (block.label == "CERTIFICATE" || block.label == "X509 CERTIFICATE")
            && let Ok(c) = CertFacts::parse(block.der.clone())
        {
            fed.certs += 1;
            let _ = c.self_signed();
        }
        if key::is_private_key_label(&block.label)
            && key::from_pem(&block.label, &block.headers, &block.der).is_ok()
        {
            fed.keys += 1;
        }
        let _ = key::from_der(&block.der);
    }
    if key::from_der(data).is_some() {
        fed.keys += 1;
    }
    let _ = key::spki(data);
    let _ = cert::signed_parts(data);
    if let Ok(c) = CertFacts::parse(data.to_vec()) {
        fed.certs += 1;
        let _ = c.self_signed();
        let _ = cert::verify_signature(&c.der, &c.public_key);
    }
    fed
}

/// CPU time this thread has used: the work done, whatever else the machine runs.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `feed`, its work bounded by the CPU time of this thread; the name says which input broke
/// the bound.
fn feed_timed(name: &str, data: &[u8]) -> Fed {
    let start = thread_cpu();
    let fed = feed(data);
    let took = thread_cpu() - start;
    assert!(
        took < PER_INPUT,
        "{name} ({} bytes) took {took:?} of CPU through the parsers",
        data.len()
    );
    fed
}

/// Scans `dir` as one watch on another thread, giving up after `PER_SCAN`.
fn scan_bounded(dir: &Path) -> Inventory {
    let (tx, rx) = mpsc::channel();
    let root = vec![dir.to_path_buf()];
    std::thread::spawn(move || {
        let _ = tx.send(Inventory::scan(&root));
    });
    let start = Instant::now();
    let inv = rx.recv_timeout(PER_SCAN).unwrap_or_else(|e| {
        panic!(
            "scanning {} did not finish in {PER_SCAN:?} (or panicked): {e}",
            dir.display()
        )
    });
    eprintln!(
        "scanned {} in {:.2}s: {} certificates, {} keys, {} skipped",
        dir.display(),
        start.elapsed().as_secs_f64(),
        inv.certs.len(),
        inv.keys.len(),
        inv.skipped.len()
    );
    inv
}

/// The scan lists every file of `files` under `errors` or `skipped`, with a reason, and
/// uses none.
fn assert_all_skipped(inv: &Inventory, files: &[PathBuf]) {
    let refused = || inv.skipped.iter().chain(&inv.errors);
    let skipped: BTreeSet<&Path> = refused().map(|s| s.path.as_path()).collect();
    for s in refused() {
        assert!(!s.reason.is_empty(), "{}: empty reason", s.path.display());
    }
    let missing: Vec<&PathBuf> = files
        .iter()
        .filter(|f| !skipped.contains(f.as_path()))
        .collect();
    assert!(
        missing.is_empty(),
        "not listed under skipped: {missing:?}\nskipped: {:#?}",
        inv.skipped
    );
    assert!(
        inv.certs.is_empty() && inv.keys.is_empty(),
        "hostile files were used: certs {:?} keys {:?}",
        inv.certs.iter().map(|c| &c.path).collect::<Vec<_>>(),
        inv.keys.iter().map(|k| &k.path).collect::<Vec<_>>()
    );
}

fn fixture_files() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(FIXTURES)
        .expect("tests/fixtures/hostile")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| {
                ["crt", "pem", "cer", "der", "key"].contains(&&*e.to_string_lossy())
            })
        })
        .collect();
    out.sort();
    assert!(out.len() >= 40, "fixtures missing: {out:?}");
    out
}

// ------------------------------------------------------------------ big inputs

fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    let mut out = vec![0x80 | (bytes.len() - skip) as u8];
    out.extend_from_slice(&bytes[skip..]);
    out
}

/// `levels` SEQUENCEs inside each other around a NULL, built from the inside out.
fn nested(levels: usize) -> Vec<u8> {
    let mut headers: Vec<Vec<u8>> = Vec::with_capacity(levels);
    let mut len = 2; // NULL
    for _ in 0..levels {
        let mut h = vec![0x30];
        h.extend(der_len(len));
        len += h.len();
        headers.push(h);
    }
    let mut out = Vec::with_capacity(len);
    for h in headers.iter().rev() {
        out.extend_from_slice(h);
    }
    out.extend_from_slice(&[0x05, 0x00]);
    out
}

/// Inputs too big or too repetitive to keep in the repository, by name.
fn generated_inputs() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // 20 MB of base64 between CERTIFICATE lines: well-formed PEM around a non-certificate.
    let mut big = b"-----BEGIN CERTIFICATE-----\n".to_vec();
    let line = [b'A'; 64];
    while big.len() < 20_000_000 {
        big.extend_from_slice(&line);
        big.push(b'\n');
    }
    big.extend_from_slice(b"-----END CERTIFICATE-----\n");
    out.push(("big-20MB.pem".into(), big));
    // The same without its END line, and a PEM-looking file of BEGIN markers.
    let mut no_end = b"-----BEGIN CERTIFICATE-----\n".to_vec();
    no_end.extend(std::iter::repeat_n(b'A', 12_000_000));
    out.push(("big-no-end.pem".into(), no_end));
    out.push(("many-begins.pem".into(), b"-----BEGIN ".repeat(400_000)));
    out.push(("many-dashes.pem".into(), vec![b'-'; 4_000_000]));
    out.push((
        "many-empty-blocks.pem".into(),
        b"-----BEGIN X-----\n-----END X-----\n".repeat(100_000),
    ));
    out.push((
        "many-tiny-blocks.pem".into(),
        b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n".repeat(50_000),
    ));
    out.push((
        "many-long-labels.pem".into(),
        [b"-----BEGIN ".as_slice(), &[b'L'; 100], b"-----\n"]
            .concat()
            .repeat(40_000),
    ));
    let deep = nested(1_000_000);
    out.push((
        "million-nested.pem".into(),
        pem::encode("CERTIFICATE", &deep).into_bytes(),
    ));
    out.push(("million-nested.der".into(), deep));
    out
}

// ------------------------------------------------------------------ real inputs

/// Real openssl certificates and keys, by name: (file name, bytes).
fn real_inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let run = |args: &[&str]| {
        common::openssl_in(dir, args);
    };
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "rsa.key",
    ]);
    common::pki::ec_key(&dir.join("p256.key"));
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-384",
        "-out",
        "p384.key",
    ]);
    run(&["genpkey", "-algorithm", "ED25519", "-out", "ed25519.key"]);
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "p256.key",
        "-subj",
        "/O=hostile/CN=ca",
        "-days",
        "30",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-out",
        "ca.crt",
    ]);
    for (k, name) in [
        ("rsa.key", "rsa"),
        ("p384.key", "p384"),
        ("ed25519.key", "ed25519"),
    ] {
        run(&[
            "req",
            "-new",
            "-key",
            k,
            "-subj",
            &format!("/O=hostile/CN={name}"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "p256.key",
            "-days",
            "10",
            "-addext",
            "subjectAltName=DNS:a.example,DNS:b.example,IP:192.0.2.1,IP:::1",
            "-addext",
            "extendedKeyUsage=serverAuth,clientAuth",
            "-out",
            &format!("{name}.crt"),
        ]);
        run(&[
            "x509",
            "-in",
            &format!("{name}.crt"),
            "-outform",
            "DER",
            "-out",
            &format!("{name}-crt.der"),
        ]);
        run(&[
            "pkey",
            "-in",
            k,
            "-outform",
            "DER",
            "-out",
            &format!("{name}-key.der"),
        ]);
    }
    run(&[
        "pkey",
        "-in",
        "rsa.key",
        "-traditional",
        "-out",
        "rsa-pkcs1.key",
    ]);
    run(&[
        "pkey",
        "-in",
        "p256.key",
        "-traditional",
        "-out",
        "p256-sec1.key",
    ]);
    run(&[
        "pkey",
        "-in",
        "p256.key",
        "-traditional",
        "-outform",
        "DER",
        "-out",
        "p256-sec1-key.der",
    ]);
    run(&[
        "pkey",
        "-in",
        "p256.key",
        "-aes-128-cbc",
        "-passout",
        "pass:x",
        "-out",
        "p256-enc.key",
    ]);
    run(&["pkey", "-in", "rsa.key", "-pubout", "-out", "rsa-pub.pem"]);
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        out.push((name, fs::read(&p).expect("read")));
    }
    // A chain file: leaf then CA.
    let chain = [
        &fs::read(dir.join("rsa.crt")).expect("read")[..],
        &fs::read(dir.join("ca.crt")).expect("read"),
    ]
    .concat();
    out.push(("chain.crt".into(), chain));
    out
}

/// The DER inside a real input (PEM decoded), with the PEM label when it was PEM.
fn der_of(bytes: &[u8]) -> (Option<String>, Vec<u8>) {
    if pem::is_pem(bytes) {
        let b = pem::blocks(bytes).remove(0).expect("a real PEM block");
        (Some(b.label), b.der)
    } else {
        (None, bytes.to_vec())
    }
}

// ------------------------------------------------------------------ mutations

const INTERESTING: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x84, 0x88, 0xff, 0x30, 0xa0, b'-', b'\n', b'=',
];
const MARKERS: &[&[u8]] = &[
    b"-----BEGIN CERTIFICATE-----\n",
    b"-----END CERTIFICATE-----\n",
    b"-----BEGIN PRIVATE KEY-----\n",
    b"-----BEGIN ",
    b"-----",
    b"Proc-Type: 4,ENCRYPTED\n",
];

/// One to four random edits: bit flips, bytes, truncation, deletion, insertion,
/// duplication, DER length rewrites, PEM markers.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        let at = rng.below(len + 1);
        match rng.below(9) {
            0 if len > 0 => v[at.min(len - 1)] ^= 1 << rng.below(8),
            1 if len > 0 => v[at.min(len - 1)] = rng.byte(),
            2 if len > 0 => v[at.min(len - 1)] = INTERESTING[rng.below(INTERESTING.len())],
            3 => v.truncate(at),
            4 => {
                let end = (at + 1 + rng.below(64)).min(len);
                v.drain(at.min(end)..end);
            }
            5 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
                v.splice(at..at, bytes);
            }
            6 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(128)).min(len);
                let chunk = v[start..end].to_vec();
                v.splice(at..at, chunk);
            }
            7 => {
                // A constructed or common tag: rewrite the length octet after it.
                let tags: Vec<usize> = (0..len.saturating_sub(1))
                    .filter(|&i| {
                        matches!(v[i], 0x30 | 0x31 | 0x02 | 0x03 | 0x04 | 0x06 | 0xa0 | 0xa3)
                    })
                    .collect();
                if !tags.is_empty() {
                    let i = tags[rng.below(tags.len())] + 1;
                    v[i] = [0x00, 0x7f, 0x80, 0x81, 0x84, 0x88, 0xff, rng.byte()][rng.below(8)];
                }
            }
            _ => {
                let m = MARKERS[rng.below(MARKERS.len())];
                v.splice(at..at, m.iter().copied());
            }
        }
    }
    v
}

/// Whether the classifier may pass over `data` quietly: PEM holding only public keys or
/// parameters (what docs/behaviour.md calls ignored), nothing broken.
fn ignored_quietly(data: &[u8]) -> bool {
    if !pem::is_pem(data) || data.len() as u64 > certrenewd::inventory::MAX_FILE_SIZE {
        return false;
    }
    let blocks = pem::blocks(data);
    !blocks.is_empty()
        && blocks.iter().all(|b| {
            b.as_ref().is_ok_and(|b| {
                b.label == "PUBLIC KEY"
                    || b.label == "RSA PUBLIC KEY"
                    || b.label.contains("PARAMETERS")
            })
        })
}

// ------------------------------------------------------------------ tests

#[test]
fn every_fixture_goes_through_every_parser() {
    for f in fixture_files() {
        let data = fs::read(&f).expect("read");
        let fed = feed_timed(&f.to_string_lossy(), &data);
        assert_eq!(
            (fed.certs, fed.keys),
            (0, 0),
            "{}: a hostile fixture parsed as a certificate or key",
            f.display()
        );
    }
}

#[test]
fn big_and_deep_inputs_end_in_bounded_time() {
    for (name, data) in generated_inputs() {
        let fed = feed_timed(&name, &data);
        assert_eq!((fed.certs, fed.keys), (0, 0), "{name}");
    }
}

#[test]
fn the_scan_skips_every_hostile_file_with_a_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    for f in fixture_files() {
        let to = dir.path().join(f.file_name().expect("name"));
        fs::copy(&f, &to).expect("copy");
        files.push(to);
    }
    for (name, data) in generated_inputs() {
        let to = dir.path().join(name);
        fs::write(&to, data).expect("write");
        files.push(to);
    }
    // Things that are not files: a FIFO (reading it would block forever), a symlink to
    // an endless device, a directory named like a certificate, a dangling symlink.
    let fifo = dir.path().join("fifo.crt");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        files.push(fifo);
    }
    let zero = dir.path().join("zero.crt");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
    files.push(zero.clone());
    let dangling = dir.path().join("dangling.key");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
    files.push(dangling.clone());
    // A name that is not UTF-8 is looked at like any other.
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"not-\xff\xfeutf8.crt"));
    fs::write(&odd, b"\x30\x03\x02\x01").expect("write");
    files.push(odd);
    let as_dir = dir.path().join("a-directory.crt");
    fs::create_dir(&as_dir).expect("mkdir");
    files.push(as_dir.clone());
    let inv = scan_bounded(dir.path());
    assert_all_skipped(&inv, &files);
    // What is not a certificate file at all is passed over; a certificate's name that
    // leads nowhere or to something unreadable (a device, a FIFO) is an error.
    let listed =
        |list: &[certrenewd::inventory::Skipped], f: &Path| list.iter().any(|s| s.path == f);
    assert!(listed(&inv.skipped, &as_dir) && !listed(&inv.errors, &as_dir));
    assert!(listed(&inv.errors, &dangling) && listed(&inv.errors, &zero));
    let fifo = dir.path().join("fifo.crt");
    assert!(!made || listed(&inv.errors, &fifo), "{:#?}", inv.errors);
}

#[test]
fn truncations_and_length_rewrites_of_real_files_are_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = real_inputs(tmp.path());
    let scan_dir = tmp.path().join("scan");
    fs::create_dir(&scan_dir).expect("mkdir");
    let mut scan_files = Vec::new();
    let mut calls = 0;
    for (name, bytes) in &real {
        let (label, der) = der_of(bytes);
        let whole = CertFacts::parse(der.clone()).is_ok() || key::from_der(&der).is_some();
        if label.as_deref() != Some("ENCRYPTED PRIVATE KEY") && !name.ends_with("-pub.pem") {
            assert!(whole, "{name}: the real file must parse whole");
        }
        // Every strict prefix of the DER, bare and in PEM.
        for cut in 0..der.len() {
            let prefix = &der[..cut];
            assert!(
                CertFacts::parse(prefix.to_vec()).is_err(),
                "{name} cut at {cut} parsed as a certificate"
            );
            assert!(
                key::from_der(prefix).is_none(),
                "{name} cut at {cut} parsed as a key"
            );
            let _ = key::spki(prefix);
            let _ = cert::signed_parts(prefix);
            let as_pem = pem::encode(label.as_deref().unwrap_or("CERTIFICATE"), prefix);
            let fed = feed(as_pem.as_bytes());
            assert_eq!((fed.certs, fed.keys), (0, 0), "{name} cut at {cut}, in PEM");
            calls += 1;
            // A sample for the scan (a cut public key in PEM is passed over quietly).
            let data = if cut % 2 == 0 {
                prefix.to_vec()
            } else {
                as_pem.into_bytes()
            };
            if cut % 97 == 13 && !ignored_quietly(&data) {
                let ext = if name.contains("key") { "key" } else { "crt" };
                let f = scan_dir.join(format!("{name}-cut{cut}.{ext}"));
                fs::write(&f, data).expect("write");
                scan_files.push(f);
            }
        }
        // Every prefix of the file as stored (PEM text cut anywhere).
        for cut in 0..bytes.len() {
            let _ = feed(&bytes[..cut]);
        }
        // Each length octet of the outer TLVs rewritten to lie.
        for pos in 0..der.len().min(64) {
            for lie in [
                0x00, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x88, 0xff,
            ] {
                let mut v = der.clone();
                v[pos] = lie;
                let _ = feed(&v);
                if let Some(l) = &label {
                    let _ = feed(pem::encode(l, &v).as_bytes());
                }
            }
        }
    }
    eprintln!("{calls} truncations of {} real files", real.len());
    let inv = scan_bounded(&scan_dir);
    assert_all_skipped(&inv, &scan_files);
}

#[test]
fn random_mutations_of_real_files_never_panic_and_are_accounted_for() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = real_inputs(tmp.path());
    let scan_dir = tmp.path().join("scan");
    fs::create_dir(&scan_dir).expect("mkdir");
    let mut rng = Rng(0x5eed_c0de_2026_1121);
    let mut written: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let start = Instant::now();
    let (mut certs, mut keys) = (0, 0);
    for i in 0..MUTATIONS {
        let (name, bytes) = &real[rng.below(real.len())];
        // Half the time the DER is mutated and wrapped again in its PEM label.
        let data = match der_of(bytes) {
            (Some(label), der) if rng.below(2) == 0 => {
                pem::encode(&label, &mutate(&mut rng, &der)).into_bytes()
            }
            _ => mutate(&mut rng, bytes),
        };
        let outcome = std::panic::catch_unwind(|| feed_timed(name, &data));
        let fed = match outcome {
            Ok(fed) => fed,
            Err(_) => {
                let keep =
                    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-panic-{i}.bin"));
                let _ = fs::write(&keep, &data);
                panic!(
                    "mutation {i} of {name} panicked; the input is in {}",
                    keep.display()
                );
            }
        };
        certs += fed.certs;
        keys += fed.keys;
        if i % 125 == 0 {
            let ext = Path::new(name)
                .extension()
                .map_or("crt".into(), |e| e.to_string_lossy().into_owned());
            let ext = if ext == "der" {
                if name.contains("key") {
                    "key".into()
                } else {
                    ext
                }
            } else {
                ext
            };
            let f = scan_dir.join(format!("m{i:05}.{ext}"));
            fs::write(&f, &data).expect("write");
            written.push((f, data));
        }
    }
    eprintln!(
        "{MUTATIONS} mutations in {:.1}s: {certs} certificates and {keys} keys still parsed",
        start.elapsed().as_secs_f64()
    );
    // The scan accounts for every file: used, skipped with a reason, or a public key.
    let inv = scan_bounded(&scan_dir);
    let mut seen: BTreeSet<&Path> = BTreeSet::new();
    seen.extend(inv.certs.iter().map(|c| c.path.as_path()));
    seen.extend(inv.keys.iter().map(|k| k.path.as_path()));
    seen.extend(inv.skipped.iter().map(|s| s.path.as_path()));
    seen.extend(inv.errors.iter().map(|s| s.path.as_path()));
    for (f, data) in &written {
        assert!(
            seen.contains(f.as_path()) || ignored_quietly(data),
            "{} is neither used, skipped nor a public key",
            f.display()
        );
    }
}

/// YAML that is deep, wide, aliased, truncated or mutated goes through the kubeconfig
/// reader without a panic and in bounded time.
#[test]
fn hostile_kubeconfigs_never_panic() {
    use certrenewd::format::kubeconfig::Kubeconfig;
    let base = "# für ✓\r\napiVersion: v1\r\nkind: Config\r\nusers:\r\n- name: a\r\n  user: &u\r\n    client-certificate-data: |\r\n      Q0VS\r\n    client-key-data: 'S0VZ'\r\n- {name: b, user: *u}\r\n- name: c\r\n  user:\r\n    <<: *u\r\n    client-certificate-data: \"Q0VSVA==\"\r\n";
    let mut inputs: Vec<(String, Vec<u8>)> = vec![
        ("deep flow".into(), "[".repeat(1_000_000).into_bytes()),
        (
            "deep block".into(),
            (0..10_000)
                .map(|i| format!("{}- a:\n", " ".repeat(i)))
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "wide flow".into(),
            format!("[{}]", "a,".repeat(3_000_000)).into_bytes(),
        ),
        (
            "laughs".into(),
            format!(
                "a: &a [x, x]\n{}users: *a\n",
                (1..200)
                    .map(|i| format!(
                        "a{i}: &a{i} [*a{p}, *a{p}, *a{p}]\n",
                        p = if i == 1 {
                            String::new()
                        } else {
                            (i - 1).to_string()
                        }
                    ))
                    .collect::<String>()
            )
            .into_bytes(),
        ),
        ("merge loop".into(), b"a: &a {<<: *a}\n".to_vec()),
    ];
    for n in 0..base.len() {
        inputs.push((format!("truncated at {n}"), base.as_bytes()[..n].to_vec()));
    }
    let mut rng = Rng(0x5eed_ca11);
    for i in 0..5_000 {
        inputs.push((format!("mutation {i}"), mutate(&mut rng, base.as_bytes())));
    }
    for (name, data) in &inputs {
        let start = thread_cpu();
        let _ = Kubeconfig::parse(data);
        let took = thread_cpu() - start;
        assert!(took < PER_INPUT, "{name} took {took:?} of CPU");
    }
}
