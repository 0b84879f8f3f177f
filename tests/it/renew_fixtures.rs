//! `certrenewd renew` against the PKI layouts of `tests/fixtures/mkpki.sh`: every due or
//! expired certificate the manifest calls renewable is reissued so that openssl accepts it
//! and it differs from the old one only where a renewal must (serial, validity, signature,
//! key identifiers); everything else is left byte for byte as it was.

use crate::common;

use common::pki;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::walk::{Node, Snapshot, bytes_in, changed, mode_in};
use pki::{
    ALL_LAYOUTS, Entry, Failures, Scratch, Tree, diff_lines, facts, normalise_text, openssl_out,
    path_str, pem_label,
};
use serde_json::Value;

const LAYOUTS: &[&str] = ALL_LAYOUTS;

/// What `check` said about each file's first certificate before the renewal.
struct Before {
    /// path -> (key_path, is_ca, status, days_left)
    certs: BTreeMap<String, (Option<String>, bool, String, f64)>,
}

impl Before {
    fn of(tree: &Tree) -> Before {
        let doc = tree.check_json();
        let mut certs = BTreeMap::new();
        for c in doc["certificates"].as_array().into_iter().flatten() {
            let path = c["path"].as_str().unwrap_or_default().to_string();
            certs.entry(path).or_insert_with(|| {
                (
                    c["key_path"].as_str().map(String::from),
                    c["is_ca"].as_bool().unwrap_or(false),
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["days_left"].as_f64().unwrap_or_default(),
                )
            });
        }
        Before { certs }
    }

    fn key_path(&self, cert: &Path) -> PathBuf {
        let (key, _, _, _) = self
            .certs
            .get(path_str(cert))
            .unwrap_or_else(|| panic!("{} not listed by check", cert.display()));
        PathBuf::from(
            key.as_deref()
                .unwrap_or_else(|| panic!("{} has no key", cert.display())),
        )
    }

    fn is_ca(&self, cert: &Path) -> bool {
        self.certs.get(path_str(cert)).is_some_and(|c| c.1)
    }

    /// Inside the default 15-day renewal window (or expired).
    fn in_window(&self, cert: &Path) -> bool {
        self.certs.get(path_str(cert)).is_some_and(|c| c.3 <= 15.0)
    }
}

/// Manifest lines renewed by a plain pass: due or expired.
fn renewable(tree: &Tree) -> Vec<Entry> {
    let root = pki::running_as_root();
    tree.manifest
        .iter()
        .filter(|e| e.applies(root) && matches!(e.status.as_str(), "due" | "expired"))
        .cloned()
        .collect()
}

/// Leaf lines the manifest calls unrenewable that are inside their window: the pass fails
/// for those (an unrenewable leaf outside it is reported, not a failure yet).
fn unrenewable_leaves(tree: &Tree, before: &Before) -> Vec<Entry> {
    let root = pki::running_as_root();
    // Another manager's certificate is said, never renewed nor failed on.
    let managed = |e: &&Entry| (e.reason.as_deref()).is_some_and(|r| r.starts_with("managed by"));
    tree.manifest
        .iter()
        .filter(|e| e.applies(root) && e.status == "unrenewable" && !managed(e))
        .filter(|e| !before.is_ca(&tree.abs(&e.path)) && before.in_window(&tree.abs(&e.path)))
        .cloned()
        .collect()
}

/// The one backup set in the state dir.
fn backup_sets(tree: &Tree) -> Vec<PathBuf> {
    let dir = tree.state.join("backup");
    let mut sets: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    sets.sort();
    sets
}

/// Where a file's backup lives in a backup set.
fn backup_of(set: &Path, file: &Path) -> PathBuf {
    set.join(file.strip_prefix("/").unwrap_or(file))
}

/// The CA file (`-CAfile`) and the intermediate (`-untrusted`) for a leaf, from the manifest.
fn chain(tree: &Tree, e: &Entry) -> (PathBuf, Option<PathBuf>) {
    // A root CA re-issued with its own key verifies against itself.
    let ca = e.ca.as_deref().unwrap_or(&e.path);
    match &tree.entry(ca).ca {
        Some(root) => (tree.abs(root), Some(tree.abs(ca))),
        None => (tree.abs(ca), None),
    }
}

/// The bytes after the first certificate block (a chain in a fullchain file).
fn after_first_cert(bytes: &[u8]) -> Vec<u8> {
    let end = b"-----END CERTIFICATE-----";
    match bytes.windows(end.len()).position(|w| w == end) {
        Some(i) => {
            let rest = &bytes[i + end.len()..];
            let rest = rest.strip_prefix(b"\r").unwrap_or(rest);
            rest.strip_prefix(b"\n").unwrap_or(rest).to_vec()
        }
        None => Vec::new(),
    }
}

struct Ctx<'a> {
    tree: &'a Tree,
    before: &'a Snapshot,
    after: &'a Snapshot,
    info: &'a Before,
    scratch: &'a Scratch,
    rotated: bool,
}

/// Everything a renewed certificate must satisfy.
fn verify_renewed(cx: &Ctx<'_>, e: &Entry, f: &mut Failures) {
    let tree = cx.tree;
    let sc = cx.scratch;
    let path = tree.abs(&e.path);
    let p = format!("{}: {}", tree.layout, e.path);
    let old = bytes_in(cx.before, &path);
    let new = bytes_in(cx.after, &path);
    f.check(old != new, || format!("{p}: not rewritten"));
    f.check(
        mode_in(cx.before, &path) == mode_in(cx.after, &path),
        || {
            format!(
                "{p}: mode {:o} became {:o}",
                mode_in(cx.before, &path),
                mode_in(cx.after, &path)
            )
        },
    );
    f.check(pki::is_pem(old) == pki::is_pem(new), || {
        format!("{p}: PEM/DER encoding changed")
    });

    // openssl accepts it under its CA (and intermediate).
    let (ca, intermediate) = chain(tree, e);
    let ca_pem = sc.cert_pem_file(bytes_in(cx.after, &ca));
    let new_pem = sc.cert_pem_file(new);
    let mut args = vec!["verify", "-CAfile", path_str(&ca_pem)];
    let int_pem = intermediate.map(|i| sc.cert_pem_file(bytes_in(cx.after, &i)));
    if let Some(i) = &int_pem {
        args.extend(["-untrusted", path_str(i)]);
    }
    args.push(path_str(&new_pem));
    let out = openssl_out(&args);
    f.check(out.status.success(), || {
        format!(
            "{p}: openssl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });

    // The text differs only in serial, validity, signature value, key identifiers (and the
    // public key when rotating).
    // A CA keeps its key, whatever rotate_keys says: what it signed must keep verifying.
    let is_ca = cx.info.is_ca(&path);
    let rotated = cx.rotated && !is_ca;
    let old_text = normalise_text(&sc.cert_text(old), rotated);
    let new_text = normalise_text(&sc.cert_text(new), rotated);
    f.check(old_text == new_text, || {
        format!(
            "{p}: `openssl x509 -text` differs beyond serial/validity/signature/key ids:\n{}",
            diff_lines(&old_text, &new_text)
        )
    });

    // Names byte for byte: certrenewd's own parser and openssl's asn1parse offsets agree.
    let old_f = facts(sc.cert_der(old));
    let new_f = facts(sc.cert_der(new));
    let ca_f = facts(sc.cert_der(bytes_in(cx.after, &ca_or_int(tree, e))));
    f.check(new_f.raw_subject() == old_f.raw_subject(), || {
        format!("{p}: subject DER changed")
    });
    f.check(new_f.raw_issuer() == ca_f.raw_subject(), || {
        format!("{p}: issuer DER is not the CA's subject DER")
    });
    f.check(new_f.raw_issuer() == old_f.raw_issuer(), || {
        format!("{p}: issuer DER changed")
    });
    let (o_subj, o_iss) = sc.raw_names(new);
    f.check(
        o_subj == new_f.raw_subject() && o_iss == new_f.raw_issuer(),
        || format!("{p}: openssl asn1parse disagrees with CertFacts on the raw names"),
    );
    let (ca_subj, _) = sc.raw_names(bytes_in(cx.after, &ca_or_int(tree, e)));
    f.check(o_iss == ca_subj, || {
        format!("{p}: openssl: issuer DER is not the CA's subject DER")
    });
    let now = time::OffsetDateTime::now_utc();
    let days = (new_f.not_after - now).as_seconds_f64() / 86_400.0;
    // validity_days = 365 for leaves; a CA gets its old lifetime, never inflated.
    let want = match is_ca {
        true => (old_f.not_after - old_f.not_before).as_seconds_f64() / 86_400.0,
        false => 365.0,
    };
    f.check(
        new_f.not_before <= now && (want - 1.0..=want + 1.0).contains(&days),
        || {
            format!(
                "{p}: new validity {} .. {} ({want:.0} days wanted)",
                new_f.not_before, new_f.not_after
            )
        },
    );
    f.check(new_f.serial != old_f.serial, || format!("{p}: same serial"));

    // The key file matches the new certificate.
    let key = cx.info.key_path(&path);
    let old_key = bytes_in(cx.before, &key);
    let new_key = bytes_in(cx.after, &key);
    let cert_pub = sc.cert_pubkey(new);
    let kf = sc.file("new.key", new_key);
    // `openssl pkey` of the new key with `arg`: whether it read the key, stdout, stderr.
    let pkey = |arg: &str| {
        let out = openssl_out(&[
            "pkey",
            "-inform",
            pki::inform(new_key),
            "-in",
            path_str(&kf),
            arg,
        ]);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (read, key_pub, err) = pkey("-pubout");
    f.check(read, || {
        format!("{p}: openssl pkey cannot read {}: {err}", key.display())
    });
    f.check(!read || cert_pub == key_pub, || {
        format!("{p}: {} does not match the new certificate", key.display())
    });
    f.check(mode_in(cx.before, &key) == mode_in(cx.after, &key), || {
        format!("{p}: key mode changed")
    });
    if rotated {
        f.check(old_key != new_key, || format!("{p}: key not rotated"));
        f.check(sc.key_pubkey(old_key) != key_pub, || {
            format!("{p}: rotated key has the old public key")
        });
        f.check(pki::is_pem(old_key) == pki::is_pem(new_key), || {
            format!("{p}: key encoding changed (PEM/DER)")
        });
        f.check(pem_label(old_key) == pem_label(new_key), || {
            format!(
                "{p}: key label {:?} became {:?}",
                pem_label(old_key),
                pem_label(new_key)
            )
        });
        let (read, _, err) = pkey("-noout");
        f.check(read, || {
            format!("{p}: `openssl pkey -noout` cannot read the rotated key: {err}")
        });
    } else {
        f.check(old_key == new_key, || {
            format!("{p}: key changed without rotate_keys")
        });
    }

    // A chain after the first certificate is kept as it was.
    if pki::is_pem(old) {
        f.check(after_first_cert(old) == after_first_cert(new), || {
            format!("{p}: what follows the first certificate changed")
        });
    }
}

/// The certificate that signed the leaf (the intermediate when there is one).
fn ca_or_int(tree: &Tree, e: &Entry) -> PathBuf {
    tree.abs(e.ca.as_deref().unwrap_or(&e.path))
}

/// Renews a layout in full and checks everything.
fn renew_layout(layout: &str, rotate: bool) {
    let extra = if rotate { "rotate_keys = true" } else { "" };
    let tree = Tree::with_config(LAYOUTS, layout, extra);
    let info = Before::of(&tree);
    let before = tree.snapshot();
    let due = renewable(&tree);
    // What fails the pass: unrenewable leaves in their window, and files that cannot be read.
    let mut stuck = unrenewable_leaves(&tree, &info);
    let root = pki::running_as_root();
    stuck.extend(
        tree.manifest
            .iter()
            .filter(|e| e.applies(root) && e.status == "error")
            .cloned(),
    );
    let want_code = if stuck.is_empty() { 0 } else { 1 };

    let r = tree.run(&["renew", "--no-restart"]);
    assert_eq!(
        r.code,
        want_code,
        "unrenewable leaves {:?}: {r}",
        stuck.iter().map(|e| &e.path).collect::<Vec<_>>()
    );
    let after = tree.snapshot();
    let mut f = Failures::default();

    // Exactly the due certificates (and their keys when rotating) changed.
    let mut want: BTreeSet<PathBuf> = due.iter().map(|e| tree.abs(&e.path)).collect();
    if rotate {
        // A CA keeps its key.
        let leaves = due.iter().filter(|e| !info.is_ca(&tree.abs(&e.path)));
        want.extend(leaves.map(|e| info.key_path(&tree.abs(&e.path))));
    }
    // And every copy of a re-issued CA in the watched directories, as the CA's new text,
    // every other byte kept.
    let mut copies = Vec::new();
    let renewed_cas: Vec<(&[u8], &[u8])> = due
        .iter()
        .map(|e| tree.abs(&e.path))
        .filter(|p| info.is_ca(p))
        .map(|p| (bytes_in(&before, &p), bytes_in(&after, &p)))
        .collect();
    for (p, node) in &before {
        let (Node::File { bytes, .. }, false) = (node, want.contains(p)) else {
            continue;
        };
        if !tree.watches.iter().any(|(dir, _)| p.starts_with(dir)) {
            continue;
        }
        if let Some(replaced) = pki::with_ca_copies_replaced(bytes, &renewed_cas) {
            f.check(bytes_in(&after, p) == replaced.as_slice(), || {
                format!(
                    "{}: a copy of a renewed CA, not replaced as it should be",
                    p.display()
                )
            });
            want.insert(p.clone());
            copies.push(p.clone());
        }
    }
    let got: BTreeSet<PathBuf> = changed(&before, &after).into_iter().collect();
    f.check(got == want, || {
        format!(
            "changed files differ from the due ones:\n  changed but not due: {:?}\n  due but unchanged: {:?}",
            got.difference(&want).collect::<Vec<_>>(),
            want.difference(&got).collect::<Vec<_>>()
        )
    });
    for e in &due {
        let abs = tree.abs(&e.path);
        f.check(
            r.stdout
                .lines()
                .any(|l| l.starts_with("renewed") && l.contains(path_str(&abs))),
            || format!("no `renewed` line for {}", e.path),
        );
    }
    let scratch = Scratch::new();
    let cx = Ctx {
        tree: &tree,
        before: &before,
        after: &after,
        info: &info,
        scratch: &scratch,
        rotated: rotate,
    };
    for e in &due {
        verify_renewed(&cx, e, &mut f);
    }

    // Backups of the old certificates and keys.
    let sets = backup_sets(&tree);
    if due.is_empty() {
        f.check(sets.is_empty(), || {
            format!("backup sets without renewals: {sets:?}")
        });
    } else {
        f.check(sets.len() == 1, || {
            format!("want one backup set, got {sets:?}")
        });
        if let Some(set) = sets.first() {
            for e in &due {
                let cert = tree.abs(&e.path);
                let key = info.key_path(&cert);
                for file in [cert, key].into_iter().chain(copies.iter().cloned()) {
                    let b = backup_of(set, &file);
                    f.check(
                        std::fs::read(&b).is_ok_and(|bytes| bytes == bytes_in(&before, &file)),
                        || format!("backup {} missing or not the old file", b.display()),
                    );
                }
            }
        }
    }

    // Unrenewable leaves and unreadable files raise 250.003 naming each of them.
    let alarms = tree.run(&["alarms", "--output", "json"]);
    f.check(alarms.code == 0, || format!("alarms: {alarms}"));
    let list: Vec<Value> = alarms.json()["alarms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let failed = list.iter().find(|a| a["id"] == "250.003");
    if stuck.is_empty() {
        f.check(failed.is_none(), || {
            format!("250.003 raised without a failure: {}", alarms.stdout)
        });
    } else {
        let reason = failed.and_then(|a| a["reason"].as_str()).unwrap_or("");
        f.check(failed.is_some(), || {
            format!("no 250.003 alarm: {}", alarms.stdout)
        });
        for e in &stuck {
            let abs = tree.abs(&e.path);
            f.check(reason.contains(path_str(&abs)), || {
                format!("250.003 reason does not name {}: {reason}", e.path)
            });
        }
    }

    // Now every renewed certificate is ok.
    let doc = tree.check_json();
    for e in &due {
        let abs = tree.abs(&e.path);
        let status = doc["certificates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["path"].as_str() == Some(path_str(&abs)))
            .map(|c| c["status"].clone());
        f.check(status == Some(Value::from("ok")), || {
            format!("{} after renewal: status {status:?}", e.path)
        });
    }

    // A second pass renews nothing and changes nothing.
    let again = tree.run(&["renew", "--no-restart"]);
    f.check(again.code == want_code, || format!("second pass: {again}"));
    f.check(
        !again.stdout.lines().any(|l| l.starts_with("renewed")),
        || format!("second pass renewed something: {again}"),
    );
    let third = tree.snapshot();
    let moved = changed(&after, &third);
    f.check(moved.is_empty(), || {
        format!("second pass changed {moved:?}")
    });
    f.check(backup_sets(&tree).len() == sets.len(), || {
        "second pass made a backup set".into()
    });

    f.finish(&format!(
        "renew of the {layout} layout{}",
        if rotate { " with rotate_keys" } else { "" }
    ));
}

#[test]
fn renew_kubeadm_cfssl() {
    renew_layout("kubeadm", false);
}

#[test]
fn renew_starlingx_openssl() {
    renew_layout("starlingx", false);
}

#[test]
fn renew_openshift() {
    renew_layout("openshift", false);
}

#[test]
fn renew_keytypes() {
    renew_layout("keytypes", false);
}

#[test]
fn renew_names() {
    renew_layout("names", false);
}

#[test]
fn renew_bad_layout_renews_its_due_certificates() {
    renew_layout("bad", false);
}

/// No CA key on the host: nothing is written, exit 1, 250.003.
#[test]
fn renew_hardway_is_unrenewable() {
    renew_layout("hardway", false);
}

/// `rotate_keys = true`: every renewed certificate gets a new key in its old file format.
#[test]
fn renew_keytypes_rotating_keys() {
    renew_layout("keytypes", true);
}

#[test]
fn renew_kubeadm_rotating_keys() {
    renew_layout("kubeadm", true);
}

/// `--dry-run` changes nothing and names what it would renew.
#[test]
fn renew_dry_run_changes_nothing() {
    // It exits as the pass would: keytypes has leaves that cannot be renewed (encrypted,
    // mismatched and missing keys, no CA).
    for (layout, code) in [("kubeadm", 0), ("keytypes", 1)] {
        let tree = Tree::new(LAYOUTS, layout);
        let before = tree.snapshot();
        let r = tree.run(&["renew", "--dry-run"]);
        assert_eq!(r.code, code, "{layout}: {r}");
        let moved = changed(&before, &tree.snapshot());
        assert!(moved.is_empty(), "{layout}: dry run changed {moved:?}");
        assert!(
            !tree.state.join("backup").exists(),
            "{layout}: dry run made backups"
        );
        assert!(
            !tree.state.join("alarms.json").exists() && !tree.state.join("pending.json").exists(),
            "{layout}: dry run wrote state: {:?}",
            std::fs::read_dir(&tree.state)
                .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        );
        for e in renewable(&tree) {
            let abs = tree.abs(&e.path);
            assert!(
                r.stdout
                    .lines()
                    .any(|l| l.starts_with("would renew") && l.contains(path_str(&abs))),
                "{layout}: no `would renew` line for {}: {r}",
                e.path
            );
        }
        assert!(
            !r.stdout.lines().any(|l| l.starts_with("renewed")),
            "{layout}: dry run says renewed: {r}"
        );
        // Nothing was raised either.
        let a = tree.run(&["alarms", "--output", "json"]);
        assert_eq!(a.code, 0, "{a}");
        assert_eq!(a.json()["alarms"], Value::Array(Vec::new()), "{a}");
    }
}

/// `--force PATH` renews a certificate that is not due, and only it.
#[test]
fn renew_force_renews_an_ok_certificate_only() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let info = Before::of(&tree);
    let before = tree.snapshot();
    let rel = "etc/kubernetes/pki/apiserver-etcd-client.crt";
    assert_eq!(tree.entry(rel).status, "ok");
    let abs = tree.abs(rel);
    let r = tree.run(&["renew", "--force", "--no-restart", path_str(&abs)]);
    assert_eq!(r.code, 0, "{r}");
    let after = tree.snapshot();
    assert_eq!(changed(&before, &after), vec![abs.clone()], "{r}");
    let scratch = Scratch::new();
    let cx = Ctx {
        tree: &tree,
        before: &before,
        after: &after,
        info: &info,
        scratch: &scratch,
        rotated: false,
    };
    let mut f = Failures::default();
    verify_renewed(&cx, tree.entry(rel), &mut f);
    f.finish("forced renewal");
    // Without --force the same PATH is not due: nothing happens.
    let r = tree.run(&["renew", "--no-restart", path_str(&abs)]);
    assert_eq!(r.code, 0, "{r}");
    assert!(changed(&after, &tree.snapshot()).is_empty(), "{r}");
}

/// Bad usage of PATHs: outside the watches, or --force without PATH: exit 2, nothing written.
#[test]
fn renew_path_outside_watches_is_bad_usage() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let before = tree.snapshot();
    let outside = tree.abs("expected.tsv");
    let conf = tree.abs("etc/kubernetes/admin.conf");
    for args in [
        vec!["renew", "--no-restart", path_str(&outside)],
        vec!["renew", "--force", "--no-restart", path_str(&conf)],
        vec!["renew", "--force", "--no-restart"],
    ] {
        let r = tree.run(&args);
        assert_eq!(r.code, 2, "{r}");
        assert!(!r.stderr.trim().is_empty(), "says why: {r}");
    }
    assert!(changed(&before, &tree.snapshot()).is_empty());
    assert!(!tree.state.join("backup").exists());
}

/// A leaf issued by a clock that ran 20 days ahead (`faketime -f +20d openssl x509 -req`):
/// every client refuses it until its notBefore, whatever its notAfter. `check` says it is
/// due and why; the pass renews it, and openssl then verifies it.
#[test]
fn a_certificate_dated_ahead_by_a_fast_clock_is_due_and_renewed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = ca_and_server(dir, "+0d", "+20d");
    common::sh(
        dir,
        "! openssl verify -CAfile pki/ca.crt pki/server.crt >/dev/null 2>&1",
    );
    due_as_dated_ahead(&config, "server.crt");
    let renew = pki::run_bin(&config, &["renew"]);
    assert_eq!(renew.code, 0, "{renew}");
    common::sh(dir, "openssl verify -CAfile pki/ca.crt pki/server.crt");
    let again = pki::run_bin(&config, &["check", "--output", "json"]);
    let server = (again.json()["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"].as_str().unwrap().ends_with("server.crt"))
        .expect("server.crt in check")
        .clone();
    assert_eq!(server["status"], "ok", "{server}");
}

/// `check` says the certificate whose file is `name` is due, dated ahead.
fn due_as_dated_ahead(config: &Path, name: &str) {
    let v = pki::run_bin(config, &["check", "--output", "json"]).json();
    let c = (v["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"].as_str().unwrap().ends_with(&format!("/{name}")))
        .unwrap_or_else(|| panic!("{name} not in check: {v}"));
    assert_eq!(c["status"], "due", "{c}");
    let reason = c["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("not valid until "), "{c}");
}

/// In `dir`: a CA of ten years issued on a clock `ca_clock` from the real one (`faketime -f
/// CA_CLOCK`), and `pki/server.crt`, a year's leaf it signed on a clock `leaf_clock`, watched
/// by the returned configuration (state in `dir/state`).
fn ca_and_server(dir: &Path, ca_clock: &str, leaf_clock: &str) -> PathBuf {
    common::sh(
        dir,
        &format!(
            "mkdir pki state
             faketime -f {ca_clock} openssl req -x509 -newkey rsa:2048 -nodes \
                 -keyout pki/ca.key -out pki/ca.crt \
                 -subj /CN=test-ca -days 3650 2>/dev/null
             openssl req -newkey rsa:2048 -nodes -keyout pki/server.key -out server.csr \
                 -subj /CN=server 2>/dev/null
             printf 'subjectAltName=DNS:server\\nextendedKeyUsage=serverAuth\\n' > ext
             faketime -f {leaf_clock} openssl x509 -req -in server.csr -CA pki/ca.crt \
                 -CAkey pki/ca.key -CAcreateserial -days 365 -extfile ext \
                 -out pki/server.crt 2>/dev/null"
        ),
    );
    let config = dir.join("certrenewd.toml");
    let text = format!(
        "state_dir = {:?}\n[[watch]]\npath = {:?}\nunits = []\n",
        dir.join("state"),
        dir.join("pki")
    );
    std::fs::write(&config, common::single_node(&text)).unwrap();
    config
}

/// `certrenewd --config CONFIG ARGS` on a clock `offset` from the real one (libfaketime,
/// `-3d`, `+4000d`).
fn renew_at(config: &Path, offset: &str, args: &[&str]) -> pki::Run {
    let mut cmd = std::process::Command::new(pki::BIN);
    cmd.arg("--config").arg(config).args(args);
    cmd.env("LD_PRELOAD", common::libfaketime())
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    pki::run_cmd(&mut cmd, args)
}

/// The clock is checked before a pass dates anything by it: one earlier than the latest a
/// pass saw here is refused (even with `--force`), one past the end of every CA on the node
/// is refused unless `renew --force` confirms it; a refused pass changes no file, fails with
/// 250.003 saying why, and does not move the record.
#[test]
fn a_clock_that_jumped_is_refused_before_anything_is_dated_by_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = ca_and_server(dir, "+0d", "-355d");
    let first = pki::run_bin(&config, &["renew"]);
    assert_eq!(first.code, 0, "{first}");
    let record = dir.join("state/clock.json");
    let seen = std::fs::read_to_string(&record).expect("the clock seen is recorded");
    let files = |d: &Path| -> Vec<Vec<u8>> {
        ["ca.crt", "server.crt", "server.key"]
            .iter()
            .map(|f| std::fs::read(d.join("pki").join(f)).unwrap())
            .collect()
    };
    let before = files(dir);

    // Three days behind: refused, forced or not.
    let r = renew_at(&config, "-3d", &["renew", "--force", "--all"]);
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout
            .contains("refused by the clock check: the clock reads")
            && r.stdout.contains("earlier than")
            && !r.stderr.contains("inhibit"),
        "{r}"
    );
    assert_eq!(files(dir), before, "a refused pass changed a file");
    let alarms = pki::run_bin(&config, &["alarms", "--output", "json"]).json();
    let failed = (alarms["alarms"].as_array().unwrap().iter())
        .find(|a| a["id"] == "250.003")
        .unwrap_or_else(|| panic!("no 250.003: {alarms}"));
    assert!(
        failed["reason"].as_str().unwrap().contains("earlier than"),
        "{failed}"
    );

    // Eleven years ahead, past the CA's end: refused unless confirmed.
    let r = renew_at(&config, "+4000d", &["renew"]);
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout
            .contains("after the end of every root CA whose key is on this node"),
        "{r}"
    );
    assert_eq!(files(dir), before, "a refused pass changed a file");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        seen,
        "the record moved"
    );
    let r = renew_at(&config, "+4000d", &["renew", "--force", "--all"]);
    assert!(!r.stdout.contains("refused by the clock"), "{r}");
    assert_ne!(files(dir), before, "confirmed, the pass renews");
}

/// A CA issued by a clock that ran 20 days ahead (`faketime -f +20d openssl req -x509`), and
/// a leaf it signed then: nothing it signed verifies until its notBefore. `check` says the CA
/// is due and why; the pass re-issues it now with its own key (and the leaf), and openssl
/// verifies the leaf against it.
#[test]
fn a_ca_dated_ahead_by_a_fast_clock_is_due_and_reissued_with_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = ca_and_server(dir, "+20d", "+20d");
    common::sh(
        dir,
        "! openssl verify -CAfile pki/ca.crt pki/server.crt >/dev/null 2>&1
         openssl x509 -in pki/ca.crt -noout -pubkey > ca.pub.before",
    );
    due_as_dated_ahead(&config, "ca.crt");
    let renew = pki::run_bin(&config, &["renew"]);
    assert_eq!(renew.code, 0, "{renew}");
    common::sh(
        dir,
        "openssl verify -CAfile pki/ca.crt pki/server.crt
         openssl x509 -in pki/ca.crt -noout -pubkey | cmp -s - ca.pub.before",
    );
    let again = pki::run_bin(&config, &["check", "--output", "json"]).json();
    let statuses: Vec<&str> = (again["certificates"].as_array().unwrap().iter())
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert!(statuses.iter().all(|s| *s == "ok"), "{again}");
}
