//! `POST /api/v1/namespaces/NS/pods/NAME/eviction`: evict a pod unless a PodDisruptionBudget
//! forbids it, as kube-apiserver's `pkg/registry/core/pod/storage/eviction.go`
//! (`EvictionREST.Create`, `checkAndDecrement`, `getPodDisruptionBudgets`) does, behind the
//! generic create handler (k8s.io/apiserver `pkg/endpoints/handlers/create.go`).
//!
//! - The body is an `Eviction` (`policy/v1` or `policy/v1beta1`); a namespace other than the
//!   URL's, or a name other than the pod's, is 400.
//! - Validating admission of `pods/eviction` runs before anything is read (`createValidation`).
//! - A pod that is Pending, Succeeded, Failed or being deleted is deleted without looking at
//!   budgets (`canIgnorePDB`).
//! - The budgets of the pod's namespace whose selector selects it: none → delete; more than
//!   one → the `Status` "This pod has more than one PodDisruptionBudget, ..." with code 500,
//!   returned as the create's result, so the HTTP status is 201 (`createHandler` answers
//!   `http.StatusCreated` for any result and fills a `Status`'s code only when it is 0).
//! - One: its status as the disruption controller would have it ([`crate::budget`]). No
//!   disruption allowed → 429 `errors.NewTooManyRequests("Cannot evict pod as it would
//!   violate the pod's disruption budget.", 0)` with the cause `DisruptionBudget` "The
//!   disruption budget NAME needs N healthy pods and has M currently". Its
//!   `retryAfterSeconds` is 0, so the `Status` has none and `ErrorNegotiated` sets no
//!   `Retry-After`: the 10 s belong to `createTooManyRequestsError` (a budget the controller
//!   has not observed yet, or a conflict), which a computed status never reaches.
//! - Otherwise the eviction is recorded in the budget's `status.disruptedPods` (written with
//!   the budget's resourceVersion as precondition, so concurrent evictions on any replica
//!   take the budget's disruptions one at a time, retried on conflict), and the pod deleted:
//!   201 `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}`.
//!
//! `dryRun` (query or `deleteOptions`) checks everything and changes nothing.

use crate::budget::{self, Budget};
use crate::objects;
use crate::resources::{Target, PODDISRUPTIONBUDGETS, PODS};
use crate::respond::{self, Reply};
use crate::state::Sim;
use crate::store::{StoreError, Stored};
use crate::store_errors::store_error;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::SystemTime;

/// Conflicts on the budget retried before giving up (the apiserver's `EvictionsRetry` has 20
/// steps of 500 ms; the simulator's store answers a retry at once).
const CONFLICT_RETRIES: usize = 20;

/// The eviction's request, as the handler received it.
pub struct Request<'a> {
    /// The pod's namespace, from the URL.
    pub namespace: &'a str,
    /// The pod's name, from the URL.
    pub name: &'a str,
    /// `Content-Type` of the body.
    pub content_type: &'a str,
    /// The `Eviction`, JSON or protobuf.
    pub body: &'a [u8],
    /// `?dryRun=...` was given.
    pub dry_run: bool,
}

/// Answers an eviction.
pub async fn evict(sim: &Sim, req: Request<'_>) -> Reply {
    sim.requests.evictions.fetch_add(1, Ordering::Relaxed);
    let eviction = match decode(&req) {
        Ok(e) => e,
        Err(reply) => return reply,
    };
    let dry_run = req.dry_run
        || eviction["deleteOptions"]["dryRun"]
            .as_array()
            .is_some_and(|d| !d.is_empty());
    if let Some(denied) = sim.admission.deny("pods/eviction") {
        return denied;
    }
    let pod_target = Target {
        resource: &PODS,
        namespace: Some(req.namespace),
        name: Some(req.name),
        subresource: None,
    };
    let pod_key = format!("{}{}", PODS.prefix(Some(req.namespace)), req.name);
    let pod = match sim.store.get(&pod_key).await {
        Ok(kv) => objects::from_store(&kv, &PODS),
        Err(e) => return store_error(&pod_target, req.name, e),
    };
    let delete = || async {
        if dry_run {
            return success();
        }
        match sim.store.delete(&pod_key).await {
            Ok(_) => success(),
            Err(e) => store_error(&pod_target, req.name, e),
        }
    };
    if can_ignore_pdb(&pod) {
        return delete().await;
    }
    let mut contended = String::new();
    for _ in 0..CONFLICT_RETRIES {
        let (pdbs, pods) = match budgets_and_pods(sim, req.namespace, &pod).await {
            Ok(found) => found,
            Err(e) => return store_error(&pod_target, req.name, e),
        };
        let (kv, pdb) = match pdbs.as_slice() {
            [] => return delete().await,
            [one] => one,
            _ => return more_than_one_budget(),
        };
        let selected: Vec<&Value> = pods
            .iter()
            .filter(|p| budget::selects(pdb, &p["metadata"]["labels"]))
            .collect();
        let now = SystemTime::now();
        let status = budget::compute(pdb, &selected, now);
        // An unready pod does not count as healthy: evicting it takes nothing away.
        if !budget::ready(&pod)
            && status.current_healthy >= status.desired_healthy
            && status.desired_healthy > 0
        {
            return delete().await;
        }
        let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or_default();
        if status.disruptions_allowed == 0 {
            return blocked(pdb_name, &status);
        }
        if dry_run {
            return success();
        }
        let recorded = record_disruption(pdb, req.name, status, now);
        match sim
            .store
            .update(
                &kv.key,
                serde_json::to_vec(&recorded).expect("json"),
                Some(kv.mod_revision),
            )
            .await
        {
            Ok(_) => return delete().await,
            Err(StoreError::Conflict(_)) => contended = pdb_name.to_string(),
            Err(e) => return store_error(&pod_target, req.name, e),
        }
    }
    // `retry.RetryOnConflict` out of steps: its last error, the budget's conflict.
    let pdb_target = Target {
        resource: &PODDISRUPTIONBUDGETS,
        ..pod_target
    };
    store_error(&pdb_target, &contended, StoreError::Conflict(0))
}

/// The `Eviction` of the body, checked as `createHandler` and `EvictionREST.Create` check it.
fn decode(req: &Request<'_>) -> Result<Value, Reply> {
    let bad = |message: &str| respond::status(400, "BadRequest", message, None);
    let eviction: Value = if req
        .content_type
        .starts_with("application/vnd.kubernetes.protobuf")
    {
        crate::protobuf::decode(req.body).map_err(|e| bad(&e))?
    } else {
        serde_json::from_slice(req.body).map_err(|e| {
            bad(&format!(
                "the object provided is unrecognized (must be of type Eviction): {e}"
            ))
        })?
    };
    if let Some(av) = eviction["apiVersion"].as_str() {
        if av != "policy/v1" && av != "policy/v1beta1" {
            return Err(bad(&format!(
                "the API version in the data ({av}) does not match the expected API version (policy/v1)"
            )));
        }
    }
    if eviction["kind"].as_str().is_some_and(|k| k != "Eviction") {
        return Err(bad(
            "the object provided is unrecognized (must be of type Eviction)",
        ));
    }
    let meta = &eviction["metadata"];
    if meta["namespace"]
        .as_str()
        .is_some_and(|ns| !ns.is_empty() && ns != req.namespace)
    {
        return Err(bad(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if meta["name"].as_str().unwrap_or_default() != req.name {
        return Err(bad("name in URL does not match name in Eviction object"));
    }
    Ok(eviction)
}

/// `canIgnorePDB`: a pod that disrupts nothing by going (not started, finished, or already
/// being deleted).
fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed" | "Pending")
    ) || !pod["metadata"]["deletionTimestamp"].is_null()
}

/// The budgets of `namespace` that select `pod` (with their stored values), and the
/// namespace's pods.
async fn budgets_and_pods(
    sim: &Sim,
    namespace: &str,
    pod: &Value,
) -> Result<(Vec<(Stored, Value)>, Vec<Value>), StoreError> {
    let (stored, _) = sim
        .store
        .list(&PODDISRUPTIONBUDGETS.prefix(Some(namespace)))
        .await?;
    let labels = &pod["metadata"]["labels"];
    let pdbs: Vec<(Stored, Value)> = stored
        .into_iter()
        .filter_map(|kv| {
            let pdb: Value = serde_json::from_slice(&kv.value).ok()?;
            budget::selects(&pdb, labels).then_some((kv, pdb))
        })
        .collect();
    if pdbs.len() != 1 {
        return Ok((pdbs, Vec::new()));
    }
    let (pods, _) = sim.store.list(&PODS.prefix(Some(namespace))).await?;
    let pods = pods
        .iter()
        .map(|kv| objects::from_store(kv, &PODS))
        .collect();
    Ok((pdbs, pods))
}

/// The budget as stored, with the status the controller would write and the eviction of
/// `pod` in `disruptedPods` (entries older than `DeletionTimeout` dropped, as the
/// controller's `buildDisruptedPodMap` drops them; entries of pods gone since are kept while
/// recent, standing in for the replacements a controller would be starting).
fn record_disruption(pdb: &Value, pod: &str, status: Budget, now: SystemTime) -> Value {
    let mut disrupted = serde_json::Map::new();
    let previous = pdb["status"]["disruptedPods"].as_object();
    for (name, at) in previous.into_iter().flatten() {
        if budget::recent(at, now) {
            disrupted.insert(name.clone(), at.clone());
        }
    }
    disrupted.insert(
        pod.to_string(),
        json!(humantime::format_rfc3339_seconds(now).to_string()),
    );
    let mut recorded = pdb.clone();
    recorded["status"]["expectedPods"] = json!(status.expected);
    recorded["status"]["desiredHealthy"] = json!(status.desired_healthy);
    recorded["status"]["currentHealthy"] = json!(status.current_healthy);
    recorded["status"]["disruptionsAllowed"] = json!(status.disruptions_allowed - 1);
    recorded["status"]["disruptedPods"] = Value::Object(disrupted);
    if let Some(meta) = recorded["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    recorded
}

/// `checkAndDecrement` with no disruption allowed.
fn blocked(pdb: &str, status: &Budget) -> Reply {
    respond::status(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        Some(json!({"causes": [{
            "reason": "DisruptionBudget",
            "message": format!(
                "The disruption budget {pdb} needs {} healthy pods and has {} currently",
                status.desired_healthy, status.current_healthy
            ),
        }]})),
    )
}

/// The eviction's result `&metav1.Status{Status: metav1.StatusSuccess}`, its code filled in
/// by the create handler.
fn success() -> Reply {
    Reply::json(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

/// The `rtStatus` for a pod that more than one budget selects: a result, not an error, so the
/// answer is 201 with a failed `Status` of code 500.
fn more_than_one_budget() -> Reply {
    Reply::json(
        StatusCode::CREATED,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            "code": 500,
        }),
    )
}

#[cfg(test)]
mod tests {
    use crate::testserver::{admitted_json, TestServer};
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

    async fn budget(s: &TestServer, admin: &(PathBuf, PathBuf), name: &str, spec: &str) {
        let body = format!(r#"{{"metadata":{{"name":"{name}"}},"spec":{spec}}}"#);
        let r = s.json(admin, "POST", PDBS, &body).await;
        assert_eq!(r.status, 201, "{}", r.text());
    }

    /// The headers every admitted answer of the admin (`exempt`) has.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_budget_that_allows_no_disruption_answers_429_with_its_cause_and_no_retry_after() {
        let (s, admin) = TestServer::with_admin().await;
        for pod in ["web-0", "web-1"] {
            s.pod(&admin, pod, r#"{"app":"web"}"#).await;
        }
        let spec = r#"{"minAvailable":2,"selector":{"matchLabels":{"app":"web"}}}"#;
        budget(&s, &admin, "web", spec).await;
        let r = s.evict(&admin, "web-0").await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Cannot evict pod as it would violate the pod's disruption budget.\",\"reason\":\"TooManyRequests\",\"details\":{\"causes\":[{\"reason\":\"DisruptionBudget\",\"message\":\"The disruption budget web needs 2 healthy pods and has 2 currently\"}]},\"code\":429}\n";
        assert_eq!((r.status, r.text()), (429, body));
        // PF headers (admitted before the handler), no Retry-After (retryAfterSeconds 0).
        assert_eq!(r.stable_headers(), admitted_json(body.len()));
        assert_eq!(s.pod_status(&admin, "web-0").await, 200);
        let counted = &s.sim.requests;
        assert_eq!(counted.evictions.load(Ordering::Relaxed), 1);
        // 2 pods, 1 budget, 1 eviction, 1 GET: every request once; 4 writes.
        assert_eq!(counted.requests.load(Ordering::Relaxed), 5);
        assert_eq!(counted.writes.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_allowed_eviction_deletes_the_pod_and_takes_the_budgets_disruption() {
        let (s, admin) = TestServer::with_admin().await;
        for pod in ["web-0", "web-1", "db-0"] {
            let app = if pod.starts_with("web") { "web" } else { "db" };
            s.pod(&admin, pod, &format!(r#"{{"app":"{app}"}}"#)).await;
        }
        let spec = r#"{"maxUnavailable":1,"selector":{"matchExpressions":[{"key":"app","operator":"In","values":["web"]}]}}"#;
        budget(&s, &admin, "web", spec).await;
        let r = s.evict(&admin, "web-0").await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"code\":201}\n";
        assert_eq!((r.status, r.text()), (201, body));
        assert_eq!(r.stable_headers(), admitted_json(body.len()));
        assert_eq!(s.pod_status(&admin, "web-0").await, 404);
        // The budget recorded it; with web-0 gone, web-1 is all that is left of 1 expected.
        let pdb = s.json(&admin, "GET", &format!("{PDBS}/web"), "").await;
        let pdb: serde_json::Value = serde_json::from_slice(&pdb.body).unwrap();
        assert!(pdb["status"]["disruptedPods"]["web-0"].is_string(), "{pdb}");
        // web-0's controller would be replacing it: 2 expected, 1 desired, web-1 healthy.
        let r = s.evict(&admin, "web-1").await;
        assert_eq!(r.status, 429);
        assert!(
            r.text()
                .contains("\"The disruption budget web needs 1 healthy pods and has 1 currently\""),
            "{}",
            r.text()
        );
        // A pod no budget selects goes at once.
        assert_eq!(s.evict(&admin, "db-0").await.status, 201);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_budgets_answer_201_with_a_failed_status_of_code_500() {
        let (s, admin) = TestServer::with_admin().await;
        s.pod(&admin, "web-0", r#"{"app":"web","tier":"front"}"#)
            .await;
        let spec = r#"{"minAvailable":0,"selector":{"matchLabels":{"app":"web"}}}"#;
        budget(&s, &admin, "a", spec).await;
        let spec = r#"{"minAvailable":0,"selector":{"matchLabels":{"tier":"front"}}}"#;
        budget(&s, &admin, "b", spec).await;
        let r = s.evict(&admin, "web-0").await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.\",\"code\":500}\n";
        assert_eq!((r.status, r.text()), (201, body));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_pod_is_404_and_a_mismatched_name_400() {
        let (s, admin) = TestServer::with_admin().await;
        let r = s.evict(&admin, "nope").await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"nope\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"nope\",\"kind\":\"pods\"},\"code\":404}\n";
        assert_eq!((r.status, r.text()), (404, body));
        s.pod(&admin, "web-0", r#"{"app":"web"}"#).await;
        let r = s
            .json(
                &admin,
                "POST",
                "/api/v1/namespaces/default/pods/web-0/eviction",
                r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"other"}}"#,
            )
            .await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"name in URL does not match name in Eviction object\",\"reason\":\"BadRequest\",\"code\":400}\n";
        assert_eq!((r.status, r.text()), (400, body));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dry_run_eviction_checks_and_changes_nothing() {
        let (s, admin) = TestServer::with_admin().await;
        s.pod(&admin, "web-0", r#"{"app":"web"}"#).await;
        let spec = r#"{"minAvailable":0,"selector":{"matchLabels":{"app":"web"}}}"#;
        budget(&s, &admin, "web", spec).await;
        let r = s
            .json(
                &admin,
                "POST",
                "/api/v1/namespaces/default/pods/web-0/eviction?dryRun=All",
                r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-0"}}"#,
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(s.pod_status(&admin, "web-0").await, 200);
    }
}
