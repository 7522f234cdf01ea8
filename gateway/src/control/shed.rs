//! Rules put in force at run time (`kubegate shed`, `kubegate unshed`): what a rule must be
//! to go in (it rejects, it is named, it ends), and `terminate.shed_state_file`, where they
//! are written at each change and read back at start-up, so a restarted kubegate keeps them —
//! through an apiserver outage too — until they expire. `drain.rs` says how the CLI reaches
//! the endpoint.

use crate::state::{Gateway, MAX_SHED_RULES};
use kubegate_config::DispatchRule;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a rule put in force without `expires` lasts.
pub const DEFAULT_LASTS: Duration = Duration::from_secs(3600);
/// The latest a rule may end: a lever for an incident, not a standing policy (that belongs
/// in the file).
pub const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);
/// How far ahead of this gateway's clock the caller's may run (`kubegate shed --for 7d`
/// from a machine a little ahead).
const SKEW: Duration = Duration::from_secs(300);

/// Whether `rule` may be in force at run time by `now` (its default expiry set): a name to
/// remove it by (a DNS label: it is shown on terminals and pages), a sender named (a shed
/// turns a client away; the reserve is defined by who sends), a rejection only (the file's
/// rules stay the floor), an end within [`LONGEST`].
fn check(rule: &mut DispatchRule, now: SystemTime) -> Result<(), String> {
    let name = rule.name.as_deref().unwrap_or_default();
    let label = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if name.is_empty() || name.len() > 63 || !label || name.starts_with('-') {
        return Err("its name is 1 to 63 lower-case letters, digits and -, to remove it by".into());
    }
    let m = &rule.matches;
    if m.users.is_empty() && m.groups.is_empty() && m.service_accounts.is_empty() {
        return Err(
            "a rule put in force at run time names who it turns away: users, groups or service accounts".into(),
        );
    }
    if rule.reject.is_none() || rule.limit.is_some() || !rule.backends.is_empty() {
        return Err(
            "a rule put in force at run time only rejects (reject, no limit or backends): the file's rules stay the floor".into(),
        );
    }
    let expires = *rule.expires.get_or_insert(now + DEFAULT_LASTS);
    if expires <= now || expires > now + LONGEST + SKEW {
        return Err(format!(
            "expires must be in the next {}",
            humantime::format_duration(LONGEST)
        ));
    }
    match kubegate_config::validate_dispatch(std::slice::from_ref(rule), None)
        .into_iter()
        .next()
    {
        Some((at, why)) => Err(format!("{}: {why}", at.trim_start_matches("dispatch[0]."))),
        None => Ok(()),
    }
}

/// Puts `rule` in force, written to the state file before another change can be made; the
/// rules now, or why not.
pub fn put(gw: &Gateway, mut rule: DispatchRule) -> Result<Vec<DispatchRule>, String> {
    let now = SystemTime::now();
    check(&mut rule, now)?;
    let rules = gw.shed().put(rule, now, |rules| save(gw, rules))?;
    Ok(rules.to_vec())
}

/// Removes the rule named `name`; the rules now, or `None` if none was so named.
pub fn remove(gw: &Gateway, name: &str) -> Option<Vec<DispatchRule>> {
    let rules = gw
        .shed()
        .remove(name, SystemTime::now(), |rules| save(gw, rules))?;
    Some(rules.to_vec())
}

/// Reads the rules back from `terminate.shed_state_file`, if set and readable: at start-up.
pub fn restore(gw: &Gateway) {
    let Some(path) = gw.config().load().terminate.shed_state_file.clone() else {
        return;
    };
    let rules = match read_state(&path) {
        Ok(Some(rules)) => rules,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "run-time rules: the state file cannot be read; starting without them");
            return;
        }
    };
    // Read back as they were put: each checked again (a file edited by hand, or written by
    // another version), what fails said and left out.
    let now = SystemTime::now();
    let mut kept = Vec::new();
    for mut rule in rules {
        let name = rule.name.clone().unwrap_or_default();
        match check(&mut rule, now) {
            Ok(()) => kept.push(rule),
            Err(why) => {
                tracing::warn!(rule = %name.escape_debug(), why = %why, file = %path.display(), "run-time rule not read back")
            }
        }
    }
    if kept.len() > MAX_SHED_RULES {
        tracing::warn!(
            rules = kept.len(),
            kept = MAX_SHED_RULES,
            "run-time rules: more than the most in force; the newest kept"
        );
    }
    gw.shed().restore(kept, now);
    let kept = gw.shed().rules();
    tracing::info!(rules = kept.len(), file = %path.display(), "run-time rules read back from the state file");
}

fn read_state(path: &Path) -> Result<Option<Vec<DispatchRule>>, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Writes the rules whole: a temporary file made new (never one already there, nor what a
/// link there points at), synced, then renamed over the old one, so a crash mid-write leaves
/// the previous rules. A failure is logged; the rules stay in force.
fn save(gw: &Gateway, rules: &[DispatchRule]) {
    let Some(path) = gw.config().load().terminate.shed_state_file.clone() else {
        return;
    };
    let text = serde_json::to_vec_pretty(rules).expect("serializable");
    let tmp = path.with_extension("tmp");
    let written = (|| {
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), error = %e, "run-time rules: the state file cannot be written; they are in force until kubegate restarts");
    }
}
