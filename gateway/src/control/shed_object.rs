//! A cluster's shed object (`terminate.shed_object`): a ConfigMap each of whose `data` keys
//! is a rule's name and its value the rule, as JSON in the `dispatch` vocabulary (what `POST
//! /shed` takes), with its `expires`:
//!
//! ```yaml
//! data:
//!   telemetry-lists: '{"match":{"service_accounts":["telemetry:agent"],"verbs":["list"]},"reject":{"retry_after":"30s"},"expires":"2026-12-05T18:00:00Z"}'
//! ```
//!
//! One key per rule, so `kubegate shed` and `kubegate unshed` each change theirs with a merge
//! patch and two operators never overwrite each other. A rule here never names the reserve
//! (`system:masters`, nodes, the control plane's components, leases): whoever may write this
//! object must not be able to lock out the administrators who would undo it; a gateway's own
//! admin endpoint may. A ConfigMap, not a resource of
//! kubegate's own: every cluster has it, RBAC can grant it by name, and nothing need be
//! installed before the first incident.

use crate::control::shed::check;
use crate::terminate::names_reserve;
use kubegate_config::{DispatchRule, ObjectName};
use serde_json::{json, Value};
use std::time::SystemTime;

/// What one read of the object holds.
#[derive(Debug, Default)]
pub struct ObjectRules {
    /// The rules to put in force, by name.
    pub rules: Vec<DispatchRule>,
    /// Entries that are not (their key, and why).
    pub refused: Vec<(String, String)>,
    /// Entries whose rule has expired (left in the object: `kubegate unshed` removes them).
    pub expired: usize,
}

/// The rules `object` (a ConfigMap as JSON) holds at `now`.
pub fn rules_of(object: &Value, now: SystemTime) -> ObjectRules {
    let mut read = ObjectRules::default();
    let Some(data) = object["data"].as_object() else {
        return read;
    };
    for (key, value) in data {
        match rule_of(key, value, now) {
            Ok(Some(rule)) => read.rules.push(rule),
            Ok(None) => read.expired += 1,
            Err(why) => read.refused.push((key.clone(), why)),
        }
    }
    read
}

/// The rule of entry `key`: `None` if it has expired.
fn rule_of(key: &str, value: &Value, now: SystemTime) -> Result<Option<DispatchRule>, String> {
    let text = value.as_str().ok_or("not a string")?;
    let mut rule: DispatchRule =
        serde_json::from_str(text).map_err(|e| format!("not a rule: {e}"))?;
    if rule.name.as_deref().is_some_and(|n| n != key) {
        return Err("its name is not its key".into());
    }
    rule.name = Some(key.to_string());
    // Every gateway reads it at its own time: an end written in the object is the same end at
    // each, where a default counted from each read would not be.
    let expires = rule
        .expires
        .ok_or("no expires: a rule in the object says when it ends")?;
    if expires <= now {
        return Ok(None);
    }
    admissible(&mut rule, now)?;
    Ok(Some(rule))
}

/// Whether `rule` may be in the object: what a gateway takes at run time
/// (`control::shed::check`), naming no part of the reserve.
pub fn admissible(rule: &mut DispatchRule, now: SystemTime) -> Result<(), String> {
    check(rule, now)?;
    match names_reserve(rule) {
        Some(part) => Err(format!(
            "it names {part}, which only a gateway's own admin endpoint may shed (kubegate shed --admin)"
        )),
        None => Ok(()),
    }
}

/// The object's entry for `rule`: its key and its value.
pub fn entry(rule: &DispatchRule) -> (String, String) {
    let name = rule.name.clone().unwrap_or_default();
    let value = DispatchRule {
        name: None,
        ..rule.clone()
    };
    (name, serde_json::to_string(&value).expect("serializable"))
}

/// A merge patch (RFC 7386) that puts `rule` in the object, or with `None` removes rule
/// `name`, leaving every other entry as it is.
pub fn patch(name: &str, rule: Option<&DispatchRule>) -> Value {
    let value = rule.map_or(Value::Null, |r| Value::String(entry(r).1));
    json!({ "data": { name: value } })
}

/// The object made new, holding `rule` alone.
pub fn new_object(object: &ObjectName, rule: &DispatchRule) -> Value {
    let (key, value) = entry(rule);
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": object.name,
            "namespace": object.namespace,
            "labels": { "app.kubernetes.io/managed-by": "kubegate" },
        },
        "data": { key: value },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_are_read_as_rules_and_what_is_not_one_is_named() {
        let now = SystemTime::now();
        let rule = |body: &str| -> DispatchRule { serde_json::from_str(body).unwrap() };
        let mut bob = rule(r#"{"name":"bob","match":{"users":["bob"]},"reject":{}}"#);
        // Whole seconds: RFC 3339 as written keeps no fraction.
        let whole = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        bob.expires = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(whole + 600));
        let (key, value) = entry(&bob);
        assert_eq!(key, "bob");
        assert!(!value.contains("\"name\""), "the key is its name: {value}");
        let mut gone = bob.clone();
        gone.expires = Some(now - Duration::from_secs(1));
        let object = json!({"data": {
            "bob": value,
            "gone": entry(&gone).1,
            "no-end": r#"{"match":{"users":["x"]},"reject":{}}"#,
            "limit": r#"{"match":{"users":["x"]},"limit":{"max_in_flight":1},"expires":"2099-01-01T00:00:00Z"}"#,
            "other-name": r#"{"name":"x","match":{"users":["x"]},"reject":{},"expires":"2099-01-01T00:00:00Z"}"#,
            "masters": r#"{"match":{"groups":["system:masters"]},"reject":{},"expires":"2099-01-01T00:00:00Z"}"#,
            "leases": r#"{"match":{"users":["x"],"resources":["leases"]},"reject":{},"expires":"2099-01-01T00:00:00Z"}"#,
            "junk": "{",
        }});
        let read = rules_of(&object, now);
        assert_eq!(read.rules.len(), 1);
        assert_eq!(read.rules[0].name.as_deref(), Some("bob"));
        assert_eq!(read.rules[0].expires, bob.expires);
        assert_eq!(read.expired, 1);
        let refused: Vec<&str> = read.refused.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            refused,
            ["junk", "leases", "limit", "masters", "no-end", "other-name"]
        );
        assert!(rules_of(&json!({}), now).rules.is_empty(), "no data");
        assert_eq!(patch("bob", None), json!({"data": {"bob": null}}));
        let made = new_object(
            &ObjectName::parse("kube-system/kubegate-shed").unwrap(),
            &bob,
        );
        assert_eq!(rules_of(&made, now).rules, read.rules);
    }
}
