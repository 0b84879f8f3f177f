//! `[[watch]]` tables: each one's keys, then the checks across them.

use std::path::PathBuf;

use toml::de::DeTable;

use super::reader::{Reader, Value};
use super::{OnRenew, Program, Watch};

const WATCH_KEYS: &[&str] = &[
    "path",
    "units",
    "verify_endpoints",
    "wait_serving",
    "on_renew",
    "kubeconfigs",
    "static_pods",
    "optional",
    "validity_days",
    "post_renew_command",
    "ca_renew_before_days",
    "add_missing_names",
    "components",
];

impl Reader<'_> {
    /// The `watch` array of tables; `None` when it is not one.
    pub(super) fn watches(&mut self, k: &str, v: &Value<'_>) -> Option<Vec<Watch>> {
        let Some(arr) = v.get_ref().as_array() else {
            self.problem(
                Some(v.span()),
                k,
                "expected [[watch]] tables (an array of tables)",
            );
            return None;
        };
        let read: Vec<(usize, &Value<'_>, Watch)> = arr
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((i, w, self.watch(i, w)?)))
            .collect();
        self.watched_twice(&read);
        self.kubeconfigs_twice(&read);
        let mut watches: Vec<Watch> = read.into_iter().map(|(_, _, w)| w).collect();
        // A kubeconfig named explicitly belongs to that watch, not to a default list.
        let explicit: Vec<PathBuf> = watches
            .iter()
            .filter(|w| !w.kubeconfigs_default)
            .flat_map(|w| w.kubeconfigs.clone())
            .collect();
        for w in watches.iter_mut().filter(|w| w.kubeconfigs_default) {
            w.kubeconfigs.retain(|k| !explicit.contains(k));
        }
        Some(watches)
    }

    /// A directory watched twice, reported at its second `path`, naming the first.
    fn watched_twice(&mut self, watches: &[(usize, &Value<'_>, Watch)]) {
        let path_span = |v: &Value<'_>| {
            let table = v.get_ref().as_table();
            table.and_then(|t| t.get("path")).map(|p| p.span())
        };
        for (n, (i, v, w)) in watches.iter().enumerate() {
            let Some((j, first, _)) = watches[..n].iter().find(|(_, _, o)| o.path == w.path) else {
                continue;
            };
            let at = path_span(first)
                .map(|s| format!(" at line {}", self.line_of(s)))
                .unwrap_or_default();
            let why = format!(
                "{} is watched twice: already by watch[{}]{at}",
                w.path.display(),
                j + 1
            );
            self.problem(path_span(v), &format!("watch[{}].path", i + 1), why);
        }
    }

    /// A kubeconfig listed twice (in one watch or two), reported where it is listed again.
    fn kubeconfigs_twice(&mut self, watches: &[(usize, &Value<'_>, Watch)]) {
        let mut seen: Vec<(PathBuf, usize)> = Vec::new();
        for (i, v, _) in watches {
            let table = v.get_ref().as_table();
            let listed = table.and_then(|t| t.get("kubeconfigs"));
            let items = listed.and_then(|l| l.get_ref().as_array());
            for item in items.into_iter().flatten() {
                let Some(k) = item.get_ref().as_str().map(PathBuf::from) else {
                    continue;
                };
                if !k.is_absolute() {
                    continue; // reported as such
                }
                match seen.iter().find(|(s, _)| *s == k) {
                    Some((_, line)) => self.problem(
                        Some(item.span()),
                        &format!("watch[{}].kubeconfigs", i + 1),
                        format!("{} is listed twice: already at line {line}", k.display()),
                    ),
                    None => seen.push((k, self.line_of(item.span()))),
                }
            }
        }
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
            Some(u) => self.units(&format!("{key}.units"), u)?,
            None => Vec::new(),
        };
        let mut verify_endpoints = Vec::new();
        if let Some(v) = table.get("verify_endpoints") {
            let vkey = format!("{key}.verify_endpoints");
            for (e, span) in self.spanned_strings(&vkey, v).unwrap_or_default() {
                match check_endpoint(&e) {
                    Ok(()) => verify_endpoints.push(e),
                    Err(why) => self.problem(Some(span), &vkey, why),
                }
            }
        }
        let mut w = Watch::new(path?, &[]);
        w.units = units;
        w.verify_endpoints = verify_endpoints;
        if let Some(v) = table.get("wait_serving") {
            w.wait_serving = self
                .boolean(&format!("{key}.wait_serving"), v)
                .unwrap_or(true);
        }
        if let Some(v) = table.get("on_renew") {
            let k = format!("{key}.on_renew");
            w.on_renew = match self.string(&k, v).as_deref() {
                Some("reload") | None => OnRenew::Reload,
                Some("restart") => OnRenew::Restart,
                Some(other) => {
                    let why = format!("{other:?}: use \"reload\" (default) or \"restart\"");
                    self.problem(Some(v.span()), &k, why);
                    OnRenew::Reload
                }
            };
        }
        if let Some(v) = table.get("optional") {
            w.optional = self.boolean(&format!("{key}.optional"), v).unwrap_or(false);
        }
        if let Some(v) = table.get("validity_days") {
            w.validity_days = self.count(&format!("{key}.validity_days"), v, 1..36501);
        }
        if let Some(v) = table.get("ca_renew_before_days") {
            w.ca_renew_before_days = self.count(&format!("{key}.ca_renew_before_days"), v, 1..3651);
        }
        if let Some(v) = table.get("add_missing_names") {
            w.add_missing_names = self.boolean(&format!("{key}.add_missing_names"), v);
        }
        if let Some(v) = table.get("post_renew_command") {
            let example = "[\"/usr/bin/systemctl\", \"reload\", \"haproxy.service\"]";
            w.post_renew_command = self.command(&format!("{key}.post_renew_command"), v, example);
        }
        self.restarted_with(&key, table, &mut w);
        if let Some(v) = table.get("components") {
            w.components = self.components(&format!("{key}.components"), v, &w);
        }
        Some(w)
    }

    /// `components`: a table from one of the watch's units or static pods to what it runs,
    /// `"etcd"` or `"kube-apiserver"`.
    fn components(&mut self, k: &str, v: &Value<'_>, w: &Watch) -> Vec<(String, Program)> {
        let Some(table) = v.get_ref().as_table() else {
            let why = "expected a table, e.g. { \"kv-store.service\" = \"etcd\" }";
            self.problem(Some(v.span()), k, why);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, program) in table.iter() {
            let name = name.get_ref().as_ref();
            let ours = w.units.iter().chain(&w.static_pods).any(|t| t == name);
            if !ours {
                let why = format!(
                    "{name:?} is neither a unit nor a static pod of this watch: say what runs only for what the watch restarts"
                );
                self.problem(Some(program.span()), k, why);
                continue;
            }
            match program.get_ref().as_str() {
                Some("etcd") => out.push((name.to_string(), Program::Etcd)),
                Some("kube-apiserver") => out.push((name.to_string(), Program::ApiServer)),
                _ => {
                    let why = format!("{name:?}: expected \"etcd\" or \"kube-apiserver\"");
                    self.problem(Some(program.span()), k, why);
                }
            }
        }
        out
    }

    /// `units`: every one a unit name; `None` when it is not a list of strings.
    fn units(&mut self, ukey: &str, u: &Value<'_>) -> Option<Vec<String>> {
        let units = self.spanned_strings(ukey, u)?;
        for (unit, span) in &units {
            if let Err(why) = check_unit_name(unit) {
                self.problem(Some(span.clone()), ukey, why);
            }
        }
        Some(units.into_iter().map(|(unit, _)| unit).collect())
    }

    /// `kubeconfigs` and `static_pods`, replacing the kubeadm defaults when given.
    fn restarted_with(&mut self, key: &str, table: &DeTable<'_>, w: &mut Watch) {
        if let Some(v) = table.get("kubeconfigs") {
            let kkey = format!("{key}.kubeconfigs");
            w.kubeconfigs = self.abs_paths(&kkey, v);
            w.kubeconfigs_default = false;
        }
        if let Some(v) = table.get("static_pods") {
            let pkey = format!("{key}.static_pods");
            w.static_pods = Vec::new();
            w.static_pods_default = false;
            for (name, span) in self.spanned_strings(&pkey, v).unwrap_or_default() {
                match check_static_pod(&name) {
                    Ok(()) => w.static_pods.push(name),
                    Err(why) => self.problem(Some(span), &pkey, why),
                }
            }
        }
    }
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
