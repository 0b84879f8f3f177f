//! The `check` table's closing paragraphs: what the daemon, the state directory and the
//! coordination say of the passes to come.

use super::{ByHandReport, CheckReport, InhibitReport};
use super::{count, lines};

/// What the state directory says of the passes to come, a paragraph each.
pub(super) fn notes(r: &CheckReport, page: usize) -> String {
    let mut paras: Vec<String> = Vec::new();
    let d = &r.daemon;
    let said = |s: &Option<String>| s.as_deref().unwrap_or("").to_string();
    if let Some(p) = &r.permission_denied {
        let what: Vec<String> = (p.state_dir.iter())
            .map(|s| format!("the state directory {s}"))
            .chain((p.files > 0).then(|| count(p.files, "watched file")))
            .collect();
        paras.push(format!(
            "This user may not read {} (permission denied): what they hold is not known here, and this check is incomplete. Run it as root: `sudo certrenewd check`.",
            what.join(" and ")
        ));
    }
    let state_denied = r
        .permission_denied
        .as_ref()
        .is_some_and(|p| p.state_dir.is_some());
    paras.push(match d.state {
        "unreadable" if state_denied => String::new(),
        "running" => format!(
            "The daemon runs (pid {}): {}.",
            d.pid.unwrap_or(0),
            said(&d.status)
        ),
        "not_running" => format!(
            "The daemon is not running: no pass will run (`systemctl start certrenewd`). It last said, at {}: {}.",
            said(&d.updated),
            said(&d.status)
        ),
        "unreadable" => format!(
            "What the daemon last said cannot be read: {}.",
            said(&d.error)
        ),
        _ => "The daemon has not run with this state directory: no pass will run until it does (`systemctl enable --now certrenewd`).".to_string(),
    });
    if let Some(i) = &r.inhibited {
        paras.push(inhibit_note(i));
    }
    if let Some(p) = &r.interrupted_renewal {
        paras.push(match &p.error {
            Some(e) => format!(
                "An interrupted renewal is recorded, but its record cannot be read: {e}. \
                 Passes stop on it until it is fixed."
            ),
            None => format!(
                "An interrupted renewal of {} ({}) will be finished or rolled back by the next \
                 pass, or when the daemon starts; its record is {}.",
                count(p.certificates.len(), "certificate"),
                p.certificates.join(", "),
                p.record
            ),
        });
    }
    if !r.keys_readable_by_others.is_empty() {
        let keys: Vec<String> = r
            .keys_readable_by_others
            .iter()
            .map(|k| format!("{} ({})", k.path, k.mode))
            .collect();
        paras.push(format!(
            "Every user of this node can read these private keys: {}. A renewal that keeps a key keeps its mode: `chmod 600` each (0640 with the group of the service that reads it).",
            keys.join(", ")
        ));
    }
    let held: Vec<String> = r
        .certificates
        .iter()
        .filter_map(|c| c.backoff.as_ref().map(|b| format!("{}: {b}", c.path)))
        .collect();
    for h in held {
        paras.push(format!("The back-off holds {h}."));
    }
    let also = (r.certificates.iter()).map(|c| (c.path.as_ref(), c.also_read_by.as_slice()));
    let unrestarted = crate::cli::by_reader(also);
    for (name, files) in unrestarted {
        let (what, list) = crate::cli::reader_kind(name);
        let what = match what {
            "unit" => "Unit",
            _ => "Static pod",
        };
        paras.push(format!(
            "{what} {name} reads {}, but no watch restarts it: certrenewd never does. \
             Restart it by hand after {}, or name it in the watch's {list}.",
            files.join(", "),
            if files.len() == 1 {
                "its renewal"
            } else {
                "their renewals"
            }
        ));
    }
    match r.coordination.restarts {
        "held" => paras.push(format!(
            "Restarts will be held back (250.003) until this is fixed: {}.",
            r.coordination.why
        )),
        "coordinated" => paras.push(format!(
            "Restarts are coordinated through etcd: {}.",
            r.coordination.why
        )),
        "not coordinated" => paras.push(format!(
            "Restarts are not coordinated with other controllers: {}.",
            r.coordination.why
        )),
        _ => paras.push(format!(
            "Whether restarts are coordinated through etcd is decided at each pass: {}.",
            r.coordination.why
        )),
    }
    if let Some(m) = &r.metrics_not_written {
        paras.push(format!(
            "The metrics file {} is not being written: {}. Prometheus gets nothing from this node meanwhile (the passes themselves go on).",
            m.file, m.why
        ));
    }
    if let Some(o) = &r.restarts_owed {
        paras.push(match &o.error {
            Some(e) => format!("The restarts owed by an earlier pass cannot be read: {e}."),
            None => {
                let pods = o.static_pods.iter().map(|p| format!("static pod {p}"));
                let all: Vec<String> = o.units.iter().cloned().chain(pods).collect();
                let runs = o.commands.iter();
                let runs: Vec<String> = runs
                    .map(|w| format!("the post_renew_command of watch {w}"))
                    .collect();
                let restart = (!all.is_empty()).then(|| format!("a restart to {}", all.join(", ")));
                let run = (!runs.is_empty()).then(|| format!("a run of {}", runs.join(", ")));
                let shown = (!o.client_pairs.is_empty()).then(|| {
                    format!(
                        "a presentation of the renewed client pair {} to the server that checks it",
                        o.client_pairs.join(", ")
                    )
                });
                let owes = restart
                    .into_iter()
                    .chain(run)
                    .chain(shown)
                    .collect::<Vec<_>>()
                    .join(" and ");
                format!(
                    "An earlier pass owes {owes}; the next pass does it (record: {}).",
                    o.record
                )
            }
        });
    }
    if let Some(b) = &r.restarts_by_hand {
        paras.push(by_hand_note(b));
    }
    paras
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| lines(p, "", page))
        .collect::<Vec<_>>()
        .join("")
}

fn by_hand_note(b: &ByHandReport) -> String {
    if let Some(e) = &b.error {
        return format!("The restarts owed by hand cannot be read: {e}.");
    }
    let pods = (b.static_pods.iter()).map(|p| (format!("static pod {}", p.name), p));
    let all: Vec<String> = (b.units.iter().map(|u| (u.name.clone(), u)))
        .chain(pods)
        .map(|(name, e)| format!("{name} ({})", e.why))
        .collect();
    format!(
        "Owed a restart by hand, since `renew --no-restart` installed what it reads: {}. \
         No pass makes these restarts: make them in a window of your choosing (record: {}).",
        all.join(", "),
        b.record
    )
}

fn inhibit_note(i: &InhibitReport) -> String {
    let until = i
        .until
        .as_ref()
        .map(|u| format!(" until {u}"))
        .unwrap_or_default();
    format!(
        "Passes are deferred: inhibited by {} since {}{until}: {}. Lift it with \
         `certrenewd inhibit --clear`.",
        i.source, i.since, i.reason
    )
}
