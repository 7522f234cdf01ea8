//! One terminate-mode request, from the client's head to the answer, through named phases.
//! Each phase is a function of the request's [`Context`] (what it reads of the generation in
//! force as it arrived) and of what the phases before it found; each refusal is answered in
//! `refused`. Every route passes every phase before it:
//!
//! 1. `addressed` — its authority is a name of its connection's cluster (else 421);
//! 2. `identify` — its client's certificate valid now, its bearer token named as a review
//!    named it (`sender::tokens`), or by a review now (`name`);
//! 3. `classify` — its target read as the apiserver reads it, its `dispatch` rule, its flow,
//!    who writes its answer, what it may share and what an authorizer would read of it;
//! 4. an upgrade the apiserver would perform goes its own way (`upgrade`), once admitted;
//! 5. `read_body` — read whole within its bounds (`bodies`: a retry must send it again);
//! 6. `admit` — its place under its rule's limits;
//! 7. `shape` — shaped for the backends, a watch's upstream query and lifetime set;
//! 8. `authorize` — who it is for, valid now, and what it asks: the only requests that may
//!    share another's upstream answer (`shared::Sharer` asks the apiserver's authorization);
//! 9. `route` — one decision: joined to an identical read, a watch-list joined, a watch fed
//!    from a shared one, or forwarded (`forward`, a watch followed across backends);
//! 10. send — the one send of its route: `forward::send`, or `share` for a shared one (boxed:
//!     a request that shares nothing pays nothing for those futures);
//! 11. `respond` — an apiserver's own 401 forgets the token's name;
//! 12. `log` — with the access log on, the response body carries the request's line until it
//!     ends (`served`).

use crate::state::{Gateway, Generation, Kind};
use crate::telemetry::costs::{Costs, SenderKind};
use crate::telemetry::ContinuePage;
use crate::terminate::cluster::mode::TerminateMode;
use crate::terminate::cluster::plane::{ServedCluster, TerminatePlane};
use crate::terminate::cluster::shed::in_reserve;
use crate::terminate::exchange::bodies::{self, Bounds, Held};
use crate::terminate::exchange::body::{LoggedBody, ResponseBody};
use crate::terminate::join::key;
use crate::terminate::join::Limits;
use crate::terminate::request::forward::{self, Sending};
use crate::terminate::request::pages::{Holder, PageHolders, Paging};
use crate::terminate::request::refused;
use crate::terminate::request::served::{self, Served};
use crate::terminate::request::shape::{Client, Shaper};
use crate::terminate::request::shared::{self, Fed, Joined, Sharer};
use crate::terminate::request::upgrade;
use crate::terminate::rules::{Facts, Kubectl, Refusal, Rule, Rules, Slot};
use crate::terminate::sender::access_review::ANONYMOUS;
use crate::terminate::sender::attributes::Attributes;
use crate::terminate::sender::token_review;
use crate::terminate::sender::tokens::{Naming, Reviewing, TokenHash};
use crate::terminate::upstream::dispatch::{Unauthenticated, Within};
use crate::terminate::upstream::flow::{self, FlowKey};
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::signals::Origin;
use crate::terminate::upstream::upstreams::Upstreams;
use crate::terminate::watch::continuity as watch;
use bytes::Bytes;
use http::header;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;
use kubegate_config::{AccessLogFormat, Config, ListenerSpec};
use kubegate_wire::answerer::answerer;
use kubegate_wire::classify::{ReadTarget, RequestClass, RequestInfo, Verb};
use kubegate_wire::credentials::{self, Bearer};
use kubegate_wire::identity::UserInfo;
use kubegate_wire::position::{resumed_query, Asked};
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// One client connection, as every request on it reads it: the plane it was accepted by, its
/// cluster as served then, its listener and its client.
pub struct Connection {
    /// The clusters served now.
    pub plane: Arc<TerminatePlane>,
    /// Its cluster as served when it connected: what its requests go on with once a reload
    /// removed the cluster (the connection ends with the retired pool's drain).
    pub accepted: ServedCluster,
    /// Its listener: routing by authority reads its clusters.
    pub listener: Arc<ListenerSpec>,
    /// Its client.
    pub client: Client,
    /// The replicas that served the first pages of its paginated LISTs.
    pub pages: PageHolders,
}

/// Serves one request that arrived on `connection`, and logs it if the access log is on
/// (phase 12).
pub async fn handle(
    gw: Arc<Gateway>,
    connection: Arc<Connection>,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let cx = Context::take(gw, &connection);
    let log = cx.config().terminate.access_log;
    let listener = &connection.listener;
    if log.format == AccessLogFormat::Off {
        if let Some(resp) = addressed(&cx, listener, &req) {
            return resp;
        }
        return serve(&cx, req, &mut Served::default()).await;
    }
    let started = Instant::now();
    let mut entry = served::entry(cx.client, &req);
    let mut served = Served::default();
    let resp = match addressed(&cx, listener, &req) {
        Some(resp) => resp,
        // Boxed: requests served without a log line do not pay for the larger future.
        None => Box::pin(serve(&cx, req, &mut served)).await,
    };
    served.complete(&mut entry, &resp);
    let gw = cx.gw.clone();
    resp.map(|body| LoggedBody::wrap(body, entry, started, gw, log))
}

/// A phase's refusal: the answer kubegate gives (`refused`), boxed, so that what a phase
/// passes on when it lets a request through stays small.
type Refused = Box<Response<ResponseBody>>;

/// What every phase of one request reads, taken once as it arrives, in one load of the
/// plane's table: every decision about it is made under one generation (its configuration
/// and clusters) and its cluster's upstream settings and rules of that generation, however a
/// reload falls while it is served.
struct Context<'a> {
    gw: Arc<Gateway>,
    /// Its cluster's long-lived terminate state.
    mode: &'a Arc<TerminateMode>,
    generation: Arc<Generation>,
    upstreams: Arc<Upstreams>,
    rules: Arc<Rules>,
    client: &'a Client,
    /// Its connection's first-page replicas.
    pages: &'a PageHolders,
    /// When it arrived.
    arrived: Instant,
}

impl<'a> Context<'a> {
    fn take(gw: Arc<Gateway>, connection: &'a Connection) -> Context<'a> {
        let served = connection.plane.served();
        let mode = connection.accepted.terminated.mode();
        // A cluster a reload removed: what the connection was accepted with.
        let cluster = served.cluster_of(mode).unwrap_or(&connection.accepted);
        Context {
            generation: served.generation().clone(),
            upstreams: cluster.upstreams.clone(),
            rules: cluster.rules.clone(),
            gw,
            mode,
            client: &connection.client,
            pages: &connection.pages,
            arrived: Instant::now(),
        }
    }

    /// Its configuration.
    fn config(&self) -> &Config {
        &self.generation.config
    }
}

/// Serves one request through phases 2–11; `served` learns who sent it and which replica
/// answered.
async fn serve(
    cx: &Context<'_>,
    req: Request<Incoming>,
    served: &mut Served,
) -> Response<ResponseBody> {
    if let Some(refusal) = cx.client.certificate_refused_now() {
        // As the apiserver's x509 authenticator, at every request: such a certificate is an
        // error, never an anonymous request.
        return refused::certificate(&cx.gw, refusal);
    }
    // Read as the apiserver reads it: the path decoded, the query's flags as Go converts
    // them. The client's bytes are what is forwarded.
    let read = match ReadTarget::of(req.uri()) {
        Ok(read) => read,
        Err(e) => return refused::unreadable(&cx.gw, &e),
    };
    let info = read.info(req.method());
    let paging = Paging::of(&info, read.path(), &read.query());
    let upgrading = info.class.upgradable() && upgrade::requested(&req);
    // Boxed, as every rarely taken path that awaits a large future: a future is as large as
    // its largest await, and each request's is allocated and moved whole (the phases below
    // are plain functions for that reason; only what waits is a future).
    let identified = match identify(cx, &req, upgrading) {
        Identified::Known(sender) => sender,
        Identified::Reviewing(token, key) => Box::pin(name(cx, token, key)).await,
    };
    let sender = match identified {
        Ok(sender) => sender,
        Err(resp) => return *resp,
    };
    served.named(sender.named.clone());
    let mut classified = classify(cx, &req, &read, &info, &sender, upgrading);
    // What a run-time rule may cut off while it waits (`forward::CutOff`): a read that had
    // no effect — not a proxied request, whose pod or node may have acted, nor a log stream.
    let reads = match info.class.verb {
        Verb::Get | Verb::List => info.class.long_running.is_none(),
        Verb::Watch => true,
        _ => false,
    } && info.target.subresource != Some("proxy");
    let Sender {
        token_key,
        fresh,
        named,
        ..
    } = sender;
    if upgrading {
        // An upgrade holds its rule's slot only until it is established, as any long-running
        // request.
        let resp = Box::pin(upgrade_admitted(cx, req, classified, served)).await;
        respond(cx, token_key, &resp);
        return resp;
    }
    // A rule that rejects answers before the body is read: nothing of a shed sender's is held.
    if classified.rule.as_ref().is_some_and(|r| r.rejects()) {
        if let Err(resp) = admit(cx, classified.rule.as_ref()) {
            return *resp;
        }
    }
    if let Some(retry_after) = classified.held_back {
        return refused::held_back(&cx.gw, cx.mode.cluster().name(), retry_after);
    }
    // Anything else with an `Upgrade` header is an ordinary request, as the apiserver serves
    // it: the header goes with the other hop-by-hop ones.
    let (parts, body) = req.into_parts();
    let read = match body.is_end_stream() {
        // Most requests (GET, watch, DELETE without options) carry none.
        true => Ok((Bytes::new(), None)),
        false => Box::pin(read_body(cx, &parts, body)).await,
    };
    let (body, held) = match read {
        Ok(read) => read,
        Err(resp) => return *resp,
    };
    // The rule's slot is taken once the body is in: a client that has not sent its body
    // holds none.
    let slot = match admit(cx, classified.rule.as_ref()) {
        Ok(slot) => slot,
        Err(resp) => return *resp,
    };
    let (mut outgoing, watch) = shape(cx, parts, body, held, &mut classified);
    let holder = match paging {
        Paging::Continue(list) => cx.pages.holder(list, cx.upstreams.pool()),
        _ => Holder::Unknown,
    };
    if let Holder::At(replica) = holder {
        outgoing.prefer(replica);
    }
    let list = classified.class.verb == Verb::List;
    let by_level = cx.config().terminate.auto_shed.enabled;
    let payer = served.sent_as(
        &cx.gw,
        cx.client,
        outgoing.kind(),
        outgoing.headers(),
        list,
        by_level,
    );
    outgoing.bill_to(payer);
    let sharer = authorize(cx, &outgoing, classified.attributes, token_key, fresh);
    let route = route(cx, &outgoing, classified.may, watch, sharer);
    let shed_version = classified.shed_version;
    let sending = Sending {
        gw: cx.gw.clone(),
        generation: cx.generation.clone(),
        upstreams: cx.upstreams.clone(),
        outgoing,
        class: classified.class,
        within: Within::rule(cx.upstreams.pool(), classified.rule),
        slot,
    };
    // Phase 10: the one send of its route. A named sender's read sent on its own is cut off
    // if a run-time rule comes to turn it away before its answer starts (one that shares
    // another's upstream answer is not: the answer is others' too).
    let user = cx.client.identity.as_deref().or(named.as_deref());
    let refusal = |sent: &Outgoing| user.and_then(|user| cut_off(cx, user, sent));
    let resp = match route {
        Route::Forward(watch) => {
            let cut_off = (reads && user.is_some()).then(|| {
                let mut changes = cx.gw.shed().changes();
                // A change since its rule was found (while its body was read) is looked at
                // at once.
                if cx.gw.shed().version() != shed_version {
                    changes.mark_changed();
                }
                forward::CutOff {
                    changes,
                    refusal: &refusal,
                }
            });
            forward::send(sending, served, watch, cut_off).await
        }
        shared => share(shared, sending, served).await,
    };
    paged(cx, paging, holder, served, &resp);
    respond(cx, token_key, &resp);
    resp
}

/// Phase 10's look at a forwarded read when the run-time rules change (`forward::CutOff`):
/// the refusal of the rule that turns it away now, found as `classify` finds one, if any.
fn cut_off(cx: &Context<'_>, user: &UserInfo, sent: &Outgoing) -> Option<Response<ResponseBody>> {
    let read = ReadTarget::of(sent.uri()).ok()?;
    let facts = Facts {
        info: read.info(sent.method()),
        path: read.path(),
        sender: Some(user),
        kubectl: Kubectl::of(sent.headers()),
    };
    let metrics = &cx.gw.metrics().terminate;
    let cluster = cx.mode.cluster().name();
    let rule = cx
        .mode
        .shed()
        .rule_for(cx.gw.shed(), cluster, metrics, &facts)?;
    if !rule.rejects() {
        return None;
    }
    match rule.admit(Instant::now()) {
        Err(Refusal::Rejected { retry_after }) => {
            Some(refused::cut_off(&cx.gw, cluster, &rule, retry_after))
        }
        _ => None,
    }
}

/// Phase 10 for a page of a LIST: a first page's replica remembered for its continue pages,
/// and where a continue page went counted (answered pages only).
fn paged(
    cx: &Context<'_>,
    paging: Paging,
    holder: Holder,
    served: &Served,
    resp: &Response<ResponseBody>,
) {
    let replica = served
        .replica
        .as_ref()
        .filter(|_| resp.status().is_success());
    match (paging, replica) {
        (Paging::First(list), Some(replica)) => cx.pages.served_first(list, replica),
        (Paging::Continue(_), Some(replica)) => {
            let to = match holder {
                Holder::At(h) if h == replica.address => ContinuePage::FirstPageReplica,
                Holder::At(_) | Holder::Gone => ContinuePage::AnotherReplica,
                Holder::Unknown => ContinuePage::Unknown,
            };
            cx.gw.metrics().terminate.continue_page(to);
        }
        _ => {}
    }
}

/// Phase 1: 421 Misdirected Request (RFC 9110 §15.5.20) for a request whose authority is not
/// a name of its connection's cluster, before anything is done for it (no token review, rule
/// or forwarding): a connection made to one cluster's name never carries another's requests,
/// however many names its serving certificate covers.
fn addressed(
    cx: &Context<'_>,
    listener: &ListenerSpec,
    req: &Request<Incoming>,
) -> Option<Response<ResponseBody>> {
    let clusters = &cx.generation.clusters;
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
    let cluster = cx.mode.cluster().name();
    if clusters.authority_reaches(listener, cluster, authority) {
        return None;
    }
    Some(refused::misdirected(
        &cx.gw,
        cluster,
        authority,
        req.version(),
    ))
}

/// Who sent a request, as far as kubegate knows it (phase 2).
struct Sender<'r> {
    /// Its bearer token, as the apiserver reads it (none for a certificate's client).
    token: Option<Cow<'r, str>>,
    /// The token's hash, where kubegate reviews it.
    token_key: Option<TokenHash>,
    /// The token's user, for rules and the log (a renewing name too).
    named: Option<Arc<UserInfo>>,
    /// The token's user named within the review TTL: alone lets the request share another's
    /// answer.
    fresh: Option<Arc<UserInfo>>,
}

/// Where phase 2 leaves a request: who sent it, as far as kubegate knows it now, or a token
/// to name by a review first.
enum Identified<'r> {
    Known(Result<Sender<'r>, Refused>),
    Reviewing(Cow<'r, str>, TokenHash),
}

/// Phase 2: the bearer token, as the apiserver's authenticators read it (a WebSocket
/// upgrade's may ride in its subprotocols), named as a TokenReview named it (remembered), or
/// to be reviewed; a certificate's identity goes upstream before any token.
fn identify<'r>(cx: &Context<'_>, req: &'r Request<Incoming>, upgrading: bool) -> Identified<'r> {
    let bearer = match &cx.client.identity {
        Some(_) => Bearer::Absent,
        None => credentials::bearer(
            req.headers(),
            upgrading && credentials::upgrades_to_websocket(req.headers()),
        ),
    };
    let token = match bearer {
        Bearer::Token(token) => token,
        Bearer::Absent => return Identified::Known(Ok(Sender::anonymous(None))),
        Bearer::Unreadable => {
            let refused = refused::unreadable_token(&cx.gw);
            return Identified::Known(Err(Box::new(refused)));
        }
    };
    if !cx.upstreams.tls.vouches() {
        return Identified::Known(Ok(Sender::anonymous(Some(token))));
    }
    let key = TokenHash::of(&token);
    let config = &cx.config().terminate.token_review;
    match cx.mode.tokens().named_now(&key, config) {
        Some(naming) => Identified::Known(named(cx, token, key, naming)),
        None => Identified::Reviewing(token, key),
    }
}

/// A token kubegate does not know a name for now: named by a TokenReview (one at most waited
/// for, `token_review.timeout`).
async fn name<'r>(
    cx: &Context<'_>,
    token: Cow<'r, str>,
    key: TokenHash,
) -> Result<Sender<'r>, Refused> {
    let (g, u) = (cx.gw.clone(), cx.upstreams.clone());
    let review = move |token| -> Reviewing { Box::pin(token_review::review(g, u, token)) };
    let naming = cx
        .mode
        .tokens()
        .name(
            &cx.gw,
            key,
            &token,
            &cx.config().terminate.token_review,
            cx.client.source(),
            review,
        )
        .await;
    named(cx, token, key, naming)
}

/// The sender of `token` as `naming` says; a token not named while a rule (the file's, or one
/// put in force at run time) names senders is answered 429: a rule may limit or shed this
/// sender, and it is not let through as if none did.
fn named<'r>(
    cx: &Context<'_>,
    token: Cow<'r, str>,
    key: TokenHash,
    naming: Naming,
) -> Result<Sender<'r>, Refused> {
    let shed_names_senders = || {
        let metrics = &cx.gw.metrics().terminate;
        let cluster = cx.mode.cluster().name();
        cx.mode.shed().names_senders(cx.gw.shed(), cluster, metrics)
    };
    if naming == Naming::Unreviewed && (cx.rules.names_senders() || shed_names_senders()) {
        return Err(Box::new(refused::unreviewed(&cx.gw)));
    }
    Ok(Sender {
        named: naming.user().cloned(),
        fresh: naming.fresh().cloned(),
        token: Some(token),
        token_key: Some(key),
    })
}

impl<'r> Sender<'r> {
    /// A sender kubegate names no user of: a certificate's client, or `token`'s, which
    /// kubegate does not review (no front-proxy identity to review it as).
    fn anonymous(token: Option<Cow<'r, str>>) -> Sender<'r> {
        Sender {
            token,
            token_key: None,
            named: None,
            fresh: None,
        }
    }
}

/// What a request is, as kubegate acts on it (phase 3).
struct Classified {
    class: RequestClass,
    rule: Option<Arc<Rule>>,
    /// The run-time rules' change its rule was found at.
    shed_version: u64,
    /// Turned away by `terminate.auto_shed`, with this `Retry-After`.
    held_back: Option<std::time::Duration>,
    flow: FlowKey,
    origin: Origin,
    may: MayShare,
    /// What an authorizer would read of it, for a review before another request's answer is
    /// shared with it: only for one that may share.
    attributes: Option<Attributes>,
}

/// What a request may share, by its kind and the configuration.
#[derive(Clone, Copy, Default)]
struct MayShare {
    /// Join an identical read.
    join: bool,
    /// Join an identical watch-list's initial events (whether it is one is known from its
    /// query, when it is shaped).
    sync: bool,
    /// Be fed from a shared watch.
    feed: bool,
}

/// Phase 3: its rule (run-time ones first, `rules::shed`), its flow (who sends it, for the replicas' flow control), who writes its
/// answer, and what it may share.
fn classify(
    cx: &Context<'_>,
    req: &Request<Incoming>,
    read: &ReadTarget<'_>,
    info: &RequestInfo<'_>,
    sender: &Sender<'_>,
    upgrading: bool,
) -> Classified {
    let terminate = &cx.config().terminate;
    let joining = &terminate.join_reads;
    let sharing = &terminate.shared_watches;
    let secrets = info.target.resource == Some("secrets");
    let watching = info.class.verb == Verb::Watch;
    let may = MayShare {
        join: joining.enabled && key::may_join(info, req.method(), joining.secrets),
        sync: joining.enabled && watching && (joining.secrets || !secrets),
        feed: sharing.enabled && watching && (sharing.secrets || !secrets),
    };
    let user = cx.client.identity.as_deref().or(sender.named.as_deref());
    let shed = cx.gw.shed();
    let shed_version = shed.version();
    let shedding = shed_version != 0;
    let facts = Facts {
        info: *info,
        path: read.path(),
        sender: user,
        kubectl: if cx.rules.reads_kubectl() || shedding {
            Kubectl::of(req.headers())
        } else {
            Kubectl::default()
        },
    };
    // A rule put in force at run time first (it only rejects: the file's rules stay the
    // floor), then the file's.
    let metrics = &cx.gw.metrics().terminate;
    let cluster = cx.mode.cluster().name();
    let rule = shedding
        .then(|| cx.mode.shed().rule_for(shed, cluster, metrics, &facts))
        .flatten()
        .or_else(|| cx.rules.rule_for(&facts).cloned());
    let as_whom = match (user, sender.token.as_deref()) {
        (Some(user), _) => flow::Sender::User(user),
        (None, Some(token)) => flow::Sender::Token(token),
        (None, None) => flow::Sender::Anonymous,
    };
    let shares = may.join || may.sync || may.feed;
    let flow = FlowKey::of(as_whom, info);
    // Held back by `terminate.auto_shed`: a named sender's request of a troubled level it
    // runs away in, unless a rule already turns it away, it is an upgrade (served whole, not
    // counted in a level) or it is in the reserve.
    let auto = cx.mode.auto_shed();
    let auto_on = cx.config().terminate.auto_shed.enabled;
    let held_back =
        (auto_on && !upgrading && auto.any() && !rule.as_ref().is_some_and(|r| r.rejects()))
            .then(|| {
                let level = cx.upstreams.flows.level_of(flow)?;
                let key = match (&cx.client.identity, &sender.named) {
                    (Some(id), _) => Costs::sender_key(SenderKind::Certificate, &id.user),
                    (None, Some(named)) => Costs::sender_key(SenderKind::Token, &named.user),
                    (None, None) => return None,
                };
                if in_reserve(&facts) {
                    return None;
                }
                let retry_after = cx.config().terminate.auto_shed.retry_after;
                auto.turns_away(&level, &key, retry_after)
            })
            .flatten();
    Classified {
        class: info.class,
        rule,
        shed_version,
        held_back,
        flow,
        origin: Origin::from(answerer(info, read.path())),
        may,
        attributes: shares.then(|| Attributes::of(info, read.path(), &read.query())),
    }
}

/// Phase 4: an upgrade, admitted under its rule, proxied whole.
async fn upgrade_admitted(
    cx: &Context<'_>,
    req: Request<Incoming>,
    classified: Classified,
    served: &mut Served,
) -> Response<ResponseBody> {
    let slot = match admit(cx, classified.rule.as_ref()) {
        Ok(slot) => slot,
        Err(resp) => return *resp,
    };
    let within = Within::rule(cx.upstreams.pool(), classified.rule);
    let at = (&*cx.gw, &*cx.generation);
    let (upstreams, client, class) = (&cx.upstreams, cx.client, classified.class);
    let resp = upgrade::proxy(at, upstreams, client, req, class, served, within).await;
    drop(slot);
    resp
}

/// Phase 5: a body read whole within its bounds (`serve` pays for this future only when
/// there is one).
async fn read_body(
    cx: &Context<'_>,
    parts: &Parts,
    body: Incoming,
) -> Result<(Bytes, Option<Held>), Refused> {
    let bounds = Bounds {
        config: &cx.config().terminate,
        connection: &cx.client.body_bytes,
        total: cx.mode.body_bytes(),
        gauge: &cx.gw.metrics().terminate.request_body_bytes_held,
    };
    match bodies::read(&parts.headers, body, bounds).await {
        Ok((body, held)) => Ok((body, Some(held))),
        Err(refusal) => Err(Box::new(refused::body(&cx.gw, refusal))),
    }
}

/// Phase 6: its place under its rule's limits (none without a rule), or the 429 that says
/// why not.
fn admit(cx: &Context<'_>, rule: Option<&Arc<Rule>>) -> Result<Option<Slot>, Refused> {
    match rule {
        Some(rule) => rule
            .admit(Instant::now())
            .map(Some)
            .map_err(|refusal| Box::new(refused::limited(&cx.gw, rule, refusal))),
        None => Ok(None),
    }
}

/// Phase 7: the request as the backends get it; a watch's bookmarks asked for upstream
/// whatever the client asked (those it did not ask for are kept from it), and its time left
/// sent upstream: it ends when the client's `timeoutSeconds` says, or as the apiserver would
/// end one without it, however many replicas it moves across.
fn shape(
    cx: &Context<'_>,
    parts: Parts,
    body: Bytes,
    held: Option<Held>,
    classified: &mut Classified,
) -> (Outgoing, Option<watch::Watch>) {
    let metrics = &cx.gw.metrics().terminate;
    let mut outgoing = Shaper::new(&cx.upstreams, metrics)
        .request(cx.client, parts, body)
        .in_flow(classified.flow)
        .answered_by(std::mem::take(&mut classified.origin));
    if let Some(held) = held {
        outgoing = outgoing.holding(held);
    }
    if classified.class.verb != Verb::Watch {
        return (outgoing, None);
    }
    let terminate = &cx.config().terminate;
    let asked = Asked::from_query(outgoing.client_query());
    let lasts = watch::lifetime(&asked, terminate.min_request_timeout);
    let outgoing = outgoing.with_query(&resumed_query(outgoing.client_query(), None, lasts));
    let watch = watch::Watch {
        asked,
        ends: lasts.map(|d| Instant::now() + d),
        slow_client: terminate.slow_watch_timeout,
    };
    (outgoing, Some(watch))
}

/// Phase 8: who the apiserver will take the request to be, when kubegate knows it valid now —
/// the certificate's user it vouches for, the user a review named the token's within its TTL
/// (`fresh`; `token_key` its hash), or no one — with what it asks: the one way to share another request's upstream answer
/// (`shared::Sharer` decides its access at the share). `None`: it shares nothing.
fn authorize<'a>(
    cx: &'a Context<'_>,
    outgoing: &Outgoing,
    attributes: Option<Attributes>,
    token_key: Option<TokenHash>,
    fresh: Option<Arc<UserInfo>>,
) -> Option<Sharer<'a>> {
    let attributes = attributes?;
    let user = match outgoing.kind() {
        Kind::WithIdentity => cx.client.identity.clone(),
        Kind::BearerToken => fresh,
        Kind::Anonymous => Some(anonymous()),
    }?;
    let config = &cx.config().terminate;
    Some(Sharer {
        mode: cx.mode,
        user,
        attributes: Arc::new(attributes),
        config: &config.access_review,
        token: token_key.map(|key| (key, &config.token_review)),
        arrived: cx.arrived,
    })
}

/// Where a request goes (phase 9): one decision, before anything is sent.
enum Route<'a> {
    /// A read identical reads may join, or that joins one on its way.
    Join(Joined<'a>),
    /// A watch-list whose initial events identical ones may join, then watched on (fed when
    /// it can be).
    Sync(Joined<'a>, watch::Watch, Option<Fed<'a>>),
    /// A watch fed from a shared one.
    Feed(Fed<'a>, watch::Watch),
    /// Sent as it is (a watch followed across backends).
    Forward(Option<watch::Watch>),
}

/// Phase 9: a request with a `sharer` joins, is joined or fed where its kind, the
/// configuration and its key allow; everything else is forwarded. An extension server may
/// answer by who asks (a list filtered per user): its answers never cross senders.
fn route<'a>(
    cx: &'a Context<'_>,
    outgoing: &Outgoing,
    may: MayShare,
    watch: Option<watch::Watch>,
    sharer: Option<Sharer<'a>>,
) -> Route<'a> {
    let Some(sharer) = sharer else {
        return Route::Forward(watch);
    };
    let terminate = &cx.config().terminate;
    let own_answers = outgoing
        .origin()
        .answered_by_apiserver(&cx.upstreams.extensions);
    let ids = &cx.upstreams.identity;
    let across_joins = (terminate.join_reads.across_senders && own_answers).then_some(ids);
    let across_feeds = (terminate.shared_watches.across_senders && own_answers).then_some(ids);
    let o = outgoing;
    let q = o.client_query();
    let head = key::WatchHead {
        kind: o.kind(),
        method: o.method(),
        uri: o.uri(),
        client_query: q,
        headers: o.headers(),
        across: across_feeds,
    };
    let feedable = |client_query: Option<&str>| {
        key::feedable(&key::WatchHead {
            client_query,
            ..head
        })
    };
    let joining = &terminate.join_reads;
    // A joined read's bounds: made only for a route that joins.
    let limits = || Limits {
        max_answer_bytes: joining.max_answer_bytes,
        max_held_bytes: joining.max_held_bytes,
        connection: Some(cx.client.shared_bytes.clone()),
        slow_client: terminate.slow_watch_timeout,
    };
    let Some(watch) = watch else {
        let joinable = may
            .join
            .then(|| {
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
        return match joinable {
            Some(read) => Route::Join(Joined::new(cx.mode, read, sharer, limits())),
            None => Route::Forward(None),
        };
    };
    let synced = may
        .sync
        .then(|| {
            key::watch_list(&key::WatchHead {
                across: across_joins,
                ..head
            })
        })
        .flatten();
    if let Some(read) = synced {
        // A follower watches on from where the lead's initial events ended: fed from a
        // shared watch, when they are on (its key is the watch's from any position).
        let continued = may
            .feed
            .then(|| feedable(Some(&resumed_query(q, Some("1"), None))))
            .flatten()
            .map(|f| Fed::new(cx.mode, f, sharer.clone(), &watch, terminate));
        let joined = Joined::new(cx.mode, read, sharer, limits());
        return Route::Sync(joined, watch, continued);
    }
    match may.feed.then(|| feedable(q)).flatten() {
        Some(f) => {
            let fed = Fed::new(cx.mode, f, sharer, &watch, terminate);
            Route::Feed(fed, watch)
        }
        None => Route::Forward(Some(watch)),
    }
}

/// Phase 10 for a route that shares another request's upstream answer (a forwarded one is
/// sent by `forward::send`): boxed, so that a request that shares nothing pays nothing for
/// these futures.
fn share<'a>(
    route: Route<'a>,
    sending: Sending,
    served: &'a mut Served,
) -> Pin<Box<dyn Future<Output = Response<ResponseBody>> + Send + 'a>> {
    match route {
        Route::Join(joined) => Box::pin(shared::send_joined(sending, served, joined)),
        Route::Sync(joined, watch, continued) => Box::pin(shared::send_synced(
            sending, served, joined, watch, continued,
        )),
        Route::Feed(fed, watch) => Box::pin(async move {
            match shared::send_fed(sending, served, fed).await {
                Ok(resp) => resp,
                // No feed can serve its position: a watch of its own.
                Err(unfed) => forward::send(unfed, served, Some(watch), None).await,
            }
        }),
        Route::Forward(watch) => Box::pin(forward::send(sending, served, watch, None)),
    }
}

/// Phase 11: an apiserver's own 401 for a token kubegate had named (its authentication
/// filter's, matched exactly: `dispatch::Unauthenticated`; never a pod's, a webhook's or an
/// extension server's): the token was revoked or has expired, so its name is forgotten at once
/// rather than kept for the rest of its TTL, and its requests leave every join and shared
/// watch.
fn respond(cx: &Context<'_>, token: Option<TokenHash>, resp: &Response<ResponseBody>) {
    let refused = resp.extensions().get::<Unauthenticated>().is_some();
    if let Some(key) = token.filter(|_| refused) {
        let config = &cx.config().terminate.token_review;
        cx.mode.tokens().forget(&key, config);
    }
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
