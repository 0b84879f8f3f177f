//! kubeconfig files: the client certificates their users embed (`client-certificate-data`)
//! or name (`client-certificate`), and the clusters' `certificate-authority-data`.
//!
//! The reader is line-oriented and understands the block YAML that kubeadm, kubectl and
//! people write (block mappings and sequences, plain and quoted scalars, comments, flow and
//! block scalars passed over). It keeps the byte range of every value, so a rewrite replaces
//! exactly those bytes and nothing else. Anything it does not understand (anchors, aliases,
//! multi-line plain scalars, several documents, tabs in indentation) is an error: a file
//! that is not fully understood is never rewritten.

mod scan;
mod yaml;

use std::path::PathBuf;

use base64::Engine;

use super::cert::CertFacts;
use yaml::{Node, get, items, name_of, scalar};

pub(super) use scan::scan_into;
pub use yaml::{ParseError, Scalar};

/// What a certificate found through a kubeconfig is.
#[derive(Debug, Clone)]
pub struct KubeconfigUser {
    /// The user's name in the kubeconfig.
    pub user: String,
    /// The certificate file it names (`client-certificate:`); `None` when embedded.
    pub external: Option<PathBuf>,
    /// The CA certificates of the clusters it is used with (`certificate-authority-data`).
    pub cluster_cas: Vec<CertFacts>,
}

/// A kubeconfig file to read, for the watch it belongs to.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Index of the watch.
    pub watch: usize,
    /// Listed explicitly: a missing file is an error (not for the kubeadm defaults).
    pub required: bool,
}

/// One entry of `users`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its `name`.
    pub name: String,
    /// `client-certificate-data`: base64 of PEM.
    pub cert_data: Option<Scalar>,
    /// `client-key-data`: base64 of PEM.
    pub key_data: Option<Scalar>,
    /// `client-certificate`: a file path (relative to the kubeconfig's directory).
    pub cert_file: Option<Scalar>,
    /// `client-key`: a file path.
    pub key_file: Option<Scalar>,
}

/// One entry of `clusters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Its `name`.
    pub name: String,
    /// `certificate-authority-data`: base64 of PEM.
    pub ca_data: Option<Scalar>,
}

/// One entry of `contexts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// Its `name`.
    pub name: String,
    /// The cluster it uses.
    pub cluster: String,
    /// The user it uses.
    pub user: String,
}

/// What certrenewd needs from a kubeconfig file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kubeconfig {
    /// `users`, in file order.
    pub users: Vec<User>,
    /// `clusters`, in file order.
    pub clusters: Vec<Cluster>,
    /// `contexts`, in file order.
    pub contexts: Vec<Context>,
}

impl Kubeconfig {
    /// Reads a kubeconfig file's text.
    pub fn parse(data: &[u8]) -> Result<Kubeconfig, ParseError> {
        let text = std::str::from_utf8(data).map_err(|e| ParseError {
            line: None,
            message: format!("not UTF-8 text: {e}"),
        })?;
        let mut lines = yaml::lines(text)?;
        let mut i = 0;
        let root = if lines.is_empty() {
            Node::Null
        } else {
            let n = yaml::parse_node(&mut lines, &mut i, 0)?;
            if let Some(l) = lines.get(i) {
                return Err(yaml::err(l.no, "unexpected indentation or content"));
            }
            n
        };
        let root = match root {
            Node::Map(m) => m,
            Node::Null => Vec::new(),
            _ => {
                return Err(yaml::err(
                    1,
                    "not a kubeconfig: the document is not a mapping",
                ));
            }
        };
        if let Some(kind) = get(&root, "kind").and_then(Node::scalar)
            && kind.text != "Config"
        {
            return Err(yaml::err(
                kind.line,
                format!("not a kubeconfig: kind is {:?}", kind.text),
            ));
        }
        let mut out = Kubeconfig::default();
        for entry in items(&root, "users") {
            let user = get(entry, "user").map(Node::map).unwrap_or_default();
            out.users.push(User {
                name: name_of(entry),
                cert_data: scalar(user, "client-certificate-data"),
                key_data: scalar(user, "client-key-data"),
                cert_file: scalar(user, "client-certificate"),
                key_file: scalar(user, "client-key"),
            });
        }
        for entry in items(&root, "clusters") {
            let cluster = get(entry, "cluster").map(Node::map).unwrap_or_default();
            out.clusters.push(Cluster {
                name: name_of(entry),
                ca_data: scalar(cluster, "certificate-authority-data"),
            });
        }
        for entry in items(&root, "contexts") {
            let ctx = get(entry, "context").map(Node::map).unwrap_or_default();
            let text = |k: &str| scalar(ctx, k).map(|s| s.text).unwrap_or_default();
            out.contexts.push(Context {
                name: name_of(entry),
                cluster: text("cluster"),
                user: text("user"),
            });
        }
        Ok(out)
    }

    /// The clusters the contexts of `user` use, in context order (each once); the only
    /// cluster when no context names the user.
    pub fn clusters_of(&self, user: &str) -> Vec<&Cluster> {
        let mut out: Vec<&Cluster> = Vec::new();
        for ctx in self.contexts.iter().filter(|c| c.user == user) {
            if let Some(c) = self.clusters.iter().find(|c| c.name == ctx.cluster)
                && !out.iter().any(|o| o.name == c.name)
            {
                out.push(c);
            }
        }
        if out.is_empty() && self.clusters.len() == 1 {
            out.push(&self.clusters[0]);
        }
        out
    }
}

/// Decodes a `*-data` value: base64 (whitespace allowed) of PEM.
pub fn decode_data(value: &str) -> Result<Vec<u8>, String> {
    let compact: String = value.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| format!("invalid base64: {e}"))
}

#[cfg(test)]
mod tests {
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
            (
                "users:\n- name: a\n  user:\n    client-certificate-data: QUJD\n      REVG\n",
                5,
            ),
            ("users:\n- name: a\n  user: &u\n    token: x\n", 3),
            ("kind: Config\n---\nkind: Config\n", 2),
            ("users:\n- name: a\n\tuser: {}\n", 3),
            ("kind: Pod\n", 1),
            ("users:\n- name: a\n  name: b\n", 3),
            ("a: \"unterminated\n", 1),
            ("a: b\n  c: d\n", 2),
        ] {
            let e = Kubeconfig::parse(text.as_bytes()).unwrap_err();
            assert_eq!(e.line, Some(line), "{text:?}: {e}");
        }
    }
}
