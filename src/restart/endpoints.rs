//! The served-certificate check: after the units restart, connect to each configured TLS
//! endpoint and confirm it serves the certificate now on disk, not the one it replaced.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use crate::format::cert::CertFacts;
use crate::format::pem;

/// What one endpoint should serve.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// Index of the watch that lists the endpoint.
    pub watch: usize,
    /// `host:port`.
    pub endpoint: String,
    /// Serials (hex) of the certificates under the watch now.
    pub current: Vec<String>,
    /// Serials (hex) and paths of certificates this pass replaced.
    pub replaced: Vec<(String, PathBuf)>,
    /// A client certificate and key file from the watch, for servers that require one.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// How one endpoint check went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointCheck {
    /// `host:port`.
    pub endpoint: String,
    /// It serves a current certificate.
    pub ok: bool,
    /// A sentence for people and alarms.
    pub detail: String,
}

/// What a server presented, and how verifying it as its clients do went (none when it is
/// accepted whatever it is).
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub leaf: Option<Vec<u8>>,
    pub verdict: Option<Result<(), rustls::Error>>,
}

/// Notes the certificate a server presents. With `verify`, verifies it as a client of the
/// server does (webpki: chain to a trust file, validity now, the name dialed, serverAuth)
/// and notes the verdict, which the handshake alone would reduce to one error; without, it
/// accepts any: the check compares it with what is on disk instead of trusting it.
#[derive(Debug)]
pub(super) struct Witness {
    provider: Arc<rustls::crypto::CryptoProvider>,
    verify: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    pub seen: std::sync::Mutex<Seen>,
}

impl Witness {
    pub(super) fn new(
        provider: Arc<rustls::crypto::CryptoProvider>,
        verify: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    ) -> Witness {
        Witness {
            provider,
            verify,
            seen: std::sync::Mutex::default(),
        }
    }

    /// What was seen, taken.
    pub(super) fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ServerCertVerifier for Witness {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = match &self.verify {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Ok(ServerCertVerified::assertion()),
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.leaf = Some(end_entity.to_vec());
        seen.verdict = Some(verdict.as_ref().map(|_| ()).map_err(Clone::clone));
        verdict
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

pub(super) fn read_pem(path: &PathBuf, want_key: bool) -> anyhow::Result<Vec<u8>> {
    let data = crate::fsutil::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !pem::is_pem(&data) {
        return Ok(data);
    }
    pem::blocks(&data)
        .into_iter()
        .filter_map(Result::ok)
        .find(|b| {
            if want_key {
                crate::format::key::is_private_key_label(&b.label)
            } else {
                b.label == "CERTIFICATE"
            }
        })
        .map(|b| b.der)
        .with_context(|| format!("nothing usable in {}", path.display()))
}

fn client_config(client: &Option<(PathBuf, PathBuf)>) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Witness::new(provider, None)));
    Ok(match client {
        Some((cert, key)) => {
            let chain = vec![CertificateDer::from(read_pem(cert, false)?)];
            let key = PrivateKeyDer::try_from(read_pem(key, true)?)
                .map_err(|e| anyhow!("client key {}: {e}", key.display()))?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    })
}

/// A TLS connection to `endpoint` (`host:port`), each of its two stages bounded by `limit`.
async fn connect(
    endpoint: &str,
    config: Arc<rustls::ClientConfig>,
    limit: Duration,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(h, _)| h)
        .trim_matches(['[', ']']);
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| anyhow!("{host} is not a host name or address: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = timeout(limit, TcpStream::connect(endpoint))
        .await
        .map_err(|_| anyhow!("connect timed out"))?
        .context("connect")?;
    timeout(limit, connector.connect(name, tcp))
        .await
        .map_err(|_| anyhow!("TLS handshake timed out"))?
        .context("TLS handshake")
}

/// The serial of the leaf certificate a TLS connection was served.
fn leaf_serial(tls: &tokio_rustls::client::TlsStream<TcpStream>) -> anyhow::Result<String> {
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .context("no certificate served")?;
    let facts = CertFacts::parse(leaf.to_vec()).map_err(|e| anyhow!(e))?;
    Ok(facts.serial)
}

/// What a TLS server answered a plain request, after its handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP status line with this code.
    Status(u16),
    /// A TLS alert after the handshake: it wants a client certificate (this one).
    ClientCertWanted(String),
    /// Nothing usable: closed, timed out, not HTTP (what happened).
    Nothing(String),
}

/// What `endpoint` (`host:port`) serves: the serial of its leaf certificate (any accepted,
/// none presented), and its reply to `GET path`. `Err`: no TLS connection (refused, timed
/// out, handshake failed), with why. Each stage is bounded by `limit`.
pub async fn ask(
    endpoint: &str,
    path: &str,
    client: &Option<(PathBuf, PathBuf)>,
    limit: Duration,
) -> anyhow::Result<(String, Reply)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = connect(endpoint, Arc::new(client_config(client)?), limit).await?;
    let serial = leaf_serial(&tls)?;
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut head = Vec::new();
    let read = timeout(limit, async {
        tls.write_all(request.as_bytes()).await?;
        let mut buf = [0u8; 512];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
            match tls.read(&mut buf).await? {
                0 => break,
                n => head.extend_from_slice(&buf[..n]),
            }
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or_default().trim();
    let code = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let reply = match (read, code) {
        (Ok(Ok(())), Some(code)) if line.starts_with("HTTP/") => Reply::Status(code),
        (Ok(Ok(())), _) => Reply::Nothing(format!("answered {line:?}")),
        (Ok(Err(e)), _) if e.to_string().contains("alert") => {
            Reply::ClientCertWanted(e.to_string())
        }
        (Ok(Err(e)), _) => Reply::Nothing(e.to_string()),
        (Err(_), _) => Reply::Nothing("did not answer".into()),
    };
    Ok((serial, reply))
}

/// What a TLS server at `endpoint` (`host:port`) says of the client certificate `cert`
/// (with `key`): `None` when it completes a handshake with it and does not close on it
/// within `limit`; else the TLS error (`received fatal alert: BadCertificate`, ...).
pub async fn client_refused(
    endpoint: &str,
    cert: &std::path::Path,
    key: &std::path::Path,
    limit: Duration,
) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let client = Some((cert.to_path_buf(), key.to_path_buf()));
    let config = match client_config(&client) {
        Ok(c) => Arc::new(c),
        Err(e) => return Some(format!("{e:#}")),
    };
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(h, _)| h)
        .trim_matches(['[', ']']);
    let name = ServerName::try_from(host.to_string()).ok()?;
    let tcp = timeout(limit, TcpStream::connect(endpoint))
        .await
        .ok()?
        .ok()?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut tls = match timeout(limit, connector.connect(name, tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return Some(e.to_string()),
        Err(_) => return None,
    };
    // Under TLS 1.3 a server refuses a client certificate after the client's last flight:
    // the alert arrives on the first read.
    let mut byte = [0u8; 1];
    match timeout(limit, tls.read(&mut byte)).await {
        Ok(Err(e)) => Some(e.to_string()),
        _ => None,
    }
}

/// Checks one endpoint, retrying until `limit` for a restarted service to come up.
pub async fn check_one(e: &Expectation, limit: Duration) -> EndpointCheck {
    let config = match client_config(&e.client) {
        Ok(c) => Arc::new(c),
        Err(err) => {
            return EndpointCheck {
                endpoint: e.endpoint.clone(),
                ok: false,
                detail: format!("cannot set up the TLS client: {err:#}"),
            };
        }
    };
    let deadline = Instant::now() + limit;
    loop {
        let attempt = connect(&e.endpoint, config.clone(), Duration::from_secs(5))
            .await
            .and_then(|tls| leaf_serial(&tls));
        let verdict = match &attempt {
            Ok(serial) if e.current.contains(serial) => {
                return EndpointCheck {
                    endpoint: e.endpoint.clone(),
                    ok: true,
                    detail: format!("serves the current certificate (serial {serial})"),
                };
            }
            Ok(serial) => match e.replaced.iter().find(|(s, _)| s == serial) {
                Some((_, path)) => format!(
                    "still serves the replaced certificate {} (serial {serial})",
                    path.display()
                ),
                None => format!(
                    "serves a certificate (serial {serial}) that is not under the watched directory"
                ),
            },
            Err(err) => format!("{err:#}"),
        };
        if Instant::now() >= deadline {
            return EndpointCheck {
                endpoint: e.endpoint.clone(),
                ok: false,
                detail: format!("endpoint {}: {verdict}", e.endpoint),
            };
        }
        sleep(Duration::from_millis(500)).await;
    }
}

/// Checks every endpoint, one after the other.
pub async fn check_all(expectations: &[Expectation], limit: Duration) -> Vec<EndpointCheck> {
    let mut out = Vec::new();
    for e in expectations {
        let c = check_one(e, limit).await;
        if c.ok {
            tracing::info!(endpoint = %c.endpoint, "{}", c.detail);
        } else {
            tracing::warn!(endpoint = %c.endpoint, "{}", c.detail);
        }
        out.push(c);
    }
    out
}
