//! `pods/NAME[:PORT]/proxy[/PATH]`: the apiserver passing a request on to a pod and the pod's
//! answer back. The simulator's pods run nothing, so a stand-in answers for every pod what the
//! fault port's `/pod-answer` set (default: 200, `ok`, `text/plain; charset=utf-8`, what a Go
//! server writes for `ok`).
//!
//! As kube-apiserver does it (`pkg/registry/core/pod/rest/subresources.go`, `ProxyREST.Connect`,
//! and `pkg/registry/core/pod/strategy.go`, `ResourceLocation`): the name is split as
//! `[SCHEME:]NAME[:PORT]` (apimachinery `net.SplitSchemeNamePort`; another form, or a scheme
//! other than http/https, is 400 `invalid pod request "ID"`), the pod read (404 NotFound if
//! missing), its IP must be a global unicast address (else 400 `address not allowed`); then
//! apimachinery's `UpgradeAwareHandler.ServeHTTP` (`pkg/util/proxy/upgradeaware.go`):
//! a GET or HEAD of the bare `.../proxy` (no path, no trailing slash) is answered
//! 301 with `Location: <path>/[?query]` (`proxyRedirectsforRootPath`), anything else goes to
//! the pod through `httputil.ReverseProxy`, which answers with the pod's status, headers
//! (hop-by-hop ones dropped) and body. The proxy transport (`transport.go`) rewrites only
//! `Location` headers and `text/html` bodies; the stand-in sends neither a `Location` nor
//! should be set to `text/html` (its links would be rewritten, not modelled).
//!
//! `proxy` is a long-running subresource (`BasicLongRunningRequestCheck`), and priority and
//! fairness does not classify long-running requests other than watches
//! (`priority-and-fairness.go`, `Handle`: "Skip tracking long running non-watch requests"),
//! so these answers carry no `X-Kubernetes-PF-*` headers. The handler chain's own headers
//! are set before the proxy writes the pod's (`Cache-Control`, `Audit-Id`).

use crate::objects;
use crate::resources::{Target, PODS};
use crate::respond::{self, Reply};
use crate::state::Sim;
use crate::store_errors::store_error;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Serves `pods/ID/proxy...` for `target`; `path` is the request's decoded path, `query` its
/// raw query.
pub async fn serve(
    sim: &Sim,
    target: &Target<'_>,
    req: Request<Incoming>,
    path: &str,
    query: Option<&str>,
) -> Reply {
    sim.requests.proxied.fetch_add(1, Ordering::Relaxed);
    let (Some(namespace), Some(id)) = (target.namespace, target.name) else {
        return respond::not_found_text();
    };
    let Some(name) = split_scheme_name_port(id) else {
        return respond::status(
            400,
            "BadRequest",
            &format!("invalid pod request {id:?}"),
            None,
        );
    };
    let key = format!("{}{name}", PODS.prefix(Some(namespace)));
    let pod = match sim.store.get(&key).await {
        Ok(kv) => objects::from_store(&kv, &PODS),
        Err(e) => {
            let by_name = Target {
                name: Some(name),
                ..*target
            };
            return store_error(&by_name, name, e);
        }
    };
    if !pod_ip(&pod).is_some_and(global_unicast) {
        return respond::status(400, "BadRequest", "address not allowed", None);
    }
    let prefix = format!("api/v1/namespaces/{namespace}/pods/{id}/proxy");
    let subpath = path
        .trim_start_matches('/')
        .strip_prefix(&prefix)
        .unwrap_or_default();
    if subpath.is_empty() && matches!(*req.method(), Method::GET | Method::HEAD) {
        let query = query
            .filter(|q| !q.is_empty())
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let location = format!("{path}/{query}");
        return match HeaderValue::from_str(&location) {
            Ok(_) => Reply::new(StatusCode::MOVED_PERMANENTLY, Bytes::new())
                .header("location", &location),
            Err(_) => Reply::new(StatusCode::MOVED_PERMANENTLY, Bytes::new()),
        };
    }
    // The pod reads the request's body; the stand-in ignores it.
    let _ = req.into_body().collect().await;
    let answer = sim.pod_answer.get();
    let mut reply = Reply::new(answer.status, answer.body);
    if let Some(content_type) = answer.content_type {
        reply
            .headers
            .push((http::header::CONTENT_TYPE, content_type));
    }
    reply
}

/// apimachinery's `net.SplitSchemeNamePort`: `NAME`, `NAME:PORT` or `SCHEME:NAME:PORT` with
/// a non-empty name and a scheme of `""`, `http` or `https`; the name.
fn split_scheme_name_port(id: &str) -> Option<&str> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name) = match parts.as_slice() {
        [name] | [name, _] => ("", *name),
        [scheme, name, _] => (*scheme, *name),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some(name)
}

/// `getPodIP`: the first of `status.podIPs`, else `status.podIP`.
fn pod_ip(pod: &Value) -> Option<IpAddr> {
    let status = &pod["status"];
    status["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| status["podIP"].as_str())
        .and_then(|ip| ip.parse().ok())
}

/// Go's `net.IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local unicast or
/// the IPv4 broadcast address (private ranges are global unicast).
fn global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_answer::Answer;

    #[test]
    fn names_split_as_go_splits_them() {
        assert_eq!(split_scheme_name_port("web"), Some("web"));
        assert_eq!(split_scheme_name_port("web:8080"), Some("web"));
        assert_eq!(split_scheme_name_port("https:web:443"), Some("web"));
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn only_global_unicast_pod_addresses_are_proxied() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(global_unicast(ip("10.244.0.10")));
        assert!(global_unicast(ip("2001:db8::1")));
        for no in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "fe80::1",
        ] {
            assert!(!global_unicast(ip(no)), "{no}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pods_answer_comes_back_as_it_is_without_priority_and_fairness_headers() {
        use crate::testserver::{answer_headers, TestServer};
        let (s, admin) = TestServer::with_admin().await;
        s.pod(&admin, "web-0", r#"{"app":"web"}"#).await;
        let base = "/api/v1/namespaces/default/pods/web-0:8080/proxy";
        let r = s.json(&admin, "GET", &format!("{base}/healthz"), "").await;
        assert_eq!((r.status, r.text()), (200, "ok"));
        let user = [("x-kubegate-sim-user", "admin")];
        let text = "text/plain; charset=utf-8";
        assert_eq!(r.stable_headers(), answer_headers(text, 2, &user));
        s.sim.pod_answer.set(Answer {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body: Bytes::from_static(b"{\"busy\":true}"),
            content_type: Some(HeaderValue::from_static("application/json")),
        });
        let r = s
            .json(&admin, "POST", &format!("{base}/work?x=1"), r#"{"in":1}"#)
            .await;
        assert_eq!((r.status, r.text()), (503, "{\"busy\":true}"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("retry-after"), None);
        // The bare proxy path redirects a GET to itself with a slash.
        let r = s
            .json(
                &admin,
                "GET",
                "/api/v1/namespaces/default/pods/web-0/proxy?a=b",
                "",
            )
            .await;
        assert_eq!(r.status, 301);
        assert_eq!(
            r.header("location"),
            Some("/api/v1/namespaces/default/pods/web-0/proxy/?a=b")
        );
        assert_eq!(r.body, b"");
        assert_eq!(
            s.sim
                .requests
                .proxied
                .load(std::sync::atomic::Ordering::Relaxed),
            3
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_pod_or_a_bad_name_is_the_apiservers_answer() {
        use crate::testserver::TestServer;
        let (s, admin) = TestServer::with_admin().await;
        let r = s
            .json(
                &admin,
                "GET",
                "/api/v1/namespaces/default/pods/nope/proxy/",
                "",
            )
            .await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"nope\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"nope\",\"kind\":\"pods\"},\"code\":404}\n";
        assert_eq!((r.status, r.text()), (404, body));
        let r = s
            .json(
                &admin,
                "GET",
                "/api/v1/namespaces/default/pods/ftp:x:1/proxy/",
                "",
            )
            .await;
        assert_eq!(r.status, 400);
        assert!(
            r.text().contains("invalid pod request \\\"ftp:x:1\\\""),
            "{}",
            r.text()
        );
    }
}
