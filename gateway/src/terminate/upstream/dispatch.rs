//! Where a terminate-mode request goes and what comes back: the request is placed on a
//! backend by requests in flight (`net::place`); a stream is taken on one of that backend's
//! HTTP/2 connections and the request sent; the response headers come back, or the attempt
//! fails and `may_retry` decides whether another backend is tried. Failures the apiserver
//! provably did not process go to another backend (any verb), as do idempotent reads that
//! broke before response headers; a shutting-down apiserver's own 429/503 counts as
//! unprocessed. Nothing is retried once its response headers were forwarded. While the
//! replicas serve different group-versions, those that do not serve the request's are left
//! out (`skew`). A read one replica cannot serve for a reason of its own — its watch cache
//! initializing (429) or behind (504), its storage failing (500 from the etcd client, or any
//! 5xx while its probe fails) — is tried on another; when none answers better, the client gets
//! the last such answer. So is a request the replica's priority and fairness rejected before
//! any handler ran (the filter's own 429), within a retry budget (`flow`); the client then
//! gets the rejection asking it to wait least. Each of these answers is matched exactly, and
//! only where it can be the apiserver's own (`signals`): any other answer — a handler's 429
//! after processing, a proxied pod's 503 — reaches the client once, as it came.

use crate::net::hold::{HeldBy, StorageOutage};
use crate::net::{place, Attempt, Unplaced, PASSIVE_EJECTION};
use crate::state::{Backend, Gateway, Generation, Pool, Stream};
use crate::telemetry::{AttemptFailure, RequestFailure};
use crate::terminate::exchange::body::{read_small, ResponseBody};
use crate::terminate::exchange::h2client::{self, ResponseStream};
use crate::terminate::exchange::in_flight::{InFlight, LevelTally};
use crate::terminate::exchange::status::unavailable;
use crate::terminate::rules::Rule;
use crate::terminate::upstream::connect::{open_stream, stream_to};
use crate::terminate::upstream::flow;
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::retry::{may_retry, reads_storage};
use crate::terminate::upstream::signals::{self, Said};
use crate::terminate::upstream::skew;
use crate::terminate::upstream::upstreams::Upstreams;
use http::{Response, StatusCode};
use kubegate_config::{BalancePolicy, Fallback};
use kubegate_wire::classify::RequestClass;
use kubegate_wire::go_duration;
use kubegate_wire::target::Query;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What an attempt that reached a backend brought back.
pub enum Answer {
    /// Response headers, the body still to come, and what the request holds meanwhile.
    Streaming {
        /// The backend's response.
        resp: Response<ResponseStream>,
        /// The request's registration on the backend.
        in_flight: InFlight,
        /// Its stream slot.
        stream: Stream,
    },
    /// A whole response (a 429/503 read to tell a shutting-down apiserver from a busy one).
    Whole(Response<ResponseBody>),
}

/// Marks an answer that is the apiserver's own 401 for the request's credentials
/// (`signals::Said::Unauthenticated`): `handle` forgets a token's name on it, and nothing else.
#[derive(Debug, Clone, Copy)]
pub struct Unauthenticated;

/// An attempt that failed, and the replica's own answer when it gave one that another
/// replica may better (what the client gets if none does).
struct Failed {
    failure: AttemptFailure,
    answer: Option<Response<ResponseBody>>,
}

impl From<AttemptFailure> for Failed {
    fn from(failure: AttemptFailure) -> Failed {
        Failed {
            failure,
            answer: None,
        }
    }
}

/// Sends `outgoing` to backends not in `tried` until one answers or the rules forbid another
/// try: the backend that answered and its answer. `NoBackend`: no backend could be picked;
/// `Failed`: the last attempt's failure. Its waits (`net::hold`) count from `holding_since`
/// over every dispatch of one request: for a ready replica, `terminate.hold_when_none_ready`
/// in all; through a storage outage, `terminate.hold_reads_when_storage_fails`.
pub async fn dispatch(
    (gw, generation): (&Gateway, &Generation),
    upstreams: &Upstreams,
    outgoing: &Outgoing,
    class: RequestClass,
    tried: &mut Vec<SocketAddr>,
    holding_since: Instant,
) -> Result<(Arc<Backend>, Answer), Unplaced<AttemptFailure>> {
    let mut forward = Forward {
        gw,
        generation,
        upstreams,
        outgoing,
        class,
        kept: None,
        hold_ends: holding_since + generation.config.terminate.hold_when_none_ready,
        level: None,
        crowded: Vec::new(),
    };
    let first = tried.len();
    let mut outage: Option<StorageOutage> = None;
    loop {
        let placed = place_once(&mut forward, tried).await;
        // Every replica tried failed the read on its storage: held, and asked of them all
        // again, while the outage lasts (`hold::StorageOutage`).
        if matches!(placed, Err(Unplaced::Failed(AttemptFailure::StorageFailed)))
            && reads_storage(&class)
        {
            if outage.is_none() {
                let held_by = HeldBy {
                    cluster: &upstreams.cluster,
                    connection: outgoing.connection_holds(),
                };
                let waits = forward.client_waits();
                outage = StorageOutage::begin(gw, generation, held_by, holding_since, waits);
            }
            if let Some(held) = outage.as_mut() {
                if Box::pin(held.pause()).await {
                    tried.truncate(first);
                    forward.kept = None;
                    continue;
                }
            }
        }
        return match (placed, forward.kept) {
            // No replica did better than one that could not serve the read: its own answer.
            (Err(Unplaced::Failed(_)), Some((backend, answer))) => {
                gw.metrics().terminate.count_request(
                    &backend.info().name,
                    class.verb,
                    answer.status(),
                );
                Ok((backend, Answer::Whole(answer)))
            }
            (placed, _) => placed,
        };
    }
}

/// One placement of `forward`'s request on a backend not in `tried`.
async fn place_once(
    forward: &mut Forward<'_>,
    tried: &mut Vec<SocketAddr>,
) -> Result<(Arc<Backend>, Answer), Unplaced<AttemptFailure>> {
    let (gw, generation) = (forward.gw, forward.generation);
    let (upstreams, outgoing) = (forward.upstreams, forward.outgoing);
    // Replicas that do not serve what the request wants are placed as tried, and forgotten
    // again once it is placed: they were never tried.
    let before = tried.len();
    let pool = upstreams.pool();
    let routing = generation.config.terminate.version_skew.routing;
    let mut steered = skew::steer((gw, routing), upstreams, outgoing.uri(), tried);
    // So are replicas whose flow control is rejecting the request's priority level, while
    // another is not; the first attempt also passes over those holding more of the level's
    // requests than another (queueing them).
    upstreams.flows.sent();
    forward.level = upstreams.flows.level_of(outgoing.flow());
    forward.crowded.clear();
    if let Some(level) = &forward.level {
        let steering = upstreams.flows.steer(pool, level, tried);
        if !steering.rejecting.is_empty() || !steering.crowded.is_empty() {
            gw.metrics().terminate.apf_steered(level);
        }
        steered += steering.rejecting.len();
        tried.extend_from_slice(&steering.rejecting);
        forward.crowded = steering.crowded;
    }
    // A continue page's first attempt goes to the replica that served its first page (its
    // watch cache holds the page's revision), unless that replica is out or queues its level.
    if let Some(holder) = outgoing.preferred() {
        if !tried.contains(&holder) && !forward.crowded.contains(&holder) {
            forward.crowded = pool
                .backends()
                .iter()
                .map(|b| b.address)
                .filter(|a| *a != holder)
                .collect();
        }
    }
    let placed = place(gw, generation, &upstreams.cluster, forward, tried).await;
    tried.drain(before..before + steered);
    placed
}

/// The backends a request may go to under its `dispatch` rule: the others are placed as
/// already tried, so that the balancer picks among the rule's own; when none of those is
/// ready, the rule's `fallback` decides. Requests and upgrades are placed the same way.
pub struct Within {
    rule: Option<Arc<Rule>>,
    /// Backends placed as tried: those outside the rule, then those tried.
    pub tried: Vec<SocketAddr>,
    outside: usize,
}

/// A rule whose backends are not ready and whose `fallback` is `none` refused the request.
pub struct RuleRefused(pub Arc<Rule>);

impl RuleRefused {
    /// The client's answer: 503, naming the rule.
    pub fn answer(self, gw: &Gateway) -> Response<ResponseBody> {
        gw.metrics()
            .terminate
            .request_failed(RequestFailure::NoRuleBackend);
        unavailable(&format!(
            "none of the apiservers of kubegate's dispatch rule {:?} is ready",
            self.0.name
        ))
    }
}

impl Within {
    /// Within `rule`'s backends among `pool`'s (all, without a rule or with a rule that
    /// names none).
    pub fn rule(pool: &Pool, rule: Option<Arc<Rule>>) -> Within {
        let tried: Vec<SocketAddr> = match &rule {
            Some(r) if !r.backends.is_empty() => pool
                .backends()
                .iter()
                .filter(|b| !r.backends.contains(&b.info().name))
                .map(|b| b.address)
                .collect(),
            _ => Vec::new(),
        };
        Within {
            outside: tried.len(),
            rule,
            tried,
        }
    }

    /// Replicas tried, those outside the rule not counted.
    pub fn tries(&self) -> usize {
        self.tried.len() - self.outside
    }

    /// A placement within the rule found no backend: `Ok(true)` to place it again over the
    /// whole pool (the rule's `fallback: all`, counted), `Ok(false)` when there is nothing
    /// more to try (no rule, or no backend outside it), `Err` the rule's refusal (`fallback:
    /// none`).
    pub fn fall_back(&mut self) -> Result<bool, RuleRefused> {
        let Some(rule) = self.rule.as_ref().filter(|_| self.outside > 0) else {
            return Ok(false);
        };
        if rule.fallback == Fallback::None {
            return Err(RuleRefused(rule.clone()));
        }
        rule.fell_back();
        self.tried.clear();
        self.outside = 0;
        Ok(true)
    }
}

/// One request's attempts, as the placing loop runs them.
struct Forward<'a> {
    gw: &'a Gateway,
    /// The request's generation: the settings it is sent under.
    generation: &'a Generation,
    upstreams: &'a Upstreams,
    outgoing: &'a Outgoing,
    class: RequestClass,
    /// The last answer of a replica that could not serve the read, and that replica.
    kept: Option<(Arc<Backend>, Response<ResponseBody>)>,
    /// When its waits end, however many (`net::hold`).
    hold_ends: Instant,
    /// Its priority level, as far as kubegate learned it.
    level: Option<Arc<str>>,
    /// Replicas its first attempt passes over: those holding more of its level's requests
    /// than another, or (a continue page) every one but its first page's replica.
    crowded: Vec<SocketAddr>,
}

impl Attempt for Forward<'_> {
    type Output = Answer;
    type Failure = AttemptFailure;

    fn load(&self, policy: BalancePolicy) -> fn(&Backend) -> u64 {
        match (self.class.long_running, policy) {
            // A watch (or log stream) costs its replica what it holds for its whole life, not
            // how busy the replica is now: spread by how many each holds. Placed by requests
            // in flight, a rolling restart's resumed watches all went to the replica that had
            // come back first (10,000 watches ended 9,797 / 203 / 0; docs/failover.md, Scale).
            (Some(_), BalancePolicy::LeastConnections | BalancePolicy::PowerOfTwo) => {
                |b| b.planes().terminate.long_running() as u64
            }
            _ => load_for(policy),
        }
    }

    async fn attempt(&mut self, backend: &Arc<Backend>) -> Result<Answer, AttemptFailure> {
        let request = (self.class, self.level.as_ref());
        let at = (self.gw, self.generation);
        let failed = match attempt(at, self.upstreams, backend, self.outgoing, request).await {
            Ok(answer) => return Ok(answer),
            Err(failed) => failed,
        };
        let failure = failed.failure;
        tracing::debug!(backend = %backend.info().name, failure = failure.as_str(), verb = self.class.verb.as_str(), "request attempt failed");
        if let Some(answer) = failed.answer {
            // Of several rejections, the client gets the one asking it to wait least.
            let waits_longer = self.kept.as_ref().is_some_and(|(_, kept)| {
                failure == AttemptFailure::Throttled
                    && kept.status() == StatusCode::TOO_MANY_REQUESTS
                    && flow::retry_after(answer.headers()) >= flow::retry_after(kept.headers())
            });
            if !waits_longer {
                self.kept = Some((backend.clone(), answer));
            }
        }
        Err(failure)
    }

    fn avoid_first(&self) -> &[SocketAddr] {
        &self.crowded
    }

    fn may_try_another(&self, failure: AttemptFailure) -> bool {
        if failure == AttemptFailure::Throttled && !self.upstreams.flows.may_retry() {
            self.gw.metrics().terminate.apf_over_budget.inc();
            return false;
        }
        may_retry(failure, &self.class)
    }

    fn retrying(&mut self, failure: AttemptFailure) {
        self.gw.metrics().terminate.request_retry(failure);
    }

    /// What is left of the request's time to wait for a ready replica, and of its client's.
    fn waits_at_most(&self) -> Option<Duration> {
        let left = self.hold_ends.saturating_duration_since(Instant::now());
        Some(self.client_waits().map_or(left, |c| c.min(left)))
    }

    fn connection_holds(&self) -> Option<&AtomicUsize> {
        self.outgoing.connection_holds()
    }
}

impl Forward<'_> {
    /// The request's `?timeout=`, as the apiserver reads it (a watch's is its own lifetime,
    /// not how long its client waits for the first answer).
    fn client_waits(&self) -> Option<Duration> {
        if self.class.long_running.is_some() {
            return None;
        }
        let query = Query::new(self.outgoing.uri().query());
        go_duration::parse(&query.text("timeout")?).filter(|d| !d.is_zero())
    }
}

/// The load signal of a terminate-mode request that is not long-running: `least-connections`
/// compares requests in flight (ties rotate, so equal replicas share requests evenly);
/// `power-of-two` compares two replicas by requests in flight weighted by their latency, so a
/// slow replica gets less.
pub fn load_for(policy: BalancePolicy) -> fn(&Backend) -> u64 {
    match policy {
        BalancePolicy::PowerOfTwo => |b| b.planes().terminate.load(),
        BalancePolicy::LeastConnections | BalancePolicy::RoundRobin => {
            |b| b.planes().terminate.busy() as u64
        }
    }
}

/// One attempt on `backend` alone, whatever its state (a watch freshened on the replica it
/// leaves): its answer, or `None` when it gave none worth reading.
pub async fn attempt_on(
    at: (&Gateway, &Generation),
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    outgoing: &Outgoing,
    class: RequestClass,
) -> Option<Answer> {
    attempt(at, upstreams, backend, outgoing, (class, None))
        .await
        .ok()
}

/// One attempt on `backend`.
async fn attempt(
    (gw, generation): (&Gateway, &Generation),
    upstreams: &Upstreams,
    backend: &Arc<Backend>,
    outgoing: &Outgoing,
    (class, level): (RequestClass, Option<&Arc<str>>),
) -> Result<Answer, Failed> {
    let config = &generation.config;
    let kind = outgoing.kind();
    // Boxed, as every rarely taken await: a request's future is as large as its largest one,
    // and moved whole.
    let mut stream = match open_stream(config, upstreams, backend, kind)? {
        Some(stream) => stream,
        None => Box::pin(stream_to((gw, config), upstreams, backend, kind)).await?,
    };
    let payer = outgoing.payer();
    // The replica's levels, where it is known to flow control under one.
    let levels = level.map(|_| upstreams.flows.replica(backend.address));
    let tally = level.zip(levels.clone().map(|l| l as Arc<dyn LevelTally>));
    let mut in_flight = InFlight::begin(backend, class.long_running.is_some(), tally, payer);
    let mut sent = Instant::now();
    let mut refused = false;
    let resp = loop {
        let failure = match h2client::send(stream.sender(), outgoing.head(), outgoing.body()).await
        {
            Ok(resp) => break resp,
            Err(failure) => failure,
        };
        // The connection takes no more streams, and did not process this one: once more on
        // another connection to the same backend (an apiserver sends GOAWAY after every
        // anonymous request over HTTP/2), unless it is known to be shutting down; then
        // another backend.
        let connection_refused = matches!(failure, AttemptFailure::Unsent | AttemptFailure::GoAway);
        if connection_refused {
            stream.refused();
        }
        if !connection_refused || backend.shutting_down() || std::mem::replace(&mut refused, true) {
            return Err(failure.into());
        }
        stream = Box::pin(stream_to((gw, config), upstreams, backend, kind)).await?;
        sent = Instant::now();
        in_flight.sent_again();
    };
    let upstream = &backend.planes().terminate;
    let code = resp.status();
    // Only the apiserver's own answers say anything of the replica or of the request's level:
    // a workload's or an extension server's bytes are theirs (`signals::Origin`).
    let own = outgoing
        .origin()
        .answered_by_apiserver(&upstreams.extensions);
    if class.long_running.is_none() {
        let took = sent.elapsed();
        upstream.observe_latency(took);
        if let (Some(level), Some(levels), true) = (level, &levels, own) {
            levels.observed(level, took);
        }
        gw.metrics()
            .terminate
            .observe_request_duration(class.verb, took);
    }
    let level = own
        .then(|| upstreams.flows.learn(outgoing.flow(), resp.headers()))
        .flatten()
        .map(|(level, first)| {
            if first {
                // A dashboard's rate of rejections reads 0 for each replica from now on,
                // rather than nothing until the first rejection.
                for b in upstreams.pool().backends().iter() {
                    gw.metrics()
                        .terminate
                        .apf_level_seen(&b.info().name, &level);
                }
            }
            level
        });
    let reads = reads_storage(&class);
    // A read's 5xx while the replica's own probe fails is its storage's, whatever it says.
    let failing = reads && code.is_server_error() && backend.failures().since.is_some();
    let answer = if own && (signals::worth_reading(code, resp.headers()) || failing) {
        // Read whole to tell which of the apiserver's own answers it is, if any.
        let (parts, body) = resp.into_parts();
        let body = Box::pin(read_small(body))
            .await
            .map_err(|_| AttemptFailure::Reset)?;
        in_flight.carried(body.len());
        let mut unauthenticated = false;
        let failure = match signals::said(code, &parts.headers, &body) {
            Some(Said::ShuttingDown) => {
                // It comes back as whatever it is restarted as.
                upstreams.served.of(backend.address).forget();
                return Err(AttemptFailure::ShuttingDown.into());
            }
            Some(Said::NoHandler)
                if skew::not_served(config, upstreams, backend, outgoing.uri()) =>
            {
                return Err(AttemptFailure::NotServed.into());
            }
            Some(Said::Initializing) => Some(AttemptFailure::Initializing),
            Some(Said::Rejected) => {
                if let Some(payer) = payer {
                    payer.rejected(level.as_deref());
                }
                // Rejected before any handler ran. Under priority and fairness (its answer
                // names the level) this replica is left out for the level's requests until
                // its Retry-After has passed; max-in-flight names none.
                if let Some(level) = &level {
                    let name = &backend.info().name;
                    tracing::debug!(backend = %name, level = %level, "priority and fairness rejected a request");
                    upstreams
                        .flows
                        .replica(backend.address)
                        .rejected(level, flow::retry_after(&parts.headers));
                    gw.metrics().terminate.apf_rejected(name, level);
                }
                Some(AttemptFailure::Throttled)
            }
            Some(Said::Unauthenticated) => {
                // The client's token (if it has one) was refused: its name is forgotten, and
                // its shared answers end (`handle`).
                unauthenticated = true;
                None
            }
            Some(Said::CacheBehind) if reads => Some(AttemptFailure::CacheBehind),
            Some(Said::StorageFailed) if reads => Some(AttemptFailure::StorageFailed),
            _ if failing => Some(AttemptFailure::StorageFailed),
            _ => None,
        };
        if failure == Some(AttemptFailure::StorageFailed) {
            // A passive signal: out of new work until a probe (asked for now) says otherwise,
            // rather than until the next probe finds its etcd failing.
            backend.failed_passively(PASSIVE_EJECTION);
        }
        let mut answer = Response::from_parts(parts, ResponseBody::full(body));
        if let Some(failure) = failure {
            return Err(Failed {
                failure,
                answer: Some(answer),
            });
        }
        if unauthenticated {
            answer.extensions_mut().insert(Unauthenticated);
        }
        Answer::Whole(answer)
    } else {
        if own && reads && code.is_success() {
            // Reads held through a storage outage of the cluster are asked again now.
            upstreams.cluster.holds().storage_answered();
        }
        Answer::Streaming {
            resp,
            in_flight,
            stream,
        }
    };
    gw.metrics()
        .terminate
        .count_request(&backend.info().name, class.verb, code);
    Ok(answer)
}
