//! The `certrenewd` binary: parse the command line, set up logging, dispatch, exit status.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use certrenewd::alarms::{self, AlarmStore};
use certrenewd::cli::{self, Cli, Command, Output};
use certrenewd::config::{ConfigError, Settings};
use certrenewd::inventory::checked::Checked;
use certrenewd::pass::inhibit;
use certrenewd::pass::{self, Mode, PassOptions};
use certrenewd::restart::Systemd;

/// Exit status: 0 success, 1 the command ran but something failed, 2 bad usage or configuration.
fn main() -> ExitCode {
    certrenewd::daemon::memory::cap_arenas();
    let cli = Cli::parse();
    certrenewd::logging::init(cli.verbose, matches!(cli.command, Command::Run));
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

/// Writes to stdout; a closed pipe (`certrenewd check | head`) ends output quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = write!(stdout, $($arg)*).and_then(|()| stdout.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e.into());
        }
    }};
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        // Help needs no configuration: it works beside a broken one.
        Command::Help { command } => help(command),
        _ => run_command(Settings::load(cli.config.as_deref())?, cli),
    }
}

/// `certrenewd help [COMMAND]`.
fn help(topic: Option<cli::HelpTopic>) -> anyhow::Result<ExitCode> {
    match cli::print_help(topic) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Every command but `help`, with its settings.
fn run_command(settings: Settings, cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(certrenewd::daemon::run(settings, cli.config))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            output,
            fail_due,
            cluster: true,
        } => check_cluster(&settings, output, fail_due),
        Command::Check {
            output, fail_due, ..
        } => check(&settings, output, fail_due),
        Command::Renew {
            dry_run,
            force,
            all,
            no_restart,
            ignore_inhibit,
            output,
            paths,
        } => {
            let only = match paths.is_empty() {
                true => None,
                false => match renew_targets(&settings, &paths, force) {
                    Ok(p) => Some(p),
                    Err(code) => return Ok(code),
                },
            };
            if force && only.is_none() && !all {
                eprintln!(
                    "certrenewd: --force needs the certificate PATHs to renew, or --all to renew every leaf certificate now (try `certrenewd renew --force --all --dry-run` first)"
                );
                return Ok(ExitCode::from(2));
            }
            let opts = PassOptions {
                force,
                only,
                mode: match (dry_run, no_restart) {
                    (true, _) => Mode::DryRun,
                    (false, true) => Mode::NoRestart,
                    (false, false) => Mode::Run,
                },
                ignore_inhibit,
                table_lists_unrenewable: dry_run && matches!(output, Output::Table),
                ..PassOptions::default()
            };
            renew(&settings, &opts, output)
        }
        Command::Inhibit {
            reason,
            until,
            clear,
        } => inhibit(&settings, reason, until, clear),
        Command::Help { command } => help(command),
        Command::Alarms {
            acknowledge: Some(ca),
            ..
        } => cli::acknowledge::run(&settings, &ca),
        Command::Alarms { output, .. } => {
            let active = AlarmStore::all(&settings.state_dir)?;
            match output {
                Output::Table => {
                    // -v: every reason entry whole, not the first five cut to the page.
                    let width = cli::text_table::page_width();
                    out!(
                        "{}",
                        cli::render_alarms_table(&active, width, cli.verbose > 0)
                    )
                }
                Output::Json => out!("{}\n", alarms::render_json(&active)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `certrenewd check`.
fn check(settings: &Settings, output: Output, fail_due: bool) -> anyhow::Result<ExitCode> {
    // What the watched units run, as systemd tells it: the same reading a pass makes.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let node = rt.block_on(pass::read_node(settings));
    let named = pass::watching_named(settings, &node);
    let settings = &named;
    let policy = pass::policy(settings, &PassOptions::default(), Default::default());
    let (inventory, plan) = pass::scan_and_plan(settings, &policy, &node);
    let by_hand = rt.block_on(cli::check::by_hand(settings, &node));
    let report = cli::check::report(settings, &inventory, &plan, &node, by_hand);
    match output {
        Output::Table => out!(
            "{}",
            cli::render_check_table(&report, cli::text_table::page_width())
        ),
        Output::Json => out!("{}\n", serde_json::to_string_pretty(&report)?),
    }
    // Due, expired, unrenewable here, served on a name it lacks (500.220), something that
    // could not be read, or certificates installed that their services may not run on yet
    // (restarts owed, by a pass or by hand, an install a crash interrupted).
    let attention = (plan.items.iter())
        .any(|i| i.status != certrenewd::plan::Status::Ok || !i.names_missing.is_empty())
        || !report.errors.is_empty()
        || report.restarts_owed.is_some()
        || report.restarts_by_hand.is_some()
        || report.interrupted_renewal.is_some();
    // What this user may not read is not known: the check could not be done (exit 1,
    // whether or not `--fail-due` is given).
    let done = report.permission_denied.is_none();
    // Ended by the process's exit, not freed a certificate at a time (50 ms for 10,000).
    std::mem::forget(report);
    std::mem::forget((inventory, plan));
    Ok(exit_code(done && !(fail_due && attention)))
}

/// `certrenewd check --cluster`: every controller's record, read from etcd within a bound.
fn check_cluster(settings: &Settings, output: Output, fail_due: bool) -> anyhow::Result<ExitCode> {
    const ASK_FOR: std::time::Duration = std::time::Duration::from_secs(10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (conf, dir) = (&settings.coordination, &settings.state_dir);
    let read = rt.block_on(async {
        // Where etcd's settings and client pairs are, as a pass reads the node.
        let node = pass::read_node(settings).await;
        let gate = certrenewd::coordinate::EtcdGate::new(conf)
            .reading_in(dir)
            .knowing(&node);
        let read = certrenewd::coordinate::publish::read_cluster(conf, gate);
        match tokio::time::timeout(ASK_FOR, read).await {
            Ok(r) => r,
            Err(_) => Err(certrenewd::coordinate::publish::Unreached::Not(format!(
                "no etcd member answered within {}s",
                ASK_FOR.as_secs()
            ))),
        }
    });
    let cluster = match read {
        Ok(c) => c,
        Err(why) => {
            eprintln!("certrenewd: check --cluster: cannot read the cluster's records: {why}");
            return Ok(ExitCode::from(1));
        }
    };
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let view = cli::check::cluster::view(&cluster, now);
    match output {
        Output::Table => out!(
            "{}",
            cli::check::cluster::render(&view, cli::text_table::page_width())
        ),
        Output::Json => out!("{}\n", serde_json::to_string_pretty(&view)?),
    }
    Ok(exit_code(!fail_due || view.all_well()))
}

/// The certificate files `renew PATH...` is limited to; each problem is said and the exit
/// status is 2 (bad usage) when one is not a certificate file a pass can renew.
fn renew_targets(
    settings: &Settings,
    paths: &[std::path::PathBuf],
    force: bool,
) -> Result<Vec<std::path::PathBuf>, ExitCode> {
    let paths = cli::renew::resolve_paths(settings, paths).map_err(|e| {
        eprintln!("certrenewd: {}", certrenewd::causes::Causes(&e));
        ExitCode::from(2)
    })?;
    let inventory = certrenewd::inventory::Inventory::scan_watches(
        &settings.watches,
        &Checked::open(&settings.state_dir),
    );
    let refused = cli::target::refusals(&inventory, &paths, force, settings.renew_cas);
    for why in &refused {
        eprintln!("certrenewd: {why}");
    }
    match refused.is_empty() {
        true => Ok(cli::target::as_listed(&inventory, paths)),
        false => Err(ExitCode::from(2)),
    }
}

/// `certrenewd renew`.
fn renew(settings: &Settings, opts: &PassOptions, output: Output) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (bus, settle) = (settings.bus, settings.restart_settle);
    let sinks = pass::sinks(settings);
    // Ctrl-C, a hang-up or SIGTERM while a static pod's manifest is held out would leave
    // etcd or the API server down until the daemon's next pass: like the daemon, the pass
    // ends at its next step instead, every manifest put back, what is left owed.
    let (stop, stopped) = certrenewd::coordinate::Stop::channel();
    let opts = PassOptions {
        stop: stopped,
        ..opts.clone()
    };
    // A panic mid-pass (a bug) must not leave etcd or the API server down with its manifest
    // held out until the daemon's next look: the pass's state lock is released as the
    // panic unwinds, and what it held out goes back before the panic goes on.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            let _signals = tokio::spawn(stop_on_signals(stop));
            // On a terminal, what the pass waits for is a live line on stderr; piped, nothing.
            let live = std::io::IsTerminal::is_terminal(&std::io::stderr())
                .then(|| tokio::spawn(certrenewd::live::show()));
            let report = pass::run(
                settings,
                &opts,
                async move || Systemd::connect(bus).await.map(|s| s.with_settle(settle)),
                pass::Seams::etcd(settings, &opts.stop),
                sinks.clone(),
            )
            .await;
            if let Some(live) = live {
                live.abort();
                certrenewd::live::clear();
            }
            report
        })
    }));
    let report = match ran {
        Ok(report) => report,
        Err(panic) => {
            pass::put_back_orphans(&settings.state_dir, "this renew, which panicked");
            std::panic::resume_unwind(panic);
        }
    };
    let opts = &opts;
    let code = print_renewal(settings, opts, output, report);
    // The report is out and the lock released; the alarm hook may still be running.
    pass::flush_sinks(&sinks);
    code
}

/// Asks `stop` on the first SIGINT, SIGTERM, SIGHUP or SIGQUIT (Ctrl-\, whose default
/// would dump core with a manifest held out), and keeps taking them after: the pass
/// finishes its step in flight (a manifest held out goes back) and stops.
async fn stop_on_signals(stop: certrenewd::coordinate::StopSender) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup), Ok(mut quit)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
        signal(SignalKind::quit()),
    ) else {
        tracing::warn!("cannot install signal handlers: a signal ends this pass at once");
        return;
    };
    let mut asked = false;
    loop {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
            _ = quit.recv() => "SIGQUIT",
        };
        if !asked {
            tracing::warn!(
                "{name}: finishing the step in flight (a static pod's manifest goes back), restarting nothing more; the restarts left stay owed"
            );
            asked = true;
        }
        stop.request(name);
    }
}

/// Prints what a `renew` pass did; its exit status.
fn print_renewal(
    settings: &Settings,
    opts: &PassOptions,
    output: Output,
    report: anyhow::Result<pass::PassReport>,
) -> anyhow::Result<ExitCode> {
    let report = match report {
        Ok(r) => r,
        // A script reading the JSON gets a document all the same: why there is no report.
        Err(e) if output == Output::Json => {
            let why = certrenewd::causes::Causes(&e).to_string();
            let doc = serde_json::json!({ "error": why, "success": false });
            out!("{}\n", serde_json::to_string_pretty(&doc)?);
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    // A dry run exits as the real pass would, and says so in its summary and JSON.
    let result = match opts.mode == Mode::DryRun {
        true => cli::renew_report::dry_run(settings, &report),
        false => cli::renew_report::report(settings, &report),
    };
    // On a terminal, lines that would run past its edge wrap under the text after the
    // state word (14 columns, in a dry run's plan as in the report).
    let fit = |text: String, hang: usize| match cli::text_table::terminal_width() {
        Some(page) => cli::text_table::wrap_lines(&text, hang, page),
        None => text,
    };
    match output {
        Output::Table if opts.mode == Mode::DryRun => {
            match cli::renew::render_plan(&report, &result) {
                // Nothing would happen: the summary alone says so.
                plan if plan.is_empty() => out!("{}", fit(format!("{}\n", result.summary), 0)),
                plan => out!("{}", fit(format!("{plan}\n{}\n", result.summary), 14)),
            }
        }
        Output::Table => out!("{}", fit(cli::renew_report::render_text(&result), 14)),
        Output::Json => out!("{}\n", serde_json::to_string_pretty(&result)?),
    }
    if report.inhibited.as_ref().is_some_and(|i| !i.clock) {
        eprintln!(
            "certrenewd: renewals are inhibited; lift the inhibit with `certrenewd inhibit --clear`, or run this one pass anyway with `certrenewd renew --ignore-inhibit`"
        );
    }
    Ok(exit_code(result.success))
}

/// `certrenewd inhibit`.
fn inhibit(
    settings: &Settings,
    reason: Option<String>,
    until: Option<String>,
    clear: bool,
) -> anyhow::Result<ExitCode> {
    let now = time::OffsetDateTime::now_utc();
    if clear {
        let had = inhibit::clear(&settings.state_dir)?;
        out!(
            "{}\n",
            if had {
                "inhibit cleared"
            } else {
                "no inhibit was set"
            }
        );
    } else if let Some(reason) = reason {
        let until = match until.map(|u| inhibit::parse_until(&u, now)).transpose() {
            Ok(u) => u,
            Err(e) => {
                eprintln!("certrenewd: {}", certrenewd::causes::Causes(&e));
                return Ok(ExitCode::from(2));
            }
        };
        let inhibit = inhibit::Inhibit {
            reason,
            since: now,
            until,
        };
        inhibit::set(&settings.state_dir, &inhibit)?;
    }
    match inhibit::active(&settings.state_dir, &settings.inhibit_paths, now)? {
        Some(a) => out!("{}\n", a.describe()),
        None => out!("not inhibited\n"),
    }
    Ok(ExitCode::SUCCESS)
}

/// 0 when the command did what it should, else 1.
fn exit_code(ok: bool) -> ExitCode {
    match ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}
