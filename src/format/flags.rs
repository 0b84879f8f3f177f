//! Settings as the seeds' controllers write them for etcd and the Kubernetes components:
//! flags on a command line (a unit's `ExecStart`, a static pod's command list), `ETCD_*`
//! environment files and etcd's YAML config file. Text in, values out; nothing is read here.

/// The value of etcd's setting `key` in `text`, in any of the forms it is written in:
/// `--key=value` or `--key value` (unit flags, a manifest's command list), `ETCD_KEY=value`
/// (environment files) or, when `yaml`, `key: value` (etcd's YAML config). Commented lines
/// and values still holding a shell variable are passed over.
pub fn setting(text: &str, key: &str, yaml: bool) -> Option<String> {
    let env = format!("ETCD_{}", key.to_uppercase().replace('-', "_"));
    let flag = format!("--{key}");
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let line = line.trim_start_matches("- ").trim_start_matches("export ");
        let found = if let Some(rest) = line.strip_prefix(&env) {
            rest.strip_prefix('=')
        } else if let Some(rest) = line.strip_prefix(&format!("{key}:")).filter(|_| yaml) {
            Some(rest)
        } else {
            flag_value(line, &flag)
        };
        let Some(v) = found else { continue };
        let v = v
            .trim()
            .trim_end_matches('\\')
            .trim()
            .trim_matches(['"', '\''])
            .trim();
        if !v.is_empty() && !v.contains('$') {
            return Some(v.to_string());
        }
    }
    None
}

/// The value after `flag` on a command line: `--flag=value` or `--flag value`.
pub fn flag_value<'a>(line: &'a str, flag: &str) -> Option<&'a str> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        let w = w.trim_matches(['"', '\'']);
        if let Some(v) = w.strip_prefix(flag) {
            match v.strip_prefix('=') {
                Some(v) => return Some(v),
                None if v.is_empty() => return words.next(),
                None => {} // a longer flag, e.g. --initial-cluster-state
            }
        }
    }
    None
}

pub fn urls(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|u| u.contains("://"))
        .map(str::to_string)
        .collect()
}

/// `host:port` of a URL such as `https://10.0.1.10:2380` or `https://[fd00::1]:2379/`.
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}
