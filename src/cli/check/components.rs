//! `check`'s account of the node's reading: per component (static pod or unit), how it runs,
//! what it runs with, the files it reads, and what a renewal of them calls for, so that an
//! operator sees why a renewal restarts what it restarts, and what it never restarts.

use serde::Serialize;

use super::CertReport;
use crate::cli::text_table::Table;
use crate::components::{Component, NodeReading, Runs};
use crate::config::Settings;
use crate::plan::Status;

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
    /// What a renewal calls for, in a sentence.
    pub restart: String,
    /// The certificates it reads that are due or expired now: the next pass renews them
    /// and restarts it.
    pub due: Vec<String>,
}

/// The report of every component of `node`.
pub fn report(
    settings: &Settings,
    node: &NodeReading,
    certs: &[CertReport],
) -> Vec<ComponentReport> {
    (node.pods.iter().chain(&node.units))
        .map(|c| one(settings, c, certs))
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
    let restart = match (named, c.known()) {
        (false, _) => "never restarted by certrenewd: no watch names it; restart it by hand after a renewal of a file it reads".to_string(),
        (true, true) => "restarted when a file it reads is renewed".to_string(),
        (true, false) => format!(
            "restarted for every renewal of its watch: {}",
            c.unknown.as_deref().unwrap_or("it runs no program certrenewd follows")
        ),
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
        restart,
        due,
    }
}

/// The components as a table: one row each, what it runs and reads, and what a renewal
/// calls for.
pub fn table(components: &[ComponentReport]) -> Table {
    let header = [
        "COMPONENT",
        "RUNS AS",
        "PROGRAM",
        "FILES READ",
        "ON RENEWAL",
    ];
    let mut t = Table::new(&header, 2).elastic(4, 30).whole_first();
    for c in components {
        let runs = match c.runs {
            "unit" => "unit",
            _ => "static pod",
        };
        let files = match c.files_known {
            true => format!("{}", c.reads.len()),
            false => format!("{} known of more", c.reads.len()),
        };
        t.row(vec![
            c.name.clone(),
            runs.into(),
            c.program.unwrap_or("-").into(),
            files,
            c.restart.clone(),
        ]);
    }
    t
}
