//! A watch's `post_renew_command` (certmonger's post-save), through the real binary over the
//! openssl-made StarlingX tree: announced by the dry run, run after a pass renewed the
//! watch's certificates with them in its environment, its failure reported and alarmed
//! (250.003) and owed, run again by the next pass, which clears the alarm.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::pki::{Tree, toml_str};

const LAYOUTS: &[&str] = &["starlingx"];

/// The 250.003 alarms' reasons, from `alarms --output json`.
fn services_alarms(tree: &Tree) -> Vec<String> {
    let run = tree.run(&["alarms", "--output", "json"]);
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json();
    doc["alarms"]
        .as_array()
        .expect("an alarms array")
        .iter()
        .filter(|a| a["id"] == "250.003")
        .map(|a| a["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_watch_command_runs_after_its_renewals_and_a_failure_is_alarmed_and_run_again() {
    let tree = Tree::new(LAYOUTS, "starlingx");
    let dir = tree.tmp.path();
    // The command: logs its arguments and environment, says something on stderr, and
    // exits with the status in `exit` (an operator's reload script that fails, then works).
    let log = dir.join("command.log");
    let exit = dir.join("exit");
    let script = dir.join("reload-haproxy");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"args=$*\"; echo \"watch=$CERTRENEWD_WATCH\"; echo \"first=$CERTRENEWD_CERTIFICATE\"; echo \"all:\"; echo \"$CERTRENEWD_CERTIFICATES\"; }} >> {log}\necho 'haproxy: reload refused: socket /run/haproxy.sock missing' >&2\nexit $(cat {exit})\n",
            log = log.display(),
            exit = exit.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(&exit, "3").unwrap();
    let etcd = tree.abs("etc/etcd");
    let pki = tree.abs("etc/kubernetes/pki");
    // No units: the command is the only thing run after the renewals.
    fs::write(
        &tree.config,
        format!(
            "state_dir = {}\nvalidity_days = 365\n\n[[watch]]\npath = {}\npost_renew_command = [{}, \"--graceful\"]\n\n[[watch]]\npath = {}\n",
            toml_str(&tree.state),
            toml_str(&etcd),
            toml_str(&script),
            toml_str(&pki),
        ),
    )
    .unwrap();
    let program = script.display().to_string();
    let line = |word: &str, rest: &str| {
        format!(
            "{word:<14}post_renew_command {program} (watch {}): {rest}",
            etcd.display()
        )
    };

    // The dry run says it would run it, and runs nothing.
    let dry = tree.run(&["renew", "--dry-run"]);
    assert_eq!(dry.code, 0, "{dry}");
    let would = format!(
        "would run     the post_renew_command of watch {}, after the restarts\n",
        etcd.display()
    );
    assert!(dry.stdout.contains(&would), "{would}\nin\n{dry}");
    // As JSON, with the command.
    let dry = tree.run(&["renew", "--dry-run", "--output", "json"]);
    assert_eq!(dry.code, 0, "{dry}");
    let doc = dry.json();
    assert_eq!(
        doc["commands"],
        serde_json::json!([{
            "watch": etcd.display().to_string(),
            "command": [program, "--graceful"],
            "state": "would_run",
            "reason": "its watch has a certificate the pass would renew; run after the restarts",
        }])
    );
    assert!(
        doc["summary"]
            .as_str()
            .is_some_and(|s| s.contains("1 command: 1 would be run")),
        "{doc:#}"
    );
    assert!(!log.exists(), "the dry run ran the command");

    // The pass renews etcd's two due certificates and the apiserver's etcd client; the
    // command runs once, for etcd's watch only, with the renewed files; it fails.
    let first = tree.run(&["renew"]);
    assert_eq!(first.code, 1, "{first}");
    let failed = line(
        "FAILED",
        "exited with status 3: haproxy: reload refused: socket /run/haproxy.sock missing",
    );
    assert!(first.stdout.contains(&failed), "{failed}\nin\n{first}");
    assert!(first.stdout.contains("1 command: 1 failed"), "{first}");
    let renewed_under_etcd = [
        tree.abs("etc/etcd/etcd-client.crt"),
        tree.abs("etc/etcd/etcd-server.crt"),
    ];
    let expected_run = format!(
        "args=--graceful\nwatch={}\nfirst={}\nall:\n{}\n{}\n",
        etcd.display(),
        renewed_under_etcd[0].display(),
        renewed_under_etcd[0].display(),
        renewed_under_etcd[1].display()
    );
    assert_eq!(fs::read_to_string(&log).unwrap(), expected_run);
    let alarms = services_alarms(&tree);
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert!(
        alarms[0].contains(&format!(
            "post_renew_command {program} (watch {}): exited with status 3",
            etcd.display()
        )),
        "{alarms:?}"
    );
    // `check` says the run is owed, in its text and its JSON.
    let owed = tree.check_json()["restarts_owed"].clone();
    assert_eq!(
        owed["commands"],
        serde_json::json!([etcd.display().to_string()]),
        "{owed:#}"
    );
    let check = tree.run(&["check"]);
    let said = format!(
        "An earlier pass owes a run of the post_renew_command of watch {}",
        etcd.display()
    );
    assert!(
        check
            .stdout
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&said),
        "{said}\nin\n{check}"
    );

    // The next pass renews nothing, runs the owed command again for the same files, and
    // clears the alarm once it succeeds.
    fs::write(&exit, "0").unwrap();
    let second = tree.run(&["renew"]);
    assert_eq!(second.code, 0, "{second}");
    let ran = line("ran", "exited with status 0");
    assert!(second.stdout.contains(&ran), "{ran}\nin\n{second}");
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        format!("{expected_run}{expected_run}")
    );
    assert_eq!(services_alarms(&tree), Vec::<String>::new());
    assert!(!tree.state.join("restarts.json").exists(), "nothing owed");

    // Then it is not run again.
    let third = tree.run(&["renew"]);
    assert_eq!(third.code, 0, "{third}");
    assert!(!third.stdout.contains("post_renew_command"), "{third}");
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        format!("{expected_run}{expected_run}")
    );
}

/// Two configurations with their own state directories over one tree (a misconfiguration:
/// their temp files and renewals would overwrite each other's). While the first one's pass
/// runs (its post_renew_command holds it), the second, forced to renew the same files,
/// fails with a clear error naming the directory and the first one's PID, and changes
/// nothing; once the first is done, the second runs.
#[test]
fn a_tree_another_state_directory_holds_is_refused_naming_it() {
    let tree = Tree::new(LAYOUTS, "starlingx");
    let dir = tree.tmp.path();
    let etcd = tree.abs("etc/etcd");
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = dir.join("hold");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
            started = started.display(),
            go = go.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let config = |name: &str, command: bool| {
        let path = dir.join(format!("{name}.toml"));
        let command = match command {
            true => format!("post_renew_command = [{}]\n", toml_str(&script)),
            false => String::new(),
        };
        fs::write(
            &path,
            format!(
                "state_dir = {}\nlock_timeout_secs = 1\nvalidity_days = 365\n\n[[watch]]\npath = {}\n{command}",
                toml_str(&dir.join(format!("{name}-state"))),
                toml_str(&etcd),
            ),
        )
        .unwrap();
        path
    };
    let (a, b) = (config("a", true), config("b", false));
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_certrenewd"))
        .arg("--config")
        .arg(&a)
        .arg("renew")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id();
    let t0 = std::time::Instant::now();
    while !started.exists() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no pass started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let before = common::walk::snapshot(&etcd);
    let second = common::pki::run_bin(&b, &["renew", "--force", "--all"]);
    println!(
        "{}",
        second
            .stdout
            .lines()
            .chain(second.stderr.lines())
            .find(|l| l.contains("held by"))
            .unwrap_or("")
    );
    let after = common::walk::snapshot(&etcd);
    fs::write(&go, "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    assert_eq!(second.code, 1, "{second}");
    let said = format!("{second}");
    assert!(
        said.contains(&format!(
            "{} is held by another certrenewd (pid {pid})",
            etcd.display()
        )),
        "{said}"
    );
    assert!(said.contains("two configurations watch one tree"), "{said}");
    assert!(before == after, "the refused pass changed the tree");
    // The first is done: the second runs (and, forced, renews).
    let again = common::pki::run_bin(&b, &["renew", "--force", "--all"]);
    assert_eq!(again.code, 0, "{again}");
}
