//! Logging: structured entries to journald when running under systemd, plain lines on stderr
//! otherwise. A missing journald is never fatal.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Sets the global subscriber. `daemon` raises the default level to info.
pub fn init(verbose: u8, daemon: bool) {
    let default = match (daemon, verbose) {
        (_, 0) if daemon => "info",
        (_, 0) => "warn",
        (_, 1) => "info",
        (_, 2) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("CERTRENEWD_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("certrenewd={default},warn")));
    // Under systemd stderr is connected to the journal: write native entries instead.
    let journal = std::env::var_os("JOURNAL_STREAM")
        .and_then(|_| tracing_journald::layer().ok())
        .map(|l| {
            l.with_syslog_identifier("certrenewd".into())
                .with_field_prefix(Some("CERTRENEWD".into()))
        });
    let registry = tracing_subscriber::registry().with(filter);
    match journal {
        Some(layer) => registry.with(layer).init(),
        None => registry
            .with(
                tracing_subscriber::fmt::layer()
                    // Clears `renew`'s live line (crate::live) before each log line.
                    .with_writer(|| crate::live::Stderr)
                    .without_time()
                    .with_target(false)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init(),
    }
}
