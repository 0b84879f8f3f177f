//! The command-line interface: one file per subcommand, and the assembly they share.

pub mod check;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Settings;
use crate::inventory::Inventory;
use crate::plan::{Plan, Policy};

/// Keeps the TLS certificates of Kubernetes and etcd control-plane nodes from expiring.
///
/// certrenewd scans the watched directories (default /etc/etcd and /etc/kubernetes/pki),
/// renews every leaf certificate inside the renewal window from the local CA whose key is on
/// this node (same subject, names and usages), installs it atomically with a backup,
/// restarts the systemd units that use it, and raises alarms 250.003/500.200/500.210 in
/// journald when anything fails.
#[derive(Debug, Parser)]
#[command(
    name = "certrenewd",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Configuration file [default: $CERTRENEWD_CONFIG, else /etc/certrenewd/certrenewd.toml;
    /// built-in defaults when that default file does not exist]
    #[arg(long, global = true, env = "CERTRENEWD_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// More log output (-v info, -vv debug, -vvv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
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
    /// JSON for scripts (see INTERFACE.md).
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every certificate under the watched paths, its expiry and status; changes nothing.
    ///
    /// Status is ok, due (inside the renewal window, renewable here), expired (renewable
    /// here) or unrenewable (this host cannot renew it; the reason says why and what to do).
    /// Exits 0 even when certificates are due, unless --fail-due is given.
    Check {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Exit 1 when any certificate is due, expired or unrenewable.
        #[arg(long)]
        fail_due: bool,
    },
}

/// Everything a command needs before it acts: settings, the scan, the plan.
pub struct Assembly {
    /// Validated settings.
    pub settings: Settings,
    /// What is on disk.
    pub inventory: Inventory,
    /// What is due.
    pub plan: Plan,
}

/// The planner's policy from settings.
pub fn policy(settings: &Settings) -> Policy {
    Policy {
        renew_before_days: settings.renew_before_days,
        ca_warning_days: settings.ca_warning_days,
        force: false,
        only: None,
    }
}

/// Scans the watches and plans: the shared first half of `check`, `renew` and a daemon pass.
pub fn assemble(settings: Settings, policy: &Policy) -> Assembly {
    let roots: Vec<PathBuf> = settings.watches.iter().map(|w| w.path.clone()).collect();
    let inventory = Inventory::scan(&roots);
    let plan = crate::plan::plan(&inventory, policy, time::OffsetDateTime::now_utc());
    Assembly {
        settings,
        inventory,
        plan,
    }
}
