//! `certrenewd alarms --acknowledge CA-PATH`: the operator says the copies of a re-issued
//! CA outside this node hold its new certificate ([`crate::alarms::old_cas`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::alarms::old_cas::{self, OldCas};
use crate::config::Settings;
use crate::pass::state_lock::StateLock;

/// Marks the re-issues of `ca` acknowledged (again: says so); exit 1, saying what is
/// outstanding, when `ca` has no re-issue recorded.
pub fn run(settings: &Settings, ca: &Path) -> anyhow::Result<ExitCode> {
    let state = &settings.state_dir;
    let _lock = StateLock::acquire(state, settings.lock_timeout)?;
    let all = OldCas::load(state)?;
    // As recorded (the watched path), or as the operator names it (relative, a symlink).
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let given = real(ca);
    let recorded: Option<PathBuf> = all
        .cas
        .iter()
        .filter(|o| !o.acknowledged)
        .map(|o| o.ca.clone())
        .find(|p| p == ca || real(p) == given);
    let Some(recorded) = recorded else {
        // Said once already: saying it again changes nothing, and is no mistake.
        let done =
            (all.cas.iter()).find(|o| o.acknowledged && (o.ca == ca || real(&o.ca) == given));
        if let Some(done) = done {
            println!(
                "already acknowledged: the copies of {} outside this node hold its new certificate; its alarm for the old certificate clears at the next pass",
                done.ca.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        let outstanding: Vec<String> = all
            .cas
            .iter()
            .filter(|o| !o.acknowledged)
            .map(|o| o.ca.display().to_string())
            .collect();
        let listed = match outstanding.is_empty() {
            true => "none is".to_string(),
            false => format!("these are: {}", outstanding.join(", ")),
        };
        eprintln!(
            "certrenewd: {} is not a re-issued CA awaiting acknowledgement ({listed})",
            ca.display()
        );
        return Ok(ExitCode::from(1));
    };
    let n = old_cas::acknowledge(state, &recorded)?;
    println!(
        "acknowledged: the copies of {} outside this node hold its new certificate ({n} re-issue{}); its alarm for the old certificate clears at the next pass",
        recorded.display(),
        if n == 1 { "" } else { "s" }
    );
    tracing::info!(path = %recorded.display(), "the copies of CA {} outside this node were acknowledged by the operator", recorded.display());
    Ok(ExitCode::SUCCESS)
}
