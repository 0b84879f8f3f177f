//! A certificate file swapped after the scan, before its renewal reads it again.

use super::{RenewOptions, RenewResult, renew};
use crate::plan::{Policy, plan};

/// A FIFO put in the place of a certificate after the scan: its renewal fails at once,
/// naming the file and why, never waits for a writer that does not come (the state lock
/// held all that time).
#[test]
fn a_certificate_swapped_for_a_fifo_before_its_renewal_fails_it_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let a = dir.path().join("a.crt");
    let policy = Policy {
        renew_before_days: 15,
        ca_warning_days: 180,
        force: true,
        only: Some(vec![a.clone()]),
        validity_days: Some(365),
        ..Policy::default()
    };
    let p = plan(
        &inv,
        Default::default(),
        &policy,
        time::OffsetDateTime::now_utc(),
    );
    std::fs::remove_file(&a).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&a)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let opts = RenewOptions {
        rotate_keys: false,
        renew_before_days: 15,
        pending: super::pending::Record::new(&dir.path().join("state"), None),
        backup_dir: dir.path().join("state/backup"),
        roots: vec![dir.path().to_path_buf()],
        backup_keep: 10,
        backup_max_age_days: 365,
        ca_agreement: None,
        fresh: Vec::new(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = renew(&inv, &p, &opts);
        let said: Vec<String> = out
            .iter()
            .map(|o| match &o.result {
                RenewResult::Failed { reason } => format!("{}: failed: {reason}", o.path.display()),
                _ => format!("{}: not failed", o.path.display()),
            })
            .collect();
        let _ = tx.send(said);
    });
    let said = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("renewing {} hung on the FIFO", a.display()));
    println!("{said:?}");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(&a.display().to_string())
            && said[0].contains("not a regular file (a FIFO)"),
        "{said:?}"
    );
}
