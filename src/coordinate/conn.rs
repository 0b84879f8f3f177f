//! A connection to the etcd cluster for the restart lock: to whichever member answers,
//! made again through the next member when the one in use stops answering.

use std::future::Future;

use etcd_client::{Client, TlsOptions};

use super::members::{self, describe, unreachable};

/// How long to wait before asking again when no member answered.
const RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Why the cluster cannot be reached (`EtcdGate::reach`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreached {
    /// Not coordinated, and rightly: coordination off, a cluster of one, no etcd here.
    Alone(String),
    /// Coordination is called for and the cluster cannot be had.
    Not(String),
}

impl std::fmt::Display for Unreached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreached::Alone(why) => write!(f, "not coordinated: {why}"),
            Unreached::Not(why) => write!(f, "{why}"),
        }
    }
}

/// A connection to whichever member answers, made again through the next one when the
/// member it used stops answering (it may be restarting: the holder restarts its own; or
/// frozen: then it must not be asked first again).
#[derive(Clone)]
pub struct Conn {
    urls: Vec<String>,
    tls: TlsOptions,
    client: Option<Client>,
    /// Where the next connection starts looking: the member in use, or the one after the
    /// member that last failed.
    at: usize,
}

impl Conn {
    /// Members' client URLs in order of preference, and the identity.
    pub fn new(urls: Vec<String>, tls: TlsOptions) -> Conn {
        Conn {
            urls,
            tls,
            client: None,
            at: 0,
        }
    }

    /// The same members and identity, unconnected: for use on another runtime (a client
    /// belongs to the runtime it was made on).
    pub(super) fn apart(&self) -> Conn {
        Conn {
            client: None,
            ..self.clone()
        }
    }

    /// The client URLs it connects through, in order of preference.
    pub(super) fn urls(&self) -> &[String] {
        &self.urls
    }

    pub(super) async fn client(&mut self) -> Option<Client> {
        if self.client.is_none() {
            let n = self.urls.len();
            let order: Vec<&String> = (0..n).map(|i| &self.urls[(self.at + i) % n]).collect();
            let url = members::first_answering(order, &self.tls)
                .await
                .ok()?
                .clone();
            self.at = self.urls.iter().position(|u| *u == url).unwrap_or(0);
            let one = std::slice::from_ref(&url);
            self.client = members::connect(one, self.tls.clone()).await.ok();
        }
        self.client.clone()
    }

    /// The member in use did not answer: the next connection starts with the one after it.
    pub(super) fn skip(&mut self) {
        self.client = None;
        self.at = (self.at + 1) % self.urls.len().max(1);
    }

    /// Runs `op` until etcd answers it: Ok, or Err with etcd's refusal. While no member
    /// answers it asks again (the caller bounds the wait).
    pub(super) async fn call<T, F, Fut>(&mut self, mut op: F) -> Result<T, Refusal>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        loop {
            if let Some(c) = self.client().await {
                match op(c).await {
                    Ok(v) => return Ok(v),
                    Err(e) if !unreachable(&e) => return Err(Refusal(describe(&e))),
                    Err(_) => self.skip(),
                }
            } else {
                self.skip();
            }
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// etcd's answer to a request it refused (permission denied, a bad request: never "nobody
/// answers", which [`Conn::call`] asks again), as etcd worded it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(String);
