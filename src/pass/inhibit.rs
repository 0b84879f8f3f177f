//! Maintenance inhibit: while an upgrade (or an operator) says so, renewal passes are
//! deferred — logged, shown in STATUS=, never alarmed — and run once the inhibit lifts.

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::fsutil::StateFile;

/// An inhibit set with `certrenewd inhibit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inhibit {
    /// Why, in the operator's words.
    pub reason: String,
    /// When it was set.
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
    /// When it lifts by itself, if ever.
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub until: Option<OffsetDateTime>,
}

/// What currently defers passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Active {
    /// `certrenewd inhibit` or the flag file that exists.
    pub source: String,
    /// Why.
    pub reason: String,
    /// Since when.
    pub since: OffsetDateTime,
    /// When it lifts by itself.
    pub until: Option<OffsetDateTime>,
    /// Not an inhibit: the clock check refused the pass (`crate::pass::clock`). It renews
    /// nothing, as a deferred pass, but fails and raises 250.003.
    pub clock: bool,
}

impl Active {
    /// One line for logs, STATUS= and the CLI.
    pub fn describe(&self) -> String {
        if self.clock {
            return format!("refused by the clock check: {}", self.reason);
        }
        let until = self
            .until
            .map(|u| format!(" until {}", crate::timefmt::rfc3339(u)))
            .unwrap_or_default();
        format!(
            "inhibited by {} since {}{until}: {}",
            self.source,
            crate::timefmt::rfc3339(self.since),
            self.reason
        )
    }
}

/// `inhibit.json`, which `certrenewd inhibit` shows (mode 0644).
fn state_file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, "inhibit.json").readable()
}

/// Sets (or replaces) the command inhibit.
pub fn set(state_dir: &Path, inhibit: &Inhibit) -> anyhow::Result<()> {
    state_file(state_dir).write(inhibit)
}

/// Removes the command inhibit; returns whether there was one.
pub fn clear(state_dir: &Path) -> anyhow::Result<bool> {
    let file = state_file(state_dir);
    let there = file.path().exists();
    file.remove()?;
    Ok(there)
}

/// The inhibit in force now: a flag file from `inhibit_paths`, or an unexpired command inhibit.
pub fn active(
    state_dir: &Path,
    inhibit_paths: &[PathBuf],
    now: OffsetDateTime,
) -> anyhow::Result<Option<Active>> {
    for p in inhibit_paths {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            let since = m.modified().map(OffsetDateTime::from).unwrap_or(now);
            return Ok(Some(Active {
                source: p.display().to_string(),
                reason: "the flag file exists (e.g. an upgrade is in progress)".into(),
                since,
                until: None,
                clock: false,
            }));
        }
    }
    let file = state_file(state_dir);
    let Some(inhibit) = file.read::<Inhibit>("; `certrenewd inhibit --clear` removes it")? else {
        return Ok(None);
    };
    if inhibit.until.is_some_and(|u| u <= now) {
        return Ok(None);
    }
    Ok(Some(Active {
        source: "certrenewd inhibit".into(),
        reason: inhibit.reason,
        since: inhibit.since,
        until: inhibit.until,
        clock: false,
    }))
}

/// Reads `--until`: RFC 3339 (`2026-11-22T06:00:00Z`) or a duration from now (`90m`, `6h`, `2d`).
pub fn parse_until(text: &str, now: OffsetDateTime) -> anyhow::Result<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        if t <= now {
            bail!("--until {text} is in the past");
        }
        return Ok(t);
    }
    let (num, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let Ok(n) = num.parse::<i64>() else {
        bail!(
            "--until {text:?} is not a time: use RFC 3339 (2026-11-22T06:00:00Z) or a duration from now (90m, 6h, 2d)"
        );
    };
    let d = match unit {
        "m" => time::Duration::minutes(n),
        "h" => time::Duration::hours(n),
        "d" => time::Duration::days(n),
        _ => bail!(
            "--until {text:?}: use RFC 3339 (2026-11-22T06:00:00Z) or a duration (90m, 6h, 2d)"
        ),
    };
    if n <= 0 {
        bail!("--until {text:?} must be in the future");
    }
    Ok(now + d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_files_and_commands_inhibit_until_they_lift() {
        let dir = tempfile::tempdir().unwrap();
        let now = time::macros::datetime!(2026-11-21 00:00 UTC);
        let flag = dir.path().join("upgrade-in-progress");
        assert_eq!(
            active(dir.path(), std::slice::from_ref(&flag), now).unwrap(),
            None
        );
        std::fs::write(&flag, "").unwrap();
        let a = active(dir.path(), std::slice::from_ref(&flag), now)
            .unwrap()
            .unwrap();
        assert_eq!(a.source, flag.display().to_string());
        std::fs::remove_file(&flag).unwrap();

        let until = parse_until("6h", now).unwrap();
        set(
            dir.path(),
            &Inhibit {
                reason: "upgrade".into(),
                since: now,
                until: Some(until),
            },
        )
        .unwrap();
        let a = active(dir.path(), &[], now).unwrap().unwrap();
        assert!(a.describe().contains("upgrade"), "{}", a.describe());
        assert_eq!(
            active(dir.path(), &[], until).unwrap(),
            None,
            "lifts by itself"
        );
        assert!(clear(dir.path()).unwrap());
        assert!(!clear(dir.path()).unwrap());
    }

    #[test]
    fn until_accepts_times_and_durations() {
        let now = time::macros::datetime!(2026-11-21 00:00 UTC);
        assert_eq!(
            parse_until("2d", now).unwrap(),
            now + time::Duration::days(2)
        );
        assert_eq!(
            parse_until("2026-11-22T06:00:00Z", now).unwrap(),
            time::macros::datetime!(2026-11-22 06:00 UTC)
        );
        assert!(parse_until("2026-01-01T00:00:00Z", now).is_err());
        assert_eq!(
            parse_until("yesterday", now).unwrap_err().to_string(),
            "--until \"yesterday\" is not a time: use RFC 3339 (2026-11-22T06:00:00Z) or a duration from now (90m, 6h, 2d)"
        );
    }
}
