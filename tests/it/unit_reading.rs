//! What a unit runs, read from a real systemd user manager over D-Bus (the sandbox): its
//! `ExecStart`, `Environment` and `EnvironmentFile`s, as systemd has the unit loaded. A
//! watch's units are restarted for the files they read, as its static pods are: kubespray's
//! etcd (a bare `ExecStart=etcd`, every setting in `/etc/etcd.env`) only for its member pair
//! and CA. A unit whose settings cannot be followed (a program certrenewd does not know,
//! its certificate named in a config file of its own) is restarted for every renewal of
//! its watch, as the watch says.

use crate::common;

use std::fs;
use std::path::Path;

use common::e2e::mkpki;
use common::sandbox::Sandbox;

const BIN: &str = env!("CARGO_BIN_EXE_certrenewd");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kubespray");

/// kubespray's etcd certificate directory, with the files `mkpki.sh starlingx` made under
/// kubespray's names: `member-node1.pem` (due), `admin-node1.pem` (expired), the CA.
fn kubespray_ssl(tree: &Path, ssl: &Path) {
    fs::create_dir_all(ssl).unwrap();
    let etcd = tree.join("etc/etcd");
    for (from, to) in [
        ("ca.crt", "ca.pem"),
        ("ca.key", "ca-key.pem"),
        ("etcd-server.crt", "member-node1.pem"),
        ("etcd-server.key", "member-node1-key.pem"),
        ("etcd-client.crt", "admin-node1.pem"),
        ("etcd-client.key", "admin-node1-key.pem"),
    ] {
        fs::copy(etcd.join(from), ssl.join(to)).unwrap();
    }
}

/// kubespray's etcd files as it writes them under `dir`, their paths moved into it: the
/// certificate directory ([`kubespray_ssl`]) and `/etc/etcd.env`; its directory and the text
/// of its `etcd.service`, naming that environment file.
fn kubespray(dir: &Path) -> (std::path::PathBuf, String) {
    let tree = dir.join("pki");
    mkpki("starlingx", &tree);
    let ssl = dir.join("etc/ssl/etcd/ssl");
    kubespray_ssl(&tree, &ssl);
    let env = dir.join("etc/etcd.env");
    let text = fs::read_to_string(format!("{FIXTURES}/etcd.env")).unwrap();
    fs::write(
        &env,
        text.replace("/etc/ssl/etcd/ssl", ssl.to_str().unwrap()),
    )
    .unwrap();
    let unit = fs::read_to_string(format!("{FIXTURES}/etcd.service")).unwrap();
    (ssl, unit.replace("/etc/etcd.env", env.to_str().unwrap()))
}

/// certrenewd with `config` and `args`, inside the sandbox: exit code, stdout, stderr.
fn run_in(sb: &Sandbox, config: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend(args);
    let out = sb.exec(BIN, &all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The units in a `renew --output json` report, with their states.
fn units_of(report: &serde_json::Value) -> Vec<(String, String)> {
    (report["units"].as_array().unwrap().iter())
        .map(|u| {
            let s = |k: &str| u[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("state"))
        })
        .collect()
}

#[test]
fn kubesprays_etcd_is_read_over_dbus_and_restarted_for_its_own_files_only() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (ssl, unit) = kubespray(tmp.path());
    assert!(unit.contains("\nExecStart=/usr/local/bin/etcd\n"), "{unit}");
    sb.install_unit("etcd.service", &unit).unwrap();
    // A stand-in that reads its certificate from a config file of its own.
    let conf = tmp.path().join("standin.conf");
    fs::write(
        &conf,
        format!("cert = {}\n", ssl.join("admin-node1.pem").display()),
    )
    .unwrap();
    let standin = format!(
        "[Service]\nExecStart=/bin/sleep infinity\nEnvironment=STANDIN_CONFIG={}\n",
        conf.display()
    );
    sb.install_unit("standin.service", &standin).unwrap();
    sb.systemctl(["start", "standin.service"]).unwrap();
    let config = tmp.path().join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\n\n[[watch]]\npath = \"{}\"\nunits = [\"etcd.service\", \"standin.service\"]\non_renew = \"restart\"\n\n[coordination]\nenabled = false\n",
            tmp.path().join("state").display(),
            ssl.display()
        ),
    )
    .unwrap();
    let coordinated = fs::read_to_string(&config)
        .unwrap()
        .replace("\n[coordination]\nenabled = false\n", "\n");
    let run = |args: &[&str]| run_in(&sb, &config, args);

    // check names, per certificate, the units its renewal restarts.
    let (code, stdout, stderr) = run(&["check", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let units_for = |file: &str| -> Vec<String> {
        let path = ssl.join(file);
        let c = (check["certificates"].as_array().unwrap().iter())
            .find(|c| c["path"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("{file} not in check: {check}"));
        (c["units"].as_array().unwrap().iter())
            .map(|u| u.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        units_for("member-node1.pem"),
        ["etcd.service", "standin.service"]
    );
    assert_eq!(units_for("admin-node1.pem"), ["standin.service"]);
    // And why: what each unit runs and reads, and what a renewal calls for.
    let components = check["components"].as_array().unwrap();
    let etcd = components
        .iter()
        .find(|c| c["name"] == "etcd.service")
        .unwrap();
    assert_eq!(etcd["runs"], "unit", "{etcd}");
    assert_eq!(etcd["program"], "etcd", "{etcd}");
    assert_eq!(etcd["files_known"], true, "{etcd}");
    let reads: Vec<String> = ["ca.pem", "member-node1-key.pem", "member-node1.pem"]
        .iter()
        .map(|f| ssl.join(f).display().to_string())
        .collect();
    assert_eq!(etcd["reads"], serde_json::json!(reads), "{etcd}");
    assert_eq!(etcd["restarted_for"], "files", "{etcd}");
    assert_eq!(etcd["restart"], "restarted when a file it reads is renewed");
    let due = [ssl.join("member-node1.pem").display().to_string()];
    assert_eq!(etcd["due"], serde_json::json!(due), "{etcd}");
    let standin = components
        .iter()
        .find(|c| c["name"] == "standin.service")
        .unwrap();
    assert_eq!(standin["files_known"], false, "{standin}");
    assert_eq!(standin["restarted_for"], "watch", "{standin}");
    assert_eq!(
        standin["restart"],
        "restarted for every renewal of its watch: its ExecStart runs /bin/sleep, not a program certrenewd follows"
    );

    // The dry run and the pass say the same. etcd is not running here (no etcd binary):
    // try-restart passes it over, where it is restarted at all. One node: no coordination
    // (how kubespray's controllers agree is the coordination's own test).
    for (file, want) in [
        ("admin-node1.pem", &[("standin.service", "restarted")][..]),
        (
            "member-node1.pem",
            &[
                ("etcd.service", "not_restarted"),
                ("standin.service", "restarted"),
            ],
        ),
    ] {
        let path = ssl.join(file);
        let path = path.to_str().unwrap();
        let (code, stdout, stderr) = run(&["renew", "--dry-run", "--output", "json", path]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let dry: Vec<String> = units_of(&serde_json::from_str(&stdout).unwrap())
            .into_iter()
            .map(|(u, _)| u)
            .collect();
        let names: Vec<&str> = want.iter().map(|(u, _)| *u).collect();
        assert_eq!(dry, names, "dry run of {file}");
        // And why each: what it reads that the pass would renew, or why that is not known.
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        for u in report["units"].as_array().unwrap() {
            let why = match u["name"].as_str().unwrap() {
                "etcd.service" => format!("it reads {path}, which the pass would renew"),
                _ => "its watch has a certificate the pass would renew, and what it reads is not all known: its ExecStart runs /bin/sleep, not a program certrenewd follows".to_string(),
            };
            assert_eq!(u["reason"], why, "dry run of {file}: {u}");
        }
        let (code, stdout, stderr) = run(&["renew", "--output", "json", path]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let ran = units_of(&serde_json::from_str(&stdout).unwrap());
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(u, s)| (u.to_string(), s.to_string()))
            .collect();
        assert_eq!(ran, want, "renew {file}: {stdout}");
    }

    // A unit no watch names is read too: kubespray's etcd reads its member pair, so check
    // and the pass name it as a reader no watch restarts, and it is never restarted.
    fs::write(
        &config,
        fs::read_to_string(&config)
            .unwrap()
            .replace("units = [\"etcd.service\", ", "units = ["),
    )
    .unwrap();
    let member = ssl.join("member-node1.pem");
    let member = member.to_str().unwrap();
    let (code, stdout, stderr) = run(&["check", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let also = |report: &serde_json::Value| {
        (report["certificates"].as_array().unwrap().iter())
            .find(|c| c["path"] == member)
            .and_then(|c| c["also_read_by"].as_array().cloned())
            .unwrap_or_default()
    };
    assert_eq!(also(&check), [serde_json::json!("etcd.service")], "{check}");
    let etcd = (check["components"].as_array().unwrap().iter())
        .find(|c| c["name"] == "etcd.service")
        .unwrap_or_else(|| panic!("etcd.service not read: {check}"));
    assert_eq!(etcd["restarted_for"], "never", "{etcd}");
    let (code, stdout, stderr) = run(&["renew", "--force", "--output", "json", member]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let want = [("standin.service".to_string(), "restarted".to_string())];
    assert_eq!(units_of(&report), want, "{report}");
    assert_eq!(
        also(&report),
        [serde_json::json!("etcd.service")],
        "{report}"
    );
    let (_, stdout, _) = run(&["renew", "--force", member]);
    let line = format!("\nBY HAND       unit etcd.service: reads {member} (renewed), but no watch");
    assert!(stdout.contains(&line), "{stdout}");

    // Coordination on (the default `auto`). etcd's settings are in its environment file,
    // which only the unit's reading names: the member's name, its client URLs, and its
    // member pair, a client identity (clientAuth) when no other is found. Nothing answers
    // on those URLs here (no etcd runs), and check, the dry run and the pass say the same.
    let agree = |config_text: &str| -> (String, String) {
        fs::write(&config, config_text).unwrap();
        let (code, stdout, stderr) = run(&["check", "--output", "json"]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let outlook = &check["coordination"];
        let verdict = outlook["restarts"].as_str().unwrap().to_string();
        let cause = outlook["why"].as_str().unwrap().to_string();
        let held = verdict == "held";
        let dry = run(&["renew", "--force", "--dry-run", "--output", "json", member]);
        let ran = run(&["renew", "--force", "--output", "json", member]);
        for (what, (code, stdout, stderr)) in [("dry run", dry), ("renew", ran)] {
            assert_eq!(code, Some(i32::from(held)), "{what}: {stdout}\n{stderr}");
            let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            let units = report["units"].as_array().unwrap();
            assert_eq!(units.len(), 2, "{what}: {report}");
            for u in units {
                let reason = u["reason"].as_str().unwrap();
                match held {
                    true => assert!(
                        u["state"] == "held_back" && reason.contains(&cause),
                        "{what}: {u}\ncheck: {cause}"
                    ),
                    false => assert_ne!(u["state"], "held_back", "{what}: {u}\ncheck: {cause}"),
                }
            }
        }
        (verdict, cause)
    };
    // etcd's member list never recorded here: nobody answering says nothing of the cluster,
    // and check says held. A pass that owes this node's member a restart knows more: its
    // own member is down, so that start goes ahead without the lock and nothing after it;
    // the dry run says the same. A start without the lock starts only a unit that failed,
    // and this one is inactive (kept down, as far as anyone can tell): not started.
    fs::write(&config, &coordinated).unwrap();
    let (_, stdout, _) = run(&["check", "--output", "json"]);
    let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let outlook = &check["coordination"];
    assert_eq!(outlook["restarts"], "held", "{outlook}");
    let cause = outlook["why"].as_str().unwrap();
    assert!(
        cause.contains("member list was never recorded here"),
        "{cause}"
    );
    let dry = run(&["renew", "--force", "--dry-run", "--output", "json", member]);
    let ran = run(&["renew", "--force", "--output", "json", member]);
    for (what, (code, stdout, stderr), etcd) in [
        ("dry run", dry, "would_restart"),
        ("renew", ran, "held_back"),
    ] {
        assert_eq!(code, Some(1), "{what}: {stdout}\n{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let units = report["units"].as_array().unwrap();
        let state = |name: &str| {
            let u = (units.iter()).find(|u| u["name"] == name);
            let u = u.unwrap_or_else(|| panic!("{what}: no {name}: {report}"));
            (
                u["state"].clone(),
                u["reason"].as_str().unwrap_or("").to_string(),
            )
        };
        let (state_of_etcd, why) = state("etcd.service");
        assert_eq!(state_of_etcd, etcd, "{what}: {report}");
        if what == "renew" {
            assert!(why.contains("inactive (dead), not failed"), "{why}");
        }
        let (standin, why) = state("standin.service");
        assert_eq!(standin, "held_back", "{what}: {report}");
        assert!(
            why.contains("this node's own member is down"),
            "{what}: {why}"
        );
    }
    // On record, two members: every one refusing, the cluster is down.
    common::etcd_members_on_record(
        &tmp.path().join("state"),
        &[
            ("etcd1", "https://127.0.206.2:2379"),
            ("etcd2", "https://127.0.206.3:2379"),
        ],
    );
    let (verdict, cause) = agree(&coordinated);
    assert_eq!(verdict, "not coordinated", "{cause}");
    let asked = "https://127.0.206.2:2379, https://127.0.0.1:2379";
    assert!(
        cause.contains(asked) && cause.contains("the cluster is down"),
        "{cause}"
    );
    // An identity configured without a CA to check the members with: held, by all three,
    // for that cause.
    let unreadable = coordinated.replace(
        "\n[[watch]]",
        "\n[coordination]\ncert = \"/nonexistent/etcd-client.pem\"\nkey = \"/nonexistent/etcd-client-key.pem\"\n\n[[watch]]",
    );
    let (verdict, cause) = agree(&unreadable);
    assert_eq!(verdict, "held", "{cause}");
    assert!(
        cause.contains("has no etcd client certificate to coordinate with"),
        "{cause}"
    );
}

/// kubespray's etcd with a configuration that watches no `/etc/ssl/etcd/ssl` (the shipped
/// one watches `/etc/etcd`, where kubespray keeps nothing): the pair and CA its
/// `/etc/etcd.env` names are watched all the same, where they live, and renewed; another
/// host's pair beside them (kubespray copies every host's) is not this node's to renew.
#[test]
fn the_files_a_units_settings_name_are_watched_wherever_they_live() {
    let Some(sb) = Sandbox::start_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (ssl, unit) = kubespray(tmp.path());
    fs::copy(ssl.join("member-node1.pem"), ssl.join("member-node2.pem")).unwrap();
    fs::copy(
        ssl.join("member-node1-key.pem"),
        ssl.join("member-node2-key.pem"),
    )
    .unwrap();
    sb.install_unit("etcd.service", &unit).unwrap();
    let etc_etcd = tmp.path().join("etc/etcd");
    fs::create_dir_all(&etc_etcd).unwrap();
    let config = tmp.path().join("c.toml");
    fs::write(
        &config,
        format!(
            "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\n\n[[watch]]\npath = \"{}\"\nunits = [\"etcd.service\"]\noptional = true\n\n[coordination]\nenabled = false\n",
            tmp.path().join("state").display(),
            etc_etcd.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| run_in(&sb, &config, args);
    let (code, stdout, stderr) = run(&["check", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let listed: Vec<String> = (check["certificates"].as_array().unwrap().iter())
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    eprintln!("check lists: {listed:?}");
    let at = |f: &str| ssl.join(f).display().to_string();
    assert_eq!(listed, [at("ca.pem"), at("member-node1.pem")], "{check}");
    let member = (check["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"] == at("member-node1.pem"))
        .unwrap();
    assert_eq!(member["status"], "due", "{member}");
    assert_eq!(
        member["units"],
        serde_json::json!(["etcd.service"]),
        "{member}"
    );

    let other = fs::read(ssl.join("member-node2.pem")).unwrap();
    let before = fs::read(ssl.join("member-node1.pem")).unwrap();
    let (code, stdout, stderr) = run(&["renew", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_ne!(
        fs::read(ssl.join("member-node1.pem")).unwrap(),
        before,
        "renewed"
    );
    assert_eq!(
        fs::read(ssl.join("member-node2.pem")).unwrap(),
        other,
        "another host's, left"
    );
    assert_eq!(
        units_of(&report),
        [("etcd.service".to_string(), "not_restarted".to_string())],
        "{report}"
    );
}
