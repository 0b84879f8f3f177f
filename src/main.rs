//! The `certrenewd` binary: parse the command line, set up logging, dispatch, exit status.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use certrenewd::cli::{self, Cli, Command, Output};
use certrenewd::config::{ConfigError, Settings};

/// Exit status: 0 success, 1 the command ran but something failed, 2 bad usage or configuration.
fn main() -> ExitCode {
    let cli = Cli::parse();
    certrenewd::logging::init(cli.verbose, false);
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if let Some(cfg) = err.downcast_ref::<ConfigError>() {
                eprintln!("certrenewd: {cfg}");
                return ExitCode::from(2);
            }
            eprintln!("certrenewd: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(cli.config.as_deref())?;
    match cli.command {
        Command::Check { output, fail_due } => {
            let policy = cli::policy(&settings);
            let a = cli::assemble(settings, &policy);
            let report = cli::check::report(&a.settings, &a.inventory, &a.plan);
            match output {
                Output::Table => print!("{}", cli::check::render_table(&report)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            for e in &report.errors {
                tracing::warn!(path = %e.path, "{}", e.reason);
            }
            let due = a
                .plan
                .items
                .iter()
                .any(|i| i.status != certrenewd::plan::Status::Ok);
            Ok(if fail_due && due {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
