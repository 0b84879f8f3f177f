//! The order of the restart stage and the gate, through `restart::restart` with the
//! in-memory systemd and real manifest files in a temp dir.

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::*;
use crate::components::NodeReading;
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::restart::fake::{FakeBehaviour, FakeUnits};
use crate::restart::owed::{self, Owed};
use crate::restart::recording_gate::{RecordingGate as Recorder, missing};
use crate::restart::{RestartOutcomes, restart};

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn order(steps: &[Step]) -> Vec<String> {
    steps.iter().map(|s| s.target.to_string()).collect()
}

#[test]
fn etcd_first_then_the_apiserver_then_the_rest_in_the_given_order() {
    let units = names(&[
        "kubelet.service",
        "etcd.service",
        "containerd.service",
        "kube-apiserver.service",
        "etcd-events.service",
        "kubelet.service",
    ]);
    let pods = names(&["kube-scheduler", "kube-apiserver", "etcd", "etcd-backup"]);
    assert_eq!(
        order(&steps(&units, &pods)),
        [
            "etcd.service",
            "etcd-events.service",
            "static pod etcd",
            "kube-apiserver.service",
            "static pod kube-apiserver",
            "kubelet.service",
            "containerd.service",
            "static pod kube-scheduler",
            "static pod etcd-backup",
        ]
    );
    assert!(steps(&[], &[]).is_empty());
}

#[test]
fn a_unit_or_pod_running_etcd_under_another_name_is_gated_as_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: store\nspec:\n  containers:\n  - name: store\n    command:\n    - etcd\n    - --name=store\n";
    fs::write(dir.path().join("store.yaml"), pod).unwrap();
    let unit = |name: &str, program: &str, argv: &[&str]| crate::components::UnitSettings {
        unit: name.into(),
        exec_start: vec![(program.into(), names(argv))],
        environment: Vec::new(),
        environment_files: Vec::new(),
    };
    let node = NodeReading::read_with(
        dir.path(),
        &[
            unit(
                "kv-store.service",
                "/usr/bin/etcd",
                &["etcd", "--name", "c1"],
            ),
            unit(
                "etcd-wrapper.service",
                "/bin/sh",
                &["sh", "-c", "exec etcd"],
            ),
            unit(
                "front.service",
                "/usr/local/bin/kube-apiserver",
                &["kube-apiserver"],
            ),
        ],
    );
    let units = names(&[
        "kubelet.service",
        "front.service",
        "kv-store.service",
        "etcd-wrapper.service",
    ]);
    let steps = steps_knowing(&units, &names(&["store"]), &node, dir.path(), &[]);
    assert_eq!(
        order(&steps),
        [
            "kv-store.service",
            "etcd-wrapper.service",
            "static pod store",
            "front.service",
            "kubelet.service",
        ]
    );
    assert_eq!(steps[0].component, Component::Etcd);
    // By its name alone, as before: no quorum gate.
    assert_eq!(
        Step::new(steps[0].target.clone()).component,
        Component::Other
    );
}

/// What the reading cannot see (a script whose command names no program), a watch says:
/// gated and ordered as what it says.
#[test]
fn a_watch_says_what_a_unit_or_pod_runs_where_the_reading_cannot_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeReading::default();
    let units = names(&["kubelet.service", "front.service", "kv-store.service"]);
    let pods = names(&["store"]);
    let unsaid = steps_knowing(&units, &pods, &node, dir.path(), &[]);
    assert!(unsaid.iter().all(|s| s.component == Component::Other));
    let said = [
        ("kv-store.service".to_string(), Program::Etcd),
        ("front.service".to_string(), Program::ApiServer),
        ("store".to_string(), Program::Etcd),
    ];
    let steps = steps_knowing(&units, &pods, &node, dir.path(), &said);
    assert_eq!(
        order(&steps),
        [
            "kv-store.service",
            "static pod store",
            "front.service",
            "kubelet.service",
        ]
    );
    assert_eq!(steps[0].component, Component::Etcd);
    assert_eq!(steps[1].component, Component::Etcd);
    assert_eq!(steps[2].component, Component::ApiServer);
}

#[test]
fn components_come_from_the_names() {
    let of = |t: Target| Component::of(&t);
    assert_eq!(of(Target::Unit("etcd.service".into())), Component::Etcd);
    assert_eq!(of(Target::Unit("etcd2.service".into())), Component::Etcd);
    assert_eq!(of(Target::Unit("etcd.socket".into())), Component::Other);
    assert_eq!(
        of(Target::Unit("kube-apiserver.service".into())),
        Component::ApiServer
    );
    assert_eq!(of(Target::Pod("etcd".into())), Component::Etcd);
    assert_eq!(of(Target::Pod("etcd-events".into())), Component::Other);
    assert_eq!(
        of(Target::Pod("kube-apiserver".into())),
        Component::ApiServer
    );
    assert_eq!(of(Target::Pod("kubelet".into())), Component::Other);
    assert!(Component::Etcd < Component::ApiServer && Component::ApiServer < Component::Other);
    assert_eq!(Target::Pod("etcd".into()).to_string(), "static pod etcd");
    assert_eq!(
        Target::Unit("etcd.service".into()).to_string(),
        "etcd.service"
    );
}

struct Node {
    _dir: tempfile::TempDir,
    settings: Settings,
    manifests: PathBuf,
}

/// A node with the three kubeadm control-plane manifests and one watch restarting
/// kube-apiserver.service, kubelet.service and etcd.service and the static pods.
fn node(rollback: bool) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifests = d.join("manifests");
    fs::create_dir_all(&manifests).unwrap();
    fs::create_dir_all(d.join("pki")).unwrap();
    for p in ["etcd", "kube-apiserver", "kube-scheduler"] {
        fs::write(manifests.join(format!("{p}.yaml")), format!("name: {p}\n")).unwrap();
    }
    let toml = format!(
        "state_dir = \"{d}/state\"\nmanifests_dir = \"{d}/manifests\"\n\
         rollback_on_failure = {rollback}\n\
         [[watch]]\npath = \"{d}/pki\"\n\
         units = [\"kubelet.service\", \"kube-apiserver.service\", \"etcd.service\"]\n\
         static_pods = [\"kube-scheduler\", \"kube-apiserver\", \"etcd\"]\n",
        d = d.display()
    );
    let mut settings = Settings::from_toml(&toml, None).unwrap();
    settings.static_pod_wait = std::time::Duration::from_millis(20);
    Node {
        _dir: dir,
        settings,
        manifests,
    }
}

fn everything() -> Owed {
    Owed {
        units: names(&["kubelet.service", "kube-apiserver.service", "etcd.service"]),
        pods: names(&["kube-scheduler", "kube-apiserver", "etcd"]),
        ..Owed::default()
    }
}

async fn run(n: &Node, fake: &FakeUnits, gate: &mut Recorder) -> RestartOutcomes {
    let connect = async || Ok(fake.clone());
    let inv = Inventory::default();
    let node = NodeReading::read(&n.settings.manifests_dir);
    restart(&n.settings, &inv, &node, &[], everything(), connect, gate)
        .await
        .unwrap()
}

fn fake() -> FakeUnits {
    FakeUnits::new()
        .ok("etcd.service")
        .ok("kube-apiserver.service")
        .ok("kubelet.service")
}

#[tokio::test]
async fn ungated_each_step_is_back_before_the_next_and_one_manifest_at_a_time() {
    let n = node(true);
    let fake = fake();
    let mut gate = Recorder {
        manifests: Some(n.manifests.clone()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    assert!(out.failures().is_empty(), "{:?}", out.failures());
    assert!(out.held.is_empty());
    // Every manifest is in place at every before and after: no two were ever out together.
    assert_eq!(
        gate.log(),
        [
            "before etcd.service",
            "after etcd.service ok=true",
            "before static pod etcd",
            "after static pod etcd ok=true",
            "before kube-apiserver.service",
            "after kube-apiserver.service ok=true",
            "before static pod kube-apiserver",
            "after static pod kube-apiserver ok=true",
            "before kubelet.service",
            "after kubelet.service ok=true",
            "before static pod kube-scheduler",
            "after static pod kube-scheduler ok=true",
            "finish",
        ]
    );
    let calls: Vec<String> = fake.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(
        calls,
        ["etcd.service", "kube-apiserver.service", "kubelet.service"]
    );
    assert!(owed::load(&n.settings.state_dir).unwrap().is_empty());
}

#[tokio::test]
async fn refused_before_etcd_nothing_is_restarted_all_is_held_and_owed() {
    let n = node(true);
    let fake = fake();
    let mut gate = Recorder {
        refuse_before: Some("etcd.service".into()),
        manifests: Some(n.manifests.clone()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert!(out.units.is_empty() && out.pods.is_empty());
    assert!(missing(&n.manifests).is_empty());
    assert_eq!(gate.log(), ["before etcd.service", "finish"]);
    let held: Vec<String> = out.held.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(
        held,
        [
            "etcd.service",
            "static pod etcd",
            "kube-apiserver.service",
            "static pod kube-apiserver",
            "kubelet.service",
            "static pod kube-scheduler",
        ]
    );
    // One cause, said once, naming every restart it held.
    assert_eq!(
        out.failures(),
        [
            "6 restarts held (etcd.service, static pod etcd, kube-apiserver.service, static pod kube-apiserver, kubelet.service, static pod kube-scheduler): the restart lock was not had in time"
        ]
    );
    // Nothing rolled back (nothing failed), everything still owed.
    assert!(out.rolled_back.is_empty());
    let still = owed::load(&n.settings.state_dir).unwrap();
    let mut units = still.units.clone();
    units.sort();
    assert_eq!(
        units,
        ["etcd.service", "kube-apiserver.service", "kubelet.service"]
    );
    let mut pods = still.pods.clone();
    pods.sort();
    assert_eq!(pods, ["etcd", "kube-apiserver", "kube-scheduler"]);
}

#[tokio::test]
async fn an_api_server_held_for_no_other_ready_holds_it_alone_and_the_rest_goes_on() {
    let n = node(true);
    let fake = fake();
    let mut gate = Recorder {
        unhealthy: Some(Component::ApiServer),
        manifests: Some(n.manifests.clone()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    let calls: Vec<String> = fake.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(calls, ["etcd.service", "kubelet.service"]);
    let held: Vec<String> = out.held.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(
        held,
        ["kube-apiserver.service", "static pod kube-apiserver"]
    );
    assert!(missing(&n.manifests).is_empty());
    let restarted: Vec<String> = out.pods.iter().map(|p| p.pod.clone()).collect();
    assert_eq!(restarted, ["etcd", "kube-scheduler"]);
}

#[tokio::test]
async fn etcd_held_for_a_member_not_healthy_holds_etcd_alone_and_the_rest_goes_on() {
    let n = node(true);
    let fake = fake();
    let mut gate = Recorder {
        unhealthy: Some(Component::Etcd),
        manifests: Some(n.manifests.clone()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    let calls: Vec<String> = fake.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(calls, ["kube-apiserver.service", "kubelet.service"]);
    let held: Vec<String> = out.held.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(held, ["etcd.service", "static pod etcd"]);
    assert!(
        out.held
            .iter()
            .all(|(_, r)| *r == Hold::Unhealthy("member m2 is not healthy".into()))
    );
    assert!(missing(&n.manifests).is_empty());
    assert_eq!(
        gate.log(),
        [
            "before etcd.service",
            "before static pod etcd",
            "before kube-apiserver.service",
            "after kube-apiserver.service ok=true",
            "before static pod kube-apiserver",
            "after static pod kube-apiserver ok=true",
            "before kubelet.service",
            "after kubelet.service ok=true",
            "before static pod kube-scheduler",
            "after static pod kube-scheduler ok=true",
            "finish",
        ]
    );
    // etcd's restarts alone stay owed.
    let still = owed::load(&n.settings.state_dir).unwrap();
    assert_eq!(still.units, ["etcd.service"]);
    assert_eq!(still.pods, ["etcd"]);
}

#[tokio::test]
async fn refused_after_etcd_the_rest_is_held_and_owed() {
    let n = node(true);
    let fake = fake();
    let mut gate = Recorder {
        refuse_after: Some("static pod etcd".into()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    let calls: Vec<String> = fake.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(calls, ["etcd.service"]);
    assert_eq!(out.pods.len(), 1);
    assert!(
        out.pods[0].ok && out.pods[0].pod == "etcd",
        "{:?}",
        out.pods
    );
    let held: Vec<String> = out.held.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(
        held,
        [
            "kube-apiserver.service",
            "static pod kube-apiserver",
            "kubelet.service",
            "static pod kube-scheduler",
        ]
    );
    assert!(
        out.held
            .iter()
            .all(|(_, r)| *r == Hold::Unhealthy("the local member did not catch up".into()))
    );
    assert_eq!(gate.log().last().unwrap(), "finish");
    let still = owed::load(&n.settings.state_dir).unwrap();
    assert!(!still.units.contains(&"etcd.service".to_string()));
    assert!(!still.pods.contains(&"etcd".to_string()));
    assert_eq!(still.units.len(), 2, "{still:?}");
    assert_eq!(still.pods.len(), 2, "{still:?}");
}

#[tokio::test]
async fn the_roll_back_starts_what_is_down_without_the_gate_and_finish_comes_last() {
    let n = node(true);
    let fake = fake().fail("kube-apiserver.service", "exit-code");
    let mut gate = Recorder::default();
    let mut owed = everything();
    owed.changes.push(crate::renew::pending::Change {
        cert: n.settings.watches[0].path.join("apiserver.crt"),
        key: None,
        cert_backup: n.settings.state_dir.join("backup/apiserver.crt"),
        key_backup: None,
        ..Default::default()
    });
    let connect = async || Ok(fake.clone());
    let inv = Inventory::default();
    let node = NodeReading::read(&n.settings.manifests_dir);
    let out = restart(&n.settings, &inv, &node, &[], owed, connect, &mut gate)
        .await
        .unwrap();
    assert!(!out.rolled_back.is_empty(), "{out:?}");
    let log = gate.log();
    // kube-apiserver did not come back: it is down, and starting it again asks no gate (a
    // member that is down must never wait for the lock); the gate is released last.
    let tail: Vec<&str> = log.iter().skip(12).map(String::as_str).collect();
    assert_eq!(tail, ["finish"], "{log:?}");
    let calls = fake.calls();
    assert_eq!(
        calls.last().unwrap(),
        &("kube-apiserver.service".to_string(), RestartMode::Restart)
    );
}

#[tokio::test]
async fn a_lock_lost_between_the_gate_and_the_job_restarts_no_unit_and_moves_no_manifest() {
    let n = node(false);
    let fake = fake();
    let mut gate = Recorder {
        fence_lost: true,
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    // No unit's job was queued; each is held, says why, and is owed (not a failed restart:
    // nothing was restarted, so nothing is rolled back).
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert!(out.units.is_empty(), "{:?}", out.units);
    let etcd = out
        .held
        .iter()
        .find(|(t, _)| t.to_string() == "etcd.service");
    let etcd = etcd.unwrap_or_else(|| panic!("{:?}", out.held));
    assert!(
        matches!(&etcd.1, Hold::NotRestarted(d)
            if d.starts_with("not restarted: the restart lock's lease was not confirmed")),
        "{:?}",
        etcd.1
    );
    // Asked right before each manifest would move: none moved; each held, owed, and said.
    assert!(out.pods.is_empty(), "{:?}", out.pods);
    let held: Vec<(String, bool)> = (out.held.iter())
        .filter(|(t, _)| t.to_string().starts_with("static pod"))
        .map(|(t, why)| {
            let said = "not restarted: the restart lock's lease was not confirmed; its manifest stayed in place";
            let kind = matches!(why, Hold::NotRestarted(d) if d.starts_with(said));
            (t.to_string(), kind)
        })
        .collect();
    let pods = [
        "static pod etcd",
        "static pod kube-apiserver",
        "static pod kube-scheduler",
    ];
    assert_eq!(held, pods.map(|p| (p.to_string(), true)), "{:?}", out.held);
    let owed = crate::restart::owed::load(&n.settings.state_dir).unwrap();
    assert_eq!(owed.pods.len(), 3, "{owed:?}");
}

#[tokio::test]
async fn a_check_after_the_last_step_that_fails_is_said_not_lost() {
    // Nothing follows the last step to hold back: the failed check after it (this node's
    // member not healthy in time, say) is a failure of the stage all the same.
    let n = node(false);
    let fake = fake();
    let mut gate = Recorder {
        refuse_after: Some("static pod kube-scheduler".into()),
        ..Recorder::default()
    };
    let out = run(&n, &fake, &mut gate).await;
    assert!(out.held.is_empty(), "{:?}", out.held);
    assert_eq!(
        out.failures(),
        ["static pod kube-scheduler: restarted, but the local member did not catch up"]
    );
}

/// Without roll-back, a unit that hangs, fails or is not on the node does not stop the
/// steps after it: each is asked once, in the stage's order, and reported by its name.
#[tokio::test]
async fn a_unit_that_hangs_fails_or_is_missing_does_not_stop_the_steps_after_it() {
    let mut n = node(false);
    n.settings.restart_timeout = std::time::Duration::from_millis(20);
    let fake = FakeUnits::new()
        .hang("etcd.service")
        .fail("kube-apiserver.service", "exit-code");
    let mut gate = Recorder::default();
    let out = run(&n, &fake, &mut gate).await;
    let calls: Vec<String> = fake.calls().into_iter().map(|(u, _)| u).collect();
    assert_eq!(
        calls,
        ["etcd.service", "kube-apiserver.service", "kubelet.service"]
    );
    let got: Vec<(&str, bool)> = out.units.iter().map(|u| (u.unit.as_str(), u.ok)).collect();
    assert_eq!(
        got,
        [
            ("etcd.service", false),
            ("kube-apiserver.service", false),
            // try-restart of a unit not on the node: nothing to restart, nothing wrong
            ("kubelet.service", true)
        ]
    );
    assert_eq!(out.units[2].job_result, None, "{:?}", out.units[2]);
    let pods: Vec<&str> = out.pods.iter().map(|p| p.pod.as_str()).collect();
    assert_eq!(pods, ["etcd", "kube-apiserver", "kube-scheduler"]);
}

#[tokio::test]
async fn a_unit_try_restart_leaves_inactive_is_not_checked_after_as_if_restarted() {
    // Nothing was restarted, so nothing came back: a gate that waits for etcd's member
    // after its restart would wait for a member nobody started.
    let n = node(true);
    let fake = fake();
    fake.set("etcd.service", FakeBehaviour::Inactive);
    let mut gate = Recorder::default();
    let out = run(&n, &fake, &mut gate).await;
    assert!(out.failures().is_empty(), "{:?}", out.failures());
    let log = gate.log();
    assert!(log.contains(&"before etcd.service".to_string()), "{log:?}");
    assert!(
        !log.iter().any(|l| l.starts_with("after etcd.service")),
        "{log:?}"
    );
    assert!(
        log.contains(&"after kube-apiserver.service ok=true".to_string()),
        "{log:?}"
    );
}

/// New key pairs for etcd.service at its step (`rotate_keys`): renewed and installed
/// between a stop and a start, never beside the running member; with the lock lost before
/// the stop, nothing is stopped or installed, and the certificate stays due.
#[tokio::test]
async fn new_key_pairs_are_installed_with_the_member_stopped_or_not_at_all() {
    use crate::renew::{RenewOutcome, RenewResult};
    use crate::restart::sequence::at_step::{AtStep, Deferred};
    let n = node(true);
    let node = NodeReading::read(&n.settings.manifests_dir);
    let inv = Inventory::default();
    for fence_lost in [false, true] {
        let fake = fake();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let at = AtStep {
            steps: vec![(
                Target::Unit("etcd.service".into()),
                vec![Deferred {
                    cert: 0,
                    path: "/pki/etcd/server.crt".into(),
                    watch: 0,
                }],
            )],
            restart_too: Vec::new(),
            renew: Box::new({
                let (fake, seen) = (fake.clone(), seen.clone());
                move |certs: &[usize]| {
                    // What systemd was asked by the time the pair is installed.
                    seen.lock()
                        .unwrap()
                        .push((fake.stops(), fake.calls().len()));
                    (certs.iter())
                        .map(|&cert| RenewOutcome {
                            cert,
                            path: "/pki/etcd/server.crt".into(),
                            watch: 0,
                            result: RenewResult::Failed {
                                reason: "the test's renewer".into(),
                            },
                        })
                        .collect()
                }
            }),
            stop_first: true,
            pending: None,
        };
        let mut gate = Recorder {
            fence_lost,
            ..Recorder::default()
        };
        let connect = async || Ok(fake.clone());
        let out = crate::restart::restart_with(
            &n.settings,
            &inv,
            &node,
            &[],
            Owed::default(),
            &at,
            connect,
            &mut gate,
        )
        .await
        .unwrap();
        let seen = seen.lock().unwrap().clone();
        match fence_lost {
            false => {
                assert_eq!(seen, [(vec!["etcd.service".to_string()], 0)]);
                assert_eq!(
                    fake.calls(),
                    [("etcd.service".to_string(), RestartMode::Restart)]
                );
                let unit = &out.units[0];
                assert!(unit.ok, "{unit:?}");
                assert!(
                    unit.detail
                        .starts_with("stopped to install its new key pairs with nothing reading them, then restarted"),
                    "{}",
                    unit.detail
                );
            }
            true => {
                assert!(seen.is_empty(), "nothing installed: {seen:?}");
                assert!(fake.stops().is_empty() && fake.calls().is_empty());
                let [renewed] = &out.renewed[..] else {
                    panic!("{:?}", out.renewed);
                };
                assert!(
                    matches!(&renewed.result, RenewResult::Failed { reason } if reason.contains("it stays due")),
                    "{renewed:?}"
                );
            }
        }
    }
}

/// This node's etcd member, a static pod, is started without the lock only when the
/// container runtime reports no container of it that runs: moving its manifest stops a pod
/// that runs. A runtime that cannot be asked holds the start, the manifest never moved.
#[tokio::test]
async fn a_static_pod_is_not_started_without_the_lock_when_the_runtime_cannot_say() {
    let n = node(false);
    let fake = fake();
    let mut gate = Recorder {
        start_only: true,
        manifests: Some(n.manifests.clone()),
        ..Recorder::default()
    };
    let sock = n.manifests.with_file_name("containerd.sock");
    let endpoint = format!("--container-runtime-endpoint=unix://{}", sock.display());
    let mut node = NodeReading::read(&n.settings.manifests_dir);
    node.units = crate::restart::cri::tests::kubelet(&["/usr/bin/kubelet", &endpoint]).units;
    let owed = Owed {
        pods: names(&["etcd"]),
        ..Owed::default()
    };
    let connect = async || Ok(fake.clone());
    let inv = Inventory::default();
    let out = restart(&n.settings, &inv, &node, &[], owed, connect, &mut gate)
        .await
        .unwrap();
    assert!(out.pods.is_empty(), "{:?}", out.pods);
    let held: Vec<(String, Hold)> = (out.held.iter())
        .map(|(t, why)| (t.to_string(), why.clone()))
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    let (target, why) = &held[0];
    assert_eq!(target, "static pod etcd");
    let Hold::NotRestarted(why) = why else {
        panic!("not held as not restarted: {why:?}")
    };
    assert!(
        why.contains(&format!("the container runtime at {} did not answer", sock.display()))
            && why.contains("only a member the container runtime reports no running container of is started without the restart lock"),
        "{why}"
    );
    assert!(
        gate.log().iter().all(|l| !l.contains("out:")),
        "a manifest moved: {:?}",
        gate.log()
    );
    let still = owed::load(&n.settings.state_dir).unwrap();
    assert_eq!(still.pods, ["etcd"], "{still:?}");
}

/// What a roll-back did is a value until the 250.003 says it: each says the sentence the
/// alarm has always carried, for an operator who searches the journal for it.
#[test]
fn what_a_roll_back_did_is_said_in_the_words_of_the_alarm() {
    let cert = PathBuf::from("/pki/apiserver.crt");
    let unit = Target::Unit("etcd.service".into());
    let mut back = UnitRestart::failed("etcd.service", "job failed");
    let failed = back.clone();
    back.ok = true;
    let pod = static_pods::PodRestart {
        pod: "kube-apiserver".into(),
        manifest: "/manifests/kube-apiserver.yaml".into(),
        ok: true,
        detail: "manifest out of the directory for 2 s".into(),
        not_restarted: false,
    };
    let on = time::macros::datetime!(2026-01-02 03:04:05 UTC);
    let said = [
        Undone::Restored(cert.clone()),
        Undone::NotRestored(cert.clone(), "disk full".into()),
        Undone::PreviousExpired(cert.clone(), on),
        Undone::Unit(back),
        Undone::Unit(failed),
        Undone::Pod(pod),
        Undone::Held(unit.clone(), Hold::Refused("lock held by node-b".into())),
        Undone::Refused(unit, "unknown issuer".into()),
    ]
    .map(|u| u.to_string());
    assert_eq!(
        said,
        [
            "/pki/apiserver.crt rolled back to the previous certificate",
            "/pki/apiserver.crt could not be rolled back: disk full",
            "/pki/apiserver.crt not rolled back: the previous certificate expired on 2026-01-02T03:04:05Z, so the new one stays",
            "etcd.service after rollback: active again",
            "etcd.service after rollback: job failed",
            "static pod kube-apiserver after rollback: manifest out of the directory for 2 s",
            "etcd.service after rollback: not started again, held back: lock held by node-b",
            "etcd.service: the renewed certificate was refused, and rolled back: unknown issuer",
        ]
    );
}
