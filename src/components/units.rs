//! A systemd unit as a component: what its `ExecStart` runs, with the variables of its
//! `Environment=` and `EnvironmentFile=` put in as systemd would, and the files that names.
//! systemd gives the settings over D-Bus (the restart module asks it); nothing here talks to
//! systemd, executes the unit's program or reads more than the environment files and the
//! kubeconfigs and etcd config file its settings name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Component, Kind, MAX_FILE, Runs, kubeconfig_files, note, paths_in};
use crate::format::flags::setting;

/// A unit's settings as systemd has them loaded (its D-Bus properties).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitSettings {
    /// The unit's name (`etcd.service`).
    pub unit: String,
    /// Each `ExecStart=` line: the program's path, then its argv (argv[0] included), the
    /// variables not yet put in.
    pub exec_start: Vec<(String, Vec<String>)>,
    /// `Environment=` assignments (`NAME=value`), in order.
    pub environment: Vec<String>,
    /// `EnvironmentFile=` paths, with whether a missing one is ignored (`-/etc/x.env`).
    pub environment_files: Vec<(PathBuf, bool)>,
}

/// The component `u` describes. A unit systemd does not know (`LoadState=not-found`) is not
/// given here at all.
pub(super) fn read(u: &UnitSettings) -> Component {
    let mut c = Component::new(Runs::Unit(u.unit.clone()));
    c.env_files = (u.environment_files.iter())
        .map(|(f, _)| f.clone())
        .filter(|f| f.is_file())
        .collect();
    let env = match environment(u) {
        Ok(env) => env,
        Err(why) => {
            note(&mut c, why.to_string());
            BTreeMap::new()
        }
    };
    c.env = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let Some((program, _)) = u.exec_start.first() else {
        note(&mut c, "it has no ExecStart".into());
        return c;
    };
    c.kind = Kind::of_command(program);
    if c.kind.is_none() {
        let why = format!("its ExecStart runs {program}, not a program certrenewd follows");
        note(&mut c, why);
    }
    let host = |p: &str| Ok(Some(PathBuf::from(p)));
    for (_, argv) in &u.exec_start {
        let argv = expand(argv, &env);
        for (flag, path) in paths_in(argv.get(1..).unwrap_or_default()) {
            file_setting(&mut c, &flag, &path, &host);
        }
        c.settings.push(argv);
    }
    if c.kind == Some(Kind::Etcd) {
        // etcd takes every flag from ETCD_<FLAG> as well: kubespray's etcd.env holds them all.
        for (name, value) in &env {
            let Some(flag) = name.strip_prefix("ETCD_") else {
                continue;
            };
            let flag = flag.to_lowercase().replace('_', "-");
            if value.starts_with('/') && (flag.ends_with("-file") || flag == "config-file") {
                file_setting(&mut c, &flag, value, &host);
            }
        }
    }
    c
}

/// A flag naming a file: read it (with what a kubeconfig or etcd's config file names).
fn file_setting(c: &mut Component, flag: &str, path: &str, host: &super::HostPath) {
    if flag == "config-file" && c.kind == Some(Kind::Etcd) {
        return etcd_config(c, Path::new(path));
    }
    if flag == "config" && c.kind == Some(Kind::Kubelet) {
        return kubelet_config(c, Path::new(path));
    }
    // kubelet reads its bootstrap kubeconfig only while it has no kubeconfig of its own;
    // kubeadm removes it once kubelet has joined.
    if flag == "bootstrap-kubeconfig" && !Path::new(path).exists() {
        return;
    }
    if flag == "config" || flag == "config-file" {
        let why = format!("--{flag}={path}: certrenewd does not read that file's settings");
        return note(c, why);
    }
    if flag.ends_with("kubeconfig") {
        kubeconfig_files(c, host, path, Path::new(path));
    }
    c.files.push((flag.to_string(), PathBuf::from(path)));
    c.reads.insert(PathBuf::from(path));
}

/// kubelet's `--config` file (a KubeletConfiguration, YAML): every `…File:` setting in it
/// (`authentication.x509.clientCAFile`, `tlsCertFile`, `tlsPrivateKeyFile`). Without
/// `tlsCertFile` kubelet serves `kubelet.crt` and `kubelet.key` of its `certDirectory`
/// (`/var/lib/kubelet/pki` by default, or `--cert-dir`), made by itself, or with
/// `serverTLSBootstrap` its `kubelet-server-current.pem` there.
fn kubelet_config(c: &mut Component, file: &Path) {
    let Some(text) = config_text(c, "config", file) else {
        return;
    };
    // Where it listens is read from it again when a client pair is presented to it.
    c.files.push(("config".to_string(), file.to_path_buf()));
    let value = |key: &str| {
        let found = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'));
        found.map(|v| v.trim().trim_matches(['"', '\'']).to_string())
    };
    for line in text.lines() {
        let Some((key, v)) = line.trim().split_once(':') else {
            continue;
        };
        let v = v.trim().trim_matches(['"', '\'']);
        if key.ends_with("File") && v.starts_with('/') {
            c.files.push((key.to_string(), PathBuf::from(v)));
            c.reads.insert(PathBuf::from(v));
        }
    }
    if value("tlsCertFile").is_none() {
        let flag_dir = c
            .files
            .iter()
            .find(|(f, _)| f == "cert-dir")
            .map(|(_, p)| p.clone());
        let dir = (value("certDirectory").map(PathBuf::from))
            .or(flag_dir)
            .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/pki"));
        let served: &[&str] = match value("serverTLSBootstrap").as_deref() {
            Some("true") => &["kubelet-server-current.pem"],
            _ => &["kubelet.crt", "kubelet.key"],
        };
        for f in served {
            c.reads.insert(dir.join(f));
        }
    }
}

/// The settings file `--flag` names, as text, and read by the component; unreadable, its
/// files are not all known.
fn config_text(c: &mut Component, flag: &str, file: &Path) -> Option<String> {
    let text = crate::fsutil::read_regular(file, MAX_FILE, crate::fsutil::Follow::Yes)
        .map_err(|e| e.to_string())
        .and_then(|d| String::from_utf8(d).map_err(|e| e.to_string()));
    match text {
        Ok(text) => {
            c.reads.insert(file.to_path_buf());
            Some(text)
        }
        Err(e) => {
            note(
                c,
                format!("cannot read its --{flag} {}: {e}", file.display()),
            );
            None
        }
    }
}

/// etcd's YAML config file: every `*-file:` setting in it (nested under
/// `client-transport-security` and `peer-transport-security` as etcd writes them).
fn etcd_config(c: &mut Component, file: &Path) {
    let Some(text) = config_text(c, "config-file", file) else {
        return;
    };
    for line in text.lines() {
        let Some((key, _)) = line.trim().split_once(':') else {
            continue;
        };
        if key.ends_with("-file")
            && let Some(v) = setting(line, key.trim_start_matches("- "), true)
            && v.starts_with('/')
        {
            c.reads.insert(PathBuf::from(v));
        }
    }
}

/// The unit's environment as its process gets it: `Environment=` first, then each
/// `EnvironmentFile=` in order, a later assignment winning.
fn environment(u: &UnitSettings) -> anyhow::Result<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    for a in &u.environment {
        if let Some((k, v)) = a.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    for (file, optional) in &u.environment_files {
        match crate::fsutil::read_regular(file, MAX_FILE, crate::fsutil::Follow::Yes) {
            Ok(data) => env.extend(env_file(&String::from_utf8_lossy(&data))),
            Err(_) if *optional && !file.exists() => {}
            Err(e) => {
                anyhow::bail!("cannot read its EnvironmentFile {}: {e}", file.display());
            }
        }
    }
    Ok(env)
}

/// `NAME=value` lines of an environment file as systemd reads them: `#` and `;` comments,
/// `export ` ignored, a value in single or double quotes taken whole.
fn env_file(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = match (v.chars().next(), v.chars().last()) {
            (Some(q @ ('"' | '\'')), Some(e)) if q == e && v.len() >= 2 => &v[1..v.len() - 1],
            _ => v,
        };
        out.push((k.trim().to_string(), v.to_string()));
    }
    out
}

/// `argv` with the variables put in as systemd does for `ExecStart`: a word that is only
/// `$NAME` becomes the value's words; `${NAME}` anywhere becomes the value, in one word. An
/// unset variable is empty.
fn expand(argv: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for word in argv {
        if let Some(name) = word.strip_prefix('$').filter(|n| is_name(n)) {
            let value = env.get(name).map(String::as_str).unwrap_or_default();
            out.extend(value.split_whitespace().map(str::to_string));
            continue;
        }
        let mut w = word.clone();
        while let Some(start) = w.find("${") {
            let Some(len) = w[start..].find('}') else {
                break;
            };
            let name = &w[start + 2..start + len];
            let value = env.get(name).cloned().unwrap_or_default();
            w.replace_range(start..start + len + 1, &value);
        }
        out.push(w);
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
