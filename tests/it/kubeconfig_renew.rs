//! kubeconfig client certificates: the kubeadm tree of `tests/fixtures/mkpki.sh` (its
//! admin/super-admin/controller-manager/scheduler.conf as kubeadm writes them) plus a
//! hand-extended kubeconfig with several clusters, users and contexts, comments and an
//! openssl-made client certificate, and a kubelet.conf naming an external certificate file.
//!
//! After `renew`, only the `client-certificate-data` lines of due users changed (and
//! `client-key-data` with rotate_keys), the new certificates verify with the CA under
//! openssl, and `kubectl config view --raw` still reads the same clusters and contexts.

use crate::common;

use common::{pki, table};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use pki::{Scratch, Tree, openssl, path_str, toml_str};
use serde_json::Value;

const LAYOUTS: &[&str] = &["kubeadm"];
const KUBEADM_CONFS: &[&str] = &["admin", "super-admin", "controller-manager", "scheduler"];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim().trim_matches('"'))
        .expect("base64")
}

/// A client certificate made by openssl, signed by `ca`: (cert PEM, PKCS#1 key PEM).
fn client_cert(dir: &Path, name: &str, subj: &str, ca: &Path, days: u32) -> (Vec<u8>, Vec<u8>) {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let crt = dir.join(format!("{name}.crt"));
    let ext = dir.join(format!("{name}.ext"));
    fs::write(
        &ext,
        "keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth\nbasicConstraints = critical, CA:FALSE\nauthorityKeyIdentifier = keyid\n",
    )
    .unwrap();
    openssl(&["genrsa", "-traditional", "-out", path_str(&key), "2048"]);
    openssl(&[
        "req",
        "-new",
        "-key",
        path_str(&key),
        "-subj",
        subj,
        "-out",
        path_str(&csr),
    ]);
    let ca_key = ca.with_extension("key");
    openssl(&[
        "x509",
        "-req",
        "-in",
        path_str(&csr),
        "-CA",
        path_str(ca),
        "-CAkey",
        path_str(&ca_key),
        "-set_serial",
        "0x5eed",
        "-days",
        &days.to_string(),
        "-extfile",
        path_str(&ext),
        "-out",
        path_str(&crt),
    ]);
    (fs::read(&crt).unwrap(), fs::read(&key).unwrap())
}

struct Setup {
    tree: Tree,
    pki: PathBuf,
    confs: Vec<PathBuf>,
    multi: PathBuf,
    kubelet_conf: PathBuf,
    kubelet_pem: PathBuf,
    _scratch: tempfile::TempDir,
}

/// The kubeadm tree, the extra kubeconfigs and a config watching them all.
fn setup(extra: &str) -> Setup {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let etc = tree.abs("etc/kubernetes");
    let pki = etc.join("pki");
    let scratch = tempfile::tempdir().unwrap();
    let ca = pki.join("ca.crt");
    let (admin_crt, admin_key) = client_cert(
        scratch.path(),
        "ops-admin",
        "/O=kubeadm:cluster-admins/CN=ops-admin",
        &ca,
        10,
    );
    let ca_pem = fs::read(&ca).unwrap();
    let front_proxy_pem = fs::read(pki.join("front-proxy-ca.crt")).unwrap();

    // kubelet.conf names its certificate (and key) in another file, as kubeadm writes it.
    let kubelet_dir = tree.abs("var/lib/kubelet/pki");
    fs::create_dir_all(&kubelet_dir).unwrap();
    let (k_crt, k_key) = client_cert(
        scratch.path(),
        "kubelet",
        "/O=system:nodes/CN=system:node:controller-0",
        &ca,
        365,
    );
    let kubelet_pem = kubelet_dir.join("kubelet-client-current.pem");
    fs::write(&kubelet_pem, [k_crt, k_key].concat()).unwrap();
    fs::set_permissions(&kubelet_pem, fs::Permissions::from_mode(0o600)).unwrap();
    let kubelet_conf = etc.join("kubelet.conf");
    fs::write(
        &kubelet_conf,
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://127.0.206.2:6443\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: system:node:controller-0\n  name: system:node:controller-0@kubernetes\ncurrent-context: system:node:controller-0@kubernetes\nkind: Config\npreferences: {{}}\nusers:\n- name: system:node:controller-0\n  user:\n    client-certificate: {p}\n    client-key: {p}\n",
            b64(&ca_pem),
            p = kubelet_pem.display()
        ),
    )
    .unwrap();

    // Several clusters, users and contexts, comments, an indented sequence, a quoted value.
    let multi = etc.join("multi.conf");
    let text = format!(
        r#"# Hand-extended kubeconfig: kubeadm's cluster plus an other one.
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: https://127.0.206.2:6443
  name: kubernetes
- cluster:
    # not this cluster's client CA, only a second entry
    certificate-authority-data: {fp}
    server: https://127.0.30.40:6443
    tls-server-name: other.example
  name: other
contexts:
  - context:
      cluster: kubernetes
      user: ops-admin
    name: ops-admin@kubernetes
  - context:
      cluster: other
      namespace: kube-system
      user: robot
    name: robot@other
  - context:
      cluster: kubernetes
      user: kubelet
    name: kubelet@kubernetes
current-context: ops-admin@kubernetes   # the default
kind: Config
preferences: {{}}
users:
- name: ops-admin
  user:
    client-certificate-data: "{crt}"
    client-key-data: {key}
- name: robot    # a token, left alone
  user:
    token: abcdef.0123456789abcdef
- name: kubelet
  user:
    client-certificate: {kp}
    client-key: {kp}
"#,
        ca = b64(&ca_pem),
        fp = b64(&front_proxy_pem),
        crt = b64(&admin_crt),
        key = b64(&admin_key),
        kp = kubelet_pem.display(),
    );
    fs::write(&multi, text).unwrap();
    fs::set_permissions(&multi, fs::Permissions::from_mode(0o600)).unwrap();

    let mut confs: Vec<PathBuf> = KUBEADM_CONFS
        .iter()
        .map(|n| etc.join(format!("{n}.conf")))
        .collect();
    confs.push(multi.clone());
    let list: Vec<String> = confs
        .iter()
        .chain([&kubelet_conf])
        .map(|p| toml_str(p))
        .collect();
    fs::write(
        &tree.config,
        format!(
            "state_dir = {}\nvalidity_days = 365\n{extra}\n[[watch]]\npath = {}\nunits = []\nkubeconfigs = [{}]\n",
            toml_str(&tree.state),
            toml_str(&pki),
            list.join(", ")
        ),
    )
    .unwrap();
    Setup {
        tree,
        pki,
        confs,
        multi,
        kubelet_conf,
        kubelet_pem,
        _scratch: scratch,
    }
}

/// Where `kubectl` may dial while it only reads a kubeconfig: a loopback port where nothing
/// listens. A version-picking `kubectl` (a wrapper that runs the client matching the server)
/// asks the server for its version even for `config view`; `--server` sends that question
/// here instead of to the kubeconfig's server, and leaves what `config view` prints alone.
const NO_SERVER: &str = "--server=https://127.0.0.1:1";

/// `kubectl --kubeconfig F config view --raw -o json`, parsed, with no other kubeconfig read.
fn kubectl_view(file: &Path) -> Value {
    let out = Command::new("kubectl")
        .args([
            "--kubeconfig",
            path_str(file),
            NO_SERVER,
            "config",
            "view",
            "--raw",
            "-o",
            "json",
        ])
        .env("HOME", "/nonexistent")
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .expect("kubectl is needed (Debian: apt-get install kubernetes-client)");
    assert!(
        out.status.success(),
        "kubectl config view {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kubectl JSON")
}

/// The value of `key:` on a line, if the line is that key.
fn value_of<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.trim_start()
        .strip_prefix(key)?
        .strip_prefix(':')
        .map(str::trim)
}

/// The lines that differ, as (key, old value, new value); panics if anything else differs.
fn changed_lines(file: &Path, before: &str, after: &str) -> Vec<(String, String, String)> {
    let (b, a): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    assert_eq!(b.len(), a.len(), "{}: line count changed", file.display());
    assert_eq!(
        before.ends_with('\n'),
        after.ends_with('\n'),
        "{}: final newline",
        file.display()
    );
    let mut out = Vec::new();
    for (old, new) in b.iter().zip(&a) {
        if old == new {
            continue;
        }
        let (k_old, v_old) = old.split_once(": ").expect("a key: value line");
        let (k_new, v_new) = new.split_once(": ").expect("a key: value line");
        assert_eq!(
            k_old,
            k_new,
            "{}: a key or its indentation changed",
            file.display()
        );
        out.push((
            k_old.trim().to_string(),
            v_old.to_string(),
            v_new.to_string(),
        ));
    }
    out
}

/// The `check --output json` entries of kubeconfig certificates, by (file name, user).
fn kubeconfig_entries(check: &Value) -> Vec<(String, String, Value)> {
    check["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["kubeconfig"].is_null())
        .map(|c| {
            let file = Path::new(c["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (
                file,
                c["kubeconfig"]["user"].as_str().unwrap().to_string(),
                c.clone(),
            )
        })
        .collect()
}

fn status_of(entries: &[(String, String, Value)], file: &str, user: &str) -> String {
    entries
        .iter()
        .find(|(f, u, _)| f == file && u == user)
        .unwrap_or_else(|| panic!("no check entry for {file} user {user}: {entries:?}"))
        .2["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn check_lists_kubeconfig_certificates_like_check_expiration() {
    let s = setup("");
    let doc = s.tree.check_json();
    let entries = kubeconfig_entries(&doc);
    let got: Vec<(String, String, String)> = entries
        .iter()
        .map(|(f, u, c)| (f.clone(), u.clone(), c["status"].as_str().unwrap().into()))
        .collect();
    let want: Vec<(String, String, String)> = [
        ("admin.conf", "kubernetes-admin", "due"),
        ("super-admin.conf", "kubernetes-super-admin", "ok"),
        (
            "controller-manager.conf",
            "system:kube-controller-manager",
            "due",
        ),
        ("scheduler.conf", "system:kube-scheduler", "due"),
        ("multi.conf", "ops-admin", "due"),
        ("multi.conf", "kubelet", "ok"),
        ("kubelet.conf", "system:node:controller-0", "ok"),
    ]
    .iter()
    .map(|(f, u, st)| (f.to_string(), u.to_string(), st.to_string()))
    .collect();
    let mut sorted_got = got.clone();
    sorted_got.sort();
    let mut sorted_want = want.clone();
    sorted_want.sort();
    assert_eq!(sorted_got, sorted_want);

    let ca = s.pki.join("ca.crt");
    for (file, user, c) in &entries {
        assert_eq!(c["ca_path"].as_str(), Some(path_str(&ca)), "{file} {user}");
        assert!(!c["is_ca"].as_bool().unwrap());
        let embedded = c["kubeconfig"]["embedded"].as_bool().unwrap();
        if embedded {
            // The key is in the kubeconfig itself.
            assert_eq!(c["key_path"], c["path"], "{file} {user}");
            assert!(c["kubeconfig"]["client_certificate"].is_null());
        } else {
            assert_eq!(
                c["kubeconfig"]["client_certificate"].as_str(),
                Some(path_str(&s.kubelet_pem)),
                "{file} {user}"
            );
        }
    }
    // Certificate files carry no kubeconfig key (nor static_pods, none configured).
    for c in doc["certificates"].as_array().unwrap() {
        let obj = c.as_object().unwrap();
        assert_eq!(
            obj.contains_key("kubeconfig"),
            c["path"].as_str().unwrap().ends_with(".conf"),
            "{c}"
        );
        assert!(!obj.contains_key("static_pods"), "{c}");
    }
    assert!(
        doc["skipped"].as_array().unwrap().is_empty(),
        "{}",
        doc["skipped"]
    );

    // The table names the file, as kubeadm certs check-expiration does, under the directory
    // of the kubeconfig, and the user where the file holds several; the file a user names
    // on a line below.
    let table = s.tree.run(&["check"]);
    assert_eq!(table.code, 0, "{table}");
    let rows = table::rows(&table.stdout);
    let row = |conf: &Path, user: Option<&str>| {
        let named = |cell: &str| match user {
            Some(user) => cell.ends_with(&format!(" (user {user})")),
            None => !cell.contains("(user "),
        };
        rows.iter()
            .find(|r| r.path == path_str(conf) && named(&r.cells[0]))
            .unwrap_or_else(|| panic!("no row for {} user {user:?}:\n{table}", conf.display()))
    };
    assert_eq!(row(&s.multi, Some("ops-admin")).status(), "due", "{table}");
    let kubelet = row(&s.kubelet_conf, None);
    assert!(
        kubelet.note.contains(&format!(
            "client-certificate: {} (kubelet rotates it",
            s.kubelet_pem.display()
        )),
        "{table}"
    );
}

fn renew_and_verify(rotate: bool) {
    let s = setup(if rotate { "rotate_keys = true" } else { "" });
    let scratch = Scratch::new();
    let read = |p: &Path| fs::read_to_string(p).unwrap();
    let before: Vec<String> = s.confs.iter().map(|p| read(p)).collect();
    let views: Vec<Value> = s.confs.iter().map(|p| kubectl_view(p)).collect();
    let kubelet_before = (read(&s.kubelet_conf), fs::read(&s.kubelet_pem).unwrap());
    let modes: Vec<u32> = s
        .confs
        .iter()
        .map(|p| fs::metadata(p).unwrap().permissions().mode())
        .collect();

    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 0, "{r}");
    for who in [
        "admin.conf (user kubernetes-admin)",
        "multi.conf (user ops-admin)",
        "scheduler.conf (user system:kube-scheduler)",
    ] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("renewed") && l.contains(who)),
            "{who}: {r}"
        );
    }

    let ca = s.pki.join("ca.crt");
    for (i, conf) in s.confs.iter().enumerate() {
        let name = conf.file_name().unwrap().to_string_lossy().into_owned();
        let after = read(conf);
        let changed = changed_lines(conf, &before[i], &after);
        let keys: Vec<&str> = changed.iter().map(|(k, _, _)| k.as_str()).collect();
        let due = name != "super-admin.conf";
        let want: &[&str] = match (due, rotate) {
            (false, _) => &[],
            (true, false) => &["client-certificate-data"],
            (true, true) => &["client-certificate-data", "client-key-data"],
        };
        assert_eq!(keys, want, "{name}: changed lines");
        assert_eq!(
            fs::metadata(conf).unwrap().permissions().mode(),
            modes[i],
            "{name}: mode"
        );
        if !due {
            continue;
        }
        // The quoted value of multi.conf stays quoted.
        let (_, old_v, new_v) = &changed[0];
        assert_eq!(old_v.starts_with('"'), new_v.starts_with('"'), "{name}");

        // The new certificate verifies with the CA; same subject; a year left; its key.
        let user_line = |key: &str| {
            after
                .lines()
                .find_map(|l| value_of(l, key))
                .map(unb64)
                .unwrap()
        };
        let new_cert = user_line("client-certificate-data");
        let key = user_line("client-key-data");
        let cert_file = scratch.file("new.crt", &new_cert);
        let out = openssl(&["verify", "-CAfile", path_str(&ca), path_str(&cert_file)]);
        assert!(out.contains(": OK"), "{name}: {out}");
        let old_cert = before[i]
            .lines()
            .find_map(|l| value_of(l, "client-certificate-data"))
            .map(unb64)
            .unwrap();
        let subject = |pem: &[u8]| {
            let f = scratch.file("s.crt", pem);
            openssl(&[
                "x509",
                "-in",
                path_str(&f),
                "-noout",
                "-subject",
                "-nameopt",
                "RFC2253",
            ])
        };
        assert_eq!(subject(&new_cert), subject(&old_cert), "{name}");
        let checkend = openssl(&[
            "x509",
            "-in",
            path_str(&cert_file),
            "-noout",
            "-checkend",
            &(300 * 86_400).to_string(),
        ]);
        assert!(checkend.contains("will not expire"), "{name}: {checkend}");
        assert_eq!(
            scratch.cert_pubkey(&new_cert),
            scratch.key_pubkey(&key),
            "{name}: certificate and key"
        );
        if rotate {
            assert_ne!(
                scratch.cert_pubkey(&new_cert),
                scratch.cert_pubkey(&old_cert)
            );
        }

        // kubectl reads the same clusters and contexts; users differ only in the renewed data.
        let view = kubectl_view(conf);
        assert_eq!(view["clusters"], views[i]["clusters"], "{name}");
        assert_eq!(view["contexts"], views[i]["contexts"], "{name}");
        assert_eq!(
            view["current-context"], views[i]["current-context"],
            "{name}"
        );
        let users = view["users"].as_array().unwrap();
        let old_users = views[i]["users"].as_array().unwrap();
        assert_eq!(users.len(), old_users.len());
        for (u, o) in users.iter().zip(old_users) {
            assert_eq!(u["name"], o["name"]);
            let mut u = u.clone();
            let mut o = o.clone();
            let renewed =
                u["user"]["client-certificate-data"] != o["user"]["client-certificate-data"];
            for v in [&mut u, &mut o] {
                if renewed {
                    v["user"]["client-certificate-data"] = Value::Null;
                    if rotate {
                        v["user"]["client-key-data"] = Value::Null;
                    }
                }
            }
            assert_eq!(
                u, o,
                "{name}: user {} changed beyond its certificate",
                o["name"]
            );
        }

        // The previous file is in the backup set, byte for byte.
        let sets: Vec<PathBuf> = fs::read_dir(s.tree.state.join("backup"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(sets.len(), 1);
        let backup = sets[0].join(conf.strip_prefix("/").unwrap());
        assert_eq!(read(&backup), before[i], "{name}: backup");
    }
    // The external certificate and the kubeconfig naming it are not touched.
    assert_eq!(read(&s.kubelet_conf), kubelet_before.0);
    assert_eq!(fs::read(&s.kubelet_pem).unwrap(), kubelet_before.1);
    assert!(!s.tree.state.join("pending.json").exists());

    // Everything is ok now; a second pass renews nothing.
    let entries = kubeconfig_entries(&s.tree.check_json());
    for (f, u, c) in &entries {
        assert_eq!(c["status"], "ok", "{f} {u}");
    }
    assert_eq!(status_of(&entries, "multi.conf", "ops-admin"), "ok");
    let again = s.tree.run(&["renew"]);
    assert_eq!(again.code, 0, "{again}");
    assert!(!again.stdout.contains("renewed"), "{again}");
}

#[test]
fn renew_rewrites_only_the_client_certificate_data() {
    renew_and_verify(false);
}

#[test]
fn renew_with_rotate_keys_rewrites_certificate_and_key_data() {
    renew_and_verify(true);
}

#[test]
fn an_external_certificate_is_reported_never_rewritten() {
    let s = setup("");
    let before = (
        fs::read(&s.kubelet_conf).unwrap(),
        fs::read(&s.kubelet_pem).unwrap(),
    );
    let conf = path_str(&s.kubelet_conf);
    let plan = s.tree.run(&["renew", "--dry-run", "--force", conf]);
    assert_eq!(plan.code, 1, "the pass would fail: {plan}");
    assert!(
        plan.stdout.contains(&format!(
            "would fail    {conf} (user system:node:controller-0)"
        )) && plan.stdout.contains("external file")
            && plan.stdout.contains("does not rewrite it"),
        "{plan}"
    );
    let r = s.tree.run(&["renew", "--force", conf]);
    assert_eq!(r.code, plan.code, "the dry run exits as the pass: {r}");
    assert!(!r.stdout.contains("renewed"), "{r}");
    assert_eq!(fs::read(&s.kubelet_conf).unwrap(), before.0);
    assert_eq!(fs::read(&s.kubelet_pem).unwrap(), before.1);
}

#[test]
fn a_kubeconfig_that_is_not_understood_is_an_error_and_left_alone() {
    let s = setup("");
    let admin = s.confs[0].clone();
    let mut text = fs::read_to_string(&admin).unwrap();
    // kubectl reads only the first document; certrenewd reads none of them.
    text.push_str("---\nkind: Config\n");
    fs::write(&admin, &text).unwrap();
    let doc = s.tree.check_json();
    let errors = doc["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|k| k["path"] == path_str(&admin)
            && k["reason"].as_str().unwrap().contains("not understood")
            && k["reason"]
                .as_str()
                .unwrap()
                .contains("several YAML documents")),
        "{errors:?}"
    );
    // Its certificates are out of sight: the pass fails (and alarms), the file is untouched.
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout
            .contains(&format!("FAILED        {}", admin.display())),
        "{r}"
    );
    assert_eq!(fs::read_to_string(&admin).unwrap(), text);
}

/// An anchor was "not understood" by the line-oriented reader; it is read now.
#[test]
fn a_kubeconfig_with_an_anchor_is_read_and_renewed() {
    let s = setup("");
    let admin = s.confs[0].clone();
    let mut text = fs::read_to_string(&admin).unwrap();
    text.push_str("extensions: &ext\n  - name: x\n");
    fs::write(&admin, &text).unwrap();
    let doc = s.tree.check_json();
    assert!(
        doc["skipped"].as_array().unwrap().is_empty(),
        "{}",
        doc["skipped"]
    );
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stdout.contains("admin.conf (user kubernetes-admin)"),
        "{r}"
    );
    let after = fs::read_to_string(&admin).unwrap();
    let changed = changed_lines(&admin, &text, &after);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].0, "client-certificate-data");
    assert!(after.ends_with("extensions: &ext\n  - name: x\n"));
}

/// `kubectl config` writes a kubeconfig; a person then adds a comment in another script, an
/// anchored user another user aliases, flow style and a literal block value. The aliased
/// certificate is listed and never rewritten; the literal block's value is replaced where
/// it stands and every other byte stays.
#[test]
fn a_kubectl_made_kubeconfig_edited_by_hand_is_renewed_byte_for_byte() {
    let s = setup("");
    let conf = s.confs[1].clone(); // super-admin.conf, listed in the config
    let scratch = tempfile::tempdir().unwrap();
    let ca = s.pki.join("ca.crt");
    let (ops_crt, ops_key) = client_cert(scratch.path(), "ops", "/CN=ops", &ca, 10);
    let (lit_crt, lit_key) = client_cert(scratch.path(), "lit", "/CN=lit", &ca, 10);
    let file = |name: &str, bytes: &[u8]| {
        let p = scratch.path().join(name);
        fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let (ops_crt, ops_key) = (file("o.crt", &ops_crt), file("o.key", &ops_key));
    let (lit_crt_f, lit_key_f) = (file("l.crt", &lit_crt), file("l.key", &lit_key));
    fs::remove_file(&conf).unwrap();
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(["config", "--kubeconfig", path_str(&conf)])
            .args(args)
            .env("HOME", "/nonexistent")
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("kubectl is needed (Debian: apt-get install kubernetes-client)");
        assert!(out.status.success(), "kubectl {args:?}: {out:?}");
    };
    kubectl(&[
        "set-cluster",
        "kubernetes",
        "--server=https://127.0.206.2:6443",
        &format!("--certificate-authority={}", ca.display()),
        "--embed-certs",
    ]);
    for (user, crt, key) in [("ops", &ops_crt, &ops_key), ("lit", &lit_crt_f, &lit_key_f)] {
        kubectl(&[
            "set-credentials",
            user,
            &format!("--client-certificate={crt}"),
            &format!("--client-key={key}"),
            "--embed-certs",
        ]);
        kubectl(&[
            "set-context",
            &format!("{user}@kubernetes"),
            "--cluster=kubernetes",
            &format!("--user={user}"),
        ]);
    }
    let made = fs::read_to_string(&conf).unwrap();
    let lit_b64 = b64(&lit_crt);
    let lines: Vec<&str> = lit_b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let block = format!("|\n      {}\n", lines.join("\n      "));
    let edited = format!("# Zugangsdaten für den Betrieb — «ops» ✓\n{made}")
        .replace("- name: ops\n  user:\n", "- name: ops\n  user: &ops\n")
        .replace(
            &format!("client-certificate-data: {lit_b64}\n"),
            &format!("client-certificate-data: {block}"),
        )
        + "- {name: ops-again, user: *ops}\nextensions: [{name: x, extension: {k: v}}]\n";
    assert!(
        edited.contains("&ops") && edited.contains(&block),
        "{edited}"
    );
    fs::write(&conf, &edited).unwrap();
    let view = kubectl_view(&conf);
    assert_eq!(view["users"].as_array().unwrap().len(), 3, "{view}");

    let entries = kubeconfig_entries(&s.tree.check_json());
    for user in ["ops", "ops-again"] {
        let c = &entries
            .iter()
            .find(|(f, u, _)| f == "super-admin.conf" && u == user)
            .unwrap_or_else(|| panic!("{user} listed: {entries:?}"))
            .2;
        assert_eq!(c["status"], "unrenewable", "{c}");
        let reason = c["reason"].as_str().unwrap();
        assert!(
            reason.contains("YAML alias")
                && reason.contains(path_str(&conf))
                && reason.contains("by hand"),
            "{reason}"
        );
        assert!(c["not_after"].is_string(), "{c}");
    }
    assert_eq!(status_of(&entries, "super-admin.conf", "lit"), "due");

    let r = s.tree.run(&["renew"]);
    assert!(r.stdout.contains("super-admin.conf (user lit)"), "{r}");
    assert!(
        r.stdout.contains("(user ops)") && r.stdout.contains("by hand"),
        "{r}"
    );
    let after = fs::read_to_string(&conf).unwrap();
    // Only the literal block's lines changed, to one line of new base64 in the block.
    let start = edited.find(lines[0]).unwrap();
    let end = start + block.len() - "|\n      ".len() - 1;
    assert_eq!(after[..start], edited[..start]);
    let new_len = after.len() - (edited.len() - end);
    assert_eq!(after[new_len..], edited[end..]);
    let new_value = &after[start..new_len];
    assert!(!new_value.contains(char::is_whitespace), "{new_value:?}");
    let new_cert = unb64(new_value);
    let f = scratch.path().join("new.crt");
    fs::write(&f, &new_cert).unwrap();
    openssl(&["verify", "-CAfile", path_str(&ca), path_str(&f)]);
    // kubectl reads the same file but for lit's certificate.
    let new_view = kubectl_view(&conf);
    assert_eq!(new_view["clusters"], view["clusters"]);
    assert_eq!(new_view["contexts"], view["contexts"]);
    for i in 0..3 {
        let (old, new) = (&view["users"][i], &new_view["users"][i]);
        if old["name"] == "lit" {
            assert_ne!(new, old);
            assert_eq!(
                new["user"]["client-key-data"],
                old["user"]["client-key-data"]
            );
        } else {
            assert_eq!(new, old, "the aliased users are not touched");
        }
    }
}

#[test]
fn a_listed_kubeconfig_that_is_missing_is_an_error_of_check() {
    let s = setup("");
    fs::remove_file(&s.confs[1]).unwrap();
    let doc = s.tree.check_json();
    let errors = doc["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["path"] == path_str(&s.confs[1])),
        "{errors:?}"
    );
}

/// Every kubeconfig is the original or differs from it only in its users' certificate
/// lines, and what it holds parses and verifies with the CA.
fn old_or_renewed(s: &Setup, originals: &[String], scratch: &Scratch) {
    for (conf, orig) in s.confs.iter().zip(originals) {
        let now = fs::read_to_string(conf).unwrap();
        for (key, _, new) in changed_lines(conf, orig, &now) {
            assert_eq!(key, "client-certificate-data", "{}", conf.display());
            let f = scratch.file("c.crt", &unb64(&new));
            let ca = s.pki.join("ca.crt");
            openssl(&["verify", "-CAfile", path_str(&ca), path_str(&f)]);
        }
    }
}

#[test]
fn a_renewal_killed_at_any_moment_leaves_each_kubeconfig_old_or_new() {
    let scratch = Scratch::new();
    // How long an uninterrupted run takes.
    let s = setup("");
    let started = std::time::Instant::now();
    let r = s.tree.run(&["renew", "--no-restart"]);
    assert_eq!(r.code, 0, "{r}");
    let baseline = started.elapsed();
    const ROUNDS: u32 = 6;
    for round in 0..ROUNDS {
        let s = setup("");
        let originals: Vec<String> = s
            .confs
            .iter()
            .map(|p| fs::read_to_string(p).unwrap())
            .collect();
        let mut child = Command::new(pki::BIN)
            .arg("--config")
            .arg(&s.tree.config)
            .args(["renew", "--no-restart"])
            .env_remove("CERTRENEWD_CONFIG")
            .env(
                "CERTRENEWD_JOURNAL_SOCKET",
                "/nonexistent/certrenewd-test/journal.socket",
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(baseline * round / ROUNDS);
        let _ = child.kill();
        child.wait().unwrap();
        old_or_renewed(&s, &originals, &scratch);
        // Only hidden temp files of ours may be left, and only ones the pending record names.
        for e in fs::read_dir(s.tree.abs("etc/kubernetes")).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with('.') || name.ends_with(".certrenewd-tmp"),
                "round {round}: {name}"
            );
        }
        // One normal run finishes the job.
        let r = s.tree.run(&["renew", "--no-restart"]);
        assert_eq!(r.code, 0, "round {round}: {r}");
        old_or_renewed(&s, &originals, &scratch);
        for (conf, orig) in s.confs.iter().zip(&originals) {
            let due = !conf.ends_with("super-admin.conf");
            let now = fs::read_to_string(conf).unwrap();
            assert_eq!(
                changed_lines(conf, orig, &now).len(),
                usize::from(due),
                "round {round}: {}",
                conf.display()
            );
            kubectl_view(conf);
        }
        let leftovers: Vec<String> = fs::read_dir(s.tree.abs("etc/kubernetes"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "round {round}: {leftovers:?}");
        assert!(!s.tree.state.join("pending.json").exists());
    }
}

/// Everything now, as `kubeadm certs renew all`: `renew --force --all` renews every
/// leaf certificate (files and kubeconfig users), due or not, and leaves the CAs and the
/// certificate kubelet renews itself (kubelet.conf names an external file) alone. Its dry run
/// names the same certificates; `--force` alone points at `--all`.
#[test]
fn renew_force_all_renews_every_leaf_now() {
    let s = setup("");
    let run = s.tree.run(&["renew", "--force"]);
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr
            .contains("or --all to renew every leaf certificate now"),
        "{run}"
    );
    assert_eq!(
        s.tree.run(&["renew", "--all"]).code,
        2,
        "--all needs --force"
    );

    // Every leaf check lists, by (path, kubeconfig user), but those a kubeconfig names by
    // path (kubelet's own, in kubelet.conf and multi.conf).
    let check = s.tree.run(&["check", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    let id = |c: &serde_json::Value, user: &serde_json::Value| {
        (
            c["path"].as_str().unwrap().to_string(),
            user.as_str().map(String::from),
        )
    };
    let mut leaves: Vec<(String, Option<String>)> = doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["is_ca"] == false && c["kubeconfig"]["embedded"] != false)
        .map(|c| id(c, &c["kubeconfig"]["user"]))
        .collect();
    leaves.sort();
    let not_due = doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["is_ca"] == false && c["status"] == "ok")
        .count();
    assert!(not_due > 0, "the tree has leaves not due: {}", check.stdout);
    let delegated = doc["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kubeconfig"]["embedded"] == false)
        .count();
    assert_eq!(
        delegated, 2,
        "kubelet.conf and multi.conf's kubelet: {}",
        check.stdout
    );
    let listed = |run: &pki::Run, state: &str| {
        assert_eq!(run.code, 0, "{run}");
        let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let mut got: Vec<(String, Option<String>)> = v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|c| assert_eq!(c["state"], state, "{c}"))
            .map(|c| id(c, &c["user"]))
            .collect();
        got.sort();
        got
    };
    let cas: Vec<(PathBuf, Vec<u8>)> = ["ca.crt", "etcd/ca.crt", "front-proxy-ca.crt"]
        .iter()
        .map(|c| (s.pki.join(c), fs::read(s.pki.join(c)).unwrap()))
        .collect();
    let kubelet_before = (
        fs::read(&s.kubelet_conf).unwrap(),
        fs::read(&s.kubelet_pem).unwrap(),
    );

    let all = [
        "renew",
        "--force",
        "--all",
        "--no-restart",
        "--output",
        "json",
    ];
    let dry = s.tree.run(&[&all[..], &["--dry-run"]].concat());
    assert_eq!(listed(&dry, "would_renew"), leaves, "{dry}");
    let real = s.tree.run(&all);
    assert_eq!(listed(&real, "renewed"), leaves, "{real}");
    for (path, before) in &cas {
        assert_eq!(
            &fs::read(path).unwrap(),
            before,
            "{} changed",
            path.display()
        );
    }
    assert_eq!(fs::read(&s.kubelet_conf).unwrap(), kubelet_before.0);
    assert_eq!(fs::read(&s.kubelet_pem).unwrap(), kubelet_before.1);
    // Nothing is left due, not even what was due before.
    let after = s.tree.run(&["check", "--fail-due"]);
    assert_eq!(after.code, 0, "{after}");
}
