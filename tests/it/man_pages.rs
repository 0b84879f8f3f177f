//! The manual pages the package installs, rendered by man-db (`man -l`) as an operator reads
//! them: each complete on its own (global options, exit status, examples), the JSON of
//! `check`, `renew` and `alarms` documented field by field, nothing pointing at a file that is not
//! installed or a page that is not generated.

use crate::common;
#[path = "../../examples/gen-assets/man.rs"]
mod man;

use common::{pki, skip};

use std::collections::BTreeMap;
use std::process::Command;

const LAYOUTS: &[&str] = &["starlingx"];

/// Every page, rendered 100 columns wide: file name -> text.
fn rendered() -> Option<BTreeMap<String, String>> {
    if Command::new("man").arg("--version").output().is_err() {
        skip::skip("man (man-db) is not installed; .ci/deps.sh installs it");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut out = BTreeMap::new();
    for (name, page) in man::pages().unwrap() {
        let file = dir.path().join(&name);
        std::fs::write(&file, page).unwrap();
        let run = Command::new("man")
            .arg("--warnings")
            .arg("-l")
            .arg(&file)
            .env("MANWIDTH", "100")
            .env("LC_ALL", "C.UTF-8")
            .env("MAN_KEEP_FORMATTING", "")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "man -l {name}: {stderr}");
        assert_eq!(stderr, "", "groff warns about {name}");
        out.insert(name, String::from_utf8(run.stdout).unwrap());
    }
    Some(out)
}

/// The body of section `title` of a rendered page (up to the next section).
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let start = page
        .find(&format!("\n{title}\n"))
        .unwrap_or_else(|| panic!("no section {title} in:\n{page}"));
    let body = &page[start + title.len() + 2..];
    let end = body
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| body[i..].starts_with(|c: char| c.is_ascii_uppercase()))
        .unwrap_or(body.len());
    &body[..end]
}

/// Whether `word` is in `text` as a whole word (`_` counts as a letter).
fn has_word(text: &str, word: &str) -> bool {
    let letter = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).any(|(i, _)| {
        !letter(text[..i].chars().next_back()) && !letter(text[i + word.len()..].chars().next())
    })
}

/// mandoc's lint, as Debian's checkers read a page: no warning on any page (a `.TH`
/// without a date, a paragraph roff skips), and each dated as its package is.
#[test]
fn every_page_passes_mandocs_lint_and_is_dated() {
    if Command::new("mandoc").arg("-V").output().is_err() {
        skip::skip("mandoc is not installed; .ci/deps.sh installs it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let changelog = include_str!("../../systemd/deb/changelog");
    assert!(
        changelog.starts_with(&format!("certrenewd ({}-1) ", env!("CARGO_PKG_VERSION"))),
        "the Debian changelog's first entry is not this version:\n{changelog}"
    );
    for (name, page) in man::pages().unwrap() {
        let file = dir.path().join(&name);
        std::fs::write(&file, &page).unwrap();
        let run = Command::new("mandoc")
            .args(["-T", "lint", "-W", "warning"])
            .arg(&file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&run.stdout).to_string()
            + &String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success() && said.is_empty(),
            "mandoc -T lint {name}:\n{said}"
        );
        let th = String::from_utf8_lossy(&page)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let date = th.split('"').nth(3).unwrap_or_default();
        let dated = date.len() == 10
            && (date.char_indices())
                .all(|(i, c)| matches!(i, 4 | 7) == (c == '-') && (c == '-' || c.is_ascii_digit()));
        assert!(dated, "{name} is not dated: {th}");
    }
}

#[test]
fn every_page_stands_on_its_own() {
    let Some(pages) = rendered() else { return };
    let names: Vec<&str> = pages.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "certrenewd-alarms.8",
            "certrenewd-check.8",
            "certrenewd-inhibit.8",
            "certrenewd-renew.8",
            "certrenewd-run.8",
            "certrenewd.8",
            "certrenewd.toml.5"
        ]
    );
    for (name, page) in pages.iter().filter(|(n, _)| n.ends_with(".8")) {
        for s in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "EXIT STATUS",
            "EXAMPLES",
            "SEE ALSO",
        ] {
            section(page, s);
        }
        let global = section(page, "GLOBAL OPTIONS");
        assert!(
            global.contains("--config <PATH>") && global.contains("-v, --verbose"),
            "{name}: {global}"
        );
        assert!(!page.contains("INTERFACE"), "{name} names INTERFACE.md");
        assert!(
            !page.contains("certrenewd-help"),
            "{name} names certrenewd-help(8)"
        );
        // Every page it links to is one of these, in section 8.
        for (i, _) in page.match_indices("certrenewd-") {
            let rest = &page[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .unwrap_or(rest.len());
            let (target, after) = rest.split_at(end);
            if after.starts_with('(') {
                assert!(
                    after.starts_with("(8)"),
                    "{name} links to {target}{after:.3}"
                );
                assert!(
                    pages.contains_key(&format!("{target}.8")),
                    "{name}: {target}(8)"
                );
            }
        }
    }
    let main = &pages["certrenewd.8"];
    let commands = section(main, "SUBCOMMANDS");
    for command in ["run", "check", "renew", "inhibit", "alarms"] {
        assert!(
            commands.contains(&format!("certrenewd-{command}(8)")),
            "{commands}"
        );
    }
    for s in [
        "CONFIGURATION",
        "ALARMS",
        "ENVIRONMENT",
        "DEFAULT CONFIGURATION",
    ] {
        section(main, s);
    }
    let files = section(main, "FILES");
    for f in [
        "/etc/certrenewd/certrenewd.toml",
        "/var/lib/certrenewd/",
        "pending.json",
        "alarms.json",
        "backup/<UTC time>/<path>",
    ] {
        assert!(files.contains(f), "FILES lacks {f}:\n{files}");
    }
    let exit = section(main, "EXIT STATUS");
    for code in ["0", "1", "2"] {
        assert!(exit.contains(&format!("       {code}      ")), "{exit}");
    }
}

/// The configuration file has a page of its own (Debian's convention), its keys from the
/// same source as certrenewd(8)'s, with the shipped file as its example; certrenewd(8)
/// points at it.
#[test]
fn certrenewd_toml_5_documents_every_key_as_certrenewd_8_does() {
    let Some(pages) = rendered() else { return };
    let file = &pages["certrenewd.toml.5"];
    for s in ["NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "SEE ALSO"] {
        section(file, s);
    }
    assert!(section(file, "NAME").contains("certrenewd.toml - configuration of certrenewd"));
    let keys = section(file, "KEYS");
    // The same text; groff spreads a justified line's spaces by where it falls.
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        words(keys),
        words(section(&pages["certrenewd.8"], "CONFIGURATION"))
    );
    for key in [
        "schedule",
        "renew_before_days",
        "state_dir",
        "metrics_file",
        "manifests_dir",
        "[[watch]]",
        "[coordination]",
    ] {
        assert!(has_word(keys, key), "KEYS lacks {key}");
    }
    let example = section(file, "EXAMPLE");
    for line in include_str!("../../config/certrenewd.toml")
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        assert!(example.contains(line.trim()), "EXAMPLE lacks {line:?}");
    }
    assert!(
        section(&pages["certrenewd.8"], "SEE ALSO").contains("certrenewd.toml(5)"),
        "certrenewd(8) does not point at certrenewd.toml(5)"
    );
}

#[test]
fn certrenewd_8_has_examples_for_the_first_run_a_forced_renewal_alarms_and_an_upgrade() {
    let Some(pages) = rendered() else { return };
    let examples = section(&pages["certrenewd.8"], "EXAMPLES");
    for line in [
        "   First run",
        "           certrenewd check\n           certrenewd renew --dry-run\n",
        "   Renew one certificate now",
        "           certrenewd renew --force /etc/etcd/etcd-server.crt\n",
        "   Read the alarms",
        "           certrenewd alarms\n",
        "           journalctl -t certrenewd --since today\n",
        "           journalctl ALARM_ID=250.003\n",
        "           journalctl -x MESSAGE_ID=c09dac120e7c4060a49973317381e336\n",
        "   Inhibit renewals during an upgrade",
        "           certrenewd inhibit --reason \"kubeadm upgrade to 1.31\" --until 6h\n",
        "           certrenewd inhibit --clear\n",
    ] {
        assert!(
            examples.contains(line),
            "EXAMPLES lacks {line:?}:\n{examples}"
        );
    }
    // The MESSAGE_ID of the example is the one a raise of 250.003 "renewal failed" carries.
    let alarms = section(&pages["certrenewd.8"], "ALARMS");
    let failed = &alarms[alarms
        .find("\"Kubernetes certificates renewal failed\"")
        .expect(alarms)..];
    let raised = &failed[failed.find("Raised: ").expect(failed)..];
    assert!(
        raised.starts_with("Raised: MESSAGE_ID=c09dac120e7c4060a49973317381e336\n"),
        "{alarms}"
    );
}

#[test]
fn the_json_of_check_and_alarms_is_documented_field_by_field() {
    let Some(pages) = rendered() else { return };
    // Every key `check --output json` prints for a real tree, and those printed only for
    // some certificates (kubeconfigs, symlinks, static pods).
    let tree = pki::Tree::new(LAYOUTS, "starlingx");
    let json = tree.check_json();
    let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    for cert in json["certificates"].as_array().unwrap() {
        keys.extend(cert.as_object().unwrap().keys().cloned());
    }
    keys.extend(
        [
            "static_pods",
            "aliases",
            "kubeconfig",
            "user",
            "embedded",
            "client_certificate",
        ]
        .map(String::from),
    );
    let check = section(&pages["certrenewd-check.8"], "JSON OUTPUT");
    // Documented below the example, not only shown in it.
    let fields = &check[check.find("Each element of certificates:").expect(check)..];
    for key in &keys {
        assert!(
            has_word(fields, key),
            "certrenewd-check(8) does not document {key}:\n{check}"
        );
    }
    let alarms = section(&pages["certrenewd-alarms.8"], "JSON OUTPUT");
    for key in ["id", "severity", "entity", "text", "reason", "raised_at"] {
        assert!(
            alarms.contains(&format!("\n       {key} (")),
            "certrenewd-alarms(8) does not document {key}:\n{alarms}"
        );
    }
}

#[test]
fn the_json_of_renew_is_documented_field_by_field() {
    let Some(pages) = rendered() else { return };
    // Every key `renew --output json` prints for a real pass (no unit restarted: listed as
    // not restarted), and those printed only for some entries.
    let tree = pki::Tree::new(LAYOUTS, "starlingx");
    let run = tree.run(&["renew", "--no-restart", "--output", "json"]);
    assert_eq!(run.code, 0, "{run}");
    let json = run.json();
    let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    for list in ["certificates", "units"] {
        let first = &json[list][0];
        assert!(first.is_object(), "no {list} in {json:#}");
        keys.extend(first.as_object().unwrap().keys().cloned());
    }
    keys.extend(["user", "active", "endpoint", "ok"].map(String::from));
    let renew = section(&pages["certrenewd-renew.8"], "JSON OUTPUT");
    for key in &keys {
        assert!(
            has_word(renew, key),
            "certrenewd-renew(8) does not document {key}:\n{renew}"
        );
    }
    // Documented below the example, not only shown in it.
    let fields = &renew[renew.find("deferred (").expect(renew)..];
    for key in [
        "certificates",
        "units",
        "static_pods",
        "after_rollback",
        "backoff",
        "success",
    ] {
        assert!(has_word(fields, key), "{key}:\n{renew}");
    }
}

/// Every `NNN.NNN` alarm ID in `text`.
fn alarm_ids(text: &str) -> std::collections::BTreeSet<String> {
    let b = text.as_bytes();
    let digits =
        |i: usize, n: usize| b.len() >= i + n && b[i..i + n].iter().all(u8::is_ascii_digit);
    let word = |i: usize| {
        b.get(i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'.')
    };
    (0..b.len())
        .filter(|&i| {
            digits(i, 3)
                && b.get(i + 3) == Some(&b'.')
                && digits(i + 4, 3)
                && (i == 0 || !word(i - 1))
                && !b.get(i + 7).is_some_and(u8::is_ascii_digit)
        })
        .map(|i| text[i..i + 7].to_string())
        .collect()
}

/// The pages say what the code does of alarms and CAs: every alarm ID the code defines is
/// listed where the alarms page documents `id`, and no page names an ID the code does not
/// define; no page says CAs are never re-issued or that naming one is refused (CAs whose
/// key is on the node are re-issued with it, and `renew --force CA-PATH` does it now).
#[test]
fn the_pages_say_what_the_code_does_of_alarms_and_cas() {
    let Some(pages) = rendered() else { return };
    let defined: std::collections::BTreeSet<String> = certrenewd::alarms::AlarmKind::ALL
        .iter()
        .map(|k| k.id().to_string())
        .collect();
    for (name, page) in &pages {
        let named = alarm_ids(page);
        let unknown: Vec<&String> = named.difference(&defined).collect();
        assert!(
            unknown.is_empty(),
            "{name} names alarm IDs {unknown:?} the code does not define"
        );
    }
    let json = section(&pages["certrenewd-alarms.8"], "JSON OUTPUT");
    let id = &json[json.find("\n       id (").expect(json)..];
    let id = &id[..id[1..].find("\n       severity (").expect(id) + 1];
    assert_eq!(
        alarm_ids(id),
        defined,
        "certrenewd-alarms(8) documents id as:{id}"
    );
    let all: std::collections::BTreeSet<String> =
        pages.values().flat_map(|p| alarm_ids(p)).collect();
    assert!(
        all.is_superset(&defined),
        "the pages name {all:?}, the code {defined:?}"
    );

    for (name, page) in &pages {
        // One line per paragraph, hyphenation undone, as a sentence is searched.
        let text = page
            .replace("-\n", "")
            .replace('\u{2010}', "-")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        for claim in [
            "never reissued",
            "never re-issued",
            "only leaf certificates are renewed",
            "naming a ca certificate or a private key is refused",
            "naming a ca certificate is refused",
        ] {
            assert!(!text.contains(claim), "{name} says \"{claim}\"");
        }
    }
    let renew = pages["certrenewd-renew.8"]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        renew.contains("certrenewd renew --force CA-PATH"),
        "{renew}"
    );
}

/// Under etcd RBAC the identity needs three key prefixes (the lock, a CA's one re-issue, the
/// node records): every place that tells the operator what to grant names all three.
#[test]
fn every_rbac_hint_names_the_three_prefixes_the_identity_needs() {
    for (file, text) in [
        (
            "config/certrenewd.toml",
            include_str!("../../config/certrenewd.toml"),
        ),
        (
            "examples/gen-assets/pages/configuration.roff",
            include_str!("../../examples/gen-assets/pages/configuration.roff"),
        ),
        ("docs/operator.md", include_str!("../../docs/operator.md")),
        ("docs/interface.md", include_str!("../../docs/interface.md")),
    ] {
        // `<lock_prefix>/` in Markdown, \fIlock_prefix\fR/ in roff: compared bare.
        let bare: String = (text
            .replace("\\-", "-")
            .replace("\\fR", "")
            .replace("\\fI", ""))
        .chars()
        .filter(|c| !matches!(c, '<' | '>'))
        .collect();
        assert!(bare.contains("RBAC"), "{file} says nothing of RBAC");
        for prefix in ["lock_prefix/", "ca-renewals/", ".nodes/"] {
            let named = bare.contains(prefix)
                || bare.contains(&prefix.replace("lock_prefix", "/certrenewd/restart-lock"));
            assert!(named, "{file}: its RBAC hint does not name {prefix}");
        }
    }
}
