//! The command-line interface: one file per subcommand, and the assembly they share.

pub mod acknowledge;
mod alarms_table;
pub mod check;
mod names;
pub mod renew;
pub mod renew_report;
pub mod target;
pub mod text_table;

pub use alarms_table::render_table as render_alarms_table;
pub use check::render_table as render_check_table;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// Keeps the TLS certificates of Kubernetes and etcd control-plane nodes from expiring.
///
/// certrenewd scans the watched directories (default /etc/etcd, /etc/kubernetes/pki and
/// /var/lib/kubelet/pki) and kubeconfig files (kubeadm's admin.conf, ...), renews every leaf
/// certificate inside the renewal window from the local CA whose key is on this node (same
/// subject, names and usages), re-issues a CA near its end with its own key (so everything it signed keeps
/// verifying), installs it atomically with a backup, restarts the systemd units and static pods
/// that use it, and raises alarms in journald: 250.003 when a renewal failed or a service
/// was not updated, 500.200/500.210 for a certificate expiring or expired, 500.220 for a
/// serving certificate whose names miss an address its server uses, 500.230/500.240/
/// 500.250 for another controller gone quiet, failing, or holding a different CA or key,
/// and 500.260 for services still on a re-issued CA's old certificate near its end.
#[derive(Debug, Parser)]
#[command(
    name = "certrenewd",
    version,
    propagate_version = true,
    max_term_width = 100,
    // clap's own `help` subcommand refuses `help --help`; ours is `Command::Help`.
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Configuration file [default: $CERTRENEWD_CONFIG, else /etc/certrenewd/certrenewd.toml;
    /// built-in defaults when that default file does not exist]
    #[arg(
        long,
        global = true,
        env = "CERTRENEWD_CONFIG",
        value_name = "PATH",
        help_heading = "Global options"
    )]
    pub config: Option<PathBuf>,

    /// More log output (-v info, -vv debug, -vvv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = "Global options")]
    pub verbose: u8,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts (the command's man page lists its fields).
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daemon: passes on the cron schedule (and at start), in the foreground.
    ///
    /// Meant to run as a systemd Type=notify service: READY=1 after the configuration is
    /// valid and the first scan is done, STATUS= with the next pass and the last result,
    /// WATCHDOG=1 when WatchdogSec= is set, withheld while a pass makes no progress (systemd
    /// then restarts the daemon). SIGHUP reloads the configuration (an invalid one is
    /// reported and the running one kept); SIGTERM ends the pass in flight at its next step,
    /// without waiting for the state lock, the restart lock or the quorum gate (what it did
    /// not restart stays owed).
    ///
    /// Before READY=1, whatever run_on_start says, an install that a crash interrupted is
    /// finished or rolled back (and static pod manifests a crash left out are put back), so
    /// the units the shipped unit is ordered Before= (etcd, kubelet, kube-apiserver, ...)
    /// start on whole certificate/key pairs at boot. The restarts that install owes are done
    /// by a pass at once. With run_on_start, leaves that are due or have expired are renewed
    /// before READY=1 when none of their services runs yet (at boot: they then start on the
    /// renewed certificates); otherwise the pass after READY=1 renews and restarts them.
    Run,
    /// Every certificate under the watched paths, its expiry and status; changes nothing.
    ///
    /// Status is ok, due (inside the renewal window, renewable here), expired (renewable
    /// here) or unrenewable (this host cannot renew it; the reason says why and what to do).
    /// A serving certificate whose names miss an address etcd's or kube-apiserver's flags
    /// use gets a line saying which and where it was found (add_missing_names adds them at
    /// its renewal). Exits 0 even when certificates are due, unless --fail-due is given.
    Check {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Exit 1 when any certificate is due, expired, unrenewable or misses a name it is
        /// served on, a watched file cannot be read, or restarts are owed (renewed files
        /// the services may not run on yet). With --cluster: when any controller
        /// is not reporting, holds a file that drifted, or has a certificate that is not ok.
        #[arg(long)]
        fail_due: bool,
        /// Every controller of the cluster instead of this node: each one's record as its
        /// certrenewd published it in etcd (beside the restart lock), one section per etcd
        /// member, the summary line first. A member without a record shows "certrenewd not
        /// running or not reporting"; a record older than two of its scheduled passes is
        /// stale and shows its age; a CA, CA key or sa.pub that differs between controllers
        /// is drift. Works where the local daemon is stopped. With coordination off or no
        /// etcd member answering, one line says why and the exit status is 1.
        #[arg(long)]
        cluster: bool,
    },
    /// One renewal pass now, the same code path as a scheduled pass.
    ///
    /// Renews every due or expired leaf certificate whose CA key is on this host, and every
    /// CA within ca_renew_before_days whose signing key is (or only the PATHs given; a CA
    /// keeps its key), backs up the old files, installs the new ones atomically, restarts
    /// the units of their watches over D-Bus and updates the alarms. Exits 0 when every
    /// due certificate was renewed and every affected unit is active again, 1 otherwise.
    Renew {
        /// Print what the pass would do, change nothing, and exit as it would.
        #[arg(long)]
        dry_run: bool,
        /// Renew the selected certificates even if they are not due.
        #[arg(long)]
        force: bool,
        /// With --force and no PATH: renew every leaf certificate now, as `kubeadm certs
        /// renew all` does (a kubeconfig certificate its owner renews, like kubelet's, is
        /// left to it). Try it with --dry-run first.
        #[arg(long, requires = "force", conflicts_with = "paths")]
        all: bool,
        /// Write the new certificates but restart no unit (and raise no alarm for that);
        /// `check` shows them owed a restart by hand until each has started again.
        #[arg(long)]
        no_restart: bool,
        /// Run this pass even while an inhibit is set (`certrenewd inhibit`); the inhibit
        /// stays for later passes.
        #[arg(long)]
        ignore_inhibit: bool,
        /// Output format of the result: what became of each certificate, unit and static pod.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Certificate files to limit the pass to (default: everything due).
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Defer renewal passes during maintenance (an upgrade), or lift that.
    ///
    /// While inhibited, passes are deferred: logged, shown in `systemctl status`, never
    /// alarmed, and run as soon as the inhibit lifts (at --until, on --clear, or when every
    /// inhibit_paths flag file is gone). Expired certificates are still alarmed. Without
    /// options, shows the inhibit in force.
    Inhibit {
        /// Why passes are deferred (shown in logs and status).
        #[arg(long, value_name = "TEXT", conflicts_with = "clear", value_parser = non_empty)]
        reason: Option<String>,
        /// When the inhibit lifts by itself: RFC 3339 (2026-11-22T06:00:00Z) or a duration (90m, 6h, 2d).
        #[arg(long, value_name = "TIME", requires = "reason")]
        until: Option<String>,
        /// Lift the inhibit set with this command.
        #[arg(long)]
        clear: bool,
    },
    /// The alarms active now (250.003, 500.200, 500.210, 500.220, 500.230, 500.240, 500.250,
    /// 500.260).
    ///
    /// A row per alarm, its text, then its reason one entry per line, cut to the page and
    /// at most five of them; with -v, every entry whole. --output json has the whole reason.
    Alarms {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Say that the copies of a re-issued CA outside this node (workers' kubeconfigs,
        /// clients' trust bundles, kubeadm's cluster-info) now hold its new certificate:
        /// `check` stops showing until when the old one is trusted, and its 500.200 or
        /// 500.210 for the old certificate clears at the next pass.
        #[arg(long, value_name = "CA-PATH")]
        acknowledge: Option<PathBuf>,
    },
    /// Print the help of certrenewd, or of one of its commands (as COMMAND --help does).
    ///
    /// The manual pages say more: certrenewd(8) for the configuration, alarms, files and
    /// examples, and certrenewd-COMMAND(8) for each command.
    Help {
        /// The command to explain.
        #[arg(value_name = "COMMAND", value_enum)]
        command: Option<HelpTopic>,
    },
}

/// The commands `certrenewd help` explains: every subcommand (listed by name only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HelpTopic {
    Run,
    Check,
    Renew,
    Inhibit,
    Alarms,
    Help,
}

/// Prints the long help of certrenewd, or of the command `topic`, as `--help` does.
pub fn print_help(topic: Option<HelpTopic>) -> std::io::Result<()> {
    let mut cmd = Cli::command();
    // Built, the subcommands carry the global options and their full usage line.
    cmd.build();
    let name = topic.and_then(|t| t.to_possible_value());
    match name.and_then(|n| cmd.find_subcommand_mut(n.get_name()).cloned()) {
        Some(mut sub) => sub.print_long_help(),
        None => cmd.print_long_help(),
    }
}

/// Each reader (a static pod or unit named in `also_read_by`) with the files it reads, from
/// (file, its readers) pairs, in the order first met: an operator reads one line per reader.
fn by_reader<'a>(
    files: impl Iterator<Item = (&'a str, &'a [String])>,
) -> Vec<(&'a str, Vec<&'a str>)> {
    let mut readers: Vec<(&str, Vec<&str>)> = Vec::new();
    for (file, its) in files {
        for reader in its {
            match readers.iter_mut().find(|(r, _)| r == reader) {
                Some((_, files)) => files.push(file),
                None => readers.push((reader, vec![file])),
            }
        }
    }
    readers
}

/// What a reader named in `also_read_by` is, and the watch key that would name it:
/// (`unit`, `units`) or (`static pod`, `static_pods`).
fn reader_kind(name: &str) -> (&'static str, &'static str) {
    match name.ends_with(".service") {
        true => ("unit", "units"),
        false => ("static pod", "static_pods"),
    }
}

/// A reason an operator will read later: not empty, not blank.
fn non_empty(s: &str) -> Result<String, String> {
    match s.trim().is_empty() {
        true => Err("give the reason, e.g. --reason \"kubeadm upgrade to 1.31\"".into()),
        false => Ok(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_a_help_topic() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let commands: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
        let topics: Vec<String> = HelpTopic::value_variants()
            .iter()
            .filter_map(|t| t.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(commands, topics);
    }
}
