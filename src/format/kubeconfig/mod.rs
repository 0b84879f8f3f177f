//! kubeconfig files: the client certificates their users embed (`client-certificate-data`)
//! or name (`client-certificate`), and the clusters' `certificate-authority-data`.
//!
//! The file is read with saphyr-parser (`yaml.rs`: YAML 1.2, every style, anchors and
//! aliases) into events that keep the byte range of every value, so a rewrite replaces
//! exactly those bytes and nothing else; `tree.rs` looks values up by key and marks the ones
//! shared through an alias, which are never rewritten. A file that is not YAML, holds several
//! documents, has a duplicate key or is not a kubeconfig is an error: it is never rewritten.

pub(crate) mod tree;
mod yaml;

use std::path::PathBuf;

use base64::Engine;

use tree::{At, Tree};

pub use yaml::{Document, ParseError, Piece, Scalar, Sharing};

/// What a certificate found through a kubeconfig is.
#[derive(Debug, Clone)]
pub struct KubeconfigUser {
    /// The user's name in the kubeconfig.
    pub user: String,
    /// The certificate file it names (`client-certificate:`); `None` when embedded.
    pub external: Option<PathBuf>,
    /// The subject of the cluster CA (`certificate-authority-data`) that signed it, when one
    /// of the clusters it is used with did (checked by the scan, so the planner stays pure).
    pub signed_by_cluster_ca: Option<String>,
    /// Set when its `client-certificate-data` is shared through a YAML alias: not rewritten.
    pub shared: Option<Sharing>,
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
        Kubeconfig::from_document(&Document::parse(data)?)
    }

    /// Reads the kubeconfig a YAML document holds.
    pub fn from_document(doc: &Document) -> Result<Kubeconfig, ParseError> {
        let tree = Tree::new(doc)?;
        let mut out = Kubeconfig::default();
        let Some(root) = tree.root().filter(|&r| !tree.is_null(r)) else {
            return Ok(out);
        };
        if !tree.is_map(root) {
            return Err(yaml::err(
                1,
                "not a kubeconfig: the document is not a mapping",
            ));
        }
        if let Some(kind) = tree.get(root, "kind").and_then(|k| tree.scalar(k))
            && kind.text != "Config"
        {
            return Err(yaml::err(
                kind.line,
                format!("not a kubeconfig: kind is {:?}", kind.text),
            ));
        }
        let entries = |key: &str| {
            tree.get(root, key)
                .map(|s| tree.items(s))
                .unwrap_or_default()
        };
        let scalar = |map: Option<At>, key: &str| {
            map.and_then(|m| tree.get(m, key))
                .and_then(|v| tree.scalar(v))
        };
        let text =
            |map: Option<At>, key: &str| scalar(map, key).map(|s| s.text).unwrap_or_default();
        for entry in entries("users") {
            let user = tree.get(entry, "user");
            out.users.push(User {
                name: text(Some(entry), "name"),
                cert_data: scalar(user, "client-certificate-data"),
                key_data: scalar(user, "client-key-data"),
                cert_file: scalar(user, "client-certificate"),
                key_file: scalar(user, "client-key"),
            });
        }
        for entry in entries("clusters") {
            out.clusters.push(Cluster {
                name: text(Some(entry), "name"),
                ca_data: scalar(tree.get(entry, "cluster"), "certificate-authority-data"),
            });
        }
        for entry in entries("contexts") {
            let ctx = tree.get(entry, "context");
            out.contexts.push(Context {
                name: text(Some(entry), "name"),
                cluster: text(ctx, "cluster"),
                user: text(ctx, "user"),
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
pub fn decode_data(value: &str) -> Result<Vec<u8>, NotBase64> {
    let compact: String = value.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(NotBase64)
}

/// A `*-data` value that is not base64.
#[derive(Debug, thiserror::Error)]
#[error("invalid base64: {0}")]
pub struct NotBase64(#[from] base64::DecodeError);

#[cfg(test)]
mod tests;
