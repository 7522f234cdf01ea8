//! One request, through the apiserver's filter chain in its real order
//! (k8s.io/apiserver `pkg/server/config.go`, `DefaultBuildHandlerChain`, outermost first): the
//! shutdown filters (`WithRetryAfter`'s 429 with `--shutdown-send-retry-after`, outside
//! `WithCacheControl`; then `WithWaitGroup`'s and `WithWatchTerminationDuringShutdown`'s 503),
//! `Cache-Control`, authentication, priority and fairness, authorization, then the health
//! endpoints, kube-aggregator's proxy to an extension server, discovery, the APIServices, the
//! resource handlers, and for a path none of them serves the answer of whoever would have had
//! it (`no_handler`).

use crate::auth::{public_path, PeerCert, User};
use crate::flowcontrol::{self, Work};
use crate::health;
use crate::objects;
use crate::resources::{self, Target};
use crate::respond::{self, Body, Reply};
use crate::state::{Inflight, Sim};
use crate::store::{ReadFrom, StoreError};
use crate::store_errors::{storage_failed, store_error};
use crate::versions::Apis;
use crate::{aggregator, discovery, requestinfo, watch};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Largest request body accepted (the real limit is 3 MiB for most resources).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Serves one request for `peer` (the client certificate, if any).
pub async fn handle(
    sim: Arc<Sim>,
    peer: Option<&PeerCert>,
    req: Request<Incoming>,
) -> Response<Body> {
    // Dropped unfinished when the client resets the stream first, as hyper drops the service
    // future (and Go cancels the request's context).
    let unanswered = Unanswered(&sim.requests.abandoned);
    let mut reply = serve(&sim, peer, req).await;
    std::mem::forget(unanswered);
    // Every body byte it sends, whole or streamed (what a gateway's sharing saves it).
    let sent = &sim.requests.bytes_sent;
    match reply.stream.take() {
        None => {
            sent.fetch_add(reply.body.len() as u64, Ordering::Relaxed);
        }
        Some(stream) => {
            let counted = sim.clone();
            reply.stream = Some(
                stream
                    .map_frame(move |f| {
                        if let Some(d) = f.data_ref() {
                            let n = d.len() as u64;
                            counted.requests.bytes_sent.fetch_add(n, Ordering::Relaxed);
                        }
                        f
                    })
                    .boxed(),
            );
        }
    }
    reply.into_response()
}

/// A request whose answer has not begun: counted as abandoned if dropped so.
struct Unanswered<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

async fn serve(sim: &Arc<Sim>, peer: Option<&PeerCert>, req: Request<Incoming>) -> Reply {
    // Go's HTTP server hands the handler chain the decoded path; one it cannot decode never
    // gets that far.
    let Some(path) = crate::query::path(req.uri().path()) else {
        return Reply::new(StatusCode::BAD_REQUEST, "400 Bad Request")
            .header("content-type", "text/plain; charset=utf-8")
            .header("connection", "close");
    };
    let query = req.uri().query().map(str::to_string);
    let params = crate::query::params(query.as_deref());
    count_received(sim, req.method(), &path);

    // `WithRetryAfter` (with `--shutdown-send-retry-after`, once the delay has passed): every
    // request but the exempt ones, before anything else looks at it.
    let exempt = exempt_from_retry_after(&path, req.headers());
    if sim.retry_after.load(Ordering::Acquire) && !exempt {
        return respond::retry_after_shutdown();
    }
    respond::with_cache_control(filters(sim, peer, req, path, query, params, exempt).await)
}

/// Counts the request among `requests_received` (and `writes_received`), as received: the
/// health endpoints, which load balancers poll, are left out.
fn count_received(sim: &Sim, method: &Method, path: &str) {
    let health = ["/readyz", "/livez", "/healthz"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")));
    if health {
        return;
    }
    sim.requests.requests.fetch_add(1, Ordering::Relaxed);
    if matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        sim.requests.writes.fetch_add(1, Ordering::Relaxed);
    }
}

/// `isRequestExemptFromRetryAfter` (`with_retry_after.go`): a path beginning `/readyz`,
/// `/livez`, `/healthz` or `/metrics`, or a `User-Agent` beginning `kube-apiserver/` (its own
/// loopback client). `WithWaitGroup` exempts the same requests.
fn exempt_from_retry_after(path: &str, headers: &http::HeaderMap) -> bool {
    ["/readyz", "/livez", "/healthz", "/metrics"]
        .iter()
        .any(|p| path.starts_with(p))
        || headers
            .get(http::header::USER_AGENT)
            .is_some_and(|ua| ua.as_bytes().starts_with(b"kube-apiserver/"))
}

/// The chain inside `WithCacheControl`: the shutdown's 503s, then authentication.
async fn filters(
    sim: &Arc<Sim>,
    peer: Option<&PeerCert>,
    req: Request<Incoming>,
    path: String,
    query: Option<String>,
    params: Vec<(String, String)>,
    exempt: bool,
) -> Reply {
    let target = resources::parse(&path);
    let is_watch = is_watch(req.method(), &params, target.as_ref());
    if sim.rejecting.load(Ordering::Acquire) {
        // `WithWatchTerminationDuringShutdown` (only with a grace period) refuses new
        // watches; `WithWaitGroup` refuses what is neither long-running nor exempt.
        let refused = if is_watch {
            !sim.behaviour.watch_termination_grace.is_zero()
        } else {
            !resources::long_running_subresource(target.as_ref()) && !exempt
        };
        if refused {
            return respond::shutting_down();
        }
    }

    // Authentication. Unauthenticated and anonymous HTTP/2 connections serve one request
    // (`UnauthenticatedHTTP2DOSMitigation`): `Connection: close` becomes GOAWAY.
    let h2 = req.version() == http::Version::HTTP_2;
    let outcome =
        sim.authenticator
            .authenticate_at(peer, req.headers(), std::time::SystemTime::now());
    // The warning recorder wraps authentication: its warnings go out with any answer.
    let warned = |reply: Reply| match outcome.warning {
        Some(w) => reply.header("warning", w),
        None => reply,
    };
    let user = match outcome.user {
        Ok(user) => user,
        Err(ref why) => {
            tracing::debug!(error = %why, "unable to authenticate the request");
            if outcome.expired_certificate {
                sim.requests
                    .expired_certificates
                    .fetch_add(1, Ordering::Relaxed);
            }
            let reply = respond::status(401, "Unauthorized", "Unauthorized", None);
            return warned(if h2 {
                reply.header("connection", "close")
            } else {
                reply
            });
        }
    };
    // Who the replica found the request to be from, for tests of what a proxy passes on and
    // of answers shared between clients. Not an apiserver header.
    let name = user.name.clone();
    let reply = if h2 && !user.authenticated() {
        serve_as(sim, user, req, path, query, params, is_watch)
            .await
            .header("connection", "close")
    } else {
        serve_as(sim, user, req, path, query, params, is_watch).await
    };
    let reply = warned(reply);
    match http::HeaderValue::from_str(&name) {
        Ok(_) => reply.header("x-kubegate-sim-user", &name),
        Err(_) => reply,
    }
}

/// `watch` makes a GET a watch only for a collection (RequestInfoFactory: no name), read as
/// apimachinery converts a bool; the deprecated `/watch/` path verb is not served here.
fn is_watch(method: &Method, params: &[(String, String)], target: Option<&Target>) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        && crate::query::first(params, "watch").is_some_and(crate::query::truthy)
        && target.is_none_or(|t| t.name.is_none())
}

/// The rest of the filter chain, for an authenticated (or anonymous) `user`.
async fn serve_as(
    sim: &Arc<Sim>,
    user: User,
    req: Request<Incoming>,
    path: String,
    query: Option<String>,
    params: Vec<(String, String)>,
    is_watch: bool,
) -> Reply {
    // Health endpoints answer at once (injected latency models slow request handling, not a
    // slow process).
    if let Some(reply) = health::answer(&sim.checks, &path, query.as_deref()) {
        return reply;
    }
    let latency = sim.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }

    // Priority and fairness, between authentication and authorization: every request but a
    // long-running one other than a watch (a pod's exec, attach, portforward, log, proxy).
    let target = resources::parse(&path);
    let long_running = resources::long_running_subresource(target.as_ref());
    // A path the simulator has no resource for (an extension server's, the aggregator's) is
    // classified by what `RequestInfo` reads from it, as the apiserver classifies all.
    let info = requestinfo::parse(req.method(), &path, crate::query::first(&params, "watch"));
    let attrs = flowcontrol::Attributes {
        user: &user,
        verb: match target {
            Some(_) => verb(req.method(), is_watch, target.as_ref()),
            None => info.verb.as_str(),
        },
        resource: target
            .as_ref()
            .map(|t| (t.resource.group, t.resource.plural))
            .or(info.resource_request.then_some((info.group, info.resource))),
        namespace: target
            .as_ref()
            .and_then(|t| t.namespace)
            .or((!info.namespace.is_empty()).then_some(info.namespace)),
    };
    let work = match *req.method() {
        _ if is_watch => Work::Watch,
        Method::GET if target.as_ref().is_some_and(|t| t.name.is_none()) => Work::List,
        Method::GET if target.is_none() && info.verb == "list" => Work::List,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => Work::Write {
            watchers: sim.watches.load(Ordering::Relaxed).max(0) as usize,
        },
        _ => Work::Other,
    };
    let admitted = if long_running {
        None
    } else {
        match sim.flowcontrol.admit(&attrs, work).await {
            Ok(admitted) => Some(admitted),
            Err(rejection) => return rejection,
        }
    };
    // A watch holds its seat while it initializes: until its response starts.
    let reply = handlers(sim, &user, req, &path, query.as_deref(), &params, is_watch).await;
    if work == Work::List && reply.status.is_success() && reply.stream.is_none() {
        sim.flowcontrol.listed(&attrs, reply.body.len());
    }
    match admitted {
        Some(admitted) => admitted.headers(reply),
        None => reply,
    }
}

/// The verb authorization and priority and fairness name a request by.
fn verb(method: &Method, is_watch: bool, target: Option<&Target>) -> &'static str {
    let collection = target.is_some_and(|t| t.name.is_none());
    match *method {
        _ if is_watch => "watch",
        Method::GET | Method::HEAD if collection => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// Authorization, then the handlers.
async fn handlers(
    sim: &Arc<Sim>,
    user: &User,
    req: Request<Incoming>,
    path: &str,
    query: Option<&str>,
    params: &[(String, String)],
    is_watch: bool,
) -> Reply {
    let param = |k: &str| crate::query::first(params, k);
    // Authorization: the default RBAC, in miniature, of what `RequestInfo` reads from the
    // path (whoever serves it, or nobody).
    let info = requestinfo::parse(req.method(), path, param("watch"));
    if !user.authenticated() && !public_path(path) {
        return forbidden(user, &info);
    }
    if info.resource_request
        && !sim
            .authenticator
            .allows(&user.name, &user.groups, Some(info.resource), path)
    {
        return forbidden(user, &info);
    }
    if req.method() == Method::GET {
        match path {
            "/metrics" => {
                return Reply::new(StatusCode::OK, sim.flowcontrol.metrics())
                    .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            }
            "/debug/api_priority_and_fairness/dump_priority_levels" => {
                return Reply::new(StatusCode::OK, sim.flowcontrol.dump_priority_levels())
                    .header("content-type", "text/plain; charset=utf-8")
            }
            _ => {}
        }
    }

    // kube-aggregator's proxy to an extension server: the whole path under its group-version.
    if let Some((group, version)) = aggregator::aggregated_target(&sim.apis, path) {
        let _inflight = (!is_watch).then(|| Inflight::new(&sim.inflight));
        return aggregator::proxy(sim, group, version, req, path).await;
    }
    if let Some(reply) =
        discovery::answer(path, &sim.apis).or_else(|| crate::openapi::answer(path, &sim.apis))
    {
        return reply;
    }
    if info.resource_request && info.group == aggregator::GROUP {
        if let Some(down) = storage_down(sim, true).await {
            return down;
        }
        if let Some(reply) = aggregator::serve(&sim.apis, req.method(), &info, wants_table(&req)) {
            return reply;
        }
    }
    if req.method() == Method::POST && path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
        return self_subject_review(user);
    }
    if req.method() == Method::POST && path == "/apis/authentication.k8s.io/v1/tokenreviews" {
        return token_review(sim, user, req).await;
    }
    if req.method() == Method::POST && path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    {
        return subject_access_review(sim, user, req).await;
    }
    // No resource of a group-version this replica serves: whoever would have had the path
    // answers that nothing is there (`no_handler`).
    let Some(target) = resources::parse(path).filter(|t| sim.apis.serves(t.resource)) else {
        return no_handler(&sim.apis, &info, path);
    };
    if let (Some(sub), Some(_), Some(_)) = (target.subresource, target.namespace, target.name) {
        if target.resource != &crate::resources::PODS {
            return unknown_subresource(&target);
        }
        if sub == "proxy" {
            return crate::proxy::serve(sim, &target, req, path, query).await;
        }
    }
    if let (Some(sub @ ("exec" | "attach" | "portforward" | "log")), Some(ns), Some(name)) =
        (target.subresource, target.namespace, target.name)
    {
        let key = format!("{}{name}", target.resource.prefix(Some(ns)));
        let pod = match sim.store.get(&key).await {
            Ok(kv) => objects::from_store(&kv, target.resource),
            Err(e) => return store_error(&target, name, e),
        };
        return crate::pods::subresource(sim, &pod, sub, req, params);
    }
    if req.method() == Method::GET && target.name.is_none() {
        let counter = if is_watch {
            &sim.requests.watches
        } else {
            &sim.requests.lists
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if is_watch && param("sendInitialEvents").is_some_and(crate::query::truthy) {
            sim.requests.watch_lists.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Until the resource's watch cache is initialised (at start — a custom resource's later
    // than the built-in ones' — or again after its etcd watch failed), reads it serves (LIST,
    // WATCH) get 429 with Retry-After: 1, as the apiserver's cacher answers meanwhile.
    if req.method() == Method::GET
        && target.name.is_none()
        && sim.checks.cache_initializing_for(target.resource.custom)
    {
        return respond::status(
            429,
            "TooManyRequests",
            "storage is (re)initializing",
            Some(json!({"retryAfterSeconds": 1})),
        )
        .header("retry-after", "1");
    }
    // etcd unreachable (or forced failing): requests that need storage time out against it.
    // A new watch too: the simulator has no watch cache to start it from.
    if let Some(down) = storage_down(sim, !is_watch).await {
        return down;
    }
    if is_watch && req.method() == Method::GET {
        let encoding = if wants_table(&req) {
            watch::Encoding::Table
        } else if accepts_protobuf(&req) && crate::protobuf::encodes(target.resource.kind) {
            watch::Encoding::Protobuf
        } else {
            watch::Encoding::Json
        };
        return watch::serve(sim.clone(), &target, params, encoding).await;
    }
    let _inflight = Inflight::new(&sim.inflight);
    let table = wants_table(&req);
    let dry_run = param("dryRun").is_some();
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let protobuf = content_type.starts_with("application/vnd.kubernetes.protobuf");
    let mut body = match read_body(req).await {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    if target.subresource == Some("eviction") {
        if method != Method::POST {
            return method_not_allowed();
        }
        let (Some(namespace), Some(name)) = (target.namespace, target.name) else {
            return method_not_allowed();
        };
        let eviction = crate::eviction::Request {
            namespace,
            name,
            content_type: &content_type,
            body: &body,
            dry_run,
        };
        return crate::eviction::evict(sim, eviction).await;
    }
    if target.subresource.is_some() {
        return unknown_subresource(&target);
    }
    if method == Method::PATCH {
        return patch(sim, &target, &content_type, &body, dry_run).await;
    }
    if protobuf && !body.is_empty() && method != Method::DELETE {
        body = match crate::protobuf::decode(&body) {
            Ok(v) => Bytes::from(serde_json::to_vec(&v).expect("json")),
            Err(why) => return respond::status(400, "BadRequest", &why, None),
        };
    }
    let listing = Listing {
        label_selector: param("labelSelector"),
        limit: param("limit")
            .and_then(|l| l.parse::<i64>().ok())
            .filter(|l| *l > 0)
            .and_then(|l| usize::try_from(l).ok()),
        continue_token: param("continue").filter(|c| !c.is_empty()),
        resource_version: param("resourceVersion"),
        resource_version_match: param("resourceVersionMatch"),
        field_selector: param("fieldSelector"),
    };
    resource(sim, &target, &method, &body, table, dry_run, listing).await
}

/// What a LIST asks for: which objects, and in what pages.
#[derive(Clone, Copy)]
struct Listing<'a> {
    /// `labelSelector`.
    label_selector: Option<&'a str>,
    /// `limit`: objects a page at most.
    limit: Option<usize>,
    /// `continue`: the page to go on from.
    continue_token: Option<&'a str>,
    /// `resourceVersion`, as given.
    resource_version: Option<&'a str>,
    /// `resourceVersionMatch`, as given.
    resource_version_match: Option<&'a str>,
    /// `fieldSelector` (not applied by the simulator: it only leaves `remainingItemCount`
    /// out, as any selector does).
    field_selector: Option<&'a str>,
}

impl Listing<'_> {
    /// The revision a first page is read at exactly: `resourceVersionMatch=Exact`, or (the
    /// legacy rule, `delegator.ShouldDelegateList`) a `limit` with a `resourceVersion` other
    /// than `""` and `"0"` and no match given.
    fn exact_revision(&self) -> Option<i64> {
        let revision = self
            .resource_version
            .filter(|v| !v.is_empty() && *v != "0")?
            .parse()
            .ok()?;
        let exact = match self.resource_version_match {
            Some("Exact") => true,
            None | Some("") => self.limit.is_some(),
            Some(_) => false,
        };
        exact.then_some(revision)
    }
}

/// A `UserInfo` as the apiserver encodes it (`uid` omitted when empty).
fn user_info(user: &User) -> serde_json::Value {
    let mut info = json!({
        "username": user.name,
        "groups": user.groups,
        "extra": user.extra,
    });
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    info
}

/// `kubectl auth whoami`: the user as this replica authenticated it.
fn self_subject_review(user: &User) -> Reply {
    Reply::json(
        StatusCode::CREATED,
        &json!({
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "status": {"userInfo": user_info(user)},
        }),
    )
}

/// The review of `kind` in `group` a request carries, once its sender may ask for one
/// (`--authorization-token-reviewers`): else the apiserver's 403, or its 400 for a body that
/// is not JSON.
async fn review_of(
    sim: &Sim,
    user: &User,
    req: Request<Incoming>,
    kind: &str,
    group: &str,
) -> Result<Value, Reply> {
    let reviewers = &sim.authenticator.token_reviewers;
    if !reviewers.is_empty() && !reviewers.contains(&user.name) {
        let resource = format!("{}s", kind.to_lowercase());
        return Err(respond::status(
            403,
            "Forbidden",
            &format!("{resource}.{group} is forbidden: User \"{}\" cannot create resource \"{resource}\" in API group \"{group}\" at the cluster scope", user.name),
            Some(json!({"group": group, "kind": resource})),
        ));
    }
    let body = read_body(req).await?;
    serde_json::from_slice(&body)
        .map_err(|e| respond::status(400, "BadRequest", &format!("{kind}: {e}"), None))
}

/// A TokenReview: who the token in its spec belongs to, by this replica's authenticator (its
/// static tokens), for a user allowed to ask (`--authorization-token-reviewers`).
async fn token_review(sim: &Sim, user: &User, req: Request<Incoming>) -> Reply {
    let review = match review_of(sim, user, req, "TokenReview", "authentication.k8s.io").await {
        Ok(review) => review,
        Err(reply) => return reply,
    };
    let Some(token) = review["spec"]["token"].as_str().filter(|t| !t.is_empty()) else {
        return respond::status(
            422,
            "Invalid",
            "TokenReview.authentication.k8s.io \"\" is invalid: spec.token: Required value: token must be provided",
            None,
        );
    };
    sim.requests.token_reviews.fetch_add(1, Ordering::Relaxed);
    let status = match sim.authenticator.tokens.user(token) {
        Some(u) => json!({
            "authenticated": true,
            "user": {"username": u.name, "uid": u.uid, "groups": u.groups},
            "audiences": ["https://kubernetes.default.svc.cluster.local"],
        }),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Reply::json(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": {"token": token},
            "status": status,
        }),
    )
}

/// A SubjectAccessReview: whether the user in its spec may do what its attributes say, by
/// this replica's authorization ([`crate::auth::Authenticator::allows`]), for a user allowed to
/// ask (`--authorization-token-reviewers`, the stand-in for `system:auth-delegator`).
async fn subject_access_review(sim: &Sim, user: &User, req: Request<Incoming>) -> Reply {
    let review = match review_of(
        sim,
        user,
        req,
        "SubjectAccessReview",
        "authorization.k8s.io",
    )
    .await
    {
        Ok(review) => review,
        Err(reply) => return reply,
    };
    let spec = &review["spec"];
    let (resource, non_resource) = (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
    let name = spec["user"].as_str().unwrap_or_default();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    if name.is_empty() && groups.is_empty() || resource.is_null() == non_resource.is_null() {
        return respond::status(
            422,
            "Invalid",
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec.user: Invalid value: \"\": at least one of user or group must be specified, spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified]",
            None,
        );
    }
    sim.requests.access_reviews.fetch_add(1, Ordering::Relaxed);
    let allowed = match resource.as_object() {
        Some(r) => sim.authenticator.allows(
            name,
            &groups,
            Some(
                r.get("resource")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            "",
        ),
        None => sim.authenticator.allows(
            name,
            &groups,
            None,
            non_resource["path"].as_str().unwrap_or_default(),
        ),
    };
    let mut status = json!({"allowed": allowed});
    if !allowed {
        status["reason"] = json!("no RBAC policy matched");
    }
    Reply::json(
        StatusCode::CREATED,
        &json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status,
        }),
    )
}

fn accepts_protobuf(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/vnd.kubernetes.protobuf"))
}

fn wants_table(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, Reply> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(_) => Err(respond::status(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
            None,
        )),
    }
}

/// Authorization's 403 (k8s.io/apiserver `endpoints/handlers/responsewriters/errors.go`,
/// `Forbidden` → `ForbiddenStatusError`, `forbiddenMessage`): `X-Content-Type-Options:
/// nosniff`, and `NewForbidden`'s `Status` for the request's group, resource and name, its
/// message HTML-sanitized (`&`, `<`, `>` as entities). The authorizers give no reason.
fn forbidden(user: &User, info: &requestinfo::RequestInfo<'_>) -> Reply {
    let who = go_quote(&user.name);
    let verb = &info.verb;
    let message = if !info.resource_request {
        format!("User {who} cannot {verb} path {}", go_quote(info.path))
    } else {
        let resource = if info.subresource.is_empty() {
            info.resource.to_string()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        let (resource, group) = (go_quote(&resource), go_quote(info.group));
        if info.namespace.is_empty() {
            format!("User {who} cannot {verb} resource {resource} in API group {group} at the cluster scope")
        } else {
            format!(
                "User {who} cannot {verb} resource {resource} in API group {group} in the namespace {}",
                go_quote(info.namespace)
            )
        }
    };
    let message = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let qualified = info.qualified_resource();
    let message = match (qualified.is_empty(), info.name.is_empty()) {
        (true, _) => format!("forbidden: {message}"),
        (false, true) => format!("{qualified} is forbidden: {message}"),
        (false, false) => format!(
            "{qualified} {} is forbidden: {message}",
            go_quote(info.name)
        ),
    };
    respond::status(
        403,
        "Forbidden",
        &message,
        Some(json!({"name": info.name, "group": info.group, "kind": info.resource})),
    )
    .header("x-content-type-options", "nosniff")
}

/// Go's `%q` of a string: double quotes around it, `"` and `\` escaped, control characters
/// as escapes.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// etcd unreachable (or the `etcd` check forced failing): a request that needs storage waits
/// out the client's attempt (1 s here) and gets [`storage_failed`]; one that is not
/// long-running (`counted`) is in flight meanwhile, as `WithWaitGroup` counts it.
async fn storage_down(sim: &Sim, counted: bool) -> Option<Reply> {
    sim.checks
        .failure(crate::checks::Endpoint::Readyz, "etcd")?;
    let _inflight = counted.then(|| Inflight::new(&sim.inflight));
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    Some(storage_failed("etcdserver: request timed out"))
}

/// What the handler chain answers for a request no handler took (`pkg/server/handler.go`,
/// `director.ServeHTTP`). A path under a go-restful web service's root — `/api` (legacy
/// discovery's, covering everything below it) or `/apis/GROUP/VERSION` of a built-in
/// group-version served here — is go-restful's: no route is its 404 (`serviceErrorHandler`,
/// `NewGenericServerResponse`: "the server could not find the requested resource", empty
/// details). A custom resource's group-version is apiextensions-apiserver's `crdHandler`
/// ([`crd_not_found`]). Anything else — a group-version nobody serves, a group no APIService
/// names, any other path — passes kube-aggregator's mux, kube-apiserver's and
/// apiextensions-apiserver's (whose `crdHandler` finds no CRD for it and delegates) down to the
/// last delegate, `notfoundhandler`: Go's `http.NotFound`.
fn no_handler(apis: &Apis, info: &requestinfo::RequestInfo<'_>, path: &str) -> Reply {
    if path == "/api" || path.starts_with("/api/") {
        return aggregator::go_restful_not_found();
    }
    if let Some(rest) = path.strip_prefix("/apis/") {
        let mut parts = rest.split('/');
        if let (Some(group), Some(version)) = (parts.next(), parts.next()) {
            let custom = apis
                .resources()
                .any(|r| r.custom && r.group == group && r.version == version);
            if custom {
                return crd_not_found(apis, info);
            }
            if apis.serves_locally(group, version) {
                return aggregator::go_restful_not_found();
            }
        }
    }
    respond::not_found_text()
}

/// `crdHandler.ServeHTTP` (apiextensions-apiserver `pkg/apiserver/customresource_handler.go`)
/// for a path of a custom resource's group-version the simulator has no route for: no CRD of
/// that resource, or a namespaced one asked for without a namespace by a verb other than
/// `list`/`watch`, is delegated to the not-found handler; a subresource the CRD does not have
/// (the simulator's has none) is `NewNotFound` for the object.
fn crd_not_found(apis: &Apis, info: &requestinfo::RequestInfo<'_>) -> Reply {
    let crd = apis.resources().find(|r| {
        r.custom && r.group == info.group && r.version == info.version && r.plural == info.resource
    });
    match crd {
        Some(r)
            if info.resource_request
                && !info.subresource.is_empty()
                && (!info.namespace.is_empty()
                    || matches!(info.verb.as_str(), "list" | "watch")) =>
        {
            respond::not_found(r.group, r.plural, info.name)
        }
        _ => respond::not_found_text(),
    }
}

/// A subresource the simulator does not serve: go-restful's 404 for a built-in resource, the
/// object's `NotFound` for a custom one ([`crd_not_found`]).
fn unknown_subresource(target: &Target<'_>) -> Reply {
    if target.resource.custom {
        respond::not_found(
            target.resource.group,
            target.resource.plural,
            target.name.unwrap_or_default(),
        )
    } else {
        aggregator::go_restful_not_found()
    }
}

/// A LIST, whole or a page of it: a first page read now (or at the exact revision it names), a
/// continue page at its first page's revision (from the watch cache's memory while the
/// revision is within its window, else from etcd), counted by where it was read.
async fn list(
    sim: &Sim,
    target: &Target<'_>,
    prefix: &str,
    table: bool,
    listing: Listing<'_>,
) -> Reply {
    let r = target.resource;
    let (kvs, revision, start) = match listing.continue_token {
        None => {
            let exact = listing.exact_revision();
            let read = match exact {
                Some(at) => sim
                    .store
                    .list_at(prefix, at)
                    .await
                    .map(|(kvs, _)| (kvs, at)),
                None => sim.store.list(prefix).await,
            };
            match read {
                Ok((kvs, revision)) => (kvs, revision, String::new()),
                Err(StoreError::Compacted { .. }) if exact.is_some() => {
                    return crate::paging::list_too_old();
                }
                Err(e) => return store_error(target, "", e),
            }
        }
        Some(token) => {
            let (start, at) = match crate::paging::decode(token, prefix) {
                Ok(decoded) => decoded,
                Err(why) => return crate::paging::invalid_token(&why),
            };
            if listing
                .resource_version
                .is_some_and(|v| !v.is_empty() && v != "0")
            {
                return crate::paging::with_resource_version();
            }
            // A negative revision asks for the rest as it is now.
            let read = if at < 0 {
                sim.store
                    .list(prefix)
                    .await
                    .map(|(kvs, now)| (kvs, now, None))
            } else {
                sim.store
                    .list_at(prefix, at)
                    .await
                    .map(|(kvs, from)| (kvs, at, Some(from)))
            };
            match read {
                Ok((kvs, revision, from)) => {
                    let counter = match from {
                        Some(ReadFrom::Cache) => &sim.requests.continue_pages_from_cache,
                        _ => &sim.requests.continue_pages_from_storage,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    (kvs, revision, start)
                }
                Err(StoreError::Compacted { .. }) => {
                    sim.requests
                        .continue_pages_expired
                        .fetch_add(1, Ordering::Relaxed);
                    return crate::paging::expired(&start, prefix);
                }
                Err(e) => return store_error(target, "", e),
            }
        }
    };
    let keys = kvs
        .into_iter()
        .map(|kv| {
            let object = objects::from_store(&kv, r);
            let kept = crate::selectors::matches_labels(&object, listing.label_selector);
            (kv.key, kept.then_some(object))
        })
        .collect();
    // The watch cache answers `resourceVersion=0` whole: the cacher's `computeListLimit`
    // drops the limit of a LIST it serves from memory at any revision.
    let limit = match (listing.resource_version, listing.continue_token) {
        (Some("0"), None) if sim.store.is_cache() => None,
        _ => listing.limit,
    };
    let page = crate::paging::cut(keys, &start, limit.unwrap_or(usize::MAX));
    let mut answer = if table {
        objects::table(r, &page.items, Some(revision))
    } else {
        objects::list(r, page.items, revision)
    };
    if let Some(token) = page
        .next
        .and_then(|next| crate::paging::encode(&next, prefix, revision))
    {
        answer["metadata"]["continue"] = json!(token);
        // Unknown once a selector filters what follows.
        let unfiltered = |selector: Option<&str>| selector.is_none_or(str::is_empty);
        if unfiltered(listing.label_selector) && unfiltered(listing.field_selector) {
            answer["metadata"]["remainingItemCount"] = json!(page.remaining);
        }
    }
    Reply::json(StatusCode::OK, &answer)
}

async fn resource(
    sim: &Sim,
    target: &Target<'_>,
    method: &Method,
    body: &[u8],
    table: bool,
    dry_run: bool,
    listing: Listing<'_>,
) -> Reply {
    let r = target.resource;
    let store = &sim.store;
    match (method, target.namespace, target.name) {
        (&Method::GET, ns, None) => list(sim, target, &r.prefix(ns), table, listing).await,
        (&Method::GET, Some(ns), Some(name)) => {
            match store.get(&format!("{}{name}", r.prefix(Some(ns)))).await {
                Ok(kv) => {
                    let obj = objects::from_store(&kv, r);
                    if table {
                        Reply::json(StatusCode::OK, &objects::table(r, &[obj], None))
                    } else {
                        Reply::json(StatusCode::OK, &obj)
                    }
                }
                Err(e) => store_error(target, name, e),
            }
        }
        (&Method::POST, Some(ns), None) => {
            let (mut obj, name) = match objects::prepare_create(r, ns, body) {
                Ok(v) => v,
                Err(why) => return invalid(target, "", &why),
            };
            if r == &crate::resources::PODS {
                crate::pods::complete_status(&mut obj);
            }
            // Validating admission, after the object's own validation.
            if let Some(denied) = sim.admission.deny(r.plural) {
                return denied;
            }
            if dry_run {
                return Reply::json(StatusCode::CREATED, &obj);
            }
            let key = format!("{}{name}", r.prefix(Some(ns)));
            match store
                .create(&key, serde_json::to_vec(&obj).expect("json"))
                .await
            {
                Ok(rev) => {
                    obj["metadata"]["resourceVersion"] = json!(rev.to_string());
                    Reply::json(StatusCode::CREATED, &obj)
                }
                Err(e) => store_error(target, &name, e),
            }
        }
        (&Method::PUT, Some(ns), Some(name)) => {
            let key = format!("{}{name}", r.prefix(Some(ns)));
            let current = match store.get(&key).await {
                Ok(kv) => objects::from_store(&kv, r),
                Err(e) => return store_error(target, name, e),
            };
            let (mut obj, precondition) = match objects::prepare_update(r, ns, name, body, &current)
            {
                Ok(v) => v,
                Err(why) => return invalid(target, name, &why),
            };
            if let Some(denied) = sim.admission.deny(r.plural) {
                return denied;
            }
            if dry_run {
                return Reply::json(StatusCode::OK, &obj);
            }
            match store
                .update(&key, serde_json::to_vec(&obj).expect("json"), precondition)
                .await
            {
                Ok(rev) => {
                    obj["metadata"]["resourceVersion"] = json!(rev.to_string());
                    Reply::json(StatusCode::OK, &obj)
                }
                Err(e) => store_error(target, name, e),
            }
        }
        (&Method::DELETE, Some(ns), Some(name)) => {
            let key = format!("{}{name}", r.prefix(Some(ns)));
            // Validating admission sees the object being deleted: a missing one is 404 first.
            if let Some(denied) = sim.admission.deny(r.plural) {
                return match store.get(&key).await {
                    Ok(_) => denied,
                    Err(e) => store_error(target, name, e),
                };
            }
            if dry_run {
                return match store.get(&key).await {
                    Ok(kv) => deleted(r.plural, name, &objects::from_store(&kv, r)),
                    Err(e) => store_error(target, name, e),
                };
            }
            match store.delete(&key).await {
                Ok((prev, _)) => deleted(r.plural, name, &objects::from_store(&prev, r)),
                Err(e) => store_error(target, name, e),
            }
        }
        _ => method_not_allowed(),
    }
}

fn method_not_allowed() -> Reply {
    respond::status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Some(json!({})),
    )
}

/// PATCH of one object: read, patch, write back with the read version as precondition (the
/// apiserver's `GuaranteedUpdate` retries a conflict, and so does this).
async fn patch(
    sim: &Sim,
    target: &Target<'_>,
    content_type: &str,
    body: &[u8],
    dry_run: bool,
) -> Reply {
    let (Some(ns), Some(name)) = (target.namespace, target.name) else {
        return respond::status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        );
    };
    let Some(kind) = crate::patch::PatchType::from_content_type(content_type) else {
        return respond::status(
            415,
            "UnsupportedMediaType",
            &format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json; got {content_type:?}"),
            None,
        );
    };
    let r = target.resource;
    let key = format!("{}{name}", r.prefix(Some(ns)));
    for _ in 0..5 {
        let current = match sim.store.get(&key).await {
            Ok(kv) => objects::from_store(&kv, r),
            Err(e) => return store_error(target, name, e),
        };
        let version = current["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok());
        let mut patched = match crate::patch::apply(&current, kind, body) {
            Ok(v) => v,
            Err(why) => return invalid(target, name, &why),
        };
        // Fields the server owns cannot be patched.
        for owned in ["name", "namespace", "uid", "creationTimestamp"] {
            patched["metadata"][owned] = current["metadata"][owned].clone();
        }
        if let Some(m) = patched["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        if let Some(denied) = sim.admission.deny(r.plural) {
            return denied;
        }
        if dry_run {
            return Reply::json(StatusCode::OK, &patched);
        }
        match sim
            .store
            .update(&key, serde_json::to_vec(&patched).expect("json"), version)
            .await
        {
            Ok(rev) => {
                patched["metadata"]["resourceVersion"] = json!(rev.to_string());
                return Reply::json(StatusCode::OK, &patched);
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return store_error(target, name, e),
        }
    }
    store_error(target, name, StoreError::Conflict(0))
}

fn deleted(plural: &str, name: &str, obj: &Value) -> Reply {
    respond::status_success(json!({
        "name": name,
        "kind": plural,
        "uid": obj["metadata"]["uid"],
    }))
}

fn invalid(target: &Target<'_>, name: &str, why: &str) -> Reply {
    let r = target.resource;
    respond::status(
        422,
        "Invalid",
        &format!("{} \"{name}\" is invalid: {why}", r.kind),
        Some(json!({"name": name, "group": r.group, "kind": r.kind})),
    )
}

#[cfg(test)]
mod tests {
    use crate::flowcontrol::{uid_of, FLOW_SCHEMA_UID, PRIORITY_LEVEL_UID};
    use crate::testserver::{admin_headers, answer_headers, headers, TestServer};
    use std::sync::atomic::Ordering;

    const LIST: &[u8] = b"GET /api/v1/namespaces/default/configmaps HTTP/1.1";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_shutdown_503_is_the_wait_groups_bytes_before_authentication() {
        let (s, admin) = TestServer::with_admin().await;
        s.pod(&admin, "web-0", r#"{"app":"web"}"#).await;
        s.sim.rejecting.store(true, Ordering::Release);
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"apiserver is shutting down\",\"reason\":\"ServiceUnavailable\",\"code\":503}\n\n";
        // Anonymous or not: WithWaitGroup is outside authentication.
        for cert in [Some(&admin), None] {
            let r = s.request(cert, LIST, b"").await;
            assert_eq!((r.status, r.text()), (503, body));
            let more = [("retry-after", "1"), ("x-content-type-options", "nosniff")];
            let json = "application/json";
            assert_eq!(r.stable_headers(), answer_headers(json, body.len(), &more));
        }
        // Exempt: health, /metrics, the apiserver's own loopback client, long-running requests.
        let exempt: [&[u8]; 4] = [
            b"GET /readyz HTTP/1.1",
            b"GET /metrics HTTP/1.1",
            b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nUser-Agent: kube-apiserver/v1.35.0",
            b"GET /api/v1/namespaces/default/pods/web-0/proxy/ HTTP/1.1",
        ];
        for head in exempt {
            let r = s.request(Some(&admin), head, b"").await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(head));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_shutdown_429_is_with_retry_afters_bytes_without_cache_control() {
        let s = TestServer::start().await;
        s.sim.retry_after.store(true, Ordering::Release);
        let r = s.request(None, LIST, b"").await;
        let body = "The apiserver is shutting down, please try again later.\n";
        assert_eq!((r.status, r.text()), (429, body));
        assert_eq!(
            r.stable_headers(),
            headers(&[
                ("connection", "close"),
                ("content-length", &body.len().to_string()),
                ("content-type", "text/plain; charset=utf-8"),
                ("retry-after", "5"),
                ("x-content-type-options", "nosniff"),
                ("x-kubegate-sim-replica", "test"),
            ])
        );
        // A path that only begins like an exempt one is exempt too (a prefix match).
        let r = s.request(None, b"GET /readyz/ping HTTP/1.1", b"").await;
        assert_eq!((r.status, r.text()), (200, "ok"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_priority_and_fairness_rejection_is_gos_http_error_behind_cache_control() {
        let s = TestServer::start().await;
        assert!(s.sim.flowcontrol.saturate("global-default", true, None));
        let head = [LIST, b"\r\nAuthorization: Bearer tok"].concat();
        let r = s.request(None, &head, b"").await;
        let body = "Too many requests, please try again later.\n";
        assert_eq!((r.status, r.text()), (429, body));
        let level = uid_of("global-default");
        let more = [
            ("retry-after", "1"),
            ("x-content-type-options", "nosniff"),
            (FLOW_SCHEMA_UID, &level),
            (PRIORITY_LEVEL_UID, &level),
            ("x-kubegate-sim-user", "alice"),
        ];
        let text = "text/plain; charset=utf-8";
        assert_eq!(r.stable_headers(), answer_headers(text, body.len(), &more));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_request_but_healths_is_counted_once_and_writes_by_method() {
        let (s, admin) = TestServer::with_admin().await;
        let r = s.request(None, b"GET /readyz HTTP/1.1", b"").await;
        assert_eq!(r.header("cache-control"), Some("no-cache, private"));
        s.request(None, b"GET /livez/ping HTTP/1.1", b"").await;
        s.request(None, LIST, b"").await; // anonymous: 403, still received
        let cm = r#"{"metadata":{"name":"a"}}"#;
        s.json(&admin, "POST", "/api/v1/namespaces/default/configmaps", cm)
            .await;
        s.json(
            &admin,
            "DELETE",
            "/api/v1/namespaces/default/configmaps/a",
            "",
        )
        .await;
        let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(n(&s.sim.requests.requests), 3);
        assert_eq!(n(&s.sim.requests.writes), 2);
    }

    /// `director.ServeHTTP` → NonGoRestfulMux → `notfoundhandler`: Go's `http.NotFound`, inside
    /// `WithCacheControl` and after priority and fairness.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_no_handler_serves_ends_at_gos_not_found_handler() {
        let (s, admin) = TestServer::with_admin().await;
        let body = "404 page not found\n";
        for path in [
            // 1.35 serves resource.k8s.io/v1 only: v1beta1 is off.
            "/apis/resource.k8s.io/v1beta1/namespaces/default/resourceclaims",
            "/apis/resource.k8s.io/v1beta1",
            "/apis/nonexistent.example.com/v1/things",
            "/apis/nonexistent.example.com/v1",
            "/apis/nonexistent.example.com",
            "/apis/nonexistent.example.com/",
            "/nonexistent",
            // The custom resource's group-version: no CRD for `things`, and a namespaced
            // one's object asked for without its namespace.
            "/apis/kubegate.example.com/v1/things",
            "/apis/kubegate.example.com/v1/widgets/w",
        ] {
            for method in ["GET", "DELETE"] {
                let r = s.json(&admin, method, path, "").await;
                assert_eq!((r.status, r.text()), (404, body), "{method} {path}");
                assert_eq!(
                    r.stable_headers(),
                    admin_headers(
                        "text/plain; charset=utf-8",
                        body.len(),
                        &[("x-content-type-options", "nosniff")]
                    ),
                    "{path}"
                );
            }
        }
    }

    /// go-restful's 404 under a web service it has (`serviceErrorHandler`,
    /// `NewGenericServerResponse`): `/api` and below, `/apis/GROUP/VERSION` of a built-in
    /// group-version served here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_resource_of_a_served_group_version_is_go_restfuls_status() {
        let (s, admin) = TestServer::with_admin().await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server could not find the requested resource\",\"reason\":\"NotFound\",\"details\":{},\"code\":404}\n";
        for path in [
            "/apis/coordination.k8s.io/v1/nonexistent",
            "/apis/policy/v1/namespaces/default/nonexistent/x",
            "/api/v1/nonexistent",
            "/api/v1/namespaces/default/widgets",
            "/api/v2/anything",
            "/apis/authentication.k8s.io/v1/nonexistent",
            "/apis/apiregistration.k8s.io/v1/nonexistent",
            "/api/v1/namespaces/default/configmaps/x/nonexistent",
        ] {
            let r = s.json(&admin, "GET", path, "").await;
            assert_eq!((r.status, r.text()), (404, body), "{path}");
            assert_eq!(
                r.stable_headers(),
                admin_headers("application/json", body.len(), &[]),
                "{path}"
            );
        }
        // A subresource a custom resource does not have: crdHandler's NotFound of the object.
        let r = s
            .json(
                &admin,
                "GET",
                "/apis/kubegate.example.com/v1/namespaces/default/widgets/w/status",
                "",
            )
            .await;
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"widgets.kubegate.example.com \\\"w\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"w\",\"group\":\"kubegate.example.com\",\"kind\":\"widgets\"},\"code\":404}\n";
        assert_eq!((r.status, r.text()), (404, body));
    }

    /// `ErrorToAPIStatus`'s default: the etcd client's error, code 500, no reason — for reads,
    /// writes and a new watch alike, after the 1 s the client tried.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_storage_failure_is_the_etcd_clients_error_unwrapped() {
        let (s, admin) = TestServer::with_admin().await;
        s.sim.checks.force("etcd", true);
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"etcdserver: request timed out\",\"code\":500}\n";
        let started = std::time::Instant::now();
        let cm = "/api/v1/namespaces/default/configmaps";
        let (one, watching) = (format!("{cm}/x"), format!("{cm}?watch=1"));
        let (list, get, create, watch, apiservices) = tokio::join!(
            s.json(&admin, "GET", cm, ""),
            s.json(&admin, "GET", &one, ""),
            s.json(&admin, "POST", cm, r#"{"metadata":{"name":"x"}}"#),
            s.json(&admin, "GET", &watching, ""),
            s.json(
                &admin,
                "GET",
                "/apis/apiregistration.k8s.io/v1/apiservices",
                ""
            ),
        );
        assert!(started.elapsed() >= std::time::Duration::from_secs(1));
        for r in [list, get, create, watch, apiservices] {
            assert_eq!((r.status, r.text()), (500, body));
            assert_eq!(
                r.stable_headers(),
                admin_headers("application/json", body.len(), &[])
            );
        }
        // A store's own error word for word (an etcd endpoint gRPC cannot reach).
        let why = "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused\"";
        let r = super::storage_failed(why);
        assert_eq!(
            String::from_utf8(r.body.to_vec()).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"rpc error: code = Unavailable desc = connection error: desc = \\\"transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused\\\"\",\"code\":500}\n"
        );
    }

    /// `ForbiddenStatusError`: `NewForbidden` of the request's group, resource and name, and
    /// `nosniff`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn authorizations_403_names_what_request_info_read() {
        let s = TestServer::start_with(|sim| {
            sim.authenticator
                .forbidden
                .push(("alice".into(), "apiservices".into()));
        })
        .await;
        let cases: [(Option<&str>, &str, &str); 4] = [
            (
                None,
                "GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x HTTP/1.1",
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"leases.coordination.k8s.io \\\"x\\\" is forbidden: User \\\"system:anonymous\\\" cannot get resource \\\"leases\\\" in API group \\\"coordination.k8s.io\\\" in the namespace \\\"kube-system\\\"\",\"reason\":\"Forbidden\",\"details\":{\"name\":\"x\",\"group\":\"coordination.k8s.io\",\"kind\":\"leases\"},\"code\":403}\n",
            ),
            (
                None,
                "GET /apis HTTP/1.1",
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/apis\\\"\",\"reason\":\"Forbidden\",\"details\":{},\"code\":403}\n",
            ),
            (
                Some("tok"),
                "GET /apis/apiregistration.k8s.io/v1/apiservices HTTP/1.1",
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"apiservices.apiregistration.k8s.io is forbidden: User \\\"alice\\\" cannot list resource \\\"apiservices\\\" in API group \\\"apiregistration.k8s.io\\\" at the cluster scope\",\"reason\":\"Forbidden\",\"details\":{\"group\":\"apiregistration.k8s.io\",\"kind\":\"apiservices\"},\"code\":403}\n",
            ),
            (
                Some("tok"),
                "GET /apis/apiregistration.k8s.io/v1/apiservices/v1.?watch=true HTTP/1.1",
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"apiservices.apiregistration.k8s.io \\\"v1.\\\" is forbidden: User \\\"alice\\\" cannot get resource \\\"apiservices\\\" in API group \\\"apiregistration.k8s.io\\\" at the cluster scope\",\"reason\":\"Forbidden\",\"details\":{\"name\":\"v1.\",\"group\":\"apiregistration.k8s.io\",\"kind\":\"apiservices\"},\"code\":403}\n",
            ),
        ];
        for (token, line, body) in cases {
            let head = match token {
                Some(t) => format!("{line}\r\nAuthorization: Bearer {t}"),
                None => line.to_string(),
            };
            let r = s.request(None, head.as_bytes(), b"").await;
            assert_eq!((r.status, r.text()), (403, body), "{line}");
            assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
            assert_eq!(r.header("content-type"), Some("application/json"));
        }
        // Alice reads everything else.
        let r = s
            .request(
                None,
                b"GET /apis/apiregistration.k8s.io/v1 HTTP/1.1\r\nAuthorization: Bearer tok",
                b"",
            )
            .await;
        assert_eq!(r.status, 200);
    }
}
