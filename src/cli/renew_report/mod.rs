//! What a `renew` pass did, as it stands at the end: each certificate renewed, rolled back,
//! failed or held back (and why); each unit and static pod restarted, not restarted or not
//! active (and why, and how it did after a roll-back); each endpoint checked; a closing
//! summary. One model for the text and for `renew --output json`.

use serde::Serialize;

use super::check::SkippedReport;

mod dry_run;
mod from_pass;
mod summary;
mod text;

pub use dry_run::dry_run;
pub use from_pass::report;
pub use text::{by_hand, render_text};

/// The document of `renew --output json` (its shape is in docs/interface.md).
#[derive(Debug, Serialize)]
pub struct RenewReport {
    /// A `--dry-run`: nothing was changed; the states say what the pass would do
    /// (`would_renew`, `would_fail`, `would_restart`) and `success` what it would exit with.
    pub dry_run: bool,
    /// Set when a maintenance inhibit deferred the pass: what inhibits it.
    pub deferred: Option<String>,
    /// Each certificate the pass renewed, tried to renew, or had to and could not.
    pub certificates: Vec<CertOutcome>,
    /// Each unit the pass had to restart.
    pub units: Vec<ServiceOutcome>,
    /// Each static pod the pass had to restart.
    pub static_pods: Vec<ServiceOutcome>,
    /// Each `verify_endpoints` entry checked.
    pub endpoints: Vec<EndpointOutcome>,
    /// Each watch's `post_renew_command` the pass ran (or, `--no-restart` and dry run, did
    /// not run).
    pub commands: Vec<CommandOutcome>,
    /// Each file holding a copy of a renewed CA (a bundle, a chain file, the same CA under
    /// another name, a kubeconfig's `certificate-authority-data`) that the pass replaced.
    pub copies: Vec<CopyOutcome>,
    /// Files that could not be read: each fails the pass.
    pub errors: Vec<SkippedReport>,
    /// Of those, watched directories themselves (missing or unreadable).
    #[serde(skip)]
    pub watched_dirs: usize,
    /// The closing line of the text output.
    pub summary: String,
    /// Every due certificate renewed, and every affected service back on it (exit 0).
    pub success: bool,
}

/// Where a certificate stands after the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CertState {
    /// The new certificate is installed (and its services are back on it).
    Renewed,
    /// It was renewed, a service did not come back on it, and the previous pair is back.
    RolledBack,
    /// Nothing was written: the reason says why.
    Failed,
    /// Not tried: the back-off holds it after earlier roll-backs.
    HeldBack,
    /// Named by `renew PATH` and not due: left alone; the reason says until when it is good
    /// and how to renew it now.
    NotDue,
    /// A dry run: the pass would renew it (the reason says why: due, expired, forced).
    WouldRenew,
    /// A dry run: the pass would have to renew it and could not (the reason says why).
    WouldFail,
}

/// One certificate's final state.
#[derive(Debug, Serialize)]
pub struct CertOutcome {
    /// The certificate file, or the kubeconfig holding it.
    pub path: String,
    /// The kubeconfig user whose certificate it is; left out for a certificate file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its place in the file, from 1, when the file holds more than one certificate (a
    /// bundle's rows share the path); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// renewed, rolled_back, failed, held_back, not_due; would_renew, would_fail (dry run).
    pub state: CertState,
    /// Why, for every state but a plain `renewed`.
    pub reason: Option<String>,
    /// The serial of the certificate installed (renewed only).
    pub serial: Option<String>,
    /// RFC 3339 UTC, the notAfter of the certificate installed (renewed only).
    pub not_after: Option<String>,
    /// Whether a new key was installed with it (renewed only).
    pub new_key: bool,
    /// The lifetime it was renewed with and why, e.g. "365 days, the old certificate's"
    /// (renewed and rolled back only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<String>,
    /// Names added to its subjectAltName (`add_missing_names`), as `IP:10.0.0.9` or
    /// `DNS:etcd-0` (renewed and would_renew only); left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names_added: Vec<String>,
    /// After a roll-back: the attempts so far and when the next is made.
    pub backoff: Option<String>,
    /// Static pods and units found to read it that no watch restarts for it (renewed and
    /// would_renew only): certrenewd never restarts them; left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_read_by: Vec<String>,
    /// How people see it: the path, and the user.
    #[serde(skip)]
    label: String,
}

/// Where a unit or static pod stands after the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceState {
    /// Restarted and active again (a unit: in a new run, for the settle period).
    Restarted,
    /// Not restarted: it reads its renewed files again by itself, and was shown to serve
    /// them where its clients dial it, verified as they verify it.
    Reloaded,
    /// Not restarted: it served its renewed files and its clients would have refused
    /// them; they were put back, and it took the previous ones in the same way.
    Refused,
    /// Left as it was: not running under try-restart, not on this node, or `--no-restart`.
    NotRestarted,
    /// Not restarted: the restart lock or the quorum gate held it back; owed to the next
    /// pass.
    HeldBack,
    /// Did not come back: the reason says what systemd or the manifest move said.
    Failed,
    /// A dry run: the pass would restart it.
    WouldRestart,
    /// A dry run: the pass would install its renewed files at its turn and prove them in
    /// use instead of restarting it (restarting it if that cannot be shown).
    WouldReload,
}

/// One unit's or static pod's final state.
#[derive(Debug, Serialize)]
pub struct ServiceOutcome {
    /// The unit (`etcd.service`) or static pod (`kube-apiserver`).
    pub name: String,
    /// restarted, not_restarted, failed.
    pub state: ServiceState,
    /// What happened, in systemd's terms.
    pub reason: String,
    /// After a roll-back put the previous certificates back: started again, and how.
    pub after_rollback: Option<AfterRollback>,
}

/// A service started again on the previous certificates.
#[derive(Debug, Serialize)]
pub struct AfterRollback {
    /// Active again.
    pub active: bool,
    /// What happened.
    pub reason: String,
}

/// Where a watch's `post_renew_command` stands after the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandState {
    /// It exited with status 0.
    Ran,
    /// It could not start, exited non-zero or ran past `restart_timeout_secs`: owed to the
    /// next pass, alarmed (250.003).
    Failed,
    /// `--no-restart`: left for the operator.
    NotRun,
    /// A dry run: the pass would run it.
    WouldRun,
}

/// One watch's `post_renew_command`.
#[derive(Debug, Serialize)]
pub struct CommandOutcome {
    /// The watch's path.
    pub watch: String,
    /// The command as configured (argv).
    pub command: Vec<String>,
    /// ran, failed, not_run, would_run.
    pub state: CommandState,
    /// What happened: its exit status, the end of its stderr when it failed.
    pub reason: String,
}

/// One file holding copies of a renewed CA.
#[derive(Debug, Serialize)]
pub struct CopyOutcome {
    /// The file.
    pub path: String,
    /// The CA files whose new certificate replaces the copies in it.
    pub cas: Vec<String>,
    /// replaced, failed, would_replace, rolled_back.
    pub state: CopyState,
    /// Why it failed (the pass then fails: the next pass tries again).
    pub reason: Option<String>,
}

/// Where a copy stands after the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyState {
    /// The file now holds the renewed CA.
    Replaced,
    /// Not replaced: the old copy stays (it verifies the same certificates until it ends).
    Failed,
    /// A dry run: the pass would replace it.
    WouldReplace,
    /// Replaced, then put back by a roll-back: it holds the CA it held before the pass.
    RolledBack,
}

/// The report's lines for the copies of renewed CAs.
pub(super) fn copies(r: &crate::pass::PassReport, dry_run: bool) -> Vec<CopyOutcome> {
    let shown = |p: &std::path::PathBuf| p.display().to_string();
    let done = r.copies.replaced.iter().map(|c| CopyOutcome {
        path: shown(&c.path),
        cas: c.cas.iter().map(shown).collect(),
        state: match dry_run {
            true => CopyState::WouldReplace,
            false if crate::renew::rolled_back(&c.path, &r.restarts.restored) => {
                CopyState::RolledBack
            }
            false => CopyState::Replaced,
        },
        reason: None,
    });
    let failed = r.copies.failed.iter().map(|(path, why)| CopyOutcome {
        path: shown(path),
        cas: Vec::new(),
        state: CopyState::Failed,
        reason: Some(why.clone()),
    });
    let mut out: Vec<CopyOutcome> = done.chain(failed).collect();
    // Any other file a roll-back put back (a copy an earlier pass replaced) is said too.
    let said = |p: &std::path::PathBuf| {
        let same = |q: &std::path::Path| crate::renew::rolled_back(q, std::slice::from_ref(p));
        (r.inventory.certs.iter()).any(|c| same(&c.path))
            || (r.copies.replaced.iter()).any(|c| same(&c.path))
    };
    for p in r.restarts.restored.iter().filter(|p| !said(p)) {
        out.push(CopyOutcome {
            path: shown(p),
            cas: Vec::new(),
            state: CopyState::RolledBack,
            reason: Some("put back as it was before its renewal".into()),
        });
    }
    out
}

/// A served-certificate check.
#[derive(Debug, Serialize)]
pub struct EndpointOutcome {
    /// `host:port`.
    pub endpoint: String,
    /// It serves a certificate now on disk.
    pub ok: bool,
    /// What was served.
    pub reason: String,
}

/// The lifetime a renewal of `item` gets, in words: the one the plan chose and why, and,
/// when the signer's notAfter cuts it (`got` is shorter), how long it really is, which CA
/// cut it and what becomes of that CA, so that "730 days" is never printed beside a
/// certificate that ends with its CA 400 days out. `got` is the renewed certificate's
/// notAfter - notBefore, or what a dry run would give it.
pub(super) fn lifetime_words(
    settings: &crate::config::Settings,
    r: &crate::pass::PassReport,
    item: &crate::plan::PlanItem,
    got: Option<time::Duration>,
) -> Option<String> {
    let lifetime = item.lifetime?;
    let c = &r.inventory.certs[item.cert];
    let (Some(got), Some(ca)) = (got, r.inventory.issuer_of(c)) else {
        return Some(lifetime.to_string());
    };
    if got >= lifetime.span {
        return Some(lifetime.to_string());
    }
    let ca_item = r
        .plan
        .items
        .iter()
        .find(|i| std::ptr::eq(&r.inventory.certs[i.cert], ca));
    let leaf = c.path.display();
    let again =
        format!("then `certrenewd renew --force {leaf}` gives this certificate its full lifetime");
    let fate = match ca_item {
        _ if !settings.renew_cas => format!(
            "CA renewal is off (renew_cas = false): renew the CA with your PKI tool, {again}"
        ),
        Some(i) if !i.renewable => format!(
            "the CA cannot be renewed here ({}): renew it where its key is, {again}",
            i.reason.as_deref().unwrap_or("its key is not usable here")
        ),
        Some(i) => match i.renews_on {
            Some(on) => format!(
                "the CA is renewed with its own key on {}, or now with `certrenewd renew --force {}`; {again}",
                crate::timefmt::utc_minute(on),
                ca.path.display()
            ),
            None => format!(
                "renew the CA with `certrenewd renew --force {}`; {again}",
                ca.path.display()
            ),
        },
        None => format!("renew the CA, {again}"),
    };
    Some(format!(
        "{lifetime}; cut to {} days by CA {}, which ends on {}: {fate}",
        got.whole_days(),
        ca.path.display(),
        crate::timefmt::utc_minute(ca.facts.not_after)
    ))
}

/// What a dry run's renewal of `item` would span: its lifetime from now, cut by its CA's
/// notAfter unless the pass renews that CA too (its re-issue is not cut).
pub(super) fn would_span(
    r: &crate::pass::PassReport,
    item: &crate::plan::PlanItem,
) -> Option<time::Duration> {
    let lifetime = item.lifetime?;
    let c = &r.inventory.certs[item.cert];
    let ca = r.inventory.issuer_of(c)?;
    let ca_renewed = r
        .plan
        .items
        .iter()
        .any(|i| i.renews() && std::ptr::eq(&r.inventory.certs[i.cert], ca));
    if ca_renewed {
        return None;
    }
    let (from, to) = crate::renew::reissue::validity(lifetime.span, ca.facts.not_after, r.plan.now);
    Some(to - from)
}
