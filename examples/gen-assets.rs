//! Writes the man page certrenewd(8) and shell completions, generated from the clap
//! definitions, into the directory given (used by packaging: `target/assets`).

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/assets".into()),
    );
    fs::create_dir_all(&dir)?;
    let cmd = certrenewd::cli::Cli::command();

    // One page per subcommand (certrenewd-renew.8, ...), then the main page with more.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("certrenewd-{}", sub.get_name());
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let sub = sub
            .clone()
            .name(leaked)
            .bin_name(format!("certrenewd {}", sub.get_name()));
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).section("8").render(&mut page)?;
        fs::write(dir.join(format!("{name}.8")), page)?;
    }
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone()).section("8");
    man.render(&mut page)?;
    // clap_mangen renders the commands; the configuration reference and the rest follow.
    page.write_all(EXTRA.as_bytes())?;
    let config = include_str!("../config/certrenewd.toml");
    writeln!(page, ".SH \"DEFAULT CONFIGURATION\"\n.nf")?;
    for line in config.lines() {
        // Escape roff: leading dots/quotes and backslashes.
        let line = line.replace('\\', "\\e");
        let line = if line.starts_with('.') || line.starts_with('\'') {
            format!("\\&{line}")
        } else {
            line
        };
        writeln!(page, "{line}")?;
    }
    writeln!(page, ".fi")?;
    fs::write(dir.join("certrenewd.8"), page)?;

    for (shell, name) in [
        (clap_complete::Shell::Bash, "certrenewd.bash"),
        (clap_complete::Shell::Zsh, "_certrenewd"),
        (clap_complete::Shell::Fish, "certrenewd.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "certrenewd", &mut out);
        fs::write(dir.join(name), out)?;
    }
    println!("wrote {}", dir.display());
    Ok(())
}

const EXTRA: &str = r#".SH CONFIGURATION
The configuration file is TOML, read from \fI/etc/certrenewd/certrenewd.toml\fR (or
\fB$CERTRENEWD_CONFIG\fR, or \fB\-\-config\fR). Every key is optional; unknown keys are
errors, and every mistake is reported at once with its file, line and key (exit status 2).
.TP
\fBschedule\fR = "0 0 0 * * *"
Cron expression with a seconds field, local time. It is waited for on the wall clock: a
clock step, a suspend or a paused VM does not shift it, and a pass never runs twice for one
scheduled time. A time in the spring\-forward gap runs at the end of the gap; a fixed time
in the repeated autumn hour runs once.
.TP
\fBrun_on_start\fR = true
Also run a pass when the daemon starts. Whatever it says, an install that a crash
interrupted is repaired before READY=1 (see BOOT ORDERING), and the restarts it owes are
done by a pass at once.
.TP
\fBrenew_before_days\fR = 15
The renewal window: leaf certificates expiring within it (or expired) are renewed.
.TP
\fBca_warning_days\fR = 180
CA certificates expiring within this many days are reported (alarm 500.200); CAs are never reissued.
.TP
\fBstate_dir\fR = "/var/lib/certrenewd"
Alarm state, pending record, lock.
.TP
\fBbackup_dir\fR = "<state_dir>/backup", \fBbackup_keep\fR = 10, \fBbackup_max_age_days\fR = 365
Backups of replaced certificates and keys, and their retention (the newest backup of each file is always kept).
.TP
\fBbus\fR = "system"
"system" or "user": which systemd manager restarts units.
.TP
\fBrestart_mode\fR = "try\-restart", \fBrestart_timeout_secs\fR = 90, \fBrestart_settle_secs\fR = 5
How units are restarted, and how long they may take to come back active. A restarted unit
counts as back only once it is active in a new run (a new InvocationID) and has stayed
active in that run for the settle period, which is waited for in full even past the
timeout: a service that exits a second after it started has not come back.
.TP
\fBrollback_on_failure\fR = true
Restore the previous certificate and key when a unit does not come back with the new one.
.TP
\fBrotate_keys\fR = false, \fBvalidity_days\fR
New keys (same type, size and file format) with every renewal; lifetime override.
.TP
\fBretry_interval_secs\fR = 3600, \fBlock_timeout_secs\fR = 60
Retry after a failed pass; wait for another certrenewd holding the lock.
.TP
\fBalarm_command\fR = ["/path", "args"...], \fBalarm_command_timeout_secs\fR = 30
Run on every alarm raise and clear with ALARM_ID, ALARM_STATE, ALARM_SEVERITY, ALARM_ENTITY, ALARM_REASON, ALARM_TEXT in the environment.
.TP
\fBinhibit_paths\fR = [], \fBinhibit_max_age_hours\fR = 72
Files whose existence defers passes (an upgrade in progress), and when to warn about an old inhibit.
.TP
\fBmetrics_file\fR
Prometheus textfile-collector output written after every pass.
.TP
\fBmanifests_dir\fR = "/etc/kubernetes/manifests", \fBstatic_pod_wait_secs\fR = 20
kubelet's static pod directory, and how long a manifest stays out of it when its pod is restarted.
.TP
\fB[[watch]]\fR \fBpath\fR, \fBunits\fR, \fBverify_endpoints\fR
A directory walked recursively, the units restarted when a certificate below it is renewed, and TLS endpoints (host:port) that must then serve the renewed certificate.
.TP
\fB[[watch]]\fR \fBoptional\fR = false
A watched directory that is missing or unreadable is an error of the pass (250.003), so a mistyped path never leaves certificates unwatched. With optional = true a missing one is not (the built-in /etc/etcd and /etc/kubernetes/pki watches are optional; a node with none of them is an error).
.TP
\fB[[watch]]\fR \fBkubeconfigs\fR, \fBstatic_pods\fR
kubeconfig files whose embedded client certificates are renewed in place with the watch, and static pods restarted (manifest moved out and back) after it renews. For /etc/kubernetes/pki they default to kubeadm's admin, super-admin, controller-manager and scheduler.conf, and to the etcd, kube-apiserver, kube-controller-manager and kube-scheduler pods, those that exist.
.SH ALARMS
.TP
\fB250.003\fR major, host=<hostname>
"Kubernetes certificates renewal failed", or "Kubernetes certificates have been renewed but not all services have been updated".
.TP
\fB500.200\fR major, host=<hostname>.certificate=<path>
Certificate expiring soon (not renewed).
.TP
\fB500.210\fR critical, host=<hostname>.certificate=<path>
Certificate expired (not renewed).
.PP
Each raise and clear is one journald entry with ALARM_ID, ALARM_STATE, ALARM_SEVERITY,
ALARM_ENTITY, ALARM_REASON and a MESSAGE_ID explained by \fBjournalctl \-x\fR.
.SH "BOOT ORDERING"
A crash (or power loss) between the renames of a certificate and its key leaves the pair
mismatched until it is repaired from \fIpending.json\fR. \fBcertrenewd run\fR finishes or
rolls back such an install, and puts back static pod manifests a crash left out, before it
sends READY=1, whatever \fBrun_on_start\fR says. The shipped unit is Type=notify and ordered
\fBBefore=\fRetcd.service kubelet.service kube\-apiserver.service
kube\-controller\-manager.service kube\-scheduler.service kube\-proxy.service, so at boot
these start only after READY=1, on whole pairs. Other units that read the watched
certificates are ordered the same way with a drop-in (\fBsystemctl edit certrenewd\fR:
[Unit] Before=my\-service.service). Ordering does not make them depend on certrenewd: if it
fails to start, they still start.
.SH EXIT STATUS
0 success; 1 the command ran but something failed; 2 bad usage or configuration.
.SH FILES
\fI/etc/certrenewd/certrenewd.toml\fR, \fI/var/lib/certrenewd/\fR (alarms.json, pending.json, lock, backup/),
\fI/usr/lib/systemd/system/certrenewd.service\fR, \fI/usr/lib/systemd/catalog/certrenewd.catalog\fR.
.SH "SEE ALSO"
\fBsystemctl\fR(1), \fBjournalctl\fR(1), \fBkubeadm\fR(1)
"#;
