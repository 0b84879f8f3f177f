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
pub fn openssl<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    openssl_run(std::process::Command::new("openssl").args(args), args)
}

/// [`openssl`] run in `dir` (relative paths in `args` are `dir`'s).
pub fn openssl_in<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    dir: &std::path::Path,
    args: &[S],
) -> String {
    openssl_run(
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir),
        args,
    )
}

fn openssl_run<S: std::fmt::Debug>(cmd: &mut std::process::Command, args: &[S]) -> String {
    let out = cmd
        .stdin(std::process::Stdio::null())
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
