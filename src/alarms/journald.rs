//! The journald writer: one entry per raise or clear over journald's native protocol.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{AlarmEvent, AlarmSink};

/// journald's native protocol socket.
pub const DEFAULT_JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// How long a send may block on a busy journald before falling back to stderr.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes raises and clears to journald, or a readable line to stderr when journald is not there.
#[derive(Debug)]
pub struct JournalSink {
    socket: PathBuf,
    /// Set once journald was found missing: the reason is said once, not on every alarm.
    said_unavailable: AtomicBool,
}

impl Default for JournalSink {
    fn default() -> Self {
        Self::new(DEFAULT_JOURNAL_SOCKET)
    }
}

impl JournalSink {
    /// A sink writing to the journald socket at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            said_unavailable: AtomicBool::new(false),
        }
    }

    /// The socket this sink writes to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends the event's entry to journald; a reason update sends nothing.
    pub fn send(&self, event: &AlarmEvent) -> io::Result<()> {
        let Some(fields) = entry_fields(event) else {
            return Ok(());
        };
        let refs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let datagram = encode_entry(&refs);
        let sock = UnixDatagram::unbound()?;
        sock.set_write_timeout(Some(SEND_TIMEOUT))?;
        let sent = sock.send_to(&datagram, &self.socket)?;
        if sent != datagram.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {sent} of {} bytes", datagram.len()),
            ));
        }
        Ok(())
    }
}

impl AlarmSink for JournalSink {
    fn emit(&self, event: &AlarmEvent) {
        let Err(err) = self.send(event) else {
            return;
        };
        let Some(state) = event.state() else {
            return;
        };
        // Never fatal: the alarm still reaches whoever reads our stderr (the unit's log, a
        // terminal). Why journald is not used is said once; each alarm is one line.
        if !self.said_unavailable.swap(true, Ordering::Relaxed) {
            eprintln!(
                "certrenewd: journald unavailable at {} ({err}): alarms are written here",
                self.socket.display()
            );
        }
        eprintln!(
            "certrenewd: alarm {} {state} {} {}: {}",
            event.kind.id(),
            event.kind.severity(),
            event.entity,
            message(event, state.as_str()).replace('\n', "\\n"),
        );
    }
}

/// The MESSAGE of an entry: `<id> <state>: <text>: <reason>`.
fn message(event: &AlarmEvent, state: &str) -> String {
    let (id, text) = (event.kind.id(), event.kind.text());
    if event.reason.is_empty() {
        format!("{id} {state}: {text}")
    } else {
        format!("{id} {state}: {text}: {}", event.reason)
    }
}

/// The journald fields of a raise or clear, in order; `None` for a reason update.
pub fn entry_fields(event: &AlarmEvent) -> Option<Vec<(&'static str, String)>> {
    let state = event.state()?;
    let kind = event.kind;
    Some(vec![
        ("MESSAGE", message(event, state.as_str())),
        ("MESSAGE_ID", kind.message_id(state).to_owned()),
        ("PRIORITY", kind.priority(state).to_string()),
        ("SYSLOG_IDENTIFIER", "certrenewd".to_owned()),
        ("ALARM_ID", kind.id().to_owned()),
        ("ALARM_STATE", state.as_str().to_owned()),
        ("ALARM_SEVERITY", kind.severity().as_str().to_owned()),
        ("ALARM_ENTITY", event.entity.clone()),
        ("ALARM_REASON", event.reason.clone()),
    ])
}

/// Encodes fields in journald's native format, values with a newline in the binary-safe form.
pub fn encode_entry(fields: &[(&str, &str)]) -> Vec<u8> {
    // Binary-safe form: NAME, '\n', the value's length as u64 little-endian, the value, '\n'.
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend_from_slice(name.as_bytes());
        if value.contains('\n') {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::{AlarmKind, Transition};

    fn event(transition: Transition, reason: &str) -> AlarmEvent {
        AlarmEvent {
            transition,
            kind: AlarmKind::RenewalFailed,
            entity: "host=c0".into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn plain_and_binary_safe_fields() {
        let bytes = encode_entry(&[("A", "x"), ("B", "1\n2")]);
        let mut want = b"A=x\nB\n".to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"1\n2\n");
        assert_eq!(bytes, want);
    }

    #[test]
    fn fields_of_a_set_and_a_clear() {
        let reason = "/etc/etcd/etcd-server.crt: CA key not on this host";
        let set = entry_fields(&event(Transition::Set, reason)).expect("set has fields");
        let names: Vec<_> = set.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "MESSAGE",
                "MESSAGE_ID",
                "PRIORITY",
                "SYSLOG_IDENTIFIER",
                "ALARM_ID",
                "ALARM_STATE",
                "ALARM_SEVERITY",
                "ALARM_ENTITY",
                "ALARM_REASON"
            ]
        );
        assert_eq!(
            set[0].1,
            "250.003 set: Kubernetes certificates renewal failed: /etc/etcd/etcd-server.crt: CA key not on this host"
        );
        assert_eq!(set[2].1, "3");
        let clear = entry_fields(&event(Transition::Clear, "")).expect("clear has fields");
        assert_eq!(
            clear[0].1,
            "250.003 clear: Kubernetes certificates renewal failed"
        );
        assert_eq!(clear[2].1, "5");
        assert_eq!(clear[5].1, "clear");
        let update = event(
            Transition::Update {
                previous_reason: "a".into(),
            },
            "b",
        );
        assert!(entry_fields(&update).is_none());
    }

    #[test]
    fn missing_socket_is_an_error_for_send_but_not_for_emit() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let sink = JournalSink::new(dir.path().join("no-such-socket"));
        let ev = event(Transition::Set, "r");
        assert!(sink.send(&ev).is_err());
        sink.emit(&ev); // writes a line to stderr, returns
        Ok(())
    }

    #[test]
    fn datagram_reaches_a_socket() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("socket");
        let server = UnixDatagram::bind(&path)?;
        JournalSink::new(&path).send(&event(Transition::Set, "line 1\nline 2"))?;
        let mut buf = vec![0u8; 65536];
        let n = server.recv(&mut buf)?;
        let got = &buf[..n];
        assert!(got.starts_with(b"MESSAGE\n"), "{got:?}");
        let tail = b"ALARM_REASON\n\x0d\0\0\0\0\0\0\0line 1\nline 2\n";
        assert!(got.ends_with(tail), "{got:?}");
        Ok(())
    }
}
