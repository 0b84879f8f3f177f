//! Watching the other controllers, in a task of its own beside the passes, that never waits
//! on a pass nor makes one wait: every half lease TTL it reads every controller's record in etcd
//! (within [`PUBLISH_FOR`]), raises and clears the alarms on their behalf (quiet, failing,
//! drift: `crate::alarms::on_behalf`) in a store of their own (`peer-alarms.json`, which no pass
//! writes), writes the cluster's gauges beside the metrics file, and asks the daemon to
//! publish this node's record again when its alarms changed. A record not in etcd (its
//! lease lost, or etcd out of reach when it was written) it puts again itself, as written,
//! also while a pass runs.
//!
//! The first look waits one lease TTL after start: a controller started with this one
//! publishes its record well within that, and is not called quiet for a moment at boot. A
//! controller that stops takes its record away at once (a dead one's goes with its lease,
//! within a TTL), so it is seen quiet within two lease lifetimes. Likewise after etcd could
//! not be read: the records may have gone with their leases, and each daemon puts its own
//! back within a TTL, so the others are judged again one TTL after etcd answers.

use crate::coordinate::EtcdGate;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::published::{self, PUBLISH_FOR};
use crate::alarms::{self, AlarmSink, AlarmStore};
use crate::config::Settings;
use crate::coordinate::publish::{Unreached, read_cluster};
use crate::coordinate::view::{Counts, view};

/// What the watch works with, handed in again by each reload.
pub(super) struct Watched {
    pub settings: Settings,
    pub sinks: Arc<Vec<Box<dyn AlarmSink>>>,
    pub publisher: published::Shared,
    /// What the node runs, as the last pass read it: where etcd's settings and client
    /// pairs are.
    pub node: super::Reading,
}

/// The running watch.
pub(super) struct Watcher {
    tx: watch::Sender<Arc<Watched>>,
    task: JoinHandle<()>,
    /// Notified when this node's record is to be published again.
    pub wanted: Arc<Notify>,
}

impl Watcher {
    /// Starts watching under `w`.
    pub fn start(w: Watched) -> Watcher {
        let (tx, rx) = watch::channel(Arc::new(w));
        let wanted = Arc::new(Notify::new());
        let task = tokio::spawn(watching(rx, wanted.clone()));
        Watcher { tx, task, wanted }
    }

    /// Watches under a reloaded configuration from now on.
    pub fn update(&self, w: Watched) {
        let _ = self.tx.send(Arc::new(w));
    }

    /// Stops watching (the daemon stops); the alarms raised stay for the next start to
    /// reconcile.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// How often the other controllers are looked at: every half lease TTL, at least every second.
fn every(settings: &Settings) -> Duration {
    (settings.coordination.lease_ttl / 2).max(Duration::from_secs(1))
}

/// How long the watch's file work (its alarm store, the cluster's gauges) may take before
/// the watch is said to be stuck on it.
const FILES_FOR: Duration = Duration::from_secs(20);

/// What the last looks found, for the gauges and for saying a change once.
struct Seen {
    counts: Option<Counts>,
    /// Why the last look could not read the cluster.
    error: Option<String>,
    /// Until when, after etcd could not be read, the alarms on the others' behalf stay as
    /// they are: their records may have gone with their leases meanwhile, and each daemon
    /// puts its own again within a lease TTL of etcd answering.
    grace_until: Option<tokio::time::Instant>,
    /// The file work that has not returned within `files_for`, while it has not.
    stuck: Option<Stuck>,
    files_for: Duration,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            counts: None,
            error: None,
            grace_until: None,
            stuck: None,
            files_for: FILES_FOR,
        }
    }
}

/// File work of the watch that did not return in time.
struct Stuck {
    what: &'static str,
    since: tokio::time::Instant,
    job: tokio::task::AbortHandle,
}

/// Runs the watch's file work `f` on a blocking thread, one at a time. Work that does not
/// return within `seen.files_for` (a file system that blocks) is left to its thread and
/// said once; until it returns no more is started, so the watch never piles up threads the
/// passes need, and the alarms on the others' behalf are said to be stale meanwhile. None
/// when `f` did not run or return. Nothing here feeds the watchdog: its steps are not a
/// pass's (`crate::progress`).
async fn on_files<T: Send + 'static>(
    seen: &mut Seen,
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if let Some(stuck) = &seen.stuck {
        if !stuck.job.is_finished() {
            return None;
        }
        tracing::info!(
            "{} returned after {}s: the watch of the other controllers goes on",
            stuck.what,
            stuck.since.elapsed().as_secs()
        );
        seen.stuck = None;
    }
    let since = tokio::time::Instant::now();
    let mut job = tokio::task::spawn_blocking(f);
    match tokio::time::timeout(seen.files_for, &mut job).await {
        Ok(Ok(out)) => Some(out),
        Ok(Err(e)) => {
            tracing::error!("{what}: {e}");
            None
        }
        Err(_) => {
            tracing::error!(
                "{what} has not returned within {}s (a file or file system that blocks?): \
                 the watch of the other controllers waits for it, and the alarms raised on \
                 their behalf (500.230, 500.240, 500.250) and the cluster's gauges are stale \
                 until it returns",
                seen.files_for.as_secs()
            );
            seen.stuck = Some(Stuck {
                what,
                since,
                job: job.abort_handle(),
            });
            None
        }
    }
}

async fn watching(mut rx: watch::Receiver<Arc<Watched>>, wanted: Arc<Notify>) {
    let mut seen = Seen::default();
    let mut first = true;
    loop {
        let w = rx.borrow_and_update().clone();
        let wait = match first {
            true => w.settings.coordination.lease_ttl,
            false => every(&w.settings),
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = rx.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        }
        first = false;
        published::publish_owed(&w.publisher).await;
        look(&w, &mut seen, &wanted).await;
    }
}

/// One look at the cluster.
async fn look(w: &Watched, seen: &mut Seen, wanted: &Notify) {
    let settings = &w.settings;
    let now = OffsetDateTime::now_utc();
    // `watching` is false with coordination off too.
    let read = match !published::watching(&w.publisher, settings) {
        true => Err(Unreached::Alone(
            "coordination is off or the cluster has one member".into(),
        )),
        false => {
            let conf = &settings.coordination;
            let node = w.node.read().map(|n| n.clone()).unwrap_or_default();
            // The member list read is recorded: it is what tells a cluster that is down
            // from members out of this node's sight, and this watch reads it most often.
            let gate = EtcdGate::new(conf)
                .recording_in(&settings.state_dir)
                .knowing(&node);
            let read = read_cluster(conf, gate);
            match tokio::time::timeout(PUBLISH_FOR, read).await {
                Ok(r) => r,
                Err(_) => Err(Unreached::Not(format!(
                    "no etcd member answered within {}s",
                    PUBLISH_FOR.as_secs()
                ))),
            }
        }
    };
    let cluster = match read {
        Ok(c) => c,
        // Nobody else to watch: what was raised on others' behalf is over.
        Err(Unreached::Alone(_)) => {
            seen.counts = None;
            seen.error = None;
            apply(w, seen, Vec::new(), now, wanted).await;
            return;
        }
        Err(Unreached::Not(why)) => {
            if seen.error.as_deref() != Some(why.as_str()) {
                tracing::warn!(
                    "cannot read the other controllers' records in etcd: {why}; the alarms \
                     raised on their behalf (500.230, 500.240, 500.250) stay as they are \
                     until it can"
                );
            }
            seen.error = Some(why);
            gauges(settings, seen, false, now).await;
            return;
        }
    };
    let ttl = settings.coordination.lease_ttl;
    let v = view(&cluster, now.unix_timestamp());
    seen.counts = Some(v.summary.clone());
    if seen.read_at(tokio::time::Instant::now(), ttl) {
        let desired = alarms::on_behalf::desired(&v, now.unix_timestamp());
        apply(w, seen, desired, now, wanted).await;
    }
    gauges(settings, seen, true, now).await;
}

impl Seen {
    /// The cluster was read at `now`. After looks that could not read it, a grace of `ttl`
    /// begins, within which the others are not judged (nothing raised nor cleared on their
    /// behalf): whether this look judges them.
    fn read_at(&mut self, now: tokio::time::Instant, ttl: Duration) -> bool {
        if self.error.take().is_some() {
            tracing::info!(
                "the other controllers' records in etcd can be read again; the alarms raised \
                 on their behalf are judged again in {}s, once each has had a lease TTL to put \
                 its record back",
                ttl.as_secs()
            );
            self.grace_until = Some(now + ttl);
        }
        match self.grace_until {
            Some(until) if now < until => false,
            _ => {
                self.grace_until = None;
                true
            }
        }
    }
}

/// Raises and clears the alarms on the others' behalf; a change is published with this
/// node's record.
async fn apply(
    w: &Watched,
    seen: &mut Seen,
    desired: Vec<alarms::AlarmSpec>,
    now: OffsetDateTime,
    wanted: &Notify,
) {
    let store = AlarmStore::peers(&w.settings.state_dir);
    let sinks = w.sinks.clone();
    let applied = on_files(
        seen,
        "the alarms on the other controllers' behalf",
        move || {
            if desired.is_empty() && store.load().is_ok_and(|a| a.is_empty()) {
                return Ok(Vec::new());
            }
            let refs: Vec<&dyn AlarmSink> = sinks.iter().map(|s| s.as_ref()).collect();
            // A save that failed is said by `apply`; what was emitted still counts.
            alarms::apply(&store, &desired, &refs, now).map(|a| a.events)
        },
    )
    .await;
    match applied {
        Some(Ok(events)) if events.iter().any(|e| e.state().is_some()) => wanted.notify_one(),
        Some(Ok(_)) | None => {}
        Some(Err(e)) => tracing::error!("the alarms on the other controllers' behalf: {e:#}"),
    }
}

/// Writes the cluster's gauges beside the metrics file, when there is one.
async fn gauges(settings: &Settings, seen: &mut Seen, read: bool, now: OffsetDateTime) {
    let Some(file) = settings.metrics_file.clone() else {
        return;
    };
    let counts = seen.counts.clone();
    let written = on_files(seen, "writing the cluster's gauges", move || {
        let node = alarms::hostname().unwrap_or_else(|_| "localhost".into());
        let text =
            crate::metrics::render_cluster(&node, counts.as_ref(), read, now.unix_timestamp());
        crate::metrics::write_cluster(&crate::metrics::cluster_path(&file), &text)
    })
    .await;
    if let Some(Err(e)) = written {
        tracing::warn!("{e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After etcd could not be read (an outage: the records may have gone with their
    /// leases), the others are judged again only a lease TTL after it can be, when each has
    /// had the time to put its record back; at other times, every look judges.
    #[test]
    fn the_others_are_judged_again_a_lease_ttl_after_an_outage() {
        let ttl = Duration::from_secs(30);
        let t0 = tokio::time::Instant::now();
        let mut seen = Seen::default();
        assert!(seen.read_at(t0, ttl), "no outage: judged");
        seen.error = Some("no etcd member answered within 20s".into());
        assert!(
            !seen.read_at(t0 + Duration::from_secs(60), ttl),
            "read again: grace"
        );
        assert!(
            !seen.read_at(t0 + Duration::from_secs(75), ttl),
            "within the grace"
        );
        assert!(
            seen.read_at(t0 + Duration::from_secs(90), ttl),
            "the grace is over"
        );
        assert!(seen.read_at(t0 + Duration::from_secs(91), ttl));
    }

    /// File work that blocks is left to its thread, and no more is started until it
    /// returns: a hung file system costs the watch one thread, never the pool the passes
    /// need.
    #[tokio::test]
    async fn file_work_that_blocks_is_waited_for_once_and_not_piled_up() {
        let mut seen = Seen {
            files_for: Duration::from_millis(200),
            ..Seen::default()
        };
        let (release, held) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = |started: &Arc<std::sync::atomic::AtomicUsize>| {
            let started = started.clone();
            move || started.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        };
        let blocks = on_files(&mut seen, "blocking work", move || held.recv().is_ok()).await;
        assert_eq!(blocks, None);
        assert_eq!(seen.stuck.as_ref().map(|s| s.what), Some("blocking work"));
        // While it blocks, nothing more runs.
        assert_eq!(on_files(&mut seen, "more", count(&started)).await, None);
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 0);
        release.send(()).unwrap();
        let finished = std::time::Instant::now();
        while !seen.stuck.as_ref().is_some_and(|s| s.job.is_finished()) {
            assert!(
                finished.elapsed() < Duration::from_secs(10),
                "never returned"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Once it has returned, the watch goes on.
        assert_eq!(on_files(&mut seen, "more", count(&started)).await, Some(0));
        assert!(seen.stuck.is_none());
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
