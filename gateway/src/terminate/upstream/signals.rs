//! The apiserver's answers kubegate acts on (retries elsewhere, steers away from, holds, forgets
//! what a replica serves, ejects it for a moment), each matched exactly as the apiserver's own
//! code writes it — status, media type, body or `Status` fields — and only where the answer can
//! be the apiserver's own ([`Origin`]): never a workload's behind `*/proxy`, `log`, `exec` and
//! friends, never an extension server's behind an `APIService`, whose bytes may look the same.
//! docs/architecture.md ("Signals") lists each with the code it comes from. Anything else —
//! a handler's 429 after processing (a PodDisruptionBudget blocking an eviction, an admission
//! webhook's denial), a 503 of a tenant's pod — reaches the client once, as it came.

use crate::terminate::upstream::served::GroupVersions;
use arc_swap::ArcSwapOption;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderMap, StatusCode};
use kubegate_wire::answerer::Answerer;
use kubegate_wire::status::{self, Status};

/// What an answer said, of what kubegate acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// Priority and fairness (or max-in-flight) rejected the request before any handler ran:
    /// `tooManyRequests` (k8s.io/apiserver `server/filters/priority-and-fairness.go`; before
    /// 1.21 `maxinflight.go`) through Go's `http.Error`: 429, `text/plain; charset=utf-8`,
    /// `nosniff`, body "Too many requests, please try again later.\n".
    Rejected,
    /// The replica is shutting down and did not process the request: `withRetryAfter`
    /// (`server/filters/with_retry_after.go`, `--shutdown-send-retry-after`): 429 through
    /// `http.Error`, "The apiserver is shutting down, please try again later.\n", `Retry-After:
    /// 5`; or `waitGroupWriteRetryAfterToResponse` (`server/filters/waitgroup.go`): 503, a
    /// JSON `Status` `ServiceUnavailable` "apiserver is shutting down".
    ShuttingDown,
    /// Its watch cache is (re)initializing: the cacher's `errors.NewTooManyRequests`
    /// (`storage/cacher/cacher.go`, `ready.go`): 429, a `Status` `TooManyRequests` whose message
    /// is "storage is (re)initializing" (or that, a colon and the last error).
    Initializing,
    /// Its watch cache has not reached the resourceVersion asked for:
    /// `storage.NewTooLargeResourceVersionError` (`storage/errors.go`): 504, a `Status`
    /// `Timeout` with the cause `ResourceVersionTooLarge`.
    CacheBehind,
    /// Its storage failed the read: the etcd client's error passed on whole
    /// (`responsewriters.ErrorToAPIStatus`'s default: 500, a `Status` without a reason whose
    /// message is the client's), or wrapped by `errors.NewInternalError` (`InternalError`,
    /// "Internal error occurred: " and the error) — the client's errors begin `etcdserver: `
    /// or are gRPC's `Unavailable` and `DeadlineExceeded`.
    StorageFailed,
    /// No handler for the path: Go's `http.NotFound` from the apiserver's last handler
    /// (`util/notfoundhandler`, a group-version it does not serve: 404, `text/plain;
    /// charset=utf-8`, "404 page not found\n"), or go-restful's for a path within a served
    /// group-version without a route (`server/handler.go`, `serviceErrorHandler`: 404, a
    /// `Status` `NotFound` "the server could not find the requested resource" with empty
    /// details — an object that does not exist is named in its details).
    NoHandler,
    /// The request's credentials did not authenticate: the authentication filter's
    /// `Unauthorized` (`endpoints/filters/authentication.go`: 401, a `Status`
    /// `errors.NewUnauthorized("Unauthorized")`). A webhook's 401 says "admission webhook ...
    /// denied the request"; a pod's or an extension server's is not the apiserver's own.
    Unauthenticated,
}

/// Go's `http.Error` content type.
const TEXT: &str = "text/plain; charset=utf-8";
/// Largest answer read to tell what it says: every answer above is a few hundred bytes.
const MAX_SIGNAL: u64 = 16 * 1024;

/// Who wrote an answer, as far as the request tells (`kubegate_wire::answerer`), owned so
/// that a request carries it to every attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Origin {
    /// The apiserver's own handlers (a path that is no group-version's).
    #[default]
    Apiserver,
    /// A pod or kubelet behind the apiserver.
    Workload,
    /// A group-version's handlers: the apiserver's own, or an extension server's when an
    /// APIService with a service names it (the cluster's [`ExtensionApis`] tell).
    GroupVersion {
        /// The group.
        group: Box<str>,
        /// The version.
        version: Box<str>,
        /// A built-in group: the apiserver's own while the APIServices are not known.
        built_in: bool,
    },
}

impl From<Answerer<'_>> for Origin {
    fn from(a: Answerer<'_>) -> Origin {
        match a {
            Answerer::Apiserver => Origin::Apiserver,
            Answerer::Workload => Origin::Workload,
            Answerer::GroupVersion {
                group,
                version,
                built_in,
            } => Origin::GroupVersion {
                group: group.into(),
                version: version.into(),
                built_in,
            },
        }
    }
}

impl Origin {
    /// Whether an answer to a request of this origin is the apiserver's own, as far as the
    /// cluster's `extensions` tell: a group-version no APIService hands to an extension server
    /// (while they are not known, a built-in group's).
    pub fn answered_by_apiserver(&self, extensions: &ExtensionApis) -> bool {
        match self {
            Origin::Apiserver => true,
            Origin::Workload => false,
            Origin::GroupVersion {
                group,
                version,
                built_in,
            } => extensions
                .hands_off(group, version)
                .map_or(*built_in, |handed| !handed),
        }
    }
}

/// Which group-versions a cluster's APIServices hand to extension servers (`spec.service`
/// set): read with each replica's discovery (`versions`), alike on every replica (APIService
/// objects live in the cluster's store), kept across replicas' restarts and reloads. Unknown
/// until a replica's list was read (kubegate's identity may not list them).
#[derive(Default)]
pub struct ExtensionApis {
    /// Sorted group-versions, once known.
    handed_off: ArcSwapOption<GroupVersions>,
    /// Told when they first become known.
    learned: tokio::sync::Notify,
}

impl ExtensionApis {
    /// The replicas' APIServices hand `group_versions` to extension servers.
    pub fn learn(&self, mut group_versions: GroupVersions) {
        group_versions.sort();
        group_versions.dedup();
        if self.handed_off.load().as_deref() != Some(&group_versions) {
            self.handed_off
                .store(Some(std::sync::Arc::new(group_versions)));
            self.learned.notify_waiters();
        }
    }

    /// Completes once a list was read.
    pub async fn known(&self) {
        loop {
            let told = self.learned.notified();
            tokio::pin!(told);
            // Registered before the check: a list learned in between is not missed.
            told.as_mut().enable();
            if self.handed_off.load().is_some() {
                return;
            }
            told.await;
        }
    }

    /// Whether an APIService hands `group`/`version` to an extension server; `None` while no
    /// list was read.
    pub fn hands_off(&self, group: &str, version: &str) -> Option<bool> {
        let known = self.handed_off.load();
        let list = known.as_deref()?;
        Some(
            list.binary_search_by(|(g, v)| (g.as_ref(), v.as_ref()).cmp(&(group, version)))
                .is_ok(),
        )
    }
}

/// Whether an answer with `code` and `headers` may be one kubegate acts on, and so is worth
/// reading whole (small, of a media type the apiserver writes these in, its length known).
pub fn worth_reading(code: StatusCode, headers: &HeaderMap) -> bool {
    let acted_on = matches!(code.as_u16(), 401 | 404 | 429 | 500 | 503 | 504);
    let small = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= MAX_SIGNAL);
    let media = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| matches!(t, TEXT | status::JSON | status::PROTOBUF));
    acted_on && small && media
}

/// What an answer of the apiserver's own (its origin checked by the caller) said, read whole.
pub fn said(code: StatusCode, headers: &HeaderMap, body: &[u8]) -> Option<Said> {
    let content_type = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    if content_type == TEXT {
        return said_in_text(code, headers, body);
    }
    let s = status::read(content_type, body)?;
    if s.code != i64::from(code.as_u16()) || s.status != "Failure" {
        return None;
    }
    said_in_status(&s)
}

/// `http.Error`'s answers: exactly its headers and its body with `Fprintln`'s newline.
fn said_in_text(code: StatusCode, headers: &HeaderMap, body: &[u8]) -> Option<Said> {
    if headers.get(X_CONTENT_TYPE_OPTIONS)?.as_bytes() != b"nosniff" {
        return None;
    }
    match (code.as_u16(), body) {
        (429, b"Too many requests, please try again later.\n") => Some(Said::Rejected),
        (429, b"The apiserver is shutting down, please try again later.\n")
            if headers.get(RETRY_AFTER).is_some_and(|v| v == "5") =>
        {
            Some(Said::ShuttingDown)
        }
        (404, b"404 page not found\n") => Some(Said::NoHandler),
        _ => None,
    }
}

/// What a `Status` of the apiserver's own says.
pub fn said_in_status(s: &Status) -> Option<Said> {
    let causes = || s.details.iter().flat_map(|d| d.causes.iter());
    match (s.code, s.reason.as_str()) {
        (503, "ServiceUnavailable") if s.message == "apiserver is shutting down" => {
            Some(Said::ShuttingDown)
        }
        (429, "TooManyRequests")
            if s.message == "storage is (re)initializing"
                || s.message.starts_with("storage is (re)initializing: ") =>
        {
            Some(Said::Initializing)
        }
        (504, "Timeout") if causes().any(|c| c.reason == "ResourceVersionTooLarge") => {
            Some(Said::CacheBehind)
        }
        (500, "") if from_etcd(&s.message) => Some(Said::StorageFailed),
        (500, "InternalError")
            if s.message
                .strip_prefix("Internal error occurred: ")
                .is_some_and(from_etcd) =>
        {
            Some(Said::StorageFailed)
        }
        (401, "Unauthorized") if s.message == "Unauthorized" => Some(Said::Unauthenticated),
        (404, "NotFound")
            if s.message == "the server could not find the requested resource"
                && s.details.as_ref().is_none_or(|d| d.is_empty()) =>
        {
            Some(Said::NoHandler)
        }
        _ => None,
    }
}

/// Whether an error message is the etcd client's: its server's errors (`rpctypes`, "etcdserver:
/// request timed out", "etcdserver: leader changed") or gRPC's for an endpoint it cannot reach.
fn from_etcd(message: &str) -> bool {
    message.starts_with("etcdserver: ")
        || message.starts_with("rpc error: code = Unavailable")
        || message.starts_with("rpc error: code = DeadlineExceeded")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn text_headers(extra: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(TEXT));
        h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        for (k, v) in extra {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h
    }

    fn code(n: u16) -> StatusCode {
        StatusCode::from_u16(n).unwrap()
    }

    /// The bytes each of the apiserver's own answers is written in (docs/architecture.md,
    /// "Signals"), and what kubegate reads of it.
    #[test]
    fn the_apiservers_own_answers_are_read_exactly() {
        let pf = [
            ("retry-after", "4"),
            ("x-kubernetes-pf-prioritylevel-uid", "uid-global-default"),
        ];
        let table: &[(u16, HeaderMap, &[u8], Option<Said>)] = &[
            (429, text_headers(&pf), b"Too many requests, please try again later.\n", Some(Said::Rejected)),
            (429, text_headers(&[("retry-after", "1")]), b"Too many requests, please try again later.\n", Some(Said::Rejected)),
            (429, text_headers(&[("retry-after", "5"), ("connection", "close")]), b"The apiserver is shutting down, please try again later.\n", Some(Said::ShuttingDown)),
            (503, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiserver is shutting down","reason":"ServiceUnavailable","code":503}

"#, Some(Said::ShuttingDown)),
            (429, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}
"#, Some(Said::Initializing)),
            (429, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"storage is (re)initializing: etcd unavailable","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}
"#, Some(Said::Initializing)),
            (504, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 123, current: 100","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}
"#, Some(Said::CacheBehind)),
            (500, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: request timed out","code":500}
"#, Some(Said::StorageFailed)),
            (500, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: rpc error: code = Unavailable desc = connection refused","reason":"InternalError","details":{"causes":[{"message":"rpc error"}]},"code":500}
"#, Some(Said::StorageFailed)),
            (404, text_headers(&[]), b"404 page not found\n", Some(Said::NoHandler)),
            (404, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}
"#, Some(Said::NoHandler)),
            (401, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}
"#, Some(Said::Unauthenticated)),
        ];
        for (n, headers, body, want) in table {
            assert_eq!(
                said(code(*n), headers, body),
                *want,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// Answers that look like them but that a handler wrote after processing, or that name
    /// something else: none is acted on.
    #[test]
    fn answers_after_processing_and_look_alikes_say_nothing() {
        let table: &[(u16, HeaderMap, &[u8])] = &[
            // A PodDisruptionBudget blocking an eviction (eviction.go, checkAndDecrement).
            (429, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs 2 healthy pods and has 2 currently"}]},"code":429}
"#),
            // An admission webhook denying with code 429.
            (429, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"admission webhook \"quota.example.com\" denied the request: Too many requests, please try again later.","reason":"TooManyRequests","code":429}
"#),
            // The same words without http.Error's newline, type or nosniff.
            (429, text_headers(&[]), b"Too many requests, please try again later."),
            (429, json_headers(), b"Too many requests, please try again later.\n"),
            (429, { let mut h = text_headers(&[]); h.remove(X_CONTENT_TYPE_OPTIONS); h }, b"Too many requests, please try again later.\n"),
            // A shutdown message that is not the filter's.
            (503, text_headers(&[]), b"web-0 is shutting down\n"),
            (429, text_headers(&[("retry-after", "1")]), b"The apiserver is shutting down, please try again later.\n"),
            (503, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"web-0 is shutting down","reason":"ServiceUnavailable","code":503}"#),
            // Initializing only in a TooManyRequests Status.
            (503, json_headers(), br#"{"kind":"Status","status":"Failure","message":"storage is (re)initializing","reason":"ServiceUnavailable","code":503}"#),
            (429, json_headers(), br#"{"kind":"Status","status":"Failure","message":"my storage is (re)initializing","reason":"TooManyRequests","code":429}"#),
            // A timeout that is not the cache's.
            (504, json_headers(), br#"{"kind":"Status","status":"Failure","message":"Timeout: Too large resource version","reason":"Timeout","details":{},"code":504}"#),
            // A 500 that names no etcd error, or names one in the middle.
            (500, json_headers(), br#"{"kind":"Status","status":"Failure","message":"Internal error occurred: failed calling webhook: etcdserver: ","reason":"InternalError","code":500}"#),
            (500, json_headers(), br#"{"kind":"Status","status":"Failure","message":"conversion webhook: rpc error: code = Unavailable","code":500}"#),
            // An object that does not exist.
            (404, json_headers(), br#"{"kind":"Status","status":"Failure","message":"pods \"p\" not found","reason":"NotFound","details":{"name":"p","kind":"pods"},"code":404}"#),
            (404, json_headers(), br#"{"kind":"Status","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{"name":"p","kind":"pods"},"code":404}"#),
            // A webhook denying with 401.
            (401, json_headers(), br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"admission webhook \"x.example.com\" denied the request: Unauthorized","reason":"Unauthorized","code":401}"#),
            (401, text_headers(&[]), b"Unauthorized\n"),
            // A Status whose code is not the response's.
            (429, json_headers(), br#"{"kind":"Status","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","code":503}"#),
        ];
        for (n, headers, body) in table {
            assert_eq!(
                said(code(*n), headers, body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_protobuf_status_says_what_its_json_twin_says() {
        let pb = kubegate_wire::status::read(
            status::PROTOBUF,
            &kubegate_wire::testing::protobuf_status(
                "Timeout: Too large resource version: 9, current: 7",
                "Timeout",
                Some("ResourceVersionTooLarge"),
                504,
            ),
        )
        .unwrap();
        assert_eq!(said_in_status(&pb), Some(Said::CacheBehind));
    }

    #[test]
    fn an_answer_is_the_apiservers_own_unless_an_apiservice_hands_its_group_version_off() {
        let gv = |group: &str, version: &str, built_in| Origin::GroupVersion {
            group: group.into(),
            version: version.into(),
            built_in,
        };
        let ext = ExtensionApis::default();
        // Not known yet: the built-in groups only.
        assert!(gv("apps", "v1", true).answered_by_apiserver(&ext));
        assert!(!gv("widgets.example.com", "v1", false).answered_by_apiserver(&ext));
        assert!(Origin::Apiserver.answered_by_apiserver(&ext));
        assert!(!Origin::Workload.answered_by_apiserver(&ext));
        ext.learn(vec![
            ("metrics.k8s.io".into(), "v1beta1".into()),
            ("batch".into(), "v2".into()),
        ]);
        assert!(gv("widgets.example.com", "v1", false).answered_by_apiserver(&ext));
        assert!(!gv("metrics.k8s.io", "v1beta1", false).answered_by_apiserver(&ext));
        assert!(gv("batch", "v1", true).answered_by_apiserver(&ext));
        assert!(
            !gv("batch", "v2", true).answered_by_apiserver(&ext),
            "a built-in group's version an APIService hands off"
        );
    }

    #[test]
    fn only_small_answers_of_the_apiservers_media_types_are_read() {
        let mut h = json_headers();
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("180"));
        assert!(worth_reading(code(429), &h));
        assert!(!worth_reading(code(200), &h));
        assert!(!worth_reading(code(502), &h));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("100000"));
        assert!(!worth_reading(code(429), &h));
        h.remove(CONTENT_LENGTH);
        assert!(!worth_reading(code(429), &h), "a length unknown: a stream");
        let mut html = HeaderMap::new();
        html.insert(CONTENT_TYPE, HeaderValue::from_static("text/html"));
        html.insert(CONTENT_LENGTH, HeaderValue::from_static("10"));
        assert!(!worth_reading(code(503), &html));
    }
}
