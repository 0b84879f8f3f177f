//! Fault injection for the crash and error-path tests. Only a build with the `failpoints`
//! feature reads `CERTRENEWD_FAILPOINT`; in every other build each check is a no-op.
//!
//! `CERTRENEWD_FAILPOINT` is a comma-separated list of `NAME[:ACTION]`:
//! - `NAME` or `NAME:abort`: the process aborts when it reaches that point;
//! - `NAME:error`: the step named returns an injected I/O error every time it runs;
//! - `NAME:error@N`: only its Nth run (from 1) fails.
//!
//! Abort points are placed with [`crate::failpoint!`], error points with [`io`].

/// An injected I/O error at `name` when `CERTRENEWD_FAILPOINT` asks for one here; `Ok`
/// otherwise (always, without the `failpoints` feature).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn io(_name: &str) -> std::io::Result<()> {
    Ok(())
}

/// Aborts the process when `CERTRENEWD_FAILPOINT` names `name` as an abort point.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn abort_point(_name: &str) {}

#[cfg(feature = "failpoints")]
pub use enabled::{abort_point, io};

#[cfg(feature = "failpoints")]
mod enabled {
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// What the variable asks for at one point.
    #[derive(Debug, PartialEq, Eq)]
    enum Action {
        Abort,
        /// Fail every run (`None`) or only the Nth.
        Error(Option<u32>),
    }

    /// Every action the variable names for `name` (a point may be listed more than once,
    /// e.g. `rename-cert:error@3,rename-cert:error@4`).
    fn actions(name: &str) -> Vec<Action> {
        let Ok(spec) = std::env::var("CERTRENEWD_FAILPOINT") else {
            return Vec::new();
        };
        spec.split(',')
            .filter_map(|item| {
                let (n, what) = item.split_once(':').unwrap_or((item, "abort"));
                if n.trim() != name {
                    return None;
                }
                match what.trim() {
                    "abort" => Some(Action::Abort),
                    "error" => Some(Action::Error(None)),
                    other => other
                        .strip_prefix("error@")
                        .and_then(|n| n.parse().ok())
                        .map(|n| Action::Error(Some(n))),
                }
            })
            .collect()
    }

    /// How many times each point has run in this process.
    fn count(name: &str) -> u32 {
        static RUNS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);
        let mut runs = RUNS.lock().unwrap_or_else(|e| e.into_inner());
        let n = runs
            .get_or_insert_with(HashMap::new)
            .entry(name.to_owned())
            .or_insert(0);
        *n += 1;
        *n
    }

    /// See the module documentation.
    pub fn io(name: &str) -> std::io::Result<()> {
        abort_point(name);
        let errors: Vec<Option<u32>> = actions(name)
            .into_iter()
            .filter_map(|a| match a {
                Action::Error(nth) => Some(nth),
                Action::Abort => None,
            })
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        let run = count(name);
        if !errors.iter().any(|nth| nth.is_none_or(|n| n == run)) {
            return Ok(());
        }
        eprintln!("failpoint {name} hit: injecting an error");
        Err(std::io::Error::other(format!(
            "injected error (failpoint {name})"
        )))
    }

    /// See the module documentation.
    pub fn abort_point(name: &str) {
        if actions(name).contains(&Action::Abort) {
            eprintln!("failpoint {name} hit: aborting");
            std::process::abort();
        }
    }
}
