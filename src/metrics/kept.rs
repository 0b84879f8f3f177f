//! What the state directory keeps for the metrics from one pass to the next: the renewals
//! counter, the last success, and why the metrics file could not be written (for `check`).

use std::path::Path;

use time::OffsetDateTime;

use crate::fsutil::{self, FileMeta};

/// What the state directory keeps for the metrics from one pass to the next, whether or
/// not a metrics file is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// Renewals that stayed in service, in `state_dir/renewals_total`.
    pub renewals: u64,
    /// When the last pass that succeeded ended (Unix seconds; 0: none has), in
    /// `state_dir/last_success`.
    pub last_success: i64,
}

impl Kept {
    /// Adds `renewed` (this pass's renewals that stayed in service) to the total, records
    /// `succeeded_at` (the end of this pass, when it succeeded) as the last success, and
    /// returns both.
    pub fn update(
        state_dir: &Path,
        renewed: u64,
        succeeded_at: Option<i64>,
    ) -> anyhow::Result<Kept> {
        let counter = state_dir.join("renewals_total");
        let renewals = read_number(&counter).unwrap_or(0) + renewed;
        if renewed > 0 {
            write_number(&counter, renewals)?;
        }
        let success = state_dir.join("last_success");
        let last_success = match succeeded_at {
            Some(t) => {
                write_number(&success, t)?;
                t
            }
            None => read_number(&success).unwrap_or(0),
        };
        Ok(Kept {
            renewals,
            last_success,
        })
    }
}

/// The number in a state file (`None`: missing or not a number).
fn read_number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    crate::fsutil::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn write_number(path: &Path, n: impl std::fmt::Display) -> anyhow::Result<()> {
    fsutil::replace(path, format!("{n}\n").as_bytes(), &FileMeta::own(0o600))
}

/// Where a pass that could not write the metrics file records why, for `check`; removed
/// by the next pass that writes it.
const NOT_WRITTEN: &str = "metrics-not-written";

/// Records whether the pass wrote the metrics file: why not, or nothing once it did. The
/// record is `check`'s only way to know: a failure here is said in the journal.
pub fn record_written(state_dir: &Path, written: Result<(), &anyhow::Error>) {
    let file = state_dir.join(NOT_WRITTEN);
    let done = match written {
        Ok(()) => match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(anyhow::Error::from(e)),
            _ => Ok(()),
        },
        Err(e) => {
            let at = crate::timefmt::rfc3339(OffsetDateTime::now_utc());
            let text = format!("{at}\n{}\n", crate::causes::Causes(e));
            fsutil::replace(&file, text.as_bytes(), &FileMeta::own(0o644))
        }
    };
    if let Err(e) = done {
        tracing::warn!(
            "recording whether the metrics file was written, in {}: {e:#}",
            file.display()
        );
    }
}

/// Why the metrics file `metrics_file` is not being written, as `check` says it: its
/// directory is missing, or the last pass could not write it (when, and why, as it
/// recorded in `state_dir`); `None` when nothing says so.
pub fn not_written(metrics_file: &Path, state_dir: &Path) -> Option<String> {
    let dir = metrics_file.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir
        && std::fs::metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Some(format!("its directory {} does not exist", dir.display()));
    }
    let text = std::fs::read_to_string(state_dir.join(NOT_WRITTEN)).ok()?;
    let (at, why) = text
        .trim_end()
        .split_once('\n')
        .unwrap_or(("", text.trim_end()));
    Some(format!("the pass at {at} could not write it: {why}"))
}
