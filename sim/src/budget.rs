//! What a PodDisruptionBudget allows. A real cluster's disruption controller
//! (kube-controller-manager, `pkg/controller/disruption/disruption.go`) keeps each budget's
//! status and the apiserver's eviction handler reads it; the simulator has no controller, so
//! an eviction computes the status as that controller would, from the budget's spec and the
//! pods it selects at that moment:
//!
//! - `getExpectedPodCount`: with `maxUnavailable`, expected = the controllers' scale and
//!   desiredHealthy = expected − maxUnavailable (at least 0); with an integer `minAvailable`,
//!   desiredHealthy = minAvailable and expected = the selected pods; with a percentage
//!   `minAvailable`, expected = the controllers' scale and desiredHealthy = that share of it.
//!   Percentages round up (`intstr.GetScaledValueFromIntOrPercent(.., true)`). The simulator
//!   runs no workload controllers, so it stands in for their scale with the pods the budget
//!   selects plus the ones evicted within `DeletionTimeout` and gone since (a controller
//!   would be replacing them; its scale did not shrink). A real controller finds no scale
//!   for a bare pod, and there a budget with `maxUnavailable` over bare pods allows nothing.
//! - `countHealthyPods`: selected pods that are not being deleted, not in
//!   `status.disruptedPods` within the last 2 minutes (`DeletionTimeout`), and Ready.
//! - `updatePdbStatus`: disruptionsAllowed = currentHealthy − desiredHealthy, and 0 when that
//!   is not positive or nothing is expected.
//!
//! A budget whose numbers cannot be read gets the controller's fail-safe: nothing allowed.

use serde_json::Value;
use std::time::{Duration, SystemTime};

/// How long an eviction's entry in `status.disruptedPods` keeps its pod from counting as
/// healthy (`DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// A budget's status, as the disruption controller would write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// `expectedPods`.
    pub expected: i32,
    /// `desiredHealthy`.
    pub desired_healthy: i32,
    /// `currentHealthy`.
    pub current_healthy: i32,
    /// `disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

/// The status of budget `pdb` over `pods` (the pods of its namespace it selects) at `now`.
pub fn compute(pdb: &Value, pods: &[&Value], now: SystemTime) -> Budget {
    let spec = &pdb["spec"];
    let selected = pods.len() as i32;
    let scale = selected + evicted_and_gone(pdb, pods, now);
    let counts = if !spec["maxUnavailable"].is_null() {
        scaled(&spec["maxUnavailable"], scale)
            .map(|max_unavailable| (scale, (scale - max_unavailable).max(0)))
    } else if spec["minAvailable"].is_i64() {
        scaled(&spec["minAvailable"], selected).map(|min| (selected, min))
    } else if !spec["minAvailable"].is_null() {
        scaled(&spec["minAvailable"], scale).map(|min| (scale, min))
    } else {
        Some((0, 0))
    };
    let Some((expected, desired_healthy)) = counts else {
        // failSafe: nothing allowed; the other numbers stay what the status had.
        let status = &pdb["status"];
        let kept = |k: &str| status[k].as_i64().unwrap_or(0) as i32;
        return Budget {
            expected: kept("expectedPods"),
            desired_healthy: kept("desiredHealthy"),
            current_healthy: kept("currentHealthy"),
            disruptions_allowed: 0,
        };
    };
    let current_healthy = count_healthy(pods, &pdb["status"]["disruptedPods"], now);
    let allowed = current_healthy - desired_healthy;
    Budget {
        expected,
        desired_healthy,
        current_healthy,
        disruptions_allowed: if expected <= 0 || allowed <= 0 {
            0
        } else {
            allowed
        },
    }
}

/// Whether `disrupted` (a `disruptedPods` value) records an eviction within
/// `DeletionTimeout` of `now`.
pub fn recent(disrupted: &Value, now: SystemTime) -> bool {
    disrupted
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .is_some_and(|at| at + DELETION_TIMEOUT > now)
}

/// Pods of `status.disruptedPods` evicted recently and no longer among `pods`.
fn evicted_and_gone(pdb: &Value, pods: &[&Value], now: SystemTime) -> i32 {
    let disrupted = pdb["status"]["disruptedPods"].as_object();
    disrupted
        .into_iter()
        .flatten()
        .filter(|(name, at)| {
            recent(at, now)
                && !pods
                    .iter()
                    .any(|p| p["metadata"]["name"].as_str() == Some(name.as_str()))
        })
        .count() as i32
}

/// `countHealthyPods`.
fn count_healthy(pods: &[&Value], disrupted: &Value, now: SystemTime) -> i32 {
    pods.iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .filter(|pod| {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            !recent(&disrupted[name], now)
        })
        .filter(|pod| ready(pod))
        .count() as i32
}

/// `podutil.IsPodReady`: the `Ready` condition is `True`.
pub fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .is_some_and(|c| c["status"] == "True")
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, true)`: an integer as is, `N%` as
/// ceil(N × total / 100); anything else (a string without `%`) is unreadable.
fn scaled(v: &Value, total: i32) -> Option<i32> {
    if let Some(n) = v.as_i64() {
        return i32::try_from(n).ok();
    }
    let percent: i64 = v.as_str()?.strip_suffix('%')?.parse().ok()?;
    let value = (percent as f64 * f64::from(total) / 100.0).ceil();
    Some(value as i32)
}

/// Whether `pdb` selects a pod with `labels`: `metav1.LabelSelectorAsSelector` of
/// `spec.selector`, where (`eviction.go`, `getPodDisruptionBudgets`) an invalid selector
/// matches nothing, and so does an empty or missing one ("it should match nothing, not
/// everything").
pub fn selects(pdb: &Value, labels: &Value) -> bool {
    let selector = &pdb["spec"]["selector"];
    let match_labels = selector["matchLabels"].as_object();
    let expressions = selector["matchExpressions"].as_array();
    if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_none_or(|e| e.is_empty()) {
        return false;
    }
    let label = |k: &str| labels[k].as_str();
    let labels_match = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| v.as_str().is_some() && label(k) == v.as_str());
    let expressions_match = expressions.into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        // An operator the selector cannot be built from makes the whole selector invalid.
        match e["operator"].as_str() {
            Some("In") if !values.is_empty() => label(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") if !values.is_empty() => label(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") if values.is_empty() => label(key).is_some(),
            Some("DoesNotExist") if values.is_empty() => label(key).is_none(),
            _ => false,
        }
    });
    labels_match && expressions_match
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn budget(spec: Value, pods: &[Value]) -> Budget {
        let refs: Vec<&Value> = pods.iter().collect();
        compute(&json!({"spec": spec}), &refs, SystemTime::now())
    }

    #[test]
    fn min_available_counts_against_the_selected_pods() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        let b = budget(json!({"minAvailable": 2}), &pods);
        assert_eq!(
            b,
            Budget {
                expected: 3,
                desired_healthy: 2,
                current_healthy: 2,
                disruptions_allowed: 0
            }
        );
        let b = budget(json!({"minAvailable": 1}), &pods);
        assert_eq!(b.disruptions_allowed, 1);
        // 50% of 3, rounded up: 2.
        assert_eq!(
            budget(json!({"minAvailable": "50%"}), &pods).desired_healthy,
            2
        );
    }

    #[test]
    fn max_unavailable_leaves_the_rest_desired() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let b = budget(json!({"maxUnavailable": 1}), &pods);
        assert_eq!((b.desired_healthy, b.disruptions_allowed), (2, 1));
        assert_eq!(
            budget(json!({"maxUnavailable": 0}), &pods).disruptions_allowed,
            0
        );
        // ceil(34% × 3) = 2 unavailable allowed.
        assert_eq!(
            budget(json!({"maxUnavailable": "34%"}), &pods).disruptions_allowed,
            2
        );
        // Unreadable: nothing allowed.
        assert_eq!(
            budget(json!({"maxUnavailable": "two"}), &pods).disruptions_allowed,
            0
        );
    }

    #[test]
    fn a_recent_disruption_keeps_its_pod_from_counting() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let now = SystemTime::now();
        let recent = humantime::format_rfc3339_seconds(now).to_string();
        let old = humantime::format_rfc3339_seconds(now - Duration::from_secs(300)).to_string();
        let pdb = json!({"spec": {"minAvailable": 1}, "status": {"disruptedPods": {"a": recent}}});
        assert_eq!(compute(&pdb, &refs, now).disruptions_allowed, 0);
        let pdb = json!({"spec": {"minAvailable": 1}, "status": {"disruptedPods": {"a": old}}});
        assert_eq!(compute(&pdb, &refs, now).disruptions_allowed, 1);
    }

    #[test]
    fn selectors_match_labels_and_expressions_and_empty_ones_match_nothing() {
        let labels = json!({"app": "web", "tier": "front"});
        let pdb = |selector: Value| json!({"spec": {"selector": selector}});
        assert!(selects(
            &pdb(json!({"matchLabels": {"app": "web"}})),
            &labels
        ));
        assert!(!selects(
            &pdb(json!({"matchLabels": {"app": "db"}})),
            &labels
        ));
        assert!(!selects(&pdb(json!({})), &labels));
        assert!(!selects(&json!({"spec": {}}), &labels));
        assert!(selects(
            &pdb(json!({"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "gone", "operator": "DoesNotExist"},
            ]})),
            &labels
        ));
        assert!(!selects(
            &pdb(
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]})
            ),
            &labels
        ));
        // Invalid: `In` without values.
        assert!(!selects(
            &pdb(json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]})),
            &labels
        ));
    }

    #[test]
    fn a_pod_evicted_a_moment_ago_is_still_expected_as_its_controller_would_replace_it() {
        let pods = [pod("b", true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let now = SystemTime::now();
        let recent = humantime::format_rfc3339_seconds(now).to_string();
        let pdb =
            json!({"spec": {"maxUnavailable": 1}, "status": {"disruptedPods": {"a": recent}}});
        let b = compute(&pdb, &refs, now);
        assert_eq!(
            (b.expected, b.desired_healthy, b.disruptions_allowed),
            (2, 1, 0)
        );
        // Two minutes on, the replacement would be there: only what is selected counts.
        let later = now + DELETION_TIMEOUT + Duration::from_secs(1);
        assert_eq!(compute(&pdb, &refs, later).disruptions_allowed, 1);
    }
}
