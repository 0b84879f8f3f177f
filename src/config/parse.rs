//! TOML -> `Settings`, collecting every problem with its line before failing.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{Bus, RestartPolicy, Settings, Watch, parse_cron};

/// One mistake in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key, dotted (`watch[2].units`).
    pub key: String,
    /// What is wrong and what would be right.
    pub message: String,
}

/// A configuration that cannot be used: every problem found, with the file they are in.
#[derive(Debug, Clone)]
pub struct ConfigError {
    /// The file read, or `None` for built-in defaults.
    pub file: Option<PathBuf>,
    /// All problems found.
    pub problems: Vec<Problem>,
}

impl ConfigError {
    pub(crate) fn unreadable(path: &Path, err: &std::io::Error) -> ConfigError {
        ConfigError {
            file: Some(path.to_path_buf()),
            problems: vec![Problem {
                line: None,
                key: String::new(),
                message: format!("cannot read the configuration file: {err}"),
            }],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .file
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "<built-in defaults>".into());
        if let [p] = self.problems.as_slice() {
            return write!(f, "invalid configuration {}", Located(&file, p));
        }
        write!(
            f,
            "invalid configuration: {} problems in {file}",
            self.problems.len()
        )?;
        for p in &self.problems {
            write!(f, "\n  {}", Located(&file, p))?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

struct Located<'a>(&'a str, &'a Problem);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Located(file, p) = self;
        match (p.line, p.key.is_empty()) {
            (Some(l), false) => write!(f, "{file}:{l}: {}: {}", p.key, p.message),
            (Some(l), true) => write!(f, "{file}:{l}: {}", p.message),
            (None, false) => write!(f, "{file}: {}: {}", p.key, p.message),
            (None, true) => write!(f, "{file}: {}", p.message),
        }
    }
}

const TOP_KEYS: &[&str] = &[
    "schedule",
    "run_on_start",
    "renew_before_days",
    "ca_warning_days",
    "state_dir",
    "backup_dir",
    "backup_keep",
    "backup_max_age_days",
    "bus",
    "watch",
    "rotate_keys",
    "rollback_on_failure",
    "validity_days",
    "retry_interval_secs",
    "restart_mode",
    "restart_timeout_secs",
    "lock_timeout_secs",
    "alarm_command",
    "alarm_command_timeout_secs",
    "manifests_dir",
    "static_pod_wait_secs",
    "inhibit_paths",
    "inhibit_max_age_hours",
    "metrics_file",
];
const WATCH_KEYS: &[&str] = &[
    "path",
    "units",
    "verify_endpoints",
    "kubeconfigs",
    "static_pods",
];

/// Collects problems while reading values out of the spanned document.
struct Reader<'t> {
    text: &'t str,
    problems: Vec<Problem>,
}

type Value<'i> = Spanned<DeValue<'i>>;

impl Reader<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn problem(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        let line = span.map(|s| self.line(s));
        self.problems.push(Problem {
            line,
            key: key.to_string(),
            message: message.into(),
        });
    }

    fn unknown_keys(&mut self, table: &DeTable<'_>, known: &[&str], prefix: &str) {
        for key in table.keys() {
            let name = key.get_ref().as_ref();
            if !known.contains(&name) {
                let hint = known
                    .iter()
                    .filter(|k| similar(k, name))
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .next()
                    .unwrap_or_else(|| format!("; known keys: {}", known.join(", ")));
                self.problem(
                    Some(key.span()),
                    &format!("{prefix}{name}"),
                    format!("unknown key{hint}"),
                );
            }
        }
    }

    fn string(&mut self, key: &str, v: &Value<'_>) -> Option<String> {
        match v.get_ref().as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                let got = v.get_ref().type_str();
                self.problem(Some(v.span()), key, format!("expected a string, got {got}"));
                None
            }
        }
    }

    fn boolean(&mut self, key: &str, v: &Value<'_>) -> Option<bool> {
        match v.get_ref().as_bool() {
            Some(b) => Some(b),
            None => {
                let got = v.get_ref().type_str();
                self.problem(
                    Some(v.span()),
                    key,
                    format!("expected true or false, got {got}"),
                );
                None
            }
        }
    }

    fn integer(&mut self, key: &str, v: &Value<'_>, range: Range<u64>) -> Option<u64> {
        let parsed = v
            .get_ref()
            .as_integer()
            .and_then(|i| i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok());
        match parsed {
            Some(n) if n >= 0 && range.contains(&(n as u64)) => Some(n as u64),
            Some(n) => {
                self.problem(
                    Some(v.span()),
                    key,
                    format!(
                        "{n} is out of range: must be from {} to {}",
                        range.start,
                        range.end - 1
                    ),
                );
                None
            }
            None => {
                let got = v.get_ref().type_str();
                self.problem(
                    Some(v.span()),
                    key,
                    format!("expected a whole number, got {got}"),
                );
                None
            }
        }
    }

    fn abs_path(&mut self, key: &str, v: &Value<'_>) -> Option<PathBuf> {
        let s = self.string(key, v)?;
        let p = PathBuf::from(&s);
        if !p.is_absolute() {
            self.problem(
                Some(v.span()),
                key,
                format!("{s:?} must be an absolute path"),
            );
            return None;
        }
        Some(p)
    }

    fn strings(&mut self, key: &str, v: &Value<'_>) -> Option<Vec<String>> {
        let Some(arr) = v.get_ref().as_array() else {
            let got = v.get_ref().type_str();
            self.problem(
                Some(v.span()),
                key,
                format!("expected an array of strings, got {got}"),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in arr.iter().enumerate() {
            match self.string(&format!("{key}[{i}]"), item) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn watch(&mut self, i: usize, v: &Value<'_>) -> Option<Watch> {
        let key = format!("watch[{}]", i + 1);
        let Some(table) = v.get_ref().as_table() else {
            self.problem(Some(v.span()), &key, "expected a [[watch]] table");
            return None;
        };
        self.unknown_keys(table, WATCH_KEYS, &format!("{key}."));
        let path = match table.get("path") {
            Some(p) => self.abs_path(&format!("{key}.path"), p),
            None => {
                self.problem(
                    Some(v.span()),
                    &key,
                    "missing `path` (the directory to watch)",
                );
                None
            }
        };
        let units = match table.get("units") {
            Some(u) => {
                let ukey = format!("{key}.units");
                let units = self.strings(&ukey, u)?;
                for unit in &units {
                    if let Err(why) = check_unit_name(unit) {
                        self.problem(Some(u.span()), &ukey, why);
                    }
                }
                units
            }
            None => Vec::new(),
        };
        let mut verify_endpoints = Vec::new();
        if let Some(v) = table.get("verify_endpoints") {
            let vkey = format!("{key}.verify_endpoints");
            for e in self.strings(&vkey, v).unwrap_or_default() {
                match check_endpoint(&e) {
                    Ok(()) => verify_endpoints.push(e),
                    Err(why) => self.problem(Some(v.span()), &vkey, why),
                }
            }
        }
        let mut w = Watch::new(path?, &[]);
        w.units = units;
        w.verify_endpoints = verify_endpoints;
        if let Some(v) = table.get("kubeconfigs") {
            let kkey = format!("{key}.kubeconfigs");
            w.kubeconfigs = self.abs_paths(&kkey, v);
            w.kubeconfigs_default = false;
        }
        if let Some(v) = table.get("static_pods") {
            let pkey = format!("{key}.static_pods");
            w.static_pods = Vec::new();
            w.static_pods_default = false;
            for name in self.strings(&pkey, v).unwrap_or_default() {
                match check_static_pod(&name) {
                    Ok(()) => w.static_pods.push(name),
                    Err(why) => self.problem(Some(v.span()), &pkey, why),
                }
            }
        }
        Some(w)
    }

    fn abs_paths(&mut self, key: &str, v: &Value<'_>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in self.strings(key, v).unwrap_or_default() {
            if Path::new(&p).is_absolute() {
                out.push(PathBuf::from(p));
            } else {
                self.problem(
                    Some(v.span()),
                    key,
                    format!("{p:?} must be an absolute path"),
                );
            }
        }
        out
    }
}

/// The same key but for case, `_`/`-`, a truncation, or one typo (an edit distance of 1).
fn similar(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase().into_bytes();
    let (a, b) = (strip(a), strip(b));
    (a.len() > 4 && b.len() > 4 && (a.starts_with(&b) || b.starts_with(&a)))
        || (a.len().abs_diff(b.len()) <= 1 && strsim::generic_levenshtein(&a, &b) <= 1)
}

/// `host:port`, `[v6]:port`.
fn check_endpoint(e: &str) -> Result<(), String> {
    let bad = || format!("{e:?} is not host:port (e.g. \"127.0.0.1:2379\" or \"[::1]:2379\")");
    let (host, port) = e.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok(())
}

/// A static pod's manifest name (`kube-apiserver` or `kube-apiserver.yaml`), no directories.
fn check_static_pod(name: &str) -> Result<(), String> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if name.is_empty() || name.starts_with('.') || !valid_chars {
        return Err(format!(
            "{name:?} is not a static pod manifest name: give the name kubelet's manifest file has in manifests_dir, e.g. \"kube-apiserver\" for kube-apiserver.yaml"
        ));
    }
    Ok(())
}

/// A systemd unit name with its type suffix, as D-Bus wants it.
pub(crate) fn check_unit_name(unit: &str) -> Result<(), String> {
    const SUFFIXES: &[&str] = &[
        ".service", ".socket", ".target", ".mount", ".timer", ".path", ".scope", ".slice",
    ];
    let valid_chars = unit
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c));
    if unit.is_empty() || unit.len() > 255 || !valid_chars {
        return Err(format!("{unit:?} is not a valid systemd unit name"));
    }
    if !SUFFIXES
        .iter()
        .any(|s| unit.ends_with(s) && unit.len() > s.len())
    {
        return Err(format!(
            "{unit:?} needs its unit type, e.g. \"{unit}.service\""
        ));
    }
    Ok(())
}

pub(super) fn parse(text: &str, file: Option<&Path>) -> Result<Settings, ConfigError> {
    let fail = |problems| ConfigError {
        file: file.map(Path::to_path_buf),
        problems,
    };
    let mut r = Reader {
        text,
        problems: Vec::new(),
    };
    let doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            r.problem(e.span(), "", format!("not valid TOML: {}", e.message()));
            return Err(fail(r.problems));
        }
    };
    let doc = doc.get_ref();
    r.unknown_keys(doc, TOP_KEYS, "");

    let mut s = Settings::defaults();
    s.source = file.map(Path::to_path_buf);
    let mut backup_dir = None;
    for (key, v) in doc.iter() {
        let k = key.get_ref().as_ref();
        match k {
            "schedule" => {
                if let Some(expr) = r.string(k, v) {
                    match parse_cron(&expr) {
                        Ok(_) => s.schedule = expr,
                        Err(why) => r.problem(Some(v.span()), k, format!("{expr:?}: {why}")),
                    }
                }
            }
            "run_on_start" => set(&mut s.run_on_start, r.boolean(k, v)),
            "rotate_keys" => set(&mut s.rotate_keys, r.boolean(k, v)),
            "rollback_on_failure" => set(&mut s.rollback_on_failure, r.boolean(k, v)),
            "renew_before_days" => set(
                &mut s.renew_before_days,
                r.integer(k, v, 1..3651).map(|n| n as u32),
            ),
            "ca_warning_days" => set(
                &mut s.ca_warning_days,
                r.integer(k, v, 1..3651).map(|n| n as u32),
            ),
            "validity_days" => {
                s.validity_days = r.integer(k, v, 1..36501).map(|n| n as u32);
            }
            "backup_keep" => set(
                &mut s.backup_keep,
                r.integer(k, v, 1..100_001).map(|n| n as u32),
            ),
            "backup_max_age_days" => set(
                &mut s.backup_max_age_days,
                r.integer(k, v, 1..36501).map(|n| n as u32),
            ),
            "state_dir" => set(&mut s.state_dir, r.abs_path(k, v)),
            "backup_dir" => backup_dir = r.abs_path(k, v),
            "bus" => match r.string(k, v).as_deref() {
                Some("system") => s.bus = Bus::System,
                Some("user") => s.bus = Bus::User,
                Some(other) => r.problem(
                    Some(v.span()),
                    k,
                    format!("{other:?} is not a bus: use \"system\" or \"user\""),
                ),
                None => {}
            },
            "restart_mode" => match r.string(k, v).as_deref() {
                Some("try-restart") => s.restart_mode = RestartPolicy::TryRestart,
                Some("restart") => s.restart_mode = RestartPolicy::Restart,
                Some(other) => r.problem(
                    Some(v.span()),
                    k,
                    format!("{other:?}: use \"try-restart\" (default) or \"restart\""),
                ),
                None => {}
            },
            "retry_interval_secs" => {
                set(&mut s.retry_interval, r.integer(k, v, 1..86_401).map(secs))
            }
            "restart_timeout_secs" => {
                set(&mut s.restart_timeout, r.integer(k, v, 1..3_601).map(secs))
            }
            "lock_timeout_secs" => set(&mut s.lock_timeout, r.integer(k, v, 0..3_601).map(secs)),
            "manifests_dir" => set(&mut s.manifests_dir, r.abs_path(k, v)),
            "static_pod_wait_secs" => {
                set(&mut s.static_pod_wait, r.integer(k, v, 1..3_601).map(secs))
            }
            "alarm_command_timeout_secs" => set(
                &mut s.alarm_command_timeout,
                r.integer(k, v, 1..3_601).map(secs),
            ),
            "metrics_file" => s.metrics_file = r.abs_path(k, v),
            "inhibit_max_age_hours" => set(
                &mut s.inhibit_max_age,
                r.integer(k, v, 1..87_601).map(|h| secs(h * 3600)),
            ),
            "inhibit_paths" => {
                if let Some(paths) = r.strings(k, v) {
                    for p in paths {
                        if Path::new(&p).is_absolute() {
                            s.inhibit_paths.push(PathBuf::from(p));
                        } else {
                            r.problem(Some(v.span()), k, format!("{p:?} must be an absolute path"));
                        }
                    }
                }
            }
            "alarm_command" => {
                if let Some(argv) = r.strings(k, v) {
                    if argv.first().is_none_or(|p| !Path::new(p).is_absolute()) {
                        r.problem(
                            Some(v.span()),
                            k,
                            "must be a non-empty list whose first item is an absolute program path, e.g. [\"/usr/local/bin/forward-alarm\", \"--site\", \"a\"]",
                        );
                    } else {
                        s.alarm_command = Some(argv);
                    }
                }
            }
            "watch" => {
                let Some(arr) = v.get_ref().as_array() else {
                    r.problem(
                        Some(v.span()),
                        k,
                        "expected [[watch]] tables (an array of tables)",
                    );
                    continue;
                };
                let mut watches: Vec<_> = arr
                    .iter()
                    .enumerate()
                    .filter_map(|(i, w)| r.watch(i, w))
                    .collect();
                for (i, w) in watches.iter().enumerate() {
                    if watches[..i].iter().any(|o| o.path == w.path) {
                        r.problem(
                            Some(v.span()),
                            &format!("watch[{}].path", i + 1),
                            format!("{} is watched twice", w.path.display()),
                        );
                    }
                    if w.kubeconfigs_default {
                        continue;
                    }
                    for (j, k) in w.kubeconfigs.iter().enumerate() {
                        let twice = w.kubeconfigs[..j].contains(k)
                            || watches[..i]
                                .iter()
                                .any(|o| !o.kubeconfigs_default && o.kubeconfigs.contains(k));
                        if twice {
                            r.problem(
                                Some(v.span()),
                                &format!("watch[{}].kubeconfigs", i + 1),
                                format!("{} is listed twice", k.display()),
                            );
                        }
                    }
                }
                // A kubeconfig named explicitly belongs to that watch, not to a default list.
                let explicit: Vec<PathBuf> = watches
                    .iter()
                    .filter(|w| !w.kubeconfigs_default)
                    .flat_map(|w| w.kubeconfigs.clone())
                    .collect();
                for w in watches.iter_mut().filter(|w| w.kubeconfigs_default) {
                    w.kubeconfigs.retain(|k| !explicit.contains(k));
                }
                s.watches = watches;
            }
            _ => {} // reported by unknown_keys
        }
    }
    s.backup_dir = backup_dir.unwrap_or_else(|| s.state_dir.join("backup"));
    if let Some(days) = s.validity_days
        && days <= s.renew_before_days
    {
        r.problem(
            None,
            "validity_days",
            format!(
                "{days} days is not longer than renew_before_days ({}): every renewed certificate would be due at once",
                s.renew_before_days
            ),
        );
    }
    if r.problems.is_empty() {
        Ok(s)
    } else {
        Err(fail(r.problems))
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
