//! CA renewal without a flag day, through the real binary over CAs made by the real
//! openssl under faketime (`tests/fixtures/mkca-aging.sh`: a ten-year root with 250 days
//! left, an intermediate under it, leaves signed today). The root and the intermediate are
//! re-issued with the same key, subject, issuer, key identifiers and extensions, a new
//! serial and their old lifetime from now; `openssl verify` accepts every leaf against the
//! old and the new CA, and, with the clock past the old root's end (`-attime`), against the
//! new one only. A leaf whose authorityKeyIdentifier names its CA's serial makes the
//! renewal refused, with why, and nothing changed. Every copy of the root on the node (a
//! trust bundle, a chain file, the same CA and key under another name, a kubeconfig's
//! `certificate-authority-data`) is replaced with the new certificate, every other byte
//! kept, and a copy left behind is caught up by the next pass. A kubeadm-shaped tree made by
//! cfssl (mkpki.sh `kubeadm --ca-left`) has its three CAs re-issued the same way.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::failpoints;
use common::pki::{self, BIN, Run, SServer, openssl, openssl_out, run_cmd, toml_str};
use common::walk::{Node, snapshot};

const MKCA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkca-aging.sh");

/// The aging PKI in a temp dir, a copy of it as made, and a config watching it.
pub(crate) struct Aging {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) config: PathBuf,
}

impl Aging {
    pub(crate) fn new(args: &[&str]) -> Aging {
        let tmp = tempfile::tempdir().expect("temp dir");
        let out = Command::new("bash")
            .arg(MKCA)
            .arg(tmp.path())
            .args(args)
            .output()
            .expect("running mkca-aging.sh");
        assert!(
            out.status.success(),
            "mkca-aging.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let copy = Command::new("cp")
            .arg("-a")
            .arg(tmp.path().join("pki"))
            .arg(tmp.path().join("old"))
            .status()
            .expect("cp");
        assert!(copy.success());
        let config = tmp.path().join("certrenewd.toml");
        let admin = tmp.path().join("admin.conf");
        let kubeconfigs = match admin.exists() {
            true => {
                fs::copy(&admin, tmp.path().join("old/admin.conf")).unwrap();
                format!("kubeconfigs = [{}]\n", toml_str(&admin))
            }
            false => String::new(),
        };
        fs::write(
            &config,
            format!(
                "state_dir = {}\n[[watch]]\npath = {}\n{kubeconfigs}",
                toml_str(&tmp.path().join("state")),
                toml_str(&tmp.path().join("pki"))
            ),
        )
        .unwrap();
        Aging { tmp, config }
    }

    pub(crate) fn pki(&self, name: &str) -> String {
        self.tmp.path().join("pki").join(name).display().to_string()
    }

    pub(crate) fn old(&self, name: &str) -> String {
        self.tmp.path().join("old").join(name).display().to_string()
    }

    pub(crate) fn run(&self, args: &[&str]) -> Run {
        run_cmd(
            Command::new(BIN)
                .arg("--config")
                .arg(&self.config)
                .args(args),
            args,
        )
    }

    /// `check --output json`'s entry for `name`.
    pub(crate) fn check_entry(&self, name: &str) -> serde_json::Value {
        let run = self.run(&["check", "--output", "json"]);
        assert_eq!(run.code, 0, "{run}");
        let doc = run.json();
        let path = self.pki(name);
        doc["certificates"]
            .as_array()
            .expect("certificates")
            .iter()
            .find(|c| c["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} not in {doc:#}"))
            .clone()
    }
}

/// What a same-key re-issue must keep: subject, issuer, key, key identifiers, constraints.
fn kept(cert: &str) -> String {
    openssl(&[
        "x509",
        "-in",
        cert,
        "-noout",
        "-subject",
        "-issuer",
        "-pubkey",
        "-ext",
        "subjectKeyIdentifier,authorityKeyIdentifier,basicConstraints,keyUsage",
    ])
}

fn field(cert: &str, flag: &str) -> String {
    openssl(&["x509", "-in", cert, "-noout", flag])
        .trim()
        .to_string()
}

/// `openssl verify` of `leaf` against `ca` (and `untrusted` intermediates), at `at`.
fn verifies(ca: &str, untrusted: Option<&str>, leaf: &str, at: Option<i64>) -> bool {
    let at = at.map(|t| t.to_string());
    let mut args = vec!["verify", "-CAfile", ca];
    if let Some(u) = untrusted {
        args.extend(["-untrusted", u]);
    }
    if let Some(t) = &at {
        args.extend(["-attime", t.as_str()]);
    }
    args.push(leaf);
    openssl_out(&args).status.success()
}

#[test]
fn a_root_and_an_intermediate_near_their_end_are_reissued_with_the_same_key() {
    let a = Aging::new(&[]);
    let ca = a.entry_status("ca.crt");
    assert_eq!(
        ca, "due",
        "a root with 250 days left is inside the one-year CA window"
    );
    assert_eq!(a.entry_status("inter-ca.crt"), "due");

    let dry = a.run(&["renew", "--dry-run"]);
    assert_eq!(dry.code, 0, "{dry}");
    assert!(
        dry.stdout.contains(&format!(
            // Made seconds ago for 250 days: 249.9 whole tenths left, as check's `249d`.
            "would renew   {} (due, 249.9 days left; self-signed: re-issued with its own key)",
            a.pki("ca.crt")
        )),
        "{dry}"
    );
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    // Where operators look (the journal; stderr here): until when the copies this node
    // cannot reach keep working, and what to copy there.
    let old_end = field(&a.old("ca.crt"), "-enddate");
    let old_end = old_end.split_once('=').unwrap().1.to_string();
    let out = Command::new("date")
        .args(["-u", "-d", &old_end, "+%Y-%m-%d %H:%M UTC"])
        .output()
        .unwrap();
    let old_end = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let said = format!(
        "keep working until {old_end}; copy {} there before then",
        a.pki("ca.crt")
    );
    assert!(run.stderr.contains(&said), "{said}\nin\n{run}");
    assert!(
        run.stdout
            .contains(&format!("renewed       {} serial ", a.pki("ca.crt")))
            && run
                .stdout
                .contains("lifetime 3650 days, the old certificate's"),
        "{run}"
    );

    for name in ["ca.crt", "inter-ca.crt"] {
        let (old, new) = (a.old(name), a.pki(name));
        assert_eq!(
            kept(&old),
            kept(&new),
            "{name}: subject, key, identifiers kept"
        );
        assert_ne!(field(&old, "-serial"), field(&new, "-serial"), "{name}");
        // The old lifetime from now, never inflated (a few minutes back for clock skew).
        assert_eq!(
            common::lifetime_secs(&old),
            common::lifetime_secs(&new),
            "{name}"
        );
    }
    assert_eq!(common::lifetime_secs(a.pki("ca.crt")), 3650 * 86_400);
    // The leaves are untouched, and every one verifies against the old CAs and the new ones,
    // in any mix.
    for leaf in ["etcd-server.crt", "etcd-client.crt", "etcd-peer.crt"] {
        assert_eq!(
            fs::read(a.old(leaf)).unwrap(),
            fs::read(a.pki(leaf)).unwrap(),
            "{leaf} was not touched"
        );
    }
    for (root, inter) in [
        (a.old("ca.crt"), a.old("inter-ca.crt")),
        (a.pki("ca.crt"), a.pki("inter-ca.crt")),
        (a.old("ca.crt"), a.pki("inter-ca.crt")),
        (a.pki("ca.crt"), a.old("inter-ca.crt")),
    ] {
        for leaf in ["etcd-server.crt", "etcd-client.crt"] {
            assert!(
                verifies(&root, None, &a.pki(leaf), None),
                "{leaf} vs {root}"
            );
        }
        assert!(
            verifies(&root, Some(&inter), &a.pki("etcd-peer.crt"), None),
            "etcd-peer.crt vs {root} and {inter}"
        );
    }
    // The flag day that did not happen: a month after the old root's end, the leaves verify
    // against the new root, not the old one.
    let end = field(&a.old("ca.crt"), "-enddate");
    let end = end.split_once('=').unwrap().1.to_string();
    let out = Command::new("date")
        .args(["-u", "-d", &format!("{end} + 30 days"), "+%s"])
        .output()
        .unwrap();
    let after: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let server = a.pki("etcd-server.crt");
    assert!(!verifies(&a.old("ca.crt"), None, &server, Some(after)));
    assert!(verifies(&a.pki("ca.crt"), None, &server, Some(after)));
    assert!(verifies(
        &a.pki("ca.crt"),
        Some(&a.pki("inter-ca.crt")),
        &a.pki("etcd-peer.crt"),
        Some(after)
    ));
    // Renewed once: the next pass finds nothing due, and the old CA is in the backups.
    assert_eq!(a.entry_status("ca.crt"), "ok");
    let again = a.run(&["renew"]);
    assert_eq!(again.code, 0, "{again}");
    assert!(again.stdout.contains("nothing to renew"), "{again}");
    let backups = snapshot(&a.tmp.path().join("state"));
    let old_root = fs::read(a.old("ca.crt")).unwrap();
    assert!(
        backups
            .values()
            .any(|n| matches!(n, Node::File { bytes, .. } if *bytes == old_root)),
        "the old root is backed up"
    );
}

#[test]
fn a_leaf_pinned_to_its_cas_serial_makes_the_renewal_refused_with_nothing_changed() {
    let a = Aging::new(&["--pinned"]);
    let entry = a.check_entry("ca.crt");
    assert_eq!(entry["status"], "unrenewable", "{entry:#}");
    let why = entry["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "1 certificate signed by it name this CA's serial in their authorityKeyIdentifier and would not verify against a re-issue: {}",
            a.pki("etcd-client.crt")
        )),
        "{why}"
    );
    let before = snapshot(&a.tmp.path().join("pki"));
    let run = a.run(&["renew"]);
    assert_eq!(
        run.code, 1,
        "inside its window and not renewable: the pass fails\n{run}"
    );
    assert!(run.stdout.contains("authorityKeyIdentifier"), "{run}");
    // Nothing changed: not the root, nor the intermediate under it (whose issuer ends
    // within the window and is not renewed).
    assert_eq!(
        snapshot(&a.tmp.path().join("pki")),
        before,
        "nothing changed"
    );
    assert_eq!(a.entry_status("inter-ca.crt"), "unrenewable");
}

/// The other two refusals of item 3, each on its own aging tree: a CA key file that is not
/// the CA certificate's key (the key beside `ca.crt` replaced by another, as after a botched
/// restore), and a cross-signed CA (the same subject and key issued by another root, made
/// by openssl). Each: `check` says why, the pass fails with 250.003 saying it, `renew` says
/// it, and nothing under the watched directory changes.
#[test]
fn a_ca_whose_key_does_not_match_or_that_is_cross_signed_is_refused_with_nothing_changed() {
    let mismatch = Aging::new(&[]);
    let other_key = mismatch.tmp.path().join("other.key");
    pki::ec_key(&other_key);
    fs::copy(&other_key, mismatch.pki("ca.key")).unwrap();

    let cross = Aging::new(&[]);
    let dir = cross.tmp.path();
    let at = |f: &str| dir.join(f).display().to_string();
    let ext = dir.join("ca.ext");
    fs::write(
        &ext,
        "basicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
         subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n",
    )
    .unwrap();
    let (root_key, root_crt) = (at("bridge-root.key"), at("bridge-root.crt"));
    pki::ec_key(Path::new(&root_key));
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &root_key,
        "-subj",
        "/O=bridge/CN=bridge-root",
        "-days",
        "3650",
        "-out",
        &root_crt,
    ]);
    let csr = at("ca.csr");
    openssl(&[
        "req",
        "-new",
        "-key",
        &cross.pki("ca.key"),
        "-subj",
        "/O=example/CN=etcd-ca",
        "-out",
        &csr,
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &root_crt,
        "-CAkey",
        &root_key,
        "-CAcreateserial",
        "-days",
        "1825",
        "-extfile",
        ext.to_str().unwrap(),
        "-out",
        &cross.pki("ca-cross.crt"),
    ]);

    for (a, said) in [
        (
            &mismatch,
            format!(
                "CA key does not match CA certificate: {} does not belong to {}",
                mismatch.pki("ca.key"),
                mismatch.pki("ca.crt")
            ),
        ),
        (
            &cross,
            format!(
                "cross-signed: {} holds the same subject and key from another issuer; rotate it by hand",
                cross.pki("ca-cross.crt")
            ),
        ),
    ] {
        let entry = a.check_entry("ca.crt");
        assert_eq!(entry["status"], "unrenewable", "{entry:#}");
        assert!(
            entry["reason"].as_str().unwrap_or_default().contains(&said),
            "{entry:#}"
        );
        let before = snapshot(&a.tmp.path().join("pki"));
        let run = a.run(&["renew"]);
        assert_eq!(
            run.code, 1,
            "inside its window and not renewable: the pass fails\n{run}"
        );
        assert!(run.stdout.contains(&said), "{said}\nin\n{run}");
        assert_eq!(
            snapshot(&a.tmp.path().join("pki")),
            before,
            "nothing changed: {said}"
        );
        let alarms = a.run(&["alarms", "--output", "json"]);
        let raised = alarms.json()["alarms"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| {
                x["id"] == "250.003" && x["reason"].as_str().is_some_and(|r| r.contains(&said))
            });
        assert!(raised, "no 250.003 saying {said}: {alarms}");
    }
}

/// The base64 of a file, as kubeadm writes `*-data` values.
fn b64(path: &str) -> String {
    let out = Command::new("base64").args(["-w0", path]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_copy_of_a_renewed_ca_on_the_node_is_replaced_and_nothing_else() {
    let a = Aging::new(&["--copies"]);
    let copies = [
        "etcd/ca.crt",
        "etcd-server-chain.pem",
        "trust/ca-bundle.pem",
    ];
    let admin = a.tmp.path().join("admin.conf").display().to_string();
    // check: the same CA under another name, with its key, is a copy, not a second CA to
    // renew; its status follows the CA's.
    let entry = a.check_entry("etcd/ca.crt");
    assert_eq!(entry["copy_of"], a.pki("ca.crt").as_str(), "{entry:#}");
    assert_eq!(entry["status"], "due", "{entry:#}");
    let untouched = snapshot(a.tmp.path());
    let dry = a.run(&["renew", "--dry-run"]);
    assert_eq!(dry.code, 0, "{dry}");
    assert_eq!(
        snapshot(a.tmp.path()),
        untouched,
        "a dry run changes nothing"
    );
    for f in copies.iter().map(|c| a.pki(c)).chain([admin.clone()]) {
        let line = format!("would replace {f}: its copy of CA {}", a.pki("ca.crt"));
        assert!(dry.stdout.contains(&line), "{line}\nin\n{dry}");
    }
    assert!(
        !dry.stdout
            .contains(&format!("would renew   {}", a.pki("etcd/ca.crt"))),
        "renewed once, from its first file\n{dry}"
    );

    let run = a.run(&["renew", "--output", "json"]);
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json();
    let replaced: Vec<&str> = doc["copies"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|c| assert_eq!(c["state"], "replaced", "{c:#}"))
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(replaced.len(), 4, "{doc:#}");
    let new_ca = fs::read_to_string(a.pki("ca.crt")).unwrap();
    let old_ca = fs::read_to_string(a.old("ca.crt")).unwrap();
    assert_ne!(new_ca, old_ca);
    // The same CA under another name: the new certificate, byte for byte; its key kept.
    assert_eq!(fs::read_to_string(a.pki("etcd/ca.crt")).unwrap(), new_ca);
    assert_eq!(
        fs::read(a.pki("etcd/ca.key")).unwrap(),
        fs::read(a.old("etcd/ca.key")).unwrap()
    );
    // A bundle keeps its other CA, first; a chain file its leaf, first.
    let other = fs::read_to_string(a.old("other-ca.crt")).unwrap();
    let leaf = fs::read_to_string(a.old("etcd-server.crt")).unwrap();
    assert_eq!(
        fs::read_to_string(a.pki("trust/ca-bundle.pem")).unwrap(),
        format!("{other}{new_ca}")
    );
    assert_eq!(
        fs::read_to_string(a.pki("etcd-server-chain.pem")).unwrap(),
        format!("{leaf}{new_ca}")
    );
    // The kubeconfig: only the value of its cluster's certificate-authority-data changed.
    let before = fs::read_to_string(a.old("admin.conf")).unwrap();
    let want = before.replace(&b64(&a.old("ca.crt")), &b64(&a.pki("ca.crt")));
    assert_ne!(want, before);
    assert_eq!(fs::read_to_string(&admin).unwrap(), want);
    // Every leaf verifies against each copy (openssl reads a bundle as its trust store).
    for trust in copies.iter().map(|c| a.pki(c)) {
        for l in ["etcd-server.crt", "etcd-client.crt"] {
            assert!(verifies(&trust, None, &a.pki(l), None), "{l} vs {trust}");
        }
    }

    // A copy left behind (a crash between the CA and its copies, a roll-back) is an older
    // issue of the CA: the next pass replaces it, and touches nothing else.
    fs::copy(a.old("trust/ca-bundle.pem"), a.pki("trust/ca-bundle.pem")).unwrap();
    let before = snapshot(&a.tmp.path().join("pki"));
    let again = a.run(&["renew"]);
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again.stdout.contains(&format!(
            "replaced      {}: its copy of CA {}",
            a.pki("trust/ca-bundle.pem"),
            a.pki("ca.crt")
        )),
        "{again}"
    );
    assert_eq!(
        fs::read_to_string(a.pki("trust/ca-bundle.pem")).unwrap(),
        format!("{other}{new_ca}")
    );
    let after = snapshot(&a.tmp.path().join("pki"));
    let changed: Vec<_> = after
        .iter()
        .filter(|(p, n)| before.get(*p) != Some(*n))
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(changed.len(), 1, "only the bundle changed: {changed:?}");
    // And then nothing more.
    let third = a.run(&["renew"]);
    assert_eq!(third.code, 0, "{third}");
    assert!(third.stdout.contains("nothing to renew"), "{third}");
}

#[test]
fn the_old_certificate_trusted_elsewhere_is_shown_alarmed_and_acknowledged() {
    let a = Aging::new(&[]);
    // A warning period longer than the 250 days the old root has left: alarmed at once.
    let metrics = a.tmp.path().join("certrenewd.prom");
    let config = fs::read_to_string(&a.config).unwrap();
    fs::write(
        &a.config,
        format!(
            "ca_warning_days = 300\nmetrics_file = {}\n{config}",
            toml_str(&metrics)
        ),
    )
    .unwrap();
    let ca = a.pki("ca.crt");
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    let old_end = field(&a.old("ca.crt"), "-enddate");
    let old_end = old_end.split_once('=').unwrap().1.to_string();
    let date = |fmt: &str| {
        let out = Command::new("date")
            .args(["-u", "-d", &old_end, fmt])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // check: until when copies elsewhere work, what to copy, how to say it is done.
    let entry = a.check_entry("ca.crt");
    assert_eq!(
        entry["old_trusted_until"],
        date("+%Y-%m-%dT%H:%M:%SZ").as_str(),
        "{entry:#}"
    );
    let table = a.run(&["check"]);
    let advice = format!(
        "are trusted until {}; copy {ca} there, then run `certrenewd alarms --acknowledge {ca}`",
        date("+%Y-%m-%d %H:%M UTC")
    );
    // (The table wraps its notes to the page.)
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words(&table.stdout).contains(&words(&advice)),
        "{advice}\nin\n{table}"
    );
    // The alarm: 500.200 on the CA, saying the same.
    let alarms = a.run(&["alarms", "--output", "json"]).json();
    let list = alarms["alarms"].as_array().unwrap();
    let old = list
        .iter()
        .find(|x| x["id"] == "500.200" && x["entity"].as_str().unwrap().ends_with(&ca))
        .unwrap_or_else(|| panic!("no 500.200 for {ca}: {alarms:#}"));
    assert!(old["reason"].as_str().unwrap().contains(&advice), "{old:#}");
    // The metric carries the old certificate's end.
    let text = fs::read_to_string(&metrics).unwrap();
    let (start, end) = (
        format!("certrenewd_ca_old_certificate_not_after_seconds{{path=\"{ca}\",node="),
        format!("}} {}", date("+%s")),
    );
    assert!(
        (text.lines()).any(|l| l.starts_with(&start) && l.ends_with(&end)),
        "{start}...{end}\nin\n{text}"
    );

    // Acknowledged: the next pass clears the alarm; check and the metric stop showing it.
    let ack = a.run(&["alarms", "--acknowledge", &ca]);
    assert_eq!(ack.code, 0, "{ack}");
    assert!(ack.stdout.contains("acknowledged"), "{ack}");
    // Said again: no mistake, and it says so, rather than "not a re-issued CA".
    let again = a.run(&["alarms", "--acknowledge", &ca]);
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again
            .stdout
            .starts_with(&format!("already acknowledged: the copies of {ca}")),
        "{again}"
    );
    // A CA with no re-issue recorded is a mistake, and what is outstanding is named.
    let inter = a.pki("inter-ca.crt");
    let never = a.run(&["alarms", "--acknowledge", &a.pki("never-reissued-ca.crt")]);
    assert_eq!(never.code, 1, "{never}");
    let rest = format!("is not a re-issued CA awaiting acknowledgement (these are: {inter})");
    assert!(never.stderr.contains(&rest), "{never}");
    assert_eq!(a.run(&["alarms", "--acknowledge", &inter]).code, 0);
    let pass = a.run(&["renew"]);
    assert_eq!(pass.code, 0, "{pass}");
    let alarms = a.run(&["alarms", "--output", "json"]).json();
    assert_eq!(alarms["alarms"], serde_json::json!([]), "{alarms:#}");
    assert!(a.check_entry("ca.crt").get("old_trusted_until").is_none());
    let text = fs::read_to_string(&metrics).unwrap();
    assert!(!(text.lines()).any(|l| l.starts_with(&start)), "{text}");
}

/// Every file on the node holding the root CA (a kubeconfig's copy written out), each of
/// which must verify every leaf the root signed, whatever mix of old and new they hold.
fn trust_files(a: &Aging) -> Vec<String> {
    let mut files: Vec<String> = [
        "ca.crt",
        "etcd/ca.crt",
        "trust/ca-bundle.pem",
        "etcd-server-chain.pem",
    ]
    .iter()
    .map(|f| a.pki(f))
    .collect();
    let admin = fs::read_to_string(a.tmp.path().join("admin.conf")).unwrap();
    let data = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("the first cluster's CA");
    let decoded = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let out = a.tmp.path().join("admin-ca.pem");
    fs::write(&out, decoded.stdout).unwrap();
    files.push(out.display().to_string());
    files
}

#[test]
fn killed_or_failing_among_the_copies_no_mix_fails_and_the_next_pass_completes_them() {
    let bin = failpoints::binary();
    for point in ["after-renames", "after-copy-temp", "rename-copy:error@2"] {
        let a = Aging::new(&["--copies"]);
        let out = Command::new(bin)
            .arg("--config")
            .arg(&a.config)
            .arg("renew")
            .env("CERTRENEWD_FAILPOINT", point)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = point.split(':').next().unwrap();
        assert!(
            stderr.contains(&format!("failpoint {name} hit")),
            "{point}: {stderr}"
        );
        match point.contains(":error") {
            // A copy that cannot be written fails the pass, naming it; the others are done.
            true => {
                assert_eq!(out.status.code(), Some(1), "{point}: {stderr}");
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(stdout.contains("NOT REPLACED"), "{point}: {stdout}");
            }
            false => assert_eq!(out.status.code(), None, "{point}: must have aborted"),
        }
        // Whatever was written, every trust file verifies every leaf.
        for trust in trust_files(&a) {
            for leaf in ["etcd-server.crt", "etcd-client.crt"] {
                assert!(
                    verifies(&trust, None, &a.pki(leaf), None),
                    "{point}: {leaf} vs {trust}"
                );
            }
        }
        // The next pass (the daemon's, or the operator's) completes it.
        let run = a.run(&["renew"]);
        assert_eq!(run.code, 0, "{point}: {run}");
        let new_ca = fs::read(a.pki("ca.crt")).unwrap();
        assert_ne!(new_ca, fs::read(a.old("ca.crt")).unwrap(), "{point}");
        assert_eq!(fs::read(a.pki("etcd/ca.crt")).unwrap(), new_ca, "{point}");
        for f in trust_files(&a).iter().skip(2) {
            let text = fs::read(f).unwrap();
            assert!(
                text.windows(new_ca.len()).any(|w| w == new_ca.as_slice()),
                "{point}: {f} does not hold the renewed CA"
            );
        }
        let temps: Vec<_> = snapshot(a.tmp.path())
            .into_keys()
            .filter(|p| p.to_string_lossy().ends_with(".certrenewd-tmp"))
            .collect();
        assert!(temps.is_empty(), "{point}: {temps:?}");
        let alarms = a.run(&["alarms", "--output", "json"]).json();
        let failed = alarms["alarms"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == "250.003");
        assert!(!failed, "{point}: {alarms:#}");
    }
}

/// `openssl` under libfaketime at `offset` (`+280d`), preloaded directly: the `faketime`
/// wrapper names a semaphore by its PID, on which wrappers in other PID namespaces collide.
fn faketime(offset: &str) -> Command {
    let mut c = Command::new("openssl");
    c.env("LD_PRELOAD", common::libfaketime())
        .env("FAKETIME", offset);
    c
}

/// A TLS handshake between `openssl s_server` (the node's service: the renewed server
/// certificate, client certificates required and checked against `server_ca`) and `openssl
/// s_client` (a client certificate, trusting `client_ca`), both under `faketime -f OFFSET`.
/// `openssl s_server` under libfaketime at `offset`: the renewed server certificate, client
/// certificates required and checked against `ca`, until dropped.
fn serve(a: &Aging, offset: &str, ca: &str) -> SServer {
    let (cert, key) = (a.pki("etcd-server.crt"), a.pki("etcd-server.key"));
    SServer::start(faketime(offset), &cert, &key, ca, "2")
}

fn handshake(a: &Aging, offset: &str, server_ca: &str, client_ca: &str) -> (bool, String) {
    let server = serve(a, offset, server_ca);
    let accept = &server.accept;
    let client = faketime(offset)
        .args(["s_client", "-connect", accept])
        .args([
            "-cert",
            &a.pki("etcd-client.crt"),
            "-key",
            &a.pki("etcd-client.key"),
        ])
        .args([
            "-CAfile",
            client_ca,
            "-verify_return_error",
            "-verify_ip",
            "127.0.0.1",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client under faketime");
    drop(server);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr)
    );
    let ok = client.status.success() && said.contains("Verify return code: 0 (ok)");
    (ok, said)
}

/// The flag day that did not happen, on a running service: 30 days after the old root's end
/// (faketime for the server and the client), TLS with client certificates works on the new
/// root, the leaves untouched; with the old root it fails, as it would have everywhere.
#[test]
fn past_the_old_roots_end_services_and_clients_on_the_new_root_still_work() {
    let a = Aging::new(&[]);
    // Today both work, either way round.
    let (ok, said) = handshake(&a, "+0d", &a.old("ca.crt"), &a.old("ca.crt"));
    assert!(ok, "before the renewal: {said}");
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    for (server, client) in [
        (a.pki("ca.crt"), a.old("ca.crt")),
        (a.old("ca.crt"), a.pki("ca.crt")),
    ] {
        let (ok, said) = handshake(&a, "+0d", &server, &client);
        assert!(ok, "old and new mixed, today: {said}");
    }
    // The old root has 250 days left: 280 days on, only the new one verifies.
    let (ok, said) = handshake(&a, "+280d", &a.pki("ca.crt"), &a.pki("ca.crt"));
    assert!(ok, "on the new root, past the old one's end: {said}");
    let (ok, said) = handshake(&a, "+280d", &a.pki("ca.crt"), &a.old("ca.crt"));
    assert!(!ok, "a client still on the old root must fail then: {said}");
    assert!(said.contains("certificate has expired"), "{said}");
}

/// kubectl (Go's TLS, kubeconfig parsing) after a CA renewal: the renewed admin.conf (its
/// `certificate-authority-data` replaced by certrenewd) and the old one (as on a worker
/// this node cannot reach) both reach a service whose certificate the CA signed, presenting
/// the kubeconfig's client certificate; the kubeconfig's cluster with another CA does not.
#[test]
fn kubectl_with_the_old_or_the_renewed_kubeconfig_reaches_the_service() {
    let a = Aging::new(&["--copies"]);
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    let server = serve(&a, "+0d", &a.pki("ca.crt"));
    let url = format!("https://{}", server.accept);
    let renewed = a.tmp.path().join("admin.conf").display().to_string();
    let kubectl = |conf: &str, cluster: &str| {
        Command::new("kubectl")
            .args(["--kubeconfig", conf, "--server", &url, "--cluster", cluster])
            .args(["--request-timeout", "10s", "get", "--raw", "/"])
            .output()
            .expect("kubectl (Debian package kubernetes-client)")
    };
    for conf in [a.old("admin.conf"), renewed.clone()] {
        let out = kubectl(&conf, "kubernetes");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("<HTML>"),
            "{conf}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = kubectl(&renewed, "other");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("x509"), "{said}");
}

impl Aging {
    fn entry_status(&self, name: &str) -> String {
        self.check_entry(name)["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

const MKPKI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mkpki.sh");

/// The `certificate-authority-data` values of a kubeconfig, decoded.
fn ca_data(conf: &std::path::Path) -> Vec<Vec<u8>> {
    use base64::Engine;
    fs::read_to_string(conf)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .map(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .expect("base64")
        })
        .collect()
}

/// A kubeadm-shaped tree made by cfssl (Go's encoding: PrintableString names, PKCS#1 RSA
/// keys): its three CAs signed again by cfssl with their own keys and its profile's
/// `backdate`, 300 days left; leaves of 365 days (cfssl's `backdate` too), most due. One pass re-issues the three CAs
/// with their names' encoding, key, identifiers and constraints, their old lifetime from now;
/// replaces the CA in the four kubeconfigs; renews the due leaves with their old lifetime;
/// and every leaf verifies against the old CA certificate and the new one.
#[test]
fn a_kubeadm_tree_made_by_cfssl_has_its_three_cas_reissued_and_every_leaf_verifies_either_way() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let tree = tmp.path().join("tree");
    let out = Command::new("bash")
        .arg(MKPKI)
        .args(["kubeadm", &tree.display().to_string()])
        .args(["--backdate", "--ca-left", "300"])
        .output()
        .expect("mkpki.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old = tmp.path().join("old");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(&old)
            .status()
            .unwrap()
            .success()
    );
    let k = |root: &std::path::Path, f: &str| root.join("etc/kubernetes").join(f);
    let confs = [
        "admin.conf",
        "super-admin.conf",
        "controller-manager.conf",
        "scheduler.conf",
    ];
    let config = tmp.path().join("certrenewd.toml");
    let list: Vec<String> = confs.iter().map(|c| toml_str(&k(&tree, c))).collect();
    fs::write(
        &config,
        format!(
            "state_dir = {}\n[[watch]]\npath = {}\nkubeconfigs = [{}]\n",
            toml_str(&tmp.path().join("state")),
            toml_str(&k(&tree, "pki")),
            list.join(", ")
        ),
    )
    .unwrap();
    let run = run_cmd(
        Command::new(BIN).arg("--config").arg(&config).arg("renew"),
        &["renew"],
    );
    assert_eq!(run.code, 0, "{run}");
    let s = |p: std::path::PathBuf| p.display().to_string();
    let cas = ["pki/ca.crt", "pki/front-proxy-ca.crt", "pki/etcd/ca.crt"];
    for ca in cas {
        let (was, now) = (s(k(&old, ca)), s(k(&tree, ca)));
        assert!(
            run.stdout.contains(&format!("renewed       {now} serial ")),
            "{ca}: {run}"
        );
        assert_eq!(
            kept(&was),
            kept(&now),
            "{ca}: subject, key, identifiers kept"
        );
        let names = |c: &str| {
            openssl(&[
                "x509",
                "-in",
                c,
                "-noout",
                "-subject",
                "-issuer",
                "-nameopt",
                "multiline,show_type",
            ])
        };
        assert!(names(&now).contains("PRINTABLESTRING"), "{}", names(&now));
        assert_eq!(
            names(&was),
            names(&now),
            "{ca}: Go's PrintableString names kept"
        );
        assert_ne!(field(&was, "-serial"), field(&now, "-serial"), "{ca}");
        assert_eq!(
            common::lifetime_secs(&was),
            common::lifetime_secs(&now),
            "{ca}: its old lifetime"
        );
    }
    // The kubeconfigs' CA is the renewed one (their due client certificates renewed too).
    let root_ca = fs::read(k(&tree, "pki/ca.crt")).unwrap();
    for c in confs {
        assert_eq!(ca_data(&k(&tree, c)), std::slice::from_ref(&root_ca), "{c}");
    }
    // Every leaf against its old CA and its new one; the renewed ones kept 365 days.
    let manifest = fs::read_to_string(tree.join("expected.tsv")).unwrap();
    let mut leaves = 0;
    for line in manifest.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (Some(leaf), Some(ca)) = (f.first(), f.get(3).filter(|c| **c != "-")) else {
            continue;
        };
        let (leaf_old, leaf_now) = (s(old.join(leaf)), s(tree.join(leaf)));
        for ca in [s(old.join(ca)), s(tree.join(ca))] {
            for l in [&leaf_old, &leaf_now] {
                assert!(verifies(&ca, None, l, None), "{l} against {ca}");
            }
        }
        if f[1] == "due" {
            assert_ne!(
                fs::read(&leaf_old).unwrap(),
                fs::read(&leaf_now).unwrap(),
                "{leaf}"
            );
            assert_eq!(
                common::lifetime_secs(&leaf_old),
                common::lifetime_secs(&leaf_now),
                "{leaf}: lifetime"
            );
        }
        leaves += 1;
    }
    assert_eq!(leaves, 7, "{manifest}");
}

/// A root whose key is kept off the node on purpose (an offline root), inside its one-year
/// window: a layout, not a failure. `renew` exits 0 and raises no 250.003; 500.200 names
/// the root (and the intermediate it signs, due too) and says what to do; `check` says the
/// same. Past its end (libfaketime), 500.210 — still no 250.003 for it.
#[test]
fn a_root_whose_key_is_kept_off_the_node_is_reported_not_failed() {
    let a = Aging::new(&[]);
    let offline = a.tmp.path().join("offline");
    fs::create_dir(&offline).unwrap();
    fs::rename(a.pki("ca.key"), offline.join("ca.key")).unwrap();
    let alarms = |run: &dyn Fn(&[&str]) -> Run| {
        let r = run(&["alarms", "--output", "json"]);
        assert_eq!(r.code, 0, "{r}");
        r.json()["alarms"]
            .as_array()
            .expect("alarms")
            .iter()
            .map(|x| {
                (
                    x["id"].as_str().unwrap().to_string(),
                    x["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let now = |args: &[&str]| a.run(args);
    let r = now(&["renew", "--no-restart"]);
    let active = alarms(&now);
    println!("renew: exit {}\n{active:#?}", r.code);
    assert_eq!(r.code, 0, "{r}");
    assert!(!active.iter().any(|(id, _)| id == "250.003"), "{active:#?}");
    for ca in ["ca.crt", "inter-ca.crt"] {
        let (_, why) = active
            .iter()
            .find(|(id, why)| id == "500.200" && why.contains(&a.pki(ca)))
            .unwrap_or_else(|| panic!("no 500.200 for {ca}: {active:#?}"));
        assert!(why.contains("kept off this node"), "{why}");
        assert!(why.contains("re-issue it where its key is"), "{why}");
    }
    let entry = a.check_entry("ca.crt");
    assert_eq!(entry["status"], "unrenewable", "{entry:#}");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("kept off this node"),
        "{entry:#}"
    );
    // Past the root's end.
    let later = |args: &[&str]| {
        run_cmd(
            Command::new(BIN)
                .env("LD_PRELOAD", common::libfaketime())
                .env("FAKETIME", "+260d")
                .arg("--config")
                .arg(&a.config)
                .args(args),
            args,
        )
    };
    let r = later(&["renew", "--no-restart"]);
    let active = alarms(&later);
    println!("260 days later: exit {}\n{active:#?}", r.code);
    assert!(
        active
            .iter()
            .any(|(id, why)| id == "500.210" && why.contains(&a.pki("ca.crt"))),
        "{active:#?}"
    );
    assert!(
        !active
            .iter()
            .any(|(id, why)| id == "250.003" && why.contains(&format!("{}:", a.pki("ca.crt")))),
        "{active:#?}"
    );
}

/// The aging PKI with `--copies --due-leaves` and `rotate_keys`: admin.conf's client
/// certificate and the chain file's leaf (its key in a file of its own) are due with the
/// root, so the pass renews each of them and then writes the re-issued root into it.
fn renewed_twice() -> Aging {
    let a = Aging::new(&["--copies", "--due-leaves"]);
    let config = fs::read_to_string(&a.config).unwrap();
    fs::write(&a.config, format!("rotate_keys = true\n{config}")).unwrap();
    a
}

/// admin.conf, and the files the pass changes twice with their copies from before it.
fn twice_changed(a: &Aging) -> (String, [(String, String); 2]) {
    let admin = a.tmp.path().join("admin.conf").display().to_string();
    let twice = [
        (admin.clone(), a.old("admin.conf")),
        (
            a.pki("etcd-server-chain.pem"),
            a.old("etcd-server-chain.pem"),
        ),
    ];
    (admin, twice)
}

/// Every file of every backup set holding a backup of `file`, with its bytes.
fn backups_of(a: &Aging, file: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let sets = a.tmp.path().join("state/backup");
    let inner = Path::new(file).strip_prefix("/").unwrap().to_path_buf();
    fs::read_dir(&sets)
        .map(|e| {
            e.flatten()
                .map(|e| e.path().join(&inner))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| Some((p.clone(), fs::read(&p).ok()?)))
        .collect()
}

/// Kills the failpoints build at `point` in a pass over `a`; its stderr.
fn killed_at(a: &Aging, point: &str) -> String {
    let mut cmd = Command::new(failpoints::binary());
    cmd.arg("--config").arg(&a.config).arg("renew");
    let out = pki::isolate(&mut cmd)
        .env("CERTRENEWD_FAILPOINT", point)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let name = point.split(':').next().unwrap();
    assert!(
        stderr.contains(&format!("failpoint {name} hit")),
        "{point}: {stderr}"
    );
    assert_eq!(
        out.status.code(),
        None,
        "{point}: must have aborted: {stderr}"
    );
    stderr
}

#[test]
fn a_file_renewed_and_given_the_new_ca_in_one_pass_keeps_its_bytes_from_before_the_pass() {
    let a = renewed_twice();
    let (_, twice) = twice_changed(&a);
    // A whole pass: one backup of each file, the bytes it had before the pass.
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    for (file, old) in &twice {
        assert_ne!(
            fs::read(file).unwrap(),
            fs::read(old).unwrap(),
            "{file} renewed"
        );
        let backups = backups_of(&a, file);
        assert_eq!(backups.len(), 1, "{file}: {backups:?}");
        assert!(
            backups[0].1 == fs::read(old).unwrap(),
            "{file}: its backup {} is not the file from before the pass",
            backups[0].0.display()
        );
    }

    // Killed between the renewal of admin.conf and the rename of its copy (its temp file is
    // written): the backups still hold the bytes from before the pass, and the next pass
    // tells what it found, never that the previous certificate is back while the renewed
    // one is in place.
    let a = renewed_twice();
    let (admin, twice) = twice_changed(&a);
    killed_at(&a, "after-copy-temp");
    let renewed_conf = fs::read(&admin).unwrap();
    assert_ne!(
        renewed_conf,
        fs::read(a.old("admin.conf")).unwrap(),
        "renewed before its copy"
    );
    for (file, old) in &twice {
        for (p, bytes) in backups_of(&a, file) {
            assert!(
                bytes == fs::read(old).unwrap(),
                "{file}: {} is not the file from before the pass",
                p.display()
            );
        }
    }
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    for line in run.stderr.lines().filter(|l| l.contains(admin.as_str())) {
        assert!(
            !line.contains("rolled back"),
            "admin.conf held its renewed certificate, yet: {line}\n{run}"
        );
    }
    assert!(
        run.stderr.contains(&format!(
            "{admin}: the interrupted replacement of its copy of a CA was undone"
        )),
        "{run}"
    );
    let conf = fs::read_to_string(&admin).unwrap();
    let new_ca = b64(&a.pki("ca.crt"));
    assert!(conf.contains(&new_ca), "the copy is caught up:\n{conf}");

    // Killed there again, the roll-back the restart stage does (from the record the pass
    // keeps) puts back the files from before the pass: certificate and key together.
    let a = renewed_twice();
    let (_, twice) = twice_changed(&a);
    killed_at(&a, "after-copy-temp");
    let pending = certrenewd::renew::pending::load(&a.tmp.path().join("state"))
        .unwrap()
        .expect("the pending record");
    for (path, r) in certrenewd::renew::pending::roll_back(&pending.changes) {
        r.unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    }
    for (file, old) in twice.iter().chain(&[(
        a.pki("etcd-server-chain-key.pem"),
        a.old("etcd-server-chain-key.pem"),
    )]) {
        assert!(
            fs::read(file).unwrap() == fs::read(old).unwrap(),
            "{file}: not the file from before the pass after a roll-back"
        );
    }
}

#[test]
fn killed_after_the_ca_is_renamed_the_old_cas_record_is_still_written() {
    for point in ["after-renames", "after-copy-temp"] {
        let a = Aging::new(&["--copies"]);
        killed_at(&a, point);
        assert_ne!(
            fs::read(a.pki("ca.crt")).unwrap(),
            fs::read(a.old("ca.crt")).unwrap(),
            "{point}: the CA is renamed into place"
        );
        let run = a.run(&["renew"]);
        assert_eq!(run.code, 0, "{point}: {run}");
        let entry = a.check_entry("ca.crt");
        assert!(
            entry.get("old_trusted_until").is_some(),
            "{point}: the old CA's end is no longer shown: {entry:#}"
        );
        let record =
            fs::read_to_string(a.tmp.path().join("state/old-cas.json")).unwrap_or_default();
        let old_serial = field(&a.old("ca.crt"), "-serial");
        let old_serial = old_serial.split_once('=').unwrap().1.to_lowercase();
        assert!(
            record.to_lowercase().contains(&old_serial),
            "{point}: {old_serial} not in {record}"
        );
    }
}

/// An error writing the record of a re-issued CA (`old-cas.json`: the disk full, an I/O
/// error) fails the pass and keeps the pending record, so the next pass writes it: the old
/// CA's end is still shown and alarmed. It was logged, the pass exited 0, and the record
/// was lost for good.
#[test]
fn an_error_recording_a_reissued_ca_fails_the_pass_and_the_next_records_it() {
    let a = Aging::new(&[]);
    let mut cmd = Command::new(failpoints::binary());
    cmd.arg("--config").arg(&a.config).arg("renew");
    let out = pki::isolate(&mut cmd)
        .env("CERTRENEWD_FAILPOINT", "record-old-cas:error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failpoint record-old-cas hit"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("recording the re-issued CAs"),
        "the error names what failed: {stderr}"
    );
    let state = a.tmp.path().join("state");
    assert!(!state.join("old-cas.json").exists());
    assert!(
        state.join("pending.json").exists(),
        "the pending record is kept"
    );
    assert_ne!(
        fs::read(a.pki("ca.crt")).unwrap(),
        fs::read(a.old("ca.crt")).unwrap(),
        "the CA is re-issued and installed"
    );
    let run = a.run(&["renew"]);
    assert_eq!(run.code, 0, "{run}");
    let entry = a.check_entry("ca.crt");
    assert!(
        entry.get("old_trusted_until").is_some(),
        "the old CA's end is shown: {entry:#}"
    );
    let record = fs::read_to_string(state.join("old-cas.json")).unwrap_or_default();
    let old_serial = field(&a.old("ca.crt"), "-serial");
    let old_serial = old_serial.split_once('=').unwrap().1.to_lowercase();
    assert!(record.to_lowercase().contains(&old_serial), "{record}");
    assert!(!state.join("pending.json").exists());
}
