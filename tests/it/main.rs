//! Every integration test that needs no booted controller, one module per area (the former
//! file names), built and linked once: as one binary per file, each linked `common` and every
//! dependency again, and they were most of the test build's disk and time (README, `.ci/run`).
//!
//! Its tests run in libtest's threads, as many as CPUs (`RUST_TEST_THREADS`): as many at once
//! as when each file was its own binary (cargo runs binaries one after another), so no gate
//! limits the heavy ones (sandboxes, etcd clusters). What changed is that tests of different
//! areas now meet: whatever a test holds on the machine must be unique across the binary.
//! Sandboxes hold only their temp dir and mount namespace; each sandbox etcd cluster holds
//! loopback ports (`common::etcd_e2e::Ports`, checked by `sandbox_etcd_port_bases_are_apart`
//! below).
//!
//! The binary runs in a network namespace of its own with only loopback up, entered before any
//! test starts (`loopback_only`): certrenewd and the tools the tests run dial the addresses
//! they read, and one beyond loopback fails at once instead of reaching another host.
//!
//! Not here: `tests/layering.rs` (reads `src/` only and needs no `common`; its own binary so
//! that `cargo test --test layering -- --nocapture` prints the import graph alone) and
//! `tests/controllers/` (booted Debian controllers, which take turns on the machine).

#[path = "../common/mod.rs"]
mod common;

mod alarms_apply;
mod alarms_e2e;
mod alarms_hook;
mod alarms_journald;
mod alarms_resilience;
mod backoff_systemd;
mod by_hand;
mod ca_renewal;
mod check_fixtures;
mod container_runtime;
mod checked_signatures;
mod coordinate_etcd;
mod crash_kill;
mod crash_kill_ca;
mod daemon_life;
mod daemon_systemd;
mod dbus_reconnect;
mod e2e_etcd;
mod fault_sweep;
mod hostile_fs;
mod hostile_parse;
mod install_errors;
mod kubeconfig_renew;
mod kubelet_client;
mod loopback_only;
mod man_pages;
mod metrics_readers;
mod no_hang;
mod operability;
mod operator_messages;
mod operator_output;
mod post_renew;
mod reload_proof;
mod renew_fixtures;
mod renew_go_etcd;
mod restart_contract;
mod restart_etcd;
mod restart_order;
mod restart_systemd;
mod rollback_systemd;
mod served_names;
mod static_pods;
mod unit_reading;
mod unwatched;

/// Every sandbox etcd cluster of this binary listens on loopback ports from its base + 179 to
/// base + 380 (`common::etcd_e2e::Ports`), in the machine's network namespace, and any two
/// tests of the binary may run at once: each base must be 500 or more from every other, and
/// below Linux's ephemeral ports (32768 and up), where another test's client connection may
/// hold a port when a member binds it.
#[test]
fn sandbox_etcd_port_bases_are_apart() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it");
    let mut bases: Vec<(u32, String)> = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests/it") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a test module");
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name == "main.rs" {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            // `Ports { base: N }`, and `PORT_BASE: &str = "N"` given to SANDBOX_ETCD_PORT_BASE.
            let rest = match (
                line.split_once("Ports { base: "),
                line.split_once("PORT_BASE: &str = \""),
            ) {
                (Some((_, rest)), _) | (None, Some((_, rest))) => rest,
                (None, None) => continue,
            };
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let base = digits
                .parse()
                .unwrap_or_else(|_| panic!("{name}:{}: {line}", i + 1));
            bases.push((base, format!("{name}:{}", i + 1)));
        }
    }
    assert!(
        bases.len() >= 10,
        "found only {bases:?}: has the way tests write a base changed?"
    );
    bases.sort();
    for (base, at) in &bases {
        assert!(
            base + 380 < 32768,
            "etcd port base {base} ({at}) reaches Linux's ephemeral ports"
        );
    }
    for pair in bases.windows(2) {
        let ((a, at_a), (b, at_b)) = (&pair[0], &pair[1]);
        assert!(
            b - a >= 500,
            "etcd port bases {a} ({at_a}) and {b} ({at_b}) overlap"
        );
    }
}
