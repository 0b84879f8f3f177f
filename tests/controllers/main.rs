//! The tests on booted Debian controllers (`systemd-nspawn` on `tests/controllers/base.sh`'s
//! root, the `.deb` installed; `common::controllers`), one module per area, in one binary
//! apart from `tests/it`: they need root, the `.deb` and minutes each, and `.ci/run` gives
//! a failure of theirs (timed elections on a shared machine) one re-run by test name.
//!
//! At most one three-node cluster, or two single controllers, run at once in this process
//! (`common::controllers::Turn`), whatever the number of test threads.

// The helpers shared with `tests/it` (PKIs, openssl, sandbox), of which this binary uses a
// few: their dead code shows in `tests/it`, which uses all of them.
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod shared;

/// `tests/common`'s helpers, and those only these tests use (booting controllers, the HA
/// cluster, the probes, the kubelet stand-in): `tests/controllers/common/`.
mod common {
    pub use crate::shared::*;

    pub mod controllers;
    pub mod etcd_probe;
    pub mod ha;
    pub mod kubelet;
    pub mod tls_probe;
}

mod apiserver_ready;
mod cluster_view;
mod faults;
mod ha;
mod harness;
mod kubeadm_ha;
mod kubespray_ha;
mod outage;
mod reboot;
mod shapes;

/// The turns never give out more than the machine's two slots, whatever tests ask at once,
/// and a test that holds one boots more controllers on it without waiting (no root needed).
#[test]
fn turns_give_out_at_most_two_slots_and_nest() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NOW: AtomicUsize = AtomicUsize::new(0);
    static MOST: AtomicUsize = AtomicUsize::new(0);
    let threads: Vec<_> = [1, 2, 1, 3, 1, 2]
        .into_iter()
        .map(|slots| {
            std::thread::spawn(move || {
                let turn = common::controllers::Turn::take(slots);
                // A cluster's nodes, or a second boot in the same test: nothing more taken.
                let nested = common::controllers::Turn::take(1);
                let now = NOW.fetch_add(slots.min(2), Ordering::SeqCst) + slots.min(2);
                MOST.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                NOW.fetch_sub(slots.min(2), Ordering::SeqCst);
                drop(nested);
                drop(turn);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread taking a turn");
    }
    assert_eq!(MOST.load(Ordering::SeqCst), 2, "slots in use at most");
}
