use time::macros::datetime;

use super::*;

fn policy(validity_days: Option<u32>) -> Policy {
    Policy {
        renew_before_days: 15,
        ca_warning_days: 180,
        force: false,
        only: None,
        validity_days,
    }
}

fn item<'a>(inv: &Inventory, p: &'a Plan, file: &str) -> &'a PlanItem {
    let i = inv
        .certs
        .iter()
        .position(|c| c.path.file_name() == Some(file.as_ref()) && c.index == 0)
        .unwrap_or_else(|| panic!("{file} not in the inventory"));
    &p.items[i]
}

#[test]
fn the_plan_carries_the_lifetime_a_renewal_gives_each_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    // A month before the leaves end (2030-01-01): not due yet.
    let now = datetime!(2029-12-01 0:00 UTC);
    let own = plan(&inv, &policy(None), now);
    // The leaves were issued for a year (2029-01-01 to 2030-01-01): that is kept.
    assert_eq!(
        item(&inv, &own, "a.crt").lifetime,
        Some(Duration::days(365))
    );
    assert_eq!(
        item(&inv, &own, "ca.crt").lifetime,
        None,
        "a CA is not given one"
    );
    let set = plan(&inv, &policy(Some(90)), now);
    assert_eq!(item(&inv, &set, "a.crt").lifetime, Some(Duration::days(90)));
    assert!(!item(&inv, &own, "a.crt").renew, "not due");
}

#[test]
fn lifetime_is_the_setting_else_the_old_span_else_kubeadms_year() {
    let dir = tempfile::tempdir().unwrap();
    let inv = crate::test_pki::tree(dir.path());
    let facts = |file: &str| {
        inv.certs
            .iter()
            .find(|c| c.path.file_name() == Some(file.as_ref()))
            .unwrap()
            .facts
            .clone()
    };
    let ca = facts("ca.crt");
    let mut leaf = facts("a.crt");
    leaf.not_before = datetime!(2026-01-01 0:00 UTC);
    leaf.not_after = datetime!(2028-01-01 0:00 UTC);
    assert_eq!(lifetime(&leaf, &ca, None), Duration::days(730));
    assert_eq!(lifetime(&leaf, &ca, Some(30)), Duration::days(30));
    // kubeadm signs with notBefore = the CA's: the span counts the CA's age, not a choice.
    leaf.not_before = ca.not_before;
    assert_eq!(
        lifetime(&leaf, &ca, None),
        Duration::days(DEFAULT_LIFETIME_DAYS.into())
    );
}

#[test]
fn only_a_files_first_certificate_is_renewable_in_place() {
    let dir = tempfile::tempdir().unwrap();
    crate::test_pki::tree(dir.path());
    let bundle: Vec<u8> = ["a.crt", "b.crt"]
        .iter()
        .flat_map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
    std::fs::write(dir.path().join("bundle.pem"), bundle).unwrap();
    let inv = Inventory::scan(&[dir.path().to_path_buf()]);
    let p = plan(&inv, &policy(None), datetime!(2029-12-25 0:00 UTC));
    let second = inv
        .certs
        .iter()
        .position(|c| c.path == dir.path().join("bundle.pem") && c.index == 1)
        .expect("the bundle's second certificate");
    let it = &p.items[second];
    assert_eq!(it.status, Status::Unrenewable, "{it:?}");
    let why = it.reason.as_deref().unwrap_or("");
    assert!(why.contains("certificate 2 of 2 in a bundle file"), "{why}");
    // The first certificate of the same file is not refused for being in a bundle.
    let first = inv
        .certs
        .iter()
        .position(|c| c.path == dir.path().join("bundle.pem") && c.index == 0)
        .expect("the bundle's first certificate");
    let why = p.items[first].reason.as_deref().unwrap_or("");
    assert!(!why.contains("bundle"), "{why}");
}
