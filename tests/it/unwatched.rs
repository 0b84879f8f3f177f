//! Nothing unwatched: every certificate an operator relies on is renewed, or reported loudly
//! (check, exit status, alarm, metric) as early as it is known. Each test takes one way a
//! certificate could slip out of sight, on trees made by the real openssl and cfssl CLIs
//! (`tests/fixtures/mkpki.sh`; due leaves issued long ago), and runs the real binary.

use crate::common;

use common::{pki, sh, table};
use std::fs;
use std::path::Path;

use pki::{Run, Tree, facts, first_cert_der, path_str, toml_str};
use serde_json::Value;

const LAYOUTS: &[&str] = &["kubeadm", "hardway"];

/// A watch line of a hand-written config: path, units, optional.
type W<'a> = (&'a Path, &'a str, bool);

/// Writes the tree's config by hand: `extra` lines, then `watches`. Every pass here runs with
/// `--no-restart`: outside the sandbox no bus is touched.
/// The fixture's leaves (not backdated) live 10 days: renewed with a normal lifetime, as
/// `Tree::new`'s config does; without it they renew only when cfssl signed the CA and the leaf
/// in the same second (kubeadm's 365-day rule), else they are "shorter than the window".
const FIXTURE_LIFETIME: &str = "validity_days = 365";

fn config(tree: &Tree, extra: &str, watches: &[W<'_>]) {
    let mut s = format!("state_dir = {}\n{extra}\n", toml_str(&tree.state));
    for (p, unit, optional) in watches {
        s.push_str(&format!(
            "\n[[watch]]\npath = {}\nunits = [{}]\noptional = {optional}\n",
            toml_str(p),
            toml_str(Path::new(unit))
        ));
    }
    fs::write(&tree.config, common::single_node(&s)).expect("writing the config");
}

/// The layout's own watches, required.
fn layout_watches(tree: &Tree) -> Vec<W<'_>> {
    tree.watches
        .iter()
        .map(|(p, u)| (p.as_path(), u.as_str(), false))
        .collect()
}

fn alarms(tree: &Tree) -> Vec<Value> {
    let r = tree.run(&["alarms", "--output", "json"]);
    assert_eq!(r.code, 0, "{r}");
    r.json()["alarms"].as_array().cloned().unwrap_or_default()
}

fn reason(a: &Value) -> &str {
    a["reason"].as_str().unwrap_or_default()
}

/// The `check --output json` entry of the certificate file `path`.
fn cert_entry<'a>(doc: &'a Value, path: &Path) -> &'a Value {
    doc["certificates"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["path"] == path_str(path))
        .unwrap_or_else(|| panic!("{} not in check: {doc:#}", path.display()))
}

fn expect_code(r: &Run, code: i32) {
    assert_eq!(r.code, code, "{r}");
}

/// A leaf whose CA key is not on the host is `unrenewable` a year before it is due: in check
/// (and `--fail-due`), in the metrics, once per pass in the log. Outside its window it raises
/// no alarm and fails no pass: alarms keep their meaning.
#[test]
fn a_certificate_this_host_cannot_renew_is_reported_long_before_it_is_due() {
    let tree = Tree::new(LAYOUTS, "hardway");
    let metrics = tree.tmp.path().join("certrenewd.prom");
    // A window of one day: nothing of the layout is due (its due leaves have 10 days left).
    let extra = format!(
        "renew_before_days = 1\nmetrics_file = {}",
        toml_str(&metrics)
    );
    config(&tree, &extra, &layout_watches(&tree));
    let sa = tree.abs("var/lib/kubernetes/service-account.pem");

    let doc = tree.check_json();
    let c = cert_entry(&doc, &sa);
    assert_eq!(c["status"], "unrenewable", "{c:#}");
    assert!(reason(c).contains("CA key not on this host"), "{c:#}");
    assert!(c["days_left"].as_f64().unwrap() > 300.0, "{c:#}");
    expect_code(&tree.run(&["check", "--fail-due"]), 1);
    let table = tree.run(&["check"]);
    assert!(
        table::rows(&table.stdout)
            .iter()
            .any(|r| r.path == path_str(&sa)
                && r.status() == "unrenewable"
                && r.note.contains("CA key not on this host")),
        "{table}"
    );

    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 0);
    assert!(
        r.stderr.contains(&format!(
            "{}: cannot be renewed on this host: CA key not on this host",
            sa.display()
        )),
        "{r}"
    );
    assert!(alarms(&tree).is_empty(), "outside the window: no alarm");
    let prom = fs::read_to_string(&metrics).expect("metrics file");
    let line = prom
        .lines()
        .find(|l| {
            l.starts_with("certrenewd_certificate_renewable{")
                && l.contains(&format!("path=\"{}\"", sa.display()))
        })
        .unwrap_or_else(|| panic!("no renewable metric for {}:\n{prom}", sa.display()));
    assert!(line.ends_with(" 0"), "{line}");
}

/// A mistyped watch path fails the pass and raises 250.003 naming it (check --fail-due too)
/// until it is fixed or marked optional; a node with none of its optional watches fails too.
#[test]
fn a_missing_watch_path_is_an_error_unless_optional() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let missing = tree.tmp.path().join("etc/kubernets/pki");
    let mut watches = layout_watches(&tree);
    watches.push((&missing, "kubelet.service", false));
    config(&tree, "renew_before_days = 1", &watches);

    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    let a = alarms(&tree);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["id"], "250.003");
    assert!(
        reason(&a[0]).contains(path_str(&missing)) && reason(&a[0]).contains("does not exist"),
        "{a:#?}"
    );
    expect_code(&tree.run(&["check", "--fail-due"]), 1);
    assert!(
        tree.run(&["check"]).stdout.contains("error"),
        "check names it"
    );

    // Marked optional (a default a node may lack): no error, and the alarm clears.
    watches.pop();
    watches.push((&missing, "kubelet.service", true));
    config(&tree, "renew_before_days = 1", &watches);
    expect_code(&tree.run(&["renew", "--no-restart"]), 0);
    assert!(alarms(&tree).is_empty());
    expect_code(&tree.run(&["check", "--fail-due"]), 0);

    // Every watch optional and none there: nothing would be watched, which is an error.
    let other = tree.tmp.path().join("etc/etcd");
    config(
        &tree,
        "renew_before_days = 1",
        &[(&missing, "a.service", true), (&other, "b.service", true)],
    );
    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    assert!(
        reason(&alarms(&tree)[0]).contains("none of the watched directories exists"),
        "{:#?}",
        alarms(&tree)
    );
}

/// A certificate file truncated by a bad copy fails the pass with an alarm naming it and
/// what is wrong, cleared once the file is fixed; a file that is not a certificate at all (a
/// CSR in a `.pem`) stays a quiet skip.
#[test]
fn a_truncated_certificate_file_is_an_error_naming_it() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    config(&tree, "renew_before_days = 1", &layout_watches(&tree));
    let pki = tree.abs("etc/kubernetes/pki");
    let good = fs::read(pki.join("front-proxy-client.crt")).unwrap();
    let broken = pki.join("front-proxy-client.crt.bak.crt");
    fs::write(&broken, &good[..good.len() / 2]).unwrap();
    sh(
        &pki,
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null \
         -subj /CN=csr -out request.pem 2>/dev/null",
    );

    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    assert!(
        r.stdout
            .contains(&format!("FAILED        {}", broken.display())),
        "{r}"
    );
    let a = alarms(&tree);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert!(
        reason(&a[0]).contains(path_str(&broken)) && reason(&a[0]).contains("truncated PEM"),
        "{a:#?}"
    );
    let doc = tree.check_json();
    let listed = |k: &str, p: &Path| {
        doc[k]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["path"] == path_str(p))
    };
    assert!(listed("errors", &broken), "{doc:#}");
    assert!(listed("skipped", &pki.join("request.pem")), "{doc:#}");
    assert!(!listed("errors", &pki.join("request.pem")), "{doc:#}");

    fs::write(&broken, &good).unwrap();
    expect_code(&tree.run(&["renew", "--no-restart"]), 0);
    assert!(alarms(&tree).is_empty(), "{:#?}", alarms(&tree));
}

/// A certificate symlinked out of the watches is refused alike by check, the dry run and the
/// real pass; a symlink to a watched file is the same certificate, listed once. While an
/// inhibit is set, the dry run says the pass would be deferred, as the real one is.
#[test]
fn check_dry_run_and_renew_agree() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    config(&tree, FIXTURE_LIFETIME, &layout_watches(&tree));
    let pki = tree.abs("etc/kubernetes/pki");
    let outside = tree.tmp.path().join("elsewhere");
    fs::create_dir(&outside).unwrap();
    let link = pki.join("apiserver.crt");
    fs::rename(&link, outside.join("apiserver.crt")).unwrap();
    std::os::unix::fs::symlink(outside.join("apiserver.crt"), &link).unwrap();
    let alias = pki.join("apiserver-kubelet-client-current.crt");
    std::os::unix::fs::symlink("apiserver-kubelet-client.crt", &alias).unwrap();

    let doc = tree.check_json();
    let c = cert_entry(&doc, &link);
    assert_eq!(c["status"], "unrenewable", "{c:#}");
    assert!(
        reason(c).contains("outside the watched directories"),
        "{c:#}"
    );
    let client = cert_entry(&doc, &pki.join("apiserver-kubelet-client.crt"));
    assert_eq!(client["aliases"][0], path_str(&alias), "{client:#}");
    let listed = doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["subject"] == client["subject"])
        .count();
    assert_eq!(listed, 1, "a symlink and its file are one certificate");

    // The dry run exits as the pass below does (1: the link cannot be renewed).
    let dry = tree.run(&["renew", "--dry-run"]);
    expect_code(&dry, 1);
    assert!(
        dry.stdout
            .contains(&format!("would fail    {}: ", link.display()))
            && dry.stdout.contains("would renew   ")
            && dry.stdout.contains("would restart ")
            && dry
                .stdout
                .contains("1 would be restarted — dry run, nothing changed; the pass would fail"),
        "{dry}"
    );
    let outside_before = fs::read(outside.join("apiserver.crt")).unwrap();
    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    assert!(
        r.stdout
            .contains(&format!("FAILED        {}", link.display())),
        "{r}"
    );
    assert_eq!(
        fs::read(outside.join("apiserver.crt")).unwrap(),
        outside_before
    );
    let renewed = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("renewed "))
        .count();
    let client_lines = r
        .stdout
        .lines()
        .filter(|l| l.contains("apiserver-kubelet-client"))
        .count();
    assert!(renewed > 0 && client_lines == 1, "{r}");

    // `renew LINK` names the certificate the link is an alias of, and renews it.
    let serial = |doc: &serde_json::Value| {
        cert_entry(doc, &pki.join("apiserver-kubelet-client.crt"))["serial"].clone()
    };
    let before = serial(&tree.check_json());
    let r = tree.run(&["renew", "--force", "--no-restart", path_str(&alias)]);
    expect_code(&r, 0);
    assert!(
        r.stdout.contains(&format!(
            "renewed       {}",
            pki.join("apiserver-kubelet-client.crt").display()
        )),
        "{r}"
    );
    assert_ne!(serial(&tree.check_json()), before, "{r}");

    // Inhibited: the dry run says what the real pass then does.
    fs::remove_file(&link).unwrap();
    fs::rename(outside.join("apiserver.crt"), &link).unwrap();
    expect_code(&tree.run(&["inhibit", "--reason", "kubeadm upgrade"]), 0);
    let dry = tree.run(&["renew", "--dry-run"]);
    assert!(
        dry.stdout.contains("would defer the pass")
            && dry.stdout.contains("kubeadm upgrade")
            && !dry.stdout.contains("would renew"),
        "{dry}"
    );
    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    assert!(r.stdout.contains("pass deferred"), "{r}");
    // It says how to lift the inhibit, and how to run this one pass anyway.
    assert!(
        r.stderr.contains("certrenewd inhibit --clear")
            && r.stderr.contains("certrenewd renew --ignore-inhibit"),
        "{r}"
    );
    let r = tree.run(&["renew", "--no-restart", "--ignore-inhibit"]);
    expect_code(&r, 0);
    assert!(
        r.stdout
            .contains(&format!("renewed       {}", link.display())),
        "{r}"
    );
    assert!(
        tree.run(&["inhibit"]).stdout.contains("kubeadm upgrade"),
        "the inhibit stays"
    );
    // An inhibit without a reason is refused: an operator reads it later.
    let r = tree.run(&["inhibit", "--reason", " "]);
    expect_code(&r, 2);
    assert!(r.stderr.contains("give the reason"), "{r}");
}

/// `renew PATH...` as the first pass on a node (no alarm active yet) raises nothing for the
/// certificates it was not given, however due or unrenewable they are: they are the next
/// full pass's.
#[test]
fn a_partial_first_pass_raises_nothing_for_what_it_was_not_given() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    config(&tree, FIXTURE_LIFETIME, &layout_watches(&tree));
    let pki = tree.abs("etc/kubernetes/pki");
    // front-proxy-client gets a key that is not its own: unrenewable, and due.
    fs::copy(
        pki.join("apiserver.key"),
        pki.join("front-proxy-client.key"),
    )
    .unwrap();
    let apiserver = pki.join("apiserver.crt");
    let r = tree.run(&["renew", "--no-restart", "--force", path_str(&apiserver)]);
    expect_code(&r, 0);
    let raised = alarms(&tree);
    println!("{raised:#?}");
    let strangers: Vec<&Value> = raised
        .iter()
        .filter(|a| {
            a["subjects"]
                .as_array()
                .is_none_or(|s| s.iter().any(|p| p.as_str() != Some(path_str(&apiserver))))
        })
        .collect();
    assert!(
        strangers.is_empty(),
        "alarms for certificates renew was not given: {strangers:#?}"
    );
}

/// `renew PATH...` reconciles only the alarms of what it examined: the 500.200 of a
/// certificate it was not asked about, and the host's 250.003, stay.
#[test]
fn a_partial_pass_leaves_the_alarms_it_did_not_examine() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    config(&tree, FIXTURE_LIFETIME, &layout_watches(&tree));
    let pki = tree.abs("etc/kubernetes/pki");
    // front-proxy-client gets a key that is not its own: it cannot be renewed.
    fs::copy(
        pki.join("apiserver.key"),
        pki.join("front-proxy-client.key"),
    )
    .unwrap();
    let broken = pki.join("front-proxy-client.crt");

    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 1);
    // Without journald (tests point it nowhere) each alarm is one stderr line, and why
    // journald is not used is said once.
    assert_eq!(r.stderr.matches("journald unavailable").count(), 1, "{r}");
    assert!(r.stderr.matches("certrenewd: alarm ").count() >= 2, "{r}");
    let before = alarms(&tree);
    let ids: Vec<&str> = before.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert!(
        ids.contains(&"250.003") && ids.contains(&"500.200"),
        "{before:#?}"
    );
    assert!(
        before
            .iter()
            .any(|a| a["id"] == "500.200"
                && a["entity"].as_str().unwrap().ends_with(path_str(&broken))),
        "{before:#?}"
    );

    let apiserver = pki.join("apiserver.crt");
    let r = tree.run(&["renew", "--no-restart", "--force", path_str(&apiserver)]);
    expect_code(&r, 0);
    assert_eq!(
        alarms(&tree),
        before,
        "the partial pass changed alarms it never examined"
    );
}

/// kubeadm signs a leaf with its CA's notBefore and a notAfter a year after the signing, so
/// "notAfter - notBefore" of a leaf signed when its CA was two years old is about three
/// years. With no `validity_days` (the shipped default), such a leaf comes back with
/// kubeadm's 365 days; a leaf issued after its CA keeps the lifetime it had.
#[test]
fn kubeadm_lifetimes_are_never_inflated() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let dir = tree.tmp.path().join("aged");
    fs::create_dir(&dir).unwrap();
    // The CA three years ago; the kubeadm-signed leaf as kubeadm signs it (openssl ca sets
    // both dates): the CA's notBefore, and a year from its signing 355 days and 197 minutes
    // ago (due now); a second leaf issued 815 days ago for 825.
    sh(
        &dir,
        r#"then=$(date -u -d '-1095 days' '+%Y-%m-%d %H:%M:%S')
        key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
        key ca.key; key kubeadm.key; key issued.key
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:kubernetes\n' >ext
        TZ=UTC faketime "$then" openssl req -x509 -new -key ca.key -subj /CN=kubernetes -days 3650 -out ca.crt
        for leaf in kubeadm issued; do openssl req -new -key $leaf.key -subj /CN=$leaf -out $leaf.csr; done
        ca_nb=$(date -u -d "$(openssl x509 -in ca.crt -noout -startdate | cut -d= -f2)" +%y%m%d%H%M%SZ)
        na=$(date -u -d '+10 days -197 minutes' +%y%m%d%H%M%SZ)
        printf '[ca]\ndefault_ca=k\n[k]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\ndefault_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n' >ca.cnf
        touch index.txt; echo 1000 >serial
        openssl ca -batch -notext -config ca.cnf -cert ca.crt -keyfile ca.key -in kubeadm.csr -startdate "$ca_nb" -enddate "$na" -extfile ext -out kubeadm.crt 2>/dev/null
        faketime -f -815d openssl x509 -req -in issued.csr -CA ca.crt -CAkey ca.key -days 825 -extfile ext -out issued.crt 2>/dev/null
        rm -f ext ./*.csr ca.cnf index.txt* serial* 1000.pem"#,
    );
    let ca = facts(first_cert_der(&fs::read(dir.join("ca.crt")).unwrap()));
    let old = facts(first_cert_der(&fs::read(dir.join("kubeadm.crt")).unwrap()));
    assert_eq!(
        old.not_before, ca.not_before,
        "fixture: kubeadm's notBefore"
    );
    assert!((old.not_after - old.not_before).whole_days() > 1100);

    // The shipped default: no validity_days.
    config(
        &tree,
        "renew_before_days = 15",
        &[(&dir, "kubelet.service", false)],
    );
    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 0);
    let days = |name: &str| {
        let f = facts(first_cert_der(&fs::read(dir.join(name)).unwrap()));
        (f.not_after - f.not_before).whole_days()
    };
    assert_eq!(days("kubeadm.crt"), 365, "{r}");
    // 825 days and the 5 minutes notBefore is set back for clock skew.
    assert_eq!(days("issued.crt"), 825, "{r}");
    // renew says which lifetime it used, and why.
    let said = |name: &str| {
        r.stdout
            .lines()
            .find(|l| l.contains(name) && l.contains("lifetime"))
            .unwrap_or_else(|| panic!("no lifetime said for {name}:\n{r}"))
            .to_owned()
    };
    // Why, once in the report; the span and whose on each line.
    assert!(
        said("kubeadm.crt").contains("lifetime 365 days, kubeadm's"),
        "{r}"
    );
    assert_eq!(
        (r.stdout)
            .matches("kubeadm's: the old certificate was signed with its CA's notBefore")
            .count(),
        1,
        "{r}"
    );
    assert!(
        said("issued.crt").contains("lifetime 825 days, the old certificate's"),
        "{r}"
    );
}

/// The PEM blocks of a file: (label, the whole block's text).
fn pem_blocks(bytes: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            current = Some((label.to_string(), String::new()));
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
        if line.starts_with("-----END ") {
            out.extend(current.take());
        }
    }
    out
}

/// Combined certificate+key files (haproxy-style bundles, key last or first) are renewed in
/// place: one file, the same blocks in the same order and encodings, the key kept (or,
/// rotating, replaced in its own block). kubelet's `kubelet-client-current.pem`, a relative
/// symlink to a dated file, is one certificate with it, renewed kubelet's way: a
/// new dated file with the same blocks, the symlink moved to it, the old file kept.
#[test]
fn combined_certificate_and_key_files_are_renewed_in_place_and_kubelets_its_way() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let dir = tree.tmp.path().join("kubelet-pki");
    fs::create_dir(&dir).unwrap();
    sh(
        &dir,
        r#"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -subj /CN=kubernetes -days 3650 -out ca.crt 2>/dev/null
        openssl ecparam -name prime256v1 -genkey -noout -out kubelet.key
        openssl genrsa -out haproxy.key 2048 2>/dev/null
        openssl genrsa -traditional -out keyfirst.key 2048 2>/dev/null
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth,serverAuth\n' >ext
        for leaf in kubelet haproxy keyfirst; do
            openssl req -new -key $leaf.key -subj "/O=system:nodes/CN=system:node:$leaf" -out $leaf.csr
            faketime -f -355d openssl x509 -req -in $leaf.csr -CA ca.crt -CAkey ca.key -days 365 -extfile ext -out $leaf.crt 2>/dev/null
        done
        cat kubelet.crt kubelet.key >kubelet-client-2025-12-03-10-00-00.pem
        ln -s kubelet-client-2025-12-03-10-00-00.pem kubelet-client-current.pem
        openssl pkcs8 -topk8 -nocrypt -in haproxy.key -out haproxy8.key
        cat haproxy.crt ca.crt haproxy8.key >haproxy.pem
        cat keyfirst.key keyfirst.crt >keyfirst.pem
        chmod 600 ./*.pem
        rm -f ext ./*.csr kubelet.crt kubelet.key haproxy.crt haproxy.key haproxy8.key keyfirst.crt keyfirst.key"#,
    );
    // kubelet's pair is listed, and renewed, by the symlink it reads.
    let first_pair = dir.join("kubelet-client-2025-12-03-10-00-00.pem");
    let first_bytes = fs::read(&first_pair).unwrap();
    let files = [
        dir.join("kubelet-client-current.pem"),
        dir.join("haproxy.pem"),
        dir.join("keyfirst.pem"),
    ];
    let before: Vec<Vec<(String, String)>> = files
        .iter()
        .map(|f| pem_blocks(&fs::read(f).unwrap()))
        .collect();
    config(&tree, "", &[(&dir, "kubelet.service", false)]);

    let doc = tree.check_json();
    // ca.crt and the three leaves: the symlink adds none, and the copy of ca.crt in
    // haproxy.pem's chain is ca.crt, listed once by its own file (it was once listed
    // again as a CA of its own).
    let certs = doc["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 4, "{doc:#}");
    let cas: Vec<&Value> = certs.iter().filter(|c| c["is_ca"] == true).collect();
    assert_eq!(cas.len(), 1, "{doc:#}");
    assert_eq!(cas[0]["path"], path_str(&dir.join("ca.crt")), "{doc:#}");
    assert_eq!(
        cert_entry(&doc, &files[1])["ca_path"],
        path_str(&dir.join("ca.crt"))
    );
    let kubelet = cert_entry(&doc, &files[0]);
    assert_eq!(kubelet["status"], "due", "{kubelet:#}");
    assert_eq!(kubelet["aliases"][0], path_str(&first_pair));

    // Renewed with the keys kept; then forced again with new keys.
    for (round, extra) in [(0, ""), (1, "rotate_keys = true")] {
        config(&tree, extra, &[(&dir, "kubelet.service", false)]);
        let r = match round {
            0 => tree.run(&["renew", "--no-restart"]),
            _ => {
                let mut args = vec!["renew", "--no-restart", "--force"];
                args.extend(files.iter().map(|f| path_str(f)));
                tree.run(&args)
            }
        };
        expect_code(&r, 0);
        assert_eq!(
            r.stdout
                .lines()
                .filter(|l| l.starts_with("renewed "))
                .count(),
            3,
            "{r}"
        );
        for (f, old) in files.iter().zip(&before) {
            let now = pem_blocks(&fs::read(f).unwrap());
            let labels = |b: &[(String, String)]| b.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
            assert_eq!(
                labels(&now),
                labels(old),
                "{}: blocks and order",
                f.display()
            );
            let first_cert = old.iter().position(|b| b.0 == "CERTIFICATE");
            for (i, (n, o)) in now.iter().zip(old).enumerate() {
                let rotated_key = n.0.contains("PRIVATE KEY") && round == 1;
                if Some(i) == first_cert || rotated_key {
                    assert_ne!(n.1, o.1, "{}: {} must change", f.display(), n.0);
                } else {
                    assert_eq!(n.1, o.1, "{}: {} changed", f.display(), n.0);
                }
            }
            let ca = path_str(&dir.join("ca.crt")).to_string();
            let verify = common::openssl(&["verify", "-CAfile", &ca, path_str(f)]);
            assert!(verify.contains(": OK"), "{verify}");
            let cert_pub = common::openssl(&["x509", "-in", path_str(f), "-noout", "-pubkey"]);
            let key_pub = common::openssl(&["pkey", "-in", path_str(f), "-pubout"]);
            assert_eq!(cert_pub, key_pub, "{}: certificate and key", f.display());
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600);
        }
        // Each renewal a new dated pair, named relatively like the symlink was; the first
        // pair stays as it was.
        let link = fs::read_link(dir.join("kubelet-client-current.pem")).unwrap();
        let name = link.to_str().unwrap();
        assert!(
            link.is_relative()
                && certrenewd::inventory::kubelet::dated_prefix(name) == Some("kubelet-client")
                && dir.join(&link) != first_pair,
            "{name}"
        );
        assert_eq!(fs::read(&first_pair).unwrap(), first_bytes);
        assert!(alarms(&tree).is_empty(), "{:#?}", alarms(&tree));
    }
}

/// kubeadm renews a leaf with its CA's notBefore and a notAfter a year from the renewal: a
/// renewal at the time of day the CA was made gives a span of whole days, which the span
/// alone takes for a chosen lifetime. kubeadm's names (its CA `kubernetes`, its leaf
/// `kube-apiserver` in `apiserver.crt`) tell it apart from a script's leaf made in its CA's
/// very second (CA `etcd-ca`, leaf `etcd-server`): the first comes back with kubeadm's
/// year, the second keeps the lifetime its script chose; and over a year and a half of
/// kubeadm renewals, at every ten minutes of the day, each is taken for kubeadm's.
#[test]
fn a_kubeadm_leaf_renewed_at_its_cas_time_of_day_keeps_kubeadms_year() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let dir = tree.tmp.path().join("aged");
    fs::create_dir(&dir).unwrap();
    // Both CAs 1095 days ago; each leaf signed (openssl ca sets both dates) with its CA's
    // notBefore and a notAfter 1105 whole days later, at the CA's time of day: due in 10.
    sh(
        &dir,
        r#"then=$(date -u -d '-1095 days' '+%Y-%m-%d %H:%M:%S')
        key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:node1\n' >ext
        printf '[ca]\ndefault_ca=k\n[k]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\ndefault_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n' >ca.cnf
        touch index.txt; echo 1000 >serial
        for pair in kubernetes:apiserver:kube-apiserver etcd-ca:etcd-server:etcd-server; do
            IFS=: read -r ca leaf cn <<<"$pair"
            key $ca.key; key $leaf.key
            TZ=UTC faketime "$then" openssl req -x509 -new -key $ca.key -subj /CN=$ca -days 3650 -out $ca.crt
            openssl req -new -key $leaf.key -subj /CN=$cn -out $leaf.csr
            nb=$(date -u -d "$(openssl x509 -in $ca.crt -noout -startdate | cut -d= -f2)" '+%Y-%m-%d %H:%M:%S')
            openssl ca -batch -notext -config ca.cnf -cert $ca.crt -keyfile $ca.key -in $leaf.csr \
                -startdate "$(date -u -d "$nb" +%y%m%d%H%M%SZ)" \
                -enddate "$(date -u -d "$nb UTC +1105 days" +%y%m%d%H%M%SZ)" \
                -extfile ext -out $leaf.crt 2>/dev/null
        done
        rm -f ext ./*.csr ca.cnf index.txt* serial* ./*.pem"#,
    );
    let read = |name: &str| facts(first_cert_der(&fs::read(dir.join(name)).unwrap()));
    let (ca, old) = (read("kubernetes.crt"), read("apiserver.crt"));
    assert_eq!(
        old.not_before, ca.not_before,
        "fixture: kubeadm's notBefore"
    );
    assert_eq!((old.not_after - old.not_before).whole_seconds() % 86_400, 0);

    // A year and a half of kubeadm renewals, at every ten minutes of the day.
    let mut misjudged = Vec::new();
    let path = dir.join("apiserver.crt");
    for day in 0..548 {
        for slot in 0..144 {
            let mut leaf = old.clone();
            let renewed_at = ca.not_before
                + time::Duration::days(400 + day)
                + time::Duration::minutes(10 * slot);
            leaf.not_after = renewed_at + time::Duration::days(365);
            let l = certrenewd::plan::lifetime(&leaf, &path, &ca, None);
            if l.span != time::Duration::days(365) {
                misjudged.push(format!(
                    "day {day} {:02}:{:02}: {l}",
                    slot / 6,
                    slot % 6 * 10
                ));
            }
        }
    }
    println!(
        "kubeadm renewals misjudged: {} of {}",
        misjudged.len(),
        548 * 144
    );
    assert!(
        misjudged.is_empty(),
        "{:#?}",
        &misjudged[..misjudged.len().min(5)]
    );

    config(
        &tree,
        "renew_before_days = 15",
        &[(&dir, "kubelet.service", false)],
    );
    // `check` says the lifetime each renewal will get, and which rule chose it.
    let doc = tree.check_json();
    let will = |name: &str| {
        doc["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["path"].as_str().unwrap().ends_with(name))
            .map(|x| x["lifetime"].as_str().unwrap_or("").to_owned())
            .unwrap_or_else(|| panic!("{name} not in check: {doc:#}"))
    };
    assert!(
        will("apiserver.crt").ends_with("have kubeadm's names"),
        "{doc:#}"
    );
    assert_eq!(will("etcd-server.crt"), "1105 days, the old certificate's");
    let r = tree.run(&["renew", "--no-restart"]);
    expect_code(&r, 0);
    let days = |name: &str| {
        let f = read(name);
        (f.not_after - f.not_before).whole_days()
    };
    let said = |name: &str| {
        r.stdout
            .lines()
            .find(|l| l.contains(name) && l.contains("lifetime"))
            .unwrap_or_else(|| panic!("no lifetime said for {name}:\n{r}"))
            .to_owned()
    };
    println!("{}\n{}", said("apiserver.crt"), said("etcd-server.crt"));
    assert_eq!(days("apiserver.crt"), 365, "{r}");
    assert!(
        said("apiserver.crt").contains("lifetime 365 days, kubeadm's"),
        "{r}"
    );
    assert_eq!(
        (r.stdout)
            .matches("kubeadm's: the old certificate was signed with its CA's notBefore, and it and its CA have kubeadm's names")
            .count(),
        1,
        "{r}"
    );
    // The script chose its lifetime: kept.
    assert_eq!(days("etcd-server.crt"), 1105, "{r}");
    assert!(
        said("etcd-server.crt").contains("lifetime 1105 days, the old certificate's"),
        "{r}"
    );
}

/// kops' etcd-manager keeps its CAs (with their keys) and the certificates it issues under
/// /etc/kubernetes/pki/etcd-manager-main, inside kubeadm's watched directory: they are its,
/// renewed by its own rules. Listed and said to be its, never renewed here, even due; due
/// and still not renewed, reported as one this node cannot renew.
#[test]
fn etcd_managers_certificates_are_listed_as_its_and_left_alone() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    config(&tree, FIXTURE_LIFETIME, &layout_watches(&tree));
    let dir = tree.abs("etc/kubernetes/pki/etcd-manager-main");
    fs::create_dir_all(&dir).unwrap();
    // Its clients CA, and a client certificate issued 355 days ago for a year: due.
    sh(
        &dir,
        "k='-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes'\n\
         openssl req -x509 $k -keyout etcd-clients-ca.key -out etcd-clients-ca.crt -days 3650 -subj /CN=etcd-clients-ca 2>/dev/null\n\
         openssl req -new $k -keyout client.key -out client.csr -subj /CN=etcd-client 2>/dev/null\n\
         printf 'extendedKeyUsage=clientAuth\\n' >ext\n\
         faketime -f -355d openssl x509 -req -in client.csr -CA etcd-clients-ca.crt -CAkey etcd-clients-ca.key \
         -CAcreateserial -days 365 -extfile ext -out client.crt 2>/dev/null\n\
         rm client.csr ext",
    );
    let (ca, leaf) = (dir.join("etcd-clients-ca.crt"), dir.join("client.crt"));
    let leaf_before = fs::read(&leaf).unwrap();
    let doc = tree.check_json();
    let managed = "managed by kops' etcd-manager (etcd-manager-main, etcd-manager-events): certrenewd neither renews it nor restarts what uses it";
    let l = cert_entry(&doc, &leaf);
    assert_eq!(l["status"], "unrenewable", "{l:#}");
    assert_eq!(reason(l), managed, "{l:#}");
    let c = cert_entry(&doc, &ca);
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(reason(c), managed, "{c:#}");

    let r = tree.run(&["renew", "--no-restart"]);
    assert!(
        r.stderr.contains(&format!(
            "{}: cannot be renewed on this host: {managed}",
            leaf.display()
        )),
        "{r}"
    );
    assert_eq!(fs::read(&leaf).unwrap(), leaf_before, "left alone");
    // Said, not failed on: its manager's to renew, loudly reported while it is not.
    expect_code(&r, 0);
    let raised = alarms(&tree);
    eprintln!("alarms: {raised:?}");
    assert!(
        raised
            .iter()
            .any(|a| a["id"] == "500.200" && reason(a).contains("managed by kops' etcd-manager")),
        "{raised:?}"
    );
    // Forced by its path, it is refused with why.
    let r = tree.run(&["renew", "--no-restart", "--force", path_str(&leaf)]);
    assert!(r.stderr.contains(managed), "{r}");
    assert_eq!(fs::read(&leaf).unwrap(), leaf_before, "left alone");
}
