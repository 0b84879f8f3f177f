//! What a pass is waiting for now, and since when: the restart lock and its holder, a
//! restarted unit or static pod coming back, a serving check, another certrenewd's state
//! lock. Each wait says itself with [`waiting`] for as long as it lasts. `renew` on a
//! terminal draws it as one live line on stderr ([`show`]), rewritten in place with the time
//! waited; log lines written meanwhile clear it first ([`Stderr`]). Piped, nothing is drawn,
//! and stdout (the report, or JSON) never carries it.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The waits in progress, innermost last.
static WAITS: Waits = Waits(Mutex::new(Vec::new()));
static NEXT: AtomicU64 = AtomicU64::new(0);
/// A live line is on the terminal now.
static SHOWN: AtomicBool = AtomicBool::new(false);
/// Taken by whoever writes to stderr, so a log line and the live line never interleave.
static STDERR: Mutex<()> = Mutex::new(());

/// Waits in progress: each with its id, what it waits for, and since when.
pub struct Waits(Mutex<Vec<(u64, String, Instant)>>);

/// A wait in progress, until dropped.
#[must_use]
pub struct Wait(&'static Waits, u64);

/// Says that the pass now waits for `what` (`the restart lock (held by node2)`).
pub fn waiting(what: impl Into<String>) -> Wait {
    WAITS.waiting(what)
}

/// The innermost wait in progress and how long it has lasted.
pub fn now() -> Option<(String, Duration)> {
    WAITS.now()
}

/// Every wait in progress, outermost first (several passes in one process: tests).
pub fn all() -> Vec<String> {
    WAITS.list().iter().map(|w| w.1.clone()).collect()
}

impl Waits {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<(u64, String, Instant)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says that the pass now waits for `what`.
    pub fn waiting(&'static self, what: impl Into<String>) -> Wait {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        self.list().push((id, what.into(), Instant::now()));
        Wait(self, id)
    }

    /// The innermost wait in progress and how long it has lasted.
    pub fn now(&self) -> Option<(String, Duration)> {
        (self.list().last()).map(|(_, what, since)| (what.clone(), since.elapsed()))
    }
}

impl Wait {
    /// The same wait, said anew (its holder changed, say); the time waited runs on.
    pub fn say(&self, what: impl Into<String>) {
        if let Some(w) = self.0.list().iter_mut().find(|w| w.0 == self.1) {
            w.1 = what.into();
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.0.list().retain(|w| w.0 != self.1);
    }
}

/// The live line for `what`, waited `took`.
pub fn line(what: &str, took: Duration) -> String {
    format!("waiting for {what} ({} s)", took.as_secs())
}

/// Draws the wait in progress on stderr (a terminal) every quarter of a second, once it has
/// lasted a second (a short wait would only flicker), until the task is dropped; then
/// [`clear`] takes the line away.
pub async fn show() {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match now() {
            Some((what, took)) if took >= Duration::from_secs(1) => draw(&line(&what, took)),
            _ => clear(),
        }
    }
}

/// Writes `text` as the live line, cut to the terminal's width.
fn draw(text: &str) {
    // One column short of the edge: a line that fills it would wrap on some terminals.
    let width = columns().saturating_sub(1).max(20);
    let text: String = text.chars().take(width).collect();
    let _guard = STDERR.lock().unwrap_or_else(|e| e.into_inner());
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{text}");
    let _ = err.flush();
    SHOWN.store(true, Ordering::SeqCst);
}

/// The columns of the terminal stderr is; 80 when it says none.
fn columns() -> usize {
    terminal_columns(std::io::stderr()).unwrap_or(80)
}

/// The columns of the terminal `fd` is, whatever its rows say (`stty cols 80` on a serial
/// console leaves rows at 0); `None` when it is no terminal or says 0.
pub fn terminal_columns(fd: impl std::os::fd::AsFd) -> Option<usize> {
    (rustix::termios::tcgetwinsize(fd).ok())
        .map(|w| usize::from(w.ws_col))
        .filter(|&c| c > 0)
}

/// Takes the live line away, if one is shown.
pub fn clear() {
    let _guard = STDERR.lock().unwrap_or_else(|e| e.into_inner());
    clear_locked();
}

fn clear_locked() {
    if SHOWN.swap(false, Ordering::SeqCst) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// stderr for log lines: the live line is cleared before each, and drawn again by the next
/// tick of [`show`].
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _guard = STDERR.lock().unwrap_or_else(|e| e.into_inner());
        clear_locked();
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_wait_is_said_and_a_wait_said_anew_keeps_its_time() {
        // Its own list: the pass's is the process's, and other tests wait in parallel.
        static OURS: Waits = Waits(Mutex::new(Vec::new()));
        let (waiting, now) = (|w: &str| OURS.waiting(w), || OURS.now());
        let outer = waiting("the restart lock");
        std::thread::sleep(Duration::from_millis(20));
        outer.say("the restart lock (held by node2)");
        let (what, took) = now().unwrap();
        assert_eq!(what, "the restart lock (held by node2)");
        assert!(took >= Duration::from_millis(20), "{took:?}");
        {
            let _inner = waiting("static pod etcd to serve");
            assert_eq!(now().unwrap().0, "static pod etcd to serve");
        }
        assert_eq!(now().unwrap().0, "the restart lock (held by node2)");
        drop(outer);
        assert!(now().is_none());
        assert_eq!(
            line("etcd.service to serve", Duration::from_millis(12_400)),
            "waiting for etcd.service to serve (12 s)"
        );
    }
}
