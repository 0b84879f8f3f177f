//! `check`'s account of the node's reading: per component (static pod or unit), how it runs,
//! what it runs with, the files it reads, and what a renewal of them calls for, so that an
//! operator sees why a renewal restarts what it restarts, and what it never restarts.

use serde::Serialize;

use super::CertReport;
use crate::cli::text_table::Table;
use crate::components::{Component, NodeReading, Runs};
use crate::config::Settings;
use crate::inventory::Inventory;
use crate::plan::{Plan, Status};
use crate::restart::step::Target;
use crate::restart::{owed, targets};

/// One component of `check --output json`'s `components`.
#[derive(Debug, Serialize)]
pub struct ComponentReport {
    /// The name a watch gives it: the unit, or the static pod's manifest name.
    pub name: String,
    /// `static_pod` or `unit`.
    pub runs: &'static str,
    /// The manifest, or the unit.
    pub from: String,
    /// The program it runs, when certrenewd follows it (`etcd`); null otherwise.
    pub program: Option<&'static str>,
    /// Its command lines as they run (a unit's variables put in).
    pub settings: Vec<Vec<String>>,
    /// The files of the node it reads.
    pub reads: Vec<String>,
    /// Whether every file it reads is known.
    pub files_known: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
    /// What a renewal of a file it reads calls for: `files` (restarted for the files it
    /// reads), `watch` (for every renewal of its watch: its files are not all known) or
    /// `never` (no watch names it).
    pub restarted_for: &'static str,
    /// The same in a sentence, with why.
    pub restart: String,
    /// The certificates it reads that are due or expired now: the next pass renews them
    /// and restarts it.
    pub due: Vec<String>,
    /// What a renewal would do to it, for each certificate this node renews whose renewal
    /// reaches it (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub renewals: Vec<Renewal>,
}

/// What a renewal of one certificate would do to a component that reads it.
#[derive(Debug, Serialize)]
pub struct Renewal {
    /// The certificate file.
    pub path: String,
    /// `reload`: installed at its turn under the restart lock and proven in use, not
    /// restarted unless the proof fails; `restart`: restarted for it.
    pub way: &'static str,
    /// Why, in a sentence.
    pub why: String,
}

/// The report of every component of `node`.
pub fn report(
    settings: &Settings,
    (inv, plan): (&Inventory, &Plan),
    node: &NodeReading,
    certs: &[CertReport],
) -> Vec<ComponentReport> {
    (node.pods.iter().chain(&node.units))
        .map(|c| ComponentReport {
            renewals: renewals(settings, (inv, plan), node, c),
            ..one(settings, c, certs)
        })
        .collect()
}

/// What a renewal of each certificate this node renews would do to `c`, of those whose
/// renewal reaches it.
fn renewals(
    settings: &Settings,
    (inv, plan): (&Inventory, &Plan),
    node: &NodeReading,
    c: &Component,
) -> Vec<Renewal> {
    let target = match &c.runs {
        Runs::Pod(_) => Target::Pod(c.name()),
        Runs::Unit(u) => Target::Unit(u.clone()),
    };
    (plan.items.iter())
        .filter(|i| i.renewable)
        .map(|i| &inv.certs[i.cert])
        .filter(|cert| {
            let owed = targets::of_certs(settings, node, &[(cert.watch, cert.path.clone())]);
            owed::targets(&owed).contains(&target)
        })
        .map(|cert| {
            let (way, why) = match crate::pass::reloads::way(settings, node, cert) {
                Ok(w) if w.step == target && settings.rotate_keys => ("restart", "rotate_keys: its new key pair is installed at its turn under the restart lock with it stopped, so no handshake meets a key beside another's certificate, then it is started".to_string()),
                Ok(w) if w.step == target => ("reload", "installed at its turn under the restart lock, then shown served where its settings say and verified as its clients verify it, instead of a restart (to be proven; not shown within the bound: restarted)".to_string()),
                Ok(w) => ("restart", format!("its files are not known, so every renewal of its watch restarts it; this one is installed at the turn of {}", w.step)),
                Err(why) => ("restart", why.to_string()),
            };
            Renewal {
                path: cert.path.display().to_string(),
                way,
                why,
            }
        })
        .collect()
}

fn one(settings: &Settings, c: &Component, certs: &[CertReport]) -> ComponentReport {
    let name = c.name();
    let (runs, from, named) = match &c.runs {
        Runs::Pod(manifest) => (
            "static_pod",
            manifest.display().to_string(),
            settings
                .watches
                .iter()
                .any(|w| w.static_pods.contains(&name)),
        ),
        Runs::Unit(unit) => (
            "unit",
            unit.clone(),
            settings.watches.iter().any(|w| w.units.contains(&name)),
        ),
    };
    let (restarted_for, restart) = match (named, c.known()) {
        (false, _) => ("never", "never restarted by certrenewd: no watch names it; restart it by hand after a renewal of a file it reads".to_string()),
        (true, true) => ("files", "restarted when a file it reads is renewed".to_string()),
        (true, false) => ("watch", format!(
            "restarted for every renewal of its watch: {}",
            c.unknown.as_deref().unwrap_or("it runs no program certrenewd follows")
        )),
    };
    let due = (certs.iter())
        .filter(|r| matches!(r.status, Status::Due | Status::Expired))
        .filter(|r| c.reads(std::path::Path::new(r.path.as_ref())))
        .map(|r| r.path.to_string())
        .collect();
    ComponentReport {
        name,
        runs,
        from,
        program: c.kind.map(|k| k.name()),
        settings: c.settings.clone(),
        reads: c.reads.iter().map(|p| p.display().to_string()).collect(),
        files_known: c.known(),
        unknown: c.unknown.clone(),
        restarted_for,
        restart,
        due,
        renewals: Vec::new(),
    }
}

/// The components as a table: one row each, what it runs and reads, and what a renewal
/// calls for; then, for each not restarted for its own files alone, why.
pub fn section(components: &[ComponentReport], page: usize) -> String {
    let header = [
        "COMPONENT",
        "RUNS AS",
        "PROGRAM",
        "FILES READ",
        "RESTARTED FOR",
    ];
    let mut t = Table::new(&header, 2).whole_first();
    for c in components {
        let runs = match c.runs {
            "unit" => "unit",
            _ => "static pod",
        };
        let files = match c.files_known {
            true => format!("{}", c.reads.len()),
            false => format!("{} known", c.reads.len()),
        };
        let restarted = match c.restarted_for {
            "files" => "the files it reads",
            "watch" => "all of its watch",
            _ => "never (no watch)",
        };
        let program = c.program.unwrap_or("-");
        t.row(vec![
            c.name.clone(),
            runs.into(),
            program.into(),
            files,
            restarted.into(),
        ]);
    }
    let mut out = t.render(page);
    for c in components.iter().filter(|c| c.restarted_for != "files") {
        out.push_str(&super::lines(
            &format!("{}: {}", c.name, c.restart),
            "  ",
            page,
        ));
    }
    // What the next pass does to each for its due certificates: the way matters most then.
    for c in components {
        for r in c.renewals.iter().filter(|r| c.due.contains(&r.path)) {
            let line = match r.way {
                "reload" => format!("{}: would reload {} (to be proven)", c.name, r.path),
                _ => format!("{}: would restart for {}: {}", c.name, r.path, r.why),
            };
            out.push_str(&super::lines(&line, "  ", page));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_each_renewal_restarts_and_why_where_not_its_files() {
        let one = |name: &str, program: Option<&'static str>, known: bool, restarted_for| {
            ComponentReport {
                name: name.into(),
                runs: "static_pod",
                from: format!("/etc/kubernetes/manifests/{name}.yaml"),
                program,
                settings: Vec::new(),
                reads: vec!["/etc/kubernetes/pki/ca.crt".into()],
                files_known: known,
                unknown: None,
                restarted_for,
                restart: format!("{name} sentence"),
                due: Vec::new(),
                renewals: Vec::new(),
            }
        };
        let text = section(
            &[
                one("etcd", Some("etcd"), true, "files"),
                one("kube-scheduler", Some("kube-scheduler"), false, "watch"),
                one("kube-vip", None, true, "never"),
            ],
            100,
        );
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[..4],
            [
                vec![
                    "COMPONENT",
                    "RUNS",
                    "AS",
                    "PROGRAM",
                    "FILES",
                    "READ",
                    "RESTARTED",
                    "FOR"
                ],
                vec![
                    "etcd", "static", "pod", "etcd", "1", "the", "files", "it", "reads"
                ],
                vec![
                    "kube-scheduler",
                    "static",
                    "pod",
                    "kube-scheduler",
                    "1",
                    "known",
                    "all",
                    "of",
                    "its",
                    "watch"
                ],
                vec![
                    "kube-vip", "static", "pod", "-", "1", "never", "(no", "watch)"
                ],
            ],
            "{text}"
        );
        // Why, for what is not restarted for its own files alone; nothing for etcd.
        assert_eq!(
            text.lines().skip(4).collect::<Vec<_>>(),
            [
                "  kube-scheduler: kube-scheduler sentence",
                "  kube-vip: kube-vip sentence"
            ],
            "{text}"
        );
    }
}
