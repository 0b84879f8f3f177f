//! TOML -> `Settings`: every top-level key read over the defaults, every problem collected
//! (with its line and key) before failing.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::de::DeTable;

use super::error::ConfigError;
use super::reader::{Reader, Value};
use super::{Bus, RestartPolicy, Settings, parse_cron};

const TOP_KEYS: &[&str] = &[
    "schedule",
    "run_on_start",
    "renew_before_days",
    "ca_warning_days",
    "renew_cas",
    "ca_renew_before_days",
    "state_dir",
    "backup_dir",
    "backup_keep",
    "backup_max_age_days",
    "bus",
    "watch",
    "rotate_keys",
    "rollback_on_failure",
    "validity_days",
    "add_missing_names",
    "retry_interval_secs",
    "restart_mode",
    "restart_timeout_secs",
    "restart_settle_secs",
    "lock_timeout_secs",
    "alarm_command",
    "alarm_command_timeout_secs",
    "manifests_dir",
    "static_pod_wait_secs",
    "randomized_delay_secs",
    "inhibit_paths",
    "inhibit_max_age_hours",
    "metrics_file",
    "coordination",
];
pub(super) fn parse(text: &str, file: Option<&Path>) -> Result<Settings, ConfigError> {
    let fail = |problems| ConfigError::new(file, problems);
    let mut r = Reader::new(text);
    let doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            r.problem(e.span(), "", format!("not valid TOML: {}", e.message()));
            return Err(fail(r.problems));
        }
    };
    let doc = doc.get_ref();
    r.unknown_keys(doc, TOP_KEYS, "");

    let mut settings = Settings::defaults();
    settings.source = file.map(Path::to_path_buf);
    let mut backup_dir = None;
    for (key, v) in doc.iter() {
        let k = key.get_ref().as_ref();
        match k {
            "backup_dir" => backup_dir = r.abs_path(k, v),
            _ => setting(&mut r, &mut settings, k, v),
        }
    }
    settings.backup_dir = backup_dir.unwrap_or_else(|| settings.state_dir.join("backup"));
    // Whatever the order of the keys: the coordination reads etcd's manifest where the
    // restarts move it.
    settings.coordination.manifests = Some(settings.manifests_dir.clone());
    let window = settings.renew_before_days;
    let too_short = |days: u32| {
        format!(
            "{days} days is not longer than renew_before_days ({window}): every renewed certificate would be due at once"
        )
    };
    if let Some(days) = settings.validity_days
        && days <= window
    {
        let span = doc.get("validity_days").map(|v| v.span());
        r.problem(span, "validity_days", too_short(days));
    }
    for (i, w) in settings.watches.iter().enumerate() {
        if let Some(days) = w.validity_days
            && days <= window
        {
            let key = format!("watch[{}].validity_days", i + 1);
            let span = doc
                .get("watch")
                .and_then(|w| w.get_ref().as_array())
                .and_then(|tables| tables.get(i))
                .and_then(|t| t.get_ref().as_table())
                .and_then(|t| t.get("validity_days"))
                .map(|v| v.span());
            r.problem(span, &key, too_short(days));
        }
    }
    if r.problems.is_empty() {
        Ok(settings)
    } else {
        Err(fail(r.problems))
    }
}

/// Reads top-level key `k` (other than `backup_dir`) into `settings`.
fn setting(r: &mut Reader<'_>, settings: &mut Settings, k: &str, v: &Value<'_>) {
    match k {
        "schedule" => set(&mut settings.schedule, r.schedule(k, v)),
        "state_dir" => set(&mut settings.state_dir, r.abs_path(k, v)),
        "manifests_dir" => set(&mut settings.manifests_dir, r.abs_path(k, v)),
        "metrics_file" => settings.metrics_file = r.abs_path(k, v),
        "bus" => set(&mut settings.bus, r.bus(k, v)),
        "restart_mode" => set(&mut settings.restart_mode, r.restart_mode(k, v)),
        "inhibit_paths" => settings.inhibit_paths.extend(r.abs_paths(k, v)),
        "alarm_command" => set(
            &mut settings.alarm_command,
            r.command(
                k,
                v,
                "[\"/usr/local/bin/forward-alarm\", \"--site\", \"a\"]",
            )
            .map(Some),
        ),
        "watch" => set(&mut settings.watches, r.watches(k, v)),
        "coordination" => set(&mut settings.coordination, r.coordination(k, v)),
        _ => number_setting(r, settings, k, v),
    }
}

/// Reads a top-level switch, count or duration `k` into `settings`.
fn number_setting(r: &mut Reader<'_>, settings: &mut Settings, k: &str, v: &Value<'_>) {
    match k {
        "run_on_start" => set(&mut settings.run_on_start, r.boolean(k, v)),
        "rotate_keys" => set(&mut settings.rotate_keys, r.boolean(k, v)),
        "add_missing_names" => set(&mut settings.add_missing_names, r.boolean(k, v)),
        "rollback_on_failure" => set(&mut settings.rollback_on_failure, r.boolean(k, v)),
        "renew_before_days" => set(&mut settings.renew_before_days, r.count(k, v, 1..3651)),
        "ca_warning_days" => set(&mut settings.ca_warning_days, r.count(k, v, 1..3651)),
        "renew_cas" => set(&mut settings.renew_cas, r.boolean(k, v)),
        "ca_renew_before_days" => set(&mut settings.ca_renew_before_days, r.count(k, v, 1..3651)),
        "validity_days" => settings.validity_days = r.count(k, v, 1..36501),
        "backup_keep" => set(&mut settings.backup_keep, r.count(k, v, 1..100_001)),
        "backup_max_age_days" => set(&mut settings.backup_max_age_days, r.count(k, v, 1..36501)),
        "retry_interval_secs" => set(&mut settings.retry_interval, r.secs(k, v, 1..86_401)),
        "restart_timeout_secs" => set(&mut settings.restart_timeout, r.secs(k, v, 1..3_601)),
        "restart_settle_secs" => set(&mut settings.restart_settle, r.secs(k, v, 1..601)),
        "lock_timeout_secs" => set(&mut settings.lock_timeout, r.secs(k, v, 0..3_601)),
        "static_pod_wait_secs" => set(&mut settings.static_pod_wait, r.secs(k, v, 1..3_601)),
        "randomized_delay_secs" => set(&mut settings.randomized_delay, r.secs(k, v, 0..86_401)),
        "alarm_command_timeout_secs" => {
            set(&mut settings.alarm_command_timeout, r.secs(k, v, 1..3_601))
        }
        "inhibit_max_age_hours" => set(
            &mut settings.inhibit_max_age,
            r.integer(k, v, 1..87_601)
                .map(|h| Duration::from_secs(h * 3600)),
        ),
        _ => {} // reported by unknown_keys
    }
}

/// The values of particular settings.
impl Reader<'_> {
    pub(super) fn count(&mut self, k: &str, v: &Value<'_>, range: Range<u64>) -> Option<u32> {
        self.integer(k, v, range).map(|n| n as u32)
    }

    fn secs(&mut self, k: &str, v: &Value<'_>, range: Range<u64>) -> Option<Duration> {
        self.integer(k, v, range).map(Duration::from_secs)
    }

    fn schedule(&mut self, k: &str, v: &Value<'_>) -> Option<String> {
        let expr = self.string(k, v)?;
        match parse_cron(&expr) {
            Ok(_) => Some(expr),
            Err(why) => {
                self.problem(Some(v.span()), k, format!("{expr:?}: {why}"));
                None
            }
        }
    }

    fn bus(&mut self, k: &str, v: &Value<'_>) -> Option<Bus> {
        match self.string(k, v)?.as_str() {
            "system" => Some(Bus::System),
            "user" => Some(Bus::User),
            other => {
                let why = format!("{other:?} is not a bus: use \"system\" or \"user\"");
                self.problem(Some(v.span()), k, why);
                None
            }
        }
    }

    fn restart_mode(&mut self, k: &str, v: &Value<'_>) -> Option<RestartPolicy> {
        match self.string(k, v)?.as_str() {
            "try-restart" => Some(RestartPolicy::TryRestart),
            "restart" => Some(RestartPolicy::Restart),
            other => {
                let why = format!("{other:?}: use \"try-restart\" (default) or \"restart\"");
                self.problem(Some(v.span()), k, why);
                None
            }
        }
    }

    /// A command as an argv (no shell): `alarm_command`, a watch's `post_renew_command`.
    pub(super) fn command(&mut self, k: &str, v: &Value<'_>, example: &str) -> Option<Vec<String>> {
        let argv = self.strings(k, v)?;
        if argv.first().is_none_or(|p| !Path::new(p).is_absolute()) {
            self.problem(
                Some(v.span()),
                k,
                format!("must be a non-empty list whose first item is an absolute program path, e.g. {example}"),
            );
            return None;
        }
        Some(argv)
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}
