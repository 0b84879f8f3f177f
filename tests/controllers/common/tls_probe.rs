//! A probe of TLS servers inside the controllers' network (tests/controllers/apiserver_ready.rs):
//! every [`INTERVAL`] one sample, each server asked at once with the daemon's own request
//! (`certrenewd::restart::endpoints::ask`: a handshake, then `GET path`). A server is up in a
//! sample when it completed the handshake and answered 200, 401 or 403 (an API server
//! refusing anonymous requests answers). The thread runs in the network namespace
//! ([`spawn_in_netns`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use certrenewd::restart::endpoints::{Reply, ask};

use super::etcd_probe::spawn_in_netns;

/// How often a sample starts.
pub const INTERVAL: Duration = Duration::from_millis(200);
/// How long a server may take to complete its handshake or to answer.
pub const DEADLINE: Duration = Duration::from_millis(1000);

/// One sample: when it started (since the probe started) and, per server, the serial it
/// served when up, or what it did instead.
#[derive(Clone, Debug)]
pub struct Sample {
    pub start: Duration,
    pub servers: Vec<Result<String, String>>,
}

impl Sample {
    pub fn up_count(&self) -> usize {
        self.servers.iter().filter(|s| s.is_ok()).count()
    }
}

/// A running probe; [`TlsProbe::stop`] ends it and returns its samples.
pub struct TlsProbe {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: JoinHandle<anyhow::Result<()>>,
}

impl TlsProbe {
    /// Starts asking `path` of each of `servers` (`host:port`) from inside `netns`.
    pub fn start(netns: &Path, servers: &[String], path: &str) -> anyhow::Result<TlsProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (stop2, samples2) = (stop.clone(), samples.clone());
        let (servers, path) = (servers.to_vec(), path.to_string());
        let thread = spawn_in_netns(netns, "tls-probe", move || async move {
            let started = Instant::now();
            while !stop2.load(Ordering::SeqCst) {
                let tick = Instant::now();
                let asks = servers.iter().map(|s| up(s, &path));
                let servers = futures_util::future::join_all(asks).await;
                let start = tick - started;
                samples2.lock().unwrap().push(Sample { start, servers });
                tokio::time::sleep(INTERVAL.saturating_sub(tick.elapsed())).await;
            }
            Ok(())
        })?;
        Ok(TlsProbe {
            stop,
            samples,
            thread,
        })
    }

    /// Samples so far (a copy).
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap().clone()
    }

    /// Stops the probe and returns every sample, in order.
    pub fn stop(self) -> anyhow::Result<Vec<Sample>> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the probe thread panicked"))??;
        Ok(self.samples.lock().unwrap().clone())
    }
}

/// Whether `server` is up: the serial it serves, or what it did.
async fn up(server: &str, path: &str) -> Result<String, String> {
    let (serial, reply) = ask(server, path, &None, DEADLINE)
        .await
        .map_err(|e| format!("{e:#}"))?;
    match reply {
        Reply::Status(200 | 401 | 403) => Ok(serial),
        other => Err(format!("serial {serial}, {path}: {other:?}")),
    }
}

/// The longest run of samples in which server `i` was down: (its length, from the first
/// down sample's start to the next up sample's start, or to the last sample).
pub fn longest_down(samples: &[Sample], i: usize) -> Duration {
    let mut longest = Duration::ZERO;
    let mut from: Option<Duration> = None;
    for s in samples {
        match (&s.servers[i], from) {
            (Err(_), None) => from = Some(s.start),
            (Ok(_), Some(f)) => {
                longest = longest.max(s.start - f);
                from = None;
            }
            _ => {}
        }
    }
    if let (Some(f), Some(last)) = (from, samples.last()) {
        longest = longest.max(last.start - f);
    }
    longest
}
