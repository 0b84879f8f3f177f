//! A probe of an etcd cluster running inside a network namespace (tests/controllers/ha.rs).
//!
//! One thread joins the namespace (setns(2) affects only the calling thread, and the threads it
//! creates) and runs a current-thread tokio runtime there, so every socket the `etcd-client`
//! crate opens is inside. Every [`INTERVAL`] it starts one sample, without waiting for the
//! previous one: a `Status` call to each member over its own mTLS connection (healthy: it
//! answers within [`DEADLINE`], knows a leader and reports no error), and a put of a counter
//! through a client of all the members (with `require_leader`, so a member without a leader
//! refuses at once instead of queueing). Its client certificate is the probe's own, not one of
//! the certificates under renewal.
//!
//! On a loaded machine the probe's own thread can be descheduled for a second: every call in
//! flight then times out and a sample reads as "nothing healthy" when only the probe slept. A
//! tick that comes [`STALL`] late marks that window; samples overlapping it (or starting just
//! after it) are *blind*: kept and printed, but not counted for or against the cluster
//! ([`Report::seen`]), and a report with more than a quarter blind is itself a failure
//! ([`Report::assert_awake`]).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

/// How often a sample starts.
pub const INTERVAL: Duration = Duration::from_millis(200);
/// How long one call of a sample may take before it counts as failed.
pub const DEADLINE: Duration = Duration::from_millis(1000);
/// A tick this late means the probe's thread was not running: the samples then are blind.
pub const STALL: Duration = Duration::from_millis(300);
/// The key the probe writes.
pub const KEY: &str = "/certrenewd-probe/counter";

/// The probe's client identity and the CA of the members.
#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One sample: when it started and ended (since the probe started), which members were healthy,
/// and whether the write went through.
#[derive(Clone, Debug)]
pub struct Sample {
    pub start: Duration,
    pub end: Duration,
    pub healthy: Vec<bool>,
    /// Which members answered at all (healthy, or in an election: no leader for a moment,
    /// as when a leader stops and hands over). One that did not is down, frozen or cut off.
    pub up: Vec<bool>,
    pub wrote: bool,
    /// The probe's thread was stalled during the sample: what it saw says nothing.
    pub blind: bool,
}

impl Sample {
    pub fn healthy_count(&self) -> usize {
        self.healthy.iter().filter(|h| **h).count()
    }

    pub fn up_count(&self) -> usize {
        self.up.iter().filter(|h| **h).count()
    }
}

/// A running probe; [`Probe::stop`] ends it and returns what it saw.
pub struct Probe {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stalls: Arc<Mutex<Vec<Stall>>>,
    thread: JoinHandle<anyhow::Result<()>>,
    started: SystemTime,
}

impl Probe {
    /// Starts probing `endpoints` (one per member) from inside the network namespace `netns`
    /// (a path such as /run/netns/NAME).
    pub fn start(netns: &Path, endpoints: &[String], tls: &Tls) -> anyhow::Result<Probe> {
        let options = connect_options(tls)?;
        let (stop, samples) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let stalls = Arc::default();
        let (stop2, samples2) = (Arc::clone(&stop), Arc::clone(&samples));
        let stalls2 = Arc::clone(&stalls);
        let endpoints = endpoints.to_vec();
        let thread = spawn_in_netns(netns, "etcd-probe", move || {
            run(endpoints, options, stop2, samples2, stalls2)
        })?;
        Ok(Probe {
            stop,
            samples,
            stalls,
            thread,
            started: SystemTime::now(),
        })
    }

    /// Samples so far (a copy), in the order they started, blind ones marked.
    pub fn samples(&self) -> Vec<Sample> {
        marked(&self.samples, &self.stalls)
    }

    /// Stops the probe (after the samples in flight end) and returns its report.
    pub fn stop(self) -> anyhow::Result<Report> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the probe thread panicked"))??;
        Ok(Report {
            samples: marked(&self.samples, &self.stalls),
            stalls: self.stalls.lock().unwrap().clone(),
            started: self.started,
        })
    }
}

/// Runs the future `make` returns on a thread of its own inside the network namespace
/// `netns` (setns(2) changes only the calling thread), on a current-thread runtime: every
/// socket it opens is inside.
pub fn spawn_in_netns<F, Fut>(
    netns: &Path,
    name: &str,
    make: F,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let ns = File::open(netns).with_context(|| format!("opening {}", netns.display()))?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // SAFETY: setns(2) on a file descriptor we own; it changes only this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error()).context("setns into the netns");
            }
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("the probe's runtime")?
                .block_on(make())
        })
        .context("starting the probe thread")
}

/// A window (since the probe started) in which its thread did not run.
#[derive(Clone, Copy, Debug)]
struct Stall {
    from: Duration,
    to: Duration,
}

/// The samples in the order they started, each marked blind when it overlaps a stall or
/// starts within a [`DEADLINE`] after one (the stall may have cut the connections it uses:
/// seen here, after a SIGSTOP of 1.2 s, as the next sample's failed write).
fn marked(samples: &Mutex<Vec<Sample>>, stalls: &Mutex<Vec<Stall>>) -> Vec<Sample> {
    let stalls = stalls.lock().unwrap().clone();
    let mut v = samples.lock().unwrap().clone();
    for s in &mut v {
        s.blind = stalls
            .iter()
            .any(|w| s.start <= w.to + DEADLINE && w.from <= s.end);
    }
    v.sort_by_key(|s| s.start);
    v
}

fn connect_options(tls: &Tls) -> anyhow::Result<ConnectOptions> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(read(&tls.ca)?))
        .identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?));
    Ok(ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(DEADLINE)
        .with_timeout(DEADLINE)
        .with_require_leader(true))
}

async fn run(
    endpoints: Vec<String>,
    options: ConnectOptions,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stalls: Arc<Mutex<Vec<Stall>>>,
) -> anyhow::Result<()> {
    let mut members = Vec::new();
    for e in &endpoints {
        let client = Client::connect([e], Some(options.clone()))
            .await
            .with_context(|| format!("a client of {e}"))?;
        members.push(client);
    }
    let all = Client::connect(&endpoints, Some(options))
        .await
        .context("a client of the cluster")?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut inflight = tokio::task::JoinSet::new();
    let mut n: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let due = tick.tick().await;
        let late = due.elapsed();
        if late >= STALL {
            let to = started.elapsed();
            stalls.lock().unwrap().push(Stall {
                from: to.saturating_sub(late),
                to,
            });
        }
        n += 1;
        let (members, all, samples) = (members.clone(), all.clone(), Arc::clone(&samples));
        inflight.spawn(async move {
            let sample = sample(started, members, all, n).await;
            samples.lock().unwrap().push(sample);
        });
        while inflight.try_join_next().is_some() {}
    }
    while inflight.join_next().await.is_some() {}
    Ok(())
}

async fn sample(started: Instant, members: Vec<Client>, mut all: Client, n: u64) -> Sample {
    let start = started.elapsed();
    let health = members.into_iter().map(|mut c| async move {
        match tokio::time::timeout(DEADLINE, c.status()).await {
            Ok(Ok(s)) => (s.leader() != 0 && s.errors().is_empty(), true),
            _ => (false, false),
        }
    });
    let put = async {
        matches!(
            tokio::time::timeout(DEADLINE, all.put(KEY, n.to_string(), None)).await,
            Ok(Ok(_))
        )
    };
    let (answers, wrote) = tokio::join!(futures_util::future::join_all(health), put);
    let (healthy, up) = answers.into_iter().unzip();
    Sample {
        start,
        end: started.elapsed(),
        healthy,
        up,
        wrote,
        blind: false,
    }
}

/// What the probe saw.
pub struct Report {
    pub samples: Vec<Sample>,
    stalls: Vec<Stall>,
    started: SystemTime,
}

/// The longest time without a successful write: from the end of one successful put to the end
/// of the next (about [`INTERVAL`] when nothing is wrong), and when it began.
#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub length: Duration,
    pub from: Duration,
}

impl Report {
    /// The samples taken while the probe's thread ran (not blind).
    pub fn seen(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| !s.blind)
    }

    /// How many samples are blind.
    pub fn blind(&self) -> usize {
        self.samples.iter().filter(|s| s.blind).count()
    }

    /// Fails when more than a quarter of the samples are blind: what the probe did not see
    /// cannot be called kept. (One stall blinds about six samples: itself and a deadline.)
    pub fn assert_awake(&self) {
        assert!(
            self.blind() * 4 <= self.samples.len(),
            "the probe's thread was stalled for {} of {} samples: this machine is too loaded to judge the cluster\n{}",
            self.blind(),
            self.samples.len(),
            self.summary()
        );
    }

    /// Awake, the probe saw all `members` healthy and every write committed at every
    /// sample: nothing went down.
    pub fn assert_nothing_went_down(&self, members: usize) {
        self.assert_awake();
        let (min, at) = self.min_healthy().expect("samples");
        assert_eq!(
            min,
            members,
            "at {}: {}",
            self.wall(at.start),
            self.summary()
        );
        let failed = self.seen().find(|s| !s.wrote);
        assert!(
            failed.is_none(),
            "a write failed at {:?}\n{}",
            failed.map(|s| self.wall(s.start)),
            self.summary()
        );
    }

    /// The fewest healthy members at any sample the probe saw, and the first that saw it.
    pub fn min_healthy(&self) -> Option<(usize, &Sample)> {
        let min = self.seen().map(Sample::healthy_count).min()?;
        let at = self.seen().find(|s| s.healthy_count() == min)?;
        Some((min, at))
    }

    /// The longest write outage, counting from the probe's first sample to its last; a gap
    /// the probe's thread stalled in is not counted (no write was tried then).
    pub fn longest_write_outage(&self) -> Outage {
        let mut last = Duration::ZERO;
        let mut worst = Outage {
            length: Duration::ZERO,
            from: Duration::ZERO,
        };
        let mut ends: Vec<Duration> = self
            .samples
            .iter()
            .filter(|s| s.wrote)
            .map(|s| s.end)
            .collect();
        ends.sort();
        let finish = self.samples.iter().map(|s| s.end).max().unwrap_or_default();
        for end in ends.into_iter().chain([finish]) {
            let stalled = self
                .stalls
                .iter()
                .any(|w| last <= w.to + DEADLINE && w.from <= end);
            if !stalled && end.saturating_sub(last) > worst.length {
                worst = Outage {
                    length: end - last,
                    from: last,
                };
            }
            last = end;
        }
        worst
    }

    /// A wall-clock time (UTC) of an offset from the start, to compare with journals.
    pub fn wall(&self, at: Duration) -> String {
        let t: chrono::DateTime<chrono::Utc> = (self.started + at).into();
        t.format("%H:%M:%S%.3f").to_string()
    }

    /// One paragraph: samples, fewest healthy and when, longest write outage and when, and
    /// every sample with fewer than all members healthy or a failed write.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "probe: {} samples ({} blind: its thread stalled)",
            self.samples.len(),
            self.blind()
        );
        if let Some((min, at)) = self.min_healthy() {
            text += &format!(
                ", min healthy {min} of {} (first at {})",
                at.healthy.len(),
                self.wall(at.start)
            );
        }
        let o = self.longest_write_outage();
        text += &format!(
            ", longest write outage {} ms (from {})",
            o.length.as_millis(),
            self.wall(o.from)
        );
        for s in &self.samples {
            if s.healthy.iter().any(|h| !h) || !s.wrote {
                // + healthy, o answering without a leader (an election), - no answer
                let marks: String = (s.healthy.iter().zip(&s.up))
                    .map(|(h, u)| match (h, u) {
                        (true, _) => '+',
                        (false, true) => 'o',
                        (false, false) => '-',
                    })
                    .collect();
                let w = if s.wrote { "write ok" } else { "WRITE FAILED" };
                let b = if s.blind { " (blind)" } else { "" };
                text += &format!("\n  {} healthy [{marks}] {w}{b}", self.wall(s.start));
            }
        }
        text
    }
}
