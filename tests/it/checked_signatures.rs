//! The record of signatures checked (`state_dir/checked-signatures`): a renewal
//! pass keeps the (certificate, CA) pairs whose signature verified, `check` and dry runs only
//! read it, and nothing in it makes a certificate pass for signed that was not: a CA re-keyed
//! under the same name, a leaf forged under the same names, a damaged record. The digests
//! are recomputed with openssl, not with our own code. Certificates made by openssl.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::pki::{self, Run, openssl, toml_str};
use serde_json::Value;

const MAGIC: &[u8] = b"certrenewd checked signatures 1\n";

struct Node {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    pki: PathBuf,
    state: PathBuf,
    config: PathBuf,
}

impl Node {
    /// A CA (P-256) and a leaf it signed (RSA 2048, 365 days) under `pki/`.
    fn new() -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let pki = dir.join("pki");
        fs::create_dir(&pki).unwrap();
        let state = dir.join("state");
        let config = dir.join("certrenewd.toml");
        fs::write(
            &config,
            format!(
                "state_dir = {}\n\n[[watch]]\npath = {}\nunits = []\n",
                toml_str(&state),
                toml_str(&pki)
            ),
        )
        .unwrap();
        let node = Node {
            _tmp: tmp,
            dir,
            pki,
            state,
            config,
        };
        node.ca("ca", "ca.key");
        let p = |n: &str| node.pki.join(n);
        let csr = node.dir.join("leaf.csr");
        let ext = node.dir.join("leaf.ext");
        fs::write(&ext, "extendedKeyUsage = clientAuth\n").unwrap();
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=leaf",
            "-keyout",
            s(&p("leaf.key")),
            "-out",
            s(&csr),
        ]);
        node.sign(&csr, &ext, &p("ca.crt"), "ca.key", "leaf.crt");
        node
    }

    /// A self-signed CA named /CN=etcd-ca in `pki/NAME.crt` with the key `KEY` (made when
    /// missing; kept in the scratch dir, not on the node, unless it is `ca.key`).
    fn ca(&self, name: &str, key: &str) {
        let key = self.key_path(key);
        if !key.exists() {
            pki::ec_key(&key);
        }
        let out = self.pki.join(format!("{name}.crt"));
        pki::self_signed_ca(&key, "/CN=etcd-ca", &out);
    }

    /// Signs `csr` with the CA certificate `ca` and its key `key` into `pki/out`.
    fn sign(&self, csr: &Path, ext: &Path, ca: &Path, key: &str, out: &str) {
        openssl(&[
            "x509",
            "-req",
            "-in",
            s(csr),
            "-CA",
            s(ca),
            "-CAkey",
            s(&self.key_path(key)),
            "-days",
            "365",
            "-extfile",
            s(ext),
            "-out",
            s(&self.pki.join(out)),
        ]);
    }

    fn key_path(&self, key: &str) -> PathBuf {
        match key {
            "ca.key" => self.pki.join(key),
            other => self.dir.join(other),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        pki::run_bin(&self.config, args)
    }

    /// The leaf's row of `check --output json`.
    fn leaf(&self) -> Value {
        let r = self.run(&["check", "--output", "json"]);
        assert_eq!(r.code, 0, "{r}");
        let v = r.json();
        let rows = v["certificates"].as_array().unwrap();
        rows.iter()
            .find(|c| c["path"].as_str().unwrap().ends_with("/leaf.crt"))
            .unwrap_or_else(|| panic!("no leaf row: {r}"))
            .clone()
    }

    fn record(&self) -> PathBuf {
        self.state.join("checked-signatures")
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// SHA-256 of `parts` by `openssl dgst`.
fn sha256(parts: &[&[u8]]) -> Vec<u8> {
    let scratch = pki::Scratch::new();
    let file = scratch.file("in", &parts.concat());
    let out = pki::openssl_out(&["dgst", "-sha256", "-binary", s(&file)]);
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 32);
    out.stdout
}

fn der(cert: &Path) -> Vec<u8> {
    let scratch = pki::Scratch::new();
    let out = scratch.file("out.der", b"");
    openssl(&["x509", "-in", s(cert), "-outform", "DER", "-out", s(&out)]);
    fs::read(out).unwrap()
}

fn assert_signed_by_ca(leaf: &Value, node: &Node) {
    assert_eq!(leaf["status"], "ok", "{leaf:#}");
    assert_eq!(leaf["ca_path"], s(&node.pki.join("ca.crt")), "{leaf:#}");
}

fn assert_not_signed(leaf: &Value, what: &str) {
    assert_eq!(leaf["status"], "unrenewable", "{what}: {leaf:#}");
    assert_eq!(leaf["ca_path"], Value::Null, "{what}: {leaf:#}");
    let reason = leaf["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("did not sign"), "{what}: {reason}");
}

#[test]
fn a_pass_records_what_verified_and_check_only_reads_it() {
    let node = Node::new();
    // No record yet: check verifies, and writes nothing (it changes nothing).
    assert_signed_by_ca(&node.leaf(), &node);
    assert!(!node.state.exists(), "check made the state dir");

    // A renewal pass (nothing is due) records the one pair that verified.
    let r = node.run(&["renew", "--no-restart"]);
    assert_eq!(r.code, 0, "{r}");
    let record = fs::read(node.record()).unwrap();
    let ca = sha256(&[b"ca\0", &der(&node.pki.join("ca.crt"))]);
    let pair = sha256(&[b"cert\0", &ca, &der(&node.pki.join("leaf.crt"))]);
    assert_eq!(
        record,
        [MAGIC, &pair].concat(),
        "the record is the leaf/CA pair, by openssl"
    );

    // check and a dry run read it, and leave it as it is.
    let before = fs::metadata(node.record()).unwrap().modified().unwrap();
    assert_signed_by_ca(&node.leaf(), &node);
    let r = node.run(&[
        "renew",
        "--dry-run",
        "--force",
        s(&node.pki.join("leaf.crt")),
    ]);
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(fs::read(node.record()).unwrap(), record);
    assert_eq!(
        fs::metadata(node.record()).unwrap().modified().unwrap(),
        before
    );
}

#[test]
fn nothing_in_the_record_makes_a_certificate_pass_for_signed() {
    let node = Node::new();
    assert_eq!(node.run(&["renew", "--no-restart"]).code, 0);
    assert!(node.record().exists());
    let original_ca = fs::read(node.pki.join("ca.crt")).unwrap();

    // The CA re-keyed under the same name: the leaf's signature no longer verifies with it.
    node.ca("ca", "other-ca.key");
    assert_not_signed(&node.leaf(), "CA re-keyed");
    let other_ca = node.dir.join("other-ca.crt");
    fs::rename(node.pki.join("ca.crt"), &other_ca).unwrap();

    // The CA back; a leaf forged with the other key under the same names, in its place.
    fs::write(node.pki.join("ca.crt"), &original_ca).unwrap();
    assert_signed_by_ca(&node.leaf(), &node);
    let (csr, ext) = (node.dir.join("forged.csr"), node.dir.join("leaf.ext"));
    openssl(&[
        "req",
        "-new",
        "-key",
        s(&node.pki.join("leaf.key")),
        "-subj",
        "/CN=leaf",
        "-out",
        s(&csr),
    ]);
    node.sign(&csr, &ext, &other_ca, "other-ca.key", "leaf.crt");
    assert_not_signed(&node.leaf(), "leaf forged under the CA's name");

    // A renewal pass forgets the pair that is gone and records none for the forged leaf.
    let r = node.run(&["renew", "--no-restart"]);
    assert!(r.code == 0 || r.code == 1, "{r}");
    assert_eq!(
        fs::read(node.record()).unwrap(),
        MAGIC,
        "only pairs that verified are kept"
    );
}

#[test]
fn a_damaged_record_costs_only_the_checks() {
    let node = Node::new();
    fs::create_dir(&node.state).unwrap();
    for damaged in [
        &b"not a record at all"[..],
        &[MAGIC, &[0xff; 31]].concat(),
        &[MAGIC, &[0xff; 32], &[0x00; 32]].concat(), // unsorted
    ] {
        fs::write(node.record(), damaged).unwrap();
        assert_signed_by_ca(&node.leaf(), &node);
    }
    // The next pass replaces it with a good one.
    assert_eq!(node.run(&["renew", "--no-restart"]).code, 0);
    let record = fs::read(node.record()).unwrap();
    assert!(record.starts_with(MAGIC) && record.len() == MAGIC.len() + 32);
}
