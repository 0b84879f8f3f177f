//! What an operator reads when something is wrong, through the real binary: a bad
//! configuration file (every mistake at its line and column, in file order, exit 2),
//! `certrenewd help`, and `renew PATH` naming a CA certificate or a private key. The PKI is
//! made by the real openssl CLI (`tests/fixtures/mkpki.sh`).

mod common;

use common::pki;
use std::fs;
use std::path::Path;

use pki::{BIN, Run, Tree, run_bin, run_cmd};

const LAYOUTS: &[&str] = &["starlingx"];

/// `certrenewd --config FILE ARGS` with `text` as FILE, and FILE's path.
fn with_config(text: &str, args: &[&str]) -> (Run, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("certrenewd.toml");
    fs::write(&file, text).unwrap();
    (run_bin(&file, args), file.display().to_string())
}

#[test]
fn every_mistake_in_a_configuration_is_named_in_file_order_with_line_and_column() {
    let text = "\
renew_before_days = 99999999999999999999
schedule = \"0 61 25 * * *\"
bus = \"session\"
[[watch]]
path = \"/srv/pki\"
[[watch]]
path = \"/srv/pki\"
";
    // The daemon refuses it as `check` does: exit 2, which the unit does not restart on.
    for command in ["check", "run"] {
        let (run, file) = with_config(text, &[command]);
        assert_eq!(run.code, 2, "{run}");
        assert_eq!(run.stdout, "", "{run}");
        assert_eq!(
            run.stderr,
            format!(
                "\
certrenewd: invalid configuration: 4 problems in {file}
  {file}:1:21: renew_before_days: 99999999999999999999 is too large: the limit is 3650
  {file}:2:12: schedule: \"0 61 25 * * *\": minute 61 is out of range 0-59; hour 25 is out of range 0-23
  {file}:3:7: bus: \"session\" is not a bus: use \"system\" or \"user\"
  {file}:7:8: watch[2].path: /srv/pki is watched twice: already by watch[1] at line 5
"
            ),
            "{run}"
        );
    }
}

#[test]
fn a_schedule_that_never_fires_is_refused() {
    let (run, file) = with_config("schedule = \"0 0 0 31 2 *\"\n", &["run"]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(
        run.stderr,
        format!(
            "certrenewd: invalid configuration {file}:1:12: schedule: \"0 0 0 31 2 *\": never fires: no date matches day-of-month 31 and month 2 (cron finds no such time in any year ahead)\n"
        ),
        "{run}"
    );
}

#[test]
fn help_answers_help_and_needs_no_configuration() {
    let help = |args: &[&str]| {
        // A configuration that cannot be read: help must not need it.
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["--config", "/nonexistent/certrenewd.toml"])
            .args(args);
        run_cmd(&mut cmd, args)
    };
    let run = help(&["help", "--help"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.starts_with(
            "Print the help of certrenewd, or of one of its commands (as COMMAND --help does)."
        ),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("Usage: certrenewd help [OPTIONS] [COMMAND]"),
        "{run}"
    );
    for command in ["run", "check", "renew", "inhibit", "alarms"] {
        let by_help = help(&["help", command]);
        let by_flag = help(&[command, "--help"]);
        assert_eq!(by_help.code, 0, "{by_help}");
        assert_eq!(by_help.stdout, by_flag.stdout);
        assert!(
            by_help.stdout.contains("Global options:")
                && by_help.stdout.contains("--config <PATH>")
                && by_help.stdout.contains("-v, --verbose"),
            "{by_help}"
        );
        assert!(!by_help.stdout.contains("INTERFACE"), "{by_help}");
    }
    let run = help(&["help", "bogus"]);
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("[possible values: run, check, renew, inhibit, alarms, help]"),
        "{run}"
    );
}

#[test]
fn renew_of_a_ca_or_a_key_says_what_it_is_and_what_to_do_instead() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let before = t.snapshot();
    let p = |rel: &str| t.abs(rel).display().to_string();
    let ca = p("etc/etcd/ca.crt");
    let run = t.run(&["renew", "--dry-run", &ca]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(run.stdout, "", "{run}");
    assert_eq!(
        run.stderr,
        format!(
            "certrenewd: {ca} is a CA certificate (CN=etcd-ca): certrenewd does not renew CAs. Renew it with your PKI tool; then `certrenewd renew` re-issues the certificates it signed as they fall due, or at once: `certrenewd renew --force {} {} {}`\n",
            p("etc/etcd/etcd-client.crt"),
            p("etc/etcd/etcd-server.crt"),
            p("etc/kubernetes/pki/apiserver-etcd-client.crt"),
        ),
        "{run}"
    );

    let (leaf_key, ca_key) = (
        p("etc/etcd/etcd-server.key"),
        p("etc/kubernetes/pki/ca.key"),
    );
    let run = t.run(&["renew", "--force", &leaf_key, &ca_key]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(
        run.stderr,
        format!(
            "\
certrenewd: {leaf_key} is a private key, not a certificate: renew the certificate that uses it instead: `certrenewd renew --force {}`
certrenewd: {ca_key} is the private key of the CA certificate {}: certrenewd does not renew CAs; renew it with your PKI tool
",
            p("etc/etcd/etcd-server.crt"),
            p("etc/kubernetes/pki/ca.crt"),
        ),
        "{run}"
    );
    // Nothing was renewed: not even the due leaf named beside the CA.
    let run = t.run(&["renew", &p("etc/etcd/etcd-server.crt"), &ca]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(t.snapshot(), before);
    assert!(!Path::new(&t.state).join("alarms.json").exists());

    // A file that is not there is named as such, wherever it would be.
    for missing in [
        p("etc/etcd/gone.crt"),
        "/nonexistent/certrenewd/x.crt".into(),
    ] {
        let run = t.run(&["renew", "--dry-run", &missing]);
        assert_eq!(run.code, 2, "{run}");
        assert_eq!(run.stderr, format!("certrenewd: {missing}: no such file\n"));
    }

    // The leaf alone is renewed as before.
    let run = t.run(&["renew", "--no-restart", &p("etc/etcd/etcd-server.crt")]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("etcd-server.crt"), "{run}");
}
