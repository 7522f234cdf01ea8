//! Rules put in force at run time (`kubegate shed`, `kubegate unshed`): what a rule must be
//! to go in (it rejects, it is named, it ends), and `terminate.shed_state_file`, where they
//! are written at each change and read back at start-up, so a restarted kubegate keeps them —
//! through an apiserver outage too — until they expire. `drain.rs` says how the CLI reaches
//! the endpoint.

use crate::state::Gateway;
use kubegate_config::DispatchRule;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a rule put in force without `expires` lasts.
pub const DEFAULT_LASTS: Duration = Duration::from_secs(3600);
/// The latest a rule may end: a lever for an incident, not a standing policy (that belongs
/// in the file).
pub const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);

/// Puts `rule` in force (its default expiry set), written to the state file; the rules now,
/// or why not.
pub fn put(gw: &Gateway, mut rule: DispatchRule) -> Result<Vec<DispatchRule>, String> {
    let now = SystemTime::now();
    let Some(name) = rule.name.as_deref() else {
        return Err("a rule put in force at run time needs a name (to remove it by)".into());
    };
    if name.is_empty() || name.len() > 63 {
        return Err("its name is 1 to 63 characters".into());
    }
    if rule.reject.is_none() || rule.limit.is_some() || !rule.backends.is_empty() {
        return Err(
            "a rule put in force at run time only rejects (reject, no limit or backends): the file's rules stay the floor".into(),
        );
    }
    let expires = *rule.expires.get_or_insert(now + DEFAULT_LASTS);
    if expires <= now || expires > now + LONGEST {
        return Err(format!(
            "expires must be in the next {}",
            humantime::format_duration(LONGEST)
        ));
    }
    if let Some((at, why)) = kubegate_config::validate_dispatch(std::slice::from_ref(&rule), None)
        .into_iter()
        .next()
    {
        return Err(format!("{}: {why}", at.trim_start_matches("dispatch[0].")));
    }
    let rules = gw.shed().put(rule, now)?;
    save(gw, &rules);
    Ok(rules.to_vec())
}

/// Removes the rule named `name`; the rules now, or `None` if none was so named.
pub fn remove(gw: &Gateway, name: &str) -> Option<Vec<DispatchRule>> {
    let rules = gw.shed().remove(name, SystemTime::now())?;
    save(gw, &rules);
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
    gw.shed().restore(rules, SystemTime::now());
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

/// Writes the rules whole (a temporary file renamed over the old one, so a crash mid-write
/// leaves the previous ones); a failure is logged, the rules stay in force.
fn save(gw: &Gateway, rules: &[DispatchRule]) {
    let Some(path) = gw.config().load().terminate.shed_state_file.clone() else {
        return;
    };
    let text = serde_json::to_vec_pretty(rules).expect("serializable");
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), error = %e, "run-time rules: the state file cannot be written; they are in force until kubegate restarts");
    }
}
