//! The output an operator reads, exactly: `check`'s tables and summary for
//! fixture trees made with the real openssl/cfssl CLIs, due certificates issued long ago
//! (`mkpki.sh --backdate`), piped (the fixed 120-column layout); the note of an interrupted
//! renewal (a failpoints build aborted mid-install); `renew`'s text and JSON with a unit
//! that refuses the renewed certificate, and with units that take it, on a real systemd.
//!
//! Dates and times left are replaced by placeholders of the same width, so the columns are
//! asserted as they are; nothing else is.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::pki::{Run, run_cmd, toml_str};
use common::sandbox::Sandbox;
use common::table;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");

/// A layout of `mkpki.sh --backdate` under `/tmp/certrenewd-oo.XXXXXX/tree` (a root of
/// fixed length, so wrapped lines wrap alike on every run), with a state dir beside it.
struct Fixture {
    tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new(layout: &str) -> Fixture {
        let tmp = tempfile::Builder::new()
            .prefix("certrenewd-oo.")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let root = tmp.path().join("tree");
        let out = Command::new("bash")
            .args([MKPKI, layout])
            .arg(&root)
            .arg("--backdate")
            .output()
            .expect("running mkpki.sh");
        assert!(
            out.status.success(),
            "mkpki.sh {layout} --backdate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Fixture { tmp, root }
    }

    fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    fn config(&self) -> PathBuf {
        self.tmp.path().join("certrenewd.toml")
    }

    /// Writes the config: `top` lines, then one watch per (dir, units, extra lines).
    fn write_config(&self, top: &str, watches: &[(&str, &[&str], &str)]) {
        let mut s = format!("state_dir = {}\n{top}\n", toml_str(&self.state()));
        for (dir, units, extra) in watches {
            let units: Vec<String> = units.iter().map(|u| format!("\"{u}\"")).collect();
            s.push_str(&format!(
                "\n[[watch]]\npath = {}\nunits = [{}]\n{extra}\n",
                toml_str(&self.root.join(dir)),
                units.join(", ")
            ));
        }
        fs::write(self.config(), common::single_node(&s)).expect("writing the config");
    }

    fn run(&self, args: &[&str]) -> Run {
        run_cmd(
            Command::new(BIN)
                .arg("--config")
                .arg(self.config())
                .args(args),
            args,
        )
    }

    fn root_str(&self) -> String {
        self.root.display().to_string()
    }
}

/// `check` output with the root as `<root>`, and in each table row the EXPIRES and
/// RESIDUAL TIME cells replaced by placeholders padded to the same columns.
fn normalise(text: &str, root: &str) -> String {
    let mut out = String::new();
    let mut cols: Option<(usize, usize)> = None;
    for line in text.replace(root, "<root>").lines() {
        // A CA's note: when it will be renewed, a date like the EXPIRES column's.
        let date_at = line
            .find("will be renewed on ")
            .map(|i| i + "will be renewed on ".len());
        let line = &match date_at {
            Some(i) if line.len() >= i + 16 => {
                format!("{}YYYY-MM-DD hh:mm{}", &line[..i], &line[i + 16..])
            }
            _ => line.to_string(),
        };
        if line.starts_with("CERTIFICATE") {
            let start = line.find("EXPIRES (UTC)").expect("EXPIRES column");
            let next = line.find("RESIDUAL TIME").expect("RESIDUAL TIME column") + 15;
            cols = Some((start, next));
        } else if line.is_empty() {
            cols = None;
        }
        match cols {
            Some((start, end)) if line.starts_with("  ") && !line.starts_with("   ") => {
                let chars: Vec<char> = line.chars().collect();
                let head: String = chars[..start].iter().collect();
                let tail: String = chars[end.min(chars.len())..].iter().collect();
                let middle = format!("{:<18}{:<15}", "YYYY-MM-DD hh:mm", "<left>");
                out.push_str(&format!("{head}{middle}{tail}\n"));
            }
            _ => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// Fails with both texts, and the lines that differ, when they are not the same.
fn assert_text(got: &str, want: &str, what: &str) {
    if got == want {
        return;
    }
    let diff: Vec<String> = got
        .lines()
        .zip(want.lines().chain(std::iter::repeat("<missing>")))
        .filter(|(g, w)| g != w)
        .map(|(g, w)| format!("  got:  {g:?}\n  want: {w:?}"))
        .collect();
    panic!(
        "{what} differs:\n--- got\n{got}--- want\n{want}--- first differences\n{}",
        diff.into_iter().take(5).collect::<Vec<_>>().join("\n")
    );
}

/// Every line within 120 columns, and a summary at the end.
fn assert_page(text: &str) {
    assert!(
        table::max_width(text) <= 120,
        "wider than 120 columns:\n{text}"
    );
}

const KUBECONFIGS: &str = "kubeconfigs = [\"etc/kubernetes/admin.conf\", \"etc/kubernetes/super-admin.conf\", \
                           \"etc/kubernetes/controller-manager.conf\", \"etc/kubernetes/scheduler.conf\"]";

/// kubeadm: the leaves under `/etc/kubernetes/pki`, the kubeconfigs (one user each: not
/// named) under `/etc/kubernetes` in order, the three CAs in their own table, the summary.
#[test]
fn check_of_the_kubeadm_tree() {
    let f = Fixture::new("kubeadm");
    let root = f.root_str();
    let kubeconfigs = KUBECONFIGS.replace("etc/", &format!("{root}/etc/"));
    f.write_config(
        "schedule = \"0 0 0 * * *\"",
        &[(
            "etc/kubernetes/pki",
            &["kube-apiserver.service"],
            &kubeconfigs,
        )],
    );
    let r = f.run(&["check"]);
    assert_eq!(r.code, 0, "{r}");
    assert_page(&r.stdout);
    let want = "\
CERTIFICATE                     EXPIRES (UTC)     RESIDUAL TIME  CA              STATUS
<root>/etc/kubernetes/pki
  apiserver-etcd-client.crt     YYYY-MM-DD hh:mm  <left>         etcd/ca         ok
  apiserver-kubelet-client.crt  YYYY-MM-DD hh:mm  <left>         ca              due
  apiserver.crt                 YYYY-MM-DD hh:mm  <left>         ca              due
  etcd/healthcheck-client.crt   YYYY-MM-DD hh:mm  <left>         etcd/ca         due
  etcd/peer.crt                 YYYY-MM-DD hh:mm  <left>         etcd/ca         due
  etcd/server.crt               YYYY-MM-DD hh:mm  <left>         etcd/ca         due
  front-proxy-client.crt        YYYY-MM-DD hh:mm  <left>         front-proxy-ca  due
<root>/etc/kubernetes (kubeconfigs)
  admin.conf                    YYYY-MM-DD hh:mm  <left>         ca              due
  controller-manager.conf       YYYY-MM-DD hh:mm  <left>         ca              due
  scheduler.conf                YYYY-MM-DD hh:mm  <left>         ca              due
  super-admin.conf              YYYY-MM-DD hh:mm  <left>         ca              ok

CERTIFICATE AUTHORITY  EXPIRES (UTC)     RESIDUAL TIME  KEY ON NODE  STATUS
<root>/etc/kubernetes/pki
  ca                   YYYY-MM-DD hh:mm  <left>         yes          ok
      will be renewed on YYYY-MM-DD hh:mm UTC, with its own key: what it signed keeps verifying
  etcd/ca              YYYY-MM-DD hh:mm  <left>         yes          ok
      will be renewed on YYYY-MM-DD hh:mm UTC, with its own key: what it signed keeps verifying
  front-proxy-ca       YYYY-MM-DD hh:mm  <left>         yes          ok
      will be renewed on YYYY-MM-DD hh:mm UTC, with its own key: what it signed keeps verifying

The daemon has not run with this state directory: no pass will run until it does (`systemctl enable --now certrenewd`).
Restarts are not coordinated with other controllers: [coordination] enabled = false.

14 certificates: 5 ok, 9 due — no pass while the daemon is not running
";
    assert_text(
        &normalise(&r.stdout, &root),
        want,
        "check of the kubeadm tree",
    );

    // The JSON of docs/interface.md.
    let doc = f.run(&["check", "--output", "json"]).json();
    assert_eq!(
        doc["summary"],
        serde_json::json!({"certificates": 14, "copies": 0, "ok": 5, "due": 9, "expired": 0,
                           "unrenewable": 0, "names_missing": 0, "errors": 0, "skipped": 0})
    );
    let next = doc["next_pass"].as_str().expect("next_pass");
    assert!(next.ends_with('Z') && next.len() == 20, "{next}");
    for absent in ["inhibited", "interrupted_renewal", "restarts_owed"] {
        assert!(doc.get(absent).is_none(), "{absent}: {doc:#}");
    }
}

/// The StarlingX tree with its two watches (etcd.service, kube-apiserver.service).
fn starlingx() -> Fixture {
    let f = Fixture::new("starlingx");
    f.write_config(
        "",
        &[
            ("etc/etcd", &["etcd.service"], ""),
            (
                "etc/kubernetes/pki",
                &["kube-apiserver.service"],
                "kubeconfigs = []",
            ),
        ],
    );
    f
}

/// StarlingX: two watches, the etcd CA of `/etc/etcd` signing a leaf of
/// `/etc/kubernetes/pki`; the two `ca.crt` told apart by their directory.
#[test]
fn check_of_the_starlingx_tree() {
    let f = starlingx();
    let r = f.run(&["check"]);
    assert_eq!(r.code, 0, "{r}");
    assert_page(&r.stdout);
    let want = "\
CERTIFICATE                  EXPIRES (UTC)     RESIDUAL TIME  CA       STATUS
<root>/etc/etcd
  etcd-client.crt            YYYY-MM-DD hh:mm  <left>         etcd/ca  expired
  etcd-server.crt            YYYY-MM-DD hh:mm  <left>         etcd/ca  due
<root>/etc/kubernetes/pki
  apiserver-etcd-client.crt  YYYY-MM-DD hh:mm  <left>         etcd/ca  due
  apiserver.crt              YYYY-MM-DD hh:mm  <left>         pki/ca   ok

CERTIFICATE AUTHORITY  EXPIRES (UTC)     RESIDUAL TIME  KEY ON NODE  STATUS
<root>/etc/etcd
  etcd/ca              YYYY-MM-DD hh:mm  <left>         yes          ok
      will be renewed on YYYY-MM-DD hh:mm UTC, with its own key: what it signed keeps verifying
<root>/etc/kubernetes/pki
  pki/ca               YYYY-MM-DD hh:mm  <left>         yes          ok
      will be renewed on YYYY-MM-DD hh:mm UTC, with its own key: what it signed keeps verifying

The daemon has not run with this state directory: no pass will run until it does (`systemctl enable --now certrenewd`).
Restarts are not coordinated with other controllers: [coordination] enabled = false.

6 certificates: 3 ok, 2 due, 1 expired — no pass while the daemon is not running
";
    assert_text(
        &normalise(&r.stdout, &f.root_str()),
        want,
        "check of the StarlingX tree",
    );
}

/// The hard way: the CA key is on no node, so each leaf says why below its row, wrapped
/// within 120 columns; the CA table says the key is not here.
#[test]
fn check_of_the_hardway_tree_puts_reasons_below_their_row() {
    let f = Fixture::new("hardway");
    f.write_config(
        "",
        &[
            ("etc/etcd", &["etcd.service"], ""),
            ("var/lib/kubernetes", &["kube-apiserver.service"], ""),
            ("var/lib/kubelet", &["kubelet.service"], ""),
        ],
    );
    let r = f.run(&["check"]);
    assert_eq!(r.code, 0, "{r}");
    assert_page(&r.stdout);
    // Wrapped at 120 columns with the real root (30 characters, `<root>` here).
    let reason = "      CA key not on this host: <root>/etc/etcd/ca.pem has no key beside it (renew on the host\n      that holds the CA key, or copy the key here)\n";
    let want = format!(
        "\
CERTIFICATE            EXPIRES (UTC)     RESIDUAL TIME  CA       STATUS
<root>/etc/etcd
  kubernetes.pem       YYYY-MM-DD hh:mm  <left>         etcd/ca  unrenewable
{reason}<root>/var/lib/kubelet
  worker-0.pem         YYYY-MM-DD hh:mm  <left>         etcd/ca  unrenewable
{reason}<root>/var/lib/kubernetes
  kubernetes.pem       YYYY-MM-DD hh:mm  <left>         etcd/ca  unrenewable
{reason}  service-account.pem  YYYY-MM-DD hh:mm  <left>         etcd/ca  unrenewable
{reason}
CERTIFICATE AUTHORITY  EXPIRES (UTC)     RESIDUAL TIME  KEY ON NODE  STATUS
<root>/etc/etcd
  etcd/ca              YYYY-MM-DD hh:mm  <left>         no           ok
<root>/var/lib/kubernetes
  kubernetes/ca        YYYY-MM-DD hh:mm  <left>         no           ok

The daemon has not run with this state directory: no pass will run until it does (`systemctl enable --now certrenewd`).
Restarts are not coordinated with other controllers: [coordination] enabled = false.

5 certificates and 1 copy of a CA: 1 ok, 4 unrenewable — no pass while the daemon is not running
"
    );
    assert_text(
        &normalise(&r.stdout, &f.root_str()),
        &want,
        "check of the hard-way tree",
    );
}

/// A `renew` aborted mid-install (a failpoints build): `check` says under the table that the
/// interrupted renewal will be finished or rolled back, naming its certificates, and the JSON
/// lists them; once a pass has finished it, the note is gone.
#[test]
fn check_tells_of_an_interrupted_renewal() {
    let f = starlingx();
    let bin = common::failpoints::binary();
    let crashed = run_cmd(
        Command::new(bin)
            .arg("--config")
            .arg(f.config())
            .args(["renew", "--no-restart"])
            .env("CERTRENEWD_FAILPOINT", "after-temps"),
        &["renew"],
    );
    assert!(
        crashed.stderr.contains("failpoint after-temps hit"),
        "{crashed}"
    );
    let r = f.run(&["check"]);
    assert_eq!(r.code, 0, "{r}");
    assert_page(&r.stdout);
    let text = normalise(&r.stdout, &f.root_str());
    // The note is one paragraph between the tables and the summary, wrapped at 120.
    let paragraphs: Vec<&str> = text.split("\n\n").collect();
    let n = paragraphs.len();
    assert!(n >= 4, "{text}");
    let state = f.state().join("pending.json");
    assert_eq!(
        paragraphs[n - 2].replace('\n', " "),
        format!(
            "The daemon has not run with this state directory: no pass will run until it does \
             (`systemctl enable --now certrenewd`). \
             An interrupted renewal of 3 certificates (<root>/etc/etcd/etcd-client.crt, \
             <root>/etc/etcd/etcd-server.crt, <root>/etc/kubernetes/pki/apiserver-etcd-client.crt) \
             will be finished or rolled back by the next pass, or when the daemon starts; its \
             record is {}. \
             Restarts are not coordinated with other controllers: [coordination] enabled = false.",
            state.display()
        ),
        "{text}"
    );
    assert!(
        paragraphs[n - 1].starts_with(
            "6 certificates: 3 ok, 2 due, 1 expired — no pass while the daemon is not running"
        ),
        "{text}"
    );

    let doc = f.run(&["check", "--output", "json"]).json();
    let root = f.root_str();
    assert_eq!(
        doc["interrupted_renewal"],
        serde_json::json!({
            "record": state.display().to_string(),
            "certificates": [
                format!("{root}/etc/etcd/etcd-client.crt"),
                format!("{root}/etc/etcd/etcd-server.crt"),
                format!("{root}/etc/kubernetes/pki/apiserver-etcd-client.crt"),
            ],
            "error": null,
        })
    );

    let finished = f.run(&["renew", "--no-restart"]);
    assert_eq!(finished.code, 0, "{finished}");
    let after = f.run(&["check"]);
    assert!(!after.stdout.contains("interrupted"), "{after}");
    assert!(
        f.run(&["check", "--output", "json"])
            .json()
            .get("interrupted_renewal")
            .is_none()
    );
}

// ------------------------------------------------------------------ renew on systemd

/// The StarlingX tree with `etc/etcd` restarting `unit`, and `etc/kubernetes/pki` none.
fn renew_fixture(unit: &str) -> Fixture {
    let f = Fixture::new("starlingx");
    f.write_config(
        "bus = \"user\"\nvalidity_days = 365\nrestart_timeout_secs = 10\nrestart_settle_secs = 1",
        &[
            ("etc/etcd", &[unit], ""),
            (
                "etc/kubernetes/pki",
                &[],
                "kubeconfigs = []\nstatic_pods = []",
            ),
        ],
    );
    f
}

/// Starts `unit`, which runs only on the `etc/etcd/etcd-server.crt` of `f` it starts with.
fn picky(sb: &Sandbox, f: &Fixture, unit: &str) {
    let cert = f.root.join("etc/etcd/etcd-server.crt");
    let accepted = f.tmp.path().join("accepted.crt");
    fs::copy(&cert, &accepted).unwrap();
    sb.install_unit(
        unit,
        &format!(
            "[Service]\nExecStart=/bin/sh -c 'cmp -s {} {} && exec sleep infinity; echo refusing the new certificate; exit 3'\n",
            cert.display(),
            accepted.display()
        ),
    )
    .unwrap();
    sb.systemctl(["start", unit]).unwrap();
}

/// `certrenewd renew ARGS` in the sandbox: exit status, stdout, stderr.
fn renew_in(sb: &Sandbox, f: &Fixture, args: &[&str]) -> (i32, String, String) {
    let config = f.config();
    let mut all = vec!["--config", config.to_str().expect("utf-8"), "renew"];
    all.extend_from_slice(args);
    let out = sb.exec(BIN, &all);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A unit that refuses the renewed certificate: its certificates are `ROLLED BACK` (why,
/// and the back-off), but for the one whose previous certificate had expired, which keeps
/// its new pair (`renewed`, and why it was not rolled back); the unit `NOT ACTIVE` and then
/// active again on the previous ones, the leaf of the other watch `renewed`; the summary
/// says so; exit 1. The JSON carries the same facts.
#[test]
fn renew_says_what_became_of_each_certificate_and_unit_when_a_unit_fails() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let text_tree = renew_fixture("picky.service");
    let json_tree = renew_fixture("picky-json.service");
    picky(&sb, &text_tree, "picky.service");
    picky(&sb, &json_tree, "picky-json.service");

    let (code, stdout, stderr) = renew_in(&sb, &text_tree, &[]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let root = text_tree.root_str();
    let lines: Vec<&str> = stdout.lines().collect();
    let rolled = |name: &str| {
        format!(
            "ROLLED BACK   {root}/etc/etcd/{name}: picky.service did not come back on the new certificate; the previous certificate and key are back in place"
        )
    };
    assert!(
        lines[0].starts_with(&format!(
            "renewed       {root}/etc/etcd/etcd-client.crt serial "
        )),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("              not rolled back: the previous certificate expired on ")
            && lines[1].ends_with(", so the new one stays"),
        "{stdout}"
    );
    assert_eq!(lines[2], rolled("etcd-server.crt"), "{stdout}");
    assert!(
        lines[3].starts_with("              attempt 1 rolled back; "),
        "{stdout}"
    );
    assert!(
        lines[4].starts_with(&format!(
            "renewed       {root}/etc/kubernetes/pki/apiserver-etcd-client.crt serial "
        )),
        "{stdout}"
    );
    assert!(
        lines[5].starts_with("NOT ACTIVE    picky.service: "),
        "{stdout}"
    );
    assert!(
        lines[6].starts_with("              started again on the previous certificates: "),
        "{stdout}"
    );
    assert_eq!(lines[7], "", "{stdout}");
    assert_eq!(
        lines[8],
        "3 certificates: 2 renewed, 1 rolled back; 1 unit: 1 not active — failed, see `certrenewd alarms`",
        "{stdout}"
    );
    assert_eq!(lines.len(), 9, "{stdout}");
    assert_eq!(
        sb.unit_property("picky.service", "ActiveState").unwrap(),
        "active"
    );

    let (code, json, stderr) = renew_in(&sb, &json_tree, &["--output", "json"]);
    assert_eq!(code, 1, "{json}\n{stderr}");
    let doc: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let root = json_tree.root_str();
    let certs = doc["certificates"].as_array().expect("certificates");
    let states: Vec<(&str, &str)> = certs
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    let p = |rel: &str| format!("{root}/{rel}");
    let (client, server, apiserver) = (
        p("etc/etcd/etcd-client.crt"),
        p("etc/etcd/etcd-server.crt"),
        p("etc/kubernetes/pki/apiserver-etcd-client.crt"),
    );
    assert_eq!(
        states,
        [
            (client.as_str(), "renewed"),
            (server.as_str(), "rolled_back"),
            (apiserver.as_str(), "renewed"),
        ]
    );
    assert!(
        certs[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("picky-json.service did not come back on the new certificate"),
        "{doc:#}"
    );
    assert!(
        certs[1]["backoff"]
            .as_str()
            .unwrap()
            .starts_with("attempt 1 rolled back")
    );
    assert!(
        certs[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not rolled back: the previous certificate expired on "),
        "{doc:#}"
    );
    assert!(
        certs[1]["serial"].is_null() && certs[0]["serial"].is_string(),
        "{doc:#}"
    );
    let unit = &doc["units"][0];
    assert_eq!(unit["name"], "picky-json.service");
    assert_eq!(unit["state"], "failed");
    assert_eq!(unit["after_rollback"]["active"], true, "{doc:#}");
    assert_eq!(doc["success"], false);
    assert_eq!(doc["deferred"], Value::Null);
    assert_eq!(
        doc["summary"],
        "3 certificates: 2 renewed, 1 rolled back; 1 unit: 1 not active — failed, see `certrenewd alarms`"
    );
}

/// Units that take the renewed certificate: each certificate `renewed`, the unit
/// `restarted` and active; `done`; exit 0. The JSON says the same.
#[test]
fn renew_says_renewed_and_restarted_when_all_goes_well() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    sb.install_unit("etcd.service", "[Service]\nExecStart=/bin/sleep infinity\n")
        .unwrap();
    sb.systemctl(["start", "etcd.service"]).unwrap();
    let (text_tree, json_tree) = (renew_fixture("etcd.service"), renew_fixture("etcd.service"));

    let (code, stdout, stderr) = renew_in(&sb, &text_tree, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let root = text_tree.root_str();
    let lines: Vec<&str> = stdout.lines().collect();
    for (line, rel) in lines.iter().zip([
        "etc/etcd/etcd-client.crt",
        "etc/etcd/etcd-server.crt",
        "etc/kubernetes/pki/apiserver-etcd-client.crt",
    ]) {
        assert!(
            line.starts_with(&format!("renewed       {root}/{rel} serial ")),
            "{stdout}"
        );
    }
    assert!(
        lines[3].starts_with("restarted     etcd.service: restarted; active (running)"),
        "{stdout}"
    );
    assert_eq!(
        &lines[4..],
        ["", "3 certificates: 3 renewed; 1 unit: 1 restarted — done"],
        "{stdout}"
    );

    let (code, json, stderr) = renew_in(&sb, &json_tree, &["--output", "json"]);
    assert_eq!(code, 0, "{json}\n{stderr}");
    let doc: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let certs = doc["certificates"].as_array().expect("certificates");
    assert_eq!(certs.len(), 3, "{doc:#}");
    for c in certs {
        assert_eq!(c["state"], "renewed", "{doc:#}");
        assert!(c["reason"].is_null() && c["backoff"].is_null(), "{doc:#}");
        assert!(c["not_after"].as_str().unwrap().ends_with('Z'), "{doc:#}");
        assert!(c.get("user").is_none(), "{doc:#}");
    }
    assert_eq!(doc["units"][0]["name"], "etcd.service");
    assert_eq!(doc["units"][0]["state"], "restarted");
    assert_eq!(doc["units"][0]["after_rollback"], Value::Null);
    assert_eq!(doc["success"], true);
    assert_eq!(
        doc["summary"],
        "3 certificates: 3 renewed; 1 unit: 1 restarted — done"
    );
    assert!(Path::new(&json_tree.state()).join("backup").is_dir());
}

/// A certificate's symlinks are on a line of their own below its row, so that a
/// long link name never cuts the certificate's own name (kubelet's rotated names are long).
#[test]
fn check_names_symlinks_below_the_row_and_cuts_no_name() {
    let f = Fixture::new("kubeadm");
    let root = f.root_str();
    let pki = format!("{root}/etc/kubernetes/pki");
    let link = "apiserver-kubelet-client-2026-11-26-10-00-00-rotated-by-an-operator-script.crt";
    std::os::unix::fs::symlink("apiserver-kubelet-client.crt", format!("{pki}/{link}")).unwrap();
    f.write_config(
        "",
        &[("etc/kubernetes/pki", &["kube-apiserver.service"], "")],
    );
    let r = f.run(&["check"]);
    assert_eq!(r.code, 0, "{r}");
    assert_page(&r.stdout);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.starts_with("  apiserver-kubelet-client.crt "))
        .unwrap_or_else(|| panic!("no whole row for apiserver-kubelet-client.crt:\n{r}"));
    assert_eq!(
        lines[row + 1].trim(),
        format!("also {link} (symlink to it)"),
        "{r}"
    );
    assert!(!r.stdout.contains('…'), "a name was cut:\n{r}");
}

/// `certrenewd --config CONFIG ARGS` on a terminal `cols` columns wide (a pty from
/// util-linux's `script`, sized with `stty`), as an operator runs it: its output, the
/// terminal's line ends made `\n`.
fn on_terminal(f: &Fixture, cols: usize, args: &[&str]) -> String {
    on_tty(f, &format!("cols {cols} rows 50"), args)
}

/// [`on_terminal`] sized by `stty SIZE`.
fn on_tty(f: &Fixture, size: &str, args: &[&str]) -> String {
    let command = format!(
        "stty {size}; exec env -u COLUMNS {BIN} --config {} {}",
        f.config().display(),
        args.join(" ")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs the command on a terminal");
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

/// A terminal that says its columns but not its rows (`stty cols 80` on a serial console
/// leaves rows at 0) is laid out at its columns, not at the 120 of a pipe.
#[test]
fn a_terminal_without_rows_is_laid_out_at_its_columns() {
    let f = Fixture::new("kubeadm");
    f.write_config(
        "schedule = \"0 0 0 * * *\"",
        &[("etc/kubernetes/pki", &[], "")],
    );
    let text = on_tty(&f, "cols 80 rows 0", &["check"]);
    assert!(text.contains("CERTIFICATE AUTHORITY"), "{text}");
    assert!(
        table::max_width(&text) <= 80,
        "wider than 80 columns:\n{text}"
    );
    assert!(table::max_width(&text) > 60, "{text}");
}

/// On a terminal 80 and 120 columns wide, `check` of the kubeadm tree keeps every file name
/// whole (two names elided alike, `apise…d-client.crt`, cannot be told apart) and every row
/// on one line (at 80, the dates without their time and RESIDUAL TIME as LEFT), a
/// kubeconfig of one user without its user, and no line wider than the terminal.
#[test]
fn check_keeps_file_names_whole_at_80_and_120_columns() {
    let f = Fixture::new("kubeadm");
    let root = f.root_str();
    let kubeconfigs = KUBECONFIGS.replace("etc/", &format!("{root}/etc/"));
    f.write_config(
        "schedule = \"0 0 0 * * *\"",
        &[(
            "etc/kubernetes/pki",
            &["kube-apiserver.service"],
            &kubeconfigs,
        )],
    );
    for cols in [80, 120] {
        let text = on_terminal(&f, cols, &["check"]);
        assert!(text.contains("CERTIFICATE AUTHORITY"), "{cols}:\n{text}");
        assert!(
            table::max_width(&text) <= cols,
            "wider than {cols} columns:\n{text}"
        );
        assert!(!text.contains('…'), "elided at {cols} columns:\n{text}");
        for name in [
            "apiserver-etcd-client.crt",
            "apiserver-kubelet-client.crt",
            "etcd/healthcheck-client.crt",
            "front-proxy-client.crt",
            "controller-manager.conf ",
        ] {
            let row = text
                .lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("{name} not whole at {cols} columns:\n{text}"));
            assert!(
                row.ends_with(" ok") || row.ends_with(" due"),
                "{name} at {cols} columns: its cells not on its line:\n{text}"
            );
            assert!(!row.contains("(user "), "{cols}:\n{text}");
            // At 80 the date alone, at 120 with its time.
            assert_eq!(row.contains(':'), cols == 120, "{cols}:\n{text}");
        }
        let header = text.lines().next().unwrap();
        match cols {
            80 => assert!(header.contains(" LEFT "), "{text}"),
            _ => assert!(header.contains("RESIDUAL TIME"), "{text}"),
        }
    }
}

/// On a terminal 80 and 120 columns wide, `alarms` after a pass on the hard-way tree (its
/// CA key not on this host: 250.003, and 500.200 per due leaf) keeps each row within the
/// terminal and each entity whole on one line, as `--acknowledge` and journalctl take it: an
/// entity too long for its row goes on the line below it (only an entity longer than the
/// page is wider than it).
#[test]
fn alarms_fit_80_and_120_columns_with_paths_whole() {
    let f = Fixture::new("hardway");
    f.write_config(
        "",
        &[
            ("etc/etcd", &["etcd.service"], ""),
            ("var/lib/kubernetes", &["kube-apiserver.service"], ""),
            ("var/lib/kubelet", &["kubelet.service"], ""),
        ],
    );
    let r = f.run(&["renew", "--no-restart"]);
    assert_eq!(r.code, 1, "{r}");
    let leaves = [
        "etc/etcd/kubernetes.pem",
        "var/lib/kubelet/worker-0.pem",
        "var/lib/kubernetes/kubernetes.pem",
    ];
    for cols in [80, 120] {
        let text = on_terminal(&f, cols, &["alarms"]);
        assert!(text.starts_with("ID "), "{cols}:\n{text}");
        let host = format!("host={}", common::e2e::hostname());
        let entities: Vec<String> = (leaves.iter())
            .map(|leaf| format!("{host}.certificate={}", f.root.join(leaf).display()))
            .collect();
        let within = text
            .lines()
            .filter(|l| !entities.iter().any(|e| l.trim_start() == e));
        assert!(
            within.map(table::max_width).max().unwrap_or(0) <= cols,
            "wider than {cols} columns:\n{text}"
        );
        for entity in &entities {
            assert!(
                text.lines().any(|l| l.starts_with("500.200 ")
                    && l.ends_with(&format!("  {entity}"))
                    || l.trim_start() == entity),
                "{entity} not whole at {cols} columns:\n{text}"
            );
        }
    }
}

/// On a terminal 80 and 120 columns wide, `renew --dry-run` and `renew --no-restart` of the
/// kubeadm tree wrap each line within the terminal under the text after the state word, the
/// paths whole; piped, each item stays one line (for scripts and `grep`).
#[test]
fn renew_wraps_within_80_and_120_columns_on_a_terminal() {
    let f = Fixture::new("kubeadm");
    f.write_config(
        "schedule = \"0 0 0 * * *\"",
        &[("etc/kubernetes/pki", &["kube-apiserver.service"], "")],
    );
    let pki = f.root.join("etc/kubernetes/pki");
    let due = [
        "apiserver-kubelet-client.crt",
        "etcd/healthcheck-client.crt",
    ];
    let piped = f.run(&["renew", "--dry-run", "--no-restart"]);
    assert!(table::max_width(&piped.stdout) > 120, "{piped}");
    for cols in [80, 120] {
        let text = on_terminal(&f, cols, &["renew", "--dry-run", "--no-restart"]);
        assert!(text.contains("would renew   "), "{cols}:\n{text}");
        assert!(
            table::max_width(&text) <= cols,
            "wider than {cols} columns:\n{text}"
        );
        for (l, next) in text.lines().zip(text.lines().skip(1)) {
            if l.starts_with("would renew") && !next.is_empty() && next.starts_with(' ') {
                assert!(next.starts_with(&" ".repeat(14)), "{cols}:\n{text}");
            }
        }
        assert_paths(&text, &pki, &due, cols);
    }
    for cols in [80, 120] {
        let tree = Fixture::new("kubeadm");
        tree.write_config(
            "schedule = \"0 0 0 * * *\"",
            &[("etc/kubernetes/pki", &["kube-apiserver.service"], "")],
        );
        let text = on_terminal(&tree, cols, &["renew", "--no-restart"]);
        assert!(text.contains("renewed       "), "{cols}:\n{text}");
        assert!(
            table::max_width(&text) <= cols,
            "wider than {cols} columns:\n{text}"
        );
        assert_paths(&text, &tree.root.join("etc/kubernetes/pki"), &due, cols);
    }
}

/// Each of `names` under `dir` in `text`: its file name whole on one line, the path whole
/// once the breaks after a `/` are joined.
fn assert_paths(text: &str, dir: &Path, names: &[&str], cols: usize) {
    let joined = text.replace(&format!("/\n{}", " ".repeat(14)), "/");
    let joined = joined.replace(&format!("/\n{}", " ".repeat(13)), "/");
    for name in names {
        let path = dir.join(name).display().to_string();
        let file = name.rsplit('/').next().unwrap();
        assert!(
            joined.contains(&path) && text.lines().any(|l| l.contains(file)),
            "{path} not whole at {cols}:\n{text}"
        );
    }
}
