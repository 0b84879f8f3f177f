//! What an operator reads when something is wrong, through the real binary: a bad
//! configuration file (every mistake at its line and column, in file order, exit 2),
//! `certrenewd help`, `renew PATH` naming a CA certificate, a private key or a certificate
//! not due, and `renew --dry-run` against the pass it stands for. The PKI is
//! made by the real openssl CLI (`tests/fixtures/mkpki.sh`).

use crate::common;

use common::pki;
use std::fs;
use std::path::Path;

use pki::{BIN, Run, Tree, run_bin, run_cmd};

const LAYOUTS: &[&str] = &["starlingx", "hardway"];

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
fn renew_of_a_ca_with_ca_renewal_on_is_a_same_key_reissue_on_demand() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let p = |rel: &str| t.abs(rel).display().to_string();
    let ca = p("etc/etcd/ca.crt");
    // Not due (ten years left): said so, with how to renew it now.
    let run = t.run(&["renew", "--dry-run", &ca]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .starts_with(&format!("not due       {ca}: ok until "))
            && run
                .stdout
                .contains(&format!("`certrenewd renew --force {ca}` renews it now")),
        "{run}"
    );
    let run = t.run(&["renew", "--dry-run", "--force", &ca]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains(&format!(
            // Made seconds ago for 3650 days: whole tenths left, as check's `9y 364d`.
            "would renew   {ca} (ok, 3649.9 days left; self-signed: re-issued with its own key)"
        )),
        "{run}"
    );
    // Its key names the CA certificate to renew instead.
    let ca_key = p("etc/kubernetes/pki/ca.key");
    let run = t.run(&["renew", "--force", &ca_key]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(
        run.stderr,
        format!(
            "certrenewd: {ca_key} is the private key of the CA certificate {0}: renew the CA certificate instead: `certrenewd renew --force {0}`\n",
            p("etc/kubernetes/pki/ca.crt")
        ),
        "{run}"
    );
}

#[test]
fn renew_of_a_ca_or_a_key_says_what_it_is_and_what_to_do_instead() {
    // With CA renewal off, a CA named is refused before the pass.
    let t = Tree::with_config(LAYOUTS, "starlingx", "renew_cas = false");
    let before = t.snapshot();
    let p = |rel: &str| t.abs(rel).display().to_string();
    let ca = p("etc/etcd/ca.crt");
    let run = t.run(&["renew", "--dry-run", &ca]);
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(run.stdout, "", "{run}");
    assert_eq!(
        run.stderr,
        format!(
            "certrenewd: {ca} is a CA certificate (CN=etcd-ca) and CA renewal is off (renew_cas = false): set renew_cas = true to renew it with the same key, or renew it with your PKI tool; then `certrenewd renew` re-issues the certificates it signed as they fall due, or at once: `certrenewd renew --force {} {} {}`\n",
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
certrenewd: {ca_key} is the private key of the CA certificate {}: CA renewal is off (renew_cas = false); renew it with your PKI tool
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

/// `renew PATH` speaks of the certificates named, and only of them, however the
/// rest of the tree stands: a named certificate that is not due says until when it is good
/// and how to renew it now; a due one beside it is neither renewed nor mentioned.
#[test]
fn renew_path_speaks_of_the_certificates_named_only() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let p = |rel: &str| t.abs(rel).display().to_string();
    // Not due (issued today for a year), while etc/etcd/etcd-server.crt beside it is due.
    let ok = p("etc/kubernetes/pki/apiserver.crt");
    let due = p("etc/etcd/etcd-server.crt");
    // openssl's notAfter, as certrenewd prints times: "2027-11-26 09:53 UTC".
    let end = common::x509(Path::new(&ok), &["-noout", "-enddate"]);
    let end = run_cmd(
        std::process::Command::new("date").args([
            "-u",
            "-d",
            end.trim().trim_start_matches("notAfter="),
            "+%Y-%m-%d %H:%M UTC",
        ]),
        &[],
    )
    .stdout;
    let says = format!(
        "{ok}: ok until {} (364 days left, not yet in the renewal window); `certrenewd renew --force {ok}` renews it now",
        end.trim()
    );
    let before = t.snapshot();

    let run = t.run(&["renew", "--dry-run", &ok]);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        run.stdout,
        format!("not due       {says}\n\n1 certificate: 1 not due — dry run, nothing changed\n"),
        "{run}"
    );

    let run = t.run(&["renew", "--no-restart", &ok]);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        run.stdout,
        format!("not due       {says}\n\n1 certificate: 1 not due — nothing renewed\n"),
        "{run}"
    );
    assert!(!run.stderr.contains("etcd-server"), "{run}");
    assert_eq!(t.snapshot(), before, "a certificate not due was written");

    let run = t.run(&["renew", "--no-restart", "--output", "json", &ok]);
    assert_eq!(run.code, 0, "{run}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let certs = json["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 1, "{run}");
    assert_eq!(certs[0]["path"], ok.as_str());
    assert_eq!(certs[0]["state"], "not_due");
    assert_eq!(
        certs[0]["reason"].as_str().unwrap(),
        says.split_once(": ").unwrap().1
    );
    assert_eq!(t.snapshot(), before);

    // Named with the due one: that one renewed, the other still said not due.
    let run = t.run(&["renew", "--no-restart", &ok, &due]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains(&format!("renewed       {due} serial ")),
        "{run}"
    );
    assert!(
        run.stdout.contains(&format!("not due       {says}")),
        "{run}"
    );
    assert!(
        run.stdout
            .ends_with("2 certificates: 1 renewed, 1 not due; 1 unit: 1 not restarted — done\n"),
        "{run}"
    );
}

/// `renew --dry-run` exits as the pass would, ends with the same kind of summary,
/// and gives the same JSON marked as a dry run; on a hard-way tree whose CA key is not on
/// this host (every due leaf would fail) and on a StarlingX tree (every due leaf renewed).
#[test]
fn a_dry_run_exits_sums_up_and_reports_json_as_the_pass_would() {
    let t = Tree::new(LAYOUTS, "hardway");
    let before = t.snapshot();
    let dry = t.run(&["renew", "--dry-run", "--no-restart"]);
    assert_eq!(dry.code, 1, "{dry}");
    assert!(
        dry.stdout
            .trim_end()
            .ends_with("would fail — dry run, nothing changed; the pass would fail"),
        "{dry}"
    );
    let json = t.run(&["renew", "--dry-run", "--no-restart", "--output", "json"]);
    assert_eq!(json.code, 1, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["success"], false);
    let certs = v["certificates"].as_array().unwrap();
    assert!(!certs.is_empty(), "{json}");
    for c in certs {
        assert_eq!(c["state"], "would_fail", "{c}");
        assert!(
            c["reason"]
                .as_str()
                .unwrap()
                .contains("CA key not on this host"),
            "{c}"
        );
    }
    assert_eq!(t.snapshot(), before, "a dry run changed the tree");
    let real = t.run(&["renew", "--no-restart", "--output", "json"]);
    assert_eq!(real.code, dry.code, "{real}");
    let r: serde_json::Value = serde_json::from_str(&real.stdout).unwrap();
    assert_eq!(r["dry_run"], false);
    let failed: Vec<&serde_json::Value> = r["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["path"])
        .collect();
    let would: Vec<&serde_json::Value> = certs.iter().map(|c| &c["path"]).collect();
    assert_eq!(
        failed, would,
        "the dry run named other certificates than the pass"
    );

    let t = Tree::new(LAYOUTS, "starlingx");
    let dry = t.run(&["renew", "--dry-run", "--no-restart", "--output", "json"]);
    assert_eq!(dry.code, 0, "{dry}");
    let v: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["success"], true);
    let would: Vec<&serde_json::Value> = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|c| assert_eq!(c["state"], "would_renew", "{c}"))
        .map(|c| &c["path"])
        .collect();
    assert!(!would.is_empty(), "{dry}");
    let real = t.run(&["renew", "--no-restart", "--output", "json"]);
    assert_eq!(real.code, 0, "{real}");
    let r: serde_json::Value = serde_json::from_str(&real.stdout).unwrap();
    let renewed: Vec<&serde_json::Value> = r["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|c| assert_eq!(c["state"], "renewed", "{c}"))
        .map(|c| &c["path"])
        .collect();
    assert_eq!(
        renewed, would,
        "the dry run named other certificates than the pass"
    );
}

/// A dry run on a tree where nothing is due says so once: the plan has no lines of its
/// own then, and the summary is what it would have repeated.
#[test]
fn a_dry_run_with_nothing_due_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let watched = dir.path().join("pki");
    fs::create_dir(&watched).unwrap();
    pki::ec_key(&watched.join("ca.key"));
    pki::self_signed_ca(
        &watched.join("ca.key"),
        "/CN=quiet-ca",
        &watched.join("ca.crt"),
    );
    let config = format!(
        "state_dir = {}\n\n[[watch]]\npath = {}\n",
        pki::toml_str(&dir.path().join("state")),
        pki::toml_str(&watched)
    );
    let (run, _) = with_config(&common::single_node(&config), &["renew", "--dry-run"]);
    println!("{}", run.stdout);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        run.stdout, "nothing to renew: 1 certificates, none due\n",
        "{run}"
    );
}

/// `renew PATH` naming a file under a watched directory that holds no certificate (a note
/// saved as `.crt`) is refused before the pass, naming the file and what was found in it,
/// rather than a pass that says "nothing to renew" of the other certificates.
#[test]
fn renew_of_a_file_that_is_not_a_certificate_names_it_and_why() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let notes = t.abs("etc/etcd/notes.crt");
    fs::write(&notes, "remember to renew the certificates\n").unwrap();
    let notes = notes.display().to_string();
    let runs = [
        &["renew", "--force", notes.as_str()][..],
        &["renew", "--dry-run", "--force", notes.as_str()][..],
    ];
    let said = format!(
        "certrenewd: {notes} cannot be renewed: not a certificate: neither a PEM file nor a DER certificate or key\n"
    );
    assert_refused(&t, &runs, &said);
    assert!(!Path::new(&t.state).join("alarms.json").exists());
}

/// Each of `runs` exits 2 before any pass: nothing on stdout, `said` alone on stderr.
fn assert_refused(t: &Tree, runs: &[&[&str]], said: &str) {
    for args in runs {
        let run = t.run(args);
        assert_eq!(run.code, 2, "{run}");
        assert_eq!(run.stdout, "", "{run}");
        assert_eq!(run.stderr, said, "{run}");
    }
}

/// `renew` naming kubeadm's `sa.pub`, a public key the scan passes over quietly, is refused
/// like any file that holds no certificate (exit 2, as promised), instead of a pass limited
/// to nothing that said "nothing to renew" while other certificates were due, and exited 0.
#[test]
fn renew_of_a_public_key_is_refused_not_a_pass_of_nothing() {
    let t = Tree::new(&["kubeadm"], "kubeadm");
    let public = t.abs("etc/kubernetes/pki/sa.pub").display().to_string();
    let runs = [
        &["renew", public.as_str()][..],
        &["renew", "--dry-run", public.as_str()][..],
    ];
    let said = format!(
        "certrenewd: {public} holds no certificate certrenewd renews (a public key, or another file the scan passes over): name a certificate file\n"
    );
    assert_refused(&t, &runs, &said);
    assert!(!Path::new(&t.state).join("last_success").exists());
}

/// A renewal whose lifetime the CA's notAfter cuts says so, with the CA and what becomes of
/// it, rather than the lifetime it was not given: a kubeadm tree made by cfssl whose CAs
/// have 300 days left, CA renewal off, a due leaf of 365 days renewed (and first a dry
/// run of it), its real notAfter the CA's.
#[test]
fn a_lifetime_cut_by_the_ca_says_so_and_names_the_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    let out = std::process::Command::new("bash")
        .arg(pki::MKPKI)
        .args(["kubeadm", &tree.display().to_string()])
        .args(["--backdate", "--ca-left", "300"])
        .output()
        .expect("mkpki.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pki_dir = tree.join("etc/kubernetes/pki");
    let config = format!(
        "state_dir = {}\nrenew_cas = false\n\n[[watch]]\npath = {}\n",
        pki::toml_str(&tmp.path().join("state")),
        pki::toml_str(&pki_dir)
    );
    let leaf = pki_dir.join("apiserver.crt").display().to_string();
    let ca = pki_dir.join("ca.crt").display().to_string();
    let ca_end = common::x509(Path::new(&ca), &["-enddate"]);
    let ca_end = run_cmd(
        std::process::Command::new("date").args([
            "-u",
            "-d",
            ca_end.trim_start_matches("notAfter="),
            "+%Y-%m-%d %H:%M UTC",
        ]),
        &[],
    )
    .stdout;
    let tail = format!(
        " days by CA {ca}, which ends on {}: CA renewal is off (renew_cas = false): renew the CA with your PKI tool, then `certrenewd renew --force {leaf}` gives this certificate its full lifetime",
        ca_end.trim()
    );

    let (dry, _) = with_config(
        &common::single_node(&config),
        &[
            "renew",
            "--dry-run",
            "--no-restart",
            "--output",
            "json",
            &leaf,
        ],
    );
    assert_eq!(dry.code, 0, "{dry}");
    let v: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    let l = v["certificates"][0]["lifetime"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ["298", "299", "300"].iter().any(|d| l.starts_with(&format!(
            "365 days, the old certificate's; cut to {d}{tail}"
        ))),
        "{dry}"
    );

    let file = tmp.path().join("certrenewd.toml");
    fs::write(&file, common::single_node(&config)).unwrap();
    let run = run_bin(&file, &["renew", "--no-restart", &leaf]);
    assert_eq!(run.code, 0, "{run}");
    let days = common::lifetime_secs(&leaf) / 86_400;
    assert!((298..=300).contains(&days), "{days}");
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("renewed       {leaf} serial "))
            && first.contains(&format!(
                "; lifetime 365 days, the old certificate's; cut to {days}{tail}"
            )),
        "{run}"
    );
}

/// `renew --dry-run --force BUNDLE` on a trust bundle of three CAs (copies of the node's two
/// CAs, then a CA whose key is not here): one line per certificate in it, each with its
/// place in the file (`#2`, in the text and the JSON), a copy saying which CA it follows and
/// how to renew that one, never "`--force` renews it now" to a command that had `--force`.
#[test]
fn a_dry_run_of_a_bundle_says_one_coherent_line_per_certificate_with_its_index() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let p = |rel: &str| t.abs(rel).display().to_string();
    let other = t.tmp.path().join("other");
    fs::create_dir(&other).unwrap();
    pki::ec_key(&other.join("ca.key"));
    pki::self_signed_ca(&other.join("ca.key"), "/CN=other-ca", &other.join("ca.crt"));
    let bundle = p("etc/kubernetes/pki/trust.pem");
    let mut pem = fs::read(p("etc/kubernetes/pki/ca.crt")).unwrap();
    pem.extend(fs::read(p("etc/etcd/ca.crt")).unwrap());
    pem.extend(fs::read(other.join("ca.crt")).unwrap());
    fs::write(&bundle, pem).unwrap();

    let run = t.run(&["renew", "--dry-run", "--force", &bundle]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{run}");
    for (i, ca) in [
        (1, p("etc/kubernetes/pki/ca.crt")),
        (2, p("etc/etcd/ca.crt")),
    ] {
        assert!(
            lines[i - 1].starts_with(&format!(
                "not due       {bundle} #{i}: a copy of CA {ca}: replaced with it when that is renewed on "
            )) && lines[i - 1].ends_with(&format!(
                "; `certrenewd renew --force {ca}` renews it now"
            )),
            "{run}"
        );
    }
    assert!(
        lines[2].starts_with(&format!("would fail    {bundle} #3: CA (ends on ")),
        "{run}"
    );
    assert!(!lines[2].contains("expires within"), "{run}");
    assert!(
        !run.stdout.contains(&format!("renew --force {bundle}`")),
        "{run}"
    );

    let run = t.run(&["renew", "--dry-run", "--force", "--output", "json", &bundle]);
    let certs = run.json()["certificates"].as_array().unwrap().clone();
    let index: Vec<&serde_json::Value> = certs.iter().map(|c| &c["index"]).collect();
    assert_eq!(index, [1, 2, 3], "{run}");
    assert!(
        certs[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with(&format!("a copy of CA {}", p("etc/kubernetes/pki/ca.crt"))),
        "{run}"
    );
}

/// The last paragraph of `s` (check's summary), its lines joined as one.
fn last_line(s: &str) -> String {
    let para = s.trim_end().rsplit("\n\n").next().unwrap_or_default();
    para.lines().collect::<Vec<_>>().join(" ")
}

/// `check`'s summary counts what `--fail-due` judges. An etcd tree made by openssl: a
/// serving certificate issued today that kubeadm's etcd manifest serves on an address it
/// does not name, which alone makes `--fail-due` exit 1: the summary says so. Then a second
/// watched directory with a CA made 3300 days ago for 3650 (in its one-year window: due)
/// and a copy of it in a trust bundle after another CA: the copy is counted as a copy, not
/// as a CA of its own nor as due on its own.
#[test]
fn check_sums_up_what_fail_due_judges() {
    let tmp = tempfile::tempdir().unwrap();
    let pki_dir = tmp.path().join("etc/etcd");
    let aging = tmp.path().join("etc/aging");
    fs::create_dir_all(&pki_dir).unwrap();
    fs::create_dir_all(&aging).unwrap();
    common::sh(
        &pki_dir,
        r#"
printf 'subjectAltName = DNS:localhost, IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' > server.ext
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
    -subj /CN=etcd-ca -days 3650 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
    -out server.csr -subj /CN=controller-0 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile server.ext -out server.crt 2>/dev/null
rm -f server.csr server.ext ca.srl
cd ../aging
faketime -f -3300d openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout ca.key -out ca.crt -subj /CN=aging-ca -days 3650 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ../other.key \
    -out ../other.crt -subj /CN=other-ca -days 3650 2>/dev/null
cat ../other.crt ca.crt > ca-bundle.pem
"#,
    );
    let manifests = tmp.path().join("manifests");
    fs::create_dir_all(&manifests).unwrap();
    fs::write(
        manifests.join("etcd.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - etcd\n    \
             - --advertise-client-urls=https://127.0.0.2:2379\n    - --cert-file={}\n    - --key-file={}\n    \
             - --listen-client-urls=https://127.0.0.2:2379\n    - --name=controller-0\n",
            pki_dir.join("server.crt").display(),
            pki_dir.join("server.key").display()
        ),
    )
    .unwrap();
    let config = tmp.path().join("certrenewd.toml");
    let write_config = |dirs: &[&Path]| {
        let mut text = format!(
            "state_dir = {}\nmanifests_dir = {}\n",
            pki::toml_str(&tmp.path().join("state")),
            pki::toml_str(&manifests),
        );
        for d in dirs {
            text += &format!("[[watch]]\npath = {}\nunits = []\n", pki::toml_str(d));
        }
        fs::write(&config, common::single_node(&text)).unwrap();
    };

    // Nothing due, a name missing: --fail-due exits 1, and the summary says why.
    write_config(&[&pki_dir]);
    let run = run_bin(&config, &["check", "--fail-due"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        last_line(&run.stdout)
            .starts_with("2 certificates: 2 ok; 1 lacks a name it is served on (500.220) — "),
        "{run}"
    );
    let json = run_bin(&config, &["check", "--output", "json"]).json();
    assert_eq!(json["summary"]["names_missing"], 1, "{json:#}");

    // A due CA and its copy in a bundle: the CA due, the copy a copy.
    write_config(&[&pki_dir, &aging]);
    let run = run_bin(&config, &["check", "--fail-due"]);
    assert_eq!(run.code, 1, "{run}");
    assert!(
        last_line(&run.stdout).starts_with(
            "4 certificates and 1 copy of a CA: 3 ok, 1 due; 1 lacks a name it is served on (500.220) — "
        ),
        "{run}"
    );
    let json = run_bin(&config, &["check", "--output", "json"]).json();
    assert_eq!(json["summary"]["certificates"], 4, "{json:#}");
    assert_eq!(json["summary"]["copies"], 1, "{json:#}");
    assert_eq!(json["summary"]["due"], 1, "{json:#}");
}

/// What `check` and a dry run print in their table or JSON is not said again on stderr: a
/// hard-way tree whose CA key is not on this host (every leaf unrenewable here) and a file
/// that cannot be read. A real pass keeps its WARN (the journal has no table).
#[test]
fn check_and_a_dry_run_do_not_repeat_their_table_on_stderr() {
    let t = Tree::new(LAYOUTS, "hardway");
    let broken = t.abs(&format!(
        "{}/broken.crt",
        t.manifest[0].path.rsplit_once('/').unwrap().0
    ));
    fs::write(&broken, "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
    let broken = broken.display().to_string();
    let unrenewable = "cannot be renewed on this host";
    for args in [
        &["check"][..],
        &["check", "--output", "json"],
        &["renew", "--dry-run", "--no-restart"],
    ] {
        let run = t.run(args);
        assert!(run.stdout.contains(&broken), "{run}");
        assert!(
            !run.stderr.contains(unrenewable) && !run.stderr.contains(&broken),
            "{run}"
        );
    }
    // The JSON of a dry run lists what it would fail on; what it does not list is warned.
    let run = t.run(&["renew", "--dry-run", "--no-restart", "--output", "json"]);
    let listed: Vec<String> = run.json()["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    assert!(!listed.is_empty(), "{run}");
    for path in &listed {
        assert!(
            !run.stderr.contains(&format!("{path}: {unrenewable}")),
            "{run}"
        );
    }
    let real = t.run(&["renew", "--no-restart"]);
    assert!(real.stderr.contains(unrenewable), "{real}");
}

/// A dry run's plan is one column: the state word, then from column 15 what it is about,
/// whatever the word (`would replace` and `would restart` included), as the report of the
/// real pass is. StarlingX with a trust bundle holding a copy of its CA, the CA forced.
#[test]
fn a_dry_run_plan_keeps_one_column_after_its_state_words() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let p = |rel: &str| t.abs(rel).display().to_string();
    let mut pem = fs::read(p("etc/kubernetes/pki/ca.crt")).unwrap();
    pem.extend(fs::read(p("etc/etcd/ca.crt")).unwrap());
    fs::write(p("etc/kubernetes/pki/trust.pem"), pem).unwrap();
    let run = t.run(&["renew", "--dry-run", "--force", &p("etc/etcd/ca.crt")]);
    assert_eq!(run.code, 0, "{run}");
    let plan: Vec<&str> = run.stdout.lines().take_while(|l| !l.is_empty()).collect();
    assert!(
        plan.iter().any(|l| l.starts_with("would replace "))
            && plan.iter().any(|l| l.starts_with("would restart ")),
        "{run}"
    );
    for l in &plan {
        let (word, rest) = l.split_at(14);
        assert!(
            word.ends_with(' ') && !rest.starts_with(' '),
            "{l:?} is not in the column:\n{run}"
        );
    }
}

/// Every alarm the code defines is named where an operator looks it up: the top-level and
/// `alarms` help, the journald catalog (raised and cleared) and the package's description.
/// And none of them says what is no longer true: certrenewd re-issues a CA with its own key.
#[test]
fn every_alarm_is_named_in_the_help_the_catalog_and_the_package() {
    let help = |args: &[&str]| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["--config", "/nonexistent/certrenewd.toml"])
            .args(args);
        let run = run_cmd(&mut cmd, args);
        assert_eq!(run.code, 0, "{run}");
        run.stdout
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let catalog = fs::read_to_string(root.join("systemd/certrenewd.catalog")).unwrap();
    let cargo = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let description = cargo
        .split("extended-description = \"\"\"")
        .nth(1)
        .and_then(|rest| rest.split("\"\"\"").next())
        .expect("the package's extended description");
    let texts = [
        ("certrenewd --help", help(&["--help"])),
        ("certrenewd alarms --help", help(&["alarms", "--help"])),
        ("the package description", description.to_string()),
    ];
    for kind in certrenewd::alarms::AlarmKind::ALL {
        let id = kind.id();
        for (what, text) in &texts {
            assert!(
                text.contains(id),
                "{what} does not name {id} ({kind:?}):\n{text}"
            );
        }
        for state in ["set", "cleared"] {
            let subject = format!("Subject: Alarm {id} {state}");
            assert!(
                catalog.contains(&subject),
                "the catalog has no \"{subject}\""
            );
        }
    }
    for (what, text) in texts.iter().chain([&("the catalog", catalog.clone())]) {
        let said = text.to_lowercase().replace('\n', " ");
        for stale in ["never reissued", "never re-issued"] {
            assert!(
                !said.contains(stale),
                "{what} says CAs are {stale}:\n{text}"
            );
        }
    }
}

/// The shipped configuration and the man page say what the code does: kubelet's
/// self-signed `kubelet.crt` is made anew (not only reported), and `auto` coordination is
/// decided by the cluster's member list, the node's etcd settings saying only where to ask
/// (as the operator's guide says).
#[test]
fn the_shipped_config_and_the_man_page_say_what_the_code_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let flat = |file: &str| {
        let text = fs::read_to_string(root.join(file)).unwrap();
        let lines = text.lines().map(|l| l.trim_start_matches('#').trim());
        lines.collect::<Vec<_>>().join(" ").replace("\\-", "-")
    };
    let config = flat("config/certrenewd.toml");
    let kubelet = config
        .split("kubelet's certificates")
        .nth(1)
        .expect("the kubelet watch's comment");
    assert!(
        kubelet.contains("(kubelet.crt) is made anew as kubelet makes it"),
        "{kubelet}"
    );
    let man = flat("examples/gen-assets/pages/configuration.roff");
    let auto = man
        .split("\"auto\":")
        .nth(1)
        .and_then(|rest| rest.split(".TP").next())
        .expect("the man page's auto paragraph");
    assert!(
        auto.contains("the cluster's member list names more than one member"),
        "{auto}"
    );
    assert!(!auto.contains("name more than one member;"), "{auto}");
}

/// An expired certificate is said to have expired so many days ago, in the dry run's plan
/// and its JSON, never to have a negative number of days left.
#[test]
fn an_expired_certificate_is_said_expired_days_ago_not_negative_days_left() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let client = t.abs("etc/etcd/etcd-client.crt").display().to_string();
    let dry = t.run(&["renew", "--dry-run", &client]);
    assert_eq!(dry.code, 0, "{dry}");
    let line = (dry.stdout.lines())
        .find(|l| l.starts_with("would renew"))
        .unwrap_or_else(|| panic!("{dry}"));
    assert!(line.contains(" (expired 3.0 days ago; CA "), "{line}");
    let json = t.run(&["renew", "--dry-run", "--output", "json", &client]);
    let reason = json.json()["certificates"][0]["reason"].clone();
    let reason = reason.as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with("expired 3.0 days ago; CA "), "{json}");
    for said in [&dry.stdout, &json.stdout] {
        assert!(!said.contains("days left"), "{said}");
    }
}

/// `check --fail-due` fails while restarts are owed: the pass renewed every due certificate
/// but could not restart the unit that reads them (systemd not reached here), so `check`
/// finds every certificate ok while the service still runs on the old ones.
#[test]
fn check_fail_due_fails_while_restarts_are_owed() {
    let t = Tree::new(LAYOUTS, "starlingx");
    let r = t.run(&["renew"]);
    let check = t.run(&["check", "--output", "json"]);
    let doc = check.json();
    let owed = &doc["restarts_owed"]["units"];
    assert!(
        owed.as_array().is_some_and(|u| !u.is_empty()),
        "no restart owed after {r}\n{check}"
    );
    let fine = |k: &str| doc["summary"][k] == 0;
    assert!(
        ["due", "expired", "unrenewable", "names_missing", "errors"]
            .iter()
            .all(|k| fine(k)),
        "{check}"
    );
    let failed = t.run(&["check", "--fail-due"]);
    assert_eq!(failed.code, 1, "{failed}");
    assert!(
        failed.stdout.contains("An earlier pass owes a restart to "),
        "{failed}"
    );
    // And in the summary line, with what else `--fail-due` fails for.
    let summary = (failed.stdout.lines())
        .find(|l| l.contains(" certificates: "))
        .unwrap_or_default();
    assert!(summary.contains(" ok; restarts owed"), "{failed}");
}

/// `check`'s table says how restarts are coordinated whatever the verdict, not only when
/// they are coordinated or held: here coordination is off, and `auto` on a node whose
/// settings name no etcd member and where nothing answers at the endpoints.
#[test]
fn check_says_how_restarts_are_coordinated_whatever_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    fs::create_dir(&pki).unwrap();
    let base = format!(
        "state_dir = {}\nmanifests_dir = {}\n[[watch]]\npath = {}\nunits = []\n",
        common::pki::toml_str(&dir.path().join("state")),
        common::pki::toml_str(&dir.path().join("manifests")),
        common::pki::toml_str(&pki)
    );
    let flat = |r: &Run| r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let (off, _) = with_config(
        &format!("{base}[coordination]\nenabled = false\n"),
        &["check"],
    );
    assert!(
        flat(&off).contains(
            "Restarts are not coordinated with other controllers: [coordination] enabled = false."
        ),
        "{off}"
    );
    // Loopback only: a port nothing listens on.
    let (auto, _) = with_config(
        &format!("{base}[coordination]\nendpoints = [\"https://127.0.0.1:9\"]\n"),
        &["check"],
    );
    assert!(
        flat(&auto).contains("Restarts are not coordinated with other controllers: ")
            || flat(&auto).contains(
                "Whether restarts are coordinated through etcd is decided at each pass: "
            ),
        "{auto}"
    );
}

/// A dry run whose cluster gives no answer in time does not say the restarts would go ahead:
/// each restart line points at the cause, said once in the summary.
#[test]
fn a_dry_run_that_etcd_does_not_answer_in_time_leaves_the_restarts_to_the_pass() {
    let t = Tree::new(LAYOUTS, "starlingx");
    // Members that accept connections and never answer: the handshake waits its timeout.
    let silent: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port"))
        .collect();
    let endpoints: Vec<String> = silent
        .iter()
        .map(|l| format!("\"https://{}\"", l.local_addr().unwrap()))
        .collect();
    for l in silent {
        std::thread::spawn(move || {
            let held: Vec<_> = l.incoming().collect();
            drop(held);
        });
    }
    let pki = t.abs("etc/kubernetes/pki");
    let coordination = format!(
        "[coordination]\nenabled = true\nendpoints = [{}]\ncert = {:?}\nkey = {:?}\nca = {:?}\n",
        endpoints.join(", "),
        pki.join("apiserver-etcd-client.crt"),
        pki.join("apiserver-etcd-client.key"),
        t.abs("etc/etcd/ca.crt"),
    );
    t.write_config(&coordination, &[]);
    let dry = t.run(&["renew", "--dry-run"]);
    assert_eq!(dry.code, 0, "{dry}");
    let said = "etcd gave no answer within 10s, so whether the restarts would go ahead or be held is decided by the pass";
    assert!(dry.stdout.trim_end().ends_with(said), "{dry}");
    assert_eq!(dry.stdout.matches(said).count(), 1, "{dry}");
    let unless = "(if the cluster allows it then: see below)";
    let would: Vec<&str> = (dry.stdout.lines())
        .filter(|l| l.starts_with("would restart"))
        .collect();
    assert_eq!(would.len(), 1, "{dry}");
    assert!(would[0].ends_with(unless), "{dry}");
    let json = t.run(&["renew", "--dry-run", "--output", "json"]);
    let v = json.json();
    assert!(v["summary"].as_str().unwrap().ends_with(said), "{json}");
    let units = v["units"].as_array().expect("units");
    assert!(!units.is_empty(), "{json}");
    for u in units {
        assert_eq!(u["state"], "would_restart", "{u}");
        assert!(u["reason"].as_str().unwrap().ends_with(unless), "{u}");
    }
}

/// A CA re-issued here whose old certificate ends in 5 days, its readers' restarts held
/// (coordination on, no etcd client certificate): they still hold the old certificate in
/// memory, and at its end they stop trusting what it signed, so 500.260 (critical) names
/// the CA, the readers and why they are held. With the end 100 days away, nothing yet.
#[test]
fn readers_of_a_reissued_ca_still_held_near_its_old_end_raise_a_critical_alarm() {
    let t = Tree::new(LAYOUTS, "starlingx");
    t.write_config("[coordination]\nenabled = true\n", &[]);
    let ca = t.abs("etc/etcd/ca.crt");
    let record = |days: i64| {
        let at = |d: i64| {
            let t = time::OffsetDateTime::now_utc() + time::Duration::days(d);
            t.format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        };
        fs::create_dir_all(&t.state).unwrap();
        let json = serde_json::json!({"cas": [{
            "ca": ca, "old_serial": "01", "new_serial": "02",
            "old_not_after": at(days), "renewed_at": at(days - 365),
        }]});
        fs::write(t.state.join("old-cas.json"), json.to_string()).unwrap();
    };
    let old_ca_alarm = || {
        let v = t.run(&["alarms", "--output", "json"]).json();
        (v["alarms"].as_array().expect("alarms").iter())
            .find(|a| a["id"] == "500.260")
            .cloned()
    };
    record(100);
    let run = t.run(&["renew"]);
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(old_ca_alarm(), None, "{run}");

    record(5);
    let run = t.run(&["renew"]);
    assert_eq!(run.code, 1, "{run}");
    let alarm = old_ca_alarm().unwrap_or_else(|| panic!("no 500.260: {run}"));
    assert_eq!(alarm["severity"], "critical", "{alarm}");
    let reason = alarm["reason"].as_str().unwrap();
    println!("500.260 {}: {reason}", alarm["severity"]);
    assert!(
        reason.starts_with(&format!(
            "CA {} was re-issued on ", ca.display()
        )) && reason.contains("(serial 01 -> 02); etcd.service still holds the old certificate in memory, which ends at ")
            && reason.contains(": its restart is held (etcd.service: coordination is on but there is no etcd client certificate on this node"),
        "{reason}"
    );
}

/// Restarts held for one cause (coordination on, no etcd client certificate) say the cause
/// once: on stdout before the lines that point at it, in the log with the first restart it
/// holds, and in the 250.003 reason, which leads with it and names every restart held.
#[test]
fn restarts_held_for_one_cause_say_it_once() {
    let t = Tree::new(LAYOUTS, "starlingx");
    t.write_config("[coordination]\nenabled = true\n", &[]);
    let run = t.run(&["renew"]);
    assert_eq!(run.code, 1, "{run}");
    let cause = "coordination is on but there is no etcd client certificate on this node";
    assert_eq!(run.stdout.matches(cause).count(), 1, "{run}");
    // The log says it once; the alarm, written to stderr without a journal, says it too.
    let logged: Vec<&str> = (run.stderr.lines())
        .filter(|l| l.contains(" WARN ") || l.starts_with(" WARN"))
        .collect();
    assert_eq!(logged.len(), 2, "{run}");
    assert_eq!(logged.concat().matches(cause).count(), 1, "{run}");
    assert!(
        run.stdout
            .contains(&format!("HELD BACK     2 restarts, for one cause: {cause}")),
        "{run}"
    );
    for unit in ["etcd.service", "kubelet.service"] {
        assert!(
            run.stdout.contains(&format!(
                "HELD BACK     {unit}: not restarted, for the cause above"
            )),
            "{run}"
        );
    }
    let alarms = t.run(&["alarms", "--output", "json"]);
    let v = alarms.json();
    let held = (v["alarms"].as_array().expect("alarms").iter())
        .find(|a| a["id"] == "250.003")
        .expect("250.003")
        .clone();
    let reason = held["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!(
            "2 restarts held (etcd.service, kubelet.service): {cause}; set [coordination] cert, key and ca"
        )),
        "{reason}"
    );
    assert_eq!(reason.matches(cause).count(), 1, "{reason}");
}
