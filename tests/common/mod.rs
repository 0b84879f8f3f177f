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

/// `openssl x509 -noout -in CERT ARGS...`, its stdout.
pub fn x509(cert: &std::path::Path, args: &[&str]) -> String {
    let path = cert.display().to_string();
    openssl(&[&["x509", "-noout", "-in", path.as_str()], args].concat())
}

/// `openssl ARGS...`, its stdout trimmed; a failure shows its output.
pub fn openssl(args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
