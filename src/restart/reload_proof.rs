//! The proof that a component took a new certificate in without a restart: what it serves is
//! the new certificate and verifies as its clients verify it (against the trust file they
//! use, at the current time, for the name they dial), and a renewed client pair is accepted
//! by the server that checks it, with a real request. A restart proved the same by making
//! every connection again on the new files; a reload must prove it by asking.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::endpoints::{Witness, read_pem};
use crate::components::reload_rules::Version;
use crate::format::cert::CertFacts;

/// What a server must be shown to serve.
#[derive(Debug, Clone)]
pub struct Served {
    /// Where to connect, `host:port`: loopback or an address of this node's own.
    pub endpoint: String,
    /// The name its clients dial, sent as SNI when it is a name, and verified.
    pub name: String,
    /// The trust file its clients verify it with.
    pub trust: PathBuf,
    /// The certificate file just installed.
    pub cert: PathBuf,
    /// A pair it accepts, for a server that asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Why a new certificate is not shown in use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotProven {
    /// Nothing to connect to, or no handshake.
    #[error("cannot reach {endpoint}: {why}")]
    Unreachable { endpoint: String, why: String },
    /// Nothing listens where it should: the server is not running here (stopped, down).
    #[error("nothing listens at {endpoint}: {why}")]
    NotListening { endpoint: String, why: String },
    /// It serves another certificate: not read again (yet).
    #[error("{endpoint} still serves serial {served}, not the new {expected}")]
    Stale {
        endpoint: String,
        served: String,
        expected: String,
    },
    /// It serves the new certificate, and its clients would refuse it.
    #[error(
        "{endpoint} serves the new certificate (serial {serial}), which its clients would refuse: {why}"
    )]
    Refused {
        endpoint: String,
        serial: String,
        why: String,
    },
    /// The server refused the renewed client pair.
    #[error("{server} refused the renewed client pair {cert}: {why}")]
    PairRefused {
        server: String,
        cert: PathBuf,
        why: String,
    },
    /// A file the proof needs cannot be read.
    #[error("{0}")]
    Unreadable(String),
}

impl NotProven {
    /// Whether asking again later may prove it: the server may not have read the file yet,
    /// or be on its way back. A refusal is final: the certificate itself is wrong.
    pub fn may_pass_later(&self) -> bool {
        matches!(
            self,
            NotProven::Unreachable { .. }
                | NotProven::NotListening { .. }
                | NotProven::Stale { .. }
        )
    }
}

/// Every certificate in a trust file (a bundle holds several).
fn roots(trust: &Path) -> Result<RootCertStore, NotProven> {
    let unreadable = |why: String| NotProven::Unreadable(format!("{}: {why}", trust.display()));
    let data = crate::fsutil::read(trust).map_err(|e| unreadable(format!("{e:#}")))?;
    let mut store = RootCertStore::empty();
    for block in crate::format::pem::blocks(&data).into_iter().flatten() {
        if block.label == "CERTIFICATE" {
            store
                .add(CertificateDer::from(block.der))
                .map_err(|e| unreadable(format!("not a CA certificate webpki takes: {e}")))?;
        }
    }
    if store.is_empty() {
        return Err(unreadable("no certificate in it".into()));
    }
    Ok(store)
}

fn serial_of(der: &[u8], what: &Path) -> Result<String, NotProven> {
    CertFacts::parse(der.to_vec())
        .map(|f| f.serial)
        .map_err(|e| NotProven::Unreadable(format!("{}: {e}", what.display())))
}

/// The client pair files, as rustls takes them.
fn pair(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), NotProven> {
    let read = |p: &Path, key| {
        read_pem(&p.to_path_buf(), key)
            .map_err(|e| NotProven::Unreadable(format!("{}: {e:#}", p.display())))
    };
    let chain = vec![CertificateDer::from(read(cert, false)?)];
    let key = PrivateKeyDer::try_from(read(key, true)?)
        .map_err(|e| NotProven::Unreadable(format!("{}: {e}", key.display())))?;
    Ok((chain, key))
}

/// One look at what `s.endpoint` serves: the new certificate, verified as its clients
/// verify it, or why not. Each stage of the connection is bounded by `limit`.
pub async fn served_once(s: &Served, limit: Duration) -> Result<String, NotProven> {
    let expected = serial_of(&read_pem(&s.cert, false).map_err(unreadable)?, &s.cert)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let inner =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots(&s.trust)?), provider.clone())
            .build()
            .map_err(|e| NotProven::Unreadable(format!("{}: {e}", s.trust.display())))?;
    let witness = Arc::new(Witness::new(provider.clone(), Some(inner)));
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| NotProven::Unreadable(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(witness.clone());
    let config = match &s.client {
        Some((cert, key)) => {
            let (chain, key) = pair(cert, key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| NotProven::Unreadable(format!("{}: {e}", cert.display())))?
        }
        None => builder.with_no_client_auth(),
    };
    let unreachable = |why: String| NotProven::Unreachable {
        endpoint: s.endpoint.clone(),
        why,
    };
    let name = ServerName::try_from(s.name.clone())
        .map_err(|e| unreachable(format!("{} is not a name to dial: {e}", s.name)))?;
    let tcp = timeout(limit, TcpStream::connect(&s.endpoint))
        .await
        .map_err(|_| unreachable("connect timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let handshake = timeout(
        limit,
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await;
    let seen = witness.take();
    let (Some(leaf), Some(verdict)) = (seen.leaf, seen.verdict) else {
        return Err(unreachable(match handshake {
            Err(_) => "TLS handshake timed out".into(),
            Ok(Err(e)) => format!("TLS handshake: {e}"),
            Ok(Ok(_)) => "served no certificate".into(),
        }));
    };
    let served = serial_of(&leaf, &s.cert)?;
    if served != expected {
        return Err(NotProven::Stale {
            endpoint: s.endpoint.clone(),
            served,
            expected,
        });
    }
    match verdict {
        Ok(()) => Ok(served),
        Err(e) => Err(NotProven::Refused {
            endpoint: s.endpoint.clone(),
            serial: served,
            why: refusal(&e, &s.trust, &s.name),
        }),
    }
}

/// Why a client verifying as webpki does refuses the certificate, in an operator's words.
fn refusal(e: &rustls::Error, trust: &Path, name: &str) -> String {
    use rustls::CertificateError as C;
    let at = |t: UnixTime| {
        time::OffsetDateTime::from_unix_timestamp(t.as_secs() as i64)
            .map_or_else(|_| t.as_secs().to_string(), crate::timefmt::rfc3339)
    };
    let rustls::Error::InvalidCertificate(c) = e else {
        return e.to_string();
    };
    let trust = trust.display();
    match c {
        C::UnknownIssuer => format!("it does not chain to a CA in {trust}"),
        C::BadSignature
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. }
        | C::UnsupportedSignatureAlgorithmContext { .. } => {
            format!(
                "its signature does not verify with the key of the CA of its issuer's name in {trust}"
            )
        }
        C::NotValidYetContext { not_before, .. } => {
            format!("it is not valid before {}", at(*not_before))
        }
        C::ExpiredContext { not_after, .. } => format!("it expired at {}", at(*not_after)),
        C::NotValidForNameContext { presented, .. } => format!(
            "it is not valid for {name}, the name its clients dial (it names {})",
            presented
                .iter()
                .map(|p| shown_name(p))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        C::InvalidPurposeContext { required, .. } => {
            format!("its extended key usage does not allow {required:?}")
        }
        other => format!("{other:?}"),
    }
}

/// `localhost` for webpki's `DnsName("localhost")`; other forms as webpki gives them.
fn shown_name(presented: &str) -> &str {
    (presented.strip_prefix("DnsName(\""))
        .and_then(|s| s.strip_suffix("\")"))
        .unwrap_or(presented)
}

fn unreadable(e: anyhow::Error) -> NotProven {
    NotProven::Unreadable(format!("{e:#}"))
}

/// [`served_once`], asked again every half second until `bound` while the server may not
/// have read the file yet (an API server polls each minute).
pub async fn served(s: &Served, bound: Duration) -> Result<String, NotProven> {
    let deadline = Instant::now() + bound;
    loop {
        match served_once(s, Duration::from_secs(5)).await {
            Err(e) if e.may_pass_later() && Instant::now() < deadline => {
                sleep(Duration::from_millis(500)).await;
            }
            done => return done,
        }
    }
}

/// The renewed etcd client pair `cert`/`key` presented to the members at `urls` (verified
/// against `trust`), with a status request: the version the member answers, or why not.
pub async fn etcd_accepts(
    urls: &[String],
    trust: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Option<Version>, NotProven> {
    use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
    let read = |p: &Path| {
        crate::fsutil::read(p).map_err(|e| NotProven::Unreadable(format!("{}: {e:#}", p.display())))
    };
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(read(trust)?))
        .identity(Identity::from_pem(read(cert)?, read(key)?));
    let refused = |why: String| NotProven::PairRefused {
        server: urls.join(", "),
        cert: cert.to_path_buf(),
        why,
    };
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(5));
    let ask = async {
        let mut client = Client::connect(urls, Some(options)).await?;
        client.status().await
    };
    match timeout(Duration::from_secs(10), ask).await {
        Ok(Ok(status)) => Ok(Version::parse(status.version())),
        Ok(Err(e)) => Err(refused(
            crate::causes::Causes(&anyhow::Error::new(e)).to_string(),
        )),
        Err(_) => Err(refused("no answer within 10 s".into())),
    }
}

/// A client pair, as rustls presents it.
pub type Pair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The pair `cert`/`key` as files hold it; with the failpoint `pair-proof`, a throwaway
/// self-signed pair instead (a renewal the server refuses, for the tests of what follows).
pub fn pair_of(cert: &Path, key: &Path) -> Result<Pair, NotProven> {
    if crate::failpoint::io("pair-proof").is_err() {
        let made = (rcgen::KeyPair::generate())
            .and_then(|k| Ok((rcgen::CertificateParams::new(vec!["x".into()])?, k)))
            .and_then(|(p, k)| Ok((p.self_signed(&k)?, k)))
            .map_err(|e| NotProven::Unreadable(e.to_string()))?;
        let key = PrivateKeyDer::try_from(made.1.serialize_der())
            .map_err(|e| NotProven::Unreadable(e.to_string()))?;
        return Ok((vec![made.0.der().clone()], key));
    }
    pair(cert, key)
}

/// How a server that checks client pairs says it took one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// It answers 200; anything else refuses the pair (etcd refuses a pair it does not take
    /// in the handshake, or with an alert right after it).
    Answered200,
    /// It authenticated the pair: any answer but 401. kubelet takes any certificate in the
    /// handshake, authenticates it against its client CA, then asks the API server whether
    /// the user may: a 403, or an API server that cannot be asked, is no refusal of the pair.
    Authenticated,
}

/// A server a client pair is presented to, as the pair's reader reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checker {
    /// `host:port` to connect to.
    pub addr: String,
    /// The name the reader dials, sent as SNI when it is a name.
    pub name: String,
    /// The trust file the reader verifies the server with; none when it verifies nothing
    /// (kube-apiserver dials kubelet so without `--kubelet-certificate-authority`).
    pub trust: Option<PathBuf>,
    /// The request made.
    pub path: &'static str,
    pub taken: Taken,
}

impl Checker {
    /// An etcd listener where `at` shows it, asked `GET /version`, which it answers 200.
    pub fn etcd(at: crate::served::shown::Shown) -> Checker {
        Checker {
            addr: at.addr,
            name: at.name,
            trust: Some(at.trust),
            path: "/version",
            taken: Taken::Answered200,
        }
    }
}

/// The client pair `client` (its certificate file `cert`, for what is said) presented to
/// the server `at`, verified as the pair's reader verifies it, with a real request: how it
/// was accepted, or why not. A refusal in the handshake, or (TLS 1.3) an alert right after
/// it, or the answer `at.taken` calls one, is the server's refusal.
pub async fn accepts_at(at: &Checker, cert: &Path, client: Pair) -> Result<String, NotProven> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limit = Duration::from_secs(5);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = match &at.trust {
        Some(trust) => {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(trust)?), provider.clone())
                .build()
                .map_err(|e| NotProven::Unreadable(format!("{}: {e}", trust.display())))?
        }
        None => Arc::new(Witness::new(provider.clone(), None)),
    };
    let path = at.path;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| NotProven::Unreadable(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(client.0, client.1)
        .map_err(|e| NotProven::Unreadable(format!("{}: {e}", cert.display())))?;
    let unreachable = |why: String| NotProven::Unreachable {
        endpoint: at.addr.clone(),
        why,
    };
    // Refused by the server: it sent an alert. Anything else leaves the pair unproven.
    let ended = |e: std::io::Error| {
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
        match inner {
            Some(rustls::Error::AlertReceived(alert)) => NotProven::PairRefused {
                server: at.addr.clone(),
                cert: cert.to_path_buf(),
                why: format!("it answered with the TLS alert {alert:?}"),
            },
            Some(e @ rustls::Error::InvalidCertificate(_)) => unreachable(format!(
                "its own certificate: {}",
                refusal(e, at.trust.as_deref().unwrap_or(Path::new("?")), &at.name)
            )),
            _ => unreachable(e.to_string()),
        }
    };
    let name = ServerName::try_from(at.name.clone())
        .map_err(|e| unreachable(format!("{} is not a name to dial: {e}", at.name)))?;
    let tcp = timeout(limit, TcpStream::connect(&at.addr))
        .await
        .map_err(|_| unreachable("connect timed out".into()))?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => NotProven::NotListening {
                endpoint: at.addr.clone(),
                why: e.to_string(),
            },
            _ => unreachable(e.to_string()),
        })?;
    let exchange = async {
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            at.name
        );
        tls.write_all(request.as_bytes()).await?;
        // The status line is the answer: etcd's peer listener keeps the connection open
        // for seconds after it, whatever the request asked.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 512];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match tls.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                // An answer, then the connection closed without TLS's goodbye: answered.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok::<_, std::io::Error>(answer)
    };
    let answer = timeout(limit, exchange)
        .await
        .map_err(|_| unreachable("no answer within 5 s".into()))?
        .map_err(ended)?;
    let text = String::from_utf8_lossy(&answer);
    let status = (text.lines().next())
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    let verified = match &at.trust {
        Some(trust) => format!("verified against {}", trust.display()),
        None => "not verified, as its reader does not verify it".to_string(),
    };
    match (status, at.taken) {
        ("", _) => Err(unreachable(
            "it closed the connection without an answer".into(),
        )),
        ("200", Taken::Answered200) => Ok(format!(
            "{} accepted it (GET {path} said 200), {verified}",
            at.addr,
        )),
        (other, Taken::Authenticated) if other != "401" => Ok(format!(
            "{} authenticated it (GET {path} said {other}), {verified}",
            at.addr,
        )),
        (other, _) => Err(NotProven::PairRefused {
            server: at.addr.clone(),
            cert: cert.to_path_buf(),
            why: format!("GET {path} said {other}"),
        }),
    }
}

/// Why a renewed file's reload was not proven, and what follows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unproven {
    /// Nothing to prove it by, or the rules say it is not read again: restart instead.
    #[error("{0}")]
    Restart(String),
    /// Asked, and not shown in use within the bound: restart instead.
    #[error("{0}")]
    NotShown(NotProven),
    /// Shown, and refused as its clients would refuse it: roll the file back.
    #[error("{0}")]
    Refused(NotProven),
}

/// Proves that the component `c`, running `version`, took the renewed `cert` in by itself
/// (`rotated`: with a new key), at every place its settings say it serves the file, within
/// `bound`: how it was shown, or what follows instead. `client` is a pair the component
/// accepts, for a server that asks for one.
pub async fn prove_file(
    c: &crate::components::Component,
    cert: &Path,
    version: Option<Version>,
    rotated: bool,
    client: Option<(PathBuf, PathBuf)>,
    bound: Duration,
) -> Result<Vec<String>, Unproven> {
    use crate::components::reload_rules::{Proof, decide};
    let Some(kind) = c.kind else {
        return Err(Unproven::Restart("what it runs is not known".into()));
    };
    let settings: Vec<&str> = (c.files.iter())
        .filter(|(_, p)| p == cert)
        .map(|(s, _)| s.as_str())
        .collect();
    if settings.is_empty() {
        return Err(Unproven::Restart(format!(
            "no setting of {} names {}",
            kind.name(),
            cert.display()
        )));
    }
    let mut shown = Vec::new();
    for setting in settings {
        let why = |why: String| Unproven::Restart(format!("--{setting}: {why}"));
        let rule = decide(kind, setting, version, rotated).map_err(|e| why(e.to_string()))?;
        if rule.proof == Proof::Presents {
            return Err(why(
                "a client pair's reload is not proven by this version".into()
            ));
        }
        for at in crate::served::shown::shown(c, rule).map_err(|e| why(e.to_string()))? {
            let served = Served {
                endpoint: at.addr.clone(),
                name: at.name.clone(),
                trust: at.trust.clone(),
                cert: at.cert.clone(),
                client: client.clone(),
            };
            match self::served(&served, bound).await {
                Ok(serial) => shown.push(format!(
                    "{} serves serial {serial} to {} ({}), verified against {}",
                    at.addr,
                    at.name,
                    at.from,
                    at.trust.display()
                )),
                Err(e @ NotProven::Refused { .. }) => return Err(Unproven::Refused(e)),
                Err(e) => return Err(Unproven::NotShown(e)),
            }
        }
    }
    Ok(shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A TLS server on loopback that answers every request with `status`, as kubelet
    /// answers a pair it did not authenticate (401) or a user it may not serve (403).
    async fn answering(status: &'static str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = (rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap())
            .self_signed(&key)
            .unwrap();
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut request = [0u8; 1024];
                let _ = tls.read(&mut request).await;
                let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        });
        addr
    }

    fn throwaway() -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = (rcgen::CertificateParams::new(vec!["client".into()]).unwrap())
            .self_signed(&key)
            .unwrap();
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (vec![cert.der().clone()], key)
    }

    #[tokio::test]
    async fn kubelets_answer_tells_an_authenticated_pair_from_a_refused_one() {
        let ask = |addr: String, taken| async move {
            let at = Checker {
                addr,
                name: "127.0.0.1".into(),
                trust: None,
                path: "/healthz",
                taken,
            };
            accepts_at(&at, Path::new("/pki/client.crt"), throwaway()).await
        };
        let forbidden = answering("403 Forbidden").await;
        assert_eq!(
            ask(forbidden.clone(), Taken::Authenticated).await,
            Ok(format!(
                "{forbidden} authenticated it (GET /healthz said 403), not verified, as its reader does not verify it"
            ))
        );
        assert!(matches!(
            ask(forbidden, Taken::Answered200).await,
            Err(NotProven::PairRefused { .. })
        ));
        let unauthorized = answering("401 Unauthorized").await;
        assert_eq!(
            ask(unauthorized.clone(), Taken::Authenticated).await,
            Err(NotProven::PairRefused {
                server: unauthorized,
                cert: "/pki/client.crt".into(),
                why: "GET /healthz said 401".into(),
            })
        );
    }
}
