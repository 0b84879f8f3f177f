//! The API servers' availability: before this node's API server restarts, under the lock
//! (so no other controller is in the middle of its own restart), another API server must
//! answer `/readyz`. The others are those the other controllers' records name, and those
//! `[coordination] apiservers` names (a controller that runs no certrenewd, StarlingX
//! duplex). A controller gone (its certrenewd stopped, alarmed 500.230 by the others) takes
//! its record with it, and so holds nobody's restarts.

use super::*;
use crate::format::flags::host_port;
use crate::restart::endpoints::{Reply, ask};

/// How long one `/readyz` question may take.
const ASK: Duration = Duration::from_secs(3);

/// Another API server, and who named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Other {
    /// `host:port`.
    pub addr: String,
    /// `the record of node-2`, `[coordination] apiservers`.
    pub whose: String,
}

impl EtcdGate {
    /// Every address that is this node's own API server's, by the node's reading: never
    /// asked as another's.
    fn own_apiservers(&self) -> Vec<String> {
        crate::served::listen::apiservers(&self.node).1
    }

    /// The other API servers `[coordination] apiservers` names, this node's own left out.
    pub(super) fn configured_apiservers(&self) -> Vec<Other> {
        let whose = "[coordination] apiservers";
        let named = self.conf.apiservers.iter().map(|u| (u.as_str(), whose));
        others(named, &self.own_apiservers())
    }

    /// Waits, up to `gate_timeout_secs`, until another API server answers `/readyz` (as an
    /// authenticated client when the node has a pair it accepts). No other known: nothing to
    /// wait for. Err holds `step` alone: what follows takes no API server down.
    pub(super) async fn ready_for_apiserver(&mut self, step: &Step) -> Result<(), Hold> {
        let mut known = self.configured_apiservers();
        let State::Locked(l) = &mut self.state else {
            return Ok(());
        };
        match node_records::records(&mut l.conn, &self.conf.lock_prefix).await {
            Ok(records) => {
                let named = records.iter().filter(|(node, _)| *node != self.me);
                let named: Vec<(String, String)> = named
                    .filter_map(|(node, r)| Some((node, r.as_ref().ok()?)))
                    .flat_map(|(node, r)| {
                        let whose = format!("the record of {node}");
                        r.apiservers.iter().map(move |a| (a.clone(), whose.clone()))
                    })
                    .collect();
                let named = named.iter().map(|(a, w)| (a.as_str(), w.as_str()));
                for o in others(named, &self.own_apiservers()) {
                    if !known.iter().any(|k| k.addr == o.addr) {
                        known.push(o);
                    }
                }
            }
            // The configured ones still count; the records' are not known this time.
            Err(why) => tracing::warn!("the other controllers' records cannot be read: {why}"),
        }
        if known.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let _live = crate::live::waiting(format!("another API server before {}", step.target));
        loop {
            let mut seen = Vec::new();
            for o in &known {
                match readyz(&o.addr, &self.apiserver_client).await {
                    Ok(how) => {
                        tracing::info!(
                            service = %step.target,
                            "{} may restart: the API server at {} ({}) {how}",
                            step.target,
                            o.addr,
                            o.whose
                        );
                        return Ok(());
                    }
                    Err(why) => seen.push(format!("{} ({}): {why:#}", o.addr, o.whose)),
                }
            }
            let why = format!(
                "no other API server is ready, so restarting {} would leave the cluster without one: {}",
                step.target,
                seen.join("; ")
            );
            if self.stop.requested() {
                return Err(Hold::Stopping(self.stop.reason()));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(Hold::Unhealthy(format!(
                    "{why} (waited {}s, gate_timeout_secs); it stays owed to the next pass",
                    self.conf.gate_timeout.as_secs()
                )));
            }
            status(&format!("waiting: {why}"));
            pause(&self.stop).await;
        }
    }
}

impl EtcdGate {
    /// This node's own API server, when it is ready now: the address it answered at, a
    /// loopback one asked first (an advertised address may be a floating one, which on a
    /// standby reaches another node).
    pub(super) async fn own_apiserver_ready(&self) -> Option<String> {
        let mut own = self.own_apiservers();
        own.sort_by_key(|a| !a.starts_with("127.") && !a.starts_with("[::1]"));
        for addr in own {
            if readyz(&addr, &self.apiserver_client).await.is_ok() {
                return Some(addr);
            }
        }
        None
    }

    /// After this node's etcd member restarted: this node's API server, ready before it at
    /// `addr`, must answer `/readyz` again within `gate_timeout_secs` before anything else
    /// restarts or the lock is given up. kubeadm's API server talks to its own member only,
    /// so this is when its etcd client pair and etcd's new files first meet.
    pub(super) async fn own_apiserver_back(&self, step: &Step, addr: &str) -> Result<(), Hold> {
        let start = Instant::now();
        let _live = crate::live::waiting(format!("this node's API server after {}", step.target));
        loop {
            let why = match readyz(addr, &self.apiserver_client).await {
                Ok(how) => {
                    tracing::info!(
                        service = %step.target,
                        "after {} restarted, this node's API server at {addr} {how}",
                        step.target
                    );
                    return Ok(());
                }
                Err(why) => format!("{why:#}"),
            };
            if self.stop.requested() {
                return Err(Hold::Stopping(self.stop.reason()));
            }
            if start.elapsed() >= self.conf.gate_timeout {
                return Err(Hold::NotBack(format!(
                    "after {} restarted, this node's API server at {addr}, ready before, did not answer /readyz within {}s (gate_timeout_secs): {why}; nothing else restarts on this node while the lock is held",
                    step.target,
                    self.conf.gate_timeout.as_secs()
                )));
            }
            status(&format!(
                "waiting: after {} restarted, this node's API server at {addr}: {why}",
                step.target
            ));
            pause(&self.stop).await;
        }
    }
}

/// `named` (an address, who named it) as `host:port`, each once, `own` and what is no
/// `host:port` left out: an address from another controller's record is dialed for
/// `/readyz` and nothing else.
fn others<'a>(named: impl Iterator<Item = (&'a str, &'a str)>, own: &[String]) -> Vec<Other> {
    let mut out: Vec<Other> = Vec::new();
    for (a, whose) in named {
        let Some((host, port)) = host_port(a) else {
            continue;
        };
        let plain = host.parse::<std::net::IpAddr>().is_ok()
            || (host.chars()).all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !plain || host.is_empty() {
            continue;
        }
        let addr = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        if !own.contains(&addr) && !out.iter().any(|o| o.addr == addr) {
            out.push(Other {
                addr,
                whose: whose.to_string(),
            });
        }
    }
    out
}

/// Whether the API server at `addr` is ready: `/readyz` said 200, or, asked without a client
/// pair it accepts, it answered at all (anonymous requests refused: it listens, its
/// readiness unseen). Err says what it did.
async fn readyz(addr: &str, client: &Option<Client>) -> anyhow::Result<String> {
    let pair = client.as_ref().map(|c| (c.cert.clone(), c.key.clone()));
    let (_, reply) = ask(addr, "/readyz", &pair, ASK).await?;
    match (reply, client) {
        (Reply::Status(200), Some(c)) => Ok(format!("is ready (/readyz said 200 as {})", c.who)),
        (Reply::Status(200), None) => Ok("is ready (/readyz said 200)".into()),
        (Reply::Status(c @ (401 | 403)), None) => Ok(format!(
            "answers (/readyz said {c}: anonymous refused, and no client pair it accepts was found on this node)"
        )),
        (Reply::Status(c), _) => Err(anyhow::anyhow!("/readyz said {c}")),
        (Reply::ClientCertWanted(e), _) => Err(anyhow::anyhow!("wants a client certificate ({e})")),
        (Reply::Nothing(e), _) => Err(anyhow::anyhow!(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_api_servers_are_plain_addresses_each_once_never_this_nodes_own() {
        let own = vec!["127.0.0.1:6443".to_string(), "10.0.0.1:6443".to_string()];
        let named = [
            ("https://10.0.0.2:6443", "[coordination] apiservers"),
            ("10.0.0.2:6443", "the record of node-2"),
            ("10.0.0.1:6443", "the record of node-1"),
            ("https://127.0.0.1:6443", "[coordination] apiservers"),
            ("[fd00::3]:6443", "the record of node-3"),
            ("controller-4.example:6443", "the record of node-4"),
            ("evil host;rm:6443", "the record of node-5"),
            ("10.0.0.6", "the record of node-6"),
        ];
        let got: Vec<String> = others(named.into_iter(), &own)
            .into_iter()
            .map(|o| format!("{} {}", o.addr, o.whose))
            .collect();
        assert_eq!(
            got,
            [
                "10.0.0.2:6443 [coordination] apiservers",
                "[fd00::3]:6443 the record of node-3",
                "controller-4.example:6443 the record of node-4",
            ]
        );
    }
}
