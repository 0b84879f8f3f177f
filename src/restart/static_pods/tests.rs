use super::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// Waits `d` with the manifests out, as where a pod's end cannot be seen.
fn timed(d: Duration) -> impl AsyncFnOnce() -> Result<String, NotEnded> {
    async move || {
        tokio::time::sleep(d).await;
        Ok(format!("held out for {d:?}"))
    }
}

#[tokio::test]
async fn manifests_go_out_and_come_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    let state = dir.path().join("state");
    fs::create_dir(&manifests).unwrap();
    let m = manifests.join("etcd.yaml");
    fs::write(&m, "apiVersion: v1\nkind: Pod\n# keep me\n").unwrap();
    fs::set_permissions(&m, fs::Permissions::from_mode(0o600)).unwrap();
    let pods = vec![
        ("etcd".to_string(), m.clone()),
        ("gone".to_string(), manifests.join("gone.yaml")),
    ];
    let watcher = {
        let m = m.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while m.exists() {
                assert!(start.elapsed() < Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(5));
            }
            let out = std::time::Instant::now();
            while !m.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
            out.elapsed()
        })
    };
    let r = restart(
        &state,
        &pods,
        &Fence::default(),
        timed(Duration::from_millis(300)),
    )
    .await;
    let gone_for = watcher.join().unwrap();
    assert!(gone_for >= Duration::from_millis(250), "{gone_for:?}");
    assert!(r[0].ok, "{r:?}");
    assert!(!r[1].ok && r[1].detail.contains("not found"), "{r:?}");
    assert_eq!(
        fs::read_to_string(&m).unwrap(),
        "apiVersion: v1\nkind: Pod\n# keep me\n"
    );
    assert_eq!(
        fs::metadata(&m).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!record(&state).path().exists());
    assert_eq!(fs::read_dir(holding_dir(&state)).unwrap().count(), 0);
}

#[tokio::test]
async fn a_manifest_not_put_back_earlier_stays_recorded_through_the_next_restart() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    let state = dir.path().join("state");
    fs::create_dir(&manifests).unwrap();
    fs::create_dir_all(holding_dir(&state)).unwrap();
    // etcd could not go back: someone put a different manifest in its place.
    fs::write(manifests.join("etcd.yaml"), "someone else's").unwrap();
    fs::write(holding_dir(&state).join("etcd.yaml"), "ours").unwrap();
    let stuck = Held {
        manifest: manifests.join("etcd.yaml"),
        holding: holding_dir(&state).join("etcd.yaml"),
    };
    save(&state, std::slice::from_ref(&stuck)).unwrap();
    let api = manifests.join("kube-apiserver.yaml");
    fs::write(&api, "api").unwrap();
    let pods = [("kube-apiserver".to_string(), api.clone())];
    let r = restart(
        &state,
        &pods,
        &Fence::default(),
        timed(Duration::from_millis(10)),
    )
    .await;
    assert!(r[0].ok, "{r:?}");
    assert_eq!(fs::read_to_string(&api).unwrap(), "api");
    assert_eq!(load(&state).unwrap(), [stuck]);
}

#[tokio::test]
async fn a_pod_that_did_not_end_is_not_restarted_and_its_manifest_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let (manifests, state) = (dir.path().join("manifests"), dir.path().join("state"));
    fs::create_dir(&manifests).unwrap();
    let m = manifests.join("etcd.yaml");
    fs::write(&m, "etcd").unwrap();
    let pods = [("etcd".to_string(), m.clone())];
    let seen_out = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended = {
        let (m, seen_out) = (m.clone(), seen_out.clone());
        async move || {
            seen_out.store(!m.exists(), std::sync::atomic::Ordering::SeqCst);
            Err(NotEnded {
                from: "127.0.0.1:2379 (--listen-client-urls in etcd.yaml)".into(),
                secs: 2,
            })
        }
    };
    let r = restart(&state, &pods, &Fence::default(), ended).await;
    assert!(
        seen_out.load(std::sync::atomic::Ordering::SeqCst),
        "out while waited for"
    );
    assert!(!r[0].ok && r[0].not_restarted, "{r:?}");
    let back = format!(
        "its process did not end: 127.0.0.1:2379 (--listen-client-urls in etcd.yaml) still answered 2 s after the manifest left (kubelet did not stop the pod); its manifest is back in {}",
        manifests.display()
    );
    assert_eq!(r[0].detail, back);
    assert_eq!(fs::read_to_string(&m).unwrap(), "etcd");
    assert!(!record(&state).path().exists());
}

#[tokio::test]
async fn a_manifest_that_cannot_leave_is_not_restarted_and_nothing_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let (manifests, state) = (dir.path().join("manifests"), dir.path().join("state"));
    fs::create_dir(&manifests).unwrap();
    fs::create_dir_all(holding_dir(&state)).unwrap();
    let m = manifests.join("etcd.yaml");
    fs::write(&m, "etcd").unwrap();
    // Something of someone else's where it would be held: never overwritten.
    fs::write(holding_dir(&state).join("etcd.yaml"), "not ours").unwrap();
    let pods = [("etcd".to_string(), m.clone())];
    let waited = async || -> Result<String, NotEnded> { panic!("waited with nothing out") };
    let r = restart(&state, &pods, &Fence::default(), waited).await;
    assert!(!r[0].ok && r[0].not_restarted, "{r:?}");
    assert!(
        r[0].detail
            .starts_with("cannot move the manifest out, so it stayed in place"),
        "{r:?}"
    );
    assert_eq!(fs::read_to_string(&m).unwrap(), "etcd");
    let held = fs::read_to_string(holding_dir(&state).join("etcd.yaml")).unwrap();
    assert_eq!(held, "not ours");
}

#[test]
fn recovery_puts_held_manifests_back() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    let state = dir.path().join("state");
    fs::create_dir(&manifests).unwrap();
    fs::create_dir_all(holding_dir(&state)).unwrap();
    let held = |n: &str| Held {
        manifest: manifests.join(n),
        holding: holding_dir(&state).join(n),
    };
    // a: held (crash during the wait); b: never left; c: back, held copy not yet removed.
    fs::write(holding_dir(&state).join("a.yaml"), "a").unwrap();
    fs::write(manifests.join("b.yaml"), "b").unwrap();
    fs::write(manifests.join("c.yaml"), "c").unwrap();
    fs::write(holding_dir(&state).join("c.yaml"), "c").unwrap();
    save(&state, &[held("a.yaml"), held("b.yaml"), held("c.yaml")]).unwrap();
    let done = recover(&state, load(&state).unwrap()).unwrap();
    assert_eq!(done.len(), 2, "{done:?}");
    for n in ["a", "b", "c"] {
        assert_eq!(
            fs::read_to_string(manifests.join(format!("{n}.yaml"))).unwrap(),
            n
        );
    }
    assert!(!record(&state).path().exists());
    assert_eq!(fs::read_dir(holding_dir(&state)).unwrap().count(), 0);
    assert!(recover(&state, load(&state).unwrap()).unwrap().is_empty());
}
