//! The import graph of `src/` runs one way (docs/architecture.md, Layout): each top-level
//! module refers only to the modules before it in `ORDER`, the helpers first, then the stages
//! of a pass in the order data flows, then what drives them. A new module must be placed
//! here. Run with `--nocapture` to print the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Every top-level module of the library, in the order the arrows may point back along.
const ORDER: &[&str] = &[
    // helpers, used everywhere, using no stage
    "causes",
    "child",
    "failpoint",
    "progress",
    "live",
    "stop",
    "fsutil",
    "timefmt",
    "logging",
    "format",
    // the stages of a pass: Settings -> Inventory -> Plan -> RenewOutcome -> RestartOutcomes
    "config",
    "components",
    "inventory",
    "served",
    "plan",
    "renew",
    "restart",
    "coordinate",
    "alarms",
    "metrics",
    // what drives them
    "pass",
    "daemon",
    "cli",
];

/// The code of a file, without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `text` refers to: `crate::x`, and `x` in `use crate::{x, ...}`.
fn refers_to(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first name of each item at the group's own depth.
            let (mut depth, mut start) = (0, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        out.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

/// The `.rs` files under `dir`.
fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    walk_any(dir, &["rs"], files);
}

/// The files under `dir` whose extension is one of `extensions`.
fn walk_any(dir: &Path, extensions: &[&str], files: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk_any(&p, extensions, files);
        } else if (p.extension()).is_some_and(|x| extensions.iter().any(|e| x == *e)) {
            files.push(p);
        }
    }
}

#[test]
fn every_arrow_of_the_import_graph_points_back_along_the_pipeline() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        // The binary, the crate root, unit tests and their fixtures (`test_pki`) are no stage.
        let test_only = top == "test_pki" || rel.file_name().is_some_and(|n| n == "tests.rs");
        if top == "main" || top == "lib" || test_only {
            continue;
        }
        let mut to = refers_to(&code(&fs::read_to_string(f).unwrap()));
        to.remove("test_pki");
        let entry = graph.entry(top.clone()).or_default();
        entry.extend(to.into_iter().filter(|t| *t != top));
    }
    let rank = |m: &str| ORDER.iter().position(|o| *o == m);
    let mut wrong = Vec::new();
    for (from, to) in &graph {
        let Some(r) = rank(from) else {
            wrong.push(format!("{from}: not in ORDER (place it)"));
            continue;
        };
        for t in to {
            match rank(t) {
                Some(rt) if rt < r => {}
                Some(_) => wrong.push(format!("{from} -> {t}: points down the pipeline")),
                None => wrong.push(format!("{from} -> {t}: {t} not in ORDER")),
            }
        }
    }
    for m in ORDER {
        let to = graph.get(*m).map(|t| t.iter().cloned().collect::<Vec<_>>());
        println!("{m:<11} -> {}", to.unwrap_or_default().join(" "));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_references_in_code_and_not_in_comments() {
    let text = "use crate::{alarms::{self, X}, plan};\n/// see crate::daemon\nlet x = crate::renew::f(); // crate::cli\n#[cfg(test)]\nmod tests { use crate::pass; }";
    let found = refers_to(&code(text));
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["alarms", "plan", "renew"]
    );
}

/// The repository paths a text names: words that begin at one of the repository's top-level
/// directories (`src/…`, `tests/…`), not inside a longer path (`/usr/src/…`).
fn paths_named(text: &str) -> BTreeSet<String> {
    const ROOTS: &[&str] = &["src/", "tests/", "benches/", "docs/", "fuzz/", ".ci/"];
    let in_path = |c: char| c.is_alphanumeric() || "/._-".contains(c);
    let mut out = BTreeSet::new();
    for (i, _) in text.char_indices() {
        if text[..i].chars().next_back().is_some_and(in_path)
            || !ROOTS.iter().any(|r| text[i..].starts_with(r))
        {
            continue;
        }
        let end = text[i..]
            .find(|c: char| !in_path(c))
            .map_or(text.len(), |e| i + e);
        out.insert(text[i..end].trim_end_matches(['.', '-', '/']).to_string());
    }
    out
}

/// Files a run writes, git-ignored: named before they exist.
const WRITTEN_BY_RUNS: &[&str] = &["benches/RESULTS-quick.md", "fuzz/target"];

/// Every repository path named in the README, the docs, the code and its comments exists:
/// a file moved or renamed leaves no stale name for the next reader to follow.
#[test]
fn every_repository_path_named_in_docs_and_comments_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for dir in ["docs", "src", "tests", "benches"] {
        let mut found = Vec::new();
        walk_any(&root.join(dir), &["rs", "md"], &mut found);
        files.extend(found);
    }
    let mut missing = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for p in paths_named(&text) {
            if !root.join(&p).exists() && !WRITTEN_BY_RUNS.contains(&p.as_str()) {
                missing.push(format!("{}: {p}", f.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named that do not exist:\n{}",
        missing.join("\n")
    );
    // The reader itself: a path inside a longer one is not the repository's.
    // (Made at run time, so that this file names no such path itself.)
    let text = format!(
        "see `tests/it/e2e_etcd.rs`, not /usr/src/linux, or {}/x.md#y.",
        "docs"
    );
    assert_eq!(
        paths_named(&text),
        BTreeSet::from(["tests/it/e2e_etcd.rs".into(), format!("{}/x.md", "docs")])
    );
}

/// No two source files share a name (but `mod.rs` and `tests.rs`): a name says one job, and
/// `grep`, an editor's file finder and a reader of a backtrace each find the one file.
#[test]
fn no_two_source_files_share_a_name() {
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name != "mod.rs" && name != "tests.rs" {
            by_name
                .entry(name)
                .or_default()
                .push(f.display().to_string());
        }
    }
    let shared: Vec<String> = (by_name.values())
        .filter(|paths| paths.len() > 1)
        .map(|paths| paths.join(" and "))
        .collect();
    assert!(
        shared.is_empty(),
        "files sharing a name:\n{}",
        shared.join("\n")
    );
}
