//! Static pods restarted the way kubelet understands: after a renewal, each manifest leaves
//! the manifest directory for `static_pod_wait_secs` and comes back byte for byte. A stand-in
//! for kubelet (a thread polling the directory, ignoring dot files as kubelet does) records
//! every disappearance and reappearance. A process killed while the manifests are out leaves
//! them in the holding place; the next run (or the daemon's start) puts them back.

use crate::common;

use common::pki;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pki::{BIN, Tree, toml_str};

const LAYOUTS: &[&str] = &["kubeadm"];

const APISERVER: &str = "# kube-apiserver static pod (kubeadm)\napiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 127.0.206.2:6443\n  labels:\n    component: kube-apiserver\n  name: kube-apiserver\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt\n    image: registry.k8s.io/kube-apiserver:v1.31.0\n    name: kube-apiserver\n  hostNetwork: true\nstatus: {}\n";
const ETCD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - etcd\n    - --cert-file=/etc/kubernetes/pki/etcd/server.crt\n    image: registry.k8s.io/etcd:3.5.15-0\n    name: etcd\n";
const SCHEDULER: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-scheduler\n";

/// What the kubelet stand-in saw happen to a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Gone,
    Back,
    Changed,
}

/// A stand-in for kubelet's file source: polls the manifest directory every 10 ms and
/// records, per manifest (dot files ignored, as kubelet ignores them), when it disappeared,
/// reappeared or changed.
struct FakeKubelet {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<BTreeMap<String, Vec<(Instant, Seen)>>>,
}

fn pods_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .filter_map(|e| {
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        fs::read(e.path()).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl FakeKubelet {
    fn watch(dir: &Path) -> FakeKubelet {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = dir.to_path_buf();
        let stop2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut known = pods_in(&dir);
            let mut events: BTreeMap<String, Vec<(Instant, Seen)>> = BTreeMap::new();
            loop {
                // One last look after the stop: the final change may have just happened.
                let stopping = stop2.load(Ordering::SeqCst);
                let now = pods_in(&dir);
                let t = Instant::now();
                for (name, bytes) in &now {
                    match known.get(name) {
                        None => events
                            .entry(name.clone())
                            .or_default()
                            .push((t, Seen::Back)),
                        Some(old) if old != bytes => events
                            .entry(name.clone())
                            .or_default()
                            .push((t, Seen::Changed)),
                        _ => {}
                    }
                }
                for name in known.keys().filter(|n| !now.contains_key(*n)) {
                    events
                        .entry(name.clone())
                        .or_default()
                        .push((t, Seen::Gone));
                }
                known = now;
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            events
        });
        FakeKubelet { stop, handle }
    }

    fn finish(self) -> BTreeMap<String, Vec<(Instant, Seen)>> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().expect("the kubelet stand-in panicked")
    }
}

pub(crate) struct Setup {
    pub(crate) tree: Tree,
    pub(crate) manifests: PathBuf,
}

pub(crate) fn setup() -> Setup {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let manifests = tree.tmp.path().join("manifests");
    fs::create_dir(&manifests).unwrap();
    for (name, text, mode) in [
        ("kube-apiserver.yaml", APISERVER, 0o600),
        ("etcd.yaml", ETCD, 0o640),
        ("kube-scheduler.yaml", SCHEDULER, 0o600),
    ] {
        let p = manifests.join(name);
        fs::write(&p, text).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    let s = Setup { tree, manifests };
    s.config(2, true);
    s
}

impl Setup {
    pub(crate) fn config(&self, wait: u32, run_on_start: bool) {
        let text = format!(
            "state_dir = {}\nvalidity_days = 365\nrun_on_start = {run_on_start}\nmanifests_dir = {}\nstatic_pod_wait_secs = {wait}\n\n[[watch]]\npath = {}\nunits = []\nkubeconfigs = []\nstatic_pods = [\"etcd\", \"kube-apiserver\"]\n",
            toml_str(&self.tree.state),
            toml_str(&self.manifests),
            toml_str(&self.tree.abs("etc/kubernetes/pki")),
        );
        fs::write(&self.tree.config, common::single_node(&text)).unwrap();
    }

    fn manifest(&self, name: &str) -> PathBuf {
        self.manifests.join(name)
    }

    /// Every manifest is in place with its bytes and mode, and nothing of ours is left over.
    pub(crate) fn assert_all_in_place(&self) {
        for (name, text, mode) in [
            ("kube-apiserver.yaml", APISERVER, 0o600),
            ("etcd.yaml", ETCD, 0o640),
            ("kube-scheduler.yaml", SCHEDULER, 0o600),
        ] {
            let p = self.manifest(name);
            assert_eq!(fs::read_to_string(&p).unwrap(), text, "{name}");
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
                mode,
                "{name}"
            );
        }
        let names: Vec<String> = fs::read_dir(&self.manifests)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(!self.tree.state.join("static-pods.json").exists());
        assert!(!self.tree.state.join("pending.json").exists());
        assert!(!self.tree.state.join("restarts.json").exists());
        let held = self.tree.state.join("static-pods");
        assert!(
            !held.exists() || fs::read_dir(&held).unwrap().count() == 0,
            "left in {}",
            held.display()
        );
    }

    /// `certrenewd SUB` on this setup's config, kept off this machine's journal, system bus
    /// and service manager (`pki::isolate`).
    pub(crate) fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--config").arg(&self.tree.config).arg(sub);
        pki::isolate(&mut cmd).env_remove("WATCHDOG_USEC");
        cmd
    }

    /// `certrenewd run` (the daemon) as a child process, its stderr piped.
    fn spawn_daemon(&self) -> Child {
        (self
            .command("run")
            .stdout(Stdio::null())
            .stderr(Stdio::piped()))
        .spawn()
        .expect("spawning the daemon")
    }

    /// `certrenewd renew` as a child process.
    fn spawn_renew(&self) -> Child {
        (self
            .command("renew")
            .stdout(Stdio::piped())
            .stderr(Stdio::null()))
        .spawn()
        .expect("spawning certrenewd")
    }

    /// Kills a `renew` while the etcd manifest is out of the directory (the first step; the
    /// kube-apiserver manifest waits its turn in place).
    fn crash_during_the_wait(&self) {
        self.config(60, true);
        let mut child = self.spawn_renew();
        let start = Instant::now();
        while self.manifest("etcd.yaml").exists() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the etcd manifest never left the manifest directory");
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("certrenewd exited ({status}) before moving the manifests out");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        // Out, held byte for byte, and recorded; the next one not yet touched.
        assert!(!self.manifest("etcd.yaml").exists());
        assert_eq!(
            fs::read_to_string(self.manifest("kube-apiserver.yaml")).unwrap(),
            APISERVER
        );
        assert!(self.manifest("kube-scheduler.yaml").exists());
        let held = self.tree.state.join("static-pods");
        assert_eq!(fs::read_to_string(held.join("etcd.yaml")).unwrap(), ETCD);
        assert!(!held.join("kube-apiserver.yaml").exists());
        let record = fs::read_to_string(self.tree.state.join("static-pods.json")).unwrap();
        assert!(record.contains("etcd.yaml"), "{record}");
        // The certificates were installed before the restart: the renewer's record was
        // handed over, and the restart stage's record names the pods still to restart.
        assert!(!self.tree.state.join("pending.json").exists());
        let owed = fs::read_to_string(self.tree.state.join("restarts.json")).unwrap();
        assert!(
            owed.contains("kube-apiserver") && owed.contains("etcd"),
            "{owed}"
        );
    }
}

/// The gap between a manifest's disappearance and its return.
/// Stops a daemon with SIGTERM and collects what it said.
fn stop_daemon(daemon: Child) -> std::process::Output {
    let stopped = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    daemon.wait_with_output().unwrap()
}

fn out_for(events: &[(Instant, Seen)]) -> Duration {
    match events {
        [(gone, Seen::Gone), (back, Seen::Back)] => *back - *gone,
        other => panic!("expected gone then back, saw {other:?}"),
    }
}

#[test]
fn a_renewal_restarts_each_static_pod_once_byte_for_byte() {
    let s = setup();
    // check names the static pods each certificate's renewal restarts.
    let check = s.tree.check_json();
    for c in check["certificates"].as_array().unwrap() {
        assert_eq!(
            c["static_pods"],
            serde_json::json!(["etcd", "kube-apiserver"]),
            "{c}"
        );
    }
    let kubelet = FakeKubelet::watch(&s.manifests);
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stdout
            .contains("restarted     static pod etcd: manifest out of"),
        "{r}"
    );
    assert!(
        r.stdout.contains("restarted     static pod kube-apiserver"),
        "{r}"
    );
    // Each named pod left once for the wait and came back; the others were not touched, and
    // kubelet never saw any other file (temp files are dot files).
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        ["etcd.yaml", "kube-apiserver.yaml"],
        "{events:?}"
    );
    for (name, ev) in &events {
        let gap = out_for(ev);
        assert!(
            gap >= Duration::from_millis(1800) && gap < Duration::from_secs(10),
            "{name} was out for {gap:?}"
        );
    }
    // One at a time, etcd first: kube-apiserver left only after etcd was back.
    let (etcd, apiserver) = (&events["etcd.yaml"], &events["kube-apiserver.yaml"]);
    assert!(etcd[1].0 <= apiserver[0].0, "{events:?}");
    s.assert_all_in_place();

    // Nothing due: no pod is restarted.
    let kubelet = FakeKubelet::watch(&s.manifests);
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn dry_run_and_no_restart_leave_the_manifests_alone() {
    let s = setup();
    let kubelet = FakeKubelet::watch(&s.manifests);
    let plan = s.tree.run(&["renew", "--dry-run"]);
    assert_eq!(plan.code, 0, "{plan}");
    let r = s.tree.run(&["renew", "--no-restart"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stdout.contains("static pod etcd") && r.stdout.contains("not restarted"),
        "{r}"
    );
    assert!(events.is_empty(), "{events:?}");
    s.assert_all_in_place();
}

#[test]
fn a_missing_manifest_is_alarmed_and_rolled_back_then_retried() {
    let s = setup();
    fs::remove_file(s.manifest("etcd.yaml")).unwrap();
    let kubelet = FakeKubelet::watch(&s.manifests);
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout.contains("NOT RESTARTED static pod etcd: manifest")
            && r.stdout.contains("not found"),
        "{r}"
    );
    assert!(
        r.stdout.contains("restarted     static pod kube-apiserver"),
        "{r}"
    );
    // kube-apiserver restarted once; the rollback retries only the pod that failed (as for
    // units), and the certificate kube-apiserver loaded is the newer, valid one.
    assert_eq!(events.keys().collect::<Vec<_>>(), ["kube-apiserver.yaml"]);
    assert!(out_for(&events["kube-apiserver.yaml"]) >= Duration::from_millis(1800));
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    let reasons: Vec<&str> = alarms["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["id"] == "250.003")
        .map(|a| a["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("static pod etcd") && r.contains("rolled back")),
        "{alarms}"
    );
    // The previous certificates are back in place: due again.
    let check = s.tree.check_json();
    let server = check["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"].as_str().unwrap().ends_with("pki/etcd/server.crt"))
        .unwrap();
    assert_eq!(server["status"], "due");
    // A plain pass now is held back (the renewal was rolled back: back-off).
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 1, "{r}");
    assert!(r.stdout.contains("HELD BACK"), "{r}");
    let due: Vec<String> = check["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "due")
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect();

    // With the manifest back, the operator retries at once by naming the certificates: the
    // pass renews them, restarts both, clears the alarm.
    fs::write(s.manifest("etcd.yaml"), ETCD).unwrap();
    fs::set_permissions(s.manifest("etcd.yaml"), fs::Permissions::from_mode(0o640)).unwrap();
    let kubelet = FakeKubelet::watch(&s.manifests);
    let mut args = vec!["renew"];
    args.extend(due.iter().map(String::as_str));
    let r = s.tree.run(&args);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        ["etcd.yaml", "kube-apiserver.yaml"],
        "{events:?}"
    );
    // A partial pass leaves the host's alarm to a full one: nothing is due or held now.
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 0, "{r}");
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    assert_eq!(alarms["alarms"].as_array().unwrap().len(), 0, "{alarms}");
    s.assert_all_in_place();
}

#[test]
fn without_rollback_a_failed_static_pod_is_carried_to_the_next_pass() {
    let s = setup();
    let config = fs::read_to_string(&s.tree.config).unwrap();
    fs::write(
        &s.tree.config,
        format!("rollback_on_failure = false\n{config}"),
    )
    .unwrap();
    fs::remove_file(s.manifest("etcd.yaml")).unwrap();
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 1, "{r}");
    let owed = fs::read_to_string(s.tree.state.join("restarts.json")).unwrap();
    assert!(owed.contains("etcd"), "{owed}");
    // Nothing is due any more; the owed restart of etcd alone happens once it is back.
    fs::write(s.manifest("etcd.yaml"), ETCD).unwrap();
    fs::set_permissions(s.manifest("etcd.yaml"), fs::Permissions::from_mode(0o640)).unwrap();
    let kubelet = FakeKubelet::watch(&s.manifests);
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        ["etcd.yaml"],
        "{events:?}"
    );
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    assert_eq!(alarms["alarms"].as_array().unwrap().len(), 0, "{alarms}");
    s.assert_all_in_place();
}

/// A pass without roll-back renewed etcd's certificates and could not restart etcd (its
/// manifest is gone): the restart is owed. Roll-back is on again for the next pass, and etcd
/// still cannot come back: that pass renews nothing and puts back what the first renewed.
fn renewed_and_owed_with_etcd_gone() -> Setup {
    let s = setup();
    let config = fs::read_to_string(&s.tree.config).unwrap();
    let off = format!("rollback_on_failure = false\n{config}");
    fs::write(&s.tree.config, off).unwrap();
    fs::remove_file(s.manifest("etcd.yaml")).unwrap();
    let first = s.tree.run(&["renew"]);
    assert!(
        first.code == 1 && first.stdout.contains("renewed"),
        "{first}"
    );
    fs::write(&s.tree.config, &config).unwrap();
    s
}

/// A roll-back of what an earlier pass renewed (its restart owed) is still said: each file
/// put back is a line on stdout and an outcome in JSON, and its back-off is recorded so that
/// the next pass does not offer the same renewal again at once.
#[test]
fn a_roll_back_of_an_earlier_pass_renewal_is_listed_and_backed_off() {
    let s = renewed_and_owed_with_etcd_gone();
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 1, "{r}");
    let etcd_server = s.tree.abs("etc/kubernetes/pki/etcd/server.crt");
    let line = (r.stdout.lines())
        .find(|l| l.contains(&*etcd_server.to_string_lossy()))
        .unwrap_or_else(|| panic!("no line for {}:\n{r}", etcd_server.display()));
    assert!(line.starts_with("ROLLED BACK"), "{line}\n{r}");
    let text = r.stdout.clone();
    assert!(
        text.contains("static pod etcd") && text.contains("next attempt not before"),
        "{r}"
    );
    let backoff = fs::read_to_string(s.tree.state.join("backoff.json"))
        .unwrap_or_else(|e| panic!("no back-off recorded ({e}):\n{r}"));
    assert!(backoff.contains("etcd/server.crt"), "{backoff}");
    // The next plain pass holds them back instead of offering the same renewal again.
    let plan = s
        .tree
        .run(&["renew", "--dry-run", "--output", "json"])
        .json();
    let server = (plan["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"].as_str().unwrap().ends_with("pki/etcd/server.crt"))
        .unwrap_or_else(|| panic!("{plan}"));
    assert_eq!(server["state"], "held_back", "{plan}");
}

/// The same pass as JSON: a put-back file of an earlier pass is a `rolled_back` outcome.
#[test]
fn a_roll_back_of_an_earlier_pass_renewal_is_an_outcome_in_json() {
    let s = renewed_and_owed_with_etcd_gone();
    let j = s.tree.run(&["renew", "--output", "json"]).json();
    let server = (j["certificates"].as_array().unwrap().iter())
        .find(|c| c["path"].as_str().unwrap().ends_with("pki/etcd/server.crt"))
        .unwrap_or_else(|| panic!("no outcome for etcd/server.crt: {j}"));
    assert_eq!(server["state"], "rolled_back", "{j}");
    assert!(
        server["reason"]
            .as_str()
            .is_some_and(|r| r.contains("static pod etcd")),
        "{server}"
    );
    assert!(server["backoff"].is_string(), "{server}");
    assert_eq!(j["success"], false, "{j}");
    // The alarms follow the files as they are after the roll-back: the previous certificate
    // is in its window again.
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    let soon = (alarms["alarms"].as_array().unwrap().iter())
        .find(|a| {
            a["id"] == "500.200" && a["entity"].as_str().unwrap().ends_with("etcd/server.crt")
        })
        .unwrap_or_else(|| panic!("no 500.200 for etcd/server.crt: {alarms}"));
    assert!(
        soon["reason"].as_str().unwrap().contains("rolled back"),
        "{soon}"
    );
    // While the back-off holds it, the alarm stays.
    assert_eq!(s.tree.run(&["renew"]).code, 1);
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    assert!(
        (alarms["alarms"].as_array().unwrap().iter())
            .any(|a| a["id"] == "500.200"
                && a["entity"].as_str().unwrap().ends_with("etcd/server.crt")),
        "{alarms}"
    );
}

#[test]
fn a_crash_during_the_wait_is_repaired_by_the_next_run() {
    let s = setup();
    s.crash_during_the_wait();
    // The next run puts the etcd manifest back, then restarts the pods the crashed pass
    // owed, one after the other: each manifest is out for 3 s more before it is back for
    // good. The moment between the recovery and the owed restart can be shorter than the
    // stand-in's 10 ms poll, so it may or may not see etcd's first return; the final one
    // must come after the wait. kube-apiserver, never out before, leaves once etcd is back.
    s.config(3, true);
    let kubelet = FakeKubelet::watch(&s.manifests);
    let started = Instant::now();
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    let kinds = |name: &str| -> Vec<Seen> { events[name].iter().map(|(_, k)| k.clone()).collect() };
    let etcd = kinds("etcd.yaml");
    assert!(
        etcd == [Seen::Back] || etcd == [Seen::Back, Seen::Gone, Seen::Back],
        "etcd.yaml: {etcd:?}\n{r}"
    );
    assert_eq!(
        kinds("kube-apiserver.yaml"),
        [Seen::Gone, Seen::Back],
        "{r}"
    );
    let etcd_back = events["etcd.yaml"].last().unwrap().0;
    assert!(
        etcd_back <= events["kube-apiserver.yaml"][0].0,
        "{events:?}"
    );
    for name in ["etcd.yaml", "kube-apiserver.yaml"] {
        let ev = &events[name];
        let (last, _) = ev.last().unwrap();
        assert!(
            *last - started >= Duration::from_secs(3),
            "{name} was back for good {:?} after the run started: the owed restart did not hold it out\n{r}",
            *last - started
        );
    }
    assert!(r.stdout.contains("restarted     static pod etcd"), "{r}");
    s.assert_all_in_place();
}

#[test]
fn a_crash_while_the_second_manifest_is_out_is_repaired_by_the_next_run() {
    let s = setup();
    // etcd goes out for 2 s and comes back; then kube-apiserver goes out for 2 s: killed then.
    s.config(2, true);
    let mut child = s.spawn_renew();
    let start = Instant::now();
    while s.manifest("kube-apiserver.yaml").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60) && child.try_wait().unwrap().is_none(),
            "the kube-apiserver manifest never left"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // etcd was restarted and is back before kube-apiserver left.
    assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    assert!(!s.manifest("kube-apiserver.yaml").exists());
    let record = fs::read_to_string(s.tree.state.join("static-pods.json")).unwrap();
    assert!(record.contains("kube-apiserver.yaml"), "{record}");
    assert!(!record.contains("etcd.yaml"), "{record}");
    // The next run puts it back, then does the restarts still owed; all in place after.
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stdout.contains("restarted     static pod kube-apiserver"),
        "{r}"
    );
    s.assert_all_in_place();
}

#[test]
fn the_daemon_puts_held_manifests_back_at_start_without_a_pass() {
    let s = setup();
    s.crash_during_the_wait();
    s.config(1, false);
    let mut daemon = s.spawn_daemon();
    let start = Instant::now();
    while !(s.manifest("etcd.yaml").exists() && s.manifest("kube-apiserver.yaml").exists()) {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = daemon.kill();
            panic!("the daemon did not put the manifests back");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = stop_daemon(daemon);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
    assert_eq!(
        fs::read_to_string(s.manifest("kube-apiserver.yaml")).unwrap(),
        APISERVER
    );
    assert!(!s.tree.state.join("static-pods.json").exists());
}

/// A `renew` by hand killed while a static pod's manifest is out, beside a running daemon
/// with no pass due: the daemon puts the manifest back within a minute, not at its next
/// pass (a day later), since the process that held it is gone (the state lock is free).
#[test]
fn a_running_daemon_puts_back_a_manifest_a_killed_renew_left_out() {
    let s = setup();
    s.config(1, false);
    let mut daemon = s.spawn_daemon();
    // The daemon is up (its status written) before the renew by hand.
    let status = s.tree.state.join("daemon.json");
    let start = Instant::now();
    while !status.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the daemon never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.crash_during_the_wait();
    let killed = Instant::now();
    let record = s.tree.state.join("static-pods.json");
    while !s.manifest("etcd.yaml").exists() || record.exists() {
        if killed.elapsed() > Duration::from_secs(60) {
            let _ = daemon.kill();
            let out = daemon.wait_with_output().unwrap();
            panic!(
                "the daemon did not put the manifest back within a minute:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "put back {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
    let out = stop_daemon(daemon);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("held out of the manifest directory by a certrenewd that is gone"),
        "{said}"
    );
}

/// A `renew` by hand that panics (a bug) while the etcd manifest is held out puts it back
/// before the panic ends the process: no daemon needs to be running for etcd to come back.
#[test]
fn a_renew_that_panics_puts_the_manifest_back_before_it_ends() {
    let s = setup();
    s.config(60, true);
    let mut cmd = Command::new(common::failpoints::binary());
    cmd.arg("--config").arg(&s.tree.config).arg("renew");
    pki::isolate(&mut cmd)
        .env_remove("WATCHDOG_USEC")
        .env("CERTRENEWD_FAILPOINT", "static-pods-out:panic");
    let out = cmd.output().expect("certrenewd renew");
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(101), "not a panic: {said}");
    assert!(
        said.contains("failpoint static-pods-out hit: panicking"),
        "{said}"
    );
    assert!(
        said.contains("held out of the manifest directory by this renew, which panicked"),
        "{said}"
    );
    assert_eq!(
        fs::read_to_string(s.manifest("etcd.yaml")).unwrap_or_default(),
        ETCD,
        "the etcd manifest left out: {said}"
    );
    assert!(!s.tree.state.join("static-pods.json").exists(), "{said}");
    assert_eq!(
        fs::read_to_string(s.manifest("kube-apiserver.yaml")).unwrap_or_default(),
        APISERVER
    );
    // The restarts are still owed: the next pass makes them.
    let owed = fs::read_to_string(s.tree.state.join("restarts.json")).unwrap();
    assert!(owed.contains("etcd"), "{owed}");
    s.config(1, true);
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("restarted     static pod etcd"), "{r}");
    s.assert_all_in_place();
}

/// Ctrl-C (or a hang-up, Ctrl-\, or SIGTERM) during a `renew` by hand while the etcd manifest is
/// held out: the step in flight finishes (the manifest goes back byte for byte after its
/// wait), nothing more is restarted, and the rest stays owed to the next pass; the process
/// exits by itself instead of dying with the manifest out.
#[test]
fn an_interrupted_renew_puts_the_manifest_back_and_leaves_the_rest_owed() {
    use rustix::process::Signal;
    for (signal, name) in [
        (Signal::INT, "SIGINT"),
        (Signal::HUP, "SIGHUP"),
        (Signal::QUIT, "SIGQUIT"),
    ] {
        let s = setup();
        s.config(4, true);
        let mut child = s.spawn_renew();
        let start = Instant::now();
        while s.manifest("etcd.yaml").exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the etcd manifest never left"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a PID");
        rustix::process::kill_process(pid, signal).expect("signalled");
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{signal:?}: renew did not exit");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        println!("{signal:?} while etcd.yaml was out: {status}");
        assert_eq!(
            status.code(),
            Some(1),
            "{signal:?}: died instead of ending its pass"
        );
        assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
        assert_eq!(
            fs::read_to_string(s.manifest("kube-apiserver.yaml")).unwrap(),
            APISERVER
        );
        assert!(!s.tree.state.join("static-pods.json").exists());
        let owed = fs::read_to_string(s.tree.state.join("restarts.json")).unwrap();
        assert!(
            owed.contains("kube-apiserver") && !owed.contains("\"etcd\""),
            "{signal:?}: {owed}"
        );
        // What is left says which signal ended the pass, as received.
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
        assert!(
            stdout.contains(&format!("certrenewd is stopping ({name})")),
            "{signal:?}:\n{stdout}"
        );
    }
}

/// On a terminal, `renew` shows what it waits for as a live line on stderr, rewritten in
/// place with the time waited; stdout (the report) carries none of it, and piped, stderr
/// carries none of it either.
#[test]
fn renew_on_a_terminal_shows_what_it_waits_for_and_piped_it_does_not() {
    let s = setup();
    s.config(4, true);
    let report = s.tree.tmp.path().join("report.txt");
    // stderr on a terminal (script's), stdout to a file.
    let mut script = Command::new("script");
    pki::isolate(&mut script).env_remove("WATCHDOG_USEC");
    let command = format!(
        "stty cols 100 rows 30; exec {BIN} --config {} renew > {}",
        s.tree.config.display(),
        report.display()
    );
    let out = script
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("script (util-linux) runs the command on a terminal");
    let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
    let live = "\r\x1b[2Kwaiting for static pod etcd: its manifest held out (";
    assert!(
        terminal.contains(live) && terminal.contains("held out (2 s)"),
        "no live line on the terminal: {terminal:?}"
    );
    let report = fs::read_to_string(&report).unwrap();
    assert!(
        report.contains("restarted     static pod etcd")
            && !report.contains("waiting for")
            && !report.contains('\x1b'),
        "{report:?}"
    );
    // Piped: nothing of it on stderr (the certificates are renewed again by name).
    s.assert_all_in_place();
    let r = s.tree.run(&["renew", "--force", "--all"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(
        !r.stderr.contains("waiting for") && !r.stderr.contains('\x1b'),
        "{r}"
    );
}

/// The four manifests `kubeadm init` writes and kube-vip's beside them
/// (`tests/fixtures/kubeadm-manifests`), their host paths under the tree, in a manifest
/// directory that is not kubelet's default.
fn kubeadm_manifests(tree: &Tree) -> PathBuf {
    let dir = tree.tmp.path().join("kubelet-manifests");
    fs::create_dir(&dir).unwrap();
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadm-manifests");
    for pod in KUBEADM_PODS.iter().chain(&["kube-vip"]) {
        let text = fs::read_to_string(templates.join(format!("{pod}.yaml")))
            .unwrap()
            .replace("{{ROOT}}", &tree.root.display().to_string())
            .replace("{{IP}}", "127.0.206.2")
            .replace("{{NAME}}", "controller-0");
        fs::write(dir.join(format!("{pod}.yaml")), text).unwrap();
    }
    dir
}

const KUBEADM_PODS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The names of the static pods in a report's JSON, with their states.
fn pods_of(report: &serde_json::Value) -> Vec<(String, String)> {
    (report["static_pods"].as_array().unwrap().iter())
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("state"))
        })
        .collect()
}

/// On kubeadm's own manifests every pod is read whole, so a renewed file restarts the pods
/// that read it and no other: `front-proxy-client.crt` only kube-apiserver (never etcd: a
/// quorum risk for a file etcd never reads), `etcd/server.crt` only etcd, the health-check
/// client that no pod reads none, `controller-manager.conf` only the controller manager.
/// `check`, the dry run and the pass name the same pods. kube-vip, which mounts `admin.conf`
/// and is in no watch, is named by `check` as a reader certrenewd does not restart, and is
/// never moved.
#[test]
fn on_kubeadms_manifests_a_renewed_file_restarts_the_pods_that_read_it_and_no_other() {
    let tree = Tree::new(LAYOUTS, "kubeadm");
    let manifests = kubeadm_manifests(&tree);
    // Every renewal restarts its readers here, etcd's serving certificate too: no etcd
    // runs to show it read again (kubeadm_ha.rs shows that on booted controllers).
    let text = format!(
        "state_dir = {}\nvalidity_days = 365\nmanifests_dir = {}\nstatic_pod_wait_secs = 1\n\n\
         [[watch]]\npath = {}\nunits = []\nkubeconfigs = [{}, {}]\nstatic_pods = {:?}\n\
         on_renew = \"restart\"\n",
        toml_str(&tree.state),
        toml_str(&manifests),
        toml_str(&tree.abs("etc/kubernetes/pki")),
        toml_str(&tree.abs("etc/kubernetes/controller-manager.conf")),
        toml_str(&tree.abs("etc/kubernetes/admin.conf")),
        KUBEADM_PODS,
    );
    fs::write(&tree.config, common::single_node(&text)).unwrap();
    let check = tree.check_json();
    // check says why: each pod, what it runs, and what a renewal calls for.
    let components: Vec<(String, String, String)> = (check["components"].as_array().unwrap())
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("-").to_string();
            (s("name"), s("program"), s("restart"))
        })
        .collect();
    let own = "restarted when a file it reads is renewed";
    let never = "never restarted by certrenewd: no watch names it; restart it by hand after a renewal of a file it reads";
    let want: Vec<(String, String, String)> = [
        ("etcd", "etcd", own),
        ("kube-apiserver", "kube-apiserver", own),
        ("kube-controller-manager", "kube-controller-manager", own),
        ("kube-scheduler", "kube-scheduler", own),
        ("kube-vip", "-", never),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(components, want, "{check}");
    for (file, pods) in [
        ("pki/front-proxy-client.crt", &["kube-apiserver"][..]),
        ("pki/etcd/server.crt", &["etcd"]),
        ("pki/etcd/healthcheck-client.crt", &[]),
        ("controller-manager.conf", &["kube-controller-manager"]),
        ("admin.conf", &[]),
    ] {
        let path = tree.abs(&format!("etc/kubernetes/{file}"));
        let arg = path.to_str().unwrap();
        let listed = (check["certificates"].as_array().unwrap().iter())
            .find(|c| c["path"] == arg)
            .unwrap_or_else(|| panic!("{file} not in check: {check}"));
        assert_eq!(
            listed["static_pods"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            pods.iter()
                .map(|p| serde_json::json!(p))
                .collect::<Vec<_>>(),
            "check: {file}"
        );
        let also = listed["also_read_by"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match file {
            "admin.conf" => assert_eq!(also, [serde_json::json!("kube-vip")], "{listed}"),
            _ => assert_eq!(also, Vec::<serde_json::Value>::new(), "{listed}"),
        }
        let dry = tree.run(&["renew", "--dry-run", "--output", "json", arg]);
        assert_eq!(dry.code, 0, "{dry}");
        let would: Vec<(String, String)> = (pods.iter())
            .map(|p| (p.to_string(), "would_restart".to_string()))
            .collect();
        assert_eq!(pods_of(&dry.json()), would, "dry run: {file}");
        // Each says which of its files the pass would renew.
        for p in dry.json()["static_pods"].as_array().unwrap() {
            let why = format!("it reads {arg}, which the pass would renew");
            assert_eq!(p["reason"], why, "dry run: {file}: {p}");
        }

        let kubelet = FakeKubelet::watch(&manifests);
        let r = tree.run(&["renew", "--output", "json", arg]);
        let events = kubelet.finish();
        assert_eq!(r.code, 0, "{r}");
        let restarted: Vec<(String, String)> = (pods.iter())
            .map(|p| (p.to_string(), "restarted".to_string()))
            .collect();
        assert_eq!(pods_of(&r.json()), restarted, "renew: {file}");
        let moved: Vec<String> = pods.iter().map(|p| format!("{p}.yaml")).collect();
        assert_eq!(
            events.keys().cloned().collect::<Vec<_>>(),
            moved,
            "manifests kubelet saw leave and come back: {file}"
        );
        for ev in events.values() {
            out_for(ev);
        }
        // The reader no watch restarts is named by the pass too, would be and was.
        let named = |report: &serde_json::Value| {
            (report["certificates"].as_array().unwrap().iter())
                .find(|c| c["path"] == arg)
                .and_then(|c| c["also_read_by"].as_array().cloned())
                .unwrap_or_default()
        };
        assert_eq!(named(&dry.json()), also, "dry run: {file}: {dry}");
        assert_eq!(named(&r.json()), also, "renew: {file}: {r}");
    }
    // And in the text, once per reader, with the files it reads.
    let admin = tree.abs("etc/kubernetes/admin.conf");
    let dry = tree.run(&["renew", "--force", "--dry-run", admin.to_str().unwrap()]);
    let line = format!(
        "\nBY HAND       static pod kube-vip: reads {} (which the pass would renew), but no watch \
         restarts it: certrenewd never does; restart it by hand, or name it in the watch's \
         static_pods\n",
        admin.display()
    );
    assert!(dry.stdout.contains(&line), "{dry}");
    // Coordination on (`auto`): check, the dry run and the pass decide alike, from etcd's
    // manifest in this manifest directory and the etcd client the API server's manifest
    // names. Nothing answers at its client URLs here. With etcd's member list never
    // recorded, that is not a cluster known down: held.
    fs::write(&tree.config, &text).unwrap();
    let check = tree.check_json();
    let outlook = &check["coordination"];
    assert_eq!(outlook["restarts"], "held", "{outlook}");
    let why = outlook["why"].as_str().unwrap();
    assert!(why.contains("member list was never recorded here"), "{why}");
    // The list on record, two members, every one refusing: the cluster is down to all three.
    common::etcd_members_on_record(
        &tree.state,
        &[
            ("node1", "https://127.0.206.2:2379"),
            ("node2", "https://127.0.206.3:2379"),
        ],
    );
    let check = tree.check_json();
    let outlook = &check["coordination"];
    assert_eq!(outlook["restarts"], "not coordinated", "{outlook}");
    let why = outlook["why"].as_str().unwrap();
    assert!(
        why.contains("https://127.0.206.2:2379") && why.contains("the cluster is down"),
        "{why}"
    );
    let file = tree.abs("etc/kubernetes/pki/front-proxy-client.crt");
    let arg = file.to_str().unwrap();
    let dry = tree.run(&["renew", "--force", "--dry-run", "--output", "json", arg]);
    assert_eq!(dry.code, 0, "{dry}");
    let would = [("kube-apiserver".to_string(), "would_restart".to_string())];
    assert_eq!(pods_of(&dry.json()), would, "{dry}");
    let kubelet = FakeKubelet::watch(&manifests);
    let r = tree.run(&["renew", "--force", "--output", "json", arg]);
    kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    let restarted = [("kube-apiserver".to_string(), "restarted".to_string())];
    assert_eq!(pods_of(&r.json()), restarted, "{r}");
}

/// etcd answering on 127.0.0.1:`port` whatever happens to its manifest: a kubelet that did
/// not see the move (its poll period is 20 s). Accepts and drops until the guard is dropped.
struct StillRunning {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    port: u16,
}

impl StillRunning {
    fn start() -> StillRunning {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if listener.accept().is_err() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        };
        let handle = Some(handle);
        StillRunning { stop, handle, port }
    }
}

impl Drop for StillRunning {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A static pod whose process goes on through the move (kubelet missed it) was not
/// restarted, whatever it serves: etcd reads its serving certificate again by itself, so the
/// renewed serial alone would pass it. Its manifest is put back, the restart is owed and
/// alarmed, and nothing is rolled back (the pod runs as it did) or backed off; once its
/// process ends as it should, the owed restart is done and the alarm clears.
#[test]
fn a_pod_whose_process_did_not_end_is_not_restarted_owed_and_not_rolled_back() {
    let s = setup();
    let etcd = StillRunning::start();
    let listen = format!(
        "    - --listen-client-urls=https://127.0.0.1:{}\n",
        etcd.port
    );
    let manifest = ETCD.replace("    - --cert-file", &format!("{listen}    - --cert-file"));
    fs::write(s.manifest("etcd.yaml"), &manifest).unwrap();
    let r = s.tree.run(&["renew"]);
    assert_eq!(r.code, 1, "{r}");
    let why = format!(
        "its process did not end: 127.0.0.1:{} (--listen-client-urls in {}) still answered 2 s after the manifest left (kubelet did not stop the pod); its manifest is back in {}; nothing was restarted, so nothing is rolled back",
        etcd.port,
        s.manifest("etcd.yaml").display(),
        s.manifests.display()
    );
    assert!(r.stdout.contains(&why), "{r}");
    assert!(
        r.stdout.contains("restarted     static pod kube-apiserver"),
        "{r}"
    );
    assert_eq!(
        fs::read_to_string(s.manifest("etcd.yaml")).unwrap(),
        manifest
    );
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    let raised = alarms["alarms"].as_array().unwrap();
    assert!(
        raised
            .iter()
            .any(|a| a["id"] == "250.003" && a["reason"].as_str().unwrap().contains(&why)),
        "{alarms}"
    );
    // Renewed and kept: nothing due, nothing rolled back, nothing backed off.
    let check = s.tree.check_json();
    for c in check["certificates"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{c}");
    }
    let owed = fs::read_to_string(s.tree.state.join("restarts.json")).unwrap();
    assert!(
        owed.contains("etcd") && !owed.contains("kube-apiserver"),
        "{owed}"
    );

    // Its process ends when the manifest leaves now: the owed restart is done, at once.
    drop(etcd);
    let kubelet = FakeKubelet::watch(&s.manifests);
    let r = s.tree.run(&["renew"]);
    let events = kubelet.finish();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        ["etcd.yaml"],
        "{events:?}"
    );
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    assert_eq!(alarms["alarms"].as_array().unwrap().len(), 0, "{alarms}");
    assert!(!s.tree.state.join("restarts.json").exists());
}

/// A local I/O error moving a manifest is decided from where the manifest is. Before the
/// rename, the pod never stopped: not restarted, owed, 250.003 naming the error, and
/// nothing rolled back (a pod that did not come back is not what happened). After the rename
/// (a directory's fsync), the manifest has moved: taken as moved, the restart goes on, and
/// the manifest comes back. Nothing is left out of the manifest directory either way.
#[test]
fn an_io_error_moving_a_manifest_is_decided_by_where_the_manifest_is() {
    let bin = common::failpoints::binary();
    for (spec, restarted) in [
        ("static-pod-move:error@1", false),
        ("static-pod-move-sync:error@1", true),
        ("static-pod-move-sync:error@2", true),
    ] {
        let s = setup();
        s.config(1, true);
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(&s.tree.config)
            .arg("renew")
            .env("CERTRENEWD_FAILPOINT", spec);
        let r = pki::run_cmd(&mut cmd, &["renew"]);
        assert!(r.stderr.contains("injecting an error"), "{spec}: {r}");
        if restarted {
            assert_eq!(r.code, 0, "{spec}: {r}");
            assert!(
                r.stdout.contains("restarted     static pod etcd"),
                "{spec}: {r}"
            );
            s.assert_all_in_place();
            continue;
        }
        assert_eq!(r.code, 1, "{spec}: {r}");
        let why = "HELD BACK     static pod etcd: not restarted: cannot move the manifest out, so it stayed in place: ";
        assert!(r.stdout.contains(why), "{spec}: {r}");
        assert!(
            r.stdout
                .contains("injected error (failpoint static-pod-move)"),
            "{spec}: {r}"
        );
        assert!(
            r.stdout.contains("restarted     static pod kube-apiserver"),
            "{spec}: {r}"
        );
        assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
        assert!(!s.tree.state.join("static-pods.json").exists());
        // Renewed and kept: nothing rolled back or backed off; etcd's restart is owed.
        for c in s.tree.check_json()["certificates"].as_array().unwrap() {
            assert_eq!(c["status"], "ok", "{spec}: {c}");
        }
        let owed = fs::read_to_string(s.tree.state.join("restarts.json")).unwrap();
        assert!(
            owed.contains("etcd") && !owed.contains("kube-apiserver"),
            "{owed}"
        );
        let r = s.tree.run(&["renew"]);
        assert_eq!(r.code, 0, "the owed restart, done: {r}");
        s.assert_all_in_place();
    }
}

/// The restarts owed cannot be recorded (the state directory full or failing; here an
/// injected error writing `restarts.json`): what was installed stays, the report is printed,
/// every restart is held for that cause under 250.003, and the install's own record
/// (`pending.json`) keeps them; the next pass, able to write, restarts them and clears the
/// alarm.
#[test]
fn restarts_that_cannot_be_recorded_are_held_and_made_by_the_next_pass() {
    let s = setup();
    s.config(1, true);
    let mut cmd = Command::new(common::failpoints::binary());
    cmd.arg("--config")
        .arg(&s.tree.config)
        .arg("renew")
        .env("CERTRENEWD_FAILPOINT", "restarts-record:error");
    let r = pki::run_cmd(&mut cmd, &["renew"]);
    println!("{r}");
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stdout.contains("6 certificates: 6 renewed"),
        "no report: {r}"
    );
    let cause =
        "HELD BACK     2 restarts, for one cause: not restarted: recording the restarts owed in ";
    assert!(r.stdout.contains(cause), "{r}");
    for pod in ["etcd", "kube-apiserver"] {
        let held = format!("HELD BACK     static pod {pod}: not restarted, for the cause above");
        assert!(r.stdout.contains(&held), "{pod}: {r}");
    }
    assert!(!r.stdout.contains("restarted     static pod"), "{r}");
    // Nothing restarted, the certificates installed, the install's record kept.
    assert_eq!(fs::read_to_string(s.manifest("etcd.yaml")).unwrap(), ETCD);
    assert!(s.tree.state.join("pending.json").exists());
    assert!(!s.tree.state.join("restarts.json").exists());
    for c in s.tree.check_json()["certificates"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{c}");
    }
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    let reasons: Vec<&str> = (alarms["alarms"].as_array().unwrap().iter())
        .filter(|a| a["id"] == "250.003")
        .filter_map(|a| a["reason"].as_str())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("failpoint restarts-record")),
        "{alarms}"
    );
    let r = s.tree.run(&["renew"]);
    println!("{r}");
    assert_eq!(r.code, 0, "the held restarts, done: {r}");
    for pod in ["etcd", "kube-apiserver"] {
        let done = format!("restarted     static pod {pod}");
        assert!(r.stdout.contains(&done), "{pod}: {r}");
    }
    s.assert_all_in_place();
    let alarms = s.tree.run(&["alarms", "--output", "json"]).json();
    assert_eq!(
        alarms["alarms"].as_array().map(Vec::len),
        Some(0),
        "{alarms}"
    );
}

/// A pass cannot record the restarts it owes (an injected error writing `restarts.json`),
/// and the next one, which finds that install in `pending.json` and installs its own, cannot
/// either, or is killed once its files are renamed: the record keeps both installs owed, so
/// the next pass restarts the pods of both. Before, the second install's record replaced
/// the first's, and etcd's restart, owed for `etcd/server.crt`, was lost: etcd went on
/// serving the old certificate.
#[test]
fn restarts_owed_by_an_install_left_recorded_survive_a_second_unrecorded_pass() {
    for second in ["restarts-record:error", "after-renames"] {
        let tree = Tree::new(LAYOUTS, "kubeadm");
        let manifests = kubeadm_manifests(&tree);
        let text = format!(
            "state_dir = {}\nvalidity_days = 365\nmanifests_dir = {}\nstatic_pod_wait_secs = 1\n\n\
             [[watch]]\npath = {}\nunits = []\nkubeconfigs = []\nstatic_pods = {:?}\n\
             on_renew = \"restart\"\n",
            toml_str(&tree.state),
            toml_str(&manifests),
            toml_str(&tree.abs("etc/kubernetes/pki")),
            KUBEADM_PODS,
        );
        fs::write(&tree.config, common::single_node(&text)).unwrap();
        let file = |f: &str| tree.abs(&format!("etc/kubernetes/pki/{f}"));
        // etcd/server.crt is read by etcd alone, front-proxy-client.crt by kube-apiserver
        // alone.
        for (cert, pod, spec) in [
            ("etcd/server.crt", "etcd", "restarts-record:error"),
            ("front-proxy-client.crt", "kube-apiserver", second),
        ] {
            let mut cmd = Command::new(common::failpoints::binary());
            cmd.arg("--config")
                .arg(&tree.config)
                .args(["renew", "--output", "json"])
                .arg(file(cert))
                .env("CERTRENEWD_FAILPOINT", spec);
            let r = pki::run_cmd(&mut cmd, &["renew", cert]);
            assert_ne!(r.code, 0, "{spec}: {cert}: {r}");
            if spec == "restarts-record:error" {
                assert_eq!(r.code, 1, "{spec}: {cert}: {r}");
                let pods = pods_of(&r.json());
                assert!(
                    pods.iter().any(|(p, s)| p == pod && s == "held_back"),
                    "{spec}: {cert}: {pods:?}: {r}"
                );
                assert!(!pods.iter().any(|(_, s)| s == "restarted"), "{cert}: {r}");
            }
            assert!(tree.state.join("pending.json").exists(), "{spec}: {cert}");
            assert!(!tree.state.join("restarts.json").exists(), "{spec}: {cert}");
        }
        // A file no pod reads: what this pass restarts is what the two before it owe.
        let health = file("etcd/healthcheck-client.crt");
        let kubelet = FakeKubelet::watch(&manifests);
        let r = tree.run(&["renew", "--output", "json", health.to_str().unwrap()]);
        let events = kubelet.finish();
        assert_eq!(r.code, 0, "{second}: {r}");
        let restarted = [
            ("etcd".to_string(), "restarted".to_string()),
            ("kube-apiserver".to_string(), "restarted".to_string()),
        ];
        assert_eq!(pods_of(&r.json()), restarted, "{second}: {r}");
        assert_eq!(
            events.keys().cloned().collect::<Vec<_>>(),
            ["etcd.yaml", "kube-apiserver.yaml"],
            "{second}: {events:?}"
        );
        assert!(!tree.state.join("pending.json").exists(), "{second}");
        assert!(!tree.state.join("restarts.json").exists(), "{second}");
    }
}

/// A `renew` by hand while another pass restarts its static pods for longer than
/// `lock_timeout_secs` (two pods, 3 s each, against 4 s): the holder marks each step, so
/// the waiter waits while the stage moves, then runs its own pass, instead of giving up.
#[test]
fn a_renew_waits_for_a_restart_stage_that_moves_past_lock_timeout() {
    let s = setup();
    s.config(3, true);
    let text = fs::read_to_string(&s.tree.config).unwrap();
    fs::write(&s.tree.config, format!("lock_timeout_secs = 4\n{text}")).unwrap();
    let holder = s.spawn_renew();
    let start = Instant::now();
    while s.manifest("etcd.yaml").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the etcd manifest never left the manifest directory"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = Instant::now();
    let r = pki::run_cmd(&mut s.command("renew"), &["renew"]);
    println!(
        "the second renew, {:.1}s after the stage began:\n{r}",
        waited.elapsed().as_secs_f64()
    );
    let first = holder.wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("nothing to renew"), "{r}");
    assert!(
        waited.elapsed() > Duration::from_secs(4),
        "it did not wait: {r}"
    );
    s.assert_all_in_place();
}
