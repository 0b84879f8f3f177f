//! Fault injection for the crash and error-path tests. Only a build with the `failpoints`
//! feature reads `CERTRENEWD_FAILPOINT`; in every other build each check is a no-op.
//!
//! `CERTRENEWD_FAILPOINT` is a comma-separated list of `NAME[:ACTION]`:
//! - `NAME` or `NAME:abort`: the process aborts when it reaches that point;
//! - `NAME:error`: the step named returns an injected I/O error every time it runs;
//! - `NAME:error@N`: only its Nth run (from 1) fails;
//! - `NAME:hang`: the thread reaching an abort point stops there for good (a stuck system
//!   call, for the watchdog's tests).
//! - `NAME:panic`: the thread reaching an abort point panics there (a bug).
//! - `NAME:abort@N`: the process aborts on its Nth run (from 1), not before (a kill at each
//!   time a step runs: each file written, each rename).
//! - `NAME:sleep(MS)`: the thread reaching the point waits MS milliseconds there, every
//!   time (a moment between two steps held open for what runs beside it to see).
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
    use std::sync::Once;

    /// The tikv `fail` crate keeps the points; this only translates `CERTRENEWD_FAILPOINT`
    /// into its configuration once, the first time any point is reached. An abort point is
    /// `return(abort)`, an error point `return(error)`, and `error@N` skips the first N-1 runs.
    fn configure() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let Ok(spec) = std::env::var("CERTRENEWD_FAILPOINT") else {
                return;
            };
            for (name, actions) in parse(&spec) {
                if let Err(e) = fail::cfg(&name, &actions) {
                    eprintln!("CERTRENEWD_FAILPOINT: {name}: {e}");
                }
            }
        });
    }

    /// `NAME[:ACTION],...` as one `fail` action string per point, in the order first named.
    pub(super) fn parse(spec: &str) -> Vec<(String, String)> {
        // Per point: the action of every run, if any, and the actions of chosen runs.
        type Point<'a> = (String, Option<&'a str>, Vec<(u32, &'a str)>);
        let mut points: Vec<Point> = Vec::new();
        for item in spec.split(',').filter(|i| !i.trim().is_empty()) {
            let (name, what) = item.split_once(':').unwrap_or((item, "abort"));
            let name = name.trim();
            let at = match points.iter().position(|(n, ..)| n == name) {
                Some(at) => at,
                None => {
                    points.push((name.to_owned(), None, Vec::new()));
                    points.len() - 1
                }
            };
            let point = &mut points[at];
            let nth = |action: &str| {
                let n = what.trim().strip_prefix(action)?.strip_prefix('@')?;
                n.parse::<u32>().ok().filter(|n| *n > 0)
            };
            match what.trim() {
                "abort" => point.1 = Some("abort"),
                "hang" => point.1 = Some("hang"),
                "panic" => point.1 = Some("panic"),
                "error" => point.1 = point.1.or(Some("error")),
                sleep
                    if sleep
                        .strip_prefix("sleep(")
                        .and_then(|s| s.strip_suffix(')'))
                        .is_some_and(|ms| ms.parse::<u64>().is_ok()) =>
                {
                    point.1 = Some(sleep)
                }
                other => match (nth("error"), nth("abort")) {
                    (Some(n), _) => point.2.push((n, "error")),
                    (_, Some(n)) => point.2.push((n, "abort")),
                    _ => eprintln!("CERTRENEWD_FAILPOINT: {name}: unknown action {other:?}"),
                },
            }
        }
        points
            .into_iter()
            .map(|(name, every, mut nth)| {
                let actions = match every {
                    // `fail`'s pause waits until the point is set again: never, here.
                    Some("hang") => "pause".to_owned(),
                    Some(sleep) if sleep.starts_with("sleep(") => sleep.to_owned(),
                    Some(action) => format!("return({action})"),
                    None => {
                        nth.sort_unstable();
                        nth.dedup_by_key(|(n, _)| *n);
                        let mut steps = Vec::new();
                        let mut run = 1;
                        for (n, action) in nth {
                            if n > run {
                                steps.push(format!("{}*off", n - run));
                            }
                            steps.push(format!("1*return({action})"));
                            run = n + 1;
                        }
                        steps.push("off".to_owned());
                        steps.join("->")
                    }
                };
                (name, actions)
            })
            .collect()
    }

    /// What the point `name` asks for on this run: `Some("abort")`, `Some("error")`, or `None`.
    fn hit(name: &str) -> Option<String> {
        configure();
        fail::eval(name, |arg| arg.unwrap_or_default())
    }

    /// See the module documentation.
    pub fn io(name: &str) -> std::io::Result<()> {
        match hit(name).as_deref() {
            None => Ok(()),
            Some("abort") => abort(name),
            Some(_) => {
                eprintln!("failpoint {name} hit: injecting an error");
                Err(std::io::Error::other(format!(
                    "injected error (failpoint {name})"
                )))
            }
        }
    }

    /// See the module documentation.
    pub fn abort_point(name: &str) {
        match hit(name).as_deref() {
            Some("abort") => abort(name),
            Some("panic") => panic!("failpoint {name} hit: panicking"),
            _ => {}
        }
    }

    fn abort(name: &str) -> ! {
        eprintln!("failpoint {name} hit: aborting");
        std::process::abort();
    }
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    #[test]
    fn spec_becomes_fail_actions() {
        assert_eq!(
            super::enabled::parse(
                "a, b:error,c:error@3,c:error@4,d:error@1,e:abort@2,f:hang,g:sleep(3000)"
            ),
            [
                ("a".to_owned(), "return(abort)".to_owned()),
                ("b".to_owned(), "return(error)".to_owned()),
                (
                    "c".to_owned(),
                    "2*off->1*return(error)->1*return(error)->off".to_owned()
                ),
                ("d".to_owned(), "1*return(error)->off".to_owned()),
                ("e".to_owned(), "1*off->1*return(abort)->off".to_owned()),
                ("f".to_owned(), "pause".to_owned()),
                ("g".to_owned(), "sleep(3000)".to_owned()),
            ]
        );
    }
}
