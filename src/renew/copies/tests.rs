use super::*;

/// A self-signed CA and a re-issue of it: same key, subject and key identifier.
fn ca_pair() -> (CertFacts, CertFacts, CertFacts) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "etcd-ca");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_identifier_method = rcgen::KeyIdMethod::Sha256;
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2030, 1, 1);
    let old = params.self_signed(&key).unwrap();
    params.not_before = rcgen::date_time_ymd(2029, 1, 1);
    params.not_after = rcgen::date_time_ymd(2039, 1, 1);
    params.serial_number = Some(rcgen::SerialNumber::from(7u64));
    let new = params.self_signed(&key).unwrap();
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other = other.self_signed(&other_key).unwrap();
    let parse = |c: &rcgen::Certificate| CertFacts::parse(c.der().to_vec()).unwrap();
    (parse(&old), parse(&new), parse(&other))
}

fn swap_to<'a>(currents: &'a [Current]) -> impl FnMut(&CertFacts) -> Option<Vec<u8>> + 'a {
    move |old| newer(currents, old).map(|c| c.facts.der.clone())
}

#[test]
fn a_bundle_keeps_its_other_certificates_text_and_order() {
    let (old, new, other) = ca_pair();
    let currents = [Current {
        path: "/etc/etcd/ca.crt".into(),
        facts: new.clone(),
        renewing: false,
    }];
    let bundle = format!(
        "# trust bundle\n{}\n{}",
        pem::encode("CERTIFICATE", &other.der),
        pem::encode("CERTIFICATE", &old.der)
    );
    let out = rewrite_pem(bundle.as_bytes(), &mut swap_to(&currents)).unwrap();
    let want = format!(
        "# trust bundle\n{}\n{}",
        pem::encode("CERTIFICATE", &other.der),
        pem::encode("CERTIFICATE", &new.der)
    );
    assert_eq!(String::from_utf8(out).unwrap(), want);
    // Already the new one, or another CA only: nothing to write.
    assert_eq!(rewrite_pem(want.as_bytes(), &mut swap_to(&currents)), None);
    let only_other = pem::encode("CERTIFICATE", &other.der);
    assert_eq!(
        rewrite_pem(only_other.as_bytes(), &mut swap_to(&currents)),
        None
    );
}

#[test]
fn a_newer_copy_is_never_put_back_to_an_older_issue() {
    let (old, new, _) = ca_pair();
    // The CA's own file holds the old issue (a roll-back put it back), a copy the new.
    let currents = [Current {
        path: "/etc/etcd/ca.crt".into(),
        facts: old.clone(),
        renewing: false,
    }];
    let text = pem::encode("CERTIFICATE", &new.der);
    assert_eq!(rewrite_pem(text.as_bytes(), &mut swap_to(&currents)), None);
}

#[test]
fn a_kubeconfig_changes_only_its_certificate_authority_data() {
    let (old, new, _) = ca_pair();
    let currents = [Current {
        path: "/etc/kubernetes/pki/ca.crt".into(),
        facts: new.clone(),
        renewing: false,
    }];
    let data = |der: &[u8]| encode_data(pem::encode("CERTIFICATE", der).as_bytes());
    let conf = |ca: &str| {
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://10.0.0.1:6443\n  name: kubernetes   # the cluster\nkind: Config\nusers:\n- name: admin\n  user:\n    token: abc\n"
        )
    };
    let before = conf(&data(&old.der));
    let path = Path::new("/etc/kubernetes/admin.conf");
    let out = rewrite_kubeconfig(before.as_bytes(), path, &mut swap_to(&currents))
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), conf(&data(&new.der)));
    let after = conf(&data(&new.der));
    let same = rewrite_kubeconfig(after.as_bytes(), path, &mut swap_to(&currents)).unwrap();
    assert_eq!(same, None);
}
