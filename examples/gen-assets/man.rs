//! The manual pages: certrenewd(8) and certrenewd-COMMAND(8) for each command, from the clap
//! definitions (name, synopsis, description, options) and the hand-written sections in
//! `pages/` (configuration, JSON, exit status, files, examples), and certrenewd.toml(5), the
//! configuration file's page, from the same configuration section. Each page stands on its own:
//! it names no file that the package does not install.

use std::io::Write;

use clap::CommandFactory;

/// The sections after the options, per page.
const MAIN: &str = include_str!("pages/certrenewd.roff");
const SECTIONS: &[(&str, &str)] = &[
    ("run", include_str!("pages/certrenewd-run.roff")),
    ("check", include_str!("pages/certrenewd-check.roff")),
    ("renew", include_str!("pages/certrenewd-renew.roff")),
    ("inhibit", include_str!("pages/certrenewd-inhibit.roff")),
    ("alarms", include_str!("pages/certrenewd-alarms.roff")),
];
/// The configuration file's keys, in certrenewd(8) and the file's own page.
const KEYS: &str = include_str!("pages/configuration.roff");
/// certrenewd.toml(5), the configuration file's page (Debian's convention).
const FILE_PAGE: &str = include_str!("pages/certrenewd.toml.roff");
/// Where a page shows the configuration's keys, the shipped configuration file, and the
/// alarms.
const CONFIGURATION: &str = ".\\\" @CONFIGURATION@\n";
const DEFAULT_CONFIGURATION: &str = ".\\\" @DEFAULT-CONFIGURATION@\n";
const ALARMS: &str = ".\\\" @ALARMS@\n";
/// The commands without a page of their own: `help` prints what the pages' OPTIONS say.
const NO_PAGE: &[&str] = &["help"];

/// Every page: (file name, roff source).
pub fn pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = certrenewd::cli::Cli::command();
    // Built, every subcommand carries the global options (--config, -v).
    cmd.build();
    let mut out = Vec::new();
    for (name, sections) in SECTIONS {
        let sub = cmd
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("no command {name}"))
            .clone();
        let title = format!("certrenewd-{name}");
        // The page is certrenewd-NAME(8); the synopsis runs `certrenewd NAME`.
        let sub = sub
            .display_name(title.clone())
            .bin_name(format!("certrenewd {name}"));
        out.push((format!("{title}.8"), page(sub, &expand(sections))?));
    }
    for sub in cmd.get_subcommands() {
        let listed = SECTIONS.iter().any(|(n, _)| *n == sub.get_name());
        assert!(
            listed || NO_PAGE.contains(&sub.get_name()),
            "command {} has no man page: add pages/certrenewd-{0}.roff",
            sub.get_name()
        );
    }
    let main = NO_PAGE
        .iter()
        .fold(cmd, |c, n| c.mut_subcommand(*n, |s| s.hide(true)));
    let version = main.get_version().unwrap_or_default().to_string();
    out.push(("certrenewd.8".into(), page(main, &expand(MAIN))?));
    let mut file = format!(
        ".TH \"certrenewd.toml\" 5 \"{}\" \"certrenewd {version}\" \"File Formats Manual\"\n",
        release_date()
    )
    .into_bytes();
    file.extend(expand(FILE_PAGE).into_bytes());
    out.push(("certrenewd.toml.5".into(), file));
    Ok(out)
}

/// clap_mangen's sections for `cmd` (without its VERSION section: the version is in the
/// page's footer), then `sections`.
fn page(cmd: clap::Command, sections: &str) -> std::io::Result<Vec<u8>> {
    let title = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let version = cmd.get_version().unwrap_or_default().to_string();
    let commands = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let man_cmd = &cmd.clone();
    let man = clap_mangen::Man::new(cmd).section("8");
    let mut page = Vec::new();
    // Written here: clap_mangen leaves out an empty date, which shifts the footer's fields.
    writeln!(
        page,
        ".TH \"{title}\" 8 \"{}\" \"certrenewd {version}\" \"System Manager's Manual\"",
        release_date()
    )?;
    man.render_name_section(&mut page)?;
    // Ours: clap_mangen's synopsis leaves out option values (`[--config]`).
    page.write_all(synopsis(man_cmd).as_bytes())?;
    man.render_description_section(&mut page)?;
    // clap_mangen puts an empty line (a paragraph) between two line breaks before an
    // option's possible values; roff skips it with a warning.
    let mut options = Vec::new();
    man.render_options_section(&mut options)?;
    let options = String::from_utf8_lossy(&options).replace("\n.br\n\n.br\n", "\n.br\n");
    page.write_all(options.as_bytes())?;
    if commands {
        man.render_subcommands_section(&mut page)?;
    }
    page.write_all(sections.as_bytes())?;
    Ok(page)
}

/// The date of the package's release, from its Debian changelog's first entry (`YYYY-MM-DD`):
/// the pages are dated as the package is, the same on every build.
fn release_date() -> String {
    let changelog = include_str!("../../systemd/deb/changelog");
    let trailer = (changelog.lines())
        .find_map(|l| l.strip_prefix(" -- "))
        .expect("the changelog's first entry has a trailer");
    let date = trailer
        .split_once(">  ")
        .expect("a date after the maintainer")
        .1;
    let date = time::OffsetDateTime::parse(date, &time::format_description::well_known::Rfc2822)
        .unwrap_or_else(|e| panic!("the changelog's date {date:?}: {e}"));
    let f = time::macros::format_description!("[year]-[month]-[day]");
    date.format(&f).expect("a date")
}

/// The SYNOPSIS section: the command, then each option with its value (`[--config FILE]`),
/// the arguments, and `<COMMAND>` when it has subcommands.
fn synopsis(cmd: &clap::Command) -> String {
    let bold = |t: &str| format!("\\fB{}\\fR", t.replace('-', "\\-"));
    let name = cmd.get_bin_name().unwrap_or(cmd.get_name());
    let mut parts = vec![bold(name)];
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let choices: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("\\fI{}\\fR", v.get_name()))
            .collect();
        let values: Vec<String> = match arg.get_action().takes_values() {
            false => Vec::new(),
            true if !choices.is_empty() => vec![choices.join("|")],
            true => arg
                .get_value_names()
                .map(|v| v.iter().map(|n| format!("\\fI{n}\\fR")).collect())
                .unwrap_or_else(|| {
                    vec![format!("\\fI{}\\fR", arg.get_id().as_str().to_uppercase())]
                }),
        };
        let repeats = matches!(
            arg.get_action(),
            clap::ArgAction::Count | clap::ArgAction::Append
        );
        let mut text = if arg.is_positional() {
            values.join(" ")
        } else {
            let flags: Vec<String> = arg
                .get_short()
                .map(|c| bold(&format!("-{c}")))
                .into_iter()
                .chain(arg.get_long().map(|l| bold(&format!("--{l}"))))
                .collect();
            std::iter::once(flags.join("|"))
                .chain(values)
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !arg.is_required_set() {
            text = format!("[{text}]");
        }
        if repeats {
            text.push_str("...");
        }
        parts.push(text);
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        parts.push("<\\fICOMMAND\\fR>".into());
    }
    format!(".SH SYNOPSIS\n{}\n", parts.join(" "))
}

/// `sections` with the generated parts in place of their markers.
fn expand(sections: &str) -> String {
    sections
        .replace(CONFIGURATION, KEYS)
        .replace(DEFAULT_CONFIGURATION, &default_configuration())
        .replace(ALARMS, &alarms())
}

/// Every alarm: its ID, text, severity, entity, when it is raised, its MESSAGE_IDs.
fn alarms() -> String {
    use certrenewd::alarms::{AlarmKind, AlarmState};
    let mut out = String::new();
    for kind in AlarmKind::ALL {
        let (entity, when) = match kind {
            AlarmKind::RenewalFailed => (
                "host=<hostname>",
                "A pass could not renew one or more due certificates, or could not read a watched file.",
            ),
            AlarmKind::ServicesNotUpdated => (
                "host=<hostname>",
                "Certificates were renewed but a unit or static pod did not restart or come back active (the certificates are rolled back by default).",
            ),
            AlarmKind::ExpiringSoon => (
                "host=<hostname>.certificate=<path>",
                "A certificate is inside its warning period (a leaf: the renewal window; a CA: ca_warning_days) and was not renewed.",
            ),
            AlarmKind::Expired => (
                "host=<hostname>.certificate=<path>",
                "A certificate has expired and was not renewed.",
            ),
            AlarmKind::NamesMissing => (
                "host=<hostname>.certificate=<path>",
                "A serving certificate's names do not cover an address its server's flags use (etcd's --advertise-client-urls, --initial-advertise-peer-urls, --listen-*; kube-apiserver's --advertise-address, --bind-address). add_missing_names adds them at its renewal.",
            ),
            AlarmKind::ControllerQuiet => (
                "host=<other controller>",
                "Raised on another controller's behalf: an etcd member has no certrenewd record in etcd (its certrenewd is stopped, dead or cannot reach etcd), or a record older than two of its scheduled passes. Seen within two lease_ttl_secs; check --cluster shows it.",
            ),
            AlarmKind::ControllerFailing => (
                "host=<other controller>",
                "Raised on another controller's behalf: its record says its passes have failed for more than a day.",
            ),
            AlarmKind::Drift => (
                "file=<path>",
                "A CA certificate, the public half of a CA key, or sa.pub differs between the controllers that hold it; the reason names the file and the controllers by digest. Raised by every controller that sees it.",
            ),
            AlarmKind::OldCaInUse => (
                "host=<hostname>.certificate=<CA path>",
                "A CA was re-issued here, the services that read it (and hold its old certificate in memory) have not been restarted since (their restarts held: the restart lock or the quorum could not be had), and the old certificate ends within renew_before_days: at its end they stop trusting what it signed.",
            ),
        };
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR {}, {entity}\n\"{}\"\n.br\n{when}\n.br\nRaised: MESSAGE_ID={}\n.br\nCleared: MESSAGE_ID={}\n",
            kind.id(),
            kind.severity(),
            kind.text(),
            kind.message_id(AlarmState::Set),
            kind.message_id(AlarmState::Clear),
        ));
    }
    out
}

/// The shipped configuration file, verbatim.
fn default_configuration() -> String {
    let mut out = String::from(".nf\n");
    for line in include_str!("../../config/certrenewd.toml").lines() {
        out.push_str(&roff_line(line));
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

/// A line of text as roff prints it: backslashes escaped, and no leading dot or quote that
/// roff would take for a request.
fn roff_line(line: &str) -> String {
    let line = line.replace('\\', "\\e");
    match line.starts_with('.') || line.starts_with('\'') {
        true => format!("\\&{line}"),
        false => line,
    }
}
