//! One terminate-mode request, from the client's head to the answer: its sender named (a
//! certificate, or a bearer token's review, `tokens`), its target read as the apiserver reads
//! it and its `dispatch` rule found; an upgrade the apiserver would perform goes its own way
//! (`upgrade`); otherwise the body is read whole within its bounds (`bodies`: a retry must be
//! able to send it again), the rule's limit applied, the request shaped for the backends
//! (`request`), placed within the rule and sent (`dispatch`), and a watch's response followed
//! across backends until its time is up (`watch`) — or, an identical request of the same
//! sender being on its way, answered from that one's upstream answer (`shared`). With the access log on, the response body
//! carries the request's line until it ends (`served`).

use crate::state::Gateway;
use crate::state::Kind;
use crate::telemetry::RequestFailure;
use crate::terminate::cluster::TerminateMode;
use crate::terminate::exchange::bodies::{self, Bounds};
use crate::terminate::exchange::body::{LoggedBody, ResponseBody};
use crate::terminate::exchange::status::status;
use crate::terminate::join::key;
use crate::terminate::join::Limits;
use crate::terminate::request::forward::send;
use crate::terminate::request::served::{self, Served};
use crate::terminate::request::shape::{Client, Shaper};
use crate::terminate::request::shared::{send_fed, send_joined, send_synced, Fed, Joined, Sharer};
use crate::terminate::request::upgrade;
use crate::terminate::rules::{Facts, Refusal, Rule, Rules, Slot};
use crate::terminate::sender::access_review::ANONYMOUS;
use crate::terminate::sender::attributes::Attributes;
use crate::terminate::sender::token_review;
use crate::terminate::sender::tokens::{Naming, Reviewing, TokenHash};
use crate::terminate::upstream::dispatch::{Unauthenticated, Within};
use crate::terminate::upstream::flow::{self, FlowKey};
use crate::terminate::upstream::signals::Origin;
use crate::terminate::upstream::upstreams::Upstreams;
use crate::terminate::watch::continuity as watch;
use bytes::Bytes;
use http::header;
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use kubegate_config::{AccessLogFormat, Config, ListenerSpec};
use kubegate_wire::answerer::answerer;
use kubegate_wire::classify::{ReadTarget, Unreadable, Verb};
use kubegate_wire::credentials::{self, Bearer};
use kubegate_wire::identity::UserInfo;
use kubegate_wire::position::{resumed_query, Asked};
use std::sync::Arc;
use std::time::Instant;

/// Serves one request that arrived on a connection of `listener`, and logs it if the access
/// log is on.
pub async fn handle(
    gw: Arc<Gateway>,
    mode: Arc<TerminateMode>,
    listener: Arc<ListenerSpec>,
    client: Arc<Client>,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let taken = Snapshot::take(&gw, &mode);
    if taken.config.terminate.access_log.format == AccessLogFormat::Off {
        if let Some(resp) = misdirected(&gw, &mode, &listener, &req) {
            return resp;
        }
        return serve(gw, mode, taken, &client, req, &mut Served::default()).await;
    }
    let started = Instant::now();
    let mut entry = served::entry(&client, &req);
    let mut served = Served::default();
    let resp = match misdirected(&gw, &mode, &listener, &req) {
        Some(resp) => resp,
        // Boxed: requests served without a log line do not pay for the larger future.
        None => Box::pin(serve(gw.clone(), mode, taken, &client, req, &mut served)).await,
    };
    served.complete(&mut entry, &resp);
    resp.map(|body| LoggedBody::wrap(body, entry, started, gw))
}

/// What a request reads of the state a reload replaces, taken once as it arrives: every
/// decision about it is made under one configuration, one set of its cluster's upstream
/// settings and one set of rules, however a reload falls while it is served.
struct Snapshot {
    config: Arc<Config>,
    upstreams: Arc<Upstreams>,
    rules: Arc<Rules>,
}

impl Snapshot {
    fn take(gw: &Gateway, mode: &TerminateMode) -> Snapshot {
        Snapshot {
            config: gw.config().load_full(),
            upstreams: mode.upstreams(),
            rules: mode.rules(),
        }
    }
}

/// 421 Misdirected Request (RFC 9110 §15.5.20) for a request whose authority is not a name
/// of its connection's cluster, before anything is done for it (no token review, rule or
/// forwarding): a connection made to one cluster's name never carries another's requests,
/// however many names its serving certificate covers. The client may retry it on a new
/// connection, whose server name then chooses the right cluster.
fn misdirected(
    gw: &Gateway,
    mode: &TerminateMode,
    listener: &ListenerSpec,
    req: &Request<Incoming>,
) -> Option<Response<ResponseBody>> {
    let clusters = gw.clusters();
    if !clusters.by_server_name() {
        return None;
    }
    // HTTP/2's `:authority` (or an absolute-form target), else HTTP/1.1's `Host`.
    let authority = match req.uri().authority() {
        Some(a) => Some(a.as_str()),
        None => req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok()),
    };
    let cluster = mode.cluster().name();
    if clusters.authority_reaches(listener, cluster, authority) {
        return None;
    }
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Misdirected);
    tracing::debug!(
        cluster,
        authority = authority.unwrap_or(""),
        "a request names an authority its connection's cluster does not serve: 421"
    );
    let mut resp = status(
        StatusCode::MISDIRECTED_REQUEST,
        "Misdirected",
        &format!(
            "this connection serves cluster {cluster:?}, which does not answer {:?}: send the request on a connection made to that name",
            authority.unwrap_or("")
        ),
        None,
    );
    if req.version() < http::Version::HTTP_2 {
        // The next request on this connection would be misdirected too: a new connection
        // (with the right server name) is what the client needs.
        resp.headers_mut()
            .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    Some(resp)
}

/// Serves one request; `served` learns who sent it and which replica answered.
async fn serve(
    gw: Arc<Gateway>,
    mode: Arc<TerminateMode>,
    taken: Snapshot,
    client: &Client,
    req: Request<Incoming>,
    served: &mut Served,
) -> Response<ResponseBody> {
    let arrived = Instant::now();
    let metrics = &gw.metrics().terminate;
    if let Some(refusal) = client.certificate_refused_now() {
        // As the apiserver's x509 authenticator, at every request: such a certificate is an
        // error, never an anonymous request.
        metrics.request_failed(RequestFailure::Unauthenticated);
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            refusal.message(),
            None,
        );
    }
    let Snapshot {
        config,
        upstreams,
        rules,
    } = taken;
    // Read as the apiserver reads it: the path decoded, the query's flags as Go converts
    // them. The client's bytes are what is forwarded.
    let read = match ReadTarget::of(req.uri()) {
        Ok(read) => read,
        Err(e) => return unreadable(&gw, &e),
    };
    let info = read.info(req.method());
    let upgrading = info.class.upgradable() && upgrade::requested(&req);
    // The bearer token, as the apiserver's authenticators read it (a WebSocket upgrade's may
    // ride in its subprotocols); a certificate's identity goes upstream before any token.
    let bearer = match &client.identity {
        Some(_) => Bearer::Absent,
        None => credentials::bearer(
            req.headers(),
            upgrading && credentials::upgrades_to_websocket(req.headers()),
        ),
    };
    let token = match &bearer {
        Bearer::Token(token) => Some(&**token),
        Bearer::Absent => None,
        Bearer::Unreadable => return unreadable_token(&gw),
    };
    // A bearer token's client is named by a TokenReview (remembered), a certificate's by
    // the certificate.
    let reviewed = token.filter(|_| upstreams.tls.vouches());
    let (token_key, token_user) = match reviewed {
        Some(token) => {
            let key = TokenHash::of(token);
            let (g, u) = (gw.clone(), upstreams.clone());
            let review = move |token| -> Reviewing { Box::pin(token_review::review(g, u, token)) };
            let naming = mode
                .tokens()
                .name(
                    &gw,
                    key,
                    token,
                    &config.terminate.token_review,
                    client.source(),
                    review,
                )
                .await;
            if naming == Naming::Unreviewed && rules.names_senders() {
                // A rule may limit this sender: it is not let through as if none did.
                return unreviewed(&gw);
            }
            (Some(key), naming)
        }
        None => (None, Naming::Unnamed),
    };
    // The name for rules and the log (a renewing one too), and the name reviewed within its
    // TTL, which alone lets the request share another's answer.
    let (token_user, token_fresh) = (token_user.user().cloned(), token_user.fresh().cloned());
    served.named(token_user.clone());
    let sender = client.identity.as_deref().or(token_user.as_deref());
    let joining = &config.terminate.join_reads;
    let (class, rule, flow, origin, (may_join, may_sync, may_feed), attributes) = {
        let may_join = joining.enabled && key::may_join(&info, req.method(), joining.secrets);
        // A watch-list's initial sync joins as a read does (whether it is one is known from
        // its query, below).
        let may_sync = joining.enabled
            && info.class.verb == Verb::Watch
            && (joining.secrets || info.target.resource != Some("secrets"));
        let sharing = &config.terminate.shared_watches;
        let may_feed = sharing.enabled
            && info.class.verb == Verb::Watch
            && (sharing.secrets || info.target.resource != Some("secrets"));
        let rule = rules
            .rule_for(&Facts {
                info,
                path: read.path(),
                sender,
            })
            .cloned();
        let as_whom = match (sender, token) {
            (Some(user), _) => flow::Sender::User(user),
            (None, Some(token)) => flow::Sender::Token(token),
            (None, None) => flow::Sender::Anonymous,
        };
        // What an authorizer would read of it: for a review before another request's answer
        // is shared with it.
        let shares = may_join || may_sync || may_feed;
        let attributes = shares.then(|| Attributes::of(&info, read.path(), &read.query()));
        let sharing = (may_join, may_sync, may_feed);
        (
            info.class,
            rule,
            FlowKey::of(as_whom, &info),
            Origin::from(answerer(&info, read.path())),
            sharing,
            attributes,
        )
    };
    if upgrading {
        // An upgrade holds its rule's slot only until it is established, as any long-running
        // request. Boxed, as every rarely taken path that awaits a large future: a future is
        // as large as its largest await, and each request's is allocated and moved whole.
        let slot = match admit(rule.as_ref()) {
            Ok(slot) => slot,
            Err((rule, refusal)) => return limited(&gw, rule, refusal),
        };
        let within = Within::rule(upstreams.pool(), rule);
        let upgrading = upgrade::proxy(&gw, &upstreams, client, req, class, served, within);
        let resp = Box::pin(upgrading).await;
        drop(slot);
        forget_if_refused(&mode, token_key, &config, &resp);
        return resp;
    }
    // Anything else with an `Upgrade` header is an ordinary request, as the apiserver serves
    // it: the header goes with the other hop-by-hop ones.
    let (parts, body) = req.into_parts();
    let (body, held) = if body.is_end_stream() {
        // Most requests (GET, watch, DELETE without options) carry none.
        (Bytes::new(), None)
    } else {
        let bounds = Bounds {
            config: &config.terminate,
            connection: &client.body_bytes,
            total: mode.body_bytes(),
            gauge: &metrics.request_body_bytes_held,
        };
        // Boxed: only requests with a body pay for its future.
        match Box::pin(bodies::read(&parts.headers, body, bounds)).await {
            Ok((body, held)) => (body, Some(held)),
            Err(refused) => return body_refused(&gw, refused),
        }
    };
    // The rule's slot is taken once the body is in: a client that has not sent its body
    // holds none.
    let slot = match admit(rule.as_ref()) {
        Ok(slot) => slot,
        Err((rule, refusal)) => return limited(&gw, rule, refusal),
    };
    // An extension server may answer by who asks (a list filtered per user): its answers
    // never cross senders.
    let own_answers = origin.answered_by_apiserver(&upstreams.extensions);
    let mut outgoing = Shaper::new(&upstreams, metrics)
        .request(client, parts, body)
        .in_flow(flow)
        .answered_by(origin);
    if let Some(held) = held {
        outgoing = outgoing.holding(held);
    }
    served.sent_as(&gw, client, outgoing.kind(), outgoing.user_agent());
    // Who the apiserver will take the request to be, when kubegate knows it valid now: the
    // certificate's user it vouches for, the user a review named the token's within its TTL,
    // or no one. Only such a request shares another's upstream request (`shared::Sharer`).
    let identity = match outgoing.kind() {
        Kind::WithIdentity => client.identity.clone(),
        Kind::BearerToken => token_fresh,
        Kind::Anonymous => Some(anonymous()),
    };
    let sharer = match (attributes, identity) {
        (Some(attributes), Some(user)) => Some(Sharer {
            mode: &mode,
            user,
            attributes: Arc::new(attributes),
            config: &config.terminate.access_review,
            token: token_key.map(|key| (key, &config.terminate.token_review)),
            arrived,
        }),
        _ => None,
    };
    let (may_join, may_sync, may_feed) = match sharer {
        Some(_) => (may_join, may_sync, may_feed),
        None => (false, false, false),
    };
    let ids = &upstreams.identity;
    let across_joins = (joining.across_senders && own_answers).then_some(ids);
    let across_feeds =
        (config.terminate.shared_watches.across_senders && own_answers).then_some(ids);
    let mut watch = None;
    let mut feedable = None;
    let mut synced = None;
    if class.verb == Verb::Watch {
        if may_sync {
            let o = &outgoing;
            let q = o.client_query();
            synced = key::watch_list(o.kind(), o.method(), o.uri(), q, o.headers(), across_joins);
        }
        if may_feed {
            let o = &outgoing;
            let q = o.client_query();
            feedable = key::feedable(o.kind(), o.method(), o.uri(), q, o.headers(), across_feeds);
        }
        // Bookmarks carry positions: asked for upstream whatever the client asked (those it
        // did not ask for are kept from it). The watch ends when the client's timeoutSeconds
        // says, or as the apiserver would end one without it, however many replicas it moves
        // across: the time left goes upstream.
        let asked = Asked::from_query(outgoing.client_query());
        let min = config.terminate.min_request_timeout;
        let lasts = watch::lifetime(&asked, min);
        outgoing = outgoing.with_query(&resumed_query(outgoing.client_query(), None, lasts));
        watch = Some(watch::Watch {
            asked,
            ends: lasts.map(|d| Instant::now() + d),
            slow_client: config.terminate.slow_watch_timeout,
        });
    }
    let within = Within::rule(upstreams.pool(), rule);
    let joinable = may_join
        .then(|| {
            let o = &outgoing;
            key::joinable(
                o.kind(),
                o.method(),
                o.uri(),
                o.headers(),
                o.body(),
                across_joins,
            )
        })
        .flatten();
    let limits = Limits {
        max_answer_bytes: joining.max_answer_bytes,
        max_held_bytes: joining.max_held_bytes,
        connection: Some(client.shared_bytes.clone()),
        slow_client: config.terminate.slow_watch_timeout,
    };
    let resp = match (joinable.or(synced), feedable, watch, sharer) {
        (Some(read), _, None, Some(sharer)) => {
            let joined = Joined::new(&mode, read, sharer, limits);
            let sending = send_joined(gw, upstreams, outgoing, class, served, within, slot, joined);
            Box::pin(sending).await
        }
        (Some(read), _, Some(watch), Some(sharer)) => {
            // A follower watches on from where the lead's initial events ended: fed from a
            // shared watch, when they are on (its key is the watch's from any position).
            let continued = may_feed
                .then(|| {
                    let o = &outgoing;
                    let q = resumed_query(o.client_query(), Some("1"), None);
                    key::feedable(
                        o.kind(),
                        o.method(),
                        o.uri(),
                        Some(&q),
                        o.headers(),
                        across_feeds,
                    )
                })
                .flatten()
                .map(|f| Fed::new(&mode, f, sharer.clone(), &watch, &config.terminate));
            let joined = (Joined::new(&mode, read, sharer, limits), watch, continued);
            let sending = send_synced(gw, upstreams, outgoing, class, served, within, slot, joined);
            Box::pin(sending).await
        }
        (None, Some(feedable), Some(watch), Some(sharer)) => {
            let fed = Fed::new(&mode, feedable, sharer, &watch, &config.terminate);
            let sending = send_fed(gw, upstreams, outgoing, class, served, within, slot, fed);
            match Box::pin(sending).await {
                Ok(resp) => resp,
                Err((gw, upstreams, outgoing, within)) => {
                    // No feed can serve its position: a watch of its own.
                    let own = send(
                        gw,
                        upstreams,
                        outgoing,
                        class,
                        served,
                        within,
                        None,
                        Some(watch),
                    );
                    Box::pin(own).await
                }
            }
        }
        (_, _, watch, _) => send(gw, upstreams, outgoing, class, served, within, slot, watch).await,
    };
    forget_if_refused(&mode, token_key, &config, &resp);
    resp
}

/// The user the apiserver takes a request without credentials to be.
fn anonymous() -> Arc<UserInfo> {
    Arc::new(UserInfo {
        user: ANONYMOUS.to_string(),
        groups: vec!["system:unauthenticated".to_string()],
        uid: None,
        extra: Default::default(),
    })
}

/// An apiserver's own 401 for a token kubegate had named (its authentication filter's, matched
/// exactly: `dispatch::Unauthenticated`; never a pod's, a webhook's or an extension server's):
/// the token was revoked or has expired, so its name is forgotten at once rather than kept for
/// the rest of its TTL, and its requests leave every join and shared watch.
fn forget_if_refused(
    mode: &TerminateMode,
    token: Option<TokenHash>,
    config: &Config,
    resp: &Response<ResponseBody>,
) {
    let refused = resp.extensions().get::<Unauthenticated>().is_some();
    if let Some(key) = token.filter(|_| refused) {
        mode.tokens().forget(&key, &config.terminate.token_review);
    }
}

/// The answer to a bearer-token request whose sender kubegate could not name in time while
/// a `dispatch` rule names senders: 429 with `Retry-After`, which client-go retries.
fn unreviewed(gw: &Gateway) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Unreviewed);
    status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later: kubegate could not yet review the bearer token, and its dispatch rules name senders",
        Some(1),
    )
}

/// The answer to a request whose bearer token kubegate cannot read as the apiserver would
/// (bytes that are not UTF-8, a WebSocket token protocol the apiserver refuses): 401, as the
/// apiserver answers a token it cannot authenticate, rather than a name kubegate guessed.
fn unreadable_token(gw: &Gateway) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Unauthenticated);
    status(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "Unauthorized: the bearer token cannot be read as text",
        None,
    )
}

/// The answer to a request whose target the apiserver would refuse before any handler: 400
/// for a path that does not decode (Go's HTTP server), 500 for a path verb with nothing after
/// it (the apiserver's `RequestInfo` filter). Never forwarded.
fn unreadable(gw: &Gateway, why: &Unreadable) -> Response<ResponseBody> {
    let m = &gw.metrics().terminate;
    match why {
        Unreadable::Target(e) => {
            m.request_failed(RequestFailure::BadRequest);
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("the request's path cannot be read: {e}"),
                None,
            )
        }
        Unreadable::NoResource => {
            m.request_failed(RequestFailure::BadRequest);
            status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("Internal error occurred: failed to create RequestInfo: {why}"),
                None,
            )
        }
    }
}

/// Admits a request under its rule's limits: its slot (none without a rule), or why not.
fn admit(rule: Option<&Arc<Rule>>) -> Result<Option<Slot>, (&Rule, Refusal)> {
    match rule {
        Some(rule) => rule
            .admit(Instant::now())
            .map(Some)
            .map_err(|refusal| (&**rule, refusal)),
        None => Ok(None),
    }
}

/// The answer to a request its rule's limit refused: 429 with a `Status` and `Retry-After`,
/// which client-go retries (never a reset).
fn limited(gw: &Gateway, rule: &Rule, refusal: Refusal) -> Response<ResponseBody> {
    gw.metrics()
        .terminate
        .request_failed(RequestFailure::Limited);
    let (why, retry_after) = match refusal {
        Refusal::InFlight => ("too many requests in flight", 1),
        Refusal::Rate { retry_after } => (
            "over its rate",
            u32::try_from(retry_after.as_millis().div_ceil(1000))
                .unwrap_or(u32::MAX)
                .max(1),
        ),
    };
    status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        &format!(
            "Too many requests, please try again later: kubegate's dispatch rule {:?} is {why}",
            rule.name
        ),
        Some(retry_after),
    )
}

/// The answer to a body kubegate would not hold: 413 (too large for the request, its
/// connection or the gateway), 408 (too slow), 400 (broken off).
fn body_refused(gw: &Gateway, refused: bodies::Refused) -> Response<ResponseBody> {
    gw.metrics().terminate.request_failed(refused.failure());
    let (code, reason) = match refused {
        bodies::Refused::TooLarge(..) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
        bodies::Refused::Timeout(_) => (StatusCode::REQUEST_TIMEOUT, "Timeout"),
        bodies::Refused::Broken => (StatusCode::BAD_REQUEST, "BadRequest"),
    };
    status(code, reason, &refused.message(), None)
}
