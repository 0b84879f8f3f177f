//! Alarms written to a real systemd-journald running in a private mount namespace, read back
//! with journalctl; the shipped catalog shown by `journalctl -x`.
//!
//! Needs root and `unshare -m`; otherwise the test prints why and passes without running
//! (under CI=true it fails instead).

use crate::common;

use common::skip;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use certrenewd::alarms::{
    AlarmKind, AlarmSpec, AlarmState, AlarmStore, JournalSink, apply, cert_entity, host_entity,
};
use tempfile::TempDir;
use time::macros::datetime;

const JOURNALD: &str = "/lib/systemd/systemd-journald";

/// Runs inside the new mount namespace: private /run/systemd, journal files in $1, a volatile
/// journal only, our catalog directory ($3) and catalog database directory ($4) instead of the
/// machine's; then becomes journald (same PID as the spawned unshare).
const START_SCRIPT: &str = r#"set -e
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/journal /run/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nReadKMsg=no\nForwardToSyslog=no\nForwardToWall=no\nForwardToConsole=no\n' \
  > /run/systemd/journald.conf.d/zz-certrenewd-test.conf
mount --bind "$1" /run/log
if [ -d /var/log/journal ]; then mount --bind "$2" /var/log/journal; fi
mount --bind "$3" /usr/lib/systemd/catalog
mount --bind "$4" /var/lib/systemd/catalog
exec "$5"
"#;

/// A journald in its own mount namespace; killed (by PID) and reaped on drop.
struct Journald {
    child: Child,
    dir: TempDir,
}

impl Journald {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn socket(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root/run/systemd/journal/socket",
            self.pid()
        ))
    }

    fn journal_dir(&self) -> PathBuf {
        self.dir.path().join("log/journal")
    }

    fn catalog_db(&self) -> PathBuf {
        self.dir.path().join("catalog-db/database")
    }

    /// Runs a command inside journald's mount namespace.
    fn exec(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("nsenter")
            .arg("-t")
            .arg(self.pid().to_string())
            .arg("-m")
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running nsenter {args:?}"))?;
        if !out.status.success() {
            bail!(
                "{args:?} in the namespace: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The certrenewd entries matching `matches`, as `journalctl -D DIR -o json` shows them.
    fn entries(&self, matches: &[&str]) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
        let out = Command::new("journalctl")
            .arg("-D")
            .arg(self.journal_dir())
            .args(["-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=certrenewd"])
            .args(matches)
            .output()
            .context("running journalctl")?;
        anyhow::ensure!(
            out.status.success(),
            "journalctl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut entries = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(line)?;
            let obj = v.as_object().context("journalctl entry is not an object")?;
            let mut entry = BTreeMap::new();
            for (k, v) in obj {
                entry.insert(k.clone(), field_value(v)?);
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Polls until `matches` yields `n` entries (journald writes asynchronously).
    fn wait_for(
        &self,
        matches: &[&str],
        n: usize,
    ) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let entries = self.entries(matches)?;
            if entries.len() >= n || Instant::now() > deadline {
                return Ok(entries);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Journald {
    fn drop(&mut self) {
        // Kill by PID and reap; the namespace and its mounts go with its last process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// journalctl's JSON shows a field as a string, or as an array of bytes when not printable.
fn field_value(v: &serde_json::Value) -> anyhow::Result<String> {
    match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Array(bytes) => {
            let raw: Option<Vec<u8>> = bytes
                .iter()
                .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            let raw = raw.context("a byte array field holds a non-byte")?;
            Ok(String::from_utf8(raw)?)
        }
        other => bail!("unexpected field value {other}"),
    }
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Why this machine cannot run the test, if it cannot.
fn unsupported() -> Option<String> {
    if effective_uid() != Some(0) {
        return Some("not running as root".into());
    }
    match Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("unshare -m is not possible here ({s})")),
        Err(e) => Some(format!("unshare cannot be run: {e}")),
    }
}

fn start_journald() -> anyhow::Result<Journald> {
    anyhow::ensure!(
        Path::new(JOURNALD).exists(),
        "{JOURNALD} is needed for this test"
    );
    let dir = tempfile::tempdir()?;
    for sub in ["log", "var-log-journal", "catalog", "catalog-db"] {
        std::fs::create_dir(dir.path().join(sub))?;
    }
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/certrenewd.catalog");
    std::fs::copy(&catalog, dir.path().join("catalog/certrenewd.catalog"))
        .with_context(|| format!("copying {}", catalog.display()))?;
    let stderr = std::fs::File::create(dir.path().join("journald.stderr"))?;

    let child = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            START_SCRIPT,
            "sh",
        ])
        .arg(dir.path().join("log"))
        .arg(dir.path().join("var-log-journal"))
        .arg(dir.path().join("catalog"))
        .arg(dir.path().join("catalog-db"))
        .arg(JOURNALD)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("starting unshare")?;
    let mut jd = Journald { child, dir };

    let deadline = Instant::now() + Duration::from_secs(10);
    while !jd.socket().exists() {
        if let Some(status) = jd.child.try_wait()? {
            let log =
                std::fs::read_to_string(jd.dir.path().join("journald.stderr")).unwrap_or_default();
            bail!("journald namespace exited with {status}: {log}");
        }
        anyhow::ensure!(Instant::now() < deadline, "journald socket did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(jd)
}

fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[test]
fn alarms_reach_a_real_journald_with_every_field_and_the_catalog() -> anyhow::Result<()> {
    if let Some(why) = unsupported() {
        skip::skip(&why);
        return Ok(());
    }
    let real_catalog_db = Path::new("/var/lib/systemd/catalog/database");
    let real_catalog_mtime = mtime(real_catalog_db);

    let jd = start_journald()?;
    let journald_pid = jd.pid();
    let state = tempfile::tempdir()?;
    let store = AlarmStore::new(state.path());
    let sink = JournalSink::new(jd.socket());

    let host = host_entity("controller-0");
    let cert = cert_entity(
        "controller-0",
        Path::new("/etc/kubernetes/pki/apiserver.crt"),
    );
    let reason_1 = "/etc/etcd/etcd-server.crt: CA key not on this host\n/etc/etcd/peer.crt: CA key not on this host";
    let reason_2 = "/etc/etcd/etcd-server.crt: key does not match\nsecond line";
    let desired = |renew_reason: &str| {
        vec![
            AlarmSpec {
                kind: AlarmKind::RenewalFailed,
                entity: host.clone(),
                reasons: vec![renew_reason.to_owned()],
                subjects: Vec::new(),
            },
            AlarmSpec {
                kind: AlarmKind::Expired,
                entity: cert.clone(),
                reasons: vec![
                    "/etc/kubernetes/pki/apiserver.crt: expired 2026-11-20T00:00:00Z".into(),
                ],
                subjects: Vec::new(),
            },
        ]
    };

    // Raise, keep (three passes), change the reason (no entry), clear.
    apply(
        &store,
        &desired(reason_1),
        &[&sink],
        datetime!(2026-11-21 00:10:03 UTC),
    )?;
    apply(
        &store,
        &desired(reason_1),
        &[&sink],
        datetime!(2026-11-22 00:00 UTC),
    )?;
    apply(
        &store,
        &desired(reason_2),
        &[&sink],
        datetime!(2026-11-23 00:00 UTC),
    )?;
    apply(&store, &[], &[&sink], datetime!(2026-11-24 00:00 UTC))?;
    apply(&store, &[], &[&sink], datetime!(2026-11-25 00:00 UTC))?;

    let all = jd.wait_for(&[], 4)?;
    assert_eq!(all.len(), 4, "one entry per raise and clear: {all:#?}");

    let entries = jd.wait_for(&["ALARM_ID=250.003"], 2)?;
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let ours = |e: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        e.iter()
            .filter(|(k, _)| !k.starts_with('_'))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let expect = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let set_message = format!("250.003 set: Kubernetes certificates renewal failed: {reason_1}");
    assert_eq!(
        ours(&entries[0]),
        expect(&[
            ("MESSAGE", &set_message),
            (
                "MESSAGE_ID",
                AlarmKind::RenewalFailed.message_id(AlarmState::Set)
            ),
            ("PRIORITY", "3"),
            ("SYSLOG_IDENTIFIER", "certrenewd"),
            ("ALARM_ID", "250.003"),
            ("ALARM_STATE", "set"),
            ("ALARM_SEVERITY", "major"),
            ("ALARM_ENTITY", "host=controller-0"),
            ("ALARM_REASON", reason_1),
        ]),
    );
    let clear_message =
        format!("250.003 clear: Kubernetes certificates renewal failed: {reason_2}");
    assert_eq!(
        ours(&entries[1]),
        expect(&[
            ("MESSAGE", &clear_message),
            (
                "MESSAGE_ID",
                AlarmKind::RenewalFailed.message_id(AlarmState::Clear)
            ),
            ("PRIORITY", "5"),
            ("SYSLOG_IDENTIFIER", "certrenewd"),
            ("ALARM_ID", "250.003"),
            ("ALARM_STATE", "clear"),
            ("ALARM_SEVERITY", "major"),
            ("ALARM_ENTITY", "host=controller-0"),
            ("ALARM_REASON", reason_2),
        ]),
    );
    assert_eq!(
        entries[0].get("_TRANSPORT").map(String::as_str),
        Some("journal")
    );

    let expired = jd.wait_for(&["ALARM_ID=500.210"], 2)?;
    let fields: Vec<_> = expired
        .iter()
        .map(|e| {
            (
                e["ALARM_STATE"].as_str(),
                e["PRIORITY"].as_str(),
                e["ALARM_SEVERITY"].as_str(),
                e["ALARM_ENTITY"].as_str(),
                e["MESSAGE_ID"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            (
                "set",
                "2",
                "critical",
                cert.as_str(),
                AlarmKind::Expired.message_id(AlarmState::Set)
            ),
            (
                "clear",
                "5",
                "critical",
                cert.as_str(),
                AlarmKind::Expired.message_id(AlarmState::Clear)
            ),
        ]
    );

    // The catalog: installed into the namespace's catalog directory, compiled into the
    // namespace's database, shown by journalctl -x.
    jd.exec(&["journalctl", "--update-catalog"])?;
    assert!(
        jd.catalog_db().exists(),
        "catalog database not in the test dir"
    );
    let journal_dir = jd.journal_dir().display().to_string();
    let explained = jd.exec(&[
        "journalctl",
        "-D",
        &journal_dir,
        "-x",
        "--no-pager",
        "SYSLOG_IDENTIFIER=certrenewd",
        "ALARM_ID=250.003",
    ])?;
    for needle in [
        "Subject: Alarm 250.003 set: Kubernetes certificates renewal failed",
        "Subject: Alarm 250.003 cleared: Kubernetes certificates renewal failed",
        "Defined-By: certrenewd",
        "on host=controller-0 (severity major)",
        "Reason: /etc/etcd/etcd-server.crt: CA key not on this host",
        "Last reason while it was active: /etc/etcd/etcd-server.crt: key does not match",
        "certrenewd renew --force PATH",
    ] {
        assert!(
            explained.contains(needle),
            "journalctl -x lacks {needle:?}:\n{explained}"
        );
    }
    assert!(
        !explained.contains("@ALARM_"),
        "unsubstituted field:\n{explained}"
    );

    let dir_path = jd.dir.path().to_owned();
    drop(jd);
    assert!(
        !Path::new(&format!("/proc/{journald_pid}")).exists(),
        "journald {journald_pid} still running"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(
        !mounts.contains(&*dir_path.to_string_lossy()),
        "a test mount is visible outside the namespace"
    );
    assert_eq!(
        mtime(real_catalog_db),
        real_catalog_mtime,
        "the machine's catalog database changed"
    );
    Ok(())
}
