use super::*;

const KUBEADM: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://192.168.206.2:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
preferences: {}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
";

fn at<'a>(data: &'a str, s: &Scalar) -> &'a str {
    &data[s.span.clone()]
}

#[test]
fn reads_what_kubeadm_writes() {
    let k = Kubeconfig::parse(KUBEADM.as_bytes()).unwrap();
    assert_eq!(k.users.len(), 1);
    let u = &k.users[0];
    assert_eq!(u.name, "kubernetes-admin");
    assert_eq!(at(KUBEADM, u.cert_data.as_ref().unwrap()), "Q0VSVA==");
    assert_eq!(at(KUBEADM, u.key_data.as_ref().unwrap()), "S0VZ");
    assert_eq!(u.cert_data.as_ref().unwrap().line, 18);
    assert_eq!(k.clusters[0].name, "kubernetes");
    assert_eq!(at(KUBEADM, k.clusters[0].ca_data.as_ref().unwrap()), "Q0E=");
    assert_eq!(k.contexts[0].user, "kubernetes-admin");
    assert_eq!(k.clusters_of("kubernetes-admin")[0].name, "kubernetes");
    assert_eq!(decode_data("Q0VS\nVA==").unwrap(), b"CERT");
}

#[test]
fn reads_indented_sequences_quotes_comments_and_crlf() {
    let text = "# managed by hand\r\n---\r\napiVersion: v1\r\nkind: Config\r\nusers:\r\n  # the admin\r\n  - user:\r\n      client-certificate-data: \"Q0VSVA==\"  # quoted\r\n      client-key-data: 'S0VZ'\r\n    name: \"admin user\"\r\n  - name: token-user\r\n    user:\r\n      token: abc#def\r\n      exec:\r\n        args: [\"a\", \"b\"]\r\n        env: null\r\n  - name: kubelet\r\n    user:\r\n      client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\r\n      client-key: pki/key.pem\r\nclusters: []\r\ndescription: |\r\n  users:\r\n  - name: fake\r\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    assert_eq!(k.users.len(), 3);
    assert_eq!(k.users[0].name, "admin user");
    assert_eq!(at(text, k.users[0].cert_data.as_ref().unwrap()), "Q0VSVA==");
    assert_eq!(at(text, k.users[0].key_data.as_ref().unwrap()), "S0VZ");
    assert!(k.users[1].cert_data.is_none());
    assert_eq!(
        k.users[2].cert_file.as_ref().unwrap().text,
        "/var/lib/kubelet/pki/kubelet-client-current.pem"
    );
    assert_eq!(k.users[2].key_file.as_ref().unwrap().text, "pki/key.pem");
    assert!(k.clusters.is_empty());
}

#[test]
fn what_is_not_understood_is_an_error_with_its_line() {
    for (text, line) in [
        ("kind: Config\n---\nkind: Config\n", 2),
        // saphyr-parser reports a tab where the scalar before it started.
        ("users:\n- name: a\n\tuser: {}\n", 2),
        ("users:\n- name: a\n  user: *nowhere\n", 3),
        ("users: [{name: a}\n", 2),
        ("kind: Pod\n", 1),
        ("users:\n- name: a\n  name: b\n", 3),
        ("a: \"unterminated\n", 1),
        ("a: b\n  c: d\n", 2),
    ] {
        let e = Kubeconfig::parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.line, Some(line), "{text:?}: {e}");
    }
}

/// Scalars that were "not understood" by the line-oriented reader: multi-line plain values
/// and anchors are read now.
#[test]
fn multi_line_plain_values_and_anchors_are_read() {
    let text = "users:\n- name: a\n  user:\n    client-certificate-data: QUJD\n      REVG\n- name: b\n  user: &u\n    token: x\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    let data = k.users[0].cert_data.as_ref().unwrap();
    assert_eq!(data.text, "QUJD REVG");
    assert_eq!(at(text, data), "QUJD\n      REVG");
    assert_eq!(decode_data(&data.text).unwrap(), b"ABCDEF");
    assert_eq!(data.shared, None);
    assert_eq!(k.users[1].name, "b");
}

#[test]
fn anchors_and_aliases_are_read_and_shared_values_are_marked() {
    let text = "kind: Config\nusers:\n- name: a\n  user: &u\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n- name: b\n  user: *u\n- name: c\n  user:\n    client-certificate-data: &lone QUJD\n    client-key-data: !!str S0VZ\n- name: d\n  user:\n    <<: *u\n    client-key-data: S0VZMg==\n- name: e\n  user:\n    client-certificate-data: &twice \"REVG\"\n- name: f\n  user:\n    client-certificate-data: *twice\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    let names: Vec<&str> = k.users.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e", "f"]);
    let data = |i: usize| k.users[i].cert_data.clone().unwrap();
    // a's mapping is aliased by b and merged by d: the value is where a has it, shared.
    for (i, shared) in [
        (0, Sharing::Aliased),
        (1, Sharing::Alias),
        (3, Sharing::Alias),
    ] {
        assert_eq!(data(i).text, "Q0VSVA==");
        assert_eq!(at(text, &data(i)), "Q0VSVA==");
        assert_eq!(data(i).line, 5);
        assert_eq!(data(i).shared, Some(shared), "user {i}");
    }
    // d's own key is its own.
    let d_key = k.users[3].key_data.clone().unwrap();
    assert_eq!((d_key.text.as_str(), d_key.shared), ("S0VZMg==", None));
    // An anchor nobody aliases and a tag: the value alone, past the properties.
    assert_eq!(at(text, &data(2)), "QUJD");
    assert_eq!(data(2).shared, None);
    assert_eq!(at(text, k.users[2].key_data.as_ref().unwrap()), "S0VZ");
    // A quoted anchored scalar aliased by another user.
    assert_eq!(at(text, &data(4)), "REVG");
    assert_eq!(data(4).shared, Some(Sharing::Aliased));
    assert_eq!(data(5).shared, Some(Sharing::Alias));
}

#[test]
fn flow_style_is_read() {
    let text = "{kind: Config, clusters: [{name: k, cluster: {certificate-authority-data: Q0E=, server: 'https://h:6443'}}],\n contexts: [{name: c, context: {cluster: k, user: \"a\"}}],\n users: [{name: a, user: {client-certificate-data: Q0VSVA==, client-key-data: \"S0VZ\"}}]}\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    let u = &k.users[0];
    assert_eq!(u.name, "a");
    assert_eq!(at(text, u.cert_data.as_ref().unwrap()), "Q0VSVA==");
    assert_eq!(at(text, u.key_data.as_ref().unwrap()), "S0VZ");
    assert_eq!(at(text, k.clusters[0].ca_data.as_ref().unwrap()), "Q0E=");
    assert_eq!(k.clusters_of("a")[0].name, "k");
}

#[test]
fn block_scalars_are_read_with_the_span_of_their_lines() {
    let text = "description: >\n  a folded\n  description\nusers:\n- name: a\n  user:\n    client-certificate-data: |\n      Q0VS\n      VA==\n\n    client-key-data: >-\n      S0VZ\n- name: b\n  user:\n    client-certificate-data: |-\r\n      QUJD\r\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    let a = &k.users[0];
    assert_eq!(a.cert_data.as_ref().unwrap().text, "Q0VS\nVA==\n");
    assert_eq!(at(text, a.cert_data.as_ref().unwrap()), "Q0VS\n      VA==");
    assert_eq!(
        decode_data(&a.cert_data.as_ref().unwrap().text).unwrap(),
        b"CERT"
    );
    assert_eq!(at(text, a.key_data.as_ref().unwrap()), "S0VZ");
    assert_eq!(at(text, k.users[1].cert_data.as_ref().unwrap()), "QUJD");
}

#[test]
fn spans_are_bytes_after_non_ascii_comments_and_crlf() {
    let text = "# Zertifikate für die Steuerebene — gepflegt von Hand ✓\r\nkind: Config # «Config»\r\nusers:\r\n# 管理者\r\n- name: \"ädmin\"\r\n  user:\r\n    # clé privée ↓\r\n    client-key-data: 'S0VZ'\r\n    client-certificate-data: Q0VSVA== # ünd\r\n";
    let k = Kubeconfig::parse(text.as_bytes()).unwrap();
    let u = &k.users[0];
    assert_eq!(u.name, "ädmin");
    let data = u.cert_data.as_ref().unwrap();
    assert_eq!(at(text, data), "Q0VSVA==");
    assert_eq!(data.line, 9);
    assert_eq!(at(text, u.key_data.as_ref().unwrap()), "S0VZ");
}

#[test]
fn empty_files_and_null_values_hold_nothing() {
    for text in ["", "# nothing\n", "---\n", "~\n"] {
        assert_eq!(
            Kubeconfig::parse(text.as_bytes()).unwrap(),
            Kubeconfig::default()
        );
    }
    let k = Kubeconfig::parse(
        b"users:\n- name: a\n  user:\n    client-certificate-data:\n    client-key-data: ~\n",
    )
    .unwrap();
    assert_eq!(k.users[0].cert_data, None);
    assert_eq!(k.users[0].key_data, None);
}
