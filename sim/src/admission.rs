//! A validating admission webhook that denies writes with 429, as a fault (the fault port's
//! `POST /admission?resource=R&state=deny429|allow`).
//!
//! A webhook's denial is an answer *after* priority and fairness admitted the request (the
//! handler runs admission), so it carries the `X-Kubernetes-PF-*` headers, and it is a JSON
//! `Status` with whatever code the webhook chose: a 429 that a client must see once, not a
//! flow-control rejection to retry elsewhere. The `Status` is the webhook's own
//! (`AdmissionResponse.status`) as k8s.io/apiserver 1.33–1.35 passes it on:
//! `pkg/admission/plugin/webhook/validating/dispatcher.go` (`callHook`: a response with
//! `allowed: false` becomes `webhookerrors.ToStatusErr(h.Name, result.Result)`) and
//! `pkg/admission/plugin/webhook/errors/statuserror.go` (`ToStatusErr`: a code below 400
//! becomes 400, an empty status `Failure`, and the message `admission webhook "NAME" denied
//! the request: MESSAGE` — or `: REASON` without a message, or ` without explanation`). The
//! reason and details are the webhook's: none of that code adds a reason or a
//! `retryAfterSeconds`, so the answer has `Retry-After` only when the webhook's status has
//! `details.retryAfterSeconds` (`responsewriters.ErrorNegotiated` sets the header from it).
//!
//! Which writes it sees: create, update, patch and delete of the resource named as a webhook
//! rule names it (`configmaps`, `pods`, `pods/eviction`), after the request's own checks that
//! come first in the registry (a missing object's 404, an invalid one's 422).

use crate::respond::Reply;
use http::StatusCode;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a denying webhook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The webhook's name (`webhooks[].name` of its configuration).
    pub webhook: String,
    /// The code of its status (429 for this fault).
    pub code: u16,
    /// Its status' reason; empty for none.
    pub reason: String,
    /// Its status' message; empty for none.
    pub message: String,
    /// Its status' `details.retryAfterSeconds`, if it set one.
    pub retry_after: Option<u32>,
}

impl Denial {
    /// A webhook `webhook` that denies with 429 and `message`.
    pub fn too_many_requests(webhook: &str, reason: &str, message: &str) -> Denial {
        Denial {
            webhook: webhook.to_string(),
            code: 429,
            reason: reason.to_string(),
            message: message.to_string(),
            retry_after: None,
        }
    }

    /// The apiserver's answer: `ToStatusErr` of the webhook's status, written by
    /// `ErrorNegotiated`.
    pub fn answer(&self) -> Reply {
        // %q of a webhook name: names are DNS subdomains, which Go quotes as is.
        let denied_by = format!("admission webhook \"{}\" denied the request", self.webhook);
        let message = if !self.message.is_empty() {
            format!("{denied_by}: {}", self.message)
        } else if !self.reason.is_empty() {
            format!("{denied_by}: {}", self.reason)
        } else {
            format!("{denied_by} without explanation")
        };
        let code = self.code.max(400);
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "code": code,
        });
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        match self.retry_after.filter(|s| *s > 0) {
            Some(seconds) => {
                status["details"] = json!({"retryAfterSeconds": seconds});
                Reply::json(status_code(code), &status).header("retry-after", &seconds.to_string())
            }
            None => Reply::json(status_code(code), &status),
        }
    }
}

fn status_code(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The denying webhooks of a replica, by the resource whose writes they deny.
#[derive(Debug, Default)]
pub struct Webhooks {
    denials: Mutex<BTreeMap<String, Denial>>,
}

impl Webhooks {
    /// From now on writes of `resource` are denied as `denial` says (`None`: allowed again).
    pub fn set(&self, resource: &str, denial: Option<Denial>) {
        let mut denials = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        match denial {
            Some(d) => denials.insert(resource.to_string(), d),
            None => denials.remove(resource),
        };
    }

    /// The answer to a write of `resource` (`pods/eviction` for a subresource), if a webhook
    /// denies it.
    pub fn deny(&self, resource: &str) -> Option<Reply> {
        let denials = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        denials.get(resource).map(Denial::answer)
    }

    /// The resources whose writes are denied now.
    pub fn denied(&self) -> Vec<String> {
        let denials = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        denials.keys().cloned().collect()
    }
}

/// Whether `name` can be a webhook's name (a DNS subdomain, as validation requires), so that
/// Go's `%q` of it is the name in plain quotes.
pub fn valid_webhook_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(r: &'a Reply, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_str().unwrap())
    }

    #[test]
    fn a_denial_is_the_webhooks_status_with_the_denied_by_message() {
        let d = Denial::too_many_requests("limit.example.com", "TooManyRequests", "slow down");
        let r = d.answer();
        assert_eq!(r.status, 429);
        assert_eq!(
            std::str::from_utf8(&r.body).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"admission webhook \\\"limit.example.com\\\" denied the request: slow down\",\"reason\":\"TooManyRequests\",\"code\":429}\n"
        );
        assert_eq!(header(&r, "content-type"), Some("application/json"));
        assert_eq!(header(&r, "retry-after"), None);
    }

    #[test]
    fn retry_after_comes_only_from_the_webhooks_details() {
        let mut d = Denial::too_many_requests("limit.example.com", "", "");
        d.retry_after = Some(7);
        let r = d.answer();
        assert_eq!(
            std::str::from_utf8(&r.body).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"admission webhook \\\"limit.example.com\\\" denied the request without explanation\",\"details\":{\"retryAfterSeconds\":7},\"code\":429}\n"
        );
        assert_eq!(header(&r, "retry-after"), Some("7"));
        d.message.clear();
        d.reason = "Busy".into();
        d.retry_after = None;
        let r = d.answer();
        assert!(std::str::from_utf8(&r.body)
            .unwrap()
            .contains("denied the request: Busy\",\"reason\":\"Busy\""));
    }

    #[test]
    fn webhooks_deny_per_resource_until_allowed() {
        let w = Webhooks::default();
        assert!(w.deny("configmaps").is_none());
        w.set(
            "configmaps",
            Some(Denial::too_many_requests("a.example", "", "x")),
        );
        assert!(w.deny("configmaps").is_some());
        assert!(w.deny("pods").is_none());
        assert_eq!(w.denied(), ["configmaps"]);
        w.set("configmaps", None);
        assert!(w.deny("configmaps").is_none());
        assert!(valid_webhook_name("a.example.com"));
        assert!(!valid_webhook_name("a \"b\""));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_denied_write_is_answered_after_priority_and_fairness_admitted_it() {
        use crate::flowcontrol::FLOW_SCHEMA_UID;
        use crate::testserver::{admitted_json, TestServer};
        let (s, admin) = TestServer::with_admin().await;
        let cms = "/api/v1/namespaces/default/configmaps";
        let made = s.create_configmap(&admin, "kept").await;
        assert_eq!(made.status, 201);
        s.sim.admission.set(
            "configmaps",
            Some(Denial::too_many_requests(
                "limit.example.com",
                "TooManyRequests",
                "slow down",
            )),
        );
        let r = s.create_configmap(&admin, "x").await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"admission webhook \\\"limit.example.com\\\" denied the request: slow down\",\"reason\":\"TooManyRequests\",\"code\":429}\n";
        assert_eq!((r.status, r.text()), (429, body));
        assert_eq!(r.stable_headers(), admitted_json(body.len()));
        // Reads pass; a write of a missing object is its 404 first; an existing one is denied.
        assert_eq!(s.json(&admin, "GET", cms, "").await.status, 200);
        let missing = s.json(&admin, "DELETE", &format!("{cms}/nope"), "").await;
        assert_eq!(missing.status, 404);
        let kept = s.json(&admin, "DELETE", &format!("{cms}/kept"), "").await;
        assert_eq!(kept.status, 429);
        let patch =
            format!("PATCH {cms}/kept HTTP/1.1\r\nContent-Type: application/merge-patch+json");
        let patched = s
            .request(Some(&admin), patch.as_bytes(), br#"{"data":{"a":"b"}}"#)
            .await;
        assert_eq!(patched.status, 429);
        // With the webhook's retryAfterSeconds, Retry-After.
        let mut slow = Denial::too_many_requests("limit.example.com", "", "");
        slow.retry_after = Some(3);
        s.sim.admission.set("configmaps", Some(slow));
        let r = s.create_configmap(&admin, "y").await;
        assert_eq!((r.status, r.header("retry-after")), (429, Some("3")));
        s.sim.admission.set("configmaps", None);
        let r = s.create_configmap(&admin, "z").await;
        assert_eq!(r.status, 201);
        // A webhook on pods/eviction denies evictions, before the pod is even read.
        s.sim.admission.set(
            "pods/eviction",
            Some(Denial::too_many_requests("limit.example.com", "", "later")),
        );
        let r = s.evict(&admin, "nope").await;
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(r.header(FLOW_SCHEMA_UID).is_some());
    }
}
