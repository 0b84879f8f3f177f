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
    let tree = tmp.path().join("pki");
    mkpki("starlingx", &tree);
    let ssl = tmp.path().join("etc/ssl/etcd/ssl");
    kubespray_ssl(&tree, &ssl);
    // kubespray's files as it writes them, their paths moved into the test's tree.
    let env = tmp.path().join("etc/etcd.env");
    let text = fs::read_to_string(format!("{FIXTURES}/etcd.env")).unwrap();
    fs::write(
        &env,
        text.replace("/etc/ssl/etcd/ssl", ssl.to_str().unwrap()),
    )
    .unwrap();
    let unit = fs::read_to_string(format!("{FIXTURES}/etcd.service")).unwrap();
    let unit = unit.replace("/etc/etcd.env", env.to_str().unwrap());
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
            "bus = \"user\"\nstate_dir = \"{}\"\nvalidity_days = 365\n\n[[watch]]\npath = \"{}\"\nunits = [\"etcd.service\", \"standin.service\"]\n\n[coordination]\nenabled = false\n",
            tmp.path().join("state").display(),
            ssl.display()
        ),
    )
    .unwrap();
    let coordinated = fs::read_to_string(&config)
        .unwrap()
        .replace("\n[coordination]\nenabled = false\n", "\n");
    let cfg = config.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--config", cfg];
        all.extend(args);
        let out = sb.exec(BIN, &all);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        (out.status.code(), stdout, stderr)
    };

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
        let (code, stdout, stderr) = run(&["renew", "--output", "json", path]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let ran = units_of(&serde_json::from_str(&stdout).unwrap());
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(u, s)| (u.to_string(), s.to_string()))
            .collect();
        assert_eq!(ran, want, "renew {file}: {stdout}");
    }

    // Coordination on (the default `auto`): etcd's settings are in its environment file,
    // which only the unit's reading names, and no etcd client identity is found. check,
    // the dry run and the pass hold the restarts, for the same cause (the pass renews,
    // forced: nothing is due any more).
    fs::write(&config, &coordinated).unwrap();
    let (code, stdout, stderr) = run(&["check", "--output", "json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let check: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let outlook = &check["coordination"];
    assert_eq!(outlook["restarts"], "held", "{outlook}");
    let cause = outlook["why"].as_str().unwrap().to_string();
    assert!(
        cause.contains("etcd.service (ExecStart and environment, from systemd)"),
        "{cause}"
    );
    let member = ssl.join("member-node1.pem");
    let member = member.to_str().unwrap();
    let (code, stdout, stderr) =
        run(&["renew", "--force", "--dry-run", "--output", "json", member]);
    assert_eq!(code, Some(1), "the pass would fail: {stdout}\n{stderr}");
    let dry: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(dry["units"].as_array().unwrap().len(), 2, "{dry}");
    for u in dry["units"].as_array().unwrap() {
        assert_eq!(u["state"], "held_back", "{u}");
        assert_eq!(u["reason"], format!("would be held: {cause}"), "{u}");
    }
    let (code, stdout, stderr) = run(&["renew", "--force", "--output", "json", member]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let ran: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(ran["units"].as_array().unwrap().len(), 2, "{ran}");
    for u in ran["units"].as_array().unwrap() {
        assert_eq!(u["state"], "held_back", "{u}");
        assert!(
            u["reason"].as_str().unwrap().contains(&cause),
            "{u}\n{cause}"
        );
    }
}
