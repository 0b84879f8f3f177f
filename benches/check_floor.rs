//! The verification floor of `check`: the CPU time of checking each leaf's
//! signature once with its CA's key, through aws-lc-rs as certrenewd does, over a tree
//! read and parsed beforehand (untimed). No run of `check` can cost less CPU than this.
//!
//! ```text
//! cargo bench --bench check_floor -- TREE [ROUNDS]
//! ```
//!
//! Prints `key=value` lines (CPU seconds, the median of ROUNDS, default 5):
//! - `floor_cpu_s`: every leaf verified once, each CA's key parsed once
//!   (`ParsedPublicKey::verify_sig`): the floor;
//! - `floor_par_cpu_s`, `floor_par_wall_s`: the same spread over all cores, as `check` does
//!   it (rayon); its CPU time is the floor's plus what running side by side costs the machine;
//! - `unparsed_cpu_s`: the same with the CA's key parsed again for every leaf
//!   (`cert::verify_signature`, `UnparsedPublicKey::verify`), as `check` once did;
//! - `leaves`, `cas`, and the split of `floor_cpu_s` by the CA's key type.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aws_lc_rs::signature::ParsedPublicKey;
use certrenewd::format::cert::{self, CertFacts};
use certrenewd::format::key::KeyAlg;
use certrenewd::format::pem;
use rayon::prelude::*;

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&String> = all.iter().filter(|a| !a.starts_with("--")).collect();
    let Some(tree) = args.first() else {
        // `cargo test --all-targets` runs a bench once, without `--bench` and without a
        // TREE: measure once over a StarlingX tree made by openssl (tests/fixtures), so the
        // path the bench times (parse, link, verify) is checked to verify every leaf.
        if all.iter().any(|a| a == "--bench") {
            eprintln!("usage: check_floor TREE [ROUNDS]");
            std::process::exit(2);
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let made = std::process::Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/mkpki.sh"
            ))
            .arg("starlingx")
            .arg(dir.path())
            .output()
            .expect("running tests/fixtures/mkpki.sh");
        assert!(made.status.success(), "mkpki.sh: {made:?}");
        measure(dir.path(), 1);
        return;
    };
    let rounds: usize = args
        .get(1)
        .map_or(5, |r| r.parse().expect("ROUNDS: a number"));
    measure(Path::new(tree.as_str()), rounds);
}

/// Reads every certificate under `tree`, links each leaf to its CA, and prints the floor's
/// figures, each the median of `rounds`; panics if a leaf does not verify.
fn measure(tree: &Path, rounds: usize) {
    let mut files = Vec::new();
    walk(tree, &mut files);
    files.sort();
    let certs: Vec<CertFacts> = files
        .iter()
        .flat_map(|f| {
            let data = std::fs::read(f).expect("readable");
            pem::blocks(&data)
                .into_iter()
                .filter_map(Result::ok)
                .filter(|b| b.label == "CERTIFICATE")
                .filter_map(|b| CertFacts::parse(b.der).ok())
                .collect::<Vec<_>>()
        })
        .collect();
    let cas: HashMap<&[u8], &CertFacts> = certs
        .iter()
        .filter(|c| c.is_ca)
        .map(|c| (c.raw_subject(), c))
        .collect();
    // Each leaf with its CA; each CA's key parsed once per algorithm it signed with.
    let mut parsed: HashMap<(&[u8], usize), ParsedPublicKey> = HashMap::new();
    let mut leaves = Vec::new();
    for c in certs.iter().filter(|c| !c.is_ca) {
        let ca = cas
            .get(c.raw_issuer())
            .unwrap_or_else(|| panic!("no CA for {}", c.subject));
        let cert::SignatureInput {
            algorithm: alg,
            tbs,
            signature: sig,
        } = cert::signature_input(&c.der, &ca.public_key).expect("supported");
        let id = (
            ca.raw_subject(),
            std::ptr::from_ref(alg).cast::<()>().addr(),
        );
        parsed
            .entry(id)
            .or_insert_with(|| ParsedPublicKey::new(alg, &ca.public_key.raw).expect("CA key"));
        leaves.push((c, *ca, id, tbs, sig));
    }
    assert!(
        !leaves.is_empty(),
        "no leaf certificate under {}",
        tree.display()
    );
    let floor = median(rounds, || {
        for (_, _, id, tbs, sig) in &leaves {
            parsed[id].verify_sig(tbs, sig).expect("verifies");
        }
    });
    let mut par_wall = Vec::new();
    let floor_par = median(rounds, || {
        let t0 = std::time::Instant::now();
        leaves.par_iter().for_each(|(_, _, id, tbs, sig)| {
            parsed[id].verify_sig(tbs, sig).expect("verifies");
        });
        par_wall.push(t0.elapsed().as_secs_f64());
    });
    par_wall.sort_by(f64::total_cmp);
    let unparsed = median(rounds, || {
        for (c, ca, ..) in &leaves {
            cert::verify_signature(&c.der, &ca.public_key).expect("verifies");
        }
    });
    let by_type = |rsa: bool| {
        median(rounds, || {
            for (_, ca, id, tbs, sig) in &leaves {
                if matches!(ca.public_key.alg, KeyAlg::Rsa(_)) == rsa {
                    parsed[id].verify_sig(tbs, sig).expect("verifies");
                }
            }
        })
    };
    let rsa_leaves = leaves
        .iter()
        .filter(|l| matches!(l.1.public_key.alg, KeyAlg::Rsa(_)))
        .count();
    println!("leaves={}", leaves.len());
    println!("cas={}", cas.len());
    println!("floor_cpu_s={floor:.4}");
    println!("floor_par_cpu_s={floor_par:.4}");
    println!("floor_par_wall_s={:.4}", par_wall[par_wall.len() / 2]);
    println!("unparsed_cpu_s={unparsed:.4}");
    println!("floor_rsa_ca_leaves={rsa_leaves}");
    println!("floor_rsa_ca_cpu_s={:.4}", by_type(true));
    println!("floor_ec_ca_leaves={}", leaves.len() - rsa_leaves);
    println!("floor_ec_ca_cpu_s={:.4}", by_type(false));
}

/// The median process CPU time of `rounds` runs of `f`, in seconds.
fn median(rounds: usize, mut f: impl FnMut()) -> f64 {
    let cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    };
    let mut times: Vec<f64> = (0..rounds.max(1))
        .map(|_| {
            let t0 = cpu();
            f();
            cpu() - t0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("listable").flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "crt") {
            out.push(p);
        }
    }
}
