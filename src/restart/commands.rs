//! A watch's `post_renew_command` (certmonger's post-save): run once per pass that renewed
//! certificates under the watch, after its units and static pods were restarted, for what is
//! not a unit (reload haproxy over its socket, copy a CA somewhere). An argv, no shell; the
//! renewed files in its environment; at most `restart_timeout`, then killed. A command that
//! fails stays owed and is run again by the next pass, and is alarmed like a service that
//! did not come back.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::owed::OwedCommand;
use crate::child::Ended;
use crate::config::Settings;

/// How much of what a command wrote to stderr a report quotes (its end).
const STDERR_QUOTED: usize = 400;

/// What one run of a watch's command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    /// The watch's path.
    pub watch: PathBuf,
    /// The command, as configured (argv).
    pub argv: Vec<String>,
    /// The certificates it was run for.
    pub certificates: Vec<PathBuf>,
    /// It exited with status 0 within the timeout.
    pub ok: bool,
    /// What happened, in a sentence: its exit status, the end of its stderr when it failed.
    pub detail: String,
}

impl CommandRun {
    /// The command in a phrase: `post_renew_command /usr/bin/x (watch /etc/x)`.
    pub fn label(&self) -> String {
        let program = self.argv.first().map_or("", String::as_str);
        format!(
            "post_renew_command {program} (watch {})",
            self.watch.display()
        )
    }
}

/// Runs each owed command whose watch still has one, in order; what is not configured any
/// more is dropped with a warning (nothing left to run).
pub async fn run_all(settings: &Settings, owed: &[OwedCommand]) -> Vec<CommandRun> {
    let mut runs = Vec::new();
    for o in owed {
        let argv = settings
            .watches
            .iter()
            .find(|w| w.path == o.watch)
            .and_then(|w| w.post_renew_command.clone());
        let Some(argv) = argv else {
            tracing::warn!(
                watch = %o.watch.display(),
                "a post_renew_command was owed for {}, but the configuration has none for it any more: not run",
                o.watch.display()
            );
            continue;
        };
        let run = run_one(&o.watch, argv, &o.certificates, settings.restart_timeout).await;
        match run.ok {
            true => tracing::info!(watch = %o.watch.display(), "{}: {}", run.label(), run.detail),
            false => tracing::warn!(watch = %o.watch.display(), "{}: {}", run.label(), run.detail),
        }
        runs.push(run);
    }
    runs
}

/// Runs `argv` for the certificates of `watch`, for at most `timeout`.
async fn run_one(
    watch: &Path,
    argv: Vec<String>,
    certificates: &[PathBuf],
    timeout: Duration,
) -> CommandRun {
    let (ok, detail) = match spawn_and_wait(watch, &argv, certificates, timeout).await {
        Ok(()) => (true, "exited with status 0".to_string()),
        Err(why) => (false, why.to_string()),
    };
    CommandRun {
        watch: watch.to_path_buf(),
        argv,
        certificates: certificates.to_vec(),
        ok,
        detail,
    }
}

async fn spawn_and_wait(
    watch: &Path,
    argv: &[String],
    certificates: &[PathBuf],
    timeout: Duration,
) -> anyhow::Result<()> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("the command is empty"))?;
    let list: Vec<String> = certificates
        .iter()
        .map(|c| c.display().to_string())
        .collect();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env("CERTRENEWD_WATCH", watch)
        .env("CERTRENEWD_CERTIFICATES", list.join("\n"))
        .env(
            "CERTRENEWD_CERTIFICATE",
            list.first().map_or("", String::as_str),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (status, err) = match crate::child::run_bounded(cmd, timeout).await {
        Err(e) => return Err(anyhow::anyhow!("cannot start {program}: {e}")),
        Ok((Ended::Exited(status), err)) => (status, err),
        Ok((Ended::TimedOut { pid }, _)) => {
            anyhow::bail!(
                "still running after {}s (restart_timeout_secs), pid {pid}: killed",
                timeout.as_secs()
            );
        }
    };
    if status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&err);
    let said = said.trim();
    let tail = match said.char_indices().rev().nth(STDERR_QUOTED) {
        Some((i, _)) => format!("…{}", &said[i..]),
        None => said.to_string(),
    };
    let how = match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended by {status}"),
    };
    match tail.is_empty() {
        true => anyhow::bail!("{how}"),
        false => anyhow::bail!("{how}: {tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn the_environment_names_the_watch_and_its_renewed_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!(
            "printf '%s|%s|%s' \"$CERTRENEWD_WATCH\" \"$CERTRENEWD_CERTIFICATE\" \"$CERTRENEWD_CERTIFICATES\" > {}",
            out.display()
        );
        let certs = [PathBuf::from("/w/a.crt"), PathBuf::from("/w/b.pem")];
        let run = run_one(
            Path::new("/w"),
            sh(&script),
            &certs,
            Duration::from_secs(10),
        )
        .await;
        assert!(run.ok, "{run:?}");
        let env = std::fs::read_to_string(&out).unwrap();
        assert_eq!(env, "/w|/w/a.crt|/w/a.crt\n/w/b.pem");
    }

    #[tokio::test]
    async fn a_failure_says_its_status_and_the_end_of_its_stderr() {
        let script = "echo starting >&2; echo 'haproxy: socket refused' >&2; exit 3";
        let run = run_one(Path::new("/w"), sh(script), &[], Duration::from_secs(10)).await;
        assert!(!run.ok);
        assert_eq!(
            run.detail,
            "exited with status 3: starting\nhaproxy: socket refused"
        );
        let missing = vec!["/nonexistent/reload".to_string()];
        let run = run_one(Path::new("/w"), missing, &[], Duration::from_secs(10)).await;
        assert!(!run.ok);
        assert!(
            run.detail.starts_with("cannot start /nonexistent/reload: "),
            "{}",
            run.detail
        );
    }

    #[tokio::test]
    async fn a_command_past_its_timeout_is_killed() {
        let started = std::time::Instant::now();
        let run = run_one(
            Path::new("/w"),
            // A shell whose child holds stderr open: the whole group is killed.
            sh("sleep 30; true"),
            &[],
            Duration::from_millis(300),
        )
        .await;
        assert!(!run.ok);
        assert!(run.detail.contains("killed"), "{}", run.detail);
        assert!(started.elapsed() < Duration::from_secs(10));
        // Its group is gone too: the shell's `sleep`, which held stderr, was killed with it.
        let pid: i32 = run
            .detail
            .split("pid ")
            .nth(1)
            .and_then(|r| r.split(':').next())
            .and_then(|p| p.parse().ok())
            .expect("the pid in the detail");
        let in_group = || {
            let procs = std::fs::read_dir("/proc").unwrap().flatten();
            procs
                .filter(|e| {
                    let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                    // pid (comm) state ppid pgrp ...
                    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
                    let fields: Vec<&str> = after.split_whitespace().collect();
                    // A killed orphan may still be a zombie for its new parent to reap.
                    fields.get(2) == Some(&pid.to_string().as_str()) && fields.first() != Some(&"Z")
                })
                .count()
        };
        // SIGKILL is delivered at once but a process on a loaded machine takes a moment to
        // exit: a group still there after a second was not killed.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while in_group() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(in_group(), 0, "processes left in group {pid}");
    }
}
