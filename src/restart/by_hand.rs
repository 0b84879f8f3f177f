//! The restarts owed by hand: `renew --no-restart` installs certificates and restarts
//! nothing (the operator chose the window), so the services that read them may still run on
//! the old ones. They are recorded (`<state_dir>/restarts-by-hand.json`) with the time of the
//! install, never restarted by a pass, shown by `check` (which fails `--fail-due` for them),
//! and cleared once each one is seen to have started after the install (a unit whose
//! `ActiveEnterTimestamp` is later, a static pod whose every process, its container's
//! command line as kubelet runs it, started later), or to serve every certificate installed
//! for it as it is on disk, answering its health path (etcd and kube-apiserver read their
//! serving certificates again by themselves).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::UnitControl;
use super::serving::Serving;
use super::step::{Step, Target};
use crate::components::NodeReading;
use crate::config::Settings;
use crate::fsutil::StateFile;

/// One unit or static pod owed a restart by hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByHand {
    /// The unit (`kube-apiserver.service`), or the static pod by manifest name.
    pub name: String,
    /// When the latest certificate it reads was installed: a start after it reads it.
    #[serde(with = "time::serde::rfc3339")]
    pub installed: OffsetDateTime,
    /// The certificate files installed for it: a server that serves them all as they are
    /// on disk runs on them, restarted or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<PathBuf>,
}

/// The record: units and static pods, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// systemd units.
    #[serde(default)]
    pub units: Vec<ByHand>,
    /// Static pods.
    #[serde(default)]
    pub pods: Vec<ByHand>,
}

impl Record {
    /// Nothing owed.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty() && self.pods.is_empty()
    }

    /// Adds `target` as installed at `at`, for `certificates`: one already owed takes the
    /// later time, since only a start after the last install reads every new file.
    pub fn add(&mut self, target: &Target, certificates: &[PathBuf], at: OffsetDateTime) {
        let (list, name) = match target {
            Target::Unit(u) => (&mut self.units, u),
            Target::Pod(p) => (&mut self.pods, p),
        };
        let b = match list.iter().position(|b| &b.name == name) {
            Some(i) => &mut list[i],
            None => {
                list.push(ByHand {
                    name: name.clone(),
                    installed: at,
                    certificates: Vec::new(),
                });
                list.last_mut().expect("just pushed")
            }
        };
        b.installed = b.installed.max(at);
        for c in certificates {
            if !b.certificates.contains(c) {
                b.certificates.push(c.clone());
            }
        }
    }
}

/// The record's file name in `state_dir`.
pub const RECORD: &str = "restarts-by-hand.json";

fn file(state_dir: &Path) -> StateFile {
    StateFile::new(state_dir, RECORD)
}

/// Where the record is.
pub fn path(state_dir: &Path) -> std::path::PathBuf {
    file(state_dir).path().to_path_buf()
}

/// The record; empty when there is none.
pub fn load(state_dir: &Path) -> anyhow::Result<Record> {
    let corrupt = "; restart the units and static pods that use the certificates `renew --no-restart` installed, then remove it";
    Ok(file(state_dir).read(corrupt)?.unwrap_or_default())
}

/// Records it durably; an empty record is removed.
pub fn save(state_dir: &Path, record: &Record) -> anyhow::Result<()> {
    file(state_dir).write_or_remove(record, record.is_empty())
}

/// Where one entry stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Started after the install (or no longer there to run the old files): owed no more,
    /// as this says.
    Done(String),
    /// Still owed, as this says (`running since …, before the install`).
    Owed(String),
}

/// Each unit's (first) and static pod's (second) standing, in the record's order.
pub type Looked = (Vec<(ByHand, Seen)>, Vec<(ByHand, Seen)>);

/// Each unit's and static pod's standing, in the record's order: units as `systemd` tells
/// (an error for all of them when it cannot be asked), static pods from the processes of
/// the node that run their containers' command lines; then one still owed that serves
/// every certificate installed for it, as on disk, is owed no more. `client`: the pair
/// etcd is asked with (the coordination identity).
pub async fn look(
    record: &Record,
    settings: &Settings,
    node: &NodeReading,
    client: Option<(PathBuf, PathBuf)>,
    systemd: &anyhow::Result<impl UnitControl>,
) -> Looked {
    let manifests_dir = &settings.manifests_dir;
    let asked = match systemd {
        Ok(s) => units(&record.units, s).await,
        Err(e) => Err(anyhow::anyhow!("systemd cannot be reached: {e:#}")),
    };
    let units = match asked {
        Ok(seen) => seen,
        Err(e) => (record.units.iter().cloned())
            .map(|b| (b, Seen::Owed(format!("{e:#}"))))
            .collect(),
    };
    let procs = Processes::read();
    let pods: Vec<(ByHand, Seen)> = (record.pods.iter().cloned())
        .map(|b| {
            let manifest = crate::config::Watch::manifest_path(manifests_dir, &b.name);
            let seen = match node.pod(&manifest) {
                None => Seen::Done(format!("its manifest {} is gone", manifest.display())),
                Some(pod) => procs.pod(&pod.settings, b.installed),
            };
            (b, seen)
        })
        .collect();
    let serving = Serving {
        client,
        ..Serving::of(settings).knowing(node)
    };
    let mut looked = (units, pods);
    let units = (looked.0.iter_mut()).map(|(b, s)| (Target::Unit(b.name.clone()), &*b, s));
    let pods = (looked.1.iter_mut()).map(|(b, s)| (Target::Pod(b.name.clone()), &*b, s));
    for (target, b, seen) in units.chain(pods) {
        if matches!(seen, Seen::Owed(_)) {
            let step = Step::new(target);
            let serves = serving.serves_now(&step, manifests_dir, &b.certificates);
            if let Some(how) = serves.await {
                *seen = Seen::Done(format!("serves the new certificate: {how}"));
            }
        }
    }
    looked
}

/// What is still owed after [`look`], and a line for each one owed no more.
pub fn settle(looked: Looked) -> (Record, Vec<String>) {
    let mut done = Vec::new();
    let mut keep = |list: Vec<(ByHand, Seen)>, pod: bool| {
        let mut left = Vec::new();
        for (b, seen) in list {
            match seen {
                Seen::Owed(_) => left.push(b),
                Seen::Done(how) => {
                    let name = match pod {
                        true => format!("static pod {}", b.name),
                        false => b.name.clone(),
                    };
                    done.push(format!("{name}: no restart owed by hand any more ({how})"));
                }
            }
        }
        left
    };
    let units = keep(looked.0, false);
    let pods = keep(looked.1, true);
    (Record { units, pods }, done)
}

async fn units(list: &[ByHand], systemd: &impl UnitControl) -> anyhow::Result<Vec<(ByHand, Seen)>> {
    let mut out = Vec::new();
    for b in list {
        let seen = match systemd.active_since(&b.name).await? {
            None => Seen::Done("not loaded: it reads the new files when it starts".into()),
            Some((active, entered)) => {
                let since = OffsetDateTime::from_unix_timestamp_nanos(i128::from(entered) * 1000)
                    .unwrap_or(OffsetDateTime::UNIX_EPOCH);
                unit_seen(&active, since, b.installed)
            }
        };
        out.push((b.clone(), seen));
    }
    Ok(out)
}

/// A unit in `active` state, active since `since`, with certificates installed at
/// `installed`.
fn unit_seen(active: &str, since: OffsetDateTime, installed: OffsetDateTime) -> Seen {
    match active {
        "active" | "reloading" | "deactivating" => running_since(since, installed),
        other => Seen::Done(format!("{other}: it reads the new files when it starts")),
    }
}

/// What runs since `since`, with certificates installed at `installed`: owed while it
/// started before them.
fn running_since(since: OffsetDateTime, installed: OffsetDateTime) -> Seen {
    let when = crate::timefmt::rfc3339(since);
    match since < installed {
        true => Seen::Owed(format!("running since {when}, before the install")),
        false => Seen::Done(format!("started again at {when}, after the install")),
    }
}

/// The node's processes: command line and start time.
struct Processes(Vec<(Vec<String>, OffsetDateTime)>);

impl Processes {
    /// Every process `/proc` shows this user (those of other users may be hidden: the
    /// shipped unit's `ProtectProc=invisible`; static pods run as root, as certrenewd does).
    fn read() -> Processes {
        let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
        let boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let now = OffsetDateTime::now_utc();
        let uptime = boot.tv_sec as f64 + boot.tv_nsec as f64 / 1e9;
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Processes(Vec::new());
        };
        let procs = dir.flatten().filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let started = start_ticks(&stat)? as f64 / ticks;
            let age = time::Duration::seconds_f64((uptime - started).max(0.0));
            let argv = (cmdline.split(|b| *b == 0))
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>();
            Some((trim_last(argv), now - age))
        });
        Processes(procs.collect())
    }

    /// A static pod whose containers run `settings`: owed while a process running one of
    /// them started before `installed`, or while none is seen.
    fn pod(&self, settings: &[Vec<String>], installed: OffsetDateTime) -> Seen {
        let running: Vec<OffsetDateTime> = (self.0.iter())
            .filter(|(argv, _)| !argv.is_empty() && settings.contains(argv))
            .map(|(_, t)| *t)
            .collect();
        match running.iter().min() {
            None => Seen::Owed("no process running its command line is seen".into()),
            Some(oldest) => running_since(*oldest, installed),
        }
    }
}

/// A command line without the empty string after its last NUL.
fn trim_last(mut argv: Vec<String>) -> Vec<String> {
    if argv.last().is_some_and(String::is_empty) {
        argv.pop();
    }
    argv
}

/// `starttime` (field 22 of `/proc/PID/stat`, clock ticks after boot); the command name
/// before it is in parentheses and may hold spaces and parentheses itself.
fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_second_install_moves_the_time_a_start_must_follow() {
        let mut r = Record::default();
        let etcd = Target::Unit("etcd.service".into());
        let (a, b) = (
            PathBuf::from("/etc/etcd/a.crt"),
            PathBuf::from("/etc/etcd/b.crt"),
        );
        r.add(&etcd, std::slice::from_ref(&a), at(0));
        r.add(&Target::Pod("kube-apiserver".into()), &[], at(60));
        r.add(&etcd, &[b.clone(), a.clone()], at(60));
        assert_eq!(r.units.len(), 1);
        assert_eq!(r.units[0].installed, at(60));
        assert_eq!(r.units[0].certificates, [a, b]);
        assert_eq!(r.pods[0].name, "kube-apiserver");
    }

    #[test]
    fn a_unit_counts_as_restarted_only_when_active_since_the_install() {
        assert!(matches!(
            unit_seen("active", at(-1), at(0)),
            Seen::Owed(w) if w.contains("before the install")
        ));
        assert!(matches!(unit_seen("active", at(1), at(0)), Seen::Done(_)));
        assert!(matches!(
            unit_seen("inactive", at(-1), at(0)),
            Seen::Done(_)
        ));
    }

    #[test]
    fn the_start_time_is_read_past_a_name_with_parentheses() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(start_ticks(stat), Some(12345));
    }

    #[test]
    fn a_pod_is_owed_while_an_old_process_runs_its_command_line() {
        let cmd = vec!["kube-scheduler".to_string(), "--v=2".to_string()];
        let procs = Processes(vec![(cmd.clone(), at(-5)), (vec!["x".into()], at(10))]);
        let cmds = std::slice::from_ref(&cmd);
        assert!(matches!(procs.pod(cmds, at(0)), Seen::Owed(_)));
        assert!(matches!(procs.pod(cmds, at(-10)), Seen::Done(_)));
        assert!(matches!(
            procs.pod(&[vec!["other".into()]], at(-10)),
            Seen::Owed(w) if w.contains("no process")
        ));
    }

    #[test]
    fn this_process_is_seen_with_its_start_time() {
        let me: Vec<String> = std::env::args().collect();
        let procs = Processes::read();
        let now = OffsetDateTime::now_utc();
        let mine = procs.0.iter().find(|(argv, _)| *argv == me).expect("seen");
        let age = now - mine.1;
        assert!(
            age >= time::Duration::ZERO - time::Duration::seconds(2),
            "{age}"
        );
        assert!(age < time::Duration::hours(1), "{age}");
    }
}
