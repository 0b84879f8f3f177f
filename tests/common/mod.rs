//! Shared helpers for integration tests.
#![allow(dead_code)]

pub mod controllers;
pub mod e2e;
pub mod etcd_e2e;
pub mod etcd_probe;
pub mod failpoints;
pub mod ha;
pub mod pki;
pub mod sandbox;
pub mod skip;
pub mod table;

/// Runs `script` with `bash -euc` in `dir`; a failure shows the script and its stderr.
pub fn sh(dir: &std::path::Path, script: &str) {
    let out = std::process::Command::new("bash")
        .arg("-euc")
        .arg(script)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
