//! kube-aggregator, the outermost of kube-apiserver's three servers: its `APIService`s
//! (`apiregistration.k8s.io/v1`, cluster-scoped), the legacy discovery it serves from them, and
//! its proxy to an extension server.
//!
//! **Which APIServices.** kube-apiserver registers one, local (no `spec.service`), for every
//! group-version its own server lists (`apiServicesToRegister`, kube-apiserver's
//! `aggregator.go`: `/api/v1` is `v1.`, `/apis/GROUP/VERSION` is `VERSION.GROUP`), with the
//! priorities of its `apiVersionPriorities` table (`makeAPIService`; a group-version without a
//! priority gets none), labelled `kube-aggregator.kubernetes.io/automanaged: onstart`
//! (kube-aggregator `pkg/controllers/autoregister`, `AddAPIServiceToSyncOnStart`). The
//! aggregator's own group gets none: its server is not the delegate that list is read from. A
//! custom resource's group-version gets a local one from the CRD registration controller
//! (kube-apiserver `pkg/controlplane/controller/crdregistration`: `groupPriorityMinimum`
//! 1000, `versionPriority` 100, `AddAPIServiceToSync`, label `true`). An extension server's
//! (`--aggregated-api`) is registered as a manifest does it (metrics-server's: priorities 100
//! and 100), with `spec.service` naming `kube-system/<first label of the group>-server`
//! port 443. Local ones are `Available` as `NewLocalAvailableAPIServiceCondition` says
//! (`Local`, "Local APIServices are always available"), the extension server's as the remote
//! availability controller says of one that answers (`Passed`, "all checks passed").
//!
//! **Discovery.** `/apis` is kube-aggregator's `apisHandler` (`handler_apis.go`): its own group
//! first ("It's good to be king"), then the APIServices' groups in `SortedByGroupAndVersion`
//! order (`groupPriorityMinimum` highest first, then by name; within a group
//! `versionPriority` highest first, then kube-aware version order); each group's first
//! version is preferred (`convertToDiscoveryAPIGroup`). `/apis/GROUP` is its
//! `apiGroupHandler` for a group with an APIService (`AddAPIService` registers one per group).
//!
//! **Proxy.** A request under an extension server's group-version (`/apis/GROUP/VERSION` and
//! below: `AddAPIService`'s `proxyPath`) reaches `proxyHandler.ServeHTTP`
//! (`handler_proxy.go`) after kube-apiserver's whole filter chain — authentication, priority
//! and fairness, authorization — ran: the aggregator's server is the outermost one and its
//! chain is kube-apiserver's (`CreateAggregatorConfig` copies the generic config). The
//! extension server's answer is passed on by `UpgradeAwareHandler` through
//! `httputil.ReverseProxy`: its status and body as they are, its headers *added* to those the
//! chain already set on the response (`copyHeader`: `Header.Add`), hop-by-hop ones dropped.
//! So `Cache-Control: no-cache, private` (`WithCacheControl`), `Audit-Id` and the
//! `X-Kubernetes-PF-*` headers of kube-apiserver come first, and an extension server that sets
//! its own (one built on k8s.io/apiserver runs priority and fairness too) adds a second value.
//! The stand-in answers what the fault port's `/aggregated-answer` set.

use crate::requestinfo::RequestInfo;
use crate::respond::{self, Reply};
use crate::state::Sim;
use crate::versions::Apis;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// The aggregator's own group.
pub const GROUP: &str = "apiregistration.k8s.io";
/// Its one version.
pub const VERSION: &str = "v1";
/// The label the autoregister controller marks its APIServices with.
const MANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// kube-apiserver's `apiVersionPriorities` (`aggregator.go`, with
/// `DefaultGenericAPIServicePriorities`) for the group-versions the simulator can serve:
/// group, version, `groupPriorityMinimum`, `versionPriority`. `resource.k8s.io/v1` (GA in
/// 1.34) takes 21, above `v1beta2`'s 15.
const PRIORITIES: [(&str, &str, i32, i32); 8] = [
    ("", "v1", 18000, 1),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("policy", "v1", 17100, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("resource.k8s.io", "v1", 16200, 21),
    ("resource.k8s.io", "v1beta1", 16200, 9),
];

/// Where an extension server's APIService sends requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The service's namespace.
    pub namespace: &'static str,
    /// The service's name.
    pub name: String,
    /// Its port.
    pub port: u16,
}

/// One APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiService {
    /// `spec.group` (`""`: core).
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
    /// `spec.service`: none for a local one.
    pub service: Option<ServiceRef>,
    /// The autoregister controller's label value (`onstart`, `true`), if it manages it.
    pub managed: Option<&'static str>,
}

impl ApiService {
    /// `VERSION.GROUP` (`v1.` for the core group).
    pub fn name(&self) -> String {
        format!("{}.{}", self.version, self.group)
    }
}

/// When the replica's APIServices were created: its first look at them (the autoregister
/// controller creates them as the server starts).
pub fn created_at() -> &'static str {
    static CREATED: OnceLock<String> = OnceLock::new();
    CREATED.get_or_init(crate::objects::now)
}

/// The APIServices of a replica serving `apis`, by name (etcd's key order, as a LIST answers).
pub fn api_services(apis: &Apis) -> Vec<ApiService> {
    let custom: Vec<(&str, &str)> = apis
        .resources()
        .filter(|r| r.custom)
        .map(|r| (r.group, r.version))
        .collect();
    let mut out: Vec<ApiService> = Vec::new();
    for (group, version) in apis.local_group_versions() {
        if group == GROUP {
            continue;
        }
        let (minimum, priority, managed) = if custom.contains(&(group, version)) {
            (1000, 100, "true")
        } else {
            match PRIORITIES
                .iter()
                .find(|(g, v, _, _)| *g == group && *v == version)
            {
                Some(&(_, _, m, p)) => (m, p, "onstart"),
                // `makeAPIService`: "Skipping APIService creation".
                None => continue,
            }
        };
        out.push(ApiService {
            group: group.to_string(),
            version: version.to_string(),
            group_priority_minimum: minimum,
            version_priority: priority,
            service: None,
            managed: Some(managed),
        });
    }
    for (group, version) in apis.aggregated() {
        let label = group.split('.').next().unwrap_or(group);
        out.push(ApiService {
            group: group.to_string(),
            version: version.to_string(),
            group_priority_minimum: 100,
            version_priority: 100,
            service: Some(ServiceRef {
                namespace: "kube-system",
                name: format!("{label}-server"),
                port: 443,
            }),
            managed: None,
        });
    }
    out.sort_by_key(ApiService::name);
    out
}

/// `helper.SortedByGroupAndVersion`: groups by `groupPriorityMinimum` (highest first, then
/// the APIService's name), each group's versions by `versionPriority` (highest first, then
/// kube-aware version order).
pub fn sorted_by_group_and_version(services: &[ApiService]) -> Vec<Vec<&ApiService>> {
    let mut by_group: Vec<&ApiService> = services.iter().collect();
    by_group.sort_by(|a, b| {
        b.group_priority_minimum
            .cmp(&a.group_priority_minimum)
            .then_with(|| a.name().cmp(&b.name()))
    });
    let mut out: Vec<Vec<&ApiService>> = Vec::new();
    for s in by_group {
        match out.iter_mut().find(|g| g[0].group == s.group) {
            Some(g) => {
                g.push(s);
                g.sort_by(|a, b| {
                    b.version_priority
                        .cmp(&a.version_priority)
                        .then_with(|| kube_aware_cmp(&b.version, &a.version))
                });
            }
            None => out.push(vec![s]),
        }
    }
    out
}

/// apimachinery's `version.CompareKubeAwareVersionStrings` as an ordering: `Greater` when `a`
/// sorts before `b` (GA over beta over alpha, then the higher major, then the higher minor;
/// kube-like versions over others, others in reverse lexical order).
fn kube_aware_cmp(a: &str, b: &str) -> CmpOrdering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (stage, minor) = if tail.is_empty() {
            return Some((2, major, 0));
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((stage, major, minor.parse().ok()?))
    }
    if a == b {
        return CmpOrdering::Equal;
    }
    match (parse(a), parse(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => CmpOrdering::Less,
        (Some(_), None) => CmpOrdering::Greater,
        (Some(x), Some(y)) => x.cmp(&y),
    }
}

/// One APIService as the apiserver encodes it (`spec.group` and `spec.service` omitted when
/// empty, as their `omitempty` tags say).
pub fn to_json(s: &ApiService, resource_version: usize) -> Value {
    let name = s.name();
    let mut metadata = json!({
        "name": name,
        "uid": crate::flowcontrol::uid_of(&format!("apiservice/{name}")),
        "resourceVersion": resource_version.to_string(),
        "creationTimestamp": created_at(),
    });
    if let Some(managed) = s.managed {
        metadata["labels"] = json!({MANAGED_LABEL: managed});
    }
    let mut spec = json!({
        "version": s.version,
        "groupPriorityMinimum": s.group_priority_minimum,
        "versionPriority": s.version_priority,
    });
    if !s.group.is_empty() {
        spec["group"] = json!(s.group);
    }
    let (reason, message) = match &s.service {
        None => ("Local", "Local APIServices are always available"),
        Some(svc) => {
            spec["service"] =
                json!({"namespace": svc.namespace, "name": svc.name, "port": svc.port});
            ("Passed", "all checks passed")
        }
    };
    json!({
        "kind": "APIService",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": metadata,
        "spec": spec,
        "status": {"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": created_at(),
            "reason": reason,
            "message": message,
        }]},
    })
}

/// Serves `/apis/apiregistration.k8s.io/v1/apiservices[/NAME[/status]]` for `info`, or `None`
/// for another path. A GET lists or reads them (a `Table` when `table`); they are the
/// replica's configuration here, so writes and watches are refused with go-restful's 405.
pub fn serve(apis: &Apis, method: &Method, info: &RequestInfo<'_>, table: bool) -> Option<Reply> {
    if !(info.resource_request && info.group == GROUP && info.version == VERSION) {
        return None;
    }
    if info.resource != "apiservices" || !info.namespace.is_empty() {
        return Some(go_restful_not_found());
    }
    if !matches!(info.subresource, "" | "status") {
        return Some(go_restful_not_found());
    }
    if !matches!(*method, Method::GET | Method::HEAD) || info.verb == "watch" {
        return Some(respond::status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        ));
    }
    let services = api_services(apis);
    let objects: Vec<Value> = services
        .iter()
        .enumerate()
        .map(|(i, s)| to_json(s, i + 1))
        .collect();
    let list_version = objects.len();
    if info.name.is_empty() {
        let body = if table {
            self::table(&objects, Some(list_version))
        } else {
            json!({
                "kind": "APIServiceList",
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": {"resourceVersion": list_version.to_string()},
                "items": objects,
            })
        };
        return Some(Reply::json(StatusCode::OK, &body));
    }
    Some(
        match objects
            .into_iter()
            .find(|o| o["metadata"]["name"] == info.name)
        {
            Some(o) if table => Reply::json(StatusCode::OK, &self::table(&[o], None)),
            Some(o) => Reply::json(StatusCode::OK, &o),
            None => respond::not_found(GROUP, "apiservices", info.name),
        },
    )
}

/// go-restful's answer for a path under a web service it has no route for (`handler.go`,
/// `serviceErrorHandler`: `NewGenericServerResponse(404, ...)`).
pub fn go_restful_not_found() -> Reply {
    respond::status(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

/// The APIService registry's `ConvertToTable` (kube-aggregator
/// `pkg/registry/apiservice/etcd/etcd.go`): Name, Service (`Local` or `NAMESPACE/NAME`),
/// Available, Age.
fn table(objects: &[Value], resource_version: Option<usize>) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let service = match o["spec"]["service"].as_object() {
                Some(s) => format!(
                    "{}/{}",
                    s["namespace"].as_str().unwrap_or(""),
                    s["name"].as_str().unwrap_or("")
                ),
                None => "Local".to_string(),
            };
            let available = &o["status"]["conditions"][0];
            let status = match (available["status"].as_str(), available["reason"].as_str()) {
                (Some("True"), _) => "True".to_string(),
                (Some(s), Some(r)) if !r.is_empty() => format!("{s} ({r})"),
                (Some(s), _) => s.to_string(),
                (None, _) => "Unknown".to_string(),
            };
            let age = crate::objects::age(&o["metadata"]["creationTimestamp"]);
            crate::objects::table_row(
                o,
                vec![
                    o["metadata"]["name"].clone(),
                    json!(service),
                    json!(status),
                    json!(age),
                ],
            )
        })
        .collect();
    let columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0}),
        json!({"name": "Service", "type": "string", "format": "", "description": "The reference to the service that hosts this API endpoint.", "priority": 0}),
        json!({"name": "Available", "type": "string", "format": "", "description": "Whether this service is available.", "priority": 0}),
        json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata", "priority": 0}),
    ];
    crate::objects::table_of(columns, rows, resource_version.map(|rv| rv.to_string()))
}

/// What the stand-in says without a body set, as metrics-server would with no metrics yet:
/// for its group-version's own path its `APIResourceList` (`nodes`, `pods`: a list with
/// resources, as client-go's discovery cache wants one), for a collection of those an empty
/// `NodeMetricsList` or `PodMetricsList`, else an empty `List`; JSON with the encoder's
/// newline.
pub fn default_body(group: &str, version: &str, path: &str) -> Bytes {
    let gv_path = format!("/apis/{group}/{version}");
    let rest = path
        .strip_prefix(gv_path.as_str())
        .unwrap_or_default()
        .trim_matches('/');
    let collection = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["namespaces", _, "pods"] | ["pods"] => Some("PodMetricsList"),
        ["nodes"] => Some("NodeMetricsList"),
        _ => None,
    };
    let body = if rest.is_empty() {
        let resource = |name: &str, namespaced: bool, kind: &str| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]});
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": format!("{group}/{version}"),
            "resources": [resource("nodes", false, "NodeMetrics"), resource("pods", true, "PodMetrics")],
        })
    } else if let Some(kind) = collection {
        json!({"kind": kind, "apiVersion": format!("{group}/{version}"), "metadata": {}, "items": []})
    } else {
        json!({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []})
    };
    let mut bytes = crate::gojson::to_vec(&body);
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// The extension group-version a path is under (`/apis/GROUP/VERSION` and below), if any.
pub fn aggregated_target<'a>(apis: &Apis, path: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = path.strip_prefix("/apis/")?;
    let mut parts = rest.splitn(3, '/');
    let (group, version) = (parts.next()?, parts.next()?);
    apis.is_aggregated(group, version)
        .then_some((group, version))
}

/// Headers `httputil.ReverseProxy` drops from a backend's answer (`hopHeaders`).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `proxyHandler.ServeHTTP` for a request under `group`/`version`: the stand-in's answer,
/// passed on after the chain's own headers.
pub async fn proxy(
    sim: &Sim,
    group: &str,
    version: &str,
    req: Request<Incoming>,
    path: &str,
) -> Reply {
    sim.requests.aggregated.fetch_add(1, Ordering::Relaxed);
    // The extension server reads the request's body; the stand-in ignores it.
    let _ = req.into_body().collect().await;
    let answer = sim.extension.get();
    let body = answer
        .body
        .unwrap_or_else(|| default_body(group, version, path));
    // `WithCacheControl` set its header before the proxy added the extension server's.
    let mut reply = Reply::new(answer.status, body).header("cache-control", respond::CACHE_CONTROL);
    if let Some(content_type) = answer.content_type {
        reply
            .headers
            .push((http::header::CONTENT_TYPE, content_type));
    }
    for (name, value) in answer.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            reply.headers.push((name, value));
        }
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::Answer;
    use http::{HeaderName, HeaderValue};

    /// The APIServices of a default replica: one per built-in group-version it serves.
    const BUILT_IN: [&str; 8] = [
        "v1.",
        "v1.authentication.k8s.io",
        "v1.authorization.k8s.io",
        "v1.coordination.k8s.io",
        "v1.discovery.k8s.io",
        "v1.kubegate.example.com",
        "v1.policy",
        "v1.resource.k8s.io",
    ];

    fn names(apis: &Apis) -> Vec<String> {
        api_services(apis).iter().map(ApiService::name).collect()
    }

    #[test]
    fn every_served_group_version_but_the_aggregators_own_has_one() {
        assert_eq!(names(&Apis::default()), BUILT_IN);
        let old = Apis::new("1.33.0", None, &["resource.k8s.io/v1beta1=true".into()])
            .unwrap()
            .with_aggregated(&["metrics.k8s.io/v1beta1".into()])
            .unwrap();
        let services = api_services(&old);
        let metrics = services
            .iter()
            .find(|s| s.name() == "v1beta1.metrics.k8s.io")
            .unwrap();
        assert_eq!(
            metrics.service,
            Some(ServiceRef {
                namespace: "kube-system",
                name: "metrics-server".into(),
                port: 443
            })
        );
        assert!(services
            .iter()
            .any(|s| s.name() == "v1beta1.resource.k8s.io"));
        assert!(!services.iter().any(|s| s.name() == "v1.resource.k8s.io"));
    }

    #[test]
    fn groups_and_versions_sort_as_the_aggregator_sorts_them() {
        let apis = Apis::new("1.35.0", None, &["resource.k8s.io/v1beta1=true".into()])
            .unwrap()
            .with_aggregated(&["metrics.k8s.io/v1beta1".into()])
            .unwrap();
        let services = api_services(&apis);
        let order: Vec<Vec<String>> = sorted_by_group_and_version(&services)
            .iter()
            .map(|g| g.iter().map(|s| s.name()).collect())
            .collect();
        assert_eq!(
            order,
            [
                vec!["v1."],
                vec!["v1.authentication.k8s.io"],
                vec!["v1.authorization.k8s.io"],
                vec!["v1.policy"],
                vec!["v1.coordination.k8s.io"],
                vec!["v1.discovery.k8s.io"],
                vec!["v1.resource.k8s.io", "v1beta1.resource.k8s.io"],
                vec!["v1.kubegate.example.com"],
                vec!["v1beta1.metrics.k8s.io"],
            ]
        );
    }

    #[test]
    fn versions_compare_kube_aware() {
        let mut v = vec![
            "v1beta1",
            "foo10",
            "v2",
            "v1",
            "v10",
            "v11alpha2",
            "v12alpha1",
            "v3beta1",
            "foo1",
            "v1beta2",
        ];
        v.sort_by(|a, b| kube_aware_cmp(b, a));
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v3beta1",
                "v1beta2",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn an_apiservice_is_encoded_as_the_apiserver_encodes_it() {
        let apis = Apis::default()
            .with_aggregated(&["metrics.k8s.io/v1beta1".into()])
            .unwrap();
        let services = api_services(&apis);
        let core = to_json(&services[0], 1);
        assert_eq!(
            core["spec"],
            json!({"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1})
        );
        assert_eq!(
            core["metadata"]["labels"],
            json!({MANAGED_LABEL: "onstart"})
        );
        let metrics = services.iter().find(|s| s.service.is_some()).unwrap();
        let v = to_json(metrics, 2);
        assert_eq!(
            v["spec"],
            json!({"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                   "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443}})
        );
        assert!(v["metadata"].get("labels").is_none());
        assert_eq!(v["status"]["conditions"][0]["reason"], "Passed");
        let crd = services
            .iter()
            .find(|s| s.group == "kubegate.example.com")
            .unwrap();
        assert_eq!(
            to_json(crd, 3)["metadata"]["labels"],
            json!({MANAGED_LABEL: "true"})
        );
    }

    #[test]
    fn the_default_answer_is_metrics_servers_discovery_and_an_empty_list_below() {
        assert_eq!(
            default_body("metrics.k8s.io", "v1beta1", "/apis/metrics.k8s.io/v1beta1"),
            Bytes::from_static(b"{\"apiVersion\":\"v1\",\"groupVersion\":\"metrics.k8s.io/v1beta1\",\"kind\":\"APIResourceList\",\"resources\":[{\"kind\":\"NodeMetrics\",\"name\":\"nodes\",\"namespaced\":false,\"singularName\":\"\",\"verbs\":[\"get\",\"list\"]},{\"kind\":\"PodMetrics\",\"name\":\"pods\",\"namespaced\":true,\"singularName\":\"\",\"verbs\":[\"get\",\"list\"]}]}\n")
        );
        assert_eq!(
            default_body(
                "metrics.k8s.io",
                "v1beta1",
                "/apis/metrics.k8s.io/v1beta1/namespaces/a/pods"
            ),
            Bytes::from_static(
                b"{\"apiVersion\":\"metrics.k8s.io/v1beta1\",\"items\":[],\"kind\":\"PodMetricsList\",\"metadata\":{}}\n"
            )
        );
        assert_eq!(
            default_body(
                "metrics.k8s.io",
                "v1beta1",
                "/apis/metrics.k8s.io/v1beta1/nodes/n1"
            ),
            Bytes::from_static(
                b"{\"apiVersion\":\"v1\",\"items\":[],\"kind\":\"List\",\"metadata\":{}}\n"
            )
        );
    }

    use crate::flowcontrol::{uid_of, FLOW_SCHEMA_UID, PRIORITY_LEVEL_UID};
    use crate::testserver::{admitted_json, TestServer};

    fn with_metrics(sim: &mut crate::state::Sim) {
        sim.apis = Apis::default()
            .with_aggregated(&["metrics.k8s.io/v1beta1".into()])
            .unwrap();
    }

    /// The raw values of header `name`, in the order they came.
    fn values(r: &crate::testserver::Raw, name: &str) -> Vec<String> {
        r.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn apiservices_are_listed_and_read_as_the_aggregator_serves_them() {
        let s = TestServer::start_with(with_metrics).await;
        let admin = s.admin();
        let base = "/apis/apiregistration.k8s.io/v1/apiservices";
        let r = s
            .json(&admin, "GET", &format!("{base}/v1.coordination.k8s.io"), "")
            .await;
        let (t, uid) = (created_at(), uid_of("apiservice/v1.coordination.k8s.io"));
        let body = format!("{{\"apiVersion\":\"apiregistration.k8s.io/v1\",\"kind\":\"APIService\",\"metadata\":{{\"creationTimestamp\":\"{t}\",\"labels\":{{\"kube-aggregator.kubernetes.io/automanaged\":\"onstart\"}},\"name\":\"v1.coordination.k8s.io\",\"resourceVersion\":\"4\",\"uid\":\"{uid}\"}},\"spec\":{{\"group\":\"coordination.k8s.io\",\"groupPriorityMinimum\":16500,\"version\":\"v1\",\"versionPriority\":15}},\"status\":{{\"conditions\":[{{\"lastTransitionTime\":\"{t}\",\"message\":\"Local APIServices are always available\",\"reason\":\"Local\",\"status\":\"True\",\"type\":\"Available\"}}]}}}}\n");
        assert_eq!((r.status, r.text()), (200, body.as_str()));
        assert_eq!(r.stable_headers(), admitted_json(body.len()));
        // The list, in name order, the extension server's with its service.
        let r = s.json(&admin, "GET", base, "").await;
        assert_eq!(r.status, 200);
        let list: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(list["kind"], "APIServiceList");
        assert_eq!(list["metadata"], json!({"resourceVersion": "9"}));
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [&BUILT_IN[..], &["v1beta1.metrics.k8s.io"]].concat());
        assert_eq!(
            list["items"][8]["spec"]["service"],
            json!({"namespace": "kube-system", "name": "metrics-server", "port": 443})
        );
        // kubectl get apiservices: the registry's Table.
        let head =
            format!("GET {base} HTTP/1.1\r\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io");
        let r = s.request(Some(&admin), head.as_bytes(), b"").await;
        let table: Value = serde_json::from_slice(&r.body).unwrap();
        let cells: Vec<Value> = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| json!([row["cells"][0], row["cells"][1], row["cells"][2]]))
            .collect();
        assert_eq!(cells[0], json!(["v1.", "Local", "True"]));
        assert_eq!(
            cells[8],
            json!([
                "v1beta1.metrics.k8s.io",
                "kube-system/metrics-server",
                "True"
            ])
        );
        // A name that is none, a write, a watch.
        let r = s.json(&admin, "GET", &format!("{base}/v1.apps"), "").await;
        assert_eq!(
            (r.status, r.text()),
            (404, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"apiservices.apiregistration.k8s.io \\\"v1.apps\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"v1.apps\",\"group\":\"apiregistration.k8s.io\",\"kind\":\"apiservices\"},\"code\":404}\n")
        );
        let method_not_allowed = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server does not allow this method on the requested resource\",\"reason\":\"MethodNotAllowed\",\"details\":{},\"code\":405}\n";
        for (method, path) in [
            ("DELETE", format!("{base}/v1.")),
            ("GET", format!("{base}?watch=1")),
        ] {
            let r = s.json(&admin, method, &path, "").await;
            assert_eq!(
                (r.status, r.text()),
                (405, method_not_allowed),
                "{method} {path}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_extension_servers_answer_comes_after_the_chains_headers() {
        let s = TestServer::start_with(with_metrics).await;
        let admin = s.admin();
        // Default: an empty list, JSON, after priority and fairness.
        let r = s
            .json(&admin, "GET", "/apis/metrics.k8s.io/v1beta1/nodes", "")
            .await;
        let body = "{\"apiVersion\":\"metrics.k8s.io/v1beta1\",\"items\":[],\"kind\":\"NodeMetricsList\",\"metadata\":{}}\n";
        assert_eq!((r.status, r.text()), (200, body));
        assert_eq!(r.stable_headers(), admitted_json(body.len()));
        // What the fault port sets: the extension server's own PF headers, Cache-Control and
        // Audit-Id are second values; hop-by-hop ones are dropped.
        s.sim.extension.set(Answer {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body: Some(Bytes::from_static(b"busy\n")),
            content_type: Some(HeaderValue::from_static("text/plain; charset=utf-8")),
            headers: [
                (FLOW_SCHEMA_UID, "ext-schema"),
                (PRIORITY_LEVEL_UID, "ext-level"),
                ("cache-control", "max-age=5"),
                ("audit-id", "ext-audit"),
                ("retry-after", "3"),
                ("connection", "close"),
                ("upgrade", "h2c"),
            ]
            .into_iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect(),
        });
        let head = b"GET /apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods?watch=1 HTTP/1.1\r\nAudit-ID: mine\r\nAuthorization: Bearer tok";
        let r = s.request(None, head, b"").await;
        assert_eq!((r.status, r.text()), (503, "busy\n"));
        let global = uid_of("global-default");
        assert_eq!(values(&r, FLOW_SCHEMA_UID), [global.as_str(), "ext-schema"]);
        assert_eq!(
            values(&r, PRIORITY_LEVEL_UID),
            [global.as_str(), "ext-level"]
        );
        assert_eq!(
            values(&r, "cache-control"),
            ["no-cache, private", "max-age=5"]
        );
        assert_eq!(values(&r, "audit-id"), ["mine", "ext-audit"]);
        assert_eq!(values(&r, "retry-after"), ["3"]);
        assert_eq!(values(&r, "content-type"), ["text/plain; charset=utf-8"]);
        assert!(values(&r, "connection").is_empty() && values(&r, "upgrade").is_empty());
        // The group-version's own path too; authorization before the proxy.
        let r = s
            .json(&admin, "GET", "/apis/metrics.k8s.io/v1beta1", "")
            .await;
        assert_eq!(r.status, 503);
        let r = s
            .request(
                None,
                b"GET /apis/metrics.k8s.io/v1beta1/nodes HTTP/1.1",
                b"",
            )
            .await;
        assert_eq!(r.status, 403);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap()["message"],
            "nodes.metrics.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
        );
        assert_eq!(s.sim.requests.aggregated.load(Ordering::Relaxed), 3);
        // Discovery lists it, as the aggregator's own handlers do.
        let r = s.json(&admin, "GET", "/apis/metrics.k8s.io", "").await;
        assert_eq!(
            (r.status, r.text()),
            (200, "{\"apiVersion\":\"v1\",\"kind\":\"APIGroup\",\"name\":\"metrics.k8s.io\",\"preferredVersion\":{\"groupVersion\":\"metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"},\"versions\":[{\"groupVersion\":\"metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"}]}\n")
        );
    }
}
