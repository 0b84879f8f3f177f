//! `certrenewd check` against every PKI layout of `tests/fixtures/mkpki.sh`: each line of the
//! layout's manifest (`expected.tsv`) must be reported as the manifest says, in the JSON shape
//! of docs/interface.md and in the table; facts are cross-checked with openssl.

use crate::common;

use common::{pki, skip, table};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use pki::{ALL_LAYOUTS, Entry, Failures, Run, Scratch, Tree, path_str, run_cmd, running_as_root};
use serde_json::Value;

const LAYOUTS: &[&str] = ALL_LAYOUTS;

/// The keys of one certificate in `check --output json` (docs/interface.md), exactly.
const CERT_KEYS: [&str; 14] = [
    "path",
    "key_path",
    "subject",
    "issuer",
    "serial",
    "not_before",
    "not_after",
    "days_left",
    "is_ca",
    "ca_path",
    "status",
    "reason",
    "units",
    // Addition: whether this node renews it when it falls due (a CA too, with its own key).
    "renewable",
];

fn tree(layout: &str) -> Tree {
    Tree::new(LAYOUTS, layout)
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn is_rfc3339_utc(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The shape of the document: top-level keys, each certificate's keys and types, skipped.
fn check_shape(doc: &Value, f: &mut Failures) {
    let top = keys_of(doc);
    // The first interface draft promised these two; the others are additions CHANGELOG.md
    // documents (all are in docs/interface.md).
    f.check(
        top.contains("certificates") && top.contains("skipped"),
        || format!("top-level keys {top:?} lack certificates/skipped"),
    );
    f.check(
        top.iter().all(|k| {
            [
                "certificates",
                "skipped",
                "errors",
                "summary",
                "next_pass",
                "coordination",
                "daemon",
                "inhibited",
                "interrupted_renewal",
                "restarts_owed",
                "permission_denied",
                "metrics_not_written",
            ]
            .contains(&k.as_str())
        }),
        || format!("unexpected top-level keys {top:?}"),
    );
    let n = doc["certificates"].as_array().map_or(0, Vec::len) as u64;
    let sum = &doc["summary"];
    let by_status: u64 = ["ok", "due", "expired", "unrenewable"]
        .iter()
        .filter_map(|k| sum[*k].as_u64())
        .sum();
    // A copy of a CA is counted apart: not a CA of its own, nor in the statuses.
    let copies = doc["certificates"]
        .as_array()
        .map_or(0, |c| c.iter().filter(|c| !c["copy_of"].is_null()).count())
        as u64;
    let own = n - copies;
    f.check(
        sum["certificates"] == own && sum["copies"] == copies && by_status == own,
        || format!("summary {sum} does not count the {n} certificates, {copies} of them copies"),
    );
    f.check(s(doc, "next_pass").is_some_and(is_rfc3339_utc), || {
        format!("next_pass {} is not RFC 3339 UTC", doc["next_pass"])
    });
    // No daemon has run with a fixture's fresh state directory.
    f.check(doc["daemon"]["state"] == "never", || {
        format!("daemon {} in a fresh state directory", doc["daemon"])
    });
    let co = &doc["coordination"];
    let restarts = [
        "coordinated",
        "not coordinated",
        "held",
        "decided at each pass",
    ];
    f.check(
        ["auto", "on", "off"].contains(&s(co, "enabled").unwrap_or(""))
            && restarts.contains(&s(co, "restarts").unwrap_or(""))
            && s(co, "why").is_some_and(|w| !w.is_empty()),
        || format!("coordination {co} is not {{enabled, restarts, why}}"),
    );
    let want: BTreeSet<String> = CERT_KEYS.iter().map(|k| k.to_string()).collect();
    for c in doc["certificates"].as_array().into_iter().flatten() {
        let p = s(c, "path").unwrap_or("?");
        // `aliases` (symlinks to the same file) is an addition, present only when there are some.
        let mut keys = keys_of(c);
        keys.remove("aliases");
        // `renews_on`: a CA this node renews, not due yet.
        let renews_on = keys.remove("renews_on");
        // `copy_of`: a copy of a CA, replaced with the CA file it names.
        let copy_of = keys.remove("copy_of");
        let old_trusted = keys.remove("old_trusted_until");
        // `lifetime`: what a renewal gives it and which rule chose it, when it is renewable.
        let lifetime = keys.remove("lifetime");
        f.check(lifetime == (c["renewable"] == true), || {
            format!(
                "{p}: lifetime {} with renewable {}",
                c["lifetime"], c["renewable"]
            )
        });
        f.check(
            !lifetime
                || c["lifetime"]
                    .as_str()
                    .is_some_and(|l| l.contains(" days, ")),
            || format!("{p}: lifetime {}", c["lifetime"]),
        );
        f.check(!old_trusted || c["is_ca"] == true, || {
            format!("{p}: old_trusted_until on what is not a CA")
        });
        f.check(!copy_of || c["is_ca"] == true, || {
            format!("{p}: copy_of on what is not a CA")
        });
        f.check(
            !renews_on || (c["is_ca"] == true && c["renewable"] == true),
            || format!("{p}: renews_on on what is not a renewable CA"),
        );
        f.check(keys == want, || {
            format!("{p}: keys {:?}, want exactly {want:?}", keys_of(c))
        });
        let string_or_null = |k: &str| c[k].is_string() || c[k].is_null();
        let typed = c["path"].is_string()
            && string_or_null("key_path")
            && c["subject"].is_string()
            && c["issuer"].is_string()
            && c["serial"].is_string()
            && c["days_left"].is_number()
            && c["is_ca"].is_boolean()
            && string_or_null("ca_path")
            && string_or_null("reason")
            && c["units"]
                .as_array()
                .is_some_and(|u| u.iter().all(Value::is_string));
        f.check(typed, || {
            format!("{p}: a field has the wrong JSON type: {c}")
        });
        let serial = s(c, "serial").unwrap_or("");
        f.check(
            !serial.is_empty()
                && serial
                    .chars()
                    .all(|ch| ch.is_ascii_digit() || ('a'..='f').contains(&ch)),
            || format!("{p}: serial {serial:?} is not lowercase hex"),
        );
        for k in ["not_before", "not_after"] {
            let t = s(c, k).unwrap_or("");
            f.check(is_rfc3339_utc(t), || {
                format!("{p}: {k} {t:?} is not RFC 3339 UTC (YYYY-MM-DDTHH:MM:SSZ)")
            });
        }
        let status = s(c, "status").unwrap_or("");
        f.check(
            ["ok", "due", "expired", "unrenewable"].contains(&status),
            || format!("{p}: status {status:?}"),
        );
    }
    for sk in doc["skipped"].as_array().into_iter().flatten() {
        f.check(
            keys_of(sk) == BTreeSet::from(["path".to_string(), "reason".to_string()])
                && sk["path"].is_string()
                && sk["reason"].is_string(),
            || format!("skipped entry {sk} is not exactly {{path, reason}} strings"),
        );
    }
}

/// Every applicable manifest line is reported as the manifest says; nothing else is reported.
fn check_against_manifest(tree: &Tree, doc: &Value, as_root: bool, f: &mut Failures) {
    let certs: Vec<&Value> = doc["certificates"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let skipped: Vec<&Value> = doc["skipped"].as_array().into_iter().flatten().collect();
    let errors: Vec<&Value> = doc["errors"].as_array().into_iter().flatten().collect();
    // A manifest line with status `error` is listed under `errors`, `skipped` under skipped.
    let list_of = |status: &str| match status {
        "error" => &errors,
        _ => &skipped,
    };
    let first_cert = |abs: &str| certs.iter().copied().find(|c| s(c, "path") == Some(abs));
    let layout = &tree.layout;
    for e in &tree.manifest {
        let abs = tree.abs(&e.path);
        let abs = path_str(&abs);
        if !e.applies(as_root) {
            // The line is for the other kind of user: the other line for this path applies.
            continue;
        }
        if e.is_cert() {
            let Some(c) = first_cert(abs) else {
                f.push(format!("{layout}: {} ({}) is not listed", e.path, e.status));
                continue;
            };
            check_cert(tree, e, c, f);
            if e.scope == pki::Scope::Optional {
                continue;
            }
            f.check(
                !skipped
                    .iter()
                    .chain(&errors)
                    .any(|sk| s(sk, "path") == Some(abs)),
                || format!("{layout}: {} is a certificate but also skipped", e.path),
            );
        } else {
            let reason = e.reason.as_deref().unwrap_or("");
            let found: Vec<&str> = list_of(&e.status)
                .iter()
                .filter(|sk| s(sk, "path") == Some(abs))
                .filter_map(|sk| s(sk, "reason"))
                .collect();
            if found.is_empty() && e.scope == pki::Scope::Optional {
                continue;
            }
            f.check(found.iter().any(|r| r.contains(reason)), || {
                format!(
                    "{layout}: {} should be {} with a reason containing {reason:?}; reasons: {found:?}",
                    e.path, e.status
                )
            });
            f.check(first_cert(abs).is_none(), || {
                format!(
                    "{layout}: {} is skipped but listed as a certificate",
                    e.path
                )
            });
        }
    }
    // Nothing reported that the manifest does not name (for this kind of user).
    let named_as = |abs: &str, status: Option<&str>| {
        tree.manifest.iter().any(|e| {
            e.applies(as_root)
                && status.map_or(e.is_cert(), |st| e.status == st)
                && path_str(&tree.abs(&e.path)) == abs
        })
    };
    let named = |abs: &str, cert: bool| named_as(abs, if cert { None } else { Some("skipped") });
    for c in &certs {
        let p = s(c, "path").unwrap_or("?");
        f.check(named(p, true), || {
            format!(
                "{layout}: {p} listed as a certificate ({}) but not in the manifest",
                c["status"]
            )
        });
    }
    for sk in &skipped {
        let p = s(sk, "path").unwrap_or("?");
        f.check(named(p, false), || {
            format!(
                "{layout}: {p} skipped ({}) but not in the manifest",
                sk["reason"]
            )
        });
    }
    let tree_root = tree.abs("");
    for er in &errors {
        let p = s(er, "path").unwrap_or("?");
        if !Path::new(p).starts_with(&tree_root) {
            continue; // a watch path outside the layout, checked by its own test
        }
        f.check(named_as(p, Some("error")), || {
            format!(
                "{layout}: {p} is an error ({}) but not in the manifest",
                er["reason"]
            )
        });
    }
}

/// One certificate against its manifest line (status, reason, CA, units, key, days left).
fn check_cert(tree: &Tree, e: &Entry, c: &Value, f: &mut Failures) {
    let layout = &tree.layout;
    let p = &e.path;
    let status = s(c, "status").unwrap_or("");
    f.check(status == e.status, || {
        format!(
            "{layout}: {p}: status {status:?}, manifest {:?} (reason {})",
            e.status, c["reason"]
        )
    });
    match &e.reason {
        Some(want) => {
            let got = s(c, "reason").unwrap_or("");
            f.check(got.contains(want.as_str()), || {
                format!("{layout}: {p}: reason {got:?} does not contain {want:?}")
            });
        }
        None => f.check(c["reason"].is_null(), || {
            format!("{layout}: {p}: {} with a reason {}", e.status, c["reason"])
        }),
    }
    match &e.ca {
        Some(ca) => {
            let got = s(c, "ca_path").unwrap_or("");
            f.check(got.ends_with(&format!("/{ca}")), || {
                format!(
                    "{layout}: {p}: ca_path {:?} does not end with {ca}",
                    c["ca_path"]
                )
            });
        }
        None => f.check(c["ca_path"].is_null(), || {
            format!(
                "{layout}: {p}: ca_path {} but the manifest says none",
                c["ca_path"]
            )
        }),
    }
    let units: Vec<String> = c["units"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(String::from))
        .collect();
    let want_units = tree.units_of(&tree.abs(p));
    f.check(units == want_units, || {
        format!("{layout}: {p}: units {units:?}, want {want_units:?}")
    });
    let key = s(c, "key_path");
    if matches!(e.status.as_str(), "due" | "expired") {
        f.check(key.is_some_and(|k| Path::new(k).is_file()), || {
            format!("{layout}: {p}: renewable but key_path is {}", c["key_path"])
        });
    }
    if e.reason.as_deref() == Some("key missing") {
        f.check(key.is_none(), || {
            format!(
                "{layout}: {p}: key missing but key_path is {}",
                c["key_path"]
            )
        });
    }
    if let Some(k) = key {
        f.check(Path::new(k).parent() == tree.abs(p).parent(), || {
            format!("{layout}: {p}: key_path {k} is not beside the certificate")
        });
    }
    let days = c["days_left"].as_f64().unwrap_or(f64::NAN);
    let is_ca = c["is_ca"].as_bool().unwrap_or(false);
    let days_ok = match e.status.as_str() {
        "due" => days > 0.0 && days <= 15.0,
        "expired" => days < 0.0,
        "ok" if is_ca => days > 180.0,
        "ok" => days > 15.0,
        _ => true,
    };
    f.check(days_ok, || {
        format!(
            "{layout}: {p}: days_left {days} does not fit status {}",
            e.status
        )
    });
}

/// serial, dates, subject, issuer and CA flag agree with openssl for every listed first
/// certificate of a file.
fn check_with_openssl(doc: &Value, f: &mut Failures) {
    let scratch = Scratch::new();
    let mut seen = BTreeSet::new();
    for c in doc["certificates"].as_array().into_iter().flatten() {
        let Some(path) = s(c, "path") else { continue };
        if !seen.insert(path.to_string()) {
            continue; // a later certificate of a bundle file
        }
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        let pem = scratch.cert_pem_file(&bytes);
        let out = pki::openssl(&[
            "x509",
            "-in",
            path_str(&pem),
            "-noout",
            "-serial",
            "-startdate",
            "-enddate",
            "-dateopt",
            "iso_8601",
            "-subject",
            "-issuer",
            "-nameopt",
            "sep_comma_plus_space,sname,utf8",
            "-ext",
            "basicConstraints",
        ]);
        let field = |prefix: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or("")
                .to_string()
        };
        let trim0 = |h: &str| h.trim_start_matches('0').to_ascii_lowercase();
        let serial = field("serial=");
        f.check(
            trim0(&serial) == trim0(s(c, "serial").unwrap_or("")),
            || format!("{path}: serial {} but openssl says {serial}", c["serial"]),
        );
        for (k, prefix) in [("not_before", "notBefore="), ("not_after", "notAfter=")] {
            let want = field(prefix).replace(' ', "T");
            f.check(s(c, k) == Some(want.as_str()), || {
                format!("{path}: {k} {} but openssl says {want}", c[k])
            });
        }
        for (k, prefix) in [("subject", "subject="), ("issuer", "issuer=")] {
            let want = field(prefix);
            f.check(s(c, k) == Some(want.as_str()), || {
                format!("{path}: {k} {} but openssl says {want:?}", c[k])
            });
        }
        let ca = out.contains("CA:TRUE");
        f.check(c["is_ca"].as_bool() == Some(ca), || {
            format!(
                "{path}: is_ca {} but openssl basicConstraints says CA:{ca}",
                c["is_ca"]
            )
        });
    }
}

/// The table names each applicable manifest path with its status, leaves under their
/// watch and CAs in their own table by short name, reasons below their row, within 120
/// columns, and closes with the summary.
fn check_table(tree: &Tree, doc: &Value, table: &str, as_root: bool, f: &mut Failures) {
    let layout = &tree.layout;
    let rows = table::rows(table);
    let is_ca = |abs: &str| {
        doc["certificates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| s(c, "path") == Some(abs))
            .is_some_and(|c| c["is_ca"] == true)
    };
    for e in tree.manifest.iter().filter(|e| e.applies(as_root)) {
        let abs = tree.abs(&e.path);
        let abs = path_str(&abs);
        if e.is_cert() {
            let ca = is_ca(abs);
            let found: Vec<&table::TableRow> = rows
                .iter()
                .filter(|r| r.ca == ca && if ca { r.names_ca(abs) } else { r.path == abs })
                .collect();
            let reason = e.reason.as_deref().unwrap_or("");
            f.check(
                found
                    .iter()
                    .any(|r| r.status() == e.status && r.note.contains(reason)),
                || {
                    format!(
                        "{layout}: table has no {} row for {abs} with status {} and a note \
                         containing {reason:?}: {found:?}",
                        if ca { "CA" } else { "leaf" },
                        e.status
                    )
                },
            );
        } else if e.scope != pki::Scope::Optional {
            f.check(
                table
                    .lines()
                    .any(|l| l.contains(abs) && l.contains(e.status.as_str())),
                || format!("{layout}: table does not mention {} {abs}", e.status),
            );
        }
    }
    f.check(table::max_width(table) <= 120, || {
        format!("{layout}: a line is wider than 120 columns:\n{table}")
    });
    let n = doc["certificates"].as_array().map_or(0, Vec::len);
    let copies = doc["summary"]["copies"].as_u64().unwrap_or(0) as usize;
    let counted = match copies {
        0 => format!("{} certificates: ", n - copies),
        1 => format!("{} certificates and 1 copy of a CA: ", n - copies),
        k => format!("{} certificates and {k} copies of a CA: ", n - copies),
    };
    let last = table.lines().last().unwrap_or("");
    f.check(
        last.starts_with(&counted) && last.ends_with(" — no pass while the daemon is not running"),
        || format!("{layout}: no closing summary of {n} certificates: {last:?}"),
    );
}

fn check_layout(layout: &str) {
    let tree = tree(layout);
    let as_root = running_as_root();
    let r = tree.run(&["check", "--output", "json"]);
    assert_eq!(r.code, 0, "{r}");
    let doc = r.json();
    let mut f = Failures::default();
    check_shape(&doc, &mut f);
    check_against_manifest(&tree, &doc, as_root, &mut f);
    check_with_openssl(&doc, &mut f);
    for quiet in ["sa.key", "sa.pub"] {
        f.check(!r.stdout.contains(quiet), || {
            format!("{layout}: {quiet} appears in the JSON")
        });
    }
    let t = tree.run(&["check"]);
    f.check(t.code == 0, || format!("table: {t}"));
    check_table(&tree, &doc, &t.stdout, as_root, &mut f);
    for quiet in ["sa.key", "sa.pub"] {
        f.check(
            !t.stdout.contains(quiet) && !t.stderr.contains(quiet),
            || format!("{layout}: {quiet} appears in the table output"),
        );
    }
    f.finish(&format!("check of the {layout} layout"));
}

#[test]
fn check_kubeadm_matches_manifest() {
    check_layout("kubeadm");
}

#[test]
fn check_starlingx_matches_manifest() {
    check_layout("starlingx");
}

#[test]
fn check_hardway_matches_manifest() {
    check_layout("hardway");
}

#[test]
fn check_openshift_matches_manifest() {
    check_layout("openshift");
}

#[test]
fn check_keytypes_matches_manifest() {
    check_layout("keytypes");
}

#[test]
fn check_names_matches_manifest() {
    check_layout("names");
}

#[test]
fn check_bad_matches_manifest() {
    check_layout("bad");
}

/// The `bad` layout checked by user nobody: `secret.crt` (mode 000) is skipped with
/// "permission denied" (the manifest's `nonroot` lines), everything else as for root.
#[test]
fn check_bad_as_nobody_reports_permission_denied() {
    if !running_as_root() {
        skip::skip("not root, cannot switch to user nobody (the bad layout test covers nonroot)");
        return;
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        skip::skip("/usr/bin/setpriv missing (Debian package util-linux)");
        return;
    }
    let tree = tree("bad");
    // Everything owned by nobody, modes as generated (secret.crt stays 000).
    let out = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(tree.tmp.path())
        .output()
        .expect("chown");
    assert!(
        out.status.success(),
        "chown: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The binary must be reachable by nobody; copy it next to the tree when it is not.
    let as_nobody = |bin: &Path, args: &[&str]| -> Run {
        let mut cmd = Command::new("/usr/bin/setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(bin)
            .arg("--config")
            .arg(&tree.config)
            .args(args)
            .env("HOME", tree.tmp.path());
        run_cmd(&mut cmd, args)
    };
    let mut bin = Path::new(pki::BIN).to_path_buf();
    if as_nobody(&bin, &["--version"]).code != 0 {
        let copy = tree.tmp.path().join("certrenewd");
        std::fs::copy(&bin, &copy).expect("copying the binary");
        bin = copy;
    }
    let r = as_nobody(&bin, &["check", "--output", "json"]);
    // secret.crt (mode 000) is refused: the check could not be done whole.
    assert_eq!(r.code, 1, "{r}");
    let doc = r.json();
    assert!(
        doc["permission_denied"]["files"].as_u64() >= Some(1),
        "{doc:#}"
    );
    let mut f = Failures::default();
    check_shape(&doc, &mut f);
    check_against_manifest(&tree, &doc, false, &mut f);
    f.finish("check of the bad layout as nobody");
}

/// `check` as a user who may not read the keys (0600, root's) nor the state directory
/// (0700, root's), on a kubeadm tree from mkpki.sh: what it cannot read is said as such, in
/// one paragraph that says to run it as root, never as absent (no "CA key not on this
/// host", KEY ON NODE "unreadable" not "no", no inhibit or interrupted renewal made up
/// from a refused read), and it exits 1: the check could not be done.
#[test]
fn check_as_a_user_refused_the_keys_and_the_state_says_so_and_fails() {
    if !running_as_root() {
        skip::skip("not root, cannot switch to user nobody");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::e2e::mkpki("kubeadm", &root.join("pki"));
    let pki = root.join("pki/etc/kubernetes/pki");
    let state = root.join("state");
    std::fs::create_dir(&state).unwrap();
    let config = root.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {}\n[coordination]\nenabled = false\n[[watch]]\npath = {}\nunits = []\nstatic_pods = []\nkubeconfigs = []\n",
            common::pki::toml_str(&state),
            common::pki::toml_str(&pki)
        ),
    )
    .unwrap();
    let bin = root.join("certrenewd");
    std::fs::copy(pki::BIN, &bin).unwrap();
    let sh = format!(
        "chmod -R a+rX {0} && find {0} -name '*.key' -exec chmod 600 {{}} + && chmod 700 {1}",
        root.display(),
        state.display()
    );
    let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let as_nobody = |args: &[&str]| -> Run {
        let mut cmd = Command::new("/usr/bin/setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin)
            .arg("--config")
            .arg(&config)
            .args(args)
            .env("HOME", root);
        run_cmd(&mut cmd, args)
    };

    let r = as_nobody(&["check", "--output", "json"]);
    assert_eq!(r.code, 1, "{r}");
    let doc = r.json();
    assert_eq!(
        doc["permission_denied"],
        serde_json::json!({ "state_dir": state.display().to_string(), "files": 11 }),
        "{doc:#}"
    );
    for field in ["inhibited", "interrupted_renewal", "restarts_owed"] {
        assert!(
            doc.get(field).is_none(),
            "{field} from a refused read: {doc:#}"
        );
    }
    let text = doc.to_string();
    assert!(!text.contains("CA key not on this host"), "{doc:#}");
    let cas: Vec<&Value> = (doc["certificates"].as_array().unwrap().iter())
        .filter(|c| c["is_ca"] == true)
        .collect();
    assert_eq!(cas.len(), 3, "{doc:#}");

    let r = as_nobody(&["check"]);
    assert_eq!(r.code, 1, "{r}");
    let table = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        table.contains(&format!(
            "This user may not read the state directory {} and 11 watched files (permission denied)",
            state.display()
        )) && table.contains("Run it as root: `sudo certrenewd check`."),
        "{r}"
    );
    for false_claim in [
        "Passes are deferred",
        "An interrupted renewal",
        "CA key not on this host",
        "What the daemon last said cannot be read",
    ] {
        assert!(!table.contains(false_claim), "{false_claim:?} in {r}");
    }
    let ca_rows: Vec<&str> = (r.stdout.lines())
        .filter(|l| {
            ["  ca ", "  etcd/ca ", "  front-proxy-ca "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(ca_rows.len(), 3, "{r}");
    for row in ca_rows {
        assert!(row.contains(" unreadable "), "KEY ON NODE: {row}");
    }
}

/// A watch whose directory does not exist is reported; the other watches are still listed.
#[test]
fn check_reports_missing_watch_path_and_lists_the_rest() {
    let tree = tree("kubeadm");
    let missing = tree.tmp.path().join("no/such/dir");
    tree.write_config("", &[(missing.clone(), "ghost.service")]);
    let r = tree.run(&["check", "--output", "json"]);
    assert!(r.code == 0 || r.code == 1, "{r}");
    let doc = r.json();
    let missing = path_str(&missing);
    // A mistyped watch is an error, never a silent nothing-to-watch.
    let reported = doc["errors"].as_array().into_iter().flatten().any(|e| {
        s(e, "path") == Some(missing)
            && s(e, "reason").is_some_and(|r| r.contains("does not exist"))
    });
    assert!(reported, "{missing} not reported as an error: {r}");
    let fail = tree.run(&["check", "--fail-due"]);
    assert_eq!(fail.code, 1, "--fail-due with a missing watch: {fail}");
    let mut f = Failures::default();
    check_shape(&doc, &mut f);
    check_against_manifest(&tree, &doc, running_as_root(), &mut f);
    f.finish("check with a missing watch path");
    let t = tree.run(&["check"]);
    assert!(
        t.stdout.contains(missing) || t.stderr.contains(missing),
        "the table run does not mention {missing}: {t}"
    );
    // Counted for what it is (it was once "1 file cannot be read"), in check's
    // summary and in a pass's.
    let said = "; 1 watched directory missing or unreadable";
    assert!(
        t.stdout.replace('\n', " ").contains(said) && !t.stdout.contains("cannot be read"),
        "{t}"
    );
    let dry = tree.run(&["renew", "--dry-run"]);
    assert!(
        dry.stdout.contains(said) && !dry.stdout.contains("cannot be read"),
        "{dry}"
    );
}

/// `check` exits 0 with due certificates; `--fail-due` exits 1 with them and 0 without.
#[test]
fn check_exit_status_and_fail_due() {
    let tree = tree("kubeadm");
    for args in [&["check"][..], &["check", "--output", "json"]] {
        let r = tree.run(args);
        assert_eq!(r.code, 0, "{r}");
    }
    for args in [
        &["check", "--fail-due"][..],
        &["check", "--output", "json", "--fail-due"],
    ] {
        let r = tree.run(args);
        assert_eq!(r.code, 1, "due certificates: {r}");
        assert!(
            !r.stdout.is_empty(),
            "--fail-due still prints the report: {r}"
        );
    }
    // Only CA bundles, all ok.
    let ok = Tree::new(LAYOUTS, "openshift");
    let only_ok = ok.abs("etc/kubernetes/static-pod-resources/etcd-certs/configmaps");
    let cfg = ok.tmp.path().join("ok-only.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = {}\n[[watch]]\npath = {}\nunits = [\"kubelet.service\"]\n",
            pki::toml_str(&ok.state),
            pki::toml_str(&only_ok)
        ),
    )
    .expect("config");
    let r = pki::run_bin(&cfg, &["check", "--fail-due", "--output", "json"]);
    assert_eq!(r.code, 0, "nothing due: {r}");
    let doc = r.json();
    let n = doc["certificates"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 4, "the four CA bundles: {r}");
}

/// Unknown key and bad value in one file: exit 2, the message names the file, both lines
/// and both keys; every command refuses to run with it.
#[test]
fn bad_config_names_file_lines_and_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let cfg = dir.path().join("broken.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = {}\nrenew_befor_days = 10\nvalidity_days = \"a year\"\n\n[[watch]]\npath = \"/nonexistent-certrenewd-test\"\nunits = \"kubelet\"\n",
            pki::toml_str(&state)
        ),
    )
    .expect("config");
    let file = path_str(&cfg);
    for args in [
        &["check", "--output", "json"][..],
        &["renew", "--dry-run"],
        &["renew", "--no-restart"],
        &["alarms"],
    ] {
        let r = pki::run_bin(&cfg, args);
        assert_eq!(r.code, 2, "{r}");
        assert!(r.stdout.is_empty(), "nothing on stdout: {r}");
        for needle in [
            format!("{file}:2"),
            "renew_befor_days".into(),
            format!("{file}:3"),
            "validity_days".into(),
            format!("{file}:7"),
            "watch[1].units".into(),
        ] {
            assert!(r.stderr.contains(&needle), "stderr lacks {needle:?}: {r}");
        }
    }
    assert!(
        !state.exists(),
        "a bad config must not create the state dir"
    );
    // A config file named explicitly that does not exist is bad configuration too.
    let r = pki::run_bin(&dir.path().join("missing.toml"), &["check"]);
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("missing.toml"), "{r}");
}
