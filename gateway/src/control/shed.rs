//! Rules put in force at run time (`kubegate shed`, `kubegate unshed`): what a rule must be
//! to go in (it rejects, it is named, it ends), and `terminate.shed_state_file`, where they
//! — the gateway's own and those read from each cluster's object — are written at each
//! change and read back at start-up, so a restarted kubegate keeps them, through an apiserver
//! outage too, until they expire. `drain.rs` says how the CLI reaches the endpoint.

use crate::state::{Gateway, ShedInForce, MAX_SHED_RULES};
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
pub fn check(rule: &mut DispatchRule, now: SystemTime) -> Result<(), String> {
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
    gw.shed().put(rule, now, |rules| save(gw, rules))
}

/// Removes the rule named `name`; the rules now, or `None` if none was so named.
pub fn remove(gw: &Gateway, name: &str) -> Option<Vec<DispatchRule>> {
    gw.shed()
        .remove(name, SystemTime::now(), |rules| save(gw, rules))
}

/// Puts `rules` (read from `cluster`'s object, each checked) in force for that cluster, written
/// to the state file if they changed; whether they did.
pub fn set_cluster(gw: &Gateway, cluster: &str, rules: Vec<DispatchRule>) -> bool {
    gw.shed()
        .set_cluster(cluster, rules, SystemTime::now(), |all| save(gw, all))
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
    let checked = |rules: Vec<DispatchRule>, source: &str| -> Vec<DispatchRule> {
        let mut kept = Vec::new();
        for mut rule in rules {
            let name = rule.name.clone().unwrap_or_default();
            match check(&mut rule, now) {
                Ok(()) => kept.push(rule),
                Err(why) => {
                    tracing::warn!(rule = %name.escape_debug(), source, why = %why, file = %path.display(), "run-time rule not read back")
                }
            }
        }
        if kept.len() > MAX_SHED_RULES {
            tracing::warn!(
                rules = kept.len(),
                kept = MAX_SHED_RULES,
                source,
                "run-time rules: more than the most in force; the newest kept"
            );
        }
        kept
    };
    // Only clusters still configured: one added later under a removed one's name is another.
    let config = gw.config().load();
    let configured = |name: &str| match config.clusters.is_empty() {
        true => name == kubegate_config::IMPLICIT,
        false => config.clusters.iter().any(|c| c.name == name),
    };
    let restored = ShedInForce {
        gateway: checked(rules.gateway, "gateway"),
        clusters: rules
            .clusters
            .into_iter()
            .filter(|(cluster, _)| configured(cluster))
            .map(|(cluster, r)| {
                let kept = checked(r, &cluster);
                (cluster, kept)
            })
            .collect(),
    };
    gw.shed().restore(restored, now);
    let kept = gw.shed().all();
    let from_clusters: usize = kept.clusters.values().map(Vec::len).sum();
    tracing::info!(rules = kept.gateway.len(), from_clusters, file = %path.display(), "run-time rules read back from the state file");
}

/// The rules a state file holds: as written now (by source), or as an earlier release wrote
/// them (the gateway's rules alone, a list).
fn read_state(path: &Path) -> Result<Option<ShedInForce>, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Written {
        BySource(ShedInForce),
        GatewayOnly(Vec<DispatchRule>),
    }
    match serde_json::from_slice(&text).map_err(|e| e.to_string())? {
        Written::BySource(all) => Ok(Some(all)),
        Written::GatewayOnly(gateway) => Ok(Some(ShedInForce {
            gateway,
            ..Default::default()
        })),
    }
}
/// Writes the rules whole: a temporary file made new (never one already there, nor what a
/// link there points at), synced, then renamed over the old one, so a crash mid-write leaves
/// the previous rules. A failure is logged; the rules stay in force.
fn save(gw: &Gateway, rules: &ShedInForce) {
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
