//! Skipping a test that cannot run on this machine (not root, no sandbox tools, no etcd).
//!
//! Outside CI a skip prints `SKIP <test>: <why>` and the test returns. In CI (`CI=true`) a
//! skip is a failure: a test that could not run has not shown anything, and must not be
//! counted as passed. `.ci/run` counts the `SKIP ` lines and fails unless there are none.

use std::io::Write;

/// Whether this run is CI's (`CI=true` or `CI=1`, as CI services set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The running test's name: libtest names each test's thread after the test's path in its
/// binary (`module::test`), so helpers called on that thread need not be told it.
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string()
}

/// Says that the running test cannot do its work here and why; the caller then returns.
///
/// Panics under CI, so that the test fails instead of passing without having run.
pub fn skip(why: &str) {
    let test = test_name();
    // Straight to stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
    if in_ci() {
        panic!("{test} could not run here ({why}); with CI=true a skipped test is a failure");
    }
}
