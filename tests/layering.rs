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

/// A source file's module path under `src/`: `coordinate/gate.rs` and
/// `coordinate/gate/mod.rs` are both `coordinate::gate`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut path: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = path.pop() {
        let last = last.trim_end_matches(".rs");
        if last != "mod" {
            path.push(last.to_string());
        }
    }
    path
}

/// The path that begins at the start of `text`: its `::`-separated names, and the text of a
/// `{…}` group that ends it.
fn path_at(text: &str) -> (Vec<&str>, Option<&str>) {
    let mut names = Vec::new();
    let mut rest = text;
    loop {
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if n > 0 {
            names.push(&rest[..n]);
        }
        match rest[n..].strip_prefix("::") {
            Some(after) if after.starts_with('{') => {
                let mut depth = 0;
                for (i, c) in after.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 1 => return (names, Some(&after[1..i])),
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                return (names, None);
            }
            Some(after) if n > 0 => rest = after,
            _ => return (names, None),
        }
    }
}

/// The items of a `{…}` group at its own depth.
fn group_items(group: &str) -> Vec<&str> {
    let (mut depth, mut from, mut items) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(group[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(group[from..].trim());
    items.retain(|i| !i.is_empty());
    items
}

/// The modules of `modules` that `code`, the code of module `at`, refers to: by
/// `crate::…` and `super::…` paths (each item of a `{…}` group too), resolved to the
/// longest that is a module, and a sibling named bare (`conn::open`, as `use super::*`
/// allows).
fn modules_named(
    code: &str,
    at: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeSet::new();
    let mut resolve = |base: Vec<String>, names: &[&str]| {
        let mut full = base;
        full.extend(names.iter().map(|n| n.to_string()));
        while !full.is_empty() && !modules.contains(&full) {
            full.pop();
        }
        if !full.is_empty() {
            out.insert(full);
        }
    };
    for head in ["crate::", "super::"] {
        for (i, _) in code.match_indices(head) {
            if code[..i].ends_with(is_ident) {
                continue;
            }
            let (names, group) = path_at(&code[i..]);
            let ups = names.iter().take_while(|n| **n == "super").count();
            let base: Vec<String> = match names[0] {
                "crate" => Vec::new(),
                _ if ups <= at.len() => at[..at.len() - ups].to_vec(),
                _ => continue,
            };
            let skip = if names[0] == "crate" { 1 } else { ups };
            let names = &names[skip..];
            match group {
                Some(g) => {
                    for item in group_items(g) {
                        let (inner, _) = path_at(item);
                        let inner: Vec<&str> = inner.into_iter().filter(|n| *n != "self").collect();
                        let mut both = names.to_vec();
                        both.extend(inner);
                        resolve(base.clone(), &both);
                    }
                }
                None => resolve(base, names),
            }
        }
    }
    if let Some((_, parent)) = at.split_last() {
        for m in modules {
            let bare = m.last().map(|s| format!("{s}::")).unwrap_or_default();
            let sibling = m.len() == at.len() && m.starts_with(parent) && m != at;
            let named = code
                .match_indices(&bare)
                .any(|(i, _)| !code[..i].ends_with(is_ident));
            if sibling && named {
                out.insert(m.clone());
            }
        }
    }
    out
}

/// No two sibling files import each other (`restart/sequence` ↔ `restart/serving`): such a
/// pair is one job split in the wrong place, a helper both need or a dispatch that belongs
/// to their parent. Their unit tests aside.
#[test]
fn no_two_sibling_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let modules: BTreeMap<Vec<String>, &std::path::PathBuf> = files
        .iter()
        .map(|f| (module_of(f.strip_prefix(&src).unwrap()), f))
        .filter(|(m, _)| {
            m.last()
                .is_some_and(|l| l != "tests" && l != "lib" && l != "main")
        })
        .collect();
    let names: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let mut arrows = BTreeSet::new();
    for (m, f) in &modules {
        let Some((_, parent)) = m.split_last() else {
            continue;
        };
        for to in modules_named(&code(&fs::read_to_string(f).unwrap()), m, &names) {
            if to.len() == m.len() && to.starts_with(parent) && to != *m {
                arrows.insert((m.join("/"), to.join("/")));
            }
        }
    }
    let circles: Vec<String> = arrows
        .iter()
        .filter(|(a, b)| a < b && arrows.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("src/{a} and src/{b} import each other"))
        .collect();
    println!("{} arrows between sibling files", arrows.len());
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

#[test]
fn the_sibling_reader_resolves_paths_groups_and_bare_names() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    let modules: BTreeSet<Vec<String>> = ["a", "a/b", "a/c", "a/d", "a/b/e", "f"]
        .iter()
        .map(|s| m(s))
        .collect();
    let code = "use super::c::{X, Y};\nuse crate::{f, a::b::e::Z};\nlet q = d::run();\nsuper::super::f::g();";
    let got = modules_named(code, &m("a/b"), &modules);
    let want: BTreeSet<Vec<String>> = ["a/c", "f", "a/b/e", "a/d"].iter().map(|s| m(s)).collect();
    assert_eq!(got, want);
}
