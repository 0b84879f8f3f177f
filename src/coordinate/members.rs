//! The etcd cluster as certrenewd sees it: who the members are, and whether each one is
//! healthy (answers Status as itself, knows a leader, has no alarm, and is caught up with the
//! others).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, TlsOptions};
use serde::{Deserialize, Serialize};

/// How far behind the most advanced member (in raft log entries) a member may be and still
/// count as caught up.
pub const CAUGHT_UP_ENTRIES: u64 = 100;
/// One request to one member: a healthy member answers in milliseconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings on every connection: a member that stops answering (frozen, cut off) fails
/// the calls and streams in flight within these two, instead of at the TCP timeout.
const PING_EVERY: Duration = Duration::from_secs(2);
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its ID, as the cluster knows it (0: not known, e.g. from a test's list).
    #[serde(default)]
    pub id: u64,
    /// Its name (`--name`), e.g. the node's hostname.
    pub name: String,
    /// The client URLs it advertises.
    pub client_urls: Vec<String>,
    /// The peer URLs it advertises.
    #[serde(default)]
    pub peer_urls: Vec<String>,
}

impl Member {
    /// How a message names it: its name, or for a member added and not started yet (it has
    /// no name until it starts), its ID and peer URLs.
    pub fn label(&self) -> String {
        match self.name.is_empty() {
            false => self.name.clone(),
            true => format!(
                "{:x} (added, never started; peer URLs {})",
                self.id,
                self.peer_urls.join(", ")
            ),
        }
    }
}

/// What one member said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The member that answered (from the response header).
    pub member_id: u64,
    /// The cluster it is of (from the response header).
    pub cluster_id: u64,
    /// The leader it follows (0: none).
    pub leader: u64,
    /// Its raft log index.
    pub raft_index: u64,
    /// Its alarms and errors (e.g. NOSPACE).
    pub errors: Vec<String>,
    /// A learner: no voter, and it serves clients neither its member list nor writes.
    pub learner: bool,
}

/// Whether an error means nobody answered (connection refused, TLS refused, timeout), as
/// opposed to a member answering with a refusal (permission denied, ...).
pub fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        // Unavailable, the client's own timeout (Cancelled "Timeout expired"), and a
        // connection cut mid-call ("h2 protocol error" as Unknown or Internal).
        etcd_client::Error::GRpcStatus(s) => {
            matches!(
                s.code(),
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled
            ) || (s.code() == tonic::Code::Internal && s.message().contains("h2 protocol"))
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// A client for `endpoints` as the identity in `tls`.
pub async fn connect(endpoints: &[String], tls: TlsOptions) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(PING_EVERY, PING_TIMEOUT)
        .with_keep_alive_while_idle(true);
    Client::connect(endpoints, Some(options)).await
}

/// The members, from whichever endpoint answers.
pub async fn list(client: &mut Client) -> Result<Vec<Member>, etcd_client::Error> {
    let resp = client.member_list().await?;
    Ok(resp
        .members()
        .iter()
        .filter(|m| !m.is_learner())
        .map(|m| Member {
            id: m.id(),
            name: m.name().to_string(),
            client_urls: m.client_urls().to_vec(),
            peer_urls: m.peer_urls().to_vec(),
        })
        .collect())
}

/// Why no member gave its list: each asked, and why it did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct NoneAnswered(pub Vec<String>);

/// The voting members as the cluster has them now, started or not: a linearizable read on
/// one member, then that member's list (a member serves its list from what it has applied,
/// and the read makes it apply everything committed before it, a membership change
/// included). The read is of the lock's own keys under `prefix`, which an etcd role limited
/// to that prefix may read. The members in `known` are asked in turn, and then `urls`; Err
/// says why none answered.
pub async fn list_now(
    known: &[Member],
    urls: &[String],
    prefix: &str,
    tls: &TlsOptions,
) -> Result<Vec<Member>, NoneAnswered> {
    let read = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_limit(1);
    let mut errors = Vec::new();
    let each = known
        .iter()
        .filter(|m| !m.client_urls.is_empty())
        .map(|m| m.client_urls.clone())
        .chain(urls.iter().map(|u| vec![u.clone()]));
    for at in each {
        let ask = async {
            let mut c = connect(&at, tls.clone()).await?;
            c.get(format!("{prefix}/"), Some(read.clone())).await?;
            list(&mut c).await
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, ask).await {
            Ok(Ok(members)) => return Ok(members),
            Ok(Err(e)) => errors.push(format!("{}: {}", at.join(", "), describe(&e))),
            Err(_) => errors.push(format!(
                "{}: no answer within {}s",
                at.join(", "),
                REQUEST_TIMEOUT.as_secs()
            )),
        }
    }
    Err(NoneAnswered(errors))
}

/// The first of `endpoints` that answers Status as a voter (each member answers it by
/// itself, with or without a leader; a learner answers it too, but serves clients neither
/// the member list nor writes); else why each did not. One endpoint per client: a balanced
/// client fails calls on a dead endpoint instead of moving on.
pub async fn first_answering<'a>(
    endpoints: impl IntoIterator<Item = &'a String>,
    tls: &TlsOptions,
) -> Result<&'a String, Vec<String>> {
    let mut errors = Vec::new();
    for e in endpoints {
        match status_at(std::slice::from_ref(e), tls.clone()).await {
            Ok(s) if s.learner => errors.push(format!(
                "{e}: a learner (it serves clients no member list and no writes)"
            )),
            Ok(_) => return Ok(e),
            Err(why) => errors.push(format!("{e}: {why}")),
        }
    }
    Err(errors)
}

/// What `member` says about itself, asked directly (not through a balanced client). The
/// answer counts only when it comes from that member: a URL it advertises may reach another
/// one (a VIP, a name several members share, loopback), and a member that is down must not
/// look healthy through a neighbour's answer.
pub async fn status(member: &Member, tls: TlsOptions) -> Result<Status, Unanswered> {
    if member.client_urls.is_empty() {
        return Err(Unanswered::NoClientUrl);
    }
    let s = status_at(&member.client_urls, tls).await?;
    match s.member_id {
        answered if member.id != 0 && answered != member.id => Err(Unanswered::NotItself {
            urls: member.client_urls.join(", "),
            answered,
            id: member.id,
        }),
        _ => Ok(s),
    }
}

/// Why a member's own answer was not had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// Listed, never started: no URL to ask.
    #[error("advertises no client URL (not started yet?)")]
    NoClientUrl,
    /// Its URL reached another member (a VIP, a shared name, loopback).
    #[error("does not answer itself: {urls} reached member {answered:x}, not {id:x}")]
    NotItself {
        urls: String,
        answered: u64,
        id: u64,
    },
    /// The client's error, in a sentence ([`describe`]).
    #[error("{0}")]
    Failed(String),
    #[error("no answer within {}s", REQUEST_TIMEOUT.as_secs())]
    Timeout,
}

async fn status_at(urls: &[String], tls: TlsOptions) -> Result<Status, Unanswered> {
    let ask = async {
        let mut c = connect(urls, tls).await?;
        c.status().await
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, ask).await {
        Ok(Ok(s)) => Ok(Status {
            member_id: s.header().map_or(0, |h| h.member_id()),
            cluster_id: s.header().map_or(0, |h| h.cluster_id()),
            leader: s.leader(),
            raft_index: s.raft_index(),
            errors: s.errors().to_vec(),
            learner: s.is_learner(),
        }),
        Ok(Err(e)) => Err(Unanswered::Failed(describe(&e))),
        Err(_) => Err(Unanswered::Timeout),
    }
}

/// Asks `leader` to hand its leadership to the member `to` (etcd's MoveLeader), and waits
/// for the transfer, within the request timeout.
pub async fn move_leader(leader: &Member, to: u64, tls: TlsOptions) -> Result<(), Unanswered> {
    let ask = async {
        let mut c = connect(&leader.client_urls, tls).await?;
        c.move_leader(to).await
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, ask).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Unanswered::Failed(describe(&e))),
        Err(_) => Err(Unanswered::Timeout),
    }
}

/// Whether nothing listens at `url` (the connection is refused at once): a member that is
/// down. A URL that cannot be parsed or resolved, or that does not answer within the
/// connect timeout, is not counted as refusing.
pub async fn refuses(url: &str) -> bool {
    matches!(knock(url).await, Knock::Refused)
}

/// What a TCP connection to a member's URL met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Knock {
    /// Refused at once: nothing listens there.
    Refused,
    /// Not permitted by this host (EPERM, EACCES: a firewall rule, or the unit's own
    /// `IPAddressDeny=`), as this says: whether a member is there is not known.
    Blocked(String),
    /// Anything else: connected, no answer in time, or an address that cannot be used.
    Other,
}

/// Tries a TCP connection to `url`, within the connect timeout.
pub async fn knock(url: &str) -> Knock {
    let Some((host, port)) = super::node::host_port(url) else {
        return Knock::Other;
    };
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Knock::Refused,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Knock::Blocked(e.to_string())
        }
        _ => Knock::Other,
    }
}

/// An etcd client error in a sentence, with gRPC's own message rather than its debug form.
pub fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) if s.message().is_empty() => format!("{:?}", s.code()),
        etcd_client::Error::GRpcStatus(s) => s.message().to_string(),
        etcd_client::Error::TransportError(t) => {
            let mut msg = t.to_string();
            let mut src = std::error::Error::source(t);
            while let Some(s) = src {
                msg = format!("{msg}: {s}");
                src = s.source();
            }
            msg
        }
        other => other.to_string(),
    }
}

/// Every member with what it answered when asked for its status.
pub type Answers = [(Member, Result<Status, Unanswered>)];

/// The members of `wanted` that are not healthy, each with why, given every member's answer.
pub fn unhealthy(answers: &Answers, wanted: impl Fn(&Member) -> bool) -> Vec<(&Member, String)> {
    let newest = answers
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .map(|s| s.raft_index)
        .max()
        .unwrap_or(0);
    answers
        .iter()
        .filter(|(m, _)| wanted(m))
        .filter_map(|(m, s)| verdict(s, newest).map(|why| (m, why)))
        .collect()
}

/// Why a member is not healthy, or `None` when it is.
fn verdict(status: &Result<Status, Unanswered>, newest: u64) -> Option<String> {
    let s = match status {
        Err(why) => return Some(format!("does not answer: {why}")),
        Ok(s) => s,
    };
    if s.leader == 0 {
        return Some("has no leader".into());
    }
    if !s.errors.is_empty() {
        return Some(format!("reports {}", s.errors.join(", ")));
    }
    let behind = newest.saturating_sub(s.raft_index);
    (behind > CAUGHT_UP_ENTRIES).then(|| format!("is {behind} raft entries behind (not caught up)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str) -> Member {
        Member {
            id: 0,
            name: name.into(),
            client_urls: vec![format!("https://{name}:2379")],
            peer_urls: Vec::new(),
        }
    }

    fn ok(raft_index: u64) -> Result<Status, Unanswered> {
        Ok(Status {
            member_id: 0,
            cluster_id: 0,
            leader: 7,
            raft_index,
            errors: Vec::new(),
            learner: false,
        })
    }

    #[test]
    fn a_member_is_healthy_when_it_answers_follows_a_leader_and_is_caught_up() {
        let answers = vec![
            (m("a"), ok(1000)),
            (m("b"), ok(1000 - CAUGHT_UP_ENTRIES)),
            (m("c"), ok(500)),
            (m("d"), Err(Unanswered::Failed("connection refused".into()))),
            (
                m("e"),
                Ok(Status {
                    member_id: 0,
                    cluster_id: 0,
                    leader: 0,
                    raft_index: 1000,
                    errors: Vec::new(),
                    learner: false,
                }),
            ),
            (
                m("f"),
                Ok(Status {
                    member_id: 0,
                    cluster_id: 0,
                    leader: 7,
                    raft_index: 1000,
                    errors: vec!["NOSPACE".into()],
                    learner: false,
                }),
            ),
        ];
        let bad = unhealthy(&answers, |_| true);
        let names: Vec<&str> = bad.iter().map(|(m, _)| m.name.as_str()).collect();
        assert_eq!(names, ["c", "d", "e", "f"]);
        assert_eq!(bad[0].1, "is 500 raft entries behind (not caught up)");
        assert_eq!(bad[1].1, "does not answer: connection refused");
        assert_eq!(bad[2].1, "has no leader");
        assert_eq!(bad[3].1, "reports NOSPACE");
        // Only the members asked about are judged.
        assert!(unhealthy(&answers, |m| m.name == "a" || m.name == "b").is_empty());
    }
}
