//! The binary built with `--features failpoints` (see `src/failpoint.rs`), in its own
//! target dir beside the test's, built once per test binary (the first time, every
//! dependency compiles again: minutes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// Path of the failpoints build of `certrenewd`.
pub fn binary() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("target dir")
            .join("failpoints");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let started = Instant::now();
        let out = Command::new(cargo)
            .args([
                "build",
                "--offline",
                "--bin",
                "certrenewd",
                "--features",
                "failpoints",
            ])
            .arg("--target-dir")
            .arg(&target)
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("running cargo build --features failpoints");
        assert!(
            out.status.success(),
            "cargo build --features failpoints failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("failpoints build: {:.1}s", started.elapsed().as_secs_f64());
        target.join("debug").join("certrenewd")
    })
}
